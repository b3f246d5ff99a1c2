#pragma once
// The presets shipped with trainsim (GPUs, nodes, clusters, models,
// calibration profiles), parsed from the embedded JSON with the same strict
// reader as scenarios. Lookups are case-insensitive and accept aliases.
#include <string>
#include <vector>

#include "calibration/profile.hpp"
#include "calibration/profile_io.hpp"
#include "models/training_spec.hpp"
#include "tools/frontend/json_reader.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

struct ClusterPreset {
  std::string name;
  std::string node;
  int nodes = 1;
  std::string description;
  nlohmann::json definition;  // the entry as an inline cluster (node, nodes, fabric, datacenters)
};

struct Catalog {
  std::vector<GpuSpec> gpus;
  std::vector<std::vector<std::string>> gpu_aliases;  // parallel to gpus
  std::vector<NodeSpec> nodes;
  std::vector<ClusterPreset> clusters;
  std::vector<TransformerSpec> models;
  std::vector<CalibrationProfile> profiles;

  const GpuSpec* find_gpu(const std::string& name) const;
  const NodeSpec* find_node(const std::string& name) const;
  const ClusterPreset* find_cluster(const std::string& name) const;
  const TransformerSpec* find_model(const std::string& name) const;
  const CalibrationProfile* find_profile_for_gpu(const std::string& gpu) const;
  std::vector<std::string> gpu_names() const;
  std::vector<std::string> node_names() const;
  std::vector<std::string> cluster_names() const;
  std::vector<std::string> model_names() const;
};

// Parses every embedded catalog file; throws InputError if one is invalid.
Catalog load_builtin_catalog();

// Readers shared by the catalog and inline scenario definitions (read_profile:
// calibration/profile_io.hpp).
TransformerSpec read_model(ObjectReader& r, const TransformerSpec* base);
NodeSpec read_node(ObjectReader& r, const Catalog& catalog, const NodeSpec* base);
// A GPU's figures (name, vendor, arch, peak_tflops, memory, memory_bandwidth,
// scaleup_bandwidth, source): a catalog entry, or a GPU defined inline in a node.
GpuSpec read_gpu_figures(ObjectReader& r);

}  // namespace trainsim
