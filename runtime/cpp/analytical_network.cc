/*!
 * \file analytical_network.cc
 * \brief Contention-free network: latency of every hop plus serialisation at the slowest link.
 */
#include <algorithm>
#include <limits>
#include <vector>

#include "network_model.h"

namespace tvm_chiplet {
namespace sim {
namespace {

class AnalyticalNetwork : public NetworkModel {
 public:
  explicit AnalyticalNetwork(const NetworkSpec& spec)
      : spec_(spec),
        open_(spec.num_links, false),
        open_start_(spec.num_links, 0.0),
        open_end_(spec.num_links, 0.0),
        busy_(spec.num_links, 0.0) {
    latency_.reserve(spec.num_messages);
    min_bandwidth_.reserve(spec.num_messages);
    for (int64_t m = 0; m < spec.num_messages; ++m) {
      latency_.push_back(spec.RouteLatency(m));
      min_bandwidth_.push_back(spec.RouteMinBandwidth(m));
    }
  }

  void Inject(int64_t message, double now, std::vector<Delivery>* delivered) final {
    int64_t m = message % spec_.num_messages;
    double transfer_end = now + spec_.message_bytes[m] / min_bandwidth_[m];
    if (transfer_end > now) {
      for (int64_t i = spec_.RouteBegin(m); i < spec_.RouteEnd(m); ++i) {
        Occupy(spec_.route_links[i], now, transfer_end);
      }
    }
    delivered->push_back({message, transfer_end + latency_[m]});
  }

  double NextEventTime() final { return std::numeric_limits<double>::infinity(); }

  void AdvanceTo(double, std::vector<Delivery>*) final {}

  void WriteLinkBusyCycles(double, double* link_busy) final {
    for (int64_t l = 0; l < spec_.num_links; ++l) {
      link_busy[l] = busy_[l] + (open_[l] ? open_end_[l] - open_start_[l] : 0.0);
    }
  }

 private:
  // Intervals arrive in non-decreasing start order, so the union per link is one open interval
  // plus the closed total.
  void Occupy(int64_t link, double start, double end) {
    if (open_[link] && start <= open_end_[link]) {
      open_end_[link] = std::max(open_end_[link], end);
      return;
    }
    if (open_[link]) busy_[link] += open_end_[link] - open_start_[link];
    open_[link] = true;
    open_start_[link] = start;
    open_end_[link] = end;
  }

  NetworkSpec spec_;
  std::vector<double> latency_;
  std::vector<double> min_bandwidth_;
  std::vector<bool> open_;
  std::vector<double> open_start_;
  std::vector<double> open_end_;
  std::vector<double> busy_;
};

}  // namespace

std::unique_ptr<NetworkModel> MakeAnalyticalNetwork(const NetworkSpec& spec, int64_t) {
  return std::make_unique<AnalyticalNetwork>(spec);
}

}  // namespace sim
}  // namespace tvm_chiplet
