#pragma once
// A per-rank program: a DAG of tasks (compute, collective, send, recv), each on
// a stream. Tasks on one stream run in program order (like CUDA streams), so
// overlap of compute and communication emerges from the stream assignment.
// Ranks with the same structure share one ProgramTemplate; they differ only in
// the GPU they run on and in which communicators their slots map to.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "calibration/collective_cost.hpp"
#include "sim/compute_op.hpp"

namespace trainsim {

enum class TaskKind : std::uint8_t { Compute, Collective, Send, Recv };
// CollectiveKind: calibration/collective_cost.hpp.
// Which parallelism a communication task serves; used for the time breakdown.
enum class CommClass : std::uint8_t { TP, CP, EP, PP, DP };
inline constexpr std::size_t kNumCommClasses = 5;
const char* to_string(TaskKind k);
const char* to_string(CollectiveKind k);
const char* to_string(CommClass c);

inline constexpr std::uint32_t kNoMatrix = ~std::uint32_t{0};

struct Task {
  TaskKind kind = TaskKind::Compute;
  std::uint8_t stream = 0;
  CollectiveKind collective = CollectiveKind::AllReduce;
  CommClass comm_class = CommClass::TP;
  std::uint32_t ref = 0;    // Compute: op index; otherwise communicator slot
  std::uint32_t label = 0;  // index into ProgramTemplate::labels
  std::int32_t microbatch = -1;
  std::uint64_t bytes = 0;  // Collective: NCCL buffer size (all-gather: output); Send/Recv: payload
  // All-to-all-v: index into SimulationSetup::traffic of its per-pair bytes
  // (`bytes` is then their total); kNoMatrix for every other task.
  std::uint32_t matrix = kNoMatrix;
};

// A layer pass stamped from one template (models/planner.cpp): tasks
// [first, first + count), in the same order, with the same fields (kind,
// stream, collective, class, ref, bytes, matrix) and the same dependencies
// among themselves as every other pass of the program with the same `key`;
// only their labels, micro-batch and dependencies on earlier tasks differ.
// The executor may apply a recorded run of one such pass to another
// (docs/performance.md, "A memo of repeated layer passes").
struct PassMark {
  std::uint32_t first = 0, count = 0;
  std::uint32_t key = 0;
};

// The texts of a program's task labels, back to back in one buffer: a
// program holds thousands (one per layer, pass and step), most longer than a
// string's inline capacity, which would each cost an allocation.
class LabelTable {
 public:
  // Adds the label `head` followed by `tail`; returns its index.
  std::uint32_t add(std::string_view head, std::string_view tail = {});
  // Removes the label added last (a text found to be there already).
  void remove_last();
  std::string_view operator[](std::uint32_t i) const {
    const std::uint32_t begin = i == 0 ? 0 : ends_[i - 1];
    return std::string_view(text_).substr(begin, ends_[i] - begin);
  }
  std::string_view at(std::uint32_t i) const;  // std::out_of_range past the end
  std::size_t size() const { return ends_.size(); }
  bool operator==(const LabelTable&) const = default;

 private:
  std::string text_;
  std::vector<std::uint32_t> ends_;  // each label's end in text_
};

struct ProgramTemplate {
  std::string name;
  std::vector<std::string> streams;     // stream names, e.g. "compute", "tp", "dp", "pp"
  std::vector<std::string> comm_slots;  // communicator slot names, e.g. "tp", "dp", "pp.next"
  std::vector<ComputeOp> ops;
  LabelTable labels;
  std::vector<Task> tasks;
  // CSR: dependencies and dependents of each task; tasks of each stream in program order.
  std::vector<std::uint32_t> dep_offsets, deps;
  std::vector<std::uint32_t> succ_offsets, succs;
  std::vector<std::uint32_t> stream_offsets, stream_tasks;
  // Per task: its index into stream_tasks, and whether each stream's tasks
  // come in task order (no reorder); written by ProgramBuilder::finish(),
  // which lays the streams out, so that readers need not invert them again.
  std::vector<std::uint32_t> stream_index;
  bool streams_in_task_order = true;
  std::vector<PassMark> passes;  // in task order, disjoint; empty when none are marked

  std::span<const std::uint32_t> deps_of(std::uint32_t t) const {
    return {deps.data() + dep_offsets[t], dep_offsets[t + 1] - dep_offsets[t]};
  }
  std::span<const std::uint32_t> succs_of(std::uint32_t t) const {
    return {succs.data() + succ_offsets[t], succ_offsets[t + 1] - succ_offsets[t]};
  }
  std::span<const std::uint32_t> stream(std::uint32_t s) const {
    return {stream_tasks.data() + stream_offsets[s], stream_offsets[s + 1] - stream_offsets[s]};
  }
};

using TaskId = std::uint32_t;

// A scan for what a program's tasks are may look at one pass per key, the
// passes of a key being alike (PassMark). Calls visit(from, to) on the task
// ranges outside the marked passes and on the passes of each key as
// which(first, end) says of the key's first pass: none of them (Skip), that
// one only (First) or every one (Every); ranges in task order.
enum class KeyVisit : std::uint8_t { Skip, First, Every };
template <class Which, class Visit>
void visit_by_pass_key(const ProgramTemplate& p, Which which, Visit visit) {
  const auto n = static_cast<std::uint32_t>(p.tasks.size());
  constexpr std::uint8_t kUnseen = 0, kSkipRest = 1, kVisitRest = 2;
  std::vector<std::uint8_t> rest;  // per key: what its later passes get
  std::uint32_t at = 0;
  for (const PassMark& m : p.passes) {
    const std::uint32_t first = std::min(m.first, n), end = std::min(m.first + m.count, n);
    visit(at, first);
    if (m.key >= rest.size()) rest.resize(m.key + 1, kUnseen);
    if (rest[m.key] == kUnseen) {
      const KeyVisit w = which(first, end);
      rest[m.key] = w == KeyVisit::Every ? kVisitRest : kSkipRest;
      if (w != KeyVisit::Skip) visit(first, end);
    } else if (rest[m.key] == kVisitRest) {
      visit(first, end);
    }
    at = std::max(at, end);
  }
  visit(at, n);
}

// A task's byte count from a size computed in floating point: truncated, 0 for
// negative or NaN, and saturated at 2^63 where an absurd model exceeds it (a
// conversion out of range would be undefined); the clock then saturates too.
inline std::uint64_t task_bytes(double bytes) {
  if (!(bytes > 0)) return 0;
  if (bytes >= 9223372036854775808.0) return std::uint64_t{1} << 63;
  return static_cast<std::uint64_t>(bytes);
}

// Appends tasks in program order; dependencies must name earlier tasks.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(std::string name);

  std::uint8_t add_stream(const std::string& name);
  std::size_t num_streams() const { return program_.streams.size(); }
  std::uint32_t add_comm_slot(const std::string& name);
  std::uint32_t add_op(ComputeOp op);
  std::uint32_t add_label(std::string_view label) { return program_.labels.add(label); }
  LabelTable& labels() { return program_.labels; }

  TaskId compute(std::uint8_t stream, std::uint32_t op, std::uint32_t label, int microbatch,
                 std::span<const TaskId> deps);
  TaskId collective(std::uint8_t stream, std::uint32_t slot, CollectiveKind kind, CommClass cls, std::uint64_t bytes,
                    std::uint32_t label, int microbatch, std::span<const TaskId> deps,
                    std::uint32_t matrix = kNoMatrix);
  TaskId send(std::uint8_t stream, std::uint32_t slot, CommClass cls, std::uint64_t bytes, std::uint32_t label,
              int microbatch, std::span<const TaskId> deps);
  TaskId recv(std::uint8_t stream, std::uint32_t slot, CommClass cls, std::uint64_t bytes, std::uint32_t label,
              int microbatch, std::span<const TaskId> deps);
  // Appends copies of `tasks` with room for `deps` dependencies in all, both
  // completed in place by the caller (a stamped layer pass, thousands per
  // program): task i in tasks[i], its dependencies (earlier tasks only)
  // written on from `deps`, and in dep_ends[i] the end of its list, counted
  // from `deps_base` (so dep_ends[i] = deps_base + dependencies written up to
  // and with task i).
  struct TaskRun {
    TaskId first = 0;
    Task* tasks = nullptr;
    TaskId* deps = nullptr;
    std::uint32_t deps_base = 0;
    std::uint32_t* dep_ends = nullptr;
  };
  // `per_stream`: how many of `tasks` lie on each of their streams (each
  // stream once), counted by the caller once for all copies of a pass.
  struct StreamCount {
    std::uint8_t stream = 0;
    std::uint32_t count = 0;
  };
  TaskRun extend(std::span<const Task> tasks, std::size_t deps, std::span<const StreamCount> per_stream);
  std::size_t size() const { return program_.tasks.size(); }
  const Task& task(TaskId id) const { return program_.tasks[id]; }
  // Queues the tasks [first, first + order.size()) on their streams in `order`
  // (a permutation of that range) instead of the order they were added.
  void reorder(TaskId first, std::span<const TaskId> order);
  // Marks tasks [first, first + count) as a pass stamped from template `key` (PassMark).
  void mark_pass(TaskId first, std::uint32_t count, std::uint32_t key) {
    program_.passes.push_back(PassMark{first, count, key});
  }
  // Capacity hint: avoids regrowing the task, dependency and pass arrays of big programs.
  void reserve(std::size_t tasks, std::size_t deps, std::size_t passes = 0);

  ProgramTemplate finish() &&;

 private:
  // Appends a task after `deps` (its fields for the caller to set).
  Task& add(std::span<const TaskId> deps);
  TaskId last_id() const { return static_cast<TaskId>(program_.tasks.size() - 1); }

  ProgramTemplate program_;
  std::vector<TaskId> sequence_;          // queue order of the tasks when reordered (empty: as added)
  std::vector<std::uint32_t> on_stream_;  // tasks added per stream so far (finish lays the streams out)
};

}  // namespace trainsim
