/*!
 * \file simulator.cc
 * \brief Event loop of the device simulator.
 */
#include "simulator.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <queue>
#include <vector>

namespace tvm_chiplet {
namespace sim {
namespace {

enum class EventKind : int { kArrival = 0, kTaskEnd = 1 };

struct Event {
  double time;
  EventKind kind;
  int64_t id;  // message instance for arrivals, task instance for task ends

  bool operator>(const Event& other) const {
    if (time != other.time) return time > other.time;
    if (kind != other.kind) return kind > other.kind;
    return id > other.id;
  }
};

/*! \brief Compressed rows: row r holds items[offsets[r] .. offsets[r + 1]). */
struct Rows {
  std::vector<int64_t> offsets;
  std::vector<int64_t> items;

  // Items are appended per row in increasing item order, which keeps cluster order stable.
  static Rows Group(int64_t num_rows, int64_t num_items, const int64_t* row_of_item) {
    Rows rows;
    rows.offsets.assign(num_rows + 1, 0);
    for (int64_t i = 0; i < num_items; ++i) ++rows.offsets[row_of_item[i] + 1];
    for (int64_t r = 0; r < num_rows; ++r) rows.offsets[r + 1] += rows.offsets[r];
    rows.items.resize(num_items);
    std::vector<int64_t> cursor(rows.offsets.begin(), rows.offsets.end() - 1);
    for (int64_t i = 0; i < num_items; ++i) rows.items[cursor[row_of_item[i]]++] = i;
    return rows;
  }
  int64_t Size(int64_t row) const { return offsets[row + 1] - offsets[row]; }
  int64_t At(int64_t row, int64_t k) const { return items[offsets[row] + k]; }
};

}  // namespace

class EventLoop {
 public:
  EventLoop(const TaskGraph& graph, const NetworkSpec& network_spec, int64_t batches,
            NetworkModel* network, const SimulationOutput& out)
      : graph_(graph),
        network_spec_(network_spec),
        batches_(batches),
        network_(network),
        out_(out),
        cluster_tasks_(Rows::Group(graph.num_clusters, graph.num_tasks, graph.task_cluster)),
        task_outgoing_(Rows::Group(graph.num_tasks, graph.num_messages, graph.message_src)),
        cluster_position_(graph.num_clusters, 0),
        cluster_busy_(graph.num_clusters, false) {
    std::vector<int64_t> incoming(graph.num_tasks, 0);
    for (int64_t m = 0; m < graph.num_messages; ++m) ++incoming[graph.message_dst[m]];
    inputs_missing_.resize(batches * graph.num_tasks);
    for (int64_t b = 0; b < batches; ++b) {
      std::copy(incoming.begin(), incoming.end(), inputs_missing_.begin() + b * graph.num_tasks);
    }
  }

  // Returns true when the simulation is over.
  bool Run(double max_seconds) {
    if (done_) return true;
    auto start = std::chrono::steady_clock::now();
    if (!started_) {
      started_ = true;
      for (int64_t c = 0; c < graph_.num_clusters; ++c) TryStart(c, 0.0);
    }
    std::vector<Delivery> delivered;
    for (int64_t iteration = 1;; ++iteration) {
      if (iteration % kClockEvery == 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
              max_seconds) {
        return false;
      }
      double next_event = events_.empty() ? kNever : events_.top().time;
      delivered.clear();
      double now = network_->AdvanceUntil(next_event, kNetworkWork, &delivered);
      if (now == kNever) break;
      ScheduleArrivals(delivered);
      while (!events_.empty() && events_.top().time <= now) {
        Event event = events_.top();
        events_.pop();
        if (event.kind == EventKind::kTaskEnd) {
          FinishTask(event.id, event.time);
        } else {
          Arrive(event.id, event.time);
        }
      }
      last_time_ = now;
    }
    network_->WriteLinkBusyCycles(last_time_, out_.link_busy);
    done_ = true;
    return true;
  }

  int64_t Finished() const { return finished_; }
  double Now() const { return last_time_; }

 private:
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  // Iterations between looks at the clock, and network work (events or cycles) per iteration.
  static constexpr int64_t kClockEvery = 16;
  static constexpr int64_t kNetworkWork = 1024;

  void ScheduleArrivals(const std::vector<Delivery>& delivered) {
    for (const Delivery& d : delivered) events_.push({d.arrival, EventKind::kArrival, d.message});
  }

  // Start the cluster's next task instance if the cluster is free and its inputs are in.
  void TryStart(int64_t cluster, double now) {
    int64_t per_batch = cluster_tasks_.Size(cluster);
    int64_t position = cluster_position_[cluster];
    if (cluster_busy_[cluster] || position >= per_batch * batches_) return;
    int64_t batch = position / per_batch;
    int64_t task = cluster_tasks_.At(cluster, position % per_batch);
    int64_t instance = batch * graph_.num_tasks + task;
    if (inputs_missing_[instance] > 0) return;
    cluster_busy_[cluster] = true;
    ++cluster_position_[cluster];
    double end = now + graph_.task_cycles[task];
    out_.task_start[instance] = now;
    out_.task_end[instance] = end;
    events_.push({end, EventKind::kTaskEnd, instance});
  }

  void FinishTask(int64_t instance, double now) {
    ++finished_;
    int64_t batch = instance / graph_.num_tasks;
    int64_t task = instance % graph_.num_tasks;
    std::vector<Delivery> delivered;
    for (int64_t k = 0; k < task_outgoing_.Size(task); ++k) {
      int64_t message = task_outgoing_.At(task, k);
      int64_t message_instance = batch * graph_.num_messages + message;
      if (network_spec_.RouteBegin(message) == network_spec_.RouteEnd(message)) {
        delivered.push_back({message_instance, now});
      } else {
        network_->Inject(message_instance, now, &delivered);
      }
    }
    ScheduleArrivals(delivered);
    int64_t cluster = graph_.task_cluster[task];
    cluster_busy_[cluster] = false;
    TryStart(cluster, now);
  }

  void Arrive(int64_t message_instance, double now) {
    out_.message_arrival[message_instance] = now;
    int64_t batch = message_instance / graph_.num_messages;
    int64_t dst = graph_.message_dst[message_instance % graph_.num_messages];
    --inputs_missing_[batch * graph_.num_tasks + dst];
    TryStart(graph_.task_cluster[dst], now);
  }

  TaskGraph graph_;
  NetworkSpec network_spec_;
  int64_t batches_;
  NetworkModel* network_;
  SimulationOutput out_;
  Rows cluster_tasks_;
  Rows task_outgoing_;
  std::vector<int64_t> cluster_position_;  // index into the cluster's (batch, task) sequence
  std::vector<bool> cluster_busy_;
  std::vector<int64_t> inputs_missing_;  // per task instance: messages not yet arrived
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int64_t finished_ = 0;
  double last_time_ = 0.0;
  bool started_ = false;
  bool done_ = false;
};

Simulation::Simulation(const TaskGraph& graph, const NetworkSpec& network_spec, int64_t batches,
                       NetworkModel* network, const SimulationOutput& out)
    : loop_(std::make_unique<EventLoop>(graph, network_spec, batches, network, out)) {}

Simulation::~Simulation() = default;

bool Simulation::Run(double max_seconds) { return loop_->Run(max_seconds); }

int64_t Simulation::FinishedTasks() const { return loop_->Finished(); }

double Simulation::Now() const { return loop_->Now(); }

int64_t Simulate(const TaskGraph& graph, const NetworkSpec& network_spec, int64_t batches,
                 NetworkModel* network, const SimulationOutput& out) {
  Simulation simulation(graph, network_spec, batches, network, out);
  simulation.Run(std::numeric_limits<double>::infinity());
  return simulation.FinishedTasks();
}

}  // namespace sim
}  // namespace tvm_chiplet
