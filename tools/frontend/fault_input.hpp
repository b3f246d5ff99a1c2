#pragma once
// The scenario's optional fault sections (docs/faults.md), read and checked
// here at the edge: "perturbations" (GPUs slower than their type inside an
// iteration: given, or sampled stragglers) become the cluster's slowdowns;
// "reliability" (failures over the job's life) becomes a ReliabilitySpec.
#include <optional>

#include "models/reliability.hpp"
#include "topologies/hardware.hpp"
#include "topologies/json_reader.hpp"

namespace trainsim {

std::optional<ReliabilitySpec> read_reliability(ObjectReader& top, const ClusterSpec& cluster);

// Fills cluster.slowdowns (one entry per slowed GPU, factors of several entries multiplied).
void read_perturbations(ObjectReader& top, ClusterSpec& cluster);

}  // namespace trainsim
