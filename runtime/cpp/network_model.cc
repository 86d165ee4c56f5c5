/*!
 * \file network_model.cc
 * \brief Route helpers and the registry of network models.
 */
#include "network_model.h"

#include <tvm/ffi/error.h>

#include <algorithm>
#include <limits>
#include <sstream>

namespace tvm_chiplet {
namespace sim {

double NetworkSpec::RouteLatency(int64_t message) const {
  double latency = 0.0;
  for (int64_t i = RouteBegin(message); i < RouteEnd(message); ++i) {
    latency += link_latency[route_links[i]];
  }
  return latency;
}

double NetworkSpec::RouteMinBandwidth(int64_t message) const {
  double bandwidth = std::numeric_limits<double>::infinity();
  for (int64_t i = RouteBegin(message); i < RouteEnd(message); ++i) {
    bandwidth = std::min(bandwidth, link_bandwidth[route_links[i]]);
  }
  return bandwidth;
}

double NetworkModel::AdvanceUntil(double limit, int64_t, std::vector<Delivery>* delivered) {
  double t = std::min(limit, NextEventTime());
  if (t != std::numeric_limits<double>::infinity()) AdvanceTo(t, delivered);
  return t;
}

const std::vector<std::string>& NetworkModelNames() {
  static const std::vector<std::string> names = {"analytical", "flow"};
  return names;
}

std::unique_ptr<NetworkModel> MakeNetworkModel(const std::string& name, const NetworkSpec& spec,
                                               int64_t batches) {
  if (name == "analytical") return MakeAnalyticalNetwork(spec, batches);
  if (name == "flow") return MakeFlowNetwork(spec, batches);
  std::ostringstream valid;
  for (const std::string& known : NetworkModelNames()) valid << " '" << known << "'";
  TVM_FFI_THROW(ValueError) << "unknown network model '" << name << "'; expected one of" << valid.str();
  return nullptr;
}

}  // namespace sim
}  // namespace tvm_chiplet
