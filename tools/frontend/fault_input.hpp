#pragma once
// The scenario's optional fault sections (docs/faults.md), read and checked
// here at the edge: "perturbations" (GPUs slower than their type inside an
// iteration: given, or sampled stragglers) become the cluster's slowdowns;
// "reliability" (failures over the job's life) becomes a ReliabilitySpec.
#include <optional>
#include <string>
#include <vector>

#include "models/reliability.hpp"
#include "topologies/hardware.hpp"
#include "topologies/json_reader.hpp"

namespace trainsim {

std::optional<ReliabilitySpec> read_reliability(ObjectReader& top, const ClusterSpec& cluster);

// A link of the cluster's topology (both directions) at a share of its capacity
// from `start_s` to `end_s`; resolved against the topology when the flow
// fidelity runs (the analytical model has no links).
struct LinkPerturbation {
  std::string from, to;  // vertex names as the topology gives them (docs/network.md)
  double capacity_factor = 1;
  double start_s = 0;
  double end_s = -1;    // -1: to the end of the iteration
  std::string pointer;  // "/perturbations/links/i", for errors at run time
};

// One entry of the section (a "gpus", "nodes" or "links" entry, or the
// straggler draw) and what it alone does, so a report can give the time each
// perturbation costs on its own.
struct PerturbationSource {
  std::string pointer;                 // "/perturbations/gpus/0", "/perturbations/stragglers", ...
  std::vector<GpuSlowdown> slowdowns;  // the GPUs this entry slows (one per GPU)
  int link = -1;                       // or the index of its link in `links`
};

// Fills cluster.slowdowns (one entry per slowed GPU: the static factors of
// several entries multiplied, their windows listed), `links` and `sources`.
void read_perturbations(ObjectReader& top, ClusterSpec& cluster, std::vector<LinkPerturbation>& links,
                        std::vector<PerturbationSource>& sources);

}  // namespace trainsim
