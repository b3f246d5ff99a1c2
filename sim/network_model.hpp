#pragma once
// One interface for the network fidelities. The executor hands a model the
// transfers whose members have all posted (a collective of a communicator, or
// a send/recv pair) and steps the model's own events in time order with its
// event queue; the model says when each transfer finishes. The analytical
// model times a transfer alone (alpha-beta of its communicator), the flow
// model shares link capacity between concurrent flows; both read the same
// cluster and calibration facts.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sim/flow_collectives.hpp"
#include "sim/flow_network.hpp"
#include "sim/link_images.hpp"
#include "sim/network.hpp"
#include "sim/program.hpp"
#include "sim/time.hpp"

namespace trainsim {

// A transfer on communicator `comm` of the bound set: a collective, or a
// point-to-point message from member `sender` (0 or 1) to the other member.
struct TransferRequest {
  std::uint32_t comm = 0;
  bool p2p = false;
  CollectiveKind kind = CollectiveKind::AllReduce;
  int sender = 0;
  std::uint64_t bytes = 0;  // collective: NCCL buffer convention; p2p: payload
  // All-to-all-v: which traffic matrix of the run (kNoMatrix otherwise) and its
  // per-pair bytes, pairs[i * n + j] from member i to member j of the communicator.
  std::uint32_t matrix = kNoMatrix;
  std::span<const double> pairs;

  // What is moved, for caches keyed by (what, bytes): the collective kind, 8 +
  // sender for a message, or 16 + the traffic matrix of an all-to-all-v.
  std::uint32_t what() const {
    if (matrix != kNoMatrix) return 16 + matrix;
    return p2p ? 8 + static_cast<std::uint32_t>(sender) : static_cast<std::uint32_t>(kind);
  }
};

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  // The communicators transfers will name (kept by reference until the run ends).
  virtual void bind(const std::vector<Communicator>& comms) = 0;
  // The GPUs of the simulated ranks. A model that plans every member's flows
  // (flow) keeps, for a communicator with unsimulated members (group
  // representatives), only the flows that reach a simulated GPU.
  virtual void set_simulated_gpus(std::span<const int> gpus) { (void)gpus; }
  // Rank images (sim/link_images.hpp): only the representative GPUs' ranks
  // are simulated, and a model that plans every member's flows (flow) keeps
  // theirs, on the images of their links, with the quotient's capacities.
  // Before the first transfer. A model without links (analytical) ignores it.
  virtual void set_link_images(LinkImages images) { (void)images; }
  // True once a transfer broke the symmetry the images rely on (a double
  // binary tree across the classes' nodes): the run is not exact then.
  virtual bool images_failed() const { return false; }
  // Starts a transfer at `now` (never earlier than the last advance). A model
  // that knows the completion time at once, and never moves it (analytical),
  // returns it and reports nothing later; otherwise it returns Time::max() and
  // `cookie` comes back from advance() when the transfer completes.
  virtual Time start(Time now, const TransferRequest& transfer, std::uint64_t cookie) = 0;
  // Earliest pending completion or internal event; Time::max() when idle.
  virtual Time next_event() const = 0;
  // Processes everything up to and including `now` and appends the transfers
  // completed by then, in (time, start order).
  virtual void advance(Time now, std::vector<TransferDone>& done) = 0;
  // From time `at`, link `link` of the platform's topology carries `capacity`
  // bytes/s (degradation, failure when 0, recovery). A model that cannot
  // represent links throws std::invalid_argument saying so.
  virtual void set_link_capacity(Time at, std::uint32_t link, double capacity) = 0;
  // True when every member of a communicator must be simulated (flows are
  // created per member); false when one representative per class suffices.
  virtual bool needs_every_member() const = 0;
  virtual const char* name() const = 0;
  // Platform facts this model represents only approximately (docs/network.md),
  // for the report: never silent.
  virtual std::vector<std::string> warnings() const = 0;
  // Count the load of links `links` of the platform's topology from now on
  // (WAN utilisation, docs/cross-datacenter.md); a model without links (analytical)
  // ignores it, and link_loads() then returns nothing.
  virtual void track_links(const std::vector<std::uint32_t>& links) { (void)links; }
  // Loads of tracked links, in the order given.
  virtual std::vector<LinkLoad> link_loads(const std::vector<std::uint32_t>& links) const {
    (void)links;
    return {};
  }
};

// Alpha-beta time per transfer on an otherwise idle network (sim/network.hpp):
// the completion is known when the transfer starts (durations cached per
// communicator, kind and size).
class AnalyticalNetworkModel final : public NetworkModel {
 public:
  explicit AnalyticalNetworkModel(const AnalyticalNetwork& network) : network_(&network) {}
  void bind(const std::vector<Communicator>& comms) override;
  Time start(Time now, const TransferRequest& transfer, std::uint64_t cookie) override;
  // How long `transfer` takes: the same whenever it starts (start() adds it to its start).
  Time duration(const TransferRequest& transfer);
  Time next_event() const override { return Time::max(); }
  void advance(Time, std::vector<TransferDone>&) override {}
  void set_link_capacity(Time at, std::uint32_t link, double capacity) override;
  bool needs_every_member() const override { return false; }
  const char* name() const override { return "analytical"; }
  std::vector<std::string> warnings() const override { return network_->warnings(); }

 private:
  const AnalyticalNetwork* network_;
  const std::vector<Communicator>* comms_ = nullptr;
  const CommShape& shape_of(std::uint32_t comm);  // taken on first use
  std::vector<CommShape> shapes_;
  std::vector<std::uint8_t> shaped_;
  int shift_period_ = 0;                   // network_->shift_period()
  std::vector<std::uint32_t> shaped_ids_;  // communicators whose shape was computed, not shared
  // Durations computed so far per communicator, by (what, bytes); what =
  // collective kind, or 8 + sender for a message.
  struct Duration {
    std::uint32_t what;
    std::uint64_t bytes;
    Time time;
  };
  std::vector<std::vector<Duration>> durations_;
};

// Collectives and messages as max-min fair flows on the cluster graph
// (sim/flow_collectives.hpp); plans are made once per (communicator, kind, bytes).
class FlowNetworkModel final : public NetworkModel {
 public:
  explicit FlowNetworkModel(FlowCollectives& flows) : flows_(&flows) {}
  // Owns its FlowCollectives over `topology` (which must outlive the model).
  FlowNetworkModel(const Cluster& cluster, Topology& topology, const std::vector<CalibrationProfile>& profiles);
  void bind(const std::vector<Communicator>& comms) override;
  void set_simulated_gpus(std::span<const int> gpus) override;
  void set_link_images(LinkImages images) override;
  bool images_failed() const override { return images_failed_; }
  Time start(Time now, const TransferRequest& transfer, std::uint64_t cookie) override;
  Time next_event() const override { return flows_->next_event(); }
  void advance(Time now, std::vector<TransferDone>& done) override { flows_->advance(now, done); }
  void set_link_capacity(Time at, std::uint32_t link, double capacity) override;
  bool needs_every_member() const override { return true; }
  const char* name() const override { return "flow"; }
  std::vector<std::string> warnings() const override { return {}; }
  void track_links(const std::vector<std::uint32_t>& links) override { flows_->network().track_links(links); }
  std::vector<LinkLoad> link_loads(const std::vector<std::uint32_t>& links) const override;

 private:
  std::unique_ptr<FlowCollectives> owned_;
  FlowCollectives* flows_;
  const std::vector<Communicator>* comms_ = nullptr;
  std::vector<char> simulated_gpu_;  // by GPU id; empty: every GPU
  std::optional<LinkImages> images_;
  bool images_failed_ = false;
  // Plans made so far per communicator, by (what, bytes); what = collective kind, or 8 + sender for p2p.
  std::vector<std::vector<std::pair<std::pair<std::uint32_t, std::uint64_t>, PlanId>>> plans_;
};

}  // namespace trainsim
