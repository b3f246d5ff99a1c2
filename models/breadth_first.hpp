#pragma once
// Breadth-first pipeline parallelism (Lamy-Poirier, "Breadth-First Pipeline
// Parallelism", arXiv:2211.05953): the looping placement of interleaved 1F1B
// (model chunk v on rank v mod p), each rank running every micro-batch through
// one of its chunks before the next, backwards in reverse chunk order. A
// chunk's gradients are final early, so their data-parallel reduction overlaps
// the backward of the rank's earlier chunks; every micro-batch's activations
// are held at the peak, as under GPipe.
#include "models/schedule.hpp"

namespace trainsim {

// The breadth-first units for `pp` ranks, `m` micro-batches and `vpp` chunks
// per rank; backward units whole (B and W together).
PipelineSchedule breadth_first_schedule(int pp, int m, int vpp);

}  // namespace trainsim
