/*!
 * \file noc_traffic.cc
 * \brief Synthetic-traffic driver of the flit network: `chiplet.noc.simulate`.
 *
 * Open-loop mode: every cycle each node creates a packet with probability rate / packet_flits
 * (Bernoulli), to a destination drawn from the traffic pattern; packets created during the
 * measurement window (after `warmup` cycles, for `cycles` cycles) give the latency and
 * throughput figures. Batch mode: each node queues `batch_packets` packets at cycle 0 and the
 * network runs until all are delivered.
 */
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "flit_network.h"

namespace tvm_chiplet {
namespace sim {
namespace {

using tvm::ffi::TensorView;

enum class Traffic : int64_t { kUniform = 0, kPermutation = 1, kHotspot = 2 };

enum Output : int64_t {
  kAvgPacketLatency = 0,
  kAvgNetworkLatency,
  kAcceptedThroughput,
  kOfferedThroughput,
  kInjectedPackets,
  kDeliveredPackets,
  kInFlightPackets,
  kDrainCycles,
  kMeasuredDelivered,
  kMeasuredCreated,
  kOutputCount
};

/*! \brief SplitMix64: small, fast and identical on every platform. */
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

const int64_t* Ints(const TensorView& array, const char* name, int64_t length) {
  TVM_FFI_CHECK(array.dtype().code == kDLInt && array.dtype().bits == 64 &&
                    array.device().device_type == kDLCPU && array.ndim() == 1 &&
                    array.IsContiguous(),
                TypeError)
      << "`" << name << "` must be a contiguous 1-d int64 CPU array";
  TVM_FFI_CHECK(length < 0 || array.size(0) == length, ValueError)
      << "`" << name << "` must have " << length << " elements, got " << array.size(0);
  return static_cast<const int64_t*>(array.data_ptr());
}

class TrafficRun {
 public:
  TrafficRun(FlitCore* core, const int64_t* pair_offsets, const int64_t* pair_links,
             Traffic traffic, const int64_t* dest_table, int64_t hotspot, double hotspot_fraction,
             int64_t packet_flits, double flit_bytes, uint64_t seed)
      : core_(core),
        nodes_(core->Links().num_nodes),
        pair_offsets_(pair_offsets),
        pair_links_(pair_links),
        traffic_(traffic),
        dest_table_(dest_table),
        hotspot_(hotspot),
        hotspot_fraction_(hotspot_fraction),
        packet_flits_(packet_flits),
        flit_bytes_(flit_bytes),
        random_(seed) {}

  void OpenLoop(double rate, int64_t warmup, int64_t cycles, double* out) {
    double probability = rate / static_cast<double>(packet_flits_);
    int64_t end = warmup + cycles;
    int64_t accepted_flits = 0, offered_flits = 0;
    for (int64_t c = 0; c < end; ++c) {
      for (int64_t node = 0; node < nodes_; ++node) {
        if (random_.Uniform() >= probability) continue;
        Add(node, Destination(node), c);
        if (c >= warmup) {
          offered_flits += packet_flits_;
          ++measured_created_;
        }
      }
      int64_t flits = Step(warmup);
      if (c >= warmup) accepted_flits += flits;
    }
    double node_cycles = static_cast<double>(nodes_) * static_cast<double>(cycles);
    Finish(out);
    out[kAcceptedThroughput] = accepted_flits / node_cycles;
    out[kOfferedThroughput] = offered_flits / node_cycles;
    out[kDrainCycles] = std::numeric_limits<double>::quiet_NaN();
  }

  void Batch(int64_t packets_per_node, double* out) {
    for (int64_t node = 0; node < nodes_; ++node) {
      for (int64_t k = 0; k < packets_per_node; ++k) Add(node, Destination(node), 0);
    }
    measured_created_ = injected_;
    int64_t flits = 0;
    while (!core_->Idle()) {
      core_->SkipDeadCycles(FlitCore::kNever);  // exact: skipped cycles eject nothing
      flits += Step(0);
    }
    double drain = static_cast<double>(last_ejection_ + 1);
    Finish(out);
    out[kAcceptedThroughput] = flits / (static_cast<double>(nodes_) * drain);
    out[kOfferedThroughput] = std::numeric_limits<double>::quiet_NaN();
    out[kDrainCycles] = drain;
  }

 private:
  int64_t Destination(int64_t node) {
    if (traffic_ == Traffic::kPermutation) return dest_table_[node];
    if (traffic_ == Traffic::kHotspot && node != hotspot_ &&
        random_.Uniform() < hotspot_fraction_) {
      return hotspot_;
    }
    if (nodes_ == 1) return node;
    int64_t other = static_cast<int64_t>(random_.Next() % static_cast<uint64_t>(nodes_ - 1));
    return other >= node ? other + 1 : other;
  }

  void Add(int64_t src, int64_t dst, int64_t cycle) {
    int64_t pair = src * nodes_ + dst;
    int64_t begin = pair_offsets_[pair];
    core_->AddMessage(src, dst, pair_links_ + begin, pair_offsets_[pair + 1] - begin,
                      packet_flits_, flit_bytes_, cycle, cycle);
    ++injected_;
  }

  // One cycle; latencies count packets created from cycle `measure_from` on.
  int64_t Step(int64_t measure_from) {
    ejected_.clear();
    int64_t flits = core_->Step(&ejected_);
    for (const Ejection& e : ejected_) {
      ++delivered_;
      last_ejection_ = e.cycle;
      if (e.created < measure_from) continue;
      ++measured_delivered_;
      packet_latency_ += static_cast<double>(e.cycle - e.created + 1);
      network_latency_ += static_cast<double>(e.cycle - e.injected + 1);
    }
    return flits;
  }

  void Finish(double* out) {
    double n = static_cast<double>(measured_delivered_);
    double nan = std::numeric_limits<double>::quiet_NaN();
    out[kAvgPacketLatency] = measured_delivered_ ? packet_latency_ / n : nan;
    out[kAvgNetworkLatency] = measured_delivered_ ? network_latency_ / n : nan;
    out[kInjectedPackets] = static_cast<double>(injected_);
    out[kDeliveredPackets] = static_cast<double>(delivered_);
    out[kInFlightPackets] = static_cast<double>(core_->CountPacketsInFlight());
    out[kMeasuredDelivered] = n;
    out[kMeasuredCreated] = static_cast<double>(measured_created_);
  }

  FlitCore* core_;
  int64_t nodes_;
  const int64_t* pair_offsets_;
  const int64_t* pair_links_;
  Traffic traffic_;
  const int64_t* dest_table_;
  int64_t hotspot_;
  double hotspot_fraction_;
  int64_t packet_flits_;
  double flit_bytes_;
  Random random_;
  std::vector<Ejection> ejected_;
  int64_t injected_ = 0;
  int64_t delivered_ = 0;
  int64_t measured_delivered_ = 0;
  int64_t measured_created_ = 0;
  int64_t last_ejection_ = -1;
  double packet_latency_ = 0.0;
  double network_latency_ = 0.0;
};

/*!
 * \brief Run synthetic traffic; `out` receives the Output fields (float64).
 * \param pair_offsets [nodes * nodes + 1] CSR offsets of the route from src to dst
 *        (index src * nodes + dst) into `pair_links`.
 */
void Simulate(TensorView link_src, TensorView link_dst, TensorView link_latency,
              TensorView link_bandwidth, int64_t num_nodes, TensorView pair_offsets,
              TensorView pair_links, int64_t traffic, TensorView dest_table, int64_t hotspot,
              double hotspot_fraction, double rate, int64_t cycles, int64_t warmup, int64_t seed,
              int64_t batch_packets, TensorView flit_params, double flit_bytes, TensorView out) {
  TVM_FFI_CHECK(num_nodes >= 1, ValueError) << "num_nodes must be >= 1, got " << num_nodes;
  int64_t num_links = link_src.size(0);
  FlitLinks links;
  links.num_nodes = num_nodes;
  const int64_t* src = Ints(link_src, "link_src", -1);
  const int64_t* dst = Ints(link_dst, "link_dst", num_links);
  const int64_t* latency = Ints(link_latency, "link_latency", num_links);
  TVM_FFI_CHECK(link_bandwidth.dtype().code == kDLFloat && link_bandwidth.dtype().bits == 64 &&
                    link_bandwidth.device().device_type == kDLCPU && link_bandwidth.ndim() == 1 &&
                    link_bandwidth.IsContiguous() && link_bandwidth.size(0) == num_links,
                TypeError)
      << "`link_bandwidth` must be a contiguous 1-d float64 CPU array of " << num_links
      << " elements";
  const double* bandwidth = static_cast<const double*>(link_bandwidth.data_ptr());
  for (int64_t l = 0; l < num_links; ++l) {
    TVM_FFI_CHECK(src[l] >= 0 && src[l] < num_nodes && dst[l] >= 0 && dst[l] < num_nodes &&
                      latency[l] >= 0,
                  ValueError)
        << "link " << l << " (" << src[l] << "->" << dst[l] << ", latency " << latency[l]
        << ") is invalid for " << num_nodes << " nodes";
  }
  links.src.assign(src, src + num_links);
  links.dst.assign(dst, dst + num_links);
  links.latency.assign(latency, latency + num_links);
  links.bandwidth.assign(bandwidth, bandwidth + num_links);
  const int64_t* offsets = Ints(pair_offsets, "pair_offsets", num_nodes * num_nodes + 1);
  const int64_t* routes = Ints(pair_links, "pair_links", offsets[num_nodes * num_nodes]);
  for (int64_t i = 0; i < pair_links.size(0); ++i) {
    TVM_FFI_CHECK(routes[i] >= 0 && routes[i] < num_links, ValueError)
        << "route entry " << i << " is link " << routes[i] << ", expected 0.." << num_links - 1;
  }
  const int64_t* table = Ints(dest_table, "dest_table", num_nodes);
  TVM_FFI_CHECK(traffic >= 0 && traffic <= 2, ValueError)
      << "traffic kind must be 0 (uniform), 1 (permutation) or 2 (hotspot), got " << traffic;
  TVM_FFI_CHECK(hotspot >= 0 && hotspot < num_nodes, ValueError)
      << "hotspot node " << hotspot << " is not in 0.." << num_nodes - 1;
  TVM_FFI_CHECK(cycles >= 1 && warmup >= 0 && batch_packets >= 0, ValueError)
      << "cycles must be >= 1, warmup and batch_packets >= 0; got " << cycles << ", " << warmup
      << ", " << batch_packets;
  TVM_FFI_CHECK(rate > 0.0 && rate <= 1.0, ValueError) << "rate must be in (0, 1], got " << rate;
  TVM_FFI_CHECK(out.dtype().code == kDLFloat && out.dtype().bits == 64 && out.ndim() == 1 &&
                    out.IsContiguous() && out.size(0) == kOutputCount,
                TypeError)
      << "`out` must be a contiguous float64 array of " << kOutputCount << " elements";
  FlitParams params =
      FlitParams::FromArray(Ints(flit_params, "flit_params", FlitParams::kIntCount), flit_bytes);

  FlitCore core(std::move(links), params);
  TrafficRun run(&core, offsets, routes, static_cast<Traffic>(traffic), table, hotspot,
                 hotspot_fraction, params.packet_flits, params.flit_bytes,
                 static_cast<uint64_t>(seed));
  double* results = static_cast<double*>(out.data_ptr());
  if (batch_packets > 0) {
    run.Batch(batch_packets, results);
  } else {
    run.OpenLoop(rate, warmup, cycles, results);
  }
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef().def("chiplet.noc.simulate", Simulate);
}

}  // namespace sim
}  // namespace tvm_chiplet
