#pragma once
// The scenario's optional "workload" section (docs/workloads.md), read and
// checked here at the edge: a GNN, a DLRM or an imported trace (Chakra JSON)
// instead of the dense transformer of "model". Trace files are hostile input:
// bounded in size and node count, every node kind and attribute checked.
#include <cstdint>
#include <memory>
#include <string>

#include "models/training_spec.hpp"
#include "models/workload.hpp"
#include "topologies/json_reader.hpp"
#include "workloads/chakra_trace.hpp"
#include "workloads/dlrm.hpp"
#include "workloads/gnn.hpp"

namespace trainsim {

enum class WorkloadKind : std::uint8_t { Transformer, Gnn, Dlrm, Trace };

struct WorkloadSpec {
  WorkloadKind kind = WorkloadKind::Transformer;
  GnnSpec gnn;
  DlrmSpec dlrm;
  TraceSpec trace;
};

// The most nodes an imported trace may hold (docs/limits.md).
inline constexpr std::size_t kMaxTraceNodes = std::size_t{1} << 20;
// Every rank of these workloads is simulated: at most this many ranks, and for
// a trace at most kMaxTraceTasks nodes x ranks (docs/limits.md).
inline constexpr int kMaxWorkloadRanks = 16384;
inline constexpr double kMaxTraceTasks = double(1 << 27);

// Reads "workload" (absent: the transformer). The parallel layout is checked
// against the workload: GNN and DLRM ranks are data-parallel (dp = GPUs), a
// trace replays over tp x dp GPUs.
WorkloadSpec read_workload(ObjectReader& top, const ParallelSpec& parallel, const ClusterSpec& cluster,
                           const std::string& base_dir);

// A Chakra execution trace in its JSON form, nodes checked (errors name `file` and the node's pointer).
TraceSpec read_chakra_json(const std::string& text, const std::string& file);

// A PyTorch profiler trace (Chrome trace JSON: Kineto's {"traceEvents": [...]}
// or the legacy profiler's bare array): GPU kernels when it has any, else the
// top-level CPU ops of its profiled steps, each a compute node with its
// measured duration on a stream per thread or CUDA stream, in time order
// (an op depends on the last op of another stream that ended before it
// started). NCCL kernels with their message size become collectives.
TraceSpec read_kineto_json(const std::string& text, const std::string& file);

std::unique_ptr<Workload> make_workload(const WorkloadSpec& spec);

}  // namespace trainsim
