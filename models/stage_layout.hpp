#pragma once
// Per-stage layouts (MPMD, `parallel.stages`): each pipeline stage its own node
// group, tensor-, context- and data-parallel sizes, micro-batch, layer count and
// recomputation, as JaxPP and HAP give each stage its own program. Stages of a model made of sub-models (a
// vision encoder in front of an LLM) each hold layers of one sub-model only.
#include <cstdint>

namespace trainsim {

struct StageLayout {
  int group = -1;        // index into cluster.groups; -1 = the next free GPUs in cluster order
  int tp = 1;            // tensor-parallel size of this stage
  int dp = -1;           // data-parallel replicas of this stage; -1 = parallel.dp
  int cp = -1;           // context-parallel (ring) size of this stage; -1 = parallel.cp
  int micro_batch = -1;  // samples per replica per pipeline step; -1 = parallel.micro_batch
  int layers = 0;        // transformer layers of this stage (encoder layers first, then the LLM's)
  int recompute = -1;    // a Recompute value for this stage; -1 = parallel.recompute
};

}  // namespace trainsim
