/*!
 * \file flit_network.cc
 * \brief Cycle-level wormhole router network and its task-graph adapter (network "flit").
 */
#include "flit_network.h"

#include <tvm/ffi/error.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>

namespace tvm_chiplet {
namespace sim {

namespace {

/*! \brief Round-robin distance from an arbiter's pointer to `index`, in [0, size). */
inline int64_t Distance(int64_t index, int64_t pointer, int64_t size) {
  return index >= pointer ? index - pointer : index - pointer + size;
}

// A link may be wider than the flit by this relative amount (rounding of the caller's width);
// also the slack of a link's fractional free time when it is rounded to a cycle.
constexpr double kWidthTolerance = 1e-9;

}  // namespace

FlitParams FlitParams::FromArray(const int64_t* values, double flit_bytes) {
  FlitParams p;
  p.num_vcs = values[0];
  p.vc_buffer_flits = values[1];
  p.routing_delay = values[2];
  p.vc_alloc_delay = values[3];
  p.switch_alloc_delay = values[4];
  p.switch_traversal_delay = values[5];
  p.packet_flits = values[6];
  p.deadlock_cycles = values[7];
  TVM_FFI_CHECK(values[8] == 0 || values[8] == 1, ValueError)
      << "allocator must be 0 (separable input-first) or 1 (greedy), got " << values[8];
  p.allocator = static_cast<Allocator>(values[8]);
  p.flit_bytes = flit_bytes;
  TVM_FFI_CHECK(p.num_vcs >= 1 && p.vc_buffer_flits >= 1 && p.packet_flits >= 1, ValueError)
      << "num_vcs, vc_buffer_flits and packet_flits must be >= 1, got " << p.num_vcs << ", "
      << p.vc_buffer_flits << ", " << p.packet_flits;
  TVM_FFI_CHECK(p.routing_delay >= 0 && p.vc_alloc_delay >= 0 && p.switch_alloc_delay >= 0 &&
                    p.switch_traversal_delay >= 1,
                ValueError)
      << "router delays must be >= 0 and switch_traversal_delay >= 1, got " << p.routing_delay
      << ", " << p.vc_alloc_delay << ", " << p.switch_alloc_delay << ", "
      << p.switch_traversal_delay;
  TVM_FFI_CHECK(p.deadlock_cycles >= 1, ValueError)
      << "deadlock_cycles must be >= 1, got " << p.deadlock_cycles;
  TVM_FFI_CHECK(std::isfinite(flit_bytes) && flit_bytes > 0.0, ValueError)
      << "flit_bytes must be a positive finite number, got " << flit_bytes;
  return p;
}

void FlitCore::Arbitration::Resize(int64_t size) {
  best.assign(size, -1);
  distance.assign(size, 0);
  round.assign(size, -1);
  slots.clear();
}

void FlitCore::Arbitration::Offer(int64_t round_id, int32_t slot, int32_t candidate,
                                  int64_t candidate_distance) {
  if (round[slot] != round_id) {
    round[slot] = round_id;
    best[slot] = candidate;
    distance[slot] = candidate_distance;
    slots.push_back(slot);
  } else if (candidate_distance < distance[slot]) {
    best[slot] = candidate;
    distance[slot] = candidate_distance;
  }
}

FlitCore::FlitCore(FlitLinks links, const FlitParams& params)
    : links_(std::move(links)),
      params_(params),
      num_links_(static_cast<int64_t>(links_.src.size())),
      num_vcs_(params.num_vcs),
      to_switch_end_(params.switch_alloc_delay + params.switch_traversal_delay) {
  const double flit = params_.flit_bytes;
  int64_t max_latency = 0, max_flit_cycles = 1;
  for (int64_t l = 0; l < num_links_; ++l) {
    double bandwidth = links_.bandwidth[l];
    TVM_FFI_CHECK(bandwidth > 0.0 && std::isfinite(bandwidth), ValueError)
        << "link " << l << " has bandwidth " << bandwidth << " bytes/cycle; expected > 0";
    TVM_FFI_CHECK(bandwidth <= flit * (1.0 + kWidthTolerance), ValueError)
        << "link " << l << " moves " << bandwidth << " bytes/cycle, more than flit_bytes = "
        << flit << ": a flit must be at least as wide as the widest link; use flit_bytes >= "
        << bandwidth << " (None: the widest link)";
    max_latency = std::max(max_latency, links_.latency[l]);
    max_flit_cycles =
        std::max(max_flit_cycles, static_cast<int64_t>(std::ceil(flit / bandwidth)));
  }
  int64_t units = NumUnits();
  vcs_.resize(units * num_vcs_);
  int64_t slots = 0;
  for (int64_t unit = 0; unit < units; ++unit) {
    int64_t depth = params_.vc_buffer_flits;
    if (unit < num_links_ && links_.latency[unit] > 1) {
      // The flits a longer credit round trip keeps in flight at the link's rate.
      double share = std::min(1.0, links_.bandwidth[unit] / flit);
      depth += static_cast<int64_t>(
          std::ceil(2.0 * static_cast<double>(links_.latency[unit] - 1) * share - 1e-9));
    }
    for (int64_t v = 0; v < num_vcs_; ++v) {
      InputVc& vc = vcs_[unit * num_vcs_ + v];
      vc.base = slots;
      vc.depth = static_cast<int32_t>(depth);
      slots += depth;
    }
  }
  flits_.resize(slots);
  unit_rr_.assign(units, 0);
  out_rr_.assign(units, 0);
  // An input VC's arbiter starts at its own VC number, so packets that arrive on different VCs
  // (an injection unit rotates over its VCs) leave on different VCs, not one behind another.
  vc_rr_.resize(units * num_vcs_);
  for (int64_t i = 0; i < units * num_vcs_; ++i) vc_rr_[i] = static_cast<int32_t>(i % num_vcs_);
  vc_unit_.resize(units * num_vcs_);
  for (int64_t i = 0; i < units * num_vcs_; ++i) vc_unit_[i] = static_cast<int32_t>(i / num_vcs_);
  out_vc_rr_.assign(num_links_ * num_vcs_, 0);
  out_vc_owner_.assign(num_links_ * num_vcs_, -1);
  credits_.resize(num_links_ * num_vcs_);
  for (int64_t i = 0; i < num_links_ * num_vcs_; ++i) credits_[i] = vcs_[i].depth;
  link_free_at_.assign(num_links_, 0.0);
  link_ready_.assign(num_links_, 0);
  link_period_start_.assign(num_links_, 0);
  link_period_bytes_.assign(num_links_, 0.0);
  link_bytes_.assign(num_links_, 0.0);
  int64_t wheel = 1;
  while (wheel < max_latency + 2) wheel *= 2;
  credit_wheel_.resize(wheel);
  credit_mask_ = wheel - 1;
  // A sleeping VC waits at most for a flit crossing a link (switch, latency, flit time), its
  // route computation and VC allocation.
  int64_t horizon = to_switch_end_ + max_latency + max_flit_cycles + params_.routing_delay +
                    params_.vc_alloc_delay + 2;
  wheel = 1;
  while (wheel <= horizon) wheel *= 2;
  wake_wheel_.resize(wheel);
  wake_mask_ = wheel - 1;
  int64_t nodes = links_.num_nodes;
  source_queue_.resize(nodes);
  inject_packet_.assign(nodes, -1);
  inject_flit_.assign(nodes, 0);
  inject_vc_.assign(nodes, 0);
  inject_rr_.assign(nodes, 0);
  vc_nonempty_.assign((units * num_vcs_ + 63) / 64, 0);
  head_waiting_.assign((units * num_vcs_ + 63) / 64, 0);
  vc_allocated_.assign((units * num_vcs_ + 63) / 64, 0);
  credit_waiter_.assign(num_links_ * num_vcs_, -1);
  vc_waiters_.resize(num_links_);
  unit_nonempty_.assign((units + 63) / 64, 0);
  unit_flits_.assign(units, 0);
  source_busy_.assign((nodes + 63) / 64, 0);
  output_arbiters_.Resize(units);
  vc_arbiters_.Resize(num_links_ * num_vcs_);
  out_taken_.assign(units, -1);
  // Quiet periods of a live network are bounded by a link and pipeline round trip.
  deadlock_limit_ = params_.deadlock_cycles + 2 * max_latency + max_flit_cycles +
                    params_.routing_delay + params_.vc_alloc_delay + to_switch_end_;
}

void FlitCore::AddMessage(int64_t src, int64_t dst, const int64_t* route, int64_t hops,
                          int64_t flits, double last_flit_bytes, int64_t created, int64_t tag) {
  TVM_FFI_ICHECK(flits >= 1) << "a message has at least one flit, got " << flits;
  source_queue_[src].push_back(
      {route, hops, dst, flits, last_flit_bytes, std::max(created, cycle_), tag});
  SetBit(&source_busy_, src);
  queued_packets_ += (flits + params_.packet_flits - 1) / params_.packet_flits;
}

bool FlitCore::Idle() const {
  return queued_packets_ == 0 && buffered_flits_ == 0 && ejecting_.empty() &&
         credits_pending_ == 0;
}

void FlitCore::SkipTo(int64_t cycle) {
  TVM_FFI_ICHECK(Idle()) << "only an idle flit network can skip cycles";
  if (cycle > cycle_) {
    cycle_ = cycle;
    last_move_ = cycle;
  }
}

inline int64_t FlitCore::NextOutput(const Flit& flit) const {
  const Packet& p = packets_[flit.packet];
  if (flit.hop < p.hops) return p.route[flit.hop];
  return num_links_ + p.dst;  // ejection port
}

inline double FlitCore::FlitBytes(const Flit& flit) const {
  return flit.tail ? packets_[flit.packet].tail_bytes : params_.flit_bytes;
}

int64_t FlitCore::NextBusyCycle() const {
  const int64_t now = cycle_;
  int64_t next = kNever;
  if (!ejecting_.empty()) {
    if (ejecting_.front().due <= now) return now;
    next = ejecting_.front().due;
  }
  int64_t nodes = links_.num_nodes;
  for (int64_t node = NextSet(source_busy_, 0, nodes); node < nodes;
       node = NextSet(source_busy_, node + 1, nodes)) {
    int64_t unit = num_links_ + node;
    if (inject_packet_[node] >= 0) {
      const InputVc& vc = vcs_[unit * num_vcs_ + inject_vc_[node]];
      if (vc.count < vc.depth) return now;
      continue;  // room comes with a switch grant
    }
    int64_t created = source_queue_[node].front().created;
    if (created > now) {
      next = std::min(next, created);
      continue;
    }
    for (int64_t v = 0; v < num_vcs_; ++v) {
      if (vcs_[unit * num_vcs_ + v].count == 0) return now;
    }
  }
  int64_t next_credit = -1;  // computed on first use
  int64_t total = static_cast<int64_t>(vcs_.size());
  for (int64_t i = NextSet(vc_nonempty_, 0, total); i < total;
       i = NextSet(vc_nonempty_, i + 1, total)) {
    const InputVc& vc = vcs_[i];
    if (vc.out_port < 0) {
      if (vc.head_ready > now) {
        next = std::min(next, vc.head_ready);
        continue;
      }
      // A head that finds every VC of its output taken waits for a tail to leave (a move).
      int64_t out = NextOutput(Front(vc));
      if (out >= num_links_) return now;
      for (int64_t w = 0; w < num_vcs_; ++w) {
        if (out_vc_owner_[out * num_vcs_ + w] < 0) return now;
      }
      continue;
    }
    int64_t ready = std::max(vc.sa_ready, vc.front_arrival);
    int64_t out = vc.out_port;
    if (out < num_links_) {
      ready = std::max(ready, link_ready_[out]);
      if (credits_[out * num_vcs_ + vc.out_vc] == 0) {
        // The credit comes back with the wheel (no earlier than its next due credit) or after
        // a move downstream; both bound the wait from below.
        if (next_credit < 0) {
          next_credit = kNever;
          for (int64_t d = 0; d <= credit_mask_ && credits_pending_ > 0; ++d) {
            if (!credit_wheel_[(now + d) & credit_mask_].empty()) {
              next_credit = now + d;
              break;
            }
          }
        }
        ready = std::max(ready, next_credit);
      }
    }
    if (ready <= now) return now;
    next = std::min(next, ready);
  }
  return next;
}

void FlitCore::SkipDeadCycles(int64_t limit) {
  // Only returning credits: a few cycles, stepped (keeps Idle() and SkipTo exact).
  if (buffered_flits_ == 0 && queued_packets_ == 0 && ejecting_.empty()) return;
  int64_t target = std::min(NextBusyCycle(), limit);
  if (target <= cycle_) return;
  if (buffered_flits_ > 0 && target - 1 - last_move_ > deadlock_limit_) {
    // Stepping would stop at the first cycle past the limit; report it as that cycle.
    cycle_ = std::max(cycle_, last_move_ + deadlock_limit_ + 1);
    ReportDeadlock();
  }
  // Every pending credit and wake-up is due within one turn of its wheel.
  int64_t turn = std::max(credit_mask_, wake_mask_);
  for (int64_t c = cycle_; c < target && c <= cycle_ + turn; ++c) {
    ApplyCredits(c);
    WakeDue(c);
  }
  cycle_ = target;
}

void FlitCore::ApplyCredits(int64_t cycle) {
  std::vector<int32_t>& due = credit_wheel_[cycle & credit_mask_];
  for (int32_t out_vc : due) {
    ++credits_[out_vc];
    if (credit_waiter_[out_vc] >= 0) {
      SetBit(&vc_allocated_, credit_waiter_[out_vc]);
      credit_waiter_[out_vc] = -1;
    }
  }
  credits_pending_ -= static_cast<int64_t>(due.size());
  due.clear();
}

void FlitCore::Sleep(int64_t index, int64_t due, int64_t kind) {
  TVM_FFI_ICHECK(due > cycle_ && due - cycle_ <= wake_mask_)
      << "flit network: VC " << index << " sleeps until " << due << " at cycle " << cycle_;
  ClearBit(kind == 0 ? &vc_allocated_ : &head_waiting_, index);
  wake_wheel_[due & wake_mask_].push_back(static_cast<int32_t>(2 * index + kind));
}

void FlitCore::WakeDue(int64_t cycle) {
  std::vector<int32_t>& due = wake_wheel_[cycle & wake_mask_];
  for (int32_t item : due) SetBit((item & 1) ? &head_waiting_ : &vc_allocated_, item >> 1);
  due.clear();
}

void FlitCore::Push(int64_t index, const Flit& flit) {
  InputVc& vc = vcs_[index];
  int64_t slot = vc.start + vc.count;
  if (slot >= vc.depth) slot -= vc.depth;
  flits_[vc.base + slot] = flit;
  if (vc.count++ == 0) {
    vc.front_arrival = flit.arrival;
    if (vc.out_port < 0) {
      vc.head_ready = flit.arrival + params_.routing_delay;
      SetBit(&head_waiting_, index);
    } else {  // the body of a packet whose head has left
      SetBit(&vc_allocated_, index);
    }
    SetBit(&vc_nonempty_, index);
  }
  int64_t unit = vc_unit_[index];
  if (unit_flits_[unit]++ == 0) SetBit(&unit_nonempty_, unit);
  ++buffered_flits_;
}

void FlitCore::Pop(int64_t index) {
  InputVc& vc = vcs_[index];
  bool tail = Front(vc).tail;
  if (++vc.start == vc.depth) vc.start = 0;
  if (--vc.count == 0) {
    ClearBit(&vc_nonempty_, index);
    ClearBit(&vc_allocated_, index);
  } else {
    vc.front_arrival = Front(vc).arrival;
  }
  int64_t unit = vc_unit_[index];
  if (--unit_flits_[unit] == 0) ClearBit(&unit_nonempty_, unit);
  --buffered_flits_;
  if (tail) {
    vc.out_port = -1;
    if (vc.count > 0) {
      vc.head_ready = std::max(vc.front_arrival, cycle_ + 1) + params_.routing_delay;
      SetBit(&head_waiting_, index);
      ClearBit(&vc_allocated_, index);
    }
  }
}

int32_t FlitCore::StartPacket(int64_t node) {
  std::deque<Message>& queue = source_queue_[node];
  Message& m = queue.front();
  int64_t flits = std::min(params_.packet_flits, m.flits_left);
  m.flits_left -= flits;
  double tail_bytes = m.flits_left == 0 ? m.last_flit_bytes : params_.flit_bytes;
  Packet packet{m.route, m.hops, m.dst, flits, tail_bytes, m.created, cycle_, m.tag};
  if (m.flits_left == 0) queue.pop_front();
  if (!free_packets_.empty()) {
    int32_t slot = free_packets_.back();
    free_packets_.pop_back();
    packets_[slot] = packet;
    return slot;
  }
  TVM_FFI_ICHECK(packets_.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      << "too many packets in flight";
  packets_.push_back(packet);
  return static_cast<int32_t>(packets_.size() - 1);
}

// Move one flit of the node's current packet into its injection VC; a new packet waits for an
// empty injection VC.
void FlitCore::Inject(int64_t node) {
  int64_t unit = num_links_ + node;
  if (inject_packet_[node] < 0) {
    const std::deque<Message>& queue = source_queue_[node];
    if (queue.front().created > cycle_) return;
    int64_t chosen = -1;
    for (int64_t k = 0; k < num_vcs_ && chosen < 0; ++k) {
      int64_t v = (inject_rr_[node] + k) % num_vcs_;
      if (vcs_[unit * num_vcs_ + v].count == 0) chosen = v;
    }
    if (chosen < 0) return;
    inject_rr_[node] = static_cast<int32_t>((chosen + 1) % num_vcs_);
    inject_packet_[node] = StartPacket(node);
    inject_flit_[node] = 0;
    inject_vc_[node] = chosen;
  }
  int64_t index = unit * num_vcs_ + inject_vc_[node];
  if (vcs_[index].count >= vcs_[index].depth) return;
  int32_t packet = inject_packet_[node];
  int64_t k = inject_flit_[node];
  bool tail = k + 1 == packets_[packet].flits;
  Push(index, {cycle_, packet, 0, k == 0, tail});
  last_move_ = cycle_;
  if (!tail) {
    inject_flit_[node] = k + 1;
    return;
  }
  inject_packet_[node] = -1;
  --queued_packets_;
  if (source_queue_[node].empty()) ClearBit(&source_busy_, node);
}

void FlitCore::GrantVc(int64_t index, int64_t out, int64_t out_vc) {
  InputVc& vc = vcs_[index];
  vc.out_port = static_cast<int32_t>(out);
  vc.out_vc = static_cast<int32_t>(out_vc);
  vc.sa_ready = cycle_ + params_.vc_alloc_delay;
  ClearBit(&head_waiting_, index);
  SetBit(&vc_allocated_, index);
  if (out < num_links_) out_vc_owner_[out * num_vcs_ + out_vc] = static_cast<int32_t>(index);
}

void FlitCore::WaitForVc(int64_t index, int64_t out) {
  ClearBit(&head_waiting_, index);
  vc_waiters_[out].push_back(static_cast<int32_t>(index));
}

// Stage 1: every waiting head picks the first free VC of its output from its own pointer;
// stage 2: every output VC grants the head nearest its pointer. Ejection always grants.
void FlitCore::AllocateVcsSeparable() {
  ++round_;
  vc_arbiters_.slots.clear();
  int64_t total = static_cast<int64_t>(vcs_.size());
  for (int64_t i = NextSet(head_waiting_, 0, total); i < total;
       i = NextSet(head_waiting_, i + 1, total)) {
    const InputVc& vc = vcs_[i];
    if (vc.head_ready > cycle_) {
      Sleep(i, vc.head_ready, 1);
      continue;
    }
    int64_t out = NextOutput(Front(vc));
    if (out >= num_links_) {
      GrantVc(i, out, 0);
      continue;
    }
    int64_t base = out * num_vcs_;
    bool offered = false;
    for (int64_t k = 0; k < num_vcs_ && !offered; ++k) {
      int64_t w = vc_rr_[i] + k;
      if (w >= num_vcs_) w -= num_vcs_;
      if (out_vc_owner_[base + w] < 0) {
        vc_arbiters_.Offer(round_, static_cast<int32_t>(base + w), static_cast<int32_t>(i),
                           Distance(i, out_vc_rr_[base + w], total));
        offered = true;
      }
    }
    if (!offered) WaitForVc(i, out);
  }
  for (int32_t slot : vc_arbiters_.slots) {
    int32_t winner = vc_arbiters_.best[slot];
    int64_t out_vc = slot % num_vcs_;
    GrantVc(winner, slot / num_vcs_, out_vc);
    vc_rr_[winner] = static_cast<int32_t>((out_vc + 1) % num_vcs_);
    out_vc_rr_[slot] = static_cast<int32_t>((winner + 1) % total);
  }
}

inline bool FlitCore::SwitchReady(int64_t index) const {
  const InputVc& vc = vcs_[index];
  if (vc.count == 0 || vc.out_port < 0 || vc.sa_ready > cycle_) return false;
  if (vc.front_arrival > cycle_) return false;
  int64_t out = vc.out_port;
  return out >= num_links_ ||
         (link_ready_[out] <= cycle_ && credits_[out * num_vcs_ + vc.out_vc] > 0);
}

// Stage 1: every input unit picks its first ready VC from its pointer; stage 2: every output
// port grants the unit nearest its pointer.
void FlitCore::AllocateSwitchSeparable() {
  ++round_;
  output_arbiters_.slots.clear();
  int64_t units = NumUnits(), total = static_cast<int64_t>(vcs_.size());
  int64_t unit = -1, best = -1, best_distance = 0;
  auto offer = [&]() {
    if (best < 0) return;
    int64_t out = vcs_[best].out_port;
    output_arbiters_.Offer(round_, static_cast<int32_t>(out), static_cast<int32_t>(best),
                           Distance(unit, out_rr_[out], units));
  };
  // A unit's VCs are adjacent: visit the allocated ones in order, unit after unit.
  for (int64_t i = NextSet(vc_allocated_, 0, total); i < total;
       i = NextSet(vc_allocated_, i + 1, total)) {
    int64_t owner = vc_unit_[i];
    if (owner != unit) {
      offer();
      unit = owner;
      best = -1;
    }
    const InputVc& vc = vcs_[i];
    int64_t out = vc.out_port;
    int64_t wake = std::max(vc.sa_ready, vc.front_arrival);
    if (out < num_links_) wake = std::max(wake, link_ready_[out]);
    if (wake > cycle_) {
      Sleep(i, wake, 0);
      continue;
    }
    if (out < num_links_ && credits_[out * num_vcs_ + vc.out_vc] == 0) {
      // Only this VC spends the credits of its output VC: nothing changes before one returns.
      ClearBit(&vc_allocated_, i);
      credit_waiter_[out * num_vcs_ + vc.out_vc] = static_cast<int32_t>(i);
      continue;
    }
    int64_t distance = Distance(i - owner * num_vcs_, unit_rr_[owner], num_vcs_);
    if (best < 0 || distance < best_distance) {
      best = i;
      best_distance = distance;
    }
  }
  offer();
  for (int32_t out : output_arbiters_.slots) {
    int32_t index = output_arbiters_.best[out];
    int64_t winner = vc_unit_[index];
    int64_t next = index - winner * num_vcs_ + 1;
    unit_rr_[winner] = static_cast<int32_t>(next == num_vcs_ ? 0 : next);
    out_rr_[out] = static_cast<int32_t>((winner + 1) % units);
    Send(index);
  }
}

// Non-empty VCs in a rotating order; each waiting head takes the free VC of its output with
// the most credits (the emptiest downstream), ties broken by a rotating VC order.
void FlitCore::AllocateVcsGreedy() {
  int64_t total = static_cast<int64_t>(vcs_.size());
  int64_t first = cycle_ % total;
  for (int pass = 0; pass < 2; ++pass) {
    int64_t end = pass == 0 ? total : first;
    for (int64_t i = NextSet(head_waiting_, pass == 0 ? first : 0, end); i < end;
         i = NextSet(head_waiting_, i + 1, end)) {
      const InputVc& vc = vcs_[i];
      if (vc.head_ready > cycle_) continue;
      int64_t out = NextOutput(Front(vc));
      if (out >= num_links_) {
        GrantVc(i, out, 0);
        continue;
      }
      int64_t best = -1;
      for (int64_t k = 0; k < num_vcs_; ++k) {
        int64_t w = (cycle_ + k) % num_vcs_;
        int64_t slot = out * num_vcs_ + w;
        if (out_vc_owner_[slot] < 0 &&
            (best < 0 || credits_[slot] > credits_[out * num_vcs_ + best])) {
          best = w;
        }
      }
      if (best >= 0) {
        GrantVc(i, out, best);
      } else {
        WaitForVc(i, out);
      }
    }
  }
}

// Input units in a rotating order each send their first ready VC (from the unit's pointer)
// whose output has not been granted in this cycle.
void FlitCore::AllocateSwitchGreedy() {
  int64_t units = NumUnits();
  int64_t first = cycle_ % units;
  for (int pass = 0; pass < 2; ++pass) {
    int64_t end = pass == 0 ? units : first;
    for (int64_t unit = NextSet(unit_nonempty_, pass == 0 ? first : 0, end); unit < end;
         unit = NextSet(unit_nonempty_, unit + 1, end)) {
      for (int64_t k = 0; k < num_vcs_; ++k) {
        int64_t v = (unit_rr_[unit] + k) % num_vcs_;
        int64_t index = unit * num_vcs_ + v;
        if (!SwitchReady(index) || out_taken_[vcs_[index].out_port] == cycle_) continue;
        out_taken_[vcs_[index].out_port] = cycle_;
        unit_rr_[unit] = static_cast<int32_t>((v + 1) % num_vcs_);
        Send(index);
        break;
      }
    }
  }
}

void FlitCore::LinkSend(int64_t link, double bytes) {
  if (link_free_at_[link] <= static_cast<double>(cycle_)) {
    link_period_start_[link] = cycle_;
    link_period_bytes_[link] = 0.0;
  }
  link_period_bytes_[link] += bytes;
  // From the period's start, not incrementally: no rounding builds up over a long period.
  double free_at = static_cast<double>(link_period_start_[link]) +
                   link_period_bytes_[link] / links_.bandwidth[link];
  link_free_at_[link] = free_at;
  // The next flit may start in any later cycle that ends after free_at.
  link_ready_[link] = std::max(cycle_ + 1, static_cast<int64_t>(std::floor(free_at)));
  link_bytes_[link] += bytes;
}

void FlitCore::Send(int64_t index) {
  const Flit flit = Front(vcs_[index]);
  int64_t out = vcs_[index].out_port, out_vc = vcs_[index].out_vc;
  int64_t unit = vc_unit_[index];
  Pop(index);
  if (unit < num_links_) {
    int64_t delay = std::max<int64_t>(1, links_.latency[unit]);
    credit_wheel_[(cycle_ + delay) & credit_mask_].push_back(static_cast<int32_t>(index));
    ++credits_pending_;
  }
  if (out < num_links_) {
    int64_t slot = out * num_vcs_ + out_vc;
    --credits_[slot];
    LinkSend(out, FlitBytes(flit));
    if (flit.tail) {
      out_vc_owner_[slot] = -1;
      for (int32_t waiter : vc_waiters_[out]) SetBit(&head_waiting_, waiter);
      vc_waiters_[out].clear();
    }
    // A flit longer than a cycle on the link is in the downstream buffer once its last byte is.
    int64_t last_byte_cycle =
        static_cast<int64_t>(std::ceil(link_free_at_[out] - kWidthTolerance)) - 1;
    int64_t arrival = std::max(cycle_, last_byte_cycle) + to_switch_end_ + links_.latency[out];
    Push(slot, {arrival, flit.packet, flit.hop + 1, flit.head, flit.tail});
  } else {
    ejecting_.push_back({cycle_ + to_switch_end_ - 1, flit.packet, flit.tail});
  }
  last_move_ = cycle_;
}

int64_t FlitCore::Step(std::vector<Ejection>* ejected) {
  ApplyCredits(cycle_);
  WakeDue(cycle_);
  int64_t nodes = links_.num_nodes;
  for (int64_t node = NextSet(source_busy_, 0, nodes); node < nodes;
       node = NextSet(source_busy_, node + 1, nodes)) {
    Inject(node);
  }
  if (params_.allocator == Allocator::kGreedy) {
    AllocateVcsGreedy();
    AllocateSwitchGreedy();
  } else {
    AllocateVcsSeparable();
    AllocateSwitchSeparable();
  }
  int64_t flits = 0;
  while (!ejecting_.empty() && ejecting_.front().due <= cycle_) {
    const Ejecting& e = ejecting_.front();
    if (e.tail) {
      const Packet& p = packets_[e.packet];
      ejected->push_back({p.tag, p.created, p.injected, cycle_});
      free_packets_.push_back(e.packet);
    }
    ejecting_.pop_front();
    ++flits;
  }
  if (buffered_flits_ > 0 && cycle_ - last_move_ > deadlock_limit_) ReportDeadlock();
  ++cycle_;
  return flits;
}

int64_t FlitCore::CountPacketsInFlight() const {
  int64_t count = queued_packets_;  // tails not yet in an injection buffer
  for (const InputVc& vc : vcs_) {
    for (int64_t i = 0; i < vc.count; ++i) {
      int64_t slot = vc.start + i;
      if (slot >= vc.depth) slot -= vc.depth;
      count += flits_[vc.base + slot].tail ? 1 : 0;
    }
  }
  for (const Ejecting& e : ejecting_) count += e.tail ? 1 : 0;
  return count;
}

void FlitCore::ReportDeadlock() const {
  std::vector<int64_t> blocked;
  for (int64_t i = 0; i < static_cast<int64_t>(vcs_.size()); ++i) {
    const InputVc& vc = vcs_[i];
    if (vc.count == 0) continue;
    int64_t out = vc.out_port >= 0 ? vc.out_port : NextOutput(Front(vc));
    if (out < num_links_) blocked.push_back(out);
  }
  std::sort(blocked.begin(), blocked.end());
  blocked.erase(std::unique(blocked.begin(), blocked.end()), blocked.end());
  std::ostringstream names;
  for (size_t i = 0; i < blocked.size(); ++i) {
    int64_t l = blocked[i];
    names << (i ? ", " : "") << "link " << l << " (" << links_.src[l] << "->" << links_.dst[l]
          << ")";
  }
  TVM_FFI_THROW(RuntimeError) << "flit network deadlock: no flit moved for "
                              << cycle_ - last_move_ << " cycles (since cycle " << last_move_
                              << ") with " << buffered_flits_
                              << " flits buffered; packets wait for " << names.str()
                              << ". The routes have a cyclic channel dependency: use "
                                 "deadlock-free routes (e.g. XY on a mesh) or more VCs with a "
                                 "VC ordering";
  throw;  // unreachable
}

namespace {

/*! \brief Routers from routes: consecutive route links meet at one router. */
FlitLinks InferLinks(const NetworkSpec& spec) {
  int64_t ends = 2 * spec.num_links;  // 2l: start of link l, 2l + 1: its end
  std::vector<int64_t> parent(ends);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&parent](int64_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (int64_t m = 0; m < spec.num_messages; ++m) {
    for (int64_t i = spec.RouteBegin(m); i + 1 < spec.RouteEnd(m); ++i) {
      int64_t a = find(2 * spec.route_links[i] + 1), b = find(2 * spec.route_links[i + 1]);
      if (a != b) parent[std::max(a, b)] = std::min(a, b);
    }
  }
  FlitLinks links;
  std::vector<int64_t> node_of(ends, -1);
  auto node = [&](int64_t end) {
    int64_t root = find(end);
    if (node_of[root] < 0) node_of[root] = links.num_nodes++;
    return node_of[root];
  };
  for (int64_t l = 0; l < spec.num_links; ++l) {
    links.src.push_back(node(2 * l));
    links.dst.push_back(node(2 * l + 1));
    links.latency.push_back(static_cast<int64_t>(std::ceil(spec.link_latency[l] - 1e-9)));
    links.bandwidth.push_back(spec.link_bandwidth[l]);
  }
  return links;
}

class FlitNetwork : public NetworkModel {
 public:
  FlitNetwork(const NetworkSpec& spec, int64_t batches, const FlitParams& params,
              bool skip_dead_cycles)
      : spec_(spec),
        params_(params),
        skip_dead_cycles_(skip_dead_cycles),
        core_(InferLinks(spec), params),
        packets_left_(spec.num_messages * batches, 0) {}

  void Inject(int64_t message, double now, std::vector<Delivery>*) final {
    int64_t created = static_cast<int64_t>(std::ceil(now));
    if (core_.Idle()) core_.SkipTo(created);
    int64_t m = message % spec_.num_messages;
    double bytes = spec_.message_bytes[m], width = params_.flit_bytes;
    int64_t flits =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(bytes / width - 1e-9)));
    double last_bytes =
        std::clamp(bytes - static_cast<double>(flits - 1) * width, 0.0, width);
    const int64_t* route = spec_.route_links + spec_.RouteBegin(m);
    int64_t hops = spec_.RouteEnd(m) - spec_.RouteBegin(m);
    int64_t src = core_.Links().src[route[0]];
    int64_t dst = core_.Links().dst[route[hops - 1]];
    core_.AddMessage(src, dst, route, hops, flits, last_bytes, created, message);
    packets_left_[message] += (flits + params_.packet_flits - 1) / params_.packet_flits;
  }

  // Cycle c's ejections are known (and usable) at time c + 1.
  double NextEventTime() final {
    if (core_.Idle()) return std::numeric_limits<double>::infinity();
    return static_cast<double>(core_.Cycle() + 1);
  }

  void AdvanceTo(double t, std::vector<Delivery>* delivered) final {
    while (!core_.Idle() && static_cast<double>(core_.Cycle() + 1) <= t) StepCycle(delivered);
  }

  // Steps cycle after cycle (the same cycles the event loop would step one per AdvanceTo),
  // jumping over dead ones, and returns as soon as a message is delivered.
  double AdvanceUntil(double limit, int64_t max_work, std::vector<Delivery>* delivered) final {
    double never = std::numeric_limits<double>::infinity();
    if (core_.Idle()) return limit;
    int64_t max_cycle = limit == never ? FlitCore::kNever : static_cast<int64_t>(std::floor(limit));
    size_t before = delivered->size();
    bool quiet = true;
    for (int64_t step = 0; step < max_work; ++step) {
      if (core_.Idle() || static_cast<double>(core_.Cycle() + 1) > limit) return limit;
      if (skip_dead_cycles_ && quiet) {
        core_.SkipDeadCycles(max_cycle);
        if (static_cast<double>(core_.Cycle() + 1) > limit) return limit;
      }
      int64_t cycle = core_.Cycle();
      StepCycle(delivered);
      if (delivered->size() > before) return static_cast<double>(core_.Cycle());
      quiet = core_.LastMove() != cycle;
    }
    return static_cast<double>(core_.Cycle());
  }

  void WriteLinkBusyCycles(double, double* link_busy) final {
    const std::vector<double>& bytes = core_.LinkBytes();
    for (int64_t l = 0; l < spec_.num_links; ++l) {
      link_busy[l] = bytes[l] / spec_.link_bandwidth[l];
    }
  }

 private:
  // Cycle c's ejections are known (and usable) at time c + 1.
  void StepCycle(std::vector<Delivery>* delivered) {
    ejected_.clear();
    core_.Step(&ejected_);
    for (const Ejection& e : ejected_) {
      if (--packets_left_[e.tag] == 0) {
        delivered->push_back({e.tag, static_cast<double>(e.cycle + 1)});
      }
    }
  }

  NetworkSpec spec_;
  FlitParams params_;
  bool skip_dead_cycles_;
  FlitCore core_;
  std::vector<int64_t> packets_left_;
  std::vector<Ejection> ejected_;
};

}  // namespace

std::unique_ptr<NetworkModel> MakeFlitNetwork(const NetworkSpec& spec, int64_t batches,
                                              const FlitParams& params, bool skip_dead_cycles) {
  return std::make_unique<FlitNetwork>(spec, batches, params, skip_dead_cycles);
}

}  // namespace sim
}  // namespace tvm_chiplet
