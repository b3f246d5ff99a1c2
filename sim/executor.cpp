#include "sim/executor.hpp"

#include "sim/check.hpp"
#include "sim/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

namespace trainsim {

Executor::Executor(const SimulationSetup& setup, const Cluster& cluster, const ComputeCostModel& costs,
                   NetworkModel& network)
    : setup_(&setup), cluster_(&cluster), costs_(&costs), network_(&network) {
  init();
}

Executor::Executor(const SimulationSetup& setup, const Cluster& cluster, const ComputeCostModel& costs,
                   const AnalyticalNetwork& network)
    : setup_(&setup),
      cluster_(&cluster),
      costs_(&costs),
      owned_network_(std::make_unique<AnalyticalNetworkModel>(network)),
      network_(owned_network_.get()) {
  init();
}

Executor::Executor(const SimulationSetup& setup, const Cluster& cluster, const ComputeCostModel& costs,
                   FlowCollectives& flows)
    : setup_(&setup),
      cluster_(&cluster),
      costs_(&costs),
      owned_network_(std::make_unique<FlowNetworkModel>(flows)),
      network_(owned_network_.get()) {
  init();
}

std::size_t estimate_run_bytes(const SimulationSetup& setup, bool flow) {
  std::size_t tasks = 0, streams = 0, slots = 0, members = 0;
  for (const RankProgram& r : setup.ranks) {
    const ProgramTemplate& p = setup.programs[r.program];
    tasks += p.tasks.size();
    streams += p.streams.size();
    slots += p.comm_slots.size();
  }
  for (const Communicator& c : setup.comms) members += c.members.size();
  // Per stream: position, busy flag, start, the running kernel's progress,
  // start, end and rate flag, and up to one pending event (a vector that grows
  // by doubling may hold twice that).
  const std::size_t per_stream = sizeof(std::uint32_t) + 1 + 3 * sizeof(Time) + sizeof(double) + 1 + 2 * sizeof(Event);
  // Per rank: three bases, stride, finish, done count, timeline index, transfers running, program, op costs.
  const std::size_t per_rank = 4 * sizeof(std::size_t) + sizeof(Time) + 5 * sizeof(std::uint32_t);
  // Per communicator: its state (five vectors, a sequence number, three
  // counters); per member the waiters of a pending collective (two of 16 bytes
  // with the vector's doubling) or of queued messages.
  const std::size_t per_comm = sizeof(std::vector<int>) * 5 + sizeof(std::uint64_t) + 5 * sizeof(std::uint32_t);
  const std::size_t per_member = 2 * (2 * sizeof(std::uint32_t) + sizeof(Time));
  // Per slot: communicator, sequence number, member index.
  const std::size_t per_slot = 3 * sizeof(std::uint32_t);
  double bytes =
      static_cast<double>(tasks * sizeof(std::uint32_t) + streams * per_stream + slots * per_slot +
                          setup.ranks.size() * per_rank + setup.comms.size() * per_comm + members * per_member);
  if (flow) bytes += kFlowBytesPerMember * static_cast<double>(members);
  return static_cast<std::size_t>(bytes);
}

void Executor::init() {
  const SimulationSetup& setup = *setup_;
  const Cluster& cluster = *cluster_;
  const std::size_t nr = setup.ranks.size();
  // Per-task, per-stream and per-slot state of the ranks sharing a program is
  // interleaved (task t of every such rank side by side): peers that run the
  // same task at the same time touch the same cache lines.
  const std::size_t np = setup.programs.size();
  std::vector<std::uint32_t> sharing(np, 0), index(nr);
  for (std::size_t r = 0; r < nr; ++r) index[r] = sharing[setup.ranks[r].program]++;
  std::vector<std::size_t> task0(np), stream0(np), slot0(np);
  std::size_t tasks = 0, streams = 0, slots = 0;
  for (std::size_t p = 0; p < np; ++p) {
    task0[p] = tasks;
    stream0[p] = streams;
    slot0[p] = slots;
    tasks += setup.programs[p].tasks.size() * sharing[p];
    streams += setup.programs[p].streams.size() * sharing[p];
    slots += setup.programs[p].comm_slots.size() * sharing[p];
  }
  task_base_.resize(nr);
  stream_base_.resize(nr);
  slot_base_.resize(nr);
  stride_.resize(nr);
  timeline_of_rank_.assign(nr, -1);
  for (std::size_t r = 0; r < nr; ++r) {
    const std::uint32_t prog = setup.ranks[r].program;
    TRAINSIM_CHECK(setup.ranks[r].comm_of_slot.size() == setup.programs[prog].comm_slots.size(),
                   "rank " + setup.ranks[r].name + " binds " + std::to_string(setup.ranks[r].comm_of_slot.size()) +
                       " communicators for " + std::to_string(setup.programs[prog].comm_slots.size()) + " slots");
    task_base_[r] = task0[prog] + index[r];
    stream_base_[r] = stream0[prog] + index[r];
    slot_base_[r] = slot0[prog] + index[r];
    stride_[r] = sharing[prog];
    if (setup.ranks[r].record) {
      timeline_of_rank_[r] = static_cast<int>(result_.timelines.size());
      result_.timelines.push_back(RankTimeline{static_cast<std::uint32_t>(r), {}, {}});
      // One interval per task at most, and one per rendezvous wait (rare: a
      // regrowth then) besides.
      result_.timelines.back().intervals.reserve(setup.programs[prog].tasks.size());
    }
  }
  remaining_deps_.resize(tasks);
  for (std::size_t r = 0; r < nr; ++r) {
    const ProgramTemplate& p = setup.programs[setup.ranks[r].program];
    const std::uint32_t* offsets = p.dep_offsets.data();
    std::uint32_t* out = remaining_deps_.data() + task_base_[r];
    const std::size_t stride = stride_[r], n = p.tasks.size();
    if (stride == 1) {
      for (std::size_t t = 0; t < n; ++t) out[t] = offsets[t + 1] - offsets[t];
    } else {
      for (std::size_t t = 0; t < n; ++t) out[t * stride] = offsets[t + 1] - offsets[t];
    }
  }
  stream_pos_.assign(streams, 0);
  stream_busy_.assign(streams, 0);
  stream_start_.assign(streams, Time{});
  slots_.assign(slots, SlotState{});
  program_of_rank_.resize(nr);
  for (std::size_t r = 0; r < nr; ++r) {
    const RankProgram& rp = setup.ranks[r];
    program_of_rank_[r] = &setup.programs[rp.program];
    for (std::uint32_t k = 0; k < rp.comm_of_slot.size(); ++k) {
      SlotState& st = slots_[slot_at(static_cast<std::uint32_t>(r), k)];
      st.comm = rp.comm_of_slot[k];
      const Communicator& cm = setup.comms[st.comm];
      st.member = !cm.members.empty() && cm.members[0] == rp.gpu ? 0 : 1;
      st.solo = cm.simulated_members == 1 ? 1 : 0;
    }
  }
  done_count_.assign(nr, 0);
  comms_.resize(setup.comms.size());
  op_cost_cache_.resize(setup.programs.size() * static_cast<std::size_t>(cluster.num_gpu_types()));
  op_costs_of_rank_.resize(nr);
  op_table_of_rank_.resize(nr);
  shortest_before_.resize(op_cost_cache_.size());
  shortest_of_op_.resize(op_cost_cache_.size());
  {
    // Per program: the first program with the same ops (the programs compared
    // with are those that are the first of theirs).
    std::vector<std::uint32_t> same_ops(setup.programs.size());
    std::vector<std::uint32_t> firsts;
    for (std::uint32_t q = 0; q < setup.programs.size(); ++q) {
      same_ops[q] = q;
      for (const std::uint32_t f : firsts) {
        if (setup.programs[f].ops == setup.programs[q].ops) {
          same_ops[q] = f;
          break;
        }
      }
      if (same_ops[q] == q) firsts.push_back(q);
    }
    const auto types = static_cast<std::size_t>(cluster.num_gpu_types());
    for (std::size_t r = 0; r < nr; ++r) {
      const RankProgram& rp = setup.ranks[r];
      const auto type = static_cast<std::size_t>(rp.gpu_type >= 0 ? rp.gpu_type : cluster.gpu_type_of(rp.gpu));
      op_costs_of_rank_[r] = static_cast<std::uint32_t>(rp.program * types + type);
      op_table_of_rank_[r] = static_cast<std::uint32_t>(same_ops[rp.program] * types + type);
    }
  }
  for (int t = 0; t < cluster.num_gpu_types(); ++t) {
    const CalibrationProfile& prof = costs_->profile(t);
    for (double share : {prof.compute_share_during_comm.value, prof.compute_share_during_net_p2p.value})
      contention_ |= share > 0 && share < 1.0;
  }
  windows_of_type_.resize(static_cast<std::size_t>(cluster.num_gpu_types()));
  for (int t = 0; t < cluster.num_gpu_types(); ++t) {
    for (const SlowdownWindow& w : cluster.gpu_type(t).slowdown_windows) {
      const ClockWindow cw{Time::seconds(w.start_s), Time::seconds(w.end_s), w.factor};
      if (cw.end <= cw.start) continue;
      windows_of_type_[t].push_back(cw);
      window_changes_.push_back(cw.start);
      window_changes_.push_back(cw.end);
    }
  }
  std::sort(window_changes_.begin(), window_changes_.end());
  window_changes_.erase(std::unique(window_changes_.begin(), window_changes_.end()), window_changes_.end());
  for (std::size_t r = 0; r < nr; ++r) {
    const RankProgram& rp = setup.ranks[r];
    const int type = rp.gpu_type >= 0 ? rp.gpu_type : cluster.gpu_type_of(rp.gpu);
    if (!windows_of_type_[type].empty()) windowed_ranks_.push_back(static_cast<std::uint32_t>(r));
  }
  retiming_ = contention_ || !windowed_ranks_.empty();
  if (contention_) {
    comm_active_.assign(nr, 0);
    net_p2p_active_.assign(nr, 0);
    comm_spans_nodes_.resize(setup.comms.size());
    for (std::size_t c = 0; c < setup.comms.size(); ++c) {
      const auto& members = setup.comms[c].members;
      comm_spans_nodes_[c] = std::any_of(members.begin(), members.end(),
                                         [&](int g) { return cluster.node_of(g) != cluster.node_of(members.front()); });
    }
  }
  if (retiming_) {
    compute_streams_.resize(np);
    for (std::size_t p = 0; p < np; ++p) {
      const ProgramTemplate& prog = setup.programs[p];
      for (std::uint32_t s = 0; s < prog.streams.size(); ++s) {
        const auto on_stream = prog.stream(s);
        if (std::any_of(on_stream.begin(), on_stream.end(),
                        [&](std::uint32_t t) { return prog.tasks[t].kind == TaskKind::Compute; })) {
          compute_streams_[p].push_back(static_cast<std::uint8_t>(s));
        }
      }
    }
    run_frac_.assign(streams, 0.0);
    run_since_.assign(streams, Time{});
    run_end_.assign(streams, Time{});
    run_slow_.assign(streams, 0);
    run_factor_.assign(streams, 1.0);
  }
  result_.finish.assign(nr, Time{});
  std::vector<int> gpus(nr);
  for (std::size_t r = 0; r < nr; ++r) gpus[r] = setup.ranks[r].gpu;
  network_->set_simulated_gpus(gpus);
  network_->bind(setup.comms);
}

Time Executor::op_duration(std::uint32_t rank, std::uint32_t op, std::uint8_t contention) {
  auto& cache = op_cost_cache_[op_table_of_rank_[rank]];
  if (cache.empty()) {
    const RankProgram& rp = setup_->ranks[rank];
    const int type = rp.gpu_type >= 0 ? rp.gpu_type : cluster_->gpu_type_of(rp.gpu);
    const ProgramTemplate& p = setup_->programs[rp.program];
    const CalibrationProfile& prof = costs_->profile(type);
    cache.reserve(kContentionLevels * p.ops.size());
    for (const ComputeOp& o : p.ops) {
      cache.push_back(costs_->duration(o, type));
      cache.push_back(costs_->duration(o, type, prof.compute_share_during_net_p2p.value));
      cache.push_back(costs_->duration(o, type, prof.compute_share_during_comm.value));
    }
  }
  return cache[kContentionLevels * static_cast<std::size_t>(op) + contention];
}

// What the rank's running transfers leave to its kernels: kCommContention while a
// collective or a send/recv inside a node runs, else kNetP2pContention while a
// send/recv between nodes runs (NCCL drives a network peer with few channels), else none.
std::uint8_t Executor::contention(std::uint32_t rank) const {
  if (!contention_) return kNoContention;
  if (comm_active_[rank] > 0) return kCommContention;
  return net_p2p_active_[rank] > 0 ? kNetP2pContention : kNoContention;
}

// A send or recv on a communicator whose members are on different nodes.
bool Executor::net_p2p(std::uint32_t rank, const Task& t) const {
  return t.kind != TaskKind::Collective && comm_spans_nodes_[slots_[slot_at(rank, t.ref)].comm];
}

// NCCL launches a send/recv kernel when the program posts it; the kernel holds
// its channels' SMs, spinning while the peer has not posted, until the transfer
// ends. A send, and a receive posted after a task of its rank (Megatron-LM's
// overlapped interleaved exchange), hold them from the post. A receive without
// dependencies is the planner's stand-in for one posted ahead by a runtime that
// posts it when its sender is about done (the Zero Bubble runtime) or that blocks
// on it (1F1B without overlap): its SMs count from the transfer's start.
bool Executor::holds_sms_from_post(std::uint32_t rank, std::uint32_t task) const {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const Task& t = p.tasks[task];
  return t.kind == TaskKind::Send || (t.kind == TaskKind::Recv && !p.deps_of(task).empty());
}

// The product of the rank's GPU's slowdown windows in force at `now`.
double Executor::window_factor(std::uint32_t rank, Time now) const {
  if (windowed_ranks_.empty()) return 1.0;
  const RankProgram& rp = setup_->ranks[rank];
  const int type = rp.gpu_type >= 0 ? rp.gpu_type : cluster_->gpu_type_of(rp.gpu);
  double f = 1.0;
  for (const ClockWindow& w : windows_of_type_[type]) {
    if (now >= w.start && now < w.end) f *= w.factor;
  }
  return f;
}

void Executor::start_compute(std::uint32_t rank, std::uint32_t task, std::uint32_t op, Time now) {
  if (!retiming_) {
    schedule(rank, task, now + op_duration(rank, op, kNoContention), now);
    return;
  }
  const std::size_t si = stream_at(rank, program_of_rank_[rank]->tasks[task].stream);
  const std::uint8_t slow = contention(rank);
  const double factor = window_factor(rank, now);
  run_frac_[si] = 0;
  run_since_[si] = now;
  run_slow_[si] = slow;
  run_factor_[si] = factor;
  const Time d = op_duration(rank, op, slow);
  run_end_[si] = now + (factor == 1.0 ? d : Time::ns(std::llround(static_cast<double>(d.count_ns()) * factor)));
  schedule(rank, task, run_end_[si], now);
}

void Executor::comm_started(std::uint32_t rank, const Task& t, Time now) {
  if (!contention_) return;
  const std::uint8_t before = contention(rank);
  ++(net_p2p(rank, t) ? net_p2p_active_ : comm_active_)[rank];
  if (contention(rank) != before) retime_compute(rank, now);
  if (chains_ && chain_run_[rank].chain != kNoChain) reproject(rank, now);
}

void Executor::comm_finished(std::uint32_t rank, const Task& t, Time now) {
  if (!contention_) return;
  const std::uint8_t before = contention(rank);
  --(net_p2p(rank, t) ? net_p2p_active_ : comm_active_)[rank];
  if (contention(rank) != before) retime_compute(rank, now);
  if (chains_ && chain_run_[rank].chain != kNoChain) reproject(rank, now);
}

// The rank's compute rate changed at `now`: book the progress made at the old
// rate and move each running kernel's completion to where the new rate puts it.
void Executor::retime_compute(std::uint32_t rank, Time now) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const std::uint8_t slow = contention(rank);
  const double factor = window_factor(rank, now);
  for (const std::uint8_t s : compute_streams_[setup_->ranks[rank].program]) {
    const std::size_t si = stream_at(rank, s);
    // A kernel that ended at this instant in another event: in the other order
    // this change would have re-timed it.
    if (chains_ && compute_done_at_[si] == now && compute_done_serial_[si] != serial_) order_tie_ = true;
    if (!stream_busy_[si] || (run_slow_[si] == slow && run_factor_[si] == factor)) continue;
    const Task& t = p.tasks[p.stream(s)[stream_pos_[si]]];
    if (t.kind != TaskKind::Compute) continue;
    double old_d = static_cast<double>(op_duration(rank, t.ref, run_slow_[si]).count_ns());
    double new_d = static_cast<double>(op_duration(rank, t.ref, slow).count_ns());
    if (run_factor_[si] != 1.0) old_d *= run_factor_[si];
    if (factor != 1.0) new_d *= factor;
    if (old_d > 0)
      run_frac_[si] = std::min(1.0, run_frac_[si] + static_cast<double>((now - run_since_[si]).count_ns()) / old_d);
    run_since_[si] = now;
    run_slow_[si] = slow;
    run_factor_[si] = factor;
    const Time end = now + Time::ns(static_cast<std::int64_t>(std::llround((1.0 - run_frac_[si]) * new_d)));
    // A kernel due to end at this instant, moved: in the other order it would have ended.
    if (chains_ && run_end_[si] == now && end != now) order_tie_ = true;
    if (end != run_end_[si]) {
      run_end_[si] = end;
      schedule(rank, p.stream(s)[stream_pos_[si]], end, now);
    }
  }
  if (chains_ && chain_run_[rank].chain != kNoChain) reproject(rank, now);
}

// A compute completion superseded by a later retime.
bool Executor::stale(const Event& e) const {
  if (!retiming_) return false;
  const ProgramTemplate& p = *program_of_rank_[e.rank];
  const Task& t = p.tasks[e.payload];
  if (t.kind != TaskKind::Compute) return false;
  const std::size_t si = stream_at(e.rank, t.stream);
  return !stream_busy_[si] || p.stream(t.stream)[stream_pos_[si]] != e.payload || run_end_[si] != e.time;
}

void Executor::record(std::uint32_t rank, std::uint32_t task, Time start, Time end, std::uint8_t category) {
  const int tl = timeline_of_rank_[rank];
  if (tl < 0 || end <= start) return;
  const Task& t = program_of_rank_[rank]->tasks[task];
  add_interval(tl, Interval{start, end, task, t.stream, category});
}

void Executor::try_start(std::uint32_t rank, std::uint8_t stream, Time now) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const std::size_t si = stream_at(rank, stream);
  if (stream_busy_[si]) return;
  const auto tasks = p.stream(stream);
  if (stream_pos_[si] >= tasks.size()) return;
  const std::uint32_t task = tasks[stream_pos_[si]];
  if (remaining_deps_[task_at(rank, task)] != 0) return;
  if (memo_) {
    if (memo_end_[rank] != Time::max()) {
      if (task != quiet_post_[rank]) {
        // A task outside the applied pass became ready inside it (a successor of the task whose
        // completion started the pass, released after it): the pass's record no longer holds,
        // so the run is repeated task by task.
        order_tie_ = true;
        return;
      }
      quiet_post_[rank] = kNoPass;  // posted now, as clear_passes allowed
    } else if (Recording& rec = recording_[rank]; rec.active) {
      const PassMark& m = p.passes[rec.pass];
      if (task < m.first || task >= m.first + m.count) rec.clean = false;  // something else runs beside the pass
    } else {
      const std::uint32_t pass = pass_of_first_[setup_->ranks[rank].program][task];
      if (pass != kNoPass && try_memo(rank, pass, now)) return;
    }
  }
  stream_busy_[si] = 1;
  stream_start_[si] = now;
  const Task& t = p.tasks[task];
  if (memo_ && t.kind != TaskKind::Compute) busy_end_[si] = Time::max();
  switch (t.kind) {
    case TaskKind::Compute:
      start_compute(rank, task, t.ref, now);
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

// Everyone is here: the transfer starts now on the network; its waiters hold
// their streams (and the rank's SMs) until the network reports it done.
void Executor::start_transfer(const TransferRequest& request, std::span<const Waiter> waiters, Time now) {
  if (memo_) {
    for (const Waiter& w : waiters) {
      if (memo_end_[w.rank] != Time::max()) {
        order_tie_ = true;  // a rank inside an applied pass touched: never expected, the run is repeated
        return;
      }
      Recording& rec = recording_[w.rank];
      if (rec.active) {
        const PassMark& m = program_of_rank_[w.rank]->passes[rec.pass];
        if (w.task < m.first || w.task >= m.first + m.count) rec.clean = false;
      }
    }
  }
  for (const Waiter& w : waiters) sync(w.rank, now);
  const std::uint32_t slot = new_in_flight();
  const Time end = network_->start(now, request, slot);
  for (const Waiter& w : waiters) {
    const Task& wt = program_of_rank_[w.rank]->tasks[w.task];
    stream_start_[stream_at(w.rank, wt.stream)] = now;
    if (!holds_sms_from_post(w.rank, w.task)) comm_started(w.rank, wt, now);
  }
  if (end != Time::max()) {
    // Known at once (analytical): the waiters' completions go straight to the queue.
    free_in_flight_.push_back(slot);
    for (const Waiter& w : waiters) {
      if (memo_) busy_end_[stream_at(w.rank, program_of_rank_[w.rank]->tasks[w.task].stream)] = end;
      schedule(w.rank, w.task, end, now);
    }
    return;
  }
  in_flight_[slot].assign(waiters.begin(), waiters.end());
  network_next_ = network_->next_event();
}

// Both posts name the same transfer; otherwise the mismatch is recorded and the run stops.
bool Executor::same_transfer(const Waiter& a, const Waiter& b, std::uint32_t comm) {
  const Task& ta = setup_->programs[setup_->ranks[a.rank].program].tasks[a.task];
  const Task& tb = setup_->programs[setup_->ranks[b.rank].program].tasks[b.task];
  const bool collective = ta.kind == TaskKind::Collective;
  if (ta.bytes == tb.bytes && ta.matrix == tb.matrix && (!collective || ta.collective == tb.collective)) return true;
  auto describe = [&](const Waiter& w, const Task& t) {
    const ProgramTemplate& p = *program_of_rank_[w.rank];
    return WaitingTask{setup_->ranks[w.rank].name, p.streams[t.stream], std::string(p.labels[t.label]),
                       std::string("posted ") + (collective ? to_string(t.collective) : to_string(t.kind)) + " of " +
                           std::to_string(t.bytes) + " bytes on " + setup_->comms[comm].name};
  };
  mismatches_.push_back(describe(a, ta));
  mismatches_.push_back(describe(b, tb));
  stop_ = true;
  return false;
}

void Executor::WaiterQueue::push(const Waiter& w) {
  if (empty()) {
    items.clear();
    head = 0;
  }
  items.push_back(w);
}

void Executor::WaiterQueue::pop() {
  ++head;
  if (empty()) {
    items.clear();
    head = 0;
  }
}

namespace {
// The transfer a collective task posts on communicator `comm` (an all-to-all-v with its per-pair bytes).
TransferRequest collective_request(const SimulationSetup& setup, const Task& t, std::uint32_t comm) {
  TransferRequest request{comm, false, t.collective, 0, t.bytes, kNoMatrix, {}};
  if (t.matrix != kNoMatrix) {
    TRAINSIM_CHECK(t.matrix < setup.traffic.size(), "a task names traffic matrix " + std::to_string(t.matrix) + " of " +
                                                        std::to_string(setup.traffic.size()));
    request.matrix = t.matrix;
    request.pairs = setup.traffic[t.matrix];
  }
  return request;
}
}  // namespace

void Executor::post_collective(std::uint32_t rank, std::uint32_t task, Time now) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const Task& t = p.tasks[task];
  SlotState& slot = slots_[slot_at(rank, t.ref)];
  const std::uint32_t comm = slot.comm;
  note_post(rank, t.ref, now);
  if (slot.solo) {
    // Nobody else to wait for: the same start as a rendezvous of one.
    const Waiter me{rank, task, now};
    start_transfer(collective_request(*setup_, t, comm), std::span<const Waiter>(&me, 1), now);
    return;
  }
  CommState& c = comms_[comm];
  const std::uint64_t seq = slot.seq++;
  // Pending collective `seq` lives at pending_head + (seq - base_seq); elements
  // past the live ones are reused (done, waiters emptied) before new ones are made.
  const std::size_t index = c.pending_head + static_cast<std::size_t>(seq - c.base_seq);
  while (c.pending_head + c.pending_live <= index) {
    const std::size_t next = c.pending_head + c.pending_live;
    if (next < c.pending.size()) {
      c.pending[next].done = false;
    } else {
      c.pending.emplace_back();
    }
    ++c.pending_live;
  }
  PendingCollective& pc = c.pending[index];
  const Waiter me{rank, task, now};
  if (!pc.waiters.empty() && !same_transfer(pc.waiters.front(), me, comm)) return;
  if (pc.waiters.empty()) pc.waiters.reserve(static_cast<std::size_t>(setup_->comms[comm].simulated_members));
  pc.waiters.push_back(me);
  if (static_cast<int>(pc.waiters.size()) < setup_->comms[comm].simulated_members) return;
  for (const Waiter& w : pc.waiters) sync(w.rank, now);
  for (const Waiter& w : pc.waiters) record(w.rank, w.task, w.posted, now, kWaitCategory);
  start_transfer(collective_request(*setup_, t, comm), pc.waiters, now);
  pc.done = true;
  pc.waiters.clear();
  while (c.pending_live > 0 && c.pending[c.pending_head].done) {
    ++c.pending_head;
    --c.pending_live;
    ++c.base_seq;
  }
  if (c.pending_live == 0) {
    c.pending_head = 0;
  } else if (c.pending_head > 0 && 2 * c.pending_head >= c.pending.size()) {
    // Keep the live ones at the front (rare: collectives posted out of order).
    std::rotate(c.pending.begin(), c.pending.begin() + c.pending_head, c.pending.end());
    c.pending_head = 0;
  }
}

void Executor::post_p2p(std::uint32_t rank, std::uint32_t task, Time now) {
  const Task& t = program_of_rank_[rank]->tasks[task];
  const SlotState& slot = slots_[slot_at(rank, t.ref)];
  const std::uint32_t comm = slot.comm;
  note_post(rank, t.ref, now);
  CommState& c = comms_[comm];
  if (memo_) ++p2p_posts_[2 * slot_at(rank, t.ref) + (t.kind == TaskKind::Send ? 0 : 1)];
  const int me = static_cast<int>(slot.member);
  const int sender = t.kind == TaskKind::Send ? me : 1 - me;
  (t.kind == TaskKind::Send ? c.sends : c.recvs)[sender].push(Waiter{rank, task, now});
  if (holds_sms_from_post(rank, task)) comm_started(rank, t, now);
  auto& sends = c.sends[sender];
  auto& recvs = c.recvs[sender];
  if (sends.empty() || recvs.empty()) return;
  const Waiter pair[] = {sends.front(), recvs.front()};
  sends.pop();
  recvs.pop();
  if (!same_transfer(pair[0], pair[1], comm)) return;
  start_transfer(TransferRequest{comm, true, CollectiveKind::AllReduce, sender, t.bytes, kNoMatrix, {}}, pair, now);
}

// A task's interval category; a host copy runs on a copy engine, not the SMs:
// while only it runs, the GPU waits.
std::uint8_t Executor::category_of(const ProgramTemplate& p, const Task& t) {
  if (t.kind != TaskKind::Compute) return static_cast<std::uint8_t>(1 + static_cast<int>(t.comm_class));
  return p.ops[t.ref].kind == OpKind::HostCopy ? kWaitCategory : kComputeCategory;
}

void Executor::complete(std::uint32_t rank, std::uint32_t task, Time now) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const Task& t = p.tasks[task];
  const std::size_t si = stream_at(rank, t.stream);
  bool in_block = false;  // the last task of a run kept as a block: its interval is in the block
  if (memo_) {
    if (memo_end_[rank] != Time::max()) {
      if (task != memo_last_[rank] || now != memo_end_[rank]) {
        order_tie_ = true;  // a rank inside an applied pass touched: never expected, the run is repeated
        return;
      }
      memo_end_[rank] = Time::max();
      quiet_post_[rank] = kNoPass;
      in_block = block_final_[rank] != 0;
      block_final_[rank] = 0;
    }
    Recording& rec = recording_[rank];
    if (rec.active) {
      const PassMark& m = p.passes[rec.pass];
      if (task >= m.first && task < m.first + m.count) {
        rec.log.push_back(MemoEntry{task - m.first, stream_start_[si] - rec.start, now - rec.start});
        if (++rec.done == m.count) finish_recording(rank);
      } else {
        rec.clean = false;
      }
    }
  }
  if (!in_block) record(rank, task, stream_start_[si], now, category_of(p, t));
  ++events_;
  if (chains_ && t.kind == TaskKind::Compute) {
    compute_done_at_[si] = now;
    compute_done_serial_[si] = serial_;
  }
  stream_busy_[si] = 0;
  if (t.kind != TaskKind::Compute) comm_finished(rank, t, now);
  ++stream_pos_[si];
  if (++done_count_[rank] == p.tasks.size()) result_.finish[rank] = now;
  for (std::uint32_t s : p.succs_of(task)) {
    if (--remaining_deps_[task_at(rank, s)] == 0) try_start(rank, p.tasks[s].stream, now);
  }
  try_start(rank, t.stream, now);
}

void Executor::build_chains() {
  chains_ = false;
  if (!chains_wanted_ || dynamic_cast<const AnalyticalNetworkModel*>(network_) == nullptr) return;
  const SimulationSetup& setup = *setup_;
  const std::size_t np = setup.programs.size();
  // A collective joins a chain only on a slot where every rank of the program
  // is its communicator's only simulated member (no rendezvous).
  std::vector<std::vector<std::uint8_t>> linkable(np);
  for (std::size_t p = 0; p < np; ++p) linkable[p].assign(setup.programs[p].comm_slots.size(), 1);
  for (std::uint32_t r = 0; r < setup.ranks.size(); ++r) {
    auto& l = linkable[setup.ranks[r].program];
    for (std::uint32_t k = 0; k < l.size(); ++k) l[k] &= slots_[slot_at(r, k)].solo;
  }
  chains_of_program_.assign(np, TaskChains{});
  std::size_t longest = 0;
  bool lazy = false;
  const bool cut = memo_wanted_ && windowed_ranks_.empty();
  for (std::size_t p = 0; p < np; ++p) {
    // With contention a chain's collectives would re-time kernels of another compute stream.
    if (contention_ && compute_streams_[p].size() > 1) continue;
    chains_of_program_[p] = find_task_chains(setup.programs[p], linkable[p], cut);
    for (std::uint32_t c = 0; c < chains_of_program_[p].size(); ++c)
      longest = std::max<std::size_t>(longest, chains_of_program_[p].chain(c).size());
    // The chains of a marked pass are found when one of its tasks first starts (schedule).
    lazy |= !chains_of_program_[p].pass_found.empty();
  }
  if (longest == 0 && !lazy) return;
  chains_ = true;
  linkable_of_program_ = std::move(linkable);
  chain_run_.assign(setup.ranks.size(), ChainRun{});
  for (ChainRun& cr : chain_run_) cr.predicted.resize(longest);
  compute_done_at_.assign(stream_busy_.size(), Time::max());
  compute_done_serial_.assign(stream_busy_.size(), 0);
  posted_at_.assign(slots_.size(), Time::max());
  posted_serial_.assign(slots_.size(), 0);
}

// The chains of marked pass `pass` of program `prog`, found when one of its
// tasks first starts: a pass applied from the memo never needs them.
void Executor::find_chains_of_pass(std::uint32_t prog, std::uint32_t pass) {
  TaskChains& tc = chains_of_program_[prog];
  const std::size_t before = tc.size();
  find_pass_chains(setup_->programs[prog], linkable_of_program_[prog], pass, tc);
  ++memo_stats_.chained_passes;
  std::size_t longest = chain_run_.empty() ? 0 : chain_run_.front().predicted.size();
  for (std::size_t c = before; c < tc.size(); ++c)
    longest = std::max<std::size_t>(longest, tc.chain(static_cast<std::uint32_t>(c)).size());
  for (ChainRun& cr : chain_run_) {
    if (cr.predicted.size() < longest) cr.predicted.resize(longest);
  }
}

// The chain can run from its task at `from` (starting now) without events
// only if its later tasks wait for no task outside it and each of its streams
// is free with the chain's next task on it at its head (the running task's
// stream is the chain's own: its tasks there are followed by the chain's).
bool Executor::chain_can_start(std::uint32_t rank, std::uint32_t chain, std::uint32_t from) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const TaskChains& tc = chains_of_program_[setup_->ranks[rank].program];
  const auto tasks = tc.chain(chain);
  // Tasks of the chain waiting for something outside it from `from` on.
  auto waits_outside = [&](std::size_t i) {
    std::uint32_t inner = 0;
    for (const std::uint32_t d : p.deps_of(tasks[i]))
      inner += tc.at[d].chain == chain && tc.at[d].index >= from ? 1 : 0;
    return remaining_deps_[task_at(rank, tasks[i])] != inner;
  };
  // The task that stopped the last try of this chain on this rank, if it
  // still waits, stops this one (the chain is tried again as each of its
  // tasks starts, and a task far along it often waits for a transfer).
  ChainRun& cr = chain_run_[rank];
  if (cr.blocked_chain == chain && cr.blocked_at > from && waits_outside(cr.blocked_at)) return false;
  std::uint64_t seen[4] = {};
  const std::uint8_t first = p.tasks[tasks[from]].stream;
  seen[first / 64] |= std::uint64_t{1} << (first % 64);
  for (std::size_t i = from + 1; i < tasks.size(); ++i) {
    const std::uint32_t task = tasks[i];
    if (waits_outside(i)) {
      cr.blocked_chain = chain;
      cr.blocked_at = static_cast<std::uint32_t>(i);
      return false;
    }
    const std::uint8_t s = p.tasks[task].stream;
    if (seen[s / 64] >> (s % 64) & 1) continue;
    seen[s / 64] |= std::uint64_t{1} << (s % 64);
    const std::size_t si = stream_at(rank, s);
    const auto on_stream = p.stream(s);
    if (stream_busy_[si] || stream_pos_[si] >= on_stream.size() || on_stream[stream_pos_[si]] != task) return false;
  }
  return true;
}

// A task of `rank` started at `now` ends at `end`: an event, or for a task of
// the rank's running chain the chain's expected end.
void Executor::schedule(std::uint32_t rank, std::uint32_t task, Time end, Time now) {
  // A pass being recorded runs task by task: its log is then the order of the run without chains.
  if (chains_ && !(memo_ && recording_[rank].active)) {
    const std::uint32_t prog = setup_->ranks[rank].program;
    TaskChains& tc = chains_of_program_[prog];
    if (!tc.pass_of.empty() && tc.pass_of[task] != kNoChain && !tc.pass_found[tc.pass_of[task]])
      find_chains_of_pass(prog, tc.pass_of[task]);
    const ChainPosition at = tc.at.empty() ? ChainPosition{} : tc.at[task];
    const std::uint32_t c = at.chain;
    if (c != kNoChain) {
      ChainRun& cr = chain_run_[rank];
      const std::uint32_t pos = at.index;
      if (cr.chain == kNoChain && pos + 1 < tc.chain(c).size() && chain_can_start(rank, c, pos)) {
        cr.chain = c;
        cr.queued = Time::max();
        cr.predicted[pos] = Time::max();
      }
      if (cr.chain == c) {
        cr.pos = pos;
        cr.end = end;
        if (cr.predicted[pos] != end) reproject(rank, now);
        return;
      }
    }
  }
  queue_.push(end, rank, task);
}

// Where the running chain's tasks end if the rank's contention stays as it is
// at `now`, each timed as start_compute and start_transfer would time it; a
// changed end of the last one moves the chain's event.
void Executor::reproject(std::uint32_t rank, Time now) {
  ChainRun& cr = chain_run_[rank];
  const ProgramTemplate& p = *program_of_rank_[rank];
  const auto tasks = chains_of_program_[setup_->ranks[rank].program].chain(cr.chain);
  std::uint8_t level = kNoContention;
  if (contention_) {
    // The chain's own running collective ends before its next kernel starts.
    const std::uint32_t own = p.tasks[tasks[cr.pos]].kind == TaskKind::Collective ? 1 : 0;
    level = comm_active_[rank] > own ? kCommContention : net_p2p_active_[rank] > 0 ? kNetP2pContention : kNoContention;
  }
  const double factor = window_factor(rank, now);
  cr.level = level;
  cr.factor = factor;
  Time t = cr.end;
  cr.predicted[cr.pos] = t;
  for (std::size_t i = cr.pos + 1; i < tasks.size(); ++i) {
    const Task& task = p.tasks[tasks[i]];
    if (task.kind == TaskKind::Compute) {
      const Time d = op_duration(rank, task.ref, level);
      t = t + (factor == 1.0 ? d : Time::ns(std::llround(static_cast<double>(d.count_ns()) * factor)));
    } else {
      t = network_->start(t, collective_request(*setup_, task, slots_[slot_at(rank, task.ref)].comm), 0);
    }
    cr.predicted[i] = t;
  }
  if (t != cr.queued) {
    cr.queued = t;
    queue_.push(t, rank, tasks.back() | kChainEvent);
  }
}

// Something touches `rank` at `now`: its chain's tasks that ended before complete first.
void Executor::sync(std::uint32_t rank, Time now) {
  if (chains_ && chain_run_[rank].chain != kNoChain) advance_chain(rank, now, false);
}

// Completes the running chain's tasks, but its last, that end before `now`
// (through: at or before), each as an event of its own would: its interval,
// its stream's next position, the next task started (a kernel at the rate the
// chain's projection used, a collective holding the rank's SMs). Their
// dependents are all later tasks of the chain, which the chain starts itself
// or which wait for its last task.
void Executor::advance_chain(std::uint32_t rank, Time now, bool through) {
  ChainRun& cr = chain_run_[rank];
  const ProgramTemplate& p = *program_of_rank_[rank];
  const auto tasks = chains_of_program_[setup_->ranks[rank].program].chain(cr.chain);
  const int tl = timeline_of_rank_[rank];
  std::uint32_t i = cr.pos, completed = 0;
  Time end = cr.end;
  while (i + 1 < tasks.size() && (end < now || (through && end == now))) {
    const Task& done = p.tasks[tasks[i]];
    const std::size_t si = stream_at(rank, done.stream);
    // The interval record() would keep.
    if (tl >= 0 && stream_start_[si] < end)
      add_interval(tl, Interval{stream_start_[si], end, tasks[i], done.stream, category_of(p, done)});
    ++completed;
    stream_busy_[si] = 0;
    ++stream_pos_[si];
    // Its dependents are later tasks of the chain, some past its last one.
    for (const std::uint32_t s : p.succs_of(tasks[i])) --remaining_deps_[task_at(rank, s)];
    if (done.kind == TaskKind::Compute) {
      compute_done_at_[si] = end;
      compute_done_serial_[si] = ++serials_;
    } else if (contention_) {
      --comm_active_[rank];
    }
    const Time start = end;
    const std::uint32_t next = tasks[++i];
    const Task& t = p.tasks[next];
    const std::size_t sj = stream_at(rank, t.stream);
    if (p.stream(t.stream)[stream_pos_[sj]] != next) {
      order_tie_ = true;  // not at its stream's head: never seen, but the full path is exact
      break;
    }
    end = cr.predicted[i];
    stream_busy_[sj] = 1;
    stream_start_[sj] = start;
    if (t.kind == TaskKind::Compute) {
      if (retiming_) {
        run_frac_[sj] = 0;
        run_since_[sj] = start;
        run_slow_[sj] = cr.level;
        run_factor_[sj] = cr.factor;
        run_end_[sj] = end;
      }
    } else if (contention_) {
      ++comm_active_[rank];
    }
    cr.pos = i;
    cr.end = end;
  }
  events_ += completed;
  done_count_[rank] += completed;
}

// Two posts on one slot of a rank at one instant from independent events:
// their order decides which collective each one is.
void Executor::note_post(std::uint32_t rank, std::uint32_t slot, Time now) {
  if (!chains_) return;
  const std::size_t k = slot_at(rank, slot);
  if (posted_at_[k] == now && posted_serial_[k] != serial_) order_tie_ = true;
  posted_at_[k] = now;
  posted_serial_[k] = serial_;
}

// The memo of repeated layer passes (docs/performance.md, "A memo of repeated
// layer passes"). A marked pass (ProgramTemplate::passes) that starts on a
// rank whose other streams cannot touch it before the pass ends runs alone: its
// tasks start only after one another, its kernels' rates change only with its
// own collectives (solo: no rendezvous), and the rank's contention level from
// outside stays what it was at the start. Its run is then a function of that
// level and the pass's tasks, which every pass of one template shares: the
// first such run on a rank is recorded task by task, later ones are applied
// from the record shifted in time, with one event for the task that ends last.
void Executor::build_memo() {
  memo_ = false;
  if (!memo_wanted_ || !chains_ || !windowed_ranks_.empty()) return;
  const SimulationSetup& setup = *setup_;
  const std::size_t np = setup.programs.size(), nr = setup.ranks.size();
  bool any = false;
  pass_of_first_.assign(np, {});
  for (std::size_t p = 0; p < np; ++p) {
    const ProgramTemplate& prog = setup.programs[p];
    pass_of_first_[p].assign(prog.tasks.size(), kNoPass);  // also where no pass is marked: try_start looks
    if (prog.passes.empty()) continue;
    any = true;
    for (std::uint32_t i = 0; i < prog.passes.size(); ++i) {
      const PassMark& m = prog.passes[i];
      TRAINSIM_CHECK(m.count > 0 && m.first + m.count <= prog.tasks.size() &&
                         (i == 0 || prog.passes[i - 1].first + prog.passes[i - 1].count <= m.first),
                     "program " + prog.name + " marks pass " + std::to_string(i) + " outside its tasks or overlapping");
      pass_of_first_[p][m.first] = i;
    }
  }
  if (!any) return;
  memo_ = true;
  std::map<std::vector<std::uint64_t>, std::uint32_t> classes;
  std::vector<std::uint64_t> signature;
  memo_class_.assign(nr, {});
  for (std::uint32_t r = 0; r < nr; ++r) {
    const ProgramTemplate& prog = *program_of_rank_[r];
    std::vector<std::uint32_t>& of_key = memo_class_[r];
    for (const PassMark& m : prog.passes) {
      if (m.key >= of_key.size()) of_key.resize(m.key + 1, kNoPass);
      if (of_key[m.key] != kNoPass) continue;
      signature.clear();
      pass_signature(r, m, signature);
      of_key[m.key] = classes.try_emplace(signature, static_cast<std::uint32_t>(classes.size())).first->second;
    }
  }
  memos_.assign(classes.size(), {});
  recording_tries_.assign(kContentionLevels * classes.size(), RecordingTries{});
  recording_.assign(nr, Recording{});
  memo_end_.assign(nr, Time::max());
  memo_last_.assign(nr, 0);
  quiet_post_.assign(nr, kNoPass);
  block_final_.assign(nr, 0);
  busy_end_.assign(stream_busy_.size(), Time::max());
  bound_task_.assign(stream_busy_.size(), kNoPass);
  bound_at_.assign(stream_busy_.size(), Time{});
  p2p_posts_.assign(2 * slots_.size(), 0);
  peer_of_slot_.assign(slots_.size(), PeerSlot{kNoPeer, 0});
  rank_of_gpu_.clear();
  for (std::uint32_t r = 0; r < nr; ++r) rank_of_gpu_.emplace_back(setup.ranks[r].gpu, r);
  std::sort(rank_of_gpu_.begin(), rank_of_gpu_.end());
  stream_index_.assign(np, {});
  own_stream_index_.assign(np, {});
  p2p_order_.assign(np, {});
  p2p_ordered_.assign(np, {});
}

// What a memo of pass `m` on `rank` depends on: the program's streams and
// slots (the memo's tables), whether the rank keeps a timeline (its
// intervals), per task its fields, interval category, dependencies inside the
// pass and duration (a kernel's at each contention level; a transfer's on the
// rank's communicator, the same whenever it starts at analytical fidelity, the
// only one with chains). A task a memo cannot hold (a message, a collective
// with a rendezvous) makes the signature the rank's own.
void Executor::pass_signature(std::uint32_t rank, const PassMark& m, std::vector<std::uint64_t>& out) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  out.insert(out.end(), {p.streams.size(), p.comm_slots.size(), m.count,
                         timeline_of_rank_[rank] >= 0 ? std::uint64_t{1} : std::uint64_t{0}});
  auto* analytical = dynamic_cast<AnalyticalNetworkModel*>(network_);
  TRAINSIM_CHECK(analytical != nullptr, "a memo of passes needs the analytical network model");
  auto ns = [](Time t) { return static_cast<std::uint64_t>(t.count_ns()); };
  for (std::uint32_t t = m.first; t < m.first + m.count; ++t) {
    const Task& task = p.tasks[t];
    out.push_back(std::uint64_t{static_cast<std::uint8_t>(task.kind)} | std::uint64_t{task.stream} << 8 |
                  std::uint64_t{static_cast<std::uint8_t>(task.collective)} << 16 |
                  std::uint64_t{static_cast<std::uint8_t>(task.comm_class)} << 24 |
                  std::uint64_t{category_of(p, task)} << 32);
    if (task.kind == TaskKind::Compute) {
      for (std::uint8_t level = 0; level < kContentionLevels; ++level)
        out.push_back(ns(op_duration(rank, task.ref, level)));
    } else {
      const SlotState& slot = slots_[slot_at(rank, task.ref)];
      out.insert(out.end(), {task.ref, task.bytes, task.matrix});
      if (task.kind == TaskKind::Collective && slot.solo) {
        out.push_back(ns(analytical->duration(collective_request(*setup_, task, slot.comm))));
      } else {
        out.insert(out.end(), {~std::uint64_t{0}, rank});
      }
    }
    const auto deps = p.deps_of(t);
    const auto inside = std::count_if(deps.begin(), deps.end(), [&](std::uint32_t d) { return d >= m.first; });
    out.push_back(static_cast<std::uint64_t>(inside));
    for (const std::uint32_t d : deps) {
      if (d >= m.first) out.push_back(d - m.first);
    }
  }
}

// The pass's tasks wait for nothing outside it (their waiting counts sum to
// its inner dependencies) and are the next ones on their streams, which are free.
// Given the pass's memo, and each stream's tasks in task order, that is where
// its first and last task on each stream lie: the tasks between are its own.
bool Executor::pass_ready(std::uint32_t rank, const PassMark& m, std::uint32_t internal,
                          std::span<const std::uint32_t> count, const PassMemo* memo) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  std::uint64_t waiting = 0;
  for (std::uint32_t t = m.first; t < m.first + m.count; ++t) waiting += remaining_deps_[task_at(rank, t)];
  if (waiting != internal) return false;
  const TaskChains& tc = chains_of_program_[setup_->ranks[rank].program];
  if (memo != nullptr && tc.streams_in_task_order && tc.stream_index.size() == p.tasks.size()) {
    for (std::uint32_t s = 0; s < count.size(); ++s) {
      if (count[s] == 0) continue;
      const std::size_t si = stream_at(rank, s);
      const std::uint32_t first = tc.stream_index[m.first + memo->first_on_stream[s]];
      if (stream_busy_[si] || first != p.stream_offsets[s] + stream_pos_[si] ||
          tc.stream_index[m.first + memo->last_on_stream[s]] - first != count[s] - 1)
        return false;
    }
    return true;
  }
  for (std::uint32_t s = 0; s < count.size(); ++s) {
    if (count[s] == 0) continue;
    const std::size_t si = stream_at(rank, s);
    const auto on_stream = p.stream(s);
    if (stream_busy_[si] || stream_pos_[si] + count[s] > on_stream.size()) return false;
    // The next count[s] tasks on the stream are the pass's there, in task order.
    std::uint32_t before = m.first;
    for (std::uint32_t i = 0; i < count[s]; ++i) {
      const std::uint32_t t = on_stream[stream_pos_[si] + i];
      if (t < before || t >= m.first + m.count) return false;
      before = t + 1;
    }
  }
  return true;
}

// At the start of pass `pass` on `rank` (its first task ready, not started):
// applies its memo if one was recorded at this contention level and nothing can
// touch the rank until the pass ends (true: the pass is done but for its last
// task's event); else starts recording one if none exists (false: the pass runs).
bool Executor::try_memo(std::uint32_t rank, std::uint32_t pass, Time now) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const PassMark& m = p.passes[pass];
  if (chain_run_[rank].chain != kNoChain) return false;
  const std::uint8_t level = contention(rank);
  const PassMemo* memo = nullptr;
  for (const PassMemo& pm : memos_[memo_class_[rank][m.key]]) {
    if (pm.level == level) memo = &pm;
  }
  const std::uint32_t end_task = m.first + m.count;
  if (memo == nullptr) {
    // After f recordings of the class at this level were spoiled (something
    // else ran on the rank meanwhile), only every (2^f - 1)-th chance records:
    // a recording runs without chains, and a pass that an outside transfer
    // always overlaps would otherwise be recorded in vain at every start.
    RecordingTries& tries = recording_tries_[kContentionLevels * memo_class_[rank][m.key] + level];
    if (tries.failed > 0 && ++tries.skipped < (std::uint32_t{1} << std::min<std::uint32_t>(tries.failed, 16)) - 1)
      return false;
    tries.skipped = 0;
    // Record: only compute tasks and collectives without a rendezvous, and
    // one task ready at the start (the others wait for tasks of the pass).
    std::vector<std::uint32_t>& count = pass_stream_count_;
    count.assign(p.streams.size(), 0);
    std::uint32_t internal = 0;
    for (std::uint32_t t = m.first; t < end_task; ++t) {
      const Task& task = p.tasks[t];
      if (task.kind == TaskKind::Send || task.kind == TaskKind::Recv) return false;
      if (task.kind == TaskKind::Collective && !slots_[slot_at(rank, task.ref)].solo) return false;
      ++count[task.stream];
      std::uint32_t inner = 0;
      for (const std::uint32_t d : p.deps_of(t)) inner += d >= m.first ? 1 : 0;
      // The first of the pass's tasks on a stream other than the first's must wait for one of the pass.
      if (t != m.first && inner == 0 && count[task.stream] == 1) return false;
      internal += inner;
    }
    if (!pass_ready(rank, m, internal, count)) return false;
    Recording& rec = recording_[rank];
    rec.active = true;
    rec.clean = true;
    rec.pass = pass;
    rec.done = 0;
    rec.level = level;
    rec.start = now;
    rec.log.clear();
    return false;
  }
  if (!pass_ready(rank, m, memo->internal, memo->stream_count, memo)) {
    ++memo_stats_.refused;
    return false;
  }
  const MemoEntry& last = memo->entries.back();
  const std::uint8_t final_stream = p.tasks[m.first + last.offset].stream;
  // Later passes of the same key that each start the instant the one before
  // ends are applied with it as one run (clear_passes).
  const std::uint32_t runs = clear_passes(rank, pass, *memo, now);
  if (runs == 0) {
    ++memo_stats_.refused;
    return false;
  }
  const Time span = last.end;  // a pass's length: the next one starts when its last task ends
  const Time end = now + run_offset(span, runs);
  const std::uint32_t run_end = m.first + m.count * runs;
  const std::uint32_t final_task = m.first + m.count * (runs - 1) + last.offset;
  const Time last_start = now + run_offset(span, runs - 1);  // the start of the run's last pass
  // Applied: every task but the last done now, as the run records them: each
  // pass's intervals, then (but for the run's last pass) its last task's, which
  // its completion would record at the next pass's start.
  const int tl = timeline_of_rank_[rank];
  const std::size_t n = memo->entries.size();
  const Task& pass_final = p.tasks[m.first + last.offset];
  const std::uint8_t final_category = category_of(p, pass_final);
  const bool block = tl >= 0 && try_block(rank, m, *memo, runs, now, end);
  for (std::uint32_t r = 0; r < runs && tl >= 0 && !block; ++r) {
    const Time at = now + run_offset(span, r);
    const std::uint32_t first = m.first + m.count * r;
    if (merge_intervals_) {
      // Only a stream's first interval of the pass can continue the timeline's
      // last one there: the memo's own touching ones are merged already.
      std::vector<Interval>& out = result_.timelines[static_cast<std::size_t>(tl)].intervals;
      std::array<std::uint32_t, 256>& last_of_stream = last_interval_[static_cast<std::size_t>(tl)];
      for (std::size_t i = 0; i < memo->intervals.size(); ++i) {
        const Interval& iv = memo->intervals[i];
        const Interval shifted{at + iv.start, at + iv.end, first + iv.task, iv.stream, iv.category};
        if (memo->opens_stream[i]) {
          append_merged(out, last_of_stream, shifted);
        } else {
          last_of_stream[iv.stream] = static_cast<std::uint32_t>(out.size());
          out.push_back(shifted);
        }
      }
    } else {
      for (std::size_t i = 0; i + 1 < n; ++i) {
        const MemoEntry& e = memo->entries[i];
        const std::uint32_t task = first + e.offset;
        if (e.start < e.end) {
          add_interval(tl,
                       Interval{at + e.start, at + e.end, task, p.tasks[task].stream, category_of(p, p.tasks[task])});
        }
      }
    }
    if (r + 1 < runs && last.start < last.end)
      add_interval(tl, Interval{at + last.start, at + last.end, first + last.offset, final_stream, final_category});
  }
  for (std::uint32_t t = m.first; t < run_end; ++t) {
    remaining_deps_[task_at(rank, t)] = 0;
    if (t == final_task) continue;  // its dependents wait for its event
    // Dependents in task order: those after the run come last.
    const auto succs = p.succs_of(t);
    for (auto s = succs.rbegin(); s != succs.rend() && *s >= run_end; ++s) --remaining_deps_[task_at(rank, *s)];
  }
  for (std::uint32_t s = 0; s < p.streams.size(); ++s) {
    if (memo->stream_count[s] == 0) continue;
    const std::size_t si = stream_at(rank, s);
    stream_pos_[si] += memo->stream_count[s] * runs;
    stream_busy_[si] = 0;
    if (memo->compute_end[s] != Time::max()) {
      compute_done_at_[si] = last_start + memo->compute_end[s];
      compute_done_serial_[si] = ++serials_;
    }
  }
  for (std::uint32_t k = 0; k < memo->last_post.size(); ++k) {
    if (memo->last_post[k] == Time::max()) continue;
    posted_at_[slot_at(rank, k)] = last_start + memo->last_post[k];
    posted_serial_[slot_at(rank, k)] = ++serials_;
  }
  // The last task runs until its event.
  const Task& ft = p.tasks[final_task];
  const std::size_t sf = stream_at(rank, ft.stream);
  --stream_pos_[sf];
  stream_busy_[sf] = 1;
  stream_start_[sf] = last_start + last.start;
  if (ft.kind == TaskKind::Compute) {
    if (retiming_) {
      run_frac_[sf] = 0;
      run_since_[sf] = last_start + last.start;
      run_slow_[sf] = contention(rank);
      run_factor_[sf] = 1;
      run_end_[sf] = end;
    }
  } else {
    busy_end_[sf] = end;
    if (contention_) ++comm_active_[rank];
  }
  const std::uint64_t applied = n * runs;
  done_count_[rank] += static_cast<std::uint32_t>(applied - 1);
  events_ += applied - 1;
  memo_end_[rank] = end;
  memo_last_[rank] = final_task;
  queue_.push(end, rank, final_task);
  memo_stats_.applied += runs;
  memo_stats_.runs += runs > 1 ? 1 : 0;
  memo_stats_.applied_tasks += applied;
  return true;
}

// With merge_intervals, keeps the run [now, end) of `runs` passes of `memo`
// as one block (IntervalBlock) where the breakdown attributes the same: the
// memo holds no DP transfer and takes some time, and the rank's transfers
// running across the run (clear_passes lets nothing else start inside it but
// a receive posted at its start) rank no higher than the last part it attributes.
bool Executor::try_block(std::uint32_t rank, const PassMark& m, const PassMemo& memo, std::uint32_t runs, Time now,
                         Time end) {
  if (!merge_intervals_ || !memo.blockable || !(now < end)) return false;
  const ProgramTemplate& p = *program_of_rank_[rank];
  for (std::uint32_t s = 0; s < p.streams.size(); ++s) {
    const std::size_t si = stream_at(rank, s);
    if (memo.stream_count[s] > 0 || !stream_busy_[si]) continue;
    if (category_of(p, p.tasks[p.stream(s)[stream_pos_[si]]]) < memo.weakest_part) return false;
  }
  if (quiet_post_[rank] != kNoPass && category_of(p, p.tasks[quiet_post_[rank]]) < memo.weakest_part) return false;
  RankTimeline& tl = result_.timelines[static_cast<std::size_t>(timeline_of_rank_[rank])];
  IntervalBlock b;
  for (std::size_t k = 0; k < b.ns.size(); ++k) b.ns[k] = memo.part_ns[k] * static_cast<std::int64_t>(runs);
  if (memo.first_compute != Time::max()) b.first_compute = now + memo.first_compute;
  // On the stream of the pass's first task, idle at the start; its next task starts after the run.
  const std::uint8_t stream = p.tasks[m.first].stream;
  last_interval_[static_cast<std::size_t>(timeline_of_rank_[rank])][stream] =
      static_cast<std::uint32_t>(tl.intervals.size());
  tl.intervals.push_back(Interval{now, end, static_cast<std::uint32_t>(tl.blocks.size()), stream, kBlockCategory});
  tl.blocks.push_back(b);
  block_final_[rank] = 1;
  return true;
}

// `span` times `r`: where the r-th pass of a run starts (r * span stays below
// the run's end, which clear_passes keeps below Time::saturated()).
Time Executor::run_offset(Time span, std::uint32_t r) {
  return Time::ns(span.count_ns() * static_cast<std::int64_t>(r));
}

// How many passes from `pass` on (itself included; `most` at most) each run
// as `memo` records a pass, from the instant the one before ends, if nothing
// outside them touches the rank meanwhile (clear_passes checks that): passes
// of the same key, each following the one before in task order and on every
// stream, waiting for nothing but the run's earlier tasks, whose first task
// becomes free only by the end of the one before (it waits for that last task
// or follows it on its stream; the pass's other first tasks on a stream wait
// for one of the pass, as every memo's passes do). Such a pass starts with all
// it waits for outside it done, as the recorded one did, even where a task of
// it besides the first also waits for the last task before (which the memo
// check of a single pass, made before that dependency is counted down,
// refuses). A last task that is a transfer must not end where a kernel of its
// pass does: its completion would then be an order tie.
std::uint32_t Executor::memo_run_length(std::uint32_t rank, std::uint32_t pass, const PassMemo& memo,
                                        std::uint32_t most) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const TaskChains& tc = chains_of_program_[setup_->ranks[rank].program];
  if (!tc.streams_in_task_order || tc.stream_index.size() != p.tasks.size()) return 1;
  const PassMark& m = p.passes[pass];
  const MemoEntry& last = memo.entries.back();
  const std::uint8_t final_stream = p.tasks[m.first + last.offset].stream;
  if (last.end <= Time{} || memo.last_on_stream[final_stream] != last.offset) return 1;
  if (p.tasks[m.first + last.offset].kind != TaskKind::Compute) {
    for (const Time c : memo.compute_end) {
      if (c == last.end) return 1;
    }
  }
  const std::uint32_t first_stream = p.tasks[m.first].stream;
  std::uint32_t runs = 1;
  for (std::uint32_t j = pass + 1; j < p.passes.size() && runs < most; ++j, ++runs) {
    const PassMark& prev = p.passes[j - 1];
    const PassMark& next = p.passes[j];
    if (next.key != m.key || next.first != prev.first + prev.count) break;
    bool follows = true;
    for (std::uint32_t s = 0; s < memo.stream_count.size() && follows; ++s) {
      if (memo.stream_count[s] == 0) continue;
      follows = tc.stream_index[next.first + memo.first_on_stream[s]] ==
                tc.stream_index[prev.first + memo.last_on_stream[s]] + 1;
    }
    if (!follows) break;
    // It waits for its own tasks and the run's earlier ones only: so it does
    // where none of its tasks depends on one before the run (each task's
    // dependencies are sorted); else its waiting counts must be those.
    bool within = true;
    for (std::uint32_t t = next.first; t < next.first + next.count && within; ++t) {
      const auto deps = p.deps_of(t);
      within = deps.empty() || deps.front() >= m.first;
    }
    if (!within) {
      std::uint64_t waiting = 0, earlier = 0;
      for (std::uint32_t t = next.first; t < next.first + next.count; ++t) {
        waiting += remaining_deps_[task_at(rank, t)];
        const auto deps = p.deps_of(t);
        for (auto d = deps.rbegin(); d != deps.rend() && *d >= m.first; ++d) earlier += *d < next.first ? 1 : 0;
      }
      if (waiting != memo.internal + earlier) break;
    }
    if (first_stream != final_stream) {
      const auto deps = p.deps_of(next.first);
      if (!std::binary_search(deps.begin(), deps.end(), prev.first + last.offset)) break;
    }
  }
  return runs;
}

// How many passes from `pass` on (0: none) are applied as one run: as many
// as each run as the memo records from the instant the one before ends
// (memo_run_length) and end before anything touches the rank: a transfer of
// another stream ends after the last of them, a peer cannot post the match
// of a waiting send or receive before it, and the task after them on each
// stream (or at the head of an idle one) waits for something outside them or
// for their last task, or follows that last task on its stream. Where the
// run found cannot, one pass is tried alone.
std::uint32_t Executor::clear_passes(std::uint32_t rank, std::uint32_t pass, const PassMemo& memo, Time now) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const PassMark& m = p.passes[pass];
  const MemoEntry& last = memo.entries.back();
  const std::int64_t span = last.end.count_ns();
  // Passes of the key that follow in task order: the most a run can hold.
  std::uint32_t runs = 1;
  for (std::uint32_t j = pass + 1; runs_wanted_ && j < p.passes.size() && p.passes[j].key == m.key &&
                                   p.passes[j].first == p.passes[j - 1].first + p.passes[j - 1].count;
       ++j)
    ++runs;
  if (span > 0) runs = static_cast<std::uint32_t>(std::min<std::int64_t>(runs, Time::saturated().count_ns() / span));
  // The earliest time something outside could touch the rank: the run must end before it.
  Time horizon = Time::max();
  // A receive ready now at the head of an idle stream (released with the pass,
  // posted after it at this instant): posted, it holds no SMs and waits for
  // its match as a posted one does.
  std::uint32_t ready_post = kNoPass;
  for (std::uint32_t s = 0; s < p.streams.size(); ++s) {
    const std::size_t si = stream_at(rank, s);
    if (memo.stream_count[s] > 0) continue;
    std::uint32_t running = kNoPass;
    if (stream_busy_[si]) {
      running = p.stream(s)[stream_pos_[si]];
    } else if (stream_pos_[si] < p.stream(s).size()) {
      const std::uint32_t head = p.stream(s)[stream_pos_[si]];
      const Task& h = p.tasks[head];
      if (h.kind != TaskKind::Recv || remaining_deps_[task_at(rank, head)] != 0 || holds_sms_from_post(rank, head))
        continue;  // waits for something (clear() checks what), or touches the rank when posted
      if (ready_post != kNoPass) return 0;
      ready_post = running = head;
    }
    if (running == kNoPass) continue;
    const Task& t = p.tasks[running];
    if (t.kind == TaskKind::Compute) return 0;
    Time until = running == ready_post ? Time::max() : busy_end_[si];
    if (until == Time::max()) {
      if (t.kind == TaskKind::Collective) return 0;
      // A bound found earlier for the same waiting post still holds.
      const Time wanted = now + run_offset(last.end, runs);
      if (bound_task_[si] != running || bound_at_[si] <= wanted) {
        bound_task_[si] = running;
        bound_at_[si] = peer_post_bound(rank, running, now, wanted, running == ready_post);
      }
      until = bound_at_[si];
    }
    horizon = std::min(horizon, until);
  }
  const std::uint8_t ready_stream = ready_post == kNoPass ? std::uint8_t{0} : p.tasks[ready_post].stream;
  auto clear = [&](std::uint32_t r) {
    const Time end = now + run_offset(last.end, r);
    if (end >= Time::saturated() || end >= horizon) return false;
    const std::uint32_t end_task = m.first + m.count * r;
    const std::uint32_t final_task = m.first + m.count * (r - 1) + last.offset;
    const std::uint8_t final_stream = p.tasks[final_task].stream;
    for (std::uint32_t s = 0; s < p.streams.size(); ++s) {
      const std::size_t si = stream_at(rank, s);
      const auto on_stream = p.stream(s);
      std::uint32_t pos = stream_pos_[si];
      if (memo.stream_count[s] > 0) {
        pos += memo.stream_count[s] * r;
      } else if (stream_busy_[si] || (ready_post != kNoPass && s == ready_stream)) {
        continue;  // a transfer, ending after the run (horizon), or a receive whose match is posted after it
      }
      // The stream of the run's last task is busy with it until `end`.
      if (pos >= on_stream.size() || s == final_stream) continue;
      const std::uint32_t next = on_stream[pos];
      std::uint32_t inside = 0;
      bool after_last = false;
      for (const std::uint32_t d : p.deps_of(next)) {
        inside += d >= m.first && d < end_task ? 1 : 0;
        after_last |= d == final_task;
      }
      if (!after_last && remaining_deps_[task_at(rank, next)] <= inside) return false;
    }
    return true;
  };
  if (span > 0 && horizon != Time::max()) {
    // The most passes that end before the horizon.
    const std::int64_t room = (horizon - now).count_ns() - 1;
    runs = static_cast<std::uint32_t>(std::min<std::int64_t>(runs, room < 0 ? 0 : room / span));
  }
  if (runs == 0) return 0;
  runs = memo_run_length(rank, pass, memo, runs);
  if (!clear(runs)) runs = runs > 1 && clear(1) ? 1 : 0;
  if (runs > 0) quiet_post_[rank] = ready_post;
  return runs;
}

// The recorded pass's last task completed: keep its run if nothing else touched the rank.
void Executor::finish_recording(std::uint32_t rank) {
  Recording& rec = recording_[rank];
  rec.active = false;
  const ProgramTemplate& p = *program_of_rank_[rank];
  const PassMark& m = p.passes[rec.pass];
  if (!rec.clean) {
    ++recording_tries_[kContentionLevels * memo_class_[rank][m.key] + rec.level].failed;
    return;
  }
  PassMemo memo;
  memo.key = m.key;
  memo.level = rec.level;
  memo.entries = rec.log;
  memo.stream_count.assign(p.streams.size(), 0);
  memo.first_on_stream.assign(p.streams.size(), 0);
  memo.last_on_stream.assign(p.streams.size(), 0);
  memo.compute_end.assign(p.streams.size(), Time::max());
  memo.last_post.assign(p.comm_slots.size(), Time::max());
  for (std::uint32_t t = m.first; t < m.first + m.count; ++t) {
    const std::uint8_t s = p.tasks[t].stream;
    if (memo.stream_count[s]++ == 0) memo.first_on_stream[s] = t - m.first;
    memo.last_on_stream[s] = t - m.first;
    for (const std::uint32_t d : p.deps_of(t)) memo.internal += d >= m.first ? 1 : 0;
  }
  for (const MemoEntry& e : memo.entries) {
    const Task& t = p.tasks[m.first + e.offset];
    if (t.kind == TaskKind::Compute) {
      Time& c = memo.compute_end[t.stream];
      c = c == Time::max() ? e.end : std::max(c, e.end);
    } else {
      Time& c = memo.last_post[t.ref];
      c = c == Time::max() ? e.start : std::max(c, e.start);
    }
  }
  if (merge_intervals_ && timeline_of_rank_[rank] >= 0) {
    std::array<std::uint32_t, 256> last;
    last.fill(~std::uint32_t{0});
    for (std::size_t i = 0; i + 1 < memo.entries.size(); ++i) {
      const MemoEntry& e = memo.entries[i];
      if (!(e.start < e.end)) continue;
      const Task& t = p.tasks[m.first + e.offset];
      append_merged(memo.intervals, last, Interval{e.start, e.end, e.offset, t.stream, category_of(p, t)});
    }
    std::array<std::uint8_t, 256> seen{};
    for (const Interval& iv : memo.intervals) {
      memo.opens_stream.push_back(seen[iv.stream] == 0 ? 1 : 0);
      seen[iv.stream] = 1;
    }
    // The pass as a block: every entry's interval, the last one's included, over [0, span).
    std::vector<Interval> all;
    memo.blockable = true;
    for (const MemoEntry& e : memo.entries) {
      const Task& t = p.tasks[m.first + e.offset];
      const std::uint8_t category = category_of(p, t);
      memo.blockable &= category != 1 + static_cast<int>(CommClass::DP);
      if (!(e.start < e.end)) continue;
      all.push_back(Interval{e.start, e.end, e.offset, t.stream, category});
      if (category == kComputeCategory) memo.first_compute = std::min(memo.first_compute, e.start);
    }
    const PartSums sums = part_sums(all, memo.entries.back().end);
    memo.part_ns = sums.ns;
    memo.weakest_part = sums.weakest;
  }
  memos_[memo_class_[rank][m.key]].push_back(std::move(memo));
  ++memo_stats_.recorded;
}

// A lower bound on when a peer posts the match of `rank`'s waiting send or
// receive `task`: its next post of the other kind on the communicator cannot
// come before the tasks it waits for have run, each at least at its shortest
// duration from now (docs/performance.md). The bound is computed no further
// than past `limit`; `now` where it is not known. `unposted`: `task` is ready
// but not posted yet, and its match may be posted already (then `now`).
Time Executor::peer_post_bound(std::uint32_t rank, std::uint32_t task, Time now, Time limit, bool unposted) {
  const Task& t = program_of_rank_[rank]->tasks[task];
  const SlotState& slot = slots_[slot_at(rank, t.ref)];
  const Communicator& cm = setup_->comms[slot.comm];
  if (cm.members.size() != 2) return now;
  PeerSlot& cached = peer_of_slot_[slot_at(rank, t.ref)];
  if (cached.rank == kNoPeer) {
    const int gpu = cm.members[1 - slot.member];
    auto it = std::lower_bound(rank_of_gpu_.begin(), rank_of_gpu_.end(), std::make_pair(gpu, std::uint32_t{0}));
    std::uint32_t peer = 0, peer_slot = 0, found = 0;
    for (; it != rank_of_gpu_.end() && it->first == gpu; ++it) {
      const auto& bound = setup_->ranks[it->second].comm_of_slot;
      for (std::uint32_t k = 0; k < bound.size(); ++k) {
        if (bound[k] == slot.comm) {
          peer = it->second;
          peer_slot = k;
          ++found;
        }
      }
    }
    cached = found != 1 || peer == rank ? PeerSlot{kNoSimulatedPeer, 0} : PeerSlot{peer, peer_slot};
  }
  if (cached.rank == kNoSimulatedPeer) return now;
  const std::uint32_t peer = cached.rank, peer_slot = cached.slot;
  const std::uint32_t prog = setup_->ranks[peer].program;
  const ProgramTemplate& pp = setup_->programs[prog];
  if (p2p_order_[prog].empty()) {
    // Each slot's sends and receives in the order their stream posts them
    // (kept only where they lie on one stream), and each task's index into
    // stream_tasks.
    if (pp.stream_index.size() == pp.tasks.size()) {
      stream_index_[prog] = pp.stream_index;  // laid out with the streams (ProgramBuilder::finish)
    } else {
      std::vector<std::uint32_t>& own = own_stream_index_[prog];
      own.resize(pp.tasks.size());
      for (std::uint32_t g = 0; g < pp.stream_tasks.size(); ++g) own[pp.stream_tasks[g]] = g;
      stream_index_[prog] = own;
    }
    auto& order = p2p_order_[prog];
    auto& ordered = p2p_ordered_[prog];
    order.assign(2 * pp.comm_slots.size(), {});
    ordered.assign(2 * pp.comm_slots.size(), 1);
    std::vector<int> stream_of(2 * pp.comm_slots.size(), -1);
    auto visit = [&](std::uint32_t from, std::uint32_t to) {
      for (std::uint32_t u = from; u < to; ++u) {
        const Task& ut = pp.tasks[u];
        if (ut.kind != TaskKind::Send && ut.kind != TaskKind::Recv) continue;
        const std::size_t k = 2 * ut.ref + (ut.kind == TaskKind::Send ? 0 : 1);
        if (stream_of[k] >= 0 && stream_of[k] != ut.stream) ordered[k] = 0;
        stream_of[k] = ut.stream;
        order[k].push_back(u);
      }
    };
    // Every pass of a key whose first pass holds one (visit_by_pass_key), in
    // task order; then each list in its stream's order.
    auto holds_p2p = [&](std::uint32_t first, std::uint32_t end) {
      for (std::uint32_t u = first; u < end; ++u) {
        if (pp.tasks[u].kind == TaskKind::Send || pp.tasks[u].kind == TaskKind::Recv) return KeyVisit::Every;
      }
      return KeyVisit::Skip;
    };
    visit_by_pass_key(pp, holds_p2p, visit);
    const std::span<const std::uint32_t> index = stream_index_[prog];
    for (std::vector<std::uint32_t>& o : order) {
      std::sort(o.begin(), o.end(), [&](std::uint32_t a, std::uint32_t b) { return index[a] < index[b]; });
    }
  }
  const std::size_t k = 2 * peer_slot + (t.kind == TaskKind::Recv ? 0 : 1);
  if (!p2p_ordered_[prog][k]) return now;
  const std::uint32_t posted = p2p_posts_[2 * slot_at(peer, peer_slot) + (t.kind == TaskKind::Recv ? 0 : 1)];
  // Not posted yet: its match may be (then it starts as it is posted).
  if (unposted && posted > p2p_posts_[2 * slot_at(rank, t.ref) + (t.kind == TaskKind::Send ? 0 : 1)]) return now;
  const auto& order = p2p_order_[prog][k];
  if (posted >= order.size()) return Time::max();  // it never posts another
  sync(peer, now);
  const std::uint32_t post = order[posted];
  // Its dependencies and its stream's task before it must end first.
  Time at = now;
  for (const std::uint32_t d : pp.deps_of(post)) {
    at = std::max(at, earliest_end(peer, d, now, limit));
    if (at > limit) return at;
  }
  const std::uint32_t g = stream_index_[prog][post];
  if (g > pp.stream_offsets[pp.tasks[post].stream])
    at = std::max(at, earliest_end(peer, pp.stream_tasks[g - 1], now, limit));
  return at;
}

// A lower bound on the end of `rank`'s `task`: the tasks of its stream from
// the first not started up to it, each at its shortest duration (a kernel at
// its fastest contention level, a transfer 0), from `now`: a difference of the
// stream's sums before each position, kept per program, GPU type and stream and
// extended as far as a bound needs.
Time Executor::earliest_end(std::uint32_t rank, std::uint32_t task, Time now, Time limit) {
  const ProgramTemplate& p = *program_of_rank_[rank];
  const std::uint8_t s = p.tasks[task].stream;
  const std::uint32_t offset = p.stream_offsets[s];
  const std::uint32_t i = stream_index_[setup_->ranks[rank].program][task] - offset;
  const std::size_t si = stream_at(rank, s);
  const std::uint32_t first = stream_pos_[si] + (stream_busy_[si] ? 1 : 0);  // the first not started
  // The last task of an applied pass (or run of passes) ends at memo_end_
  // exactly (else the run is repeated task by task): what follows it on its
  // stream starts no earlier.
  Time base = now;
  if (memo_ && memo_end_[rank] != Time::max() && p.tasks[memo_last_[rank]].stream == s)
    base = std::max(now, memo_end_[rank]);
  if (i < first) return i + 1 == first && stream_busy_[si] ? base : now;  // done or running
  std::vector<std::vector<Time>>& by_stream = shortest_before_[op_costs_of_rank_[rank]];
  if (by_stream.empty()) by_stream.resize(p.streams.size());
  std::vector<Time>& before = by_stream[s];
  if (before.size() <= i + 1) {
    // Summed on as far as asked (bounds are sought early in the run, near the start),
    // from each kernel's shortest duration, tabled per op once.
    const std::vector<Time>& cost = op_cost_cache_[op_table_of_rank_[rank]];
    std::vector<Time>& of_op = shortest_of_op_[op_table_of_rank_[rank]];
    if (of_op.empty() && !p.ops.empty()) {
      if (cost.empty()) op_duration(rank, 0, kNoContention);  // fills the rank's cost table
      of_op.resize(p.ops.size());
      for (std::uint32_t o = 0; o < p.ops.size(); ++o) of_op[o] = shortest(cost, o);
    }
    const auto on_stream = p.stream(s);
    if (before.empty()) {
      before.reserve(on_stream.size() + 1);
      before.push_back(Time{});
    }
    const std::size_t from = before.size() - 1;
    before.resize(i + 2);
    Time* out = before.data();
    const Task* tasks = p.tasks.data();
    Time sum = out[from];
    for (std::size_t j = from; j <= i; ++j) {
      const Task& t = tasks[on_stream[j]];
      if (t.kind == TaskKind::Compute) sum = sum + of_op[t.ref];
      out[j + 1] = sum;
    }
  }
  const Time to = before[i + 1];
  if (to < Time::saturated()) return base + (to - before[first]);
  // Sums beyond the clock's range: add them up one by one.
  const std::vector<Time>& cost = op_cost_cache_[op_table_of_rank_[rank]];
  Time at = base;
  for (std::uint32_t j = first; j <= i && at <= limit; ++j) {
    const Task& t = p.tasks[p.stream_tasks[offset + j]];
    if (t.kind != TaskKind::Compute) continue;
    at = at + shortest(cost, t.ref);
  }
  return at;
}

std::uint32_t Executor::new_in_flight() {
  if (!free_in_flight_.empty()) {
    const std::uint32_t slot = free_in_flight_.back();
    free_in_flight_.pop_back();
    return slot;
  }
  in_flight_.emplace_back();
  return static_cast<std::uint32_t>(in_flight_.size() - 1);
}

SimulationResult Executor::run() {
  const auto nr = static_cast<std::uint32_t>(setup_->ranks.size());
  std::array<std::uint32_t, 256> none;
  none.fill(~std::uint32_t{0});
  last_interval_.assign(result_.timelines.size(), none);
  build_chains();
  build_memo();
  for (std::uint32_t r = 0; r < nr; ++r) {
    const ProgramTemplate& p = setup_->programs[setup_->ranks[r].program];
    if (p.tasks.empty()) continue;
    for (std::uint32_t s = 0; s < p.streams.size(); ++s) try_start(r, static_cast<std::uint8_t>(s), Time{});
  }
  Time now;
  network_next_ = network_->next_event();
  while (!stop_ && !order_tie_) {
    const Time tq = queue_.empty() ? Time::max() : queue_.top().time;
    // A slowdown window opens or closes: re-time the affected ranks' running
    // kernels before anything else happens at that instant.
    if (next_window_change_ < window_changes_.size() &&
        window_changes_[next_window_change_] <= std::min(tq, network_next_)) {
      const Time tw = window_changes_[next_window_change_++];
      serial_ = ++serials_;
      for (std::uint32_t r : windowed_ranks_) {
        sync(r, tw);
        retime_compute(r, tw);
      }
      continue;
    }
    if (network_next_ <= tq) {
      if (network_next_ == Time::max()) break;
      // Network first at equal times; its completions join the queue in order.
      network_done_.clear();
      network_->advance(network_next_, network_done_);
      network_next_ = network_->next_event();
      for (const TransferDone& d : network_done_) {
        auto& waiters = in_flight_[d.cookie];
        for (const Waiter& w : waiters) queue_.push_in_order(d.time, w.rank, w.task);
        waiters.clear();
        free_in_flight_.push_back(static_cast<std::uint32_t>(d.cookie));
      }
      continue;
    }
    const Event e = queue_.pop();
    if (e.payload & kChainEvent) {
      ChainRun& cr = chain_run_[e.rank];
      const std::uint32_t last = e.payload & ~kChainEvent;
      const auto& tc = chains_of_program_[setup_->ranks[e.rank].program];
      if (cr.chain == kNoChain || cr.chain != tc.at[last].chain || cr.queued != e.time) continue;  // superseded
      now = e.time;
      serial_ = ++serials_;
      advance_chain(e.rank, now, true);
      if (order_tie_) break;
      if (tc.at[last].index != cr.pos || cr.end != now) {
        order_tie_ = true;  // not where it was expected: never seen, but the full path is exact
        break;
      }
      cr.chain = kNoChain;
      cr.queued = Time::max();
      complete(e.rank, last, now);
      continue;
    }
    if (stale(e)) continue;
    now = e.time;
    serial_ = ++serials_;
    sync(e.rank, now);
    complete(e.rank, e.payload, now);
  }
  if (order_tie_) {
    Executor plain(*setup_, *cluster_, *costs_, *network_);
    plain.collapse_chains(false);
    plain.merge_intervals(merge_intervals_);
    memo_stats_.repeated = true;
    return plain.run();
  }
  result_.events = events_;
  result_.makespan = now;
  result_.completed = !stop_;
  for (std::uint32_t r = 0; r < nr; ++r) {
    if (done_count_[r] != setup_->programs[setup_->ranks[r].program].tasks.size()) result_.completed = false;
  }
  if (stop_) {
    result_.mismatch = true;
    result_.deadlock = std::move(mismatches_);
    result_.deadlocked_ranks = result_.deadlock.size();
  } else if (!result_.completed) {
    result_.deadlock = describe_deadlock(&result_.deadlocked_ranks);
  }
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
      const std::size_t si = stream_at(r, s);
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
          for (std::uint32_t i = 0; i < stream_pos_[stream_at(r, ds)]; ++i) finished |= dtasks[i] == d;
          if (!finished && listed++ < 3) reason += " '" + std::string(p.labels[p.tasks[d].label]) + "'";
        }
      }
      out.push_back(WaitingTask{rp.name, p.streams[s], std::string(p.labels[t.label]), reason});
    }
  }
  return out;
}

}  // namespace trainsim
