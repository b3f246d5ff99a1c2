#include "sim/platform.hpp"

#include <stdexcept>

namespace trainsim {

const char* to_string(Fidelity f) { return f == Fidelity::Flow ? "flow" : "analytical"; }

namespace {
std::vector<CalibrationProfile> by_type(const Cluster& cluster, const std::vector<CalibrationProfile>& profiles) {
  std::vector<CalibrationProfile> out(cluster.num_gpu_types());
  for (int t = 0; t < cluster.num_gpu_types(); ++t) {
    const std::string& gpu = cluster.gpu_type(t).name;
    bool found = false;
    for (const CalibrationProfile& p : profiles) {
      if (p.gpu == gpu) {
        out[t] = p;
        found = true;
      }
    }
    if (!found) throw std::invalid_argument("no calibration profile for GPU type " + gpu);
  }
  return out;
}
}  // namespace

Platform::Platform(ClusterSpec cluster, const std::vector<CalibrationProfile>& profiles)
    : cluster_(std::move(cluster)),
      profiles_(by_type(cluster_, profiles)),
      costs_(cluster_, profiles_),
      analytical_(cluster_, profiles_) {}

Topology& Platform::topology() {
  if (!topology_) topology_ = std::make_unique<Topology>(cluster_);
  return *topology_;
}

void Platform::degrade_analytical_link(std::uint32_t l, double factor) {
  const Topology& topo = topology();
  const TopologyLink& link = topo.link(l);
  analytical_.degrade_link(topo.vertex(link.from), topo.vertex(link.to), link.kind, factor);
}

std::unique_ptr<NetworkModel> Platform::network_model(Fidelity fidelity) {
  if (fidelity == Fidelity::Flow) return std::make_unique<FlowNetworkModel>(cluster_, topology(), profiles_);
  return std::make_unique<AnalyticalNetworkModel>(analytical_);
}

}  // namespace trainsim
