#pragma once
// The scenario's optional "diloco" section (docs/cross-datacenter.md), read and
// checked at the edge: low-communication training where every datacenter
// trains its own replica for H inner steps and the pseudo-gradients cross the
// WAN once per outer step. Also the one-site layout every site trains.
#include <optional>

#include "models/diloco.hpp"
#include "models/training_spec.hpp"
#include "topologies/hardware.hpp"
#include "topologies/json_reader.hpp"

namespace trainsim {

// Bounds of the section (docs/limits.md).
inline constexpr int kMaxDilocoInnerSteps = 1000000;

// Reads "diloco" when present. Without a "placement" in "parallel" it puts DP
// outermost ("tp-cp-ep-pp-dp"), so that each datacenter holds whole replicas.
std::optional<DilocoSpec> read_diloco(ObjectReader& top, const TransformerSpec& model, ParallelSpec& parallel,
                                      const TrainingSpec& training, const ClusterSpec& cluster);

// The layout and cluster one site trains: dp and global_batch divided by the
// datacenters, the nodes of one datacenter.
ParallelSpec site_parallel(const ParallelSpec& parallel, int sites);
ClusterSpec site_cluster(const ClusterSpec& cluster);

}  // namespace trainsim
