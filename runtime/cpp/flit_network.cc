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

FlitCore::FlitCore(FlitLinks links, const FlitParams& params)
    : links_(std::move(links)),
      params_(params),
      num_links_(static_cast<int64_t>(links_.src.size())),
      num_vcs_(params.num_vcs) {
  int64_t units = NumUnits();
  vcs_.resize(units * num_vcs_);
  for (InputVc& vc : vcs_) vc.ring.resize(params_.vc_buffer_flits);
  unit_rr_.assign(units, 0);
  out_vc_busy_.assign(num_links_ * num_vcs_, false);
  credits_.assign(num_links_ * num_vcs_, params_.vc_buffer_flits);
  link_free_at_.assign(num_links_, 0);
  out_granted_at_.assign(num_links_ + links_.num_nodes, -1);
  link_flits_.assign(num_links_, 0);
  int64_t max_latency = 0;
  for (int64_t l = 0; l < num_links_; ++l) max_latency = std::max(max_latency, links_.latency[l]);
  credit_wheel_.resize(max_latency + 2);
  source_queue_.resize(links_.num_nodes);
  inject_flit_.assign(links_.num_nodes, 0);
  inject_vc_.assign(links_.num_nodes, -1);
  vc_nonempty_.assign((units * num_vcs_ + 63) / 64, 0);
  unit_nonempty_.assign((units + 63) / 64, 0);
  unit_flits_.assign(units, 0);
  queue_nonempty_.assign((links_.num_nodes + 63) / 64, 0);
  // Quiet periods of a live network are bounded by a link and pipeline round trip.
  deadlock_limit_ = params_.deadlock_cycles + 2 * max_latency + params_.routing_delay +
                    params_.vc_alloc_delay + params_.switch_alloc_delay +
                    params_.switch_traversal_delay;
}

int64_t FlitCore::AddPacket(int64_t src, int64_t dst, const int64_t* route, int64_t hops,
                            int64_t flits, int64_t created, int64_t tag) {
  int64_t id = static_cast<int64_t>(packets_.size());
  TVM_FFI_ICHECK(id < std::numeric_limits<int32_t>::max()) << "too many packets";
  packets_.push_back({src, dst, static_cast<int64_t>(route_store_.size()), hops, flits,
                      std::max(created, cycle_), -1, tag});
  route_store_.insert(route_store_.end(), route, route + hops);
  source_queue_[src].push_back(id);
  SetBit(&queue_nonempty_, src);
  ++queued_packets_;
  return id;
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

int64_t FlitCore::NextBusyCycle() const {
  const int64_t now = cycle_;
  int64_t next = kNever;
  if (!ejecting_.empty()) {
    if (ejecting_.front().first <= now) return now;
    next = ejecting_.front().first;
  }
  int64_t depth = params_.vc_buffer_flits;
  int64_t nodes = links_.num_nodes;
  for (int64_t node = NextSet(queue_nonempty_, 0, nodes); node < nodes;
       node = NextSet(queue_nonempty_, node + 1, nodes)) {
    const Packet& p = packets_[source_queue_[node].front()];
    if (p.created > now) {
      next = std::min(next, p.created);
      continue;
    }
    // Injection waits only for room in an injection VC, which a switch grant frees.
    int64_t unit = num_links_ + node;
    for (int64_t v = 0; v < num_vcs_; ++v) {
      if ((inject_vc_[node] < 0 || inject_vc_[node] == v) && vcs_[unit * num_vcs_ + v].count < depth) {
        return now;
      }
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
      int64_t out = NextOutput(vc.Front());
      if (out >= num_links_) return now;
      for (int64_t w = 0; w < num_vcs_; ++w) {
        if (!out_vc_busy_[out * num_vcs_ + w]) return now;
      }
      continue;
    }
    int64_t ready = std::max(vc.sa_ready, vc.Front().arrival);
    int64_t out = vc.out_port;
    if (out < num_links_) {
      ready = std::max(ready, link_free_at_[out]);
      if (credits_[out * num_vcs_ + vc.out_vc] == 0) {
        // The credit comes back with the wheel (no earlier than its next due credit) or after
        // a move downstream; both bound the wait from below.
        if (next_credit < 0) {
          next_credit = kNever;
          int64_t size = static_cast<int64_t>(credit_wheel_.size());
          for (int64_t d = 0; d < size && credits_pending_ > 0; ++d) {
            if (!credit_wheel_[(now + d) % size].empty()) {
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
  int64_t size = static_cast<int64_t>(credit_wheel_.size());
  for (int64_t c = cycle_; c < target && c < cycle_ + size && credits_pending_ > 0; ++c) {
    std::vector<int64_t>& due = credit_wheel_[c % size];
    for (int64_t out_vc : due) ++credits_[out_vc];
    credits_pending_ -= static_cast<int64_t>(due.size());
    due.clear();
  }
  cycle_ = target;
}

int64_t FlitCore::NextOutput(const Flit& flit) const {
  const Packet& p = packets_[flit.packet];
  if (flit.hop < p.hops) return route_store_[p.route_begin + flit.hop];
  return num_links_ + p.dst;  // ejection port
}

int64_t FlitCore::NextSet(const std::vector<uint64_t>& bits, int64_t from, int64_t end) {
  while (from < end) {
    uint64_t word = bits[from >> 6] >> (from & 63);
    if (word != 0) return std::min(end, from + static_cast<int64_t>(__builtin_ctzll(word)));
    from = (from | 63) + 1;
  }
  return end;
}

void FlitCore::Push(int64_t index, const Flit& flit) {
  InputVc* vc = &vcs_[index];
  int64_t depth = params_.vc_buffer_flits;
  vc->ring[(vc->start + vc->count) % depth] = flit;
  if (vc->count++ == 0) {
    if (flit.head) vc->head_ready = flit.arrival + params_.routing_delay;
    SetBit(&vc_nonempty_, index);
  }
  int64_t unit = index / num_vcs_;
  if (unit_flits_[unit]++ == 0) SetBit(&unit_nonempty_, unit);
  ++buffered_flits_;
}

void FlitCore::Pop(int64_t index, int64_t now) {
  InputVc* vc = &vcs_[index];
  bool tail = vc->Front().tail;
  vc->start = (vc->start + 1) % params_.vc_buffer_flits;
  if (--vc->count == 0) ClearBit(&vc_nonempty_, index);
  int64_t unit = index / num_vcs_;
  if (--unit_flits_[unit] == 0) ClearBit(&unit_nonempty_, unit);
  --buffered_flits_;
  if (tail) {
    vc->out_port = -1;
    if (vc->count > 0) {
      vc->head_ready = std::max(vc->Front().arrival, now + 1) + params_.routing_delay;
    }
  }
}

// Move one flit of the node's oldest queued packet into an injection VC.
void FlitCore::Inject(int64_t node) {
  std::deque<int64_t>& queue = source_queue_[node];
  if (queue.empty()) return;
  Packet& p = packets_[queue.front()];
  if (p.created > cycle_) return;
  int64_t unit = num_links_ + node;
  if (inject_vc_[node] < 0) {
    // A new packet takes an empty VC if there is one, else any VC with room.
    for (int pass = 0; pass < 2 && inject_vc_[node] < 0; ++pass) {
      for (int64_t k = 0; k < num_vcs_; ++k) {
        int64_t v = (unit_rr_[unit] + k) % num_vcs_;
        const InputVc& vc = Vc(unit, v);
        if (pass == 0 ? vc.count == 0 : vc.count < params_.vc_buffer_flits) {
          inject_vc_[node] = v;
          break;
        }
      }
    }
    if (inject_vc_[node] < 0) return;
  }
  int64_t index = unit * num_vcs_ + inject_vc_[node];
  if (vcs_[index].count >= params_.vc_buffer_flits) return;
  int64_t k = inject_flit_[node];
  if (k == 0) p.injected = cycle_;
  bool tail = k + 1 == p.flits;
  Push(index, {static_cast<int32_t>(queue.front()), 0, cycle_, k == 0, tail});
  last_move_ = cycle_;
  if (tail) {
    queue.pop_front();
    if (queue.empty()) ClearBit(&queue_nonempty_, node);
    --queued_packets_;
    inject_flit_[node] = 0;
    inject_vc_[node] = -1;
  } else {
    inject_flit_[node] = k + 1;
  }
}

// Heads whose route is computed take a free VC of their output link; ejection always grants.
void FlitCore::AllocateVcs() {
  int64_t total = static_cast<int64_t>(vcs_.size());
  int64_t first = cycle_ % total;
  // Non-empty VCs from `first` to the end, then from 0 to `first`.
  for (int pass = 0; pass < 2; ++pass) {
    int64_t end = pass == 0 ? total : first;
    for (int64_t i = NextSet(vc_nonempty_, pass == 0 ? first : 0, end); i < end;
         i = NextSet(vc_nonempty_, i + 1, end)) {
      AllocateVc(&vcs_[i]);
    }
  }
}

void FlitCore::AllocateVc(InputVc* vc_pointer) {
  InputVc& vc = *vc_pointer;
  {
    if (vc.count == 0 || vc.out_port >= 0 || vc.head_ready > cycle_) return;
    int64_t out = NextOutput(vc.Front());
    if (out >= num_links_) {
      vc.out_port = out;
      vc.sa_ready = cycle_ + params_.vc_alloc_delay;
      return;
    }
    // Of the free VCs, take the emptiest downstream (most credits), so a packet rarely waits
    // behind the tail of the one before it.
    int64_t best = -1;
    for (int64_t k = 0; k < num_vcs_; ++k) {
      int64_t w = (cycle_ + k) % num_vcs_;
      int64_t index = out * num_vcs_ + w;
      if (!out_vc_busy_[index] && (best < 0 || credits_[index] > credits_[out * num_vcs_ + best])) {
        best = w;
      }
    }
    if (best >= 0) {
      out_vc_busy_[out * num_vcs_ + best] = true;
      vc.out_port = out;
      vc.out_vc = best;
      vc.sa_ready = cycle_ + params_.vc_alloc_delay;
    }
  }
}

// Each input unit, in rotating order, sends its first ready flit whose output is still free
// this cycle and has a credit.
void FlitCore::AllocateSwitch() {
  int64_t units = NumUnits();
  int64_t first = cycle_ % units;
  for (int pass = 0; pass < 2; ++pass) {
    int64_t end = pass == 0 ? units : first;
    for (int64_t unit = NextSet(unit_nonempty_, pass == 0 ? first : 0, end); unit < end;
         unit = NextSet(unit_nonempty_, unit + 1, end)) {
      SwitchUnit(unit);
    }
  }
}

void FlitCore::SwitchUnit(int64_t unit) {
  int64_t to_switch_end = params_.switch_alloc_delay + params_.switch_traversal_delay;
  {
    for (int64_t k = 0; k < num_vcs_; ++k) {
      int64_t v = (unit_rr_[unit] + k) % num_vcs_;
      InputVc& vc = Vc(unit, v);
      if (vc.count == 0 || vc.out_port < 0 || vc.sa_ready > cycle_) continue;
      const Flit flit = vc.Front();
      if (flit.arrival > cycle_) continue;
      int64_t out = vc.out_port;
      if (out_granted_at_[out] == cycle_) continue;
      bool to_link = out < num_links_;
      if (to_link && (link_free_at_[out] > cycle_ || credits_[out * num_vcs_ + vc.out_vc] == 0)) {
        continue;
      }
      out_granted_at_[out] = cycle_;
      int64_t out_vc = vc.out_vc;
      Pop(unit * num_vcs_ + v, cycle_);
      if (unit < num_links_) {
        int64_t delay = std::max<int64_t>(1, links_.latency[unit]);
        credit_wheel_[(cycle_ + delay) % credit_wheel_.size()].push_back(unit * num_vcs_ + v);
        ++credits_pending_;
      }
      if (to_link) {
        --credits_[out * num_vcs_ + out_vc];
        link_free_at_[out] = cycle_ + links_.cycles_per_flit[out];
        ++link_flits_[out];
        if (flit.tail) out_vc_busy_[out * num_vcs_ + out_vc] = false;
        int64_t arrival = cycle_ + to_switch_end + links_.latency[out];
        Push(out * num_vcs_ + out_vc, {flit.packet, flit.hop + 1, arrival, flit.head, flit.tail});
      } else {
        ejecting_.emplace_back(cycle_ + to_switch_end - 1, flit.packet);
        ejecting_tail_.push_back(flit.tail);
      }
      unit_rr_[unit] = (v + 1) % num_vcs_;
      last_move_ = cycle_;
      break;
    }
  }
}

int64_t FlitCore::Step(std::vector<Ejection>* ejected) {
  std::vector<int64_t>& due = credit_wheel_[cycle_ % credit_wheel_.size()];
  for (int64_t out_vc : due) ++credits_[out_vc];
  credits_pending_ -= static_cast<int64_t>(due.size());
  due.clear();
  int64_t nodes = links_.num_nodes;
  for (int64_t node = NextSet(queue_nonempty_, 0, nodes); node < nodes;
       node = NextSet(queue_nonempty_, node + 1, nodes)) {
    Inject(node);
  }
  AllocateVcs();
  AllocateSwitch();
  int64_t flits = 0;
  while (!ejecting_.empty() && ejecting_.front().first <= cycle_) {
    if (ejecting_tail_.front()) ejected->push_back({ejecting_.front().second, cycle_});
    ejecting_.pop_front();
    ejecting_tail_.pop_front();
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
      count += vc.ring[(vc.start + i) % params_.vc_buffer_flits].tail ? 1 : 0;
    }
  }
  for (bool tail : ejecting_tail_) count += tail ? 1 : 0;
  return count;
}

void FlitCore::ReportDeadlock() const {
  std::vector<int64_t> blocked;
  for (int64_t i = 0; i < static_cast<int64_t>(vcs_.size()); ++i) {
    const InputVc& vc = vcs_[i];
    if (vc.count == 0) continue;
    int64_t out = vc.out_port >= 0 ? vc.out_port : NextOutput(vc.Front());
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
FlitLinks InferLinks(const NetworkSpec& spec, double flit_bytes) {
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
    double per_flit = std::ceil(flit_bytes / spec.link_bandwidth[l] - 1e-9);
    links.cycles_per_flit.push_back(std::max<int64_t>(1, static_cast<int64_t>(per_flit)));
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
        core_(InferLinks(spec, params.flit_bytes), params),
        packets_left_(spec.num_messages * batches, 0) {}

  void Inject(int64_t message, double now, std::vector<Delivery>*) final {
    int64_t created = static_cast<int64_t>(std::ceil(now));
    if (core_.Idle()) core_.SkipTo(created);
    int64_t m = message % spec_.num_messages;
    double packet_bytes = static_cast<double>(params_.packet_flits) * params_.flit_bytes;
    int64_t packets = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(spec_.message_bytes[m] / packet_bytes - 1e-9)));
    const int64_t* route = spec_.route_links + spec_.RouteBegin(m);
    int64_t hops = spec_.RouteEnd(m) - spec_.RouteBegin(m);
    int64_t src = core_.Links().src[route[0]];
    int64_t dst = core_.Links().dst[route[hops - 1]];
    for (int64_t k = 0; k < packets; ++k) {
      core_.AddPacket(src, dst, route, hops, params_.packet_flits, created, message);
    }
    packets_left_[message] += packets;
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
    const std::vector<int64_t>& flits = core_.LinkFlits();
    for (int64_t l = 0; l < spec_.num_links; ++l) {
      link_busy[l] = static_cast<double>(flits[l] * core_.Links().cycles_per_flit[l]);
    }
  }

 private:
  // Cycle c's ejections are known (and usable) at time c + 1.
  void StepCycle(std::vector<Delivery>* delivered) {
    ejected_.clear();
    core_.Step(&ejected_);
    for (const Ejection& e : ejected_) {
      int64_t message = core_.GetPacket(e.packet).tag;
      if (--packets_left_[message] == 0) {
        delivered->push_back({message, static_cast<double>(e.cycle + 1)});
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
