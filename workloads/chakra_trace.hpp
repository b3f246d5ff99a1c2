#pragma once
// An imported operator graph (a Chakra execution trace, or a PyTorch profiler
// trace converted to the same nodes) replayed as a workload: every rank runs
// the trace's nodes with their dependencies; compute nodes take their measured
// duration or are re-costed from their FLOPs and bytes, collectives are
// re-costed on the simulated network over the scenario's TP and DP groups (so
// a trace captured at one DP size replays at another).
#include <cstdint>
#include <string>
#include <vector>

#include "models/workload.hpp"
#include "sim/program.hpp"

namespace trainsim {

enum class TraceGroup : std::uint8_t { TP, DP, World };
const char* to_string(TraceGroup g);

struct TraceNode {
  std::string name;
  bool collective = false;
  double duration_s = 0;        // compute: measured
  double flops = 0, bytes = 0;  // compute: work for re-costing (0 = unknown)
  CollectiveKind kind = CollectiveKind::AllReduce;
  std::uint64_t comm_bytes = 0;  // collective buffer size
  TraceGroup group = TraceGroup::World;
  std::string stream;               // empty: "compute", or "comm.<group>" for collectives
  std::vector<std::uint32_t> deps;  // indices of earlier nodes
};

struct TraceSpec {
  std::string file;
  std::vector<TraceNode> nodes;
  double samples_per_replica = 1;  // samples one DP replica trains per iteration
  bool recost = false;             // compute nodes from their FLOPs and bytes instead of their duration
  Dtype dtype = Dtype::BF16;       // of re-costed compute nodes
  int tp = 1;                      // TP group size of the replay
};

class TraceWorkload final : public Workload {
 public:
  explicit TraceWorkload(TraceSpec spec) : spec_(std::move(spec)) {}
  std::string name() const override { return "trace " + spec_.file; }
  WorkloadPlan plan(const Platform& platform, const Placement& placement, const PlanOptions& options) const override;

 private:
  TraceSpec spec_;
};

}  // namespace trainsim
