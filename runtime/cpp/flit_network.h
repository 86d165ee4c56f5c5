/*!
 * \file flit_network.h
 * \brief Cycle-level wormhole network: routers with virtual channels and credit flow control.
 *
 * Every directed link ends in an input unit of its downstream router; every node also has an
 * injection input unit fed by an unbounded source queue, and an ejection port. An input unit
 * has `num_vcs` virtual channels of `vc_buffer_flits` flits. A head flit that reaches the front
 * of its VC spends `routing_delay` cycles in route computation (routes are precomputed link
 * lists), then waits for a free VC of its output link (`vc_alloc_delay` cycles once granted),
 * then competes for the switch (`switch_alloc_delay`), crosses it (`switch_traversal_delay`)
 * and the link (the link's latency). Body flits follow the head's VC, needing only a switch
 * grant. A grant needs a credit (a free slot in the downstream VC); the credit comes back
 * `max(1, link latency)` cycles after the flit leaves the downstream buffer. Each input unit
 * sends and each output port takes at most one flit per cycle, a link at most one flit every
 * `cycles_per_flit` cycles. An output VC is released when the tail flit leaves for it.
 *
 * Zero-load latency of a packet of P flits over H links (creation to tail ejection, both
 * cycles counted): (H + 1) * (routing + vc_alloc + switch_alloc + switch_traversal)
 * + sum of link latencies + P, when every link moves one flit per cycle.
 */
#ifndef TVM_CHIPLET_RUNTIME_CPP_FLIT_NETWORK_H_
#define TVM_CHIPLET_RUNTIME_CPP_FLIT_NETWORK_H_

#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "network_model.h"

namespace tvm_chiplet {
namespace sim {

/*! \brief Router parameters; see runtime/noc.py FlitParams for the documented defaults. */
struct FlitParams {
  int64_t num_vcs = 2;
  int64_t vc_buffer_flits = 4;
  int64_t routing_delay = 1;
  int64_t vc_alloc_delay = 1;
  int64_t switch_alloc_delay = 1;
  int64_t switch_traversal_delay = 1;
  int64_t packet_flits = 4;
  int64_t deadlock_cycles = 10000;
  double flit_bytes = 16.0;

  /*! \brief Number of int64 values FromArray reads. */
  static constexpr int64_t kIntCount = 8;
  /*! \brief Read the integer fields in declaration order and check them. */
  static FlitParams FromArray(const int64_t* values, double flit_bytes);
};

/*! \brief Directed links between routers. */
struct FlitLinks {
  int64_t num_nodes = 0;
  std::vector<int64_t> src;              // router the link leaves
  std::vector<int64_t> dst;              // router the link enters
  std::vector<int64_t> latency;          // cycles, >= 0
  std::vector<int64_t> cycles_per_flit;  // >= 1
};

/*! \brief A packet whose tail flit left the network. */
struct Ejection {
  int64_t packet;
  int64_t cycle;  // cycle in which the tail flit was ejected
};

/*! \brief The router network, advanced one cycle at a time. */
class FlitCore {
 public:
  struct Packet {
    int64_t src;
    int64_t dst;
    int64_t route_begin;  // into the core's route store
    int64_t hops;
    int64_t flits;
    int64_t created;   // cycle the packet entered its source queue
    int64_t injected;  // cycle its head entered the injection buffer, -1 before
    int64_t tag;       // caller's label
  };

  FlitCore(FlitLinks links, const FlitParams& params);

  /*! \brief Queue a packet at router `src`, to be injected from cycle `created` on. */
  int64_t AddPacket(int64_t src, int64_t dst, const int64_t* route, int64_t hops, int64_t flits,
                    int64_t created, int64_t tag);
  /*! \brief Simulate cycle `Cycle()`, append the packets whose tail was ejected; returns the
   *  number of flits ejected in that cycle. Throws RuntimeError on a deadlock. */
  int64_t Step(std::vector<Ejection>* ejected);
  /*! \brief Nothing queued, buffered, ejecting or crediting. */
  bool Idle() const;
  /*! \brief Jump an idle network forward to `cycle`. */
  void SkipTo(int64_t cycle);
  /*!
   * \brief Earliest cycle >= Cycle() in which Step could change anything but the credit
   *  counters (inject, allocate, send or eject a flit); kNever when nothing is pending on a
   *  time (an idle network, or every flit blocked: a deadlock). Every cycle before it is dead.
   */
  int64_t NextBusyCycle() const;
  /*!
   * \brief Jump over dead cycles to min(NextBusyCycle(), `limit`), returning their credits
   *  exactly as Step would. Throws the deadlock error Step would throw in a skipped cycle.
   *  Results are bit-identical to stepping the skipped cycles.
   */
  void SkipDeadCycles(int64_t limit);
  /*! \brief Last cycle in which a flit was injected or crossed a switch. */
  int64_t LastMove() const { return last_move_; }
  int64_t Cycle() const { return cycle_; }
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  const Packet& GetPacket(int64_t id) const { return packets_[id]; }
  /*! \brief Packets not yet ejected, counted from where their tail flits are. */
  int64_t CountPacketsInFlight() const;
  /*! \brief Flits that crossed each link. */
  const std::vector<int64_t>& LinkFlits() const { return link_flits_; }
  const FlitLinks& Links() const { return links_; }

 private:
  struct Flit {
    int32_t packet;
    int32_t hop;  // index in the route of the link the flit takes next
    int64_t arrival;
    bool head;
    bool tail;
  };
  struct InputVc {
    std::vector<Flit> ring;
    int64_t start = 0;
    int64_t count = 0;
    int64_t out_port = -1;  // output of the front packet after VC allocation, -1 before
    int64_t out_vc = 0;
    int64_t head_ready = 0;  // cycle the front head may request a VC
    int64_t sa_ready = 0;    // cycle the front packet may request the switch
    const Flit& Front() const { return ring[start]; }
  };

  int64_t NumUnits() const { return num_links_ + links_.num_nodes; }
  /*! \brief First set bit of `bits` in [from, end), or `end`. */
  static int64_t NextSet(const std::vector<uint64_t>& bits, int64_t from, int64_t end);
  static void SetBit(std::vector<uint64_t>* bits, int64_t i) { (*bits)[i >> 6] |= 1ULL << (i & 63); }
  static void ClearBit(std::vector<uint64_t>* bits, int64_t i) {
    (*bits)[i >> 6] &= ~(1ULL << (i & 63));
  }
  InputVc& Vc(int64_t unit, int64_t vc) { return vcs_[unit * num_vcs_ + vc]; }
  int64_t NextOutput(const Flit& flit) const;
  void Push(int64_t index, const Flit& flit);
  void Pop(int64_t index, int64_t now);
  void Inject(int64_t node);
  void AllocateVcs();
  void AllocateVc(InputVc* vc);
  void AllocateSwitch();
  void SwitchUnit(int64_t unit);
  [[noreturn]] void ReportDeadlock() const;

  FlitLinks links_;
  FlitParams params_;
  int64_t num_links_;
  int64_t num_vcs_;
  int64_t cycle_ = 0;
  int64_t last_move_ = 0;
  int64_t deadlock_limit_;
  std::vector<Packet> packets_;
  std::vector<int64_t> route_store_;
  std::vector<InputVc> vcs_;               // [units * num_vcs]
  std::vector<int64_t> unit_rr_;           // per unit: VC to look at first
  std::vector<bool> out_vc_busy_;          // [links * num_vcs]
  std::vector<int64_t> credits_;           // [links * num_vcs]
  std::vector<int64_t> link_free_at_;      // [links]
  std::vector<int64_t> out_granted_at_;    // [links + nodes] cycle of the last grant
  std::vector<int64_t> link_flits_;        // [links]
  std::vector<std::vector<int64_t>> credit_wheel_;  // by due cycle modulo size
  int64_t credits_pending_ = 0;
  std::deque<std::pair<int64_t, int64_t>> ejecting_;  // (due cycle, packet) of ejected flits
  std::deque<bool> ejecting_tail_;
  std::vector<std::deque<int64_t>> source_queue_;  // per node
  std::vector<int64_t> inject_flit_;               // per node: next flit of the queue's front
  std::vector<int64_t> inject_vc_;                 // per node: VC receiving the front packet
  int64_t queued_packets_ = 0;
  int64_t buffered_flits_ = 0;
  // Bit sets that let a cycle visit only the non-empty VCs, units and source queues, in the
  // same order as a scan of all of them.
  std::vector<uint64_t> vc_nonempty_;     // [units * num_vcs]
  std::vector<uint64_t> unit_nonempty_;   // [units]
  std::vector<int64_t> unit_flits_;       // [units] flits buffered in the unit
  std::vector<uint64_t> queue_nonempty_;  // [nodes]
};

/*!
 * \brief The flit model as a task-graph network. Routers are the link ends that routes join
 * (the end of one route link and the start of the next are the same router).
 * \param skip_dead_cycles Jump over cycles in which nothing can happen (same results; false
 *        steps every cycle, for checking).
 */
std::unique_ptr<NetworkModel> MakeFlitNetwork(const NetworkSpec& spec, int64_t batches,
                                              const FlitParams& params,
                                              bool skip_dead_cycles = true);

}  // namespace sim
}  // namespace tvm_chiplet

#endif  // TVM_CHIPLET_RUNTIME_CPP_FLIT_NETWORK_H_
