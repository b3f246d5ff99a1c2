#pragma once
// The machine a job runs on: the cluster, its topology graph and one
// calibration profile per GPU type, with the cost model and the network models
// built from them. Every fidelity reads its facts from here, so two fidelities
// can never disagree on what the cluster is.
#include <memory>
#include <string>
#include <vector>

#include "calibration/profile.hpp"
#include "sim/cost_model.hpp"
#include "sim/network.hpp"
#include "sim/network_model.hpp"
#include "topologies/graph.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

// How the network is simulated. Analytical: alpha-beta time per communicator,
// one rank per equivalence class simulated. Flow: collectives and send/recv as
// max-min fair flows on the cluster graph, every rank simulated (docs/network.md).
enum class Fidelity { Analytical, Flow };
const char* to_string(Fidelity f);

class Platform {
 public:
  // `profiles` must hold one profile for each GPU type of the cluster (matched
  // by GPU name; extra ones are ignored). Throws std::invalid_argument naming a
  // GPU type without a profile.
  Platform(ClusterSpec cluster, const std::vector<CalibrationProfile>& profiles);
  Platform(const Platform&) = delete;
  Platform& operator=(const Platform&) = delete;

  const Cluster& cluster() const { return cluster_; }
  // profiles()[t] belongs to GPU type t of the cluster.
  const std::vector<CalibrationProfile>& profiles() const { return profiles_; }
  const CalibrationProfile& profile(int gpu_type) const { return profiles_[gpu_type]; }
  const ComputeCostModel& costs() const { return costs_; }
  const AnalyticalNetwork& analytical_network() const { return analytical_; }
  // Link `l` of topology() at `factor` of its capacity for the whole iteration,
  // in the analytical model (the flow model takes link changes as events).
  void degrade_analytical_link(std::uint32_t l, double factor);
  // The cluster graph with its routes, built on first use (the flow model and
  // link-level events need it; analytical runs of big clusters do not pay for it).
  Topology& topology();

  // A network model of the given fidelity reading this platform.
  std::unique_ptr<NetworkModel> network_model(Fidelity fidelity);

 private:
  Cluster cluster_;
  std::vector<CalibrationProfile> profiles_;
  ComputeCostModel costs_;
  AnalyticalNetwork analytical_;
  std::unique_ptr<Topology> topology_;
};

}  // namespace trainsim
