/*!
 * \file network_model.h
 * \brief Interface between the device simulator and a network (NoC / NoP) timing model.
 *
 * The simulator owns tasks and clusters; a network model owns messages while they cross links.
 * A message instance is identified by `batch * num_messages + message`. The simulator injects a
 * message when its source task finishes and learns its arrival time from a Delivery. Models with
 * internal events (link sharing, and later a cycle-level flit model) announce their next event
 * time and are advanced to it; closed-form models deliver at injection.
 */
#ifndef TVM_CHIPLET_RUNTIME_CPP_NETWORK_MODEL_H_
#define TVM_CHIPLET_RUNTIME_CPP_NETWORK_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tvm_chiplet {
namespace sim {

/*! \brief Links and message routes, borrowed from the caller's arrays (not owned). */
struct NetworkSpec {
  int64_t num_links = 0;
  const double* link_bandwidth = nullptr;  // bytes per cycle, > 0
  const double* link_latency = nullptr;    // cycles, >= 0
  int64_t num_messages = 0;                // messages per batch
  const double* message_bytes = nullptr;   // [num_messages]
  const int64_t* route_offsets = nullptr;  // [num_messages + 1], CSR offsets into route_links
  const int64_t* route_links = nullptr;    // link ids, in travel order
  // [num_messages] or null (all unicast): the first message of the multicast a message belongs
  // to (itself for a unicast). A multicast's messages leave the same task with the same bytes;
  // models that replicate packets in the routers send them once over the union of their routes.
  const int64_t* message_leader = nullptr;

  int64_t Leader(int64_t message) const {
    return message_leader == nullptr ? message : message_leader[message];
  }

  int64_t RouteBegin(int64_t message) const { return route_offsets[message]; }
  int64_t RouteEnd(int64_t message) const { return route_offsets[message + 1]; }
  double RouteLatency(int64_t message) const;
  double RouteMinBandwidth(int64_t message) const;
};

/*! \brief A message instance whose arrival time at its destination is known. */
struct Delivery {
  int64_t message;  // batch * num_messages + message
  double arrival;   // cycles
};

/*! \brief A network timing model. Calls come with non-decreasing times. */
class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  /*!
   * \brief Start sending a message instance with a non-empty route at time `now`.
   * \param delivered Receives the delivery if the model knows the arrival time already.
   */
  virtual void Inject(int64_t message, double now, std::vector<Delivery>* delivered) = 0;
  /*! \brief Earliest time of an internal event (e.g. a transfer finishing); +inf if none. */
  virtual double NextEventTime() = 0;
  /*! \brief Move the model to time `t`, appending the messages whose arrival became known. */
  virtual void AdvanceTo(double t, std::vector<Delivery>* delivered) = 0;
  /*!
   * \brief Advance through internal events up to time `limit` (+inf: no limit), stopping after
   *  the first call that delivers a message or after about `max_work` units of work (events or
   *  cycles), and return the time reached (+inf when no event is left and `limit` is +inf).
   *  The caller then handles its own events up to that time. Same results as calling
   *  AdvanceTo(min(limit, NextEventTime())) once, which is the default.
   */
  virtual double AdvanceUntil(double limit, int64_t max_work, std::vector<Delivery>* delivered);
  /*! \brief Close the books at `end` and write the cycles each link carried traffic. */
  virtual void WriteLinkBusyCycles(double end, double* link_busy) = 0;
};

/*! \brief Names accepted by MakeNetworkModel, in a fixed order. */
const std::vector<std::string>& NetworkModelNames();

/*!
 * \brief Create the named model over `spec` for `batches` batches.
 * \throws ValueError naming the valid models when `name` is unknown.
 */
std::unique_ptr<NetworkModel> MakeNetworkModel(const std::string& name, const NetworkSpec& spec,
                                               int64_t batches);

std::unique_ptr<NetworkModel> MakeAnalyticalNetwork(const NetworkSpec& spec, int64_t batches);
std::unique_ptr<NetworkModel> MakeFlowNetwork(const NetworkSpec& spec, int64_t batches);

}  // namespace sim
}  // namespace tvm_chiplet

#endif  // TVM_CHIPLET_RUNTIME_CPP_NETWORK_MODEL_H_
