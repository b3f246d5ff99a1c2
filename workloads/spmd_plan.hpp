#pragma once
// Plans for workloads whose ranks all run one kind of program over one group
// (GNN partitions, DLRM data-parallel ranks, an imported single-group trace):
// rank r runs programs[program_of_rank[r]] on the GPU of data-parallel
// coordinate r, every communicator slot bound to the group of all ranks unless
// the rank binds it to one of the listed subgroups (a node, a rail).
#include <string>
#include <vector>

#include "models/workload.hpp"

namespace trainsim {

struct SpmdRanks {
  std::vector<ProgramTemplate> programs;
  std::vector<int> program_of_rank;  // one entry per rank
  std::vector<MemoryBreakdown> memory_of_program;
  std::string rank_label = "rank";  // e.g. "partition"
  // Communicators over part of the ranks (rank indices), and per rank which
  // one each comm slot binds: -1 the group of all ranks (the default for a
  // rank or slot not listed), else an index into `subgroups`.
  std::vector<std::vector<int>> subgroups;
  std::vector<std::vector<int>> subgroup_of_slot;
};

// Fills plan.setup, stage_of_rank, recorded_rank_of_stage and stages (one
// stage: the first rank of the busiest program is recorded... every rank is
// simulated; rank 0 is recorded and stands for the stage).
void plan_spmd(SpmdRanks ranks, const Placement& placement, WorkloadPlan& plan);

// Shorthands for building programs.
ComputeOp gemm_op(const std::string& name, double m, double n, double k, Dtype dtype);
ComputeOp memory_op(const std::string& name, double bytes, double flops = 0);

}  // namespace trainsim
