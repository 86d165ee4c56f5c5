/*!
 * \file ffi_api.cc
 * \brief tvm-ffi entry points of the simulator: `chiplet.sim.start` (a simulation run in
 *        slices) and `chiplet.sim.network_models`.
 *
 * Arrays come in as DLPack tensors (numpy through tvm_ffi); their dtype and shape are checked
 * here, their values by the Python caller (runtime/simulator.py). Results are written into
 * caller-allocated float64 arrays.
 */
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "flit_network.h"
#include "network_model.h"
#include "simulator.h"

namespace tvm_chiplet {
namespace sim {
namespace {

using tvm::ffi::TensorView;

void CheckArray(const TensorView& array, const char* name, DLDataTypeCode code, int64_t length) {
  const char* expected = code == kDLFloat ? "float64" : "int64";
  TVM_FFI_CHECK(array.dtype().code == code && array.dtype().bits == 64 && array.dtype().lanes == 1,
                TypeError)
      << "`" << name << "` must be a " << expected << " array";
  TVM_FFI_CHECK(array.device().device_type == kDLCPU, TypeError)
      << "`" << name << "` must live on the CPU";
  TVM_FFI_CHECK(array.ndim() == 1 && array.IsContiguous(), TypeError)
      << "`" << name << "` must be a contiguous 1-d array, got " << array.ndim() << " dimensions";
  TVM_FFI_CHECK(length < 0 || array.size(0) == length, ValueError)
      << "`" << name << "` must have " << length << " elements, got " << array.size(0);
}

void CheckOutput(const TensorView& array, const char* name, int64_t rows, int64_t cols) {
  TVM_FFI_CHECK(array.dtype().code == kDLFloat && array.dtype().bits == 64 &&
                    array.dtype().lanes == 1 && array.device().device_type == kDLCPU,
                TypeError)
      << "`" << name << "` must be a float64 CPU array";
  TVM_FFI_CHECK(array.IsContiguous() && array.numel() == rows * cols, ValueError)
      << "`" << name << "` must be a contiguous array of " << rows << " x " << cols
      << " elements, got " << array.numel();
}

template <typename T>
const T* Data(const TensorView& array) {
  return static_cast<const T*>(array.data_ptr());
}

double* MutableData(const TensorView& array) { return static_cast<double*>(array.data_ptr()); }

using ModelFactory =
    std::function<std::unique_ptr<NetworkModel>(const NetworkSpec& spec, int64_t batches)>;

/*! \brief A checked simulation and everything it points into. */
struct RunState {
  std::vector<tvm::ffi::Tensor> arrays;  // keeps borrowed arrays alive (may be empty)
  NetworkSpec spec;
  TaskGraph graph;
  SimulationOutput out;
  std::unique_ptr<NetworkModel> model;
  std::unique_ptr<Simulation> simulation;
  int64_t total_tasks = 0;
};

void Prepare(TensorView task_cluster, TensorView task_cycles, int64_t num_clusters,
                 TensorView message_src, TensorView message_dst, TensorView message_bytes,
                 TensorView route_offsets, TensorView route_links, TensorView message_leader,
                 TensorView link_bandwidth, TensorView link_latency, int64_t batches, const ModelFactory& make_model,
                 TensorView task_start, TensorView task_end, TensorView message_arrival,
                 TensorView link_busy, RunState* state) {
  CheckArray(task_cluster, "task_cluster", kDLInt, -1);
  int64_t num_tasks = task_cluster.size(0);
  CheckArray(task_cycles, "task_cycles", kDLFloat, num_tasks);
  CheckArray(message_src, "message_src", kDLInt, -1);
  int64_t num_messages = message_src.size(0);
  CheckArray(message_dst, "message_dst", kDLInt, num_messages);
  CheckArray(message_bytes, "message_bytes", kDLFloat, num_messages);
  CheckArray(route_offsets, "route_offsets", kDLInt, num_messages + 1);
  CheckArray(route_links, "route_links", kDLInt, -1);
  CheckArray(message_leader, "message_leader", kDLInt, num_messages);
  CheckArray(link_bandwidth, "link_bandwidth", kDLFloat, -1);
  int64_t num_links = link_bandwidth.size(0);
  CheckArray(link_latency, "link_latency", kDLFloat, num_links);
  TVM_FFI_CHECK(num_clusters >= 1, ValueError)
      << "num_clusters must be at least 1, got " << num_clusters;
  TVM_FFI_CHECK(batches >= 1, ValueError) << "batches must be at least 1, got " << batches;
  CheckOutput(task_start, "task_start", batches, num_tasks);
  CheckOutput(task_end, "task_end", batches, num_tasks);
  CheckOutput(message_arrival, "message_arrival", batches, num_messages);
  CheckOutput(link_busy, "link_busy", 1, num_links);

  // Values (cluster and task indices, cycles, bytes, links, bandwidths) are validated once,
  // with the tasks' and messages' names, by runtime/simulator.py before it calls here.
  const int64_t* clusters = Data<int64_t>(task_cluster);
  const double* cycles = Data<double>(task_cycles);
  const int64_t* src = Data<int64_t>(message_src);
  const int64_t* dst = Data<int64_t>(message_dst);
  const double* bytes = Data<double>(message_bytes);
  const int64_t* offsets = Data<int64_t>(route_offsets);
  const int64_t* links = Data<int64_t>(route_links);
  const int64_t* leaders = Data<int64_t>(message_leader);
  const double* bandwidth = Data<double>(link_bandwidth);
  const double* latency = Data<double>(link_latency);

  NetworkSpec& spec = state->spec;
  spec.num_links = num_links;
  spec.link_bandwidth = bandwidth;
  spec.link_latency = latency;
  spec.num_messages = num_messages;
  spec.message_bytes = bytes;
  spec.route_offsets = offsets;
  spec.route_links = links;
  spec.message_leader = leaders;
  state->model = make_model(spec, batches);

  TaskGraph& graph = state->graph;
  graph.num_tasks = num_tasks;
  graph.num_clusters = num_clusters;
  graph.task_cluster = clusters;
  graph.task_cycles = cycles;
  graph.num_messages = num_messages;
  graph.message_src = src;
  graph.message_dst = dst;

  SimulationOutput& out = state->out;
  out.task_start = MutableData(task_start);
  out.task_end = MutableData(task_end);
  out.message_arrival = MutableData(message_arrival);
  out.link_busy = MutableData(link_busy);
  state->total_tasks = batches * num_tasks;
  state->simulation =
      std::make_unique<Simulation>(graph, spec, batches, state->model.get(), out);
}

/*!
 * \brief Check the arrays' layout and return a stepper `step(max_seconds) -> [done, finished task
 *  instances, simulated cycles]` that runs the simulation for about `max_seconds` of wall time
 *  per call, so that the caller can report progress and stop between calls (dropping the
 *  stepper frees the simulation). `network` is a name of NetworkModelNames() or "flit", which
 *  reads `flit_params` (FlitParams::FromArray), `flit_bytes` and `skip_dead_cycles`.
 */
tvm::ffi::Function Start(tvm::ffi::Tensor task_cluster, tvm::ffi::Tensor task_cycles,
                         int64_t num_clusters, tvm::ffi::Tensor message_src,
                         tvm::ffi::Tensor message_dst, tvm::ffi::Tensor message_bytes,
                         tvm::ffi::Tensor route_offsets, tvm::ffi::Tensor route_links,
                         tvm::ffi::Tensor message_leader, tvm::ffi::Tensor link_bandwidth,
                         tvm::ffi::Tensor link_latency,
                         int64_t batches, tvm::ffi::String network, tvm::ffi::Tensor flit_params,
                         double flit_bytes, bool skip_dead_cycles, tvm::ffi::Tensor task_start,
                         tvm::ffi::Tensor task_end, tvm::ffi::Tensor message_arrival,
                         tvm::ffi::Tensor link_busy) {
  auto state = std::make_shared<RunState>();
  state->arrays = {task_cluster,   task_cycles,    message_src,  message_dst,
                   message_bytes,  route_offsets,  route_links,  message_leader,
                   link_bandwidth, link_latency,   flit_params,  task_start,
                   task_end,       message_arrival, link_busy};
  std::string name(network);
  ModelFactory make_model;
  if (name == "flit") {
    CheckArray(flit_params, "flit_params", kDLInt, FlitParams::kIntCount);
    FlitParams params = FlitParams::FromArray(Data<int64_t>(flit_params), flit_bytes);
    make_model = [params, skip_dead_cycles](const NetworkSpec& spec, int64_t b) {
      return MakeFlitNetwork(spec, b, params, skip_dead_cycles);
    };
  } else {
    make_model = [name](const NetworkSpec& spec, int64_t b) {
      return MakeNetworkModel(name, spec, b);
    };
  }
  Prepare(task_cluster, task_cycles, num_clusters, message_src, message_dst, message_bytes,
          route_offsets, route_links, message_leader, link_bandwidth, link_latency, batches,
          make_model,
          task_start, task_end, message_arrival, link_busy, state.get());
  return tvm::ffi::Function::FromTyped([state](double max_seconds) {
    TVM_FFI_CHECK(max_seconds > 0.0, ValueError)
        << "max_seconds must be > 0, got " << max_seconds;
    bool done = state->simulation->Run(max_seconds);
    tvm::ffi::Array<double> status;
    status.push_back(done ? 1.0 : 0.0);
    status.push_back(static_cast<double>(state->simulation->FinishedTasks()));
    status.push_back(state->simulation->Now());
    return status;
  });
}

tvm::ffi::Array<tvm::ffi::String> NetworkModels() {
  tvm::ffi::Array<tvm::ffi::String> names;
  for (const std::string& name : NetworkModelNames()) names.push_back(name);
  return names;
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef()
      .def("chiplet.sim.start", Start)
      .def("chiplet.sim.network_models", NetworkModels);
}

}  // namespace sim
}  // namespace tvm_chiplet
