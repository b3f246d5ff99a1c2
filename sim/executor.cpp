#include "sim/executor.hpp"

#include <cassert>
#include <stdexcept>
#include <string>

namespace trainsim {

Executor::Executor(const SimulationSetup& setup, const Cluster& cluster, const ComputeCostModel& costs,
                   const AnalyticalNetwork& network)
    : setup_(&setup), cluster_(&cluster), costs_(&costs), network_(&network) {
  const std::size_t nr = setup.ranks.size();
  task_base_.resize(nr + 1);
  stream_base_.resize(nr + 1);
  slot_base_.resize(nr + 1);
  timeline_of_rank_.assign(nr, -1);
  for (std::size_t r = 0; r < nr; ++r) {
    const ProgramTemplate& p = setup.programs[setup.ranks[r].program];
    assert(setup.ranks[r].comm_of_slot.size() == p.comm_slots.size());
    task_base_[r + 1] = task_base_[r] + static_cast<std::uint32_t>(p.tasks.size());
    stream_base_[r + 1] = stream_base_[r] + static_cast<std::uint32_t>(p.streams.size());
    slot_base_[r + 1] = slot_base_[r] + static_cast<std::uint32_t>(p.comm_slots.size());
    if (setup.ranks[r].record) {
      timeline_of_rank_[r] = static_cast<int>(result_.timelines.size());
      result_.timelines.push_back(RankTimeline{static_cast<std::uint32_t>(r), {}});
    }
  }
  remaining_deps_.resize(task_base_[nr]);
  for (std::size_t r = 0; r < nr; ++r) {
    const ProgramTemplate& p = setup.programs[setup.ranks[r].program];
    for (std::uint32_t t = 0; t < p.tasks.size(); ++t) {
      remaining_deps_[task_base_[r] + t] = p.dep_offsets[t + 1] - p.dep_offsets[t];
    }
  }
  stream_pos_.assign(stream_base_[nr], 0);
  stream_busy_.assign(stream_base_[nr], 0);
  stream_start_.assign(stream_base_[nr], Time{});
  slot_seq_.assign(slot_base_[nr], 0);
  done_count_.assign(nr, 0);
  comms_.resize(setup.comms.size());
  op_cost_cache_.resize(setup.programs.size() * static_cast<std::size_t>(cluster.num_gpu_types()));
  result_.finish.assign(nr, Time{});
}

const CommShape& Executor::shape_of(std::uint32_t comm) {
  CommState& c = comms_[comm];
  if (!c.shaped) {
    c.shape = network_->shape(setup_->comms[comm].members);
    c.shaped = true;
  }
  return c.shape;
}

Time Executor::op_duration(std::uint32_t rank, std::uint32_t op) {
  const RankProgram& rp = setup_->ranks[rank];
  const int type = cluster_->gpu_type_of(rp.gpu);
  auto& cache = op_cost_cache_[rp.program * static_cast<std::size_t>(cluster_->num_gpu_types()) + type];
  if (cache.empty()) {
    const ProgramTemplate& p = setup_->programs[rp.program];
    cache.reserve(p.ops.size());
    for (const ComputeOp& o : p.ops) cache.push_back(costs_->duration(o, type));
  }
  return cache[op];
}

void Executor::record(std::uint32_t rank, std::uint32_t task, Time start, Time end, std::uint8_t category) {
  const int tl = timeline_of_rank_[rank];
  if (tl < 0 || end <= start) return;
  const Task& t = setup_->programs[setup_->ranks[rank].program].tasks[task];
  result_.timelines[tl].intervals.push_back(Interval{start, end, task, t.stream, category});
}

void Executor::try_start(std::uint32_t rank, std::uint8_t stream, Time now) {
  const ProgramTemplate& p = setup_->programs[setup_->ranks[rank].program];
  const std::uint32_t si = stream_base_[rank] + stream;
  if (stream_busy_[si]) return;
  const auto tasks = p.stream(stream);
  if (stream_pos_[si] >= tasks.size()) return;
  const std::uint32_t task = tasks[stream_pos_[si]];
  if (remaining_deps_[task_base_[rank] + task] != 0) return;
  stream_busy_[si] = 1;
  stream_start_[si] = now;
  const Task& t = p.tasks[task];
  switch (t.kind) {
    case TaskKind::Compute:
      queue_.push(now + op_duration(rank, t.ref), rank, task);
      break;
    case TaskKind::Collective:
      post_collective(rank, task, now);
      break;
    case TaskKind::Send:
    case TaskKind::Recv:
      post_p2p(rank, task, now);
      break;
  }
}

void Executor::start_transfer(std::uint32_t rank, std::uint32_t task, Time start, Time end) {
  const Task& t = setup_->programs[setup_->ranks[rank].program].tasks[task];
  stream_start_[stream_base_[rank] + t.stream] = start;
  queue_.push(end, rank, task);
}

void Executor::post_collective(std::uint32_t rank, std::uint32_t task, Time now) {
  const ProgramTemplate& p = setup_->programs[setup_->ranks[rank].program];
  const Task& t = p.tasks[task];
  const std::uint32_t comm = setup_->ranks[rank].comm_of_slot[t.ref];
  CommState& c = comms_[comm];
  const std::uint64_t seq = slot_seq_[slot_base_[rank] + t.ref]++;
  while (c.base_seq + c.pending.size() <= seq) c.pending.emplace_back();
  PendingCollective& pc = c.pending[seq - c.base_seq];
  pc.waiters.push_back(Waiter{rank, task, now});
  if (static_cast<int>(pc.waiters.size()) < setup_->comms[comm].simulated_members) return;
  // Everyone is here: the transfer starts now.
  const Time dur =
      Time::seconds(network_->collective_seconds(shape_of(comm), t.collective, static_cast<double>(t.bytes)));
  for (const Waiter& w : pc.waiters) {
    record(w.rank, w.task, w.posted, now, kWaitCategory);
    start_transfer(w.rank, w.task, now, now + dur);
  }
  pc.done = true;
  pc.waiters.clear();
  while (!c.pending.empty() && c.pending.front().done) {
    c.pending.pop_front();
    ++c.base_seq;
  }
}

void Executor::post_p2p(std::uint32_t rank, std::uint32_t task, Time now) {
  const RankProgram& rp = setup_->ranks[rank];
  const Task& t = setup_->programs[rp.program].tasks[task];
  const std::uint32_t comm = rp.comm_of_slot[t.ref];
  const Communicator& cm = setup_->comms[comm];
  CommState& c = comms_[comm];
  const int me = cm.members[0] == rp.gpu ? 0 : 1;
  const int sender = t.kind == TaskKind::Send ? me : 1 - me;
  (t.kind == TaskKind::Send ? c.sends : c.recvs)[sender].push_back(Waiter{rank, task, now});
  auto& sends = c.sends[sender];
  auto& recvs = c.recvs[sender];
  if (sends.empty() || recvs.empty()) return;
  const Waiter s = sends.front();
  const Waiter r = recvs.front();
  sends.pop_front();
  recvs.pop_front();
  const Time dur = Time::seconds(network_->p2p_seconds(shape_of(comm), static_cast<double>(t.bytes)));
  start_transfer(s.rank, s.task, now, now + dur);
  start_transfer(r.rank, r.task, now, now + dur);
}

void Executor::complete(std::uint32_t rank, std::uint32_t task, Time now) {
  const ProgramTemplate& p = setup_->programs[setup_->ranks[rank].program];
  const Task& t = p.tasks[task];
  const std::uint32_t si = stream_base_[rank] + t.stream;
  const std::uint8_t category =
      t.kind == TaskKind::Compute ? kComputeCategory : static_cast<std::uint8_t>(1 + static_cast<int>(t.comm_class));
  record(rank, task, stream_start_[si], now, category);
  stream_busy_[si] = 0;
  ++stream_pos_[si];
  if (++done_count_[rank] == p.tasks.size()) result_.finish[rank] = now;
  for (std::uint32_t s : p.succs_of(task)) {
    if (--remaining_deps_[task_base_[rank] + s] == 0) try_start(rank, p.tasks[s].stream, now);
  }
  try_start(rank, t.stream, now);
}

SimulationResult Executor::run() {
  const auto nr = static_cast<std::uint32_t>(setup_->ranks.size());
  for (std::uint32_t r = 0; r < nr; ++r) {
    const ProgramTemplate& p = setup_->programs[setup_->ranks[r].program];
    if (p.tasks.empty()) continue;
    for (std::uint32_t s = 0; s < p.streams.size(); ++s) try_start(r, static_cast<std::uint8_t>(s), Time{});
  }
  std::uint64_t events = 0;
  Time now;
  while (!queue_.empty()) {
    const Event e = queue_.pop();
    now = e.time;
    ++events;
    complete(e.rank, e.payload, now);
  }
  result_.events = events;
  result_.makespan = now;
  result_.completed = true;
  for (std::uint32_t r = 0; r < nr; ++r) {
    if (done_count_[r] != setup_->programs[setup_->ranks[r].program].tasks.size()) result_.completed = false;
  }
  if (!result_.completed) result_.deadlock = describe_deadlock(&result_.deadlocked_ranks);
  return std::move(result_);
}

std::vector<WaitingTask> Executor::describe_deadlock(std::size_t* ranks_waiting) const {
  constexpr std::size_t kMaxReported = 16;
  std::vector<WaitingTask> out;
  *ranks_waiting = 0;
  for (std::uint32_t r = 0; r < setup_->ranks.size(); ++r) {
    const RankProgram& rp = setup_->ranks[r];
    const ProgramTemplate& p = setup_->programs[rp.program];
    if (done_count_[r] == p.tasks.size()) continue;
    ++*ranks_waiting;
    for (std::uint32_t s = 0; s < p.streams.size(); ++s) {
      const std::uint32_t si = stream_base_[r] + s;
      const auto tasks = p.stream(s);
      if (stream_pos_[si] >= tasks.size()) continue;
      if (out.size() >= kMaxReported) break;
      const std::uint32_t task = tasks[stream_pos_[si]];
      const Task& t = p.tasks[task];
      std::string reason;
      if (stream_busy_[si]) {
        const Communicator& cm = setup_->comms[rp.comm_of_slot[t.ref]];
        if (t.kind == TaskKind::Collective) {
          reason = std::string("posted ") + to_string(t.collective) + " on " + cm.name +
                   "; other members never posted a matching one";
        } else {
          reason = std::string(to_string(t.kind)) + " on " + cm.name + " never matched by the peer";
        }
      } else {
        reason = "waits for unfinished tasks:";
        int listed = 0;
        for (std::uint32_t d : p.deps_of(task)) {
          const std::uint32_t ds = p.tasks[d].stream;
          const auto dtasks = p.stream(ds);
          bool finished = false;
          for (std::uint32_t i = 0; i < stream_pos_[stream_base_[r] + ds]; ++i) finished |= dtasks[i] == d;
          if (!finished && listed++ < 3) reason += " '" + p.labels[p.tasks[d].label] + "'";
        }
      }
      out.push_back(WaitingTask{rp.name, p.streams[s], p.labels[t.label], reason});
    }
  }
  return out;
}

}  // namespace trainsim
