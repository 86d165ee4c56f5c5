/*!
 * \file flit_network.h
 * \brief Cycle-level wormhole network: routers with virtual channels and credit flow control.
 *
 * Every directed link ends in an input unit of its downstream router; every node also has an
 * injection input unit fed by an unbounded source queue (one flit per cycle), and an ejection
 * port. An input unit has `num_vcs` virtual channels. A head flit that reaches the front of its
 * VC spends `routing_delay` cycles in route computation (routes are precomputed link lists),
 * then requests a free VC of its output link in VC allocation (`vc_alloc_delay` cycles once
 * granted), then requests the switch (`switch_alloc_delay`), crosses it
 * (`switch_traversal_delay`) and the link (the link's latency). Body flits follow the head's VC,
 * needing only a switch grant. A switch request needs a credit (a free slot in the downstream
 * VC); the credit comes back `max(1, link latency)` cycles after the flit leaves the downstream
 * buffer. An output VC is released when the tail flit leaves for it. A new packet waits for an
 * empty injection VC.
 *
 * Allocation (Allocator): separable input-first with round-robin arbiters, as BookSim's
 * `separable_input_first`. VC allocation: every waiting head picks one free VC of its output
 * link (its own arbiter), then every output VC grants one of the heads that picked it. Switch
 * allocation: every input unit picks one of its requesting VCs, then every output port grants
 * one of the units that picked it. An arbiter's pointer moves past the winner only on a grant.
 * Each input unit sends, and each output port takes, at most one flit per cycle.
 *
 * Links: a flit of b bytes occupies a link of B bytes/cycle for b / B cycles. The link keeps
 * the (fractional) time it is free again and may start a flit in any cycle that ends after it,
 * so over a busy period it moves exactly B bytes/cycle; a flit is in the downstream buffer from
 * the cycle its last byte crossed. The flit must be at least as wide as the
 * widest link (FlitParams::flit_bytes). The VCs at the end of a link of latency L > 1 hold
 * `ceil(2 (L - 1) min(1, B / flit_bytes))` flits more than `vc_buffer_flits`: the flits its
 * longer credit round trip keeps in flight, so a long link is not throttled by its length.
 *
 * Zero-load latency of a packet of P flits over H links (creation to tail ejection, both
 * cycles counted): (H + 1) * (routing + vc_alloc + switch_alloc + switch_traversal)
 * + sum of link latencies + P - 1, when every link moves one flit per cycle.
 *
 * The simulation is event-driven inside each cycle: a VC is looked at only in cycles in which
 * something it waits for can have changed (its head's route computation ends, an output VC of
 * its link is released, its flit arrives, its pipeline stage ends, its link is free, its credit
 * returns; a VC that lost an arbitration tries again in the next cycle), and cycles in which
 * nothing is due (NextBusyCycle) can be skipped, with results bit-identical to stepping them
 * (the task-graph adapter's `skip_dead_cycles = false` steps every cycle, for checking that).
 */
#ifndef TVM_CHIPLET_RUNTIME_CPP_FLIT_NETWORK_H_
#define TVM_CHIPLET_RUNTIME_CPP_FLIT_NETWORK_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "network_model.h"

namespace tvm_chiplet {
namespace sim {

/*! \brief VC and switch allocator of the routers. */
enum class Allocator : int64_t {
  /*! \brief Separable input-first, round-robin arbiters (BookSim's separable_input_first). */
  kSeparableInputFirst = 0,
  /*! \brief Input units in a rotating order each take their first VC whose output is still free
   *  (a maximal matching); a head takes the free output VC with the most credits. */
  kGreedy = 1,
};

/*! \brief Router parameters; see runtime/noc.py FlitParams for the documented defaults. */
struct FlitParams {
  int64_t num_vcs = 4;
  int64_t vc_buffer_flits = 8;
  int64_t routing_delay = 1;
  int64_t vc_alloc_delay = 1;
  int64_t switch_alloc_delay = 1;
  int64_t switch_traversal_delay = 1;
  int64_t packet_flits = 4;
  int64_t deadlock_cycles = 10000;
  Allocator allocator = Allocator::kSeparableInputFirst;
  double flit_bytes = 16.0;  // as resolved by the caller: at least the widest link's bandwidth

  /*! \brief Number of int64 values FromArray reads. */
  static constexpr int64_t kIntCount = 9;
  /*! \brief Read the integer fields in declaration order and check them. */
  static FlitParams FromArray(const int64_t* values, double flit_bytes);
};

/*! \brief Directed links between routers. */
struct FlitLinks {
  int64_t num_nodes = 0;
  std::vector<int64_t> src;        // router the link leaves
  std::vector<int64_t> dst;        // router the link enters
  std::vector<int64_t> latency;    // cycles, >= 0
  std::vector<double> bandwidth;   // bytes per cycle, in (0, flit_bytes]
};

/*! \brief A packet whose tail flit left the network. */
struct Ejection {
  int64_t tag;       // the caller's label of the packet's message
  int64_t created;   // cycle the packet's message entered its source queue
  int64_t injected;  // cycle the packet's head entered the injection buffer
  int64_t cycle;     // cycle in which the tail flit was ejected
};

/*! \brief The router network, advanced one cycle at a time. */
class FlitCore {
 public:
  /*! \throws ValueError when a link is wider than `params.flit_bytes`. */
  FlitCore(FlitLinks links, const FlitParams& params);

  /*!
   * \brief Queue a message of `flits` flits at router `src`, to be injected from cycle
   *  `created` on as packets of `packet_flits` flits (the last one shorter if need be). Every
   *  flit carries `flit_bytes` except the message's last, which carries `last_flit_bytes`.
   *  `route` (the links in travel order) must outlive the message.
   */
  void AddMessage(int64_t src, int64_t dst, const int64_t* route, int64_t hops, int64_t flits,
                  double last_flit_bytes, int64_t created, int64_t tag);
  /*! \brief Simulate cycle `Cycle()`, append the packets whose tail was ejected; returns the
   *  number of flits ejected in that cycle. Throws RuntimeError on a deadlock. */
  int64_t Step(std::vector<Ejection>* ejected);
  /*! \brief Nothing queued, buffered, ejecting or crediting. */
  bool Idle() const;
  /*! \brief Jump an idle network forward to `cycle`. */
  void SkipTo(int64_t cycle);
  /*!
   * \brief Earliest cycle >= Cycle() in which Step could do anything but return credits
   *  (inject, allocate, send or eject a flit); kNever when nothing is pending on a time (an
   *  idle network, or every flit blocked: a deadlock). Every cycle before it is dead.
   */
  int64_t NextBusyCycle() const;
  /*!
   * \brief Jump over dead cycles to min(NextBusyCycle(), `limit`), returning their credits as
   *  Step would. Throws the deadlock error Step would throw in a skipped cycle. Results are
   *  bit-identical to stepping the skipped cycles.
   */
  void SkipDeadCycles(int64_t limit);
  /*! \brief Last cycle in which a flit was injected or crossed a switch. */
  int64_t LastMove() const { return last_move_; }
  int64_t Cycle() const { return cycle_; }
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  /*! \brief Packets not yet ejected (queued included), counted from where their tails are. */
  int64_t CountPacketsInFlight() const;
  /*! \brief Bytes that crossed each link. */
  const std::vector<double>& LinkBytes() const { return link_bytes_; }
  const FlitLinks& Links() const { return links_; }

 private:
  struct Flit {
    int64_t arrival;  // cycle the flit is in its buffer
    int32_t packet;   // slot in packets_
    int32_t hop;      // index in the route of the link the flit takes next
    bool head;
    bool tail;
  };
  struct Packet {
    const int64_t* route;
    int64_t hops;
    int64_t dst;
    int64_t flits;
    double tail_bytes;  // bytes of the tail flit (the others carry flit_bytes)
    int64_t created;
    int64_t injected;
    int64_t tag;
  };
  struct Message {  // a source queue entry: the packets not yet started
    const int64_t* route;
    int64_t hops;
    int64_t dst;
    int64_t flits_left;
    double last_flit_bytes;
    int64_t created;
    int64_t tag;
  };
  struct InputVc {
    int64_t base = 0;   // first slot of the ring in flits_
    int32_t depth = 0;  // ring size in flits
    int32_t start = 0;
    int32_t count = 0;
    int32_t out_port = -1;  // output of the front packet after VC allocation, -1 before
    int32_t out_vc = 0;
    int64_t front_arrival = 0;  // arrival of the front flit (when count > 0)
    int64_t head_ready = 0;  // cycle the front head may request a VC
    int64_t sa_ready = 0;    // cycle the front packet may request the switch
  };
  struct Ejecting {
    int64_t due;
    int32_t packet;
    bool tail;
  };
  /*! \brief One round of arbiters: per slot, the candidate at the smallest distance. */
  struct Arbitration {
    std::vector<int32_t> best;
    std::vector<int64_t> distance;
    std::vector<int64_t> round;  // round in which `best` was written
    std::vector<int32_t> slots;  // slots offered to in the current round
    void Resize(int64_t size);
    void Offer(int64_t round_id, int32_t slot, int32_t candidate, int64_t candidate_distance);
  };

  int64_t NumUnits() const { return num_links_ + links_.num_nodes; }
  /*! \brief First set bit of `bits` in [from, end), or `end`. */
  static int64_t NextSet(const std::vector<uint64_t>& bits, int64_t from, int64_t end) {
    while (from < end) {
      uint64_t word = bits[from >> 6] >> (from & 63);
      if (word != 0) return std::min(end, from + static_cast<int64_t>(__builtin_ctzll(word)));
      from = (from | 63) + 1;
    }
    return end;
  }
  static void SetBit(std::vector<uint64_t>* bits, int64_t i) { (*bits)[i >> 6] |= 1ULL << (i & 63); }
  static void ClearBit(std::vector<uint64_t>* bits, int64_t i) {
    (*bits)[i >> 6] &= ~(1ULL << (i & 63));
  }
  Flit& Front(const InputVc& vc) { return flits_[vc.base + vc.start]; }
  const Flit& Front(const InputVc& vc) const { return flits_[vc.base + vc.start]; }
  int64_t NextOutput(const Flit& flit) const;
  /*! \brief The front flit of VC `index` may cross the switch in this cycle. */
  bool SwitchReady(int64_t index) const;
  double FlitBytes(const Flit& flit) const;
  void Push(int64_t index, const Flit& flit);
  void Pop(int64_t index);
  void ApplyCredits(int64_t cycle);
  /*! \brief Take VC `index` out of `bits` until cycle `due` (> Cycle()). */
  void Sleep(int64_t index, int64_t due, int64_t kind);
  void WakeDue(int64_t cycle);
  void Inject(int64_t node);
  int32_t StartPacket(int64_t node);
  void GrantVc(int64_t index, int64_t out, int64_t out_vc);
  /*! \brief The head of VC `index` found every VC of link `out` taken. */
  void WaitForVc(int64_t index, int64_t out);
  void AllocateVcsSeparable();
  void AllocateSwitchSeparable();
  void AllocateVcsGreedy();
  void AllocateSwitchGreedy();
  void Send(int64_t index);
  void LinkSend(int64_t link, double bytes);
  [[noreturn]] void ReportDeadlock() const;

  FlitLinks links_;
  FlitParams params_;
  int64_t num_links_;
  int64_t num_vcs_;
  int64_t cycle_ = 0;
  int64_t last_move_ = 0;
  int64_t deadlock_limit_;
  int64_t to_switch_end_;  // switch_alloc_delay + switch_traversal_delay

  std::vector<Packet> packets_;
  std::vector<int32_t> free_packets_;
  std::vector<Flit> flits_;   // the VCs' rings
  std::vector<InputVc> vcs_;  // [units * num_vcs]
  std::vector<int32_t> vc_unit_;  // [units * num_vcs] the unit of a VC (no division per flit)

  // Arbiter pointers: switch allocation (input unit over its VCs, output port over units) and
  // VC allocation (input VC over output VCs, output VC over input VCs).
  std::vector<int32_t> unit_rr_;    // [units]
  std::vector<int32_t> out_rr_;     // [links + nodes]
  std::vector<int32_t> vc_rr_;      // [units * num_vcs]
  std::vector<int32_t> out_vc_rr_;  // [links * num_vcs]

  std::vector<int32_t> out_vc_owner_;  // [links * num_vcs] input VC holding it, -1 when free
  std::vector<int64_t> credits_;       // [links * num_vcs]
  std::vector<double> link_free_at_;   // [links] time the link has sent its last flit
  std::vector<int64_t> link_ready_;    // [links] first cycle it may start a flit
  std::vector<int64_t> link_period_start_;  // [links] first cycle of the busy period
  std::vector<double> link_period_bytes_;   // [links] bytes sent in the busy period
  std::vector<double> link_bytes_;          // [links]
  std::vector<std::vector<int32_t>> credit_wheel_;  // by due cycle & credit_mask_
  int64_t credit_mask_ = 0;
  int64_t credits_pending_ = 0;
  std::deque<Ejecting> ejecting_;

  std::vector<std::deque<Message>> source_queue_;  // per node
  std::vector<int32_t> inject_packet_;  // per node: packet being injected, -1 between packets
  std::vector<int64_t> inject_flit_;    // per node: its next flit
  std::vector<int64_t> inject_vc_;      // per node: VC receiving it
  std::vector<int32_t> inject_rr_;      // per node: injection VC to try first
  int64_t queued_packets_ = 0;          // packets whose tail is not yet injected
  int64_t buffered_flits_ = 0;
  // Bit sets that let a cycle visit only the busy VCs, units and sources, in index order.
  std::vector<uint64_t> vc_nonempty_;     // [units * num_vcs]
  // [units * num_vcs] non-empty with an output VC and not known to be unable to send: a VC
  // that cannot is put to sleep until the cycle it may (wake_wheel_) or until its credit
  // returns (credit_waiter_).
  std::vector<uint64_t> vc_allocated_;
  std::vector<int32_t> credit_waiter_;  // [links * num_vcs] owner waiting for a credit, or -1
  // Sleeping VCs by wake cycle & wake_mask_: index * 2 + 0 for vc_allocated_, + 1 for
  // head_waiting_ (a head before its route is computed).
  std::vector<std::vector<int32_t>> wake_wheel_;
  int64_t wake_mask_ = 0;
  // [units * num_vcs] a head at the front without an output VC, unless it found every VC of
  // its output taken: then it waits in vc_waiters_ until one is released.
  std::vector<uint64_t> head_waiting_;
  std::vector<std::vector<int32_t>> vc_waiters_;  // [links]
  std::vector<uint64_t> unit_nonempty_;   // [units]
  std::vector<int32_t> unit_flits_;       // [units] flits buffered in the unit
  std::vector<uint64_t> source_busy_;     // [nodes] queue not empty or a packet being injected

  // Per-cycle scratch of the allocators.
  int64_t round_ = 0;
  Arbitration output_arbiters_;  // [links + nodes]: switch allocation, stage 2
  Arbitration vc_arbiters_;      // [links * num_vcs]: VC allocation, stage 2
  std::vector<int64_t> out_taken_;  // [links + nodes] cycle of the greedy switch's last grant
};

/*!
 * \brief The flit model as a task-graph network. Routers are the link ends that routes join
 * (the end of one route link and the start of the next are the same router). A message of n
 * bytes becomes ceil(n / flit_bytes) flits (at least one), its last carrying the rest.
 * \param skip_dead_cycles Jump over cycles in which nothing can happen (same results; false
 *        steps every cycle, for checking).
 */
std::unique_ptr<NetworkModel> MakeFlitNetwork(const NetworkSpec& spec, int64_t batches,
                                              const FlitParams& params,
                                              bool skip_dead_cycles = true);

}  // namespace sim
}  // namespace tvm_chiplet

#endif  // TVM_CHIPLET_RUNTIME_CPP_FLIT_NETWORK_H_
