#pragma once
// Writes the operator graph one simulated rank ran as a Chakra execution trace
// in JSON form (the nodes `trace` workloads replay): compute nodes with their
// cost-model durations, FLOPs and bytes, collectives with their type, size and
// group, every dependency, and each task's stream as a "stream" attribute.
// A trace of the built-in transformer replayed on the same job reproduces its
// iteration (the ground truth of the import tests).
#include <nlohmann/json.hpp>

#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

namespace trainsim {

// Rank 0's program of a single-stage job (pp = 1, communicators tp and dp
// only); InputError naming /parallel otherwise.
nlohmann::json chakra_trace_of(const Scenario& scenario, const JobRun& run);

}  // namespace trainsim
