#pragma once
// Pipeline schedules as units: per pipeline rank an ordered list of
// {forward, backward-input, backward-weight} x {micro-batch, chunk}, plus the
// map from the model's chunks (virtual stages, in layer order) to pipeline
// ranks. Built-in schedules (GPipe, 1F1B, interleaved 1F1B) and schedules read
// from JSON are the same value; the planner emits programs from the units and
// the memory model walks them for the activations in flight.
#include <functional>
#include <string>
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim {

// Checks a schedule: shape (every unit once, chunks mapped to ranks), order on
// each rank (F before its backward, B before its W), that each pipeline link
// delivers messages in the order the receiver expects them, and that the ranks
// cannot block each other forever (executed abstractly, data dependencies
// only). Returns one message per problem, each naming the rank and unit.
std::vector<std::string> check_schedule(const PipelineSchedule& schedule);

// The built-in schedule of `kind` for `pp` ranks, `m` micro-batches and `vpp`
// chunks per rank. Interleaved 1F1B follows Megatron-LM's ordering and needs
// m % pp == 0 (checked at scenario loading); backward units are whole (B and
// W together, in the layer's issue order), except in the Zero Bubble
// schedules (ZB-H1, ZB-H2: one chunk per rank, W deferred into the bubbles).
PipelineSchedule builtin_schedule(ScheduleKind kind, int pp, int m, int vpp);

// Zero Bubble schedules with one chunk per rank (Qi et al., ICLR 2024,
// arXiv:2401.10241, Section 3): rank i runs min(m, p-i+min(extra_warmup, p-1-i))
// forwards, then repeats B, [W], F, keeping up to deferral_per_rank * i W
// passes pending for its cooldown. ZB-H1 is (0, 1), ZB-H2 (p-1, 2).
PipelineSchedule zero_bubble_family(int pp, int m, int extra_warmup, int deferral_per_rank);

// seq1F1B (Sun et al., "Seq1F1B: Efficient Sequence-Level Pipeline Parallelism
// for Large Language Model Training", arXiv:2406.03488): each of the m
// micro-batches split into k sequence chunks, unit micro-batch n = mb*k + j for
// chunk j. Forwards run in sequence order; the backwards of a micro-batch run from
// its last chunk to its first (chunk j's backward needs the K and V gradients of
// the later chunks); rank i runs min(m*k, p-1-i + k-1) forwards before its first
// backward, then one forward one backward, as 1F1B over the m*k units.
PipelineSchedule seq1f1b_schedule(int pp, int m, int k);

// Megatron-LM's interleaved 1F1B without overlap_p2p_comm (its default until
// October 2023; forward_backward_pipelining_with_interleaving in
// megatron/core/pipeline_parallel/schedules.py): one batched, blocking
// exchange after each warm-up forward, after each steady (forward, backward)
// pair and after each cool-down backward. It sends the outputs of the units
// since the last exchange and receives the next forward input from the
// previous rank (recv_prev) and the next backward input from the next rank
// (recv_next) when Megatron-LM asks for them; every rank but the first also
// receives its first forward's input before the loop. Per unit of rank
// `stage`'s built-in interleaved order (m % pp == 0): the exchange after it.
struct BatchedExchange {
  bool after = false;          // an exchange follows this unit
  bool recv_forward = false;   // it receives a forward input (recv_prev)
  bool recv_backward = false;  // it receives a backward input (recv_next)
};
std::vector<BatchedExchange> megatron_batched_exchanges(int pp, int stage, int vpp, int m);

// The schedule a parallel spec asks for: its custom one, else the built-in
// (with moe_a2a_overlap: overlap_backward_with_next_forward applied).
PipelineSchedule schedule_of(const ParallelSpec& par);

// Marks every forward that directly follows a backward (B or BW) of another
// micro-batch on the same rank as overlapped with it: the steady phase of
// 1F1B and interleaved 1F1B, run as F&B pairs.
void overlap_backward_with_next_forward(PipelineSchedule& schedule);

// Activation bytes a chunk's micro-batch holds: `total` from its forward to
// its backward; when B and W are split, `after_input` from B to W (the inputs
// of the weight-gradient GEMMs: part of `total`, or, under full
// recomputation, re-created by B from the checkpoint).
struct ChunkActivation {
  double total = 0;
  double after_input = 0;
};

// Peak activation bytes on pipeline rank `stage`, walking its units in order
// (sampled after every unit that allocates: F, and B when it re-creates).
double peak_activation_bytes(const PipelineSchedule& schedule, int stage,
                             const std::function<ChunkActivation(int chunk)>& bytes_of_chunk);

// Text form of a unit, as custom schedules write it: "F3", "B3", "W3", "BW3";
// chunk c > 0 as "F3.1".
std::string to_string(const ScheduleUnit& u);

}  // namespace trainsim
