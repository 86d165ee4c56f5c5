/*!
 * \file simulator.h
 * \brief Discrete-event timing simulation of a task graph streamed over clusters and links.
 */
#ifndef TVM_CHIPLET_RUNTIME_CPP_SIMULATOR_H_
#define TVM_CHIPLET_RUNTIME_CPP_SIMULATOR_H_

#include <cstdint>
#include <memory>

#include "network_model.h"

namespace tvm_chiplet {
namespace sim {

/*!
 * \brief Tasks and their dependencies, borrowed from the caller's arrays (not owned).
 *
 * Each cluster runs its tasks one at a time, in increasing task index, batch after batch.
 * Message i carries data from task message_src[i] to task message_dst[i] of the same batch.
 */
struct TaskGraph {
  int64_t num_tasks = 0;
  int64_t num_clusters = 0;
  const int64_t* task_cluster = nullptr;  // [num_tasks]
  const double* task_cycles = nullptr;    // [num_tasks]
  int64_t num_messages = 0;
  const int64_t* message_src = nullptr;  // [num_messages]
  const int64_t* message_dst = nullptr;  // [num_messages]
};

/*! \brief Caller-owned outputs; times the simulation never reached are left untouched. */
struct SimulationOutput {
  double* task_start = nullptr;       // [batches, num_tasks]
  double* task_end = nullptr;         // [batches, num_tasks]
  double* message_arrival = nullptr;  // [batches, num_messages]
  double* link_busy = nullptr;        // [num_links]
};

class EventLoop;

/*!
 * \brief A simulation that runs in slices, so that a caller can report progress and stop it
 *  between them. The graph, spec, network and outputs must outlive it.
 */
class Simulation {
 public:
  Simulation(const TaskGraph& graph, const NetworkSpec& network_spec, int64_t batches,
             NetworkModel* network, const SimulationOutput& out);
  ~Simulation();
  /*!
   * \brief Run for about `max_seconds` of wall time (the clock is read between events, so a
   *  slice may overrun by a few milliseconds).
   * \return true when the simulation is over: every task ran or no event is left.
   */
  bool Run(double max_seconds);
  /*! \brief Task instances finished so far. */
  int64_t FinishedTasks() const;
  /*! \brief Simulated time reached, in cycles. */
  double Now() const;

 private:
  std::unique_ptr<EventLoop> loop_;
};

/*!
 * \brief Run the simulation to completion or until no event is left.
 * \return The number of task instances that finished; fewer than batches * num_tasks means
 *         the remaining tasks wait on each other (a deadlock of cluster order and messages).
 */
int64_t Simulate(const TaskGraph& graph, const NetworkSpec& network_spec, int64_t batches,
                 NetworkModel* network, const SimulationOutput& out);

}  // namespace sim
}  // namespace tvm_chiplet

#endif  // TVM_CHIPLET_RUNTIME_CPP_SIMULATOR_H_
