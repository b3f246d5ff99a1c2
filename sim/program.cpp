#include "sim/program.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <utility>

#include "sim/check.hpp"

namespace trainsim {

const char* to_string(TaskKind k) {
  switch (k) {
    case TaskKind::Compute:
      return "compute";
    case TaskKind::Collective:
      return "collective";
    case TaskKind::Send:
      return "send";
    case TaskKind::Recv:
      return "recv";
  }
  return "?";
}

const char* to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce:
      return "all-reduce";
    case CollectiveKind::AllGather:
      return "all-gather";
    case CollectiveKind::ReduceScatter:
      return "reduce-scatter";
    case CollectiveKind::AllToAll:
      return "all-to-all";
    case CollectiveKind::Broadcast:
      return "broadcast";
  }
  return "?";
}

const char* to_string(CommClass c) {
  switch (c) {
    case CommClass::TP:
      return "tp";
    case CommClass::CP:
      return "cp";
    case CommClass::EP:
      return "ep";
    case CommClass::PP:
      return "pp";
    case CommClass::DP:
      return "dp";
  }
  return "?";
}

ProgramBuilder::ProgramBuilder(std::string name) {
  program_.name = std::move(name);
  program_.dep_offsets.push_back(0);
}

std::uint8_t ProgramBuilder::add_stream(const std::string& name) {
  program_.streams.push_back(name);
  on_stream_.push_back(0);
  return static_cast<std::uint8_t>(program_.streams.size() - 1);
}

std::uint32_t ProgramBuilder::add_comm_slot(const std::string& name) {
  program_.comm_slots.push_back(name);
  return static_cast<std::uint32_t>(program_.comm_slots.size() - 1);
}

std::uint32_t ProgramBuilder::add_op(ComputeOp op) {
  program_.ops.push_back(std::move(op));
  return static_cast<std::uint32_t>(program_.ops.size() - 1);
}

std::uint32_t LabelTable::add(std::string_view head, std::string_view tail) {
  TRAINSIM_CHECK(text_.size() + head.size() + tail.size() <= ~std::uint32_t{0}, "labels past 4 GiB of text");
  text_.append(head).append(tail);
  ends_.push_back(static_cast<std::uint32_t>(text_.size()));
  return static_cast<std::uint32_t>(ends_.size() - 1);
}

void LabelTable::remove_last() {
  ends_.pop_back();
  text_.resize(ends_.empty() ? 0 : ends_.back());
}

std::string_view LabelTable::at(std::uint32_t i) const {
  if (i >= ends_.size()) throw std::out_of_range("label " + std::to_string(i) + " of " + std::to_string(ends_.size()));
  return (*this)[i];
}

Task& ProgramBuilder::add(std::span<const TaskId> deps) {
  const auto id = static_cast<TaskId>(program_.tasks.size());
  for (TaskId d : deps) {
    TRAINSIM_CHECK(d < id, "task " + std::to_string(id) + " depends on later task " + std::to_string(d));
  }
  Task& task = program_.tasks.emplace_back();
  for (TaskId d : deps) program_.deps.push_back(d);  // a few each: cheaper than a range insert
  program_.dep_offsets.push_back(static_cast<std::uint32_t>(program_.deps.size()));
  return task;
}

namespace {
// Fills a task field by field in place (a Task built on the stack and copied
// in stalls on store forwarding: planning adds hundreds of thousands).
void set_task(Task& t, TaskKind kind, std::uint8_t stream, CollectiveKind collective, CommClass cls, std::uint32_t ref,
              std::uint32_t label, int microbatch, std::uint64_t bytes, std::uint32_t matrix) {
  t.kind = kind;
  t.stream = stream;
  t.collective = collective;
  t.comm_class = cls;
  t.ref = ref;
  t.label = label;
  t.microbatch = microbatch;
  t.bytes = bytes;
  t.matrix = matrix;
}
}  // namespace

TaskId ProgramBuilder::compute(std::uint8_t stream, std::uint32_t op, std::uint32_t label, int microbatch,
                               std::span<const TaskId> deps) {
  set_task(add(deps), TaskKind::Compute, stream, CollectiveKind::AllReduce, CommClass::TP, op, label, microbatch, 0,
           kNoMatrix);
  ++on_stream_[stream];
  return last_id();
}

TaskId ProgramBuilder::collective(std::uint8_t stream, std::uint32_t slot, CollectiveKind kind, CommClass cls,
                                  std::uint64_t bytes, std::uint32_t label, int microbatch,
                                  std::span<const TaskId> deps, std::uint32_t matrix) {
  set_task(add(deps), TaskKind::Collective, stream, kind, cls, slot, label, microbatch, bytes, matrix);
  ++on_stream_[stream];
  return last_id();
}

TaskId ProgramBuilder::send(std::uint8_t stream, std::uint32_t slot, CommClass cls, std::uint64_t bytes,
                            std::uint32_t label, int microbatch, std::span<const TaskId> deps) {
  set_task(add(deps), TaskKind::Send, stream, CollectiveKind::AllReduce, cls, slot, label, microbatch, bytes,
           kNoMatrix);
  ++on_stream_[stream];
  return last_id();
}

TaskId ProgramBuilder::recv(std::uint8_t stream, std::uint32_t slot, CommClass cls, std::uint64_t bytes,
                            std::uint32_t label, int microbatch, std::span<const TaskId> deps) {
  set_task(add(deps), TaskKind::Recv, stream, CollectiveKind::AllReduce, cls, slot, label, microbatch, bytes,
           kNoMatrix);
  ++on_stream_[stream];
  return last_id();
}

ProgramBuilder::TaskRun ProgramBuilder::extend(std::span<const Task> tasks, std::size_t deps,
                                               std::span<const StreamCount> per_stream) {
  ProgramTemplate& p = program_;
  TaskRun run;
  run.first = static_cast<TaskId>(p.tasks.size());
  run.deps_base = static_cast<std::uint32_t>(p.deps.size());
  p.tasks.insert(p.tasks.end(), tasks.begin(), tasks.end());
  for (const StreamCount& c : per_stream) on_stream_[c.stream] += c.count;
  p.deps.resize(p.deps.size() + deps);
  p.dep_offsets.resize(p.dep_offsets.size() + tasks.size());
  run.tasks = p.tasks.data() + run.first;
  run.deps = p.deps.data() + run.deps_base;
  run.dep_ends = p.dep_offsets.data() + run.first + 1;
  return run;
}

void ProgramBuilder::reserve(std::size_t tasks, std::size_t deps, std::size_t passes) {
  program_.tasks.reserve(tasks);
  program_.dep_offsets.reserve(tasks + 1);
  program_.deps.reserve(deps);
  program_.passes.reserve(passes);
}

void ProgramBuilder::reorder(TaskId first, std::span<const TaskId> order) {
  const std::size_t end = first + order.size();
  TRAINSIM_CHECK(end <= program_.tasks.size(), "reorder: tasks past the program's end");
  std::vector<char> seen(order.size(), 0);
  for (TaskId t : order) {
    TRAINSIM_CHECK(t >= first && t < end && seen[t - first] == 0, "reorder: expected a permutation of the range");
    seen[t - first] = 1;
  }
  while (sequence_.size() < end) sequence_.push_back(static_cast<TaskId>(sequence_.size()));
  std::copy(order.begin(), order.end(), sequence_.begin() + first);
}

ProgramTemplate ProgramBuilder::finish() && {
  ProgramTemplate& p = program_;
  const std::size_t n = p.tasks.size();
  if (p.dep_offsets.empty()) p.dep_offsets.push_back(0);
  // Successors: counted, summed to each list's end, then filled from the last
  // task back (each list in task order; its offset ends at its start).
  p.succ_offsets.assign(n + 1, 0);
  std::uint32_t* offsets = p.succ_offsets.data();
  for (TaskId d : p.deps) ++offsets[d];
  std::uint32_t sum = 0;
  for (std::size_t t = 0; t < n; ++t) offsets[t] = sum += offsets[t];
  offsets[n] = sum;
  p.succs.resize(sum);
  std::uint32_t* succs = p.succs.data();
  const TaskId* deps = p.deps.data();
  std::uint32_t end = p.dep_offsets[n];
  for (std::size_t t = n; t-- > 0;) {
    const std::uint32_t begin = p.dep_offsets[t];
    for (std::uint32_t k = begin; k < end; ++k) succs[--offsets[deps[k]]] = static_cast<std::uint32_t>(t);
    end = begin;
  }
  const std::size_t ns = p.streams.size();
  p.stream_offsets.assign(ns + 1, 0);
  for (std::size_t s = 0; s < ns; ++s) p.stream_offsets[s + 1] = p.stream_offsets[s] + on_stream_[s];
  p.stream_tasks.resize(n);
  p.stream_index.resize(n);
  // Each stream's next place (a local array: the stores below cannot touch it).
  std::array<std::uint32_t, 256> pos{};
  std::copy_n(p.stream_offsets.begin(), std::min<std::size_t>(ns, pos.size()), pos.begin());
  std::uint32_t* out = p.stream_tasks.data();
  std::uint32_t* index = p.stream_index.data();
  const Task* tasks = p.tasks.data();
  if (sequence_.empty()) {
    // In task order: each stream's tasks come in increasing order.
    for (std::size_t t = 0; t < n; ++t) {
      const std::uint32_t g = pos[tasks[t].stream]++;
      out[g] = static_cast<std::uint32_t>(t);
      index[t] = g;
    }
    p.streams_in_task_order = true;
  } else {
    while (sequence_.size() < n) sequence_.push_back(static_cast<TaskId>(sequence_.size()));
    // Each stream's last task placed so far (n: none): a smaller one after it breaks task order.
    std::array<std::uint32_t, 256> last;
    last.fill(static_cast<std::uint32_t>(n));
    bool ordered = true;
    for (TaskId t : sequence_) {
      const std::uint8_t s = tasks[t].stream;
      const std::uint32_t g = pos[s]++;
      out[g] = t;
      index[t] = g;
      ordered &= last[s] == n || last[s] < t;
      last[s] = t;
    }
    p.streams_in_task_order = ordered;
  }
  return std::move(program_);
}

}  // namespace trainsim
