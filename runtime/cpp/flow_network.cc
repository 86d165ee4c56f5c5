/*!
 * \file flow_network.cc
 * \brief Flow-level network: messages in flight share every link max-min fairly.
 *
 * Rates are constant between events and recomputed (progressive filling) whenever a message
 * starts or finishes its transfer. A message's route latency is paid once, after its last byte
 * leaves, so a message alone on its route takes latency + bytes / min bandwidth.
 *
 * A multicast (NetworkSpec::message_leader) is one flow over the union of its messages' routes:
 * the routers replicate its bytes, so every link of that tree carries them once, at the rate of
 * the tree's most contended link. Each of its messages arrives its own route's latency after
 * the flow's last byte.
 */
#include <tvm/ffi/error.h>

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <vector>

#include "network_model.h"

namespace tvm_chiplet {
namespace sim {
namespace {

// A transfer is complete when this fraction of its bytes is left; absorbs rounding of
// remaining -= rate * dt over many rate changes.
constexpr double kDoneFraction = 1e-9;

class FlowNetwork : public NetworkModel {
 public:
  FlowNetwork(const NetworkSpec& spec, int64_t batches)
      : spec_(spec),
        remaining_(spec.num_messages * batches, 0.0),
        rate_(spec.num_messages * batches, 0.0),
        frozen_(spec.num_messages * batches, false),
        link_flows_(spec.num_links),
        link_since_(spec.num_links, 0.0),
        link_busy_(spec.num_links, 0.0),
        link_capacity_left_(spec.num_links, 0.0),
        link_unfrozen_(spec.num_links, 0) {
    latency_.reserve(spec.num_messages);
    for (int64_t m = 0; m < spec.num_messages; ++m) latency_.push_back(spec.RouteLatency(m));
    // The links of each flow: a unicast's route, or the union of a multicast's routes.
    flow_links_.resize(spec.num_messages);
    multicast_.assign(spec.num_messages, false);
    for (int64_t m = 0; m < spec.num_messages; ++m) {
      int64_t leader = spec.Leader(m);
      if (leader != m) multicast_[leader] = true;
      std::vector<int64_t>& links = flow_links_[leader];
      for (int64_t i = spec.RouteBegin(m); i < spec.RouteEnd(m); ++i) {
        int64_t link = spec.route_links[i];
        if (std::find(links.begin(), links.end(), link) == links.end()) links.push_back(link);
      }
    }
  }

  void Inject(int64_t message, double now, std::vector<Delivery>* delivered) final {
    TVM_FFI_ICHECK(now >= now_) << "flow network injected at " << now << " before " << now_;
    now_ = now;
    int64_t m = message % spec_.num_messages;
    if (spec_.message_bytes[m] <= 0.0) {
      delivered->push_back({message, now + latency_[m]});
      return;
    }
    int64_t leader = spec_.Leader(m);
    int64_t flow = message - m + leader;  // the leader's instance of the same batch
    if (multicast_[leader]) {
      auto done = multicast_done_.find(flow);
      if (done != multicast_done_.end()) {  // sent already (only if injected out of step)
        delivered->push_back({message, std::max(now, done->second) + latency_[m]});
        return;
      }
      auto waiting = multicast_waiting_.find(flow);
      if (waiting != multicast_waiting_.end()) {
        waiting->second.push_back(message);
        return;
      }
      multicast_waiting_[flow] = {message};
    }
    remaining_[flow] = spec_.message_bytes[m];
    active_.push_back(flow);
    bool alone = true;
    for (int64_t link : flow_links_[leader]) {
      if (link_flows_[link].empty()) {
        link_since_[link] = now;
        active_links_.push_back(link);
      } else {
        alone = false;
      }
      link_flows_[link].push_back(flow);
    }
    if (alone) {
      alone_.push_back(flow);
    } else {
      shared_change_ = true;
    }
    rates_stale_ = true;
  }

  double NextEventTime() final {
    if (rates_stale_) ComputeMaxMinRates();
    if (next_stale_) {
      next_stale_ = false;
      next_event_ = std::numeric_limits<double>::infinity();
      for (int64_t f : active_) {
        next_event_ = std::min(next_event_, now_ + remaining_[f] / rate_[f]);
      }
    }
    return next_event_;
  }

  void AdvanceTo(double t, std::vector<Delivery>* delivered) final {
    TVM_FFI_ICHECK(t >= now_) << "flow network moved back from " << now_ << " to " << t;
    if (rates_stale_) ComputeMaxMinRates();
    double previous = now_;
    double dt = t - previous;
    now_ = t;
    next_stale_ = true;
    size_t kept = 0;
    for (int64_t f : active_) {
      double finish = previous + remaining_[f] / rate_[f];
      remaining_[f] = finish <= t ? 0.0 : remaining_[f] - rate_[f] * dt;
      int64_t m = f % spec_.num_messages;
      if (remaining_[f] <= kDoneFraction * spec_.message_bytes[m]) {
        Release(f, t);
        if (multicast_[m]) {
          for (int64_t message : multicast_waiting_[f]) {
            delivered->push_back({message, t + latency_[message % spec_.num_messages]});
          }
          multicast_waiting_.erase(f);
          multicast_done_[f] = t;
        } else {
          delivered->push_back({f, t + latency_[m]});
        }
      } else {
        active_[kept++] = f;
      }
    }
    if (kept != active_.size()) {
      active_.resize(kept);
      rates_stale_ = true;
    }
  }

  void WriteLinkBusyCycles(double end, double* link_busy) final {
    for (int64_t l = 0; l < spec_.num_links; ++l) {
      link_busy[l] = link_busy_[l] + (link_flows_[l].empty() ? 0.0 : end - link_since_[l]);
    }
  }

 private:
  void Release(int64_t flow, double t) {
    for (int64_t link : flow_links_[flow % spec_.num_messages]) {
      std::vector<int64_t>& flows = link_flows_[link];
      for (size_t k = 0; k < flows.size(); ++k) {
        if (flows[k] == flow) {
          flows.erase(flows.begin() + k);
          break;
        }
      }
      if (!flows.empty()) {
        shared_change_ = true;  // the flows left on the link may speed up
      } else {
        link_busy_[link] += t - link_since_[link];
        for (size_t k = 0; k < active_links_.size(); ++k) {
          if (active_links_[k] == link) {
            active_links_.erase(active_links_.begin() + k);
            break;
          }
        }
      }
    }
  }

  // Progressive filling: the link with the smallest fair share fixes the rate of all its
  // unfixed flows; their bandwidth is taken off every link they cross; repeat.
  //
  // When every change since the last filling is a flow alone on all its links (started, or
  // finished), no other flow's rate changes, and a new flow alone gets its slowest link's
  // bandwidth: the share the filling would give it, to the last bit.
  void ComputeMaxMinRates() {
    rates_stale_ = false;
    next_stale_ = true;
    if (!shared_change_) {
      for (int64_t f : alone_) {
        double rate = std::numeric_limits<double>::infinity();
        for (int64_t link : flow_links_[f % spec_.num_messages]) {
          rate = std::min(rate, spec_.link_bandwidth[link]);
        }
        rate_[f] = rate;
      }
      alone_.clear();
      return;
    }
    shared_change_ = false;
    alone_.clear();
    live_links_.clear();
    for (int64_t link : active_links_) {
      link_capacity_left_[link] = spec_.link_bandwidth[link];
      link_unfrozen_[link] = static_cast<int64_t>(link_flows_[link].size());
      live_links_.push_back(link);
    }
    for (int64_t f : active_) frozen_[f] = false;
    size_t unfrozen = active_.size();
    while (unfrozen > 0) {
      // The first link (in order of activation) with the smallest share; links with every
      // flow fixed drop out of the list, in order.
      int64_t bottleneck = -1;
      double share = std::numeric_limits<double>::infinity();
      size_t kept = 0;
      for (int64_t link : live_links_) {
        if (link_unfrozen_[link] == 0) continue;
        live_links_[kept++] = link;
        double link_share = link_capacity_left_[link] / link_unfrozen_[link];
        if (link_share < share) {
          share = link_share;
          bottleneck = link;
        }
      }
      live_links_.resize(kept);
      TVM_FFI_ICHECK(bottleneck >= 0 && share > 0.0)
          << "max-min fair sharing found no positive share for " << unfrozen << " flows";
      for (int64_t f : link_flows_[bottleneck]) {
        if (frozen_[f]) continue;
        frozen_[f] = true;
        rate_[f] = share;
        --unfrozen;
        for (int64_t link : flow_links_[f % spec_.num_messages]) {
          link_capacity_left_[link] -= share;
          --link_unfrozen_[link];
        }
      }
    }
  }

  NetworkSpec spec_;
  std::vector<double> latency_;
  std::vector<std::vector<int64_t>> flow_links_;  // [num_messages]; used for leaders only
  std::vector<bool> multicast_;                   // [num_messages]: leads a multicast
  // Multicast flows in flight -> their messages injected so far; sent ones -> their end.
  std::unordered_map<int64_t, std::vector<int64_t>> multicast_waiting_;
  std::unordered_map<int64_t, double> multicast_done_;
  double now_ = 0.0;
  bool rates_stale_ = false;
  bool next_stale_ = true;     // next_event_ needs recomputing (rates or time changed)
  bool shared_change_ = false;  // a flow sharing a link started or finished since the filling
  std::vector<int64_t> alone_;  // flows started since the filling alone on all their links
  double next_event_ = 0.0;
  std::vector<int64_t> active_;
  std::vector<double> remaining_;
  std::vector<double> rate_;
  std::vector<bool> frozen_;
  std::vector<int64_t> active_links_;
  std::vector<std::vector<int64_t>> link_flows_;
  std::vector<double> link_since_;
  std::vector<double> link_busy_;
  std::vector<double> link_capacity_left_;
  std::vector<int64_t> link_unfrozen_;
  std::vector<int64_t> live_links_;  // filling: active links with flows not yet fixed
};

}  // namespace

std::unique_ptr<NetworkModel> MakeFlowNetwork(const NetworkSpec& spec, int64_t batches) {
  return std::make_unique<FlowNetwork>(spec, batches);
}

}  // namespace sim
}  // namespace tvm_chiplet
