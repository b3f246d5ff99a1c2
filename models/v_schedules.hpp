#pragma once
// Pipeline schedules with two chunks per rank placed in a V: rank i holds the
// model's chunks i and 2p-1-i, so a micro-batch goes down the ranks and back
// up. ZB-V (Qi et al., arXiv:2401.10241 v2, Section 6) and DualPipeV (the
// single-copy form of DeepSeek-V3's DualPipe, github.com/deepseek-ai/DualPipe).
#include "models/schedule.hpp"
#include "models/schedule_timing.hpp"

namespace trainsim {

// The V placement: chunk_stage = [0, 1, ..., p-1, p-1, ..., 0].
std::vector<int> v_chunk_stages(int pp);

// ZB-V: B and W split, built by running the ranks on the unit-level timing
// model (`times` are one chunk's passes) and letting each rank, whenever it
// is free, start the ready unit of highest priority: a B (the later chunk
// first), else an F whose activations fit in `memory_limit` (in one chunk's
// micro-batch activations; a micro-batch holds 1 from F to B and
// `weight_input_fraction` from B to W; one entering chunk 0 keeps room for its
// chunk-1 forward), else a pending W. Members of this family cap the
// micro-batches a rank holds in chunk 0 (1 to 2p; in steps of p/16 for p >= 32) and may run W before F once
// half the limit is held; each is timed on the unit-level model and the
// fastest kept. The paper's limit is 1F1B's peak: p micro-batches of a whole
// stage, 2p chunk activations.
PipelineSchedule zero_bubble_v_schedule(int pp, int m, const PassTimes& times, double memory_limit,
                                        double weight_input_fraction);

// DualPipeV for m >= 2p micro-batches, in the phases of the public
// implementation: forwards of chunk 0, then of both chunks, then B-W-F of
// chunk 1, the main phase of overlapped pairs (F of chunk 0 with B of chunk 1,
// F of chunk 1 with B of chunk 0: the all-to-all of one hides behind the
// computation of the other), then the backwards, with W split off where
// it fills the cooldown.
PipelineSchedule dualpipe_v_schedule(int pp, int m);

// DualPipe (DeepSeek-V3 technical report, arXiv:2412.19437, Section 3.2.1;
// github.com/deepseek-ai/DualPipe) for an even pp and m >= 2pp micro-batches
// (even): two copies of the model, half the micro-batches entering at rank 0
// (copy A, chunk v on rank v), half at rank pp-1 (copy B, chunks pp..2pp-1,
// chunk pp+k on rank pp-1-k; route_chunks = pp). Each schedule micro-batch
// index stands for one micro-batch of each direction (microbatches = m/2).
// Rank r runs DualPipeV's units of rank min(r, pp-1-r) of pp/2 (the public
// implementation's phases are the same, DualPipeV being DualPipe cut in
// half), its phase 0 being copy A on the first half of the ranks and copy B
// on the second.
PipelineSchedule dualpipe_schedule(int pp, int m);

}  // namespace trainsim
