#pragma once
// Runs per-rank programs on one event queue. A task starts when it is at the
// head of its stream and its dependencies are done; a collective starts when
// every simulated member has posted it (rendezvous), a send/recv pair when
// both sides have. If the queue drains while tasks remain, the result names
// the waiting ranks and tasks (a deadlock) instead of hanging. While a transfer
// runs on a GPU, its compute kernels run at the profile's reduced compute share
// (communication kernels hold SMs); a running kernel's end moves when that changes.
// Transfers go to a NetworkModel (analytical or flow, sim/network_model.hpp);
// one loop steps the model's events and the queue's in time order. Members of
// a collective must post the same kind and byte count (a send the same bytes as
// its receive); a mismatch stops the run and names the ranks and tasks.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sim/cost_model.hpp"
#include "sim/event_queue.hpp"
#include "sim/flow_collectives.hpp"
#include "sim/network.hpp"
#include "sim/network_model.hpp"
#include "sim/program.hpp"
#include "sim/task_chains.hpp"
#include "sim/time.hpp"

namespace trainsim {

struct RankProgram {
  std::string name;                         // e.g. "stage 0 / tp 0 / dp 0"
  std::uint32_t program = 0;                // index into SimulationSetup::programs
  int gpu = 0;                              // global GPU id (placement, GPU type)
  std::vector<std::uint32_t> comm_of_slot;  // communicator id for each slot of the program
  bool record = false;                      // keep this rank's timeline
  // Kernel costs of this GPU type instead of the GPU's own (when >= 0): a rank
  // that stands for its TP/CP group runs at the pace of its slowest member.
  int gpu_type = -1;
};

struct SimulationSetup {
  std::vector<ProgramTemplate> programs;
  std::vector<RankProgram> ranks;  // the simulated ranks
  std::vector<Communicator> comms;
  // Per-pair bytes of the all-to-all-v tasks (Task::matrix): traffic[m][i * n + j]
  // from member i to member j of the communicator the task runs on (n members).
  std::vector<std::vector<double>> traffic;
};

// What a recorded rank did and when. Category: 0 compute, 1+CommClass a
// transfer of that class, kWaitCategory waiting at a collective rendezvous.
inline constexpr std::uint8_t kComputeCategory = 0;
inline constexpr std::uint8_t kWaitCategory = 1 + kNumCommClasses;
// With Executor::merge_intervals, a block: a run of passes applied from the
// memo, kept as the time it attributes to each part of the breakdown instead
// of as its tasks' intervals (`task` then indexes RankTimeline::blocks).
inline constexpr std::uint8_t kBlockCategory = kWaitCategory + 1;
struct Interval {
  Time start, end;
  std::uint32_t task = 0;
  std::uint8_t stream = 0;
  std::uint8_t category = 0;
};

// The parts of a breakdown (sim/metrics.hpp), in the order a sweep gives
// them precedence: compute, each CommClass, idle (a rendezvous wait), bubble.
inline constexpr std::size_t kBreakdownParts = kWaitCategory + 2;
// A block's whole nanoseconds per part, exact sums of its tasks' intervals as
// the breakdown attributes them; the executor keeps a block only where nothing
// outside it could take precedence inside it (no other interval of the rank
// starts inside it, and those running across it rank no higher than the last
// part it attributes). `first_compute`: its first kernel's start (Time::max(): none).
struct IntervalBlock {
  std::array<std::int64_t, kBreakdownParts> ns{};
  Time first_compute = Time::max();
};

struct RankTimeline {
  std::uint32_t rank = 0;
  std::vector<Interval> intervals;
  std::vector<IntervalBlock> blocks;  // merge_intervals: the blocks its intervals name
};

struct WaitingTask {
  std::string rank;    // rank name
  std::string stream;  // stream name
  std::string task;    // task label
  std::string reason;  // what it waits for
};

struct SimulationResult {
  bool completed = false;
  Time makespan;
  std::uint64_t events = 0;
  std::vector<Time> finish;  // per simulated rank
  std::vector<RankTimeline> timelines;
  std::vector<WaitingTask> deadlock;  // non-empty iff !completed
  std::size_t deadlocked_ranks = 0;
  // The run stopped because members of a communicator posted different
  // transfers (kind or bytes); `deadlock` then lists the two posts.
  bool mismatch = false;
};

// Bytes a run of `setup` will hold, estimated before it starts so that a
// caller can refuse one that would not fit (docs/performance.md): the
// executor's state per task, stream, slot, rank and communicator exactly, the
// event queue at its most, and per communicator member the flow fidelity's
// plans, routes and flows (a measured figure, `kFlowBytesPerMember`).
std::size_t estimate_run_bytes(const SimulationSetup& setup, bool flow);
// Measured: peak RSS minus the rest of this estimate for Llama 3.1 405B
// (TP8 PP16) on 1,024, 2,048 and 4,096 H100 at flow fidelity grows by 477
// bytes per communicator member (15.8, 18.9, 25.7 MB for 6,912, 13,824, 27,648 members).
inline constexpr double kFlowBytesPerMember = 480;
// Above this estimate the flow fidelity refuses to start: 16 GiB, the bound
// docs/performance.md documents (a 32 GiB workstation keeps room for the rest).
inline constexpr double kFlowMemoryLimitBytes = 16.0 * 1024 * 1024 * 1024;

class Executor {
 public:
  // The network model's events interleave with the event queue in time order
  // (at equal times the network goes first). A model that needs every member
  // (flow) must be given a setup that simulates every member.
  Executor(const SimulationSetup& setup, const Cluster& cluster, const ComputeCostModel& costs, NetworkModel& network);
  // Shorthands: an AnalyticalNetworkModel / FlowNetworkModel owned by the executor.
  Executor(const SimulationSetup& setup, const Cluster& cluster, const ComputeCostModel& costs,
           const AnalyticalNetwork& network);
  Executor(const SimulationSetup& setup, const Cluster& cluster, const ComputeCostModel& costs, FlowCollectives& flows);
  // Whether run() walks chains of tasks (sim/task_chains.hpp) without an event
  // per task where that is exact: transfers timed when they start (analytical
  // network), collectives of a chain without a rendezvous, and with contention
  // one compute stream per program. Results are the same either way; on by default.
  void collapse_chains(bool on) { chains_wanted_ = on; }
  // Whether run() applies a recorded run of a marked layer pass
  // (ProgramTemplate::passes) to a later pass that runs alike (of the same
  // template, on this rank or another with the same kernel and transfer times),
  // shifted in time, where that is exact (docs/performance.md, "A memo of
  // repeated layer passes", "Memos shared between ranks"); needs chains.
  // Results are the same either way; on by default.
  void memo_passes(bool on) { memo_wanted_ = on; }
  // Whether the memo applies consecutive passes of one template that each
  // start as the one before ends as one run (docs/performance.md, "Runs of
  // passes from the memo"). Results are the same either way; on by default.
  void run_passes(bool on) { runs_wanted_ = on; }
  // Whether a recorded rank's interval that continues its stream's last one (the same
  // category, starting where that one ends) extends it instead of being added, and a
  // run of passes applied from the memo is kept as one block of per-part sums where
  // that attributes the same (IntervalBlock): fewer intervals for the breakdown, which
  // sums them exactly either way (sim/metrics.hpp), but the timelines no longer name
  // every task (traces and reports need that). Off by default.
  void merge_intervals(bool on) { merge_intervals_ = on; }
  // What the memo did in the last run (for tests and measurement).
  struct MemoStats {
    std::uint64_t applied = 0;         // passes applied from a memo
    std::uint64_t applied_tasks = 0;   // their tasks
    std::uint64_t runs = 0;            // runs of two or more of them applied at once
    std::uint64_t recorded = 0;        // memos recorded
    std::uint64_t refused = 0;         // pass starts with a memo that its conditions refused
    std::uint64_t chained_passes = 0;  // passes whose chains were found (the first time one of their tasks started)
    bool repeated = false;             // the run was repeated task by task (an order tie)
  };
  const MemoStats& memo_stats() const { return memo_stats_; }
  SimulationResult run();

 private:
  struct Waiter {
    std::uint32_t rank, task;
    Time posted;
  };
  struct PendingCollective {
    std::vector<Waiter> waiters;
    bool done = false;
  };
  // Posts waiting for their peers, first in first out: [head, end) of a vector
  // whose elements (and their capacity) are reused once the queue empties.
  struct WaiterQueue {
    std::vector<Waiter> items;
    std::uint32_t head = 0;
    bool empty() const { return head == items.size(); }
    const Waiter& front() const { return items[head]; }
    void push(const Waiter& w);
    void pop();
  };
  struct CommState {
    std::uint64_t base_seq = 0;  // sequence number of pending[pending_head]
    // Collectives posted and not started: [pending_head, pending_head + pending_live);
    // later elements are finished ones kept for their waiters' capacity.
    std::vector<PendingCollective> pending;
    std::uint32_t pending_head = 0, pending_live = 0;
    WaiterQueue sends[2], recvs[2];  // indexed by the sending member (0 or 1)
  };
  // Per slot of a rank: its communicator, the sequence number of its next
  // collective, for a message slot the rank's member index (0 or 1), and
  // whether the rank is the communicator's only simulated member (its
  // collectives start when it posts them, without a rendezvous).
  struct SlotState {
    std::uint32_t comm = 0;
    std::uint32_t seq = 0;
    std::uint32_t member : 1 = 0;
    std::uint32_t solo : 1 = 0;
  };

  void try_start(std::uint32_t rank, std::uint8_t stream, Time now);
  void complete(std::uint32_t rank, std::uint32_t task, Time now);
  void post_collective(std::uint32_t rank, std::uint32_t task, Time now);
  void post_p2p(std::uint32_t rank, std::uint32_t task, Time now);
  void start_transfer(const TransferRequest& request, std::span<const Waiter> waiters, Time now);
  bool same_transfer(const Waiter& a, const Waiter& b, std::uint32_t comm);
  void init();
  std::uint32_t new_in_flight();
  // Contention levels of a rank's kernels (op_cost_cache_'s order).
  static constexpr std::uint8_t kNoContention = 0, kNetP2pContention = 1, kCommContention = 2;
  static constexpr std::size_t kContentionLevels = 3;
  Time op_duration(std::uint32_t rank, std::uint32_t op, std::uint8_t contention);
  std::uint8_t contention(std::uint32_t rank) const;
  bool net_p2p(std::uint32_t rank, const Task& t) const;
  bool holds_sms_from_post(std::uint32_t rank, std::uint32_t task) const;
  void start_compute(std::uint32_t rank, std::uint32_t task, std::uint32_t op, Time now);
  void comm_started(std::uint32_t rank, const Task& t, Time now);
  void comm_finished(std::uint32_t rank, const Task& t, Time now);
  void retime_compute(std::uint32_t rank, Time now);
  double window_factor(std::uint32_t rank, Time now) const;
  bool stale(const Event& e) const;
  void record(std::uint32_t rank, std::uint32_t task, Time start, Time end, std::uint8_t category);
  std::vector<WaitingTask> describe_deadlock(std::size_t* ranks_waiting) const;

  // Chains (docs/performance.md, "Chains of tasks without events"): a rank runs
  // at most one chain at a time; the queue holds one event for it, at the end
  // its last task has if the rank's contention stays as it is (payload: that
  // task | kChainEvent). Its tasks before are completed when something else
  // touches the rank (sync) and when that event comes, each at its own end, in
  // the order and with the arithmetic the executor uses task by task. Where two
  // independent events meet on one rank at one instant, the order of the event
  // queue could matter and a chain's event has another place in it: the run is
  // repeated without chains (order_tie_).
  static constexpr std::uint32_t kChainEvent = std::uint32_t{1} << 31;
  struct ChainRun {
    std::uint32_t chain = kNoChain, pos = 0;  // the running chain and its running task
    Time end;                                 // when that task ends
    Time queued = Time::max();                // the time of the chain's valid event
    std::vector<Time> predicted;              // the end of each task of the chain as now expected
    std::uint8_t level = 0;                   // the contention level and window factor the projection used
    double factor = 1;
    // Where chain_can_start last found a task of a chain waiting for a task outside it.
    std::uint32_t blocked_chain = kNoChain, blocked_at = 0;
  };
  void build_chains();
  void find_chains_of_pass(std::uint32_t prog, std::uint32_t pass);
  bool chain_can_start(std::uint32_t rank, std::uint32_t chain, std::uint32_t from);
  void schedule(std::uint32_t rank, std::uint32_t task, Time end, Time now);
  void reproject(std::uint32_t rank, Time now);
  void sync(std::uint32_t rank, Time now);
  void advance_chain(std::uint32_t rank, Time now, bool through);
  void note_post(std::uint32_t rank, std::uint32_t slot, Time now);
  static std::uint8_t category_of(const ProgramTemplate& p, const Task& t);
  // The memo of repeated passes (docs/performance.md, "A memo of repeated
  // layer passes"). A recorded pass: each task's offset in the pass, start and
  // end relative to the pass start, in the order the task-by-task run
  // completed them (the last one, F, completes through an event of its own).
  struct MemoEntry {
    std::uint32_t offset = 0;
    Time start, end;
  };
  struct PassMemo {
    std::uint32_t key = 0;
    std::uint8_t level = 0;  // the rank's contention level at the pass start
    std::vector<MemoEntry> entries;
    std::vector<std::uint32_t> stream_count;  // per stream of the program: the pass's tasks on it
    // Per stream with tasks of the pass: its first and last one there (offsets in the pass).
    std::vector<std::uint32_t> first_on_stream, last_on_stream;
    std::uint32_t internal = 0;  // dependencies among the pass's tasks
    // Per stream: the end of the pass's last kernel on it (Time::max(): none);
    // per slot: its last post (a collective's start).
    std::vector<Time> compute_end, last_post;
    // merge_intervals: the intervals an application records (all entries but the last),
    // touching ones of a stream and category merged; times from the pass start, task
    // as an offset.
    std::vector<Interval> intervals;
    std::vector<std::uint8_t> opens_stream;  // per interval: the first of its stream
    // merge_intervals: the pass as a block (IntervalBlock), where it holds no DP
    // transfer (an asynchronous pipeline's steady period reads those): its
    // nanoseconds per part over [0, span), the last part with any (an outside
    // interval running across it must not rank above that) and its first kernel's start.
    bool blockable = false;
    std::array<std::int64_t, kBreakdownParts> part_ns{};
    std::uint8_t weakest_part = 0;
    Time first_compute = Time::max();
  };
  struct Recording {
    bool active = false, clean = true;
    std::uint32_t pass = 0, done = 0;
    std::uint8_t level = 0;
    Time start;
    std::vector<MemoEntry> log;
  };
  void build_memo();
  bool try_memo(std::uint32_t rank, std::uint32_t pass, Time now);
  std::uint32_t memo_run_length(std::uint32_t rank, std::uint32_t pass, const PassMemo& memo, std::uint32_t most);
  std::uint32_t clear_passes(std::uint32_t rank, std::uint32_t pass, const PassMemo& memo, Time now);
  static Time run_offset(Time span, std::uint32_t r);
  bool pass_ready(std::uint32_t rank, const PassMark& m, std::uint32_t internal, std::span<const std::uint32_t> count,
                  const PassMemo* memo = nullptr);
  void finish_recording(std::uint32_t rank);
  Time earliest_end(std::uint32_t rank, std::uint32_t task, Time now, Time limit);
  Time peer_post_bound(std::uint32_t rank, std::uint32_t task, Time now, Time limit, bool unposted = false);
  static constexpr std::uint32_t kNoPass = ~std::uint32_t{0};
  bool memo_wanted_ = true;
  bool runs_wanted_ = true;
  bool merge_intervals_ = false;
  // Per recorded timeline and stream: the index of its last interval (merge_intervals).
  std::vector<std::array<std::uint32_t, 256>> last_interval_;
  // Appends `iv`, or extends its stream's last interval in `out` (index in
  // `last`) when that one has its category and ends where `iv` starts.
  static void append_merged(std::vector<Interval>& out, std::array<std::uint32_t, 256>& last, const Interval& iv) {
    std::uint32_t& l = last[iv.stream];
    if (l < out.size() && out[l].end == iv.start && out[l].category == iv.category) {
      out[l].end = iv.end;
      return;
    }
    l = static_cast<std::uint32_t>(out.size());
    out.push_back(iv);
  }
  void add_interval(int timeline, const Interval& iv) {
    std::vector<Interval>& out = result_.timelines[static_cast<std::size_t>(timeline)].intervals;
    if (merge_intervals_) {
      append_merged(out, last_interval_[static_cast<std::size_t>(timeline)], iv);
    } else {
      out.push_back(iv);
    }
  }
  bool memo_ = false;
  MemoStats memo_stats_;
  std::vector<std::vector<std::uint32_t>> pass_of_first_;  // per program, per task: the pass it starts
  // Passes that run alike on any rank share their memos (one class): the same
  // tasks with the same dependencies among them, kernels of the same durations
  // at every contention level, transfers of the same durations.
  void pass_signature(std::uint32_t rank, const PassMark& m, std::vector<std::uint64_t>& out);
  std::vector<std::vector<std::uint32_t>> memo_class_;  // per rank and pass key: its class
  std::vector<std::vector<PassMemo>> memos_;            // per class
  // Per class and contention level: recordings spoiled, and chances skipped since the last.
  struct RecordingTries {
    std::uint32_t failed = 0, skipped = 0;
  };
  std::vector<RecordingTries> recording_tries_;
  std::vector<Recording> recording_;              // per rank
  std::vector<std::uint32_t> pass_stream_count_;  // try_memo's scratch: a pass's tasks per stream
  // A rank whose pass was applied: until its last task's event (memo_end_),
  // nothing else may touch the rank; if something does the run is repeated
  // task by task.
  std::vector<Time> memo_end_;
  std::vector<std::uint32_t> memo_last_;
  // Per rank: the applied run is a block, its last task's interval included (not recorded).
  std::vector<std::uint8_t> block_final_;
  bool try_block(std::uint32_t rank, const PassMark& m, const PassMemo& memo, std::uint32_t runs, Time now, Time end);
  // Per rank: a receive that clear_passes let be posted while the applied pass runs (kNoPass: none).
  std::vector<std::uint32_t> quiet_post_;
  std::vector<Time> busy_end_;  // per stream: the running transfer's end (Time::max(): not started)
  // Per stream: a waiting send or receive and a bound found on its match's post.
  std::vector<std::uint32_t> bound_task_;
  std::vector<Time> bound_at_;
  std::vector<std::uint32_t> p2p_posts_;                    // per slot: sends and receives posted (2 per slot)
  std::vector<std::pair<int, std::uint32_t>> rank_of_gpu_;  // sorted
  // Per slot of a message communicator: the one simulated peer rank bound to it and its slot
  // there (kNoPeer: not looked up yet; kNoSimulatedPeer: none, or more than one).
  struct PeerSlot {
    std::uint32_t rank = 0, slot = 0;
  };
  static constexpr std::uint32_t kNoPeer = 0xffffffffu, kNoSimulatedPeer = 0xfffffffeu;
  std::vector<PeerSlot> peer_of_slot_;
  // Per program (lazily): each task's index into stream_tasks (the program's
  // own, else one made here for a program laid out by hand); per slot the sends and
  // receives in stream order (empty when they lie on several streams).
  std::vector<std::span<const std::uint32_t>> stream_index_;
  std::vector<std::vector<std::uint32_t>> own_stream_index_;
  std::vector<std::vector<std::vector<std::uint32_t>>> p2p_order_;  // [program][2 * slot + kind]
  std::vector<std::vector<std::uint8_t>> p2p_ordered_;              // [program][2 * slot + kind]
  bool chains_wanted_ = true;
  bool chains_ = false;
  bool order_tie_ = false;
  std::vector<TaskChains> chains_of_program_;
  std::vector<std::vector<std::uint8_t>> linkable_of_program_;  // per program: the slots chains may hold
  std::vector<ChainRun> chain_run_;                             // per rank
  // Which event (serial) did what when: a compute task's completion per stream
  // and a post per slot, to find two independent events at one instant.
  std::uint64_t serial_ = 0, serials_ = 0;
  std::vector<Time> compute_done_at_, posted_at_;
  std::vector<std::uint64_t> compute_done_serial_, posted_serial_;
  std::uint64_t events_ = 0;

  const SimulationSetup* setup_;
  const Cluster* cluster_;
  const ComputeCostModel* costs_;
  std::unique_ptr<NetworkModel> owned_network_;
  NetworkModel* network_ = nullptr;
  Time network_next_ = Time::max();  // network_->next_event(), refreshed after each start / advance
  bool stop_ = false;                // a mismatch ends the run

  // State lives in flat vectors; ranks sharing a program are interleaved:
  // element i of rank r is at base_[r] + i * stride_[r].
  std::size_t task_at(std::uint32_t rank, std::uint32_t task) const {
    return task_base_[rank] + static_cast<std::size_t>(task) * stride_[rank];
  }
  std::size_t stream_at(std::uint32_t rank, std::uint32_t stream) const {
    return stream_base_[rank] + static_cast<std::size_t>(stream) * stride_[rank];
  }
  std::size_t slot_at(std::uint32_t rank, std::uint32_t slot) const {
    return slot_base_[rank] + static_cast<std::size_t>(slot) * stride_[rank];
  }
  std::vector<std::size_t> task_base_, stream_base_, slot_base_;
  std::vector<std::uint32_t> stride_;
  std::vector<std::uint32_t> remaining_deps_;
  std::vector<std::uint32_t> stream_pos_;
  std::vector<std::uint8_t> stream_busy_;
  std::vector<Time> stream_start_;
  std::vector<SlotState> slots_;
  // The program of each rank (setup_->programs[setup_->ranks[r].program]), read on every event.
  std::vector<const ProgramTemplate*> program_of_rank_;
  std::vector<std::uint32_t> done_count_;
  std::vector<CommState> comms_;
  std::vector<std::vector<Time>> op_cost_cache_;  // [program * types + type][3 * op + contention level]
  // Per rank: its (program, GPU type) entry, for shortest_before_; and the
  // entry of op_cost_cache_ and shortest_of_op_ it reads: that of the first
  // program with the same ops on its GPU type (stages alike share one table).
  std::vector<std::uint32_t> op_costs_of_rank_, op_table_of_rank_;
  // Per op_cost_cache_ entry and stream of its program (lazily, as far as asked): the
  // shortest durations of the stream's compute tasks before each position, summed (earliest_end).
  std::vector<std::vector<std::vector<Time>>> shortest_before_;
  std::vector<std::vector<Time>> shortest_of_op_;  // per op_cost_cache_ entry: each op's shortest duration
  // A kernel's shortest duration: at its fastest contention level (op_cost_cache_'s row).
  static Time shortest(const std::vector<Time>& cost, std::uint32_t op) {
    const std::size_t c = kContentionLevels * static_cast<std::size_t>(op);
    return std::min(cost[c], std::min(cost[c + 1], cost[c + 2]));
  }
  // Compute/communication contention: transfers running per rank (collectives and
  // send/recv inside a node; send/recv between nodes), whether each communicator
  // spans nodes, and per stream
  // the running compute kernel's progress (fraction done at `run_since_`), rate and
  // the one valid completion time (earlier events for it are stale).
  bool contention_ = false;
  std::vector<std::uint32_t> comm_active_, net_p2p_active_;
  std::vector<std::uint8_t> comm_spans_nodes_;
  std::vector<double> run_frac_;
  std::vector<Time> run_since_, run_end_;
  std::vector<std::uint8_t> run_slow_;
  // Slowdown windows (GpuSpec::slowdown_windows): the ranks on a GPU type that
  // has them, each type's windows in the integer clock, and the instants at
  // which a factor changes (where those ranks' running kernels are re-timed).
  // `retiming_`: running kernels' rates can change (contention or windows).
  bool retiming_ = false;
  std::vector<std::uint32_t> windowed_ranks_;
  struct ClockWindow {
    Time start, end;
    double factor = 1;
  };
  std::vector<std::vector<ClockWindow>> windows_of_type_;
  std::vector<Time> window_changes_;
  std::size_t next_window_change_ = 0;
  std::vector<double> run_factor_;
  std::vector<std::vector<std::uint8_t>> compute_streams_;  // per program: the streams that run compute tasks
  std::vector<int> timeline_of_rank_;
  SimulationResult result_;
  EventQueue queue_;
  // The waiters of each running transfer, by cookie.
  std::vector<std::vector<Waiter>> in_flight_;
  std::vector<std::uint32_t> free_in_flight_;
  std::vector<TransferDone> network_done_;
  std::vector<WaitingTask> mismatches_;
};

}  // namespace trainsim
