#pragma once
// A scenario: what to train, on what, how. Loaded once at the edge: parse ->
// apply --set overrides -> validate every field and the cross-field rules ->
// typed structs. All problems are reported together (InputError, exit 2).
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "calibration/profile.hpp"
#include "models/diloco.hpp"
#include "models/reliability.hpp"
#include "models/training_spec.hpp"
#include "tools/frontend/catalog.hpp"
#include "tools/frontend/fault_input.hpp"
#include "tools/frontend/workload_input.hpp"

namespace trainsim {

// The scenario format this build reads; a scenario may state it as the
// top-level "schema_version" (absent = this version).
inline constexpr int kScenarioSchemaVersion = 1;

struct Expected {
  std::string metric;  // a result field, e.g. "iteration_time_s"
  double value = 0;
  std::string source;  // the publication and table the value comes from
  std::string group;   // the published table it belongs to, e.g. "megatron2021_t1" (for per-source MAPE)
};

enum class FlowRanks { Auto, All, Groups };

struct Scenario {
  std::string file;  // where it came from (for messages)
  std::string id;    // validation scenarios: the published run's id
  std::string name;
  std::string description;
  TransformerSpec model;
  WorkloadSpec workload;  // "workload": GNN, DLRM or a trace instead of `model` (docs/workloads.md)
  ClusterSpec cluster;
  ParallelSpec parallel;
  TrainingSpec training;
  std::vector<CalibrationProfile> profiles;  // for every GPU type in the cluster
  std::optional<Expected> expected;
  std::optional<ReliabilitySpec> reliability;            // failures over the job's life (docs/faults.md)
  std::vector<LinkPerturbation> link_perturbations;      // degraded links (flow fidelity)
  std::vector<PerturbationSource> perturbation_sources;  // each entry of "perturbations" and what it alone does
  std::optional<DilocoSpec> diloco;                      // low-communication training across datacenters
  // "flow": {"ranks": ...}: at flow fidelity every rank ("all"), one rank per
  // TP/CP group whose members time alike ("groups", an approximation unless
  // the cluster is symmetric), or, where exact, groups or the rank images of
  // the cluster's symmetries, whichever runs fewer ranks ("auto", the
  // default; docs/network.md "Group representatives").
  FlowRanks flow_ranks = FlowRanks::Auto;
  // Valid but suspicious (a seq_len beyond the model's context, a profile for a
  // GPU the cluster lacks): "file: /pointer: message", printed by the CLI.
  std::vector<std::string> warnings;
};

// `overrides` are "json.path=value" strings (value parsed as JSON, else taken as a string).
Scenario load_scenario_file(const std::string& path, const std::vector<std::string>& overrides, const Catalog& catalog);
// `keys_read`, when given, collects every key the loader asked for (Diagnostics::log_keys_to).
Scenario load_scenario_text(const std::string& text, const std::string& file, const std::string& base_dir,
                            const std::vector<std::string>& overrides, const Catalog& catalog,
                            std::set<std::string>* keys_read = nullptr);

// The scenario `trainsim run` uses without an argument (embedded in the binary).
const EmbeddedFile& default_scenario_file();
// scenarios/validation/*.json, embedded so `trainsim validate` works from any directory.
std::span<const EmbeddedFile> validation_scenario_files();

}  // namespace trainsim
