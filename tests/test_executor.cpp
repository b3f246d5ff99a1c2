#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>

#include "sim/executor.hpp"
#include "sim/metrics.hpp"
#include "sim_fixtures.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// 1e12 FLOPs at 100 TFLOP/s (ideal profile) = 10 ms.
ComputeOp gemm(double flops) {
  ComputeOp op;
  op.name = "gemm";
  op.kind = OpKind::Gemm;
  op.flops = flops;
  op.m = op.n = op.k = 4096;
  return op;
}

// Two GPUs with an ideal profile; `compute_share` is its compute share during communication.
CalibrationProfile ideal_profile_sharing(double compute_share) {
  CalibrationProfile p = ideal_profile();
  p.compute_share_during_comm.value = compute_share;
  return p;
}

struct Fixture {
  explicit Fixture(double compute_share = 1.0) : profiles{ideal_profile_sharing(compute_share)} {}
  Cluster cluster{toy_cluster(1, 2)};
  std::vector<CalibrationProfile> profiles;
  ComputeCostModel costs{cluster, profiles};
  AnalyticalNetwork net{cluster, profiles};
};

}  // namespace

TEST_CASE("a program's labels lie back to back in one table") {
  LabelTable labels;
  CHECK(labels.add("F L3 ", "attn.qkv") == 0);
  CHECK(labels.add("") == 1);  // an empty label is a label
  CHECK(labels.add("dp.ar.grads") == 2);
  CHECK(labels[0] == "F L3 attn.qkv");
  CHECK(labels[1].empty());
  CHECK(labels[2] == "dp.ar.grads");
  // Taking back the last one (a text already there) leaves the others alone.
  CHECK(labels.add("F L3 ", "attn.qkv") == 3);
  labels.remove_last();
  CHECK(labels.size() == 3);
  CHECK(labels.add("B L3 ", "attn.qkv") == 3);
  CHECK(labels[3] == "B L3 attn.qkv");
  CHECK(labels[2] == "dp.ar.grads");
  CHECK(labels.at(3) == "B L3 attn.qkv");
  CHECK_THROWS_AS(labels.at(4), std::out_of_range);
  LabelTable same;
  for (const char* text : {"F L3 attn.qkv", "", "dp.ar.grads", "B L3 attn.qkv"}) same.add(text);
  CHECK(same == labels);
}

TEST_CASE("a collective starts when the last member arrives") {
  Fixture f;
  SimulationSetup setup;
  setup.comms.push_back(Communicator{"pair", {0, 1}, 2});
  for (double flops : {1e12, 3e12}) {  // 10 ms and 30 ms of compute before the all-reduce
    ProgramBuilder b("p");
    const auto c = b.add_stream("compute");
    const auto comm = b.add_stream("comm");
    const auto slot = b.add_comm_slot("pair");
    const TaskId t0 = b.compute(c, b.add_op(gemm(flops)), b.add_label("work"), 0, {});
    const TaskId deps[] = {t0};
    b.collective(comm, slot, CollectiveKind::AllReduce, CommClass::DP, 1000000000, b.add_label("ar"), 0, deps);
    setup.programs.push_back(std::move(b).finish());
  }
  setup.ranks.push_back(RankProgram{"fast", 0, 0, {0}, true});
  setup.ranks.push_back(RankProgram{"slow", 1, 1, {0}, true});
  Executor ex(setup, f.cluster, f.costs, f.net);
  const SimulationResult r = ex.run();
  REQUIRE(r.completed);
  // all-reduce of 1 GB between 2 GPUs over 100 GB/s: 2*1/2 * 1e9/1e11 = 10 ms, after 30 ms.
  CHECK(r.makespan.to_seconds() == doctest::Approx(0.040));
  // The fast rank waited 20 ms at the rendezvous: counted as idle, not as bubble.
  const TimeBreakdown fast = breakdown(r.timelines[0].intervals, r.makespan);
  CHECK(fast.compute_s == doctest::Approx(0.010));
  CHECK(fast.idle_s == doctest::Approx(0.020));
  CHECK(fast.exposed_comm_s[static_cast<int>(CommClass::DP)] == doctest::Approx(0.010));
  CHECK(fast.bubble_s == doctest::Approx(0.0));
}

TEST_CASE("compute beside a running collective is slowed by the profile's compute share") {
  // Two ranks each run a 10 ms GEMM while a 0.4 GB all-reduce (4 ms over 100 GB/s)
  // starts on their comm stream at a given time (after a GEMM on a side stream).
  // At half the compute throughput during the transfer, the GEMM loses half of the
  // overlapped span: from 0 to 4 ms, 2 ms (ends at 12 ms); from 9 ms, its last 1 ms
  // of work takes 2 ms (ends at 11 ms).
  struct Case {
    double share;     // compute share during communication
    double ar_flops;  // compute before the all-reduce is posted (its start time)
    double gemm_end;  // expected GEMM completion, seconds
  };
  for (const Case c : {Case{1.0, 0, 0.010}, Case{0.5, 0, 0.012}, Case{0.5, 0.9e12, 0.011}}) {
    CAPTURE(c.share);
    CAPTURE(c.ar_flops);
    Fixture f(c.share);
    SimulationSetup setup;
    setup.comms.push_back(Communicator{"pair", {0, 1}, 2});
    ProgramBuilder b("p");
    const auto main = b.add_stream("compute");
    const auto side = b.add_stream("side");
    const auto comm = b.add_stream("comm");
    const auto slot = b.add_comm_slot("pair");
    std::vector<TaskId> deps;
    if (c.ar_flops > 0) deps.push_back(b.compute(side, b.add_op(gemm(c.ar_flops)), b.add_label("pre"), 0, {}));
    b.compute(main, b.add_op(gemm(1e12)), b.add_label("work"), 0, {});
    b.collective(comm, slot, CollectiveKind::AllReduce, CommClass::DP, 400000000, b.add_label("ar"), 0, deps);
    setup.programs.push_back(std::move(b).finish());
    setup.ranks.push_back(RankProgram{"r0", 0, 0, {0}, true});
    setup.ranks.push_back(RankProgram{"r1", 0, 1, {0}, true});
    Executor ex(setup, f.cluster, f.costs, f.net);
    const SimulationResult r = ex.run();
    REQUIRE(r.completed);
    double work_end = 0;
    for (const Interval& iv : r.timelines[0].intervals) {
      if (iv.stream == main) work_end = iv.end.to_seconds();
    }
    CHECK(work_end == doctest::Approx(c.gemm_end));
  }
}

TEST_CASE("compute beside a send/recv between nodes runs at the profile's network p2p share") {
  // Rank 0 runs a 10 ms GEMM while it sends 0.4 GB to rank 1: inside a node
  // (100 GB/s, 4 ms) the kernel runs at compute_share_during_comm while the
  // transfer runs; between nodes (10 GB/s, 40 ms: the whole GEMM) at
  // compute_share_during_net_p2p, NCCL's few channels for a network peer.
  struct Case {
    int nodes;             // 1: both GPUs in one node, 2: one GPU per node
    double net_p2p_share;  // compute_share_during_net_p2p (compute_share_during_comm is 0.5)
    double gemm_end;       // expected GEMM completion, seconds (0: slowed, not exact)
  };
  for (const Case c : {Case{2, 0.8, 0.0125}, Case{2, 0.5, 0.020}, Case{2, 1.0, 0.010}, Case{1, 1.0, 0.0}}) {
    CAPTURE(c.nodes);
    CAPTURE(c.net_p2p_share);
    const Cluster cluster{toy_cluster(c.nodes, 2 / c.nodes)};
    std::vector<CalibrationProfile> profiles{ideal_profile_sharing(0.5)};
    profiles[0].compute_share_during_net_p2p.value = c.net_p2p_share;
    const ComputeCostModel costs{cluster, profiles};
    AnalyticalNetwork net{cluster, profiles};
    SimulationSetup setup;
    setup.comms.push_back(Communicator{"link 0<->1", {0, 1}, 2});
    for (int rank = 0; rank < 2; ++rank) {
      ProgramBuilder b(rank == 0 ? "sender" : "receiver");
      const auto main = b.add_stream("compute");
      const auto io = b.add_stream("p2p");
      const auto slot = b.add_comm_slot("peer");
      if (rank == 0) {
        b.compute(main, b.add_op(gemm(1e12)), b.add_label("work"), 0, {});
        b.send(io, slot, CommClass::PP, 400000000, b.add_label("send"), 0, {});
      } else {
        b.recv(io, slot, CommClass::PP, 400000000, b.add_label("recv"), 0, {});
      }
      setup.programs.push_back(std::move(b).finish());
      setup.ranks.push_back(RankProgram{rank == 0 ? "r0" : "r1", static_cast<std::uint32_t>(rank), rank, {0}, true});
    }
    Executor ex(setup, cluster, costs, net);
    const SimulationResult r = ex.run();
    REQUIRE(r.completed);
    double work_end = 0;
    for (const Interval& iv : r.timelines[0].intervals) {
      if (iv.stream == 0) work_end = iv.end.to_seconds();
    }
    if (c.gemm_end > 0) {
      CHECK(work_end == doctest::Approx(c.gemm_end));
    } else {
      CHECK(work_end > 0.0115);  // about 4 ms at half speed inside the node
      CHECK(work_end < 0.0125);
    }
  }
}

TEST_CASE("a send/recv holds its SMs from its post; a receive posted ahead from the transfer's start") {
  // Each rank runs an optional "pre" GEMM, then a 10 ms "work" GEMM, and posts
  // its send (rank 0) or receive (rank 1) of 0.4 GB either after "pre" or at
  // once (no dependency). compute_share_during_comm is 0.5: a kernel runs at
  // half speed while its rank holds SMs for a transfer. NCCL's kernel holds
  // them from the post, spinning until the peer posts; a receive without a
  // dependency (the planner's stand-in for one a runtime posts when its sender
  // is about done) holds them only from the transfer's start.
  struct Case {
    const char* what;
    double pre_ms[2];    // "pre" GEMM of rank 0 (sender) and rank 1 (receiver), ms
    bool after_pre[2];   // the send / receive waits for "pre"
    int slowed;          // the rank whose "work" is checked
    double slowed_from;  // ms: when that rank starts holding SMs (-1: the transfer's start)
  };
  const Case cases[] = {
      {"a send posted before its receive spins beside the sender's work", {0, 5}, {false, true}, 0, 0},
      {"a receive posted after a task spins beside the receiver's work", {6, 2}, {true, true}, 1, 2},
      {"a receive posted ahead holds SMs from the transfer's start", {6, 2}, {true, false}, 1, -1},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    Fixture f(0.5);
    SimulationSetup setup;
    setup.comms.push_back(Communicator{"link 0<->1", {0, 1}, 2});
    for (int rank = 0; rank < 2; ++rank) {
      ProgramBuilder b(rank == 0 ? "sender" : "receiver");
      const auto main = b.add_stream("compute");
      const auto io = b.add_stream("p2p");
      const auto slot = b.add_comm_slot("peer");
      std::vector<TaskId> deps;
      if (c.pre_ms[rank] > 0) {
        const TaskId pre = b.compute(main, b.add_op(gemm(c.pre_ms[rank] * 1e11)), b.add_label("pre"), 0, {});
        if (c.after_pre[rank]) deps.push_back(pre);
      }
      b.compute(main, b.add_op(gemm(1e12)), b.add_label("work"), 0, {});
      if (rank == 0) {
        b.send(io, slot, CommClass::PP, 400000000, b.add_label("send"), 0, deps);
      } else {
        b.recv(io, slot, CommClass::PP, 400000000, b.add_label("recv"), 0, deps);
      }
      setup.programs.push_back(std::move(b).finish());
      setup.ranks.push_back(RankProgram{rank == 0 ? "r0" : "r1", static_cast<std::uint32_t>(rank), rank, {0}, true});
    }
    Executor ex(setup, f.cluster, f.costs, f.net);
    const SimulationResult r = ex.run();
    REQUIRE(r.completed);
    double transfer_start = 0, transfer_end = 0, work_start = 0, work_end = 0;
    for (const Interval& iv : r.timelines[static_cast<std::size_t>(c.slowed)].intervals) {
      if (iv.stream == 1) {
        transfer_start = iv.start.to_seconds() * 1e3;
        transfer_end = iv.end.to_seconds() * 1e3;
      } else {
        work_start = iv.start.to_seconds() * 1e3;  // the last compute interval is "work"
        work_end = iv.end.to_seconds() * 1e3;
      }
    }
    REQUIRE(transfer_end > transfer_start);
    const double held_from = c.slowed_from >= 0 ? c.slowed_from : transfer_start;
    // Full speed from work_start to held_from, half speed to the transfer's end, full speed after.
    const double done = (held_from - work_start) + 0.5 * (transfer_end - held_from);
    CHECK(work_end == doctest::Approx(transfer_end + 10.0 - done).epsilon(1e-6));
  }
}

TEST_CASE("a wrong hand-made schedule is reported as a deadlock naming ranks and tasks") {
  Fixture f;
  SimulationSetup setup;
  setup.comms.push_back(Communicator{"link 0<->1", {0, 1}, 2});
  // Each rank first waits to receive, then would send: neither send is ever posted.
  ProgramBuilder b("bad");
  const auto c = b.add_stream("compute");
  const auto io = b.add_stream("p2p");
  const auto slot = b.add_comm_slot("peer");
  const TaskId r = b.recv(io, slot, CommClass::PP, 1000, b.add_label("recv activations"), 0, {});
  const TaskId d1[] = {r};
  const TaskId w = b.compute(c, b.add_op(gemm(1e9)), b.add_label("forward"), 0, d1);
  const TaskId d2[] = {w};
  b.send(io, slot, CommClass::PP, 1000, b.add_label("send activations"), 0, d2);
  setup.programs.push_back(std::move(b).finish());
  setup.ranks.push_back(RankProgram{"stage 0", 0, 0, {0}, false});
  setup.ranks.push_back(RankProgram{"stage 1", 0, 1, {0}, false});
  Executor ex(setup, f.cluster, f.costs, f.net);
  const SimulationResult res = ex.run();
  CHECK_FALSE(res.completed);
  CHECK(res.deadlocked_ranks == 2);
  REQUIRE(res.deadlock.size() >= 2);
  std::string all;
  for (const auto& wt : res.deadlock) all += wt.rank + " | " + wt.task + " | " + wt.reason + "\n";
  CHECK(all.find("stage 0") != std::string::npos);
  CHECK(all.find("stage 1") != std::string::npos);
  CHECK(all.find("recv activations") != std::string::npos);
  CHECK(all.find("forward") != std::string::npos);
}

namespace {
// The breakdown as a full sort of all edges computes it: the reference for the
// run-merging one in sim/metrics.cpp.
TimeBreakdown breakdown_by_full_sort(const std::vector<Interval>& intervals, Time end) {
  std::vector<std::pair<Time, int>> edges;  // (time, +-(category + 1))
  for (const Interval& iv : intervals) {
    edges.emplace_back(iv.start, iv.category + 1);
    edges.emplace_back(iv.end, -(iv.category + 1));
  }
  std::stable_sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::array<int, kWaitCategory + 1> active{};
  // Nanoseconds of compute, each class, idle and bubble, converted at the end.
  std::array<Time, kNumCommClasses + 3> sums{};
  Time prev;
  auto attribute = [&](Time from, Time to) {
    if (to <= from) return;
    const Time dt = to - from;
    if (active[kComputeCategory] > 0) return void(sums[0] += dt);
    for (std::size_t c = 0; c < kNumCommClasses; ++c) {
      if (active[1 + c] > 0) return void(sums[1 + c] += dt);
    }
    sums[active[kWaitCategory] > 0 ? kNumCommClasses + 1 : kNumCommClasses + 2] += dt;
  };
  for (const auto& [t, signed_category] : edges) {
    attribute(prev, std::min(t, end));
    prev = std::max(prev, std::min(t, end));
    active[static_cast<std::size_t>(std::abs(signed_category) - 1)] += signed_category > 0 ? 1 : -1;
  }
  attribute(prev, end);
  TimeBreakdown out;
  out.compute_s = sums[0].to_seconds();
  for (std::size_t c = 0; c < kNumCommClasses; ++c) out.exposed_comm_s[c] = sums[1 + c].to_seconds();
  out.idle_s = sums[kNumCommClasses + 1].to_seconds();
  out.bubble_s = sums[kNumCommClasses + 2].to_seconds();
  return out;
}
}  // namespace

TEST_CASE("the breakdown equals a full sort's to the bit, in executor order or any other") {
  std::mt19937_64 rng(19);
  std::uniform_int_distribution<std::int64_t> gap(0, 50), length(1, 400);
  std::uniform_int_distribution<int> category(0, kWaitCategory);
  for (int round = 0; round < 40; ++round) {
    // Four streams, each running one interval after another (starts in order
    // per stream), recorded when they end (ends in order), as the executor does.
    // From round 20 on, stream 0 runs most of them (the compute stream, which
    // the breakdown walks as it lies and merges with the others' sorted edges).
    std::vector<Interval> intervals;
    Time free_at[4];
    for (int i = 0; i < 400; ++i) {
      const auto s = static_cast<std::uint8_t>(round >= 20 && rng() % 4 != 0 ? 0 : rng() % 4);
      const Time start = free_at[s] + Time::ns(gap(rng));
      free_at[s] = start + Time::ns(length(rng));
      intervals.push_back(Interval{start, free_at[s], 0, s, static_cast<std::uint8_t>(category(rng))});
    }
    std::stable_sort(intervals.begin(), intervals.end(),
                     [](const Interval& a, const Interval& b) { return a.end < b.end; });
    const Time end = Time::ns(round % 2 == 0 ? 1000000 : 3000);  // the makespan, or a cut inside the timeline
    auto same = [](const TimeBreakdown& a, const TimeBreakdown& b) {
      return a.compute_s == b.compute_s && a.exposed_comm_s == b.exposed_comm_s && a.bubble_s == b.bubble_s &&
             a.idle_s == b.idle_s;
    };
    const TimeBreakdown reference = breakdown_by_full_sort(intervals, end);
    CHECK(same(breakdown(intervals, end), reference));
    CHECK(same(breakdown_sorting_edges(intervals, end), reference));
    // Cut into touching pieces of their category (as the executor records a chain of
    // kernels) or joined (as with merge_intervals), the same to the bit.
    std::vector<Interval> cut;
    for (const Interval& iv : intervals) {
      const Time mid = iv.start + Time::ns((iv.end - iv.start).count_ns() / 3);
      if (mid > iv.start) cut.push_back(Interval{iv.start, mid, iv.task, iv.stream, iv.category});
      cut.push_back(Interval{mid, iv.end, iv.task, iv.stream, iv.category});
    }
    CHECK(same(breakdown(cut, end), reference));
    std::shuffle(intervals.begin(), intervals.end(), rng);  // runs out of order: sorted before merging
    CHECK(same(breakdown(intervals, end), reference));
  }
}

TEST_CASE("a block of intervals attributes what they would, and only where nothing outside ranks above it") {
  // A stretch [a, b) of kernels and TP transfers (streams 0 and 1) kept as one
  // block with its part sums (IntervalBlock), beside intervals of streams 2
  // and 3 that end before it, start after it or run across it ranking below
  // everything it attributes: the same breakdown to the bit as the intervals.
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> length(1, 300);
  const auto tp = static_cast<std::uint8_t>(1 + static_cast<int>(CommClass::TP));
  const auto pp = static_cast<std::uint8_t>(1 + static_cast<int>(CommClass::PP));
  const auto dp = static_cast<std::uint8_t>(1 + static_cast<int>(CommClass::DP));
  auto same = [](const TimeBreakdown& x, const TimeBreakdown& y) {
    return x.compute_s == y.compute_s && x.exposed_comm_s == y.exposed_comm_s && x.bubble_s == y.bubble_s &&
           x.idle_s == y.idle_s;
  };
  for (int round = 0; round < 30; ++round) {
    const Time a = Time::ns(1000 + length(rng)), end = Time::ns(100000);
    // Inside: kernels back to back on stream 0, a TP transfer on stream 1 in
    // each gap between them (the stretch covered, or left with holes in odd rounds).
    std::vector<Interval> inside;
    Time at = a;
    for (int k = 0; k < 8; ++k) {
      const Time kernel_end = at + Time::ns(length(rng));
      inside.push_back(Interval{at, kernel_end, 0, 0, kComputeCategory});
      const Time transfer_end = kernel_end + Time::ns(length(rng));
      if (round % 2 == 0 || k % 3 != 0) inside.push_back(Interval{kernel_end, transfer_end, 0, 1, tp});
      at = transfer_end;
    }
    const Time b = at;
    std::vector<Interval> relative;
    for (const Interval& iv : inside) relative.push_back(Interval{iv.start - a, iv.end - a, 0, iv.stream, iv.category});
    const PartSums sums = part_sums(relative, b - a);
    // Outside: before, after, and across it on stream 2 (a pipeline receive
    // posted before it) where it ranks below the block's weakest part.
    std::vector<Interval> outside{Interval{Time::ns(10), Time::ns(500), 0, 2, tp},
                                  Interval{b + Time::ns(5), b + Time::ns(900), 0, 3, kComputeCategory}};
    const bool across = sums.weakest <= pp;
    if (across) outside.push_back(Interval{a - Time::ns(200), b + Time::ns(300), 0, 2, round % 3 == 0 ? dp : pp});
    std::vector<Interval> full = outside, blocked = outside;
    full.insert(full.end(), inside.begin(), inside.end());
    blocked.push_back(Interval{a, b, 0, 0, kBlockCategory});
    IntervalBlock block;
    block.ns = sums.ns;
    const std::vector<IntervalBlock> blocks{block};
    for (std::vector<Interval>* v : {&full, &blocked}) {
      std::stable_sort(v->begin(), v->end(), [](const Interval& x, const Interval& y) { return x.end < y.end; });
    }
    CAPTURE(round);
    CHECK(sums.weakest == (round % 2 == 0 ? tp : kBreakdownParts - 1));  // holes: bubble inside
    CHECK(same(breakdown(blocked, blocks, end), breakdown_by_full_sort(full, end)));
    std::shuffle(blocked.begin(), blocked.end(), rng);  // the general path
    CHECK(same(breakdown(blocked, blocks, end), breakdown_by_full_sort(full, end)));
  }
  // A block past the breakdown's end, or one the timeline does not hold, is a program error.
  const std::vector<Interval> past{Interval{Time::ns(0), Time::ns(50), 0, 0, kBlockCategory}};
  CHECK_THROWS(breakdown(past, std::vector<IntervalBlock>(1), Time::ns(40)));
  CHECK_THROWS(breakdown(past, Time::ns(100)));
}

namespace {
// Two pipeline stages on GPUs 0 and 1 of one node, each with a tensor-parallel
// group of which it is the only simulated member (GPUs 2 and 3 stand aside):
// per micro-batch a forward and a backward of kernels and TP all-reduces
// (chains), activations sent forward and gradients back with receives posted
// ahead, so transfers start and end while chains run. FLOPs are drawn from
// `seed`, multiples of `grain` (a coarse grain makes instants coincide).
SimulationSetup two_stage_pipeline(std::uint32_t seed, double grain) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> units(1, 40);
  auto flops = [&]() { return grain * units(rng); };
  SimulationSetup setup;
  setup.comms.push_back(Communicator{"tp0", {0, 2}, 1});
  setup.comms.push_back(Communicator{"tp1", {1, 3}, 1});
  setup.comms.push_back(Communicator{"pp", {0, 1}, 2});
  constexpr int kMicrobatches = 4;
  for (int stage = 0; stage < 2; ++stage) {
    ProgramBuilder b(stage == 0 ? "first" : "last");
    const auto compute = b.add_stream("compute");
    const auto tp = b.add_stream("tp");
    const auto pp_in = b.add_stream("pp.recv");
    const auto pp_out = b.add_stream("pp.send");
    const auto tp_slot = b.add_comm_slot("tp");
    const auto pp_slot = b.add_comm_slot("pp");
    const auto label = b.add_label("x");
    auto pass = [&](std::vector<TaskId> deps, int mb) {
      TaskId last = 0;
      for (int layer = 0; layer < 3; ++layer) {
        last = b.compute(compute, b.add_op(gemm(flops())), label, mb, deps);
        b.compute(compute, b.add_op(gemm(flops())), label, mb, {});  // after it by stream order only
        const TaskId k = b.compute(compute, b.add_op(gemm(flops())), label, mb, {});
        const TaskId kd[] = {k};
        last = b.collective(tp, tp_slot, CollectiveKind::AllReduce, CommClass::TP,
                            static_cast<std::uint64_t>(flops() / 1e3), label, mb, kd);
        deps.assign(1, last);
      }
      return last;
    };
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      std::vector<TaskId> deps;
      if (stage == 1) deps.push_back(b.recv(pp_in, pp_slot, CommClass::PP, 300000000, label, mb, {}));
      const TaskId fwd = pass(deps, mb);
      const TaskId fd[] = {fwd};
      if (stage == 0) b.send(pp_out, pp_slot, CommClass::PP, 300000000, label, mb, fd);
      deps.assign(1, fwd);
      if (stage == 0) deps.push_back(b.recv(pp_in, pp_slot, CommClass::PP, 200000000, label, mb, {}));
      const TaskId bwd = pass(deps, mb);
      const TaskId bd[] = {bwd};
      if (stage == 1) b.send(pp_out, pp_slot, CommClass::PP, 200000000, label, mb, bd);
    }
    setup.programs.push_back(std::move(b).finish());
    setup.ranks.push_back(RankProgram{stage == 0 ? "stage 0" : "stage 1",
                                      static_cast<std::uint32_t>(stage),
                                      stage,
                                      {static_cast<std::uint32_t>(stage), 2},
                                      true});
  }
  return setup;
}

// Runs `setup` with chains and task by task; every figure and interval must agree
// to the nanosecond. Returns the run with chains. With `any_order_at_equal_ends`
// intervals that end at one instant may be listed in another order (a chain
// records its tasks' intervals when its rank is next touched, after an event of
// another stream of the rank at that instant); the timelines are compared
// sorted by end, start, task, stream and category.
SimulationResult run_with_and_without_chains(const SimulationSetup& setup, const Cluster& cluster,
                                             const ComputeCostModel& costs, const AnalyticalNetwork& net,
                                             bool any_order_at_equal_ends = false) {
  Executor with(setup, cluster, costs, net);
  Executor without(setup, cluster, costs, net);
  without.collapse_chains(false);
  const SimulationResult a = with.run();
  const SimulationResult b = without.run();
  REQUIRE(a.completed);
  REQUIRE(b.completed);
  CHECK(a.makespan == b.makespan);
  CHECK(a.events == b.events);
  CHECK(a.finish == b.finish);
  REQUIRE(a.timelines.size() == b.timelines.size());
  for (std::size_t r = 0; r < a.timelines.size(); ++r) {
    std::vector<Interval> x = a.timelines[r].intervals;
    std::vector<Interval> y = b.timelines[r].intervals;
    if (any_order_at_equal_ends) {
      auto order = [](const Interval& u, const Interval& v) {
        return std::tuple(u.end, u.start, u.task, u.stream, u.category) <
               std::tuple(v.end, v.start, v.task, v.stream, v.category);
      };
      std::sort(x.begin(), x.end(), order);
      std::sort(y.begin(), y.end(), order);
    }
    REQUIRE(x.size() == y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      CAPTURE(i);
      CHECK((x[i].start == y[i].start && x[i].end == y[i].end && x[i].task == y[i].task && x[i].stream == y[i].stream &&
             x[i].category == y[i].category));
    }
  }
  return a;
}
}  // namespace

TEST_CASE("chains of tasks walked without events give every result of the task-by-task run") {
  // Contention (compute shares below 1) re-times kernels of a chain when a
  // pipeline transfer starts or ends in its middle; a coarse grain makes
  // events of both ranks coincide, where the executor repeats the run
  // without chains. Every figure and interval must be the same to the nanosecond.
  // With a share of 0.5 and whole milliseconds (1e11 FLOPs at 100 TFLOP/s,
  // 1e8 bytes at 100 GB/s) every duration is whole milliseconds.
  struct Case {
    double share, grain;
  };
  for (const Case c : {Case{0.7, 1.37e10}, Case{0.7, 1e11}, Case{0.5, 1e11}}) {
    const Cluster cluster{toy_cluster(1, 4)};
    const std::vector<CalibrationProfile> profiles{ideal_profile_sharing(c.share)};
    const ComputeCostModel costs{cluster, profiles};
    const AnalyticalNetwork net{cluster, profiles};
    const double grain = c.grain;
    for (std::uint32_t seed = 1; seed <= 20; ++seed) {
      CAPTURE(c.share);
      CAPTURE(grain);
      CAPTURE(seed);
      run_with_and_without_chains(two_stage_pipeline(seed, grain), cluster, costs, net);
    }
  }
}

TEST_CASE("a transfer that starts on a rank at the instant its chain ends gives the task-by-task result") {
  // Stage 0 runs two 5 ms kernels (a chain) with a receive posted, then a
  // kernel on the received data; stage 1 sends when its 10 ms kernel ends, at
  // the instant stage 0's chain ends: two independent events at one instant on
  // stage 0, where the order of the event queue decides whether the transfer
  // re-times the chain's last kernel (the executor repeats the run without chains).
  const Cluster cluster{toy_cluster(1, 2)};
  const std::vector<CalibrationProfile> profiles{ideal_profile_sharing(0.5)};
  const ComputeCostModel costs{cluster, profiles};
  const AnalyticalNetwork net{cluster, profiles};
  SimulationSetup setup;
  setup.comms.push_back(Communicator{"pp", {0, 1}, 2});
  for (int stage = 0; stage < 2; ++stage) {
    ProgramBuilder b(stage == 0 ? "first" : "last");
    const auto compute = b.add_stream("compute");
    const auto pp = b.add_stream("pp");
    const auto slot = b.add_comm_slot("pp");
    const auto label = b.add_label("x");
    if (stage == 0) {
      b.compute(compute, b.add_op(gemm(5e11)), label, 0, {});
      b.compute(compute, b.add_op(gemm(5e11)), label, 0, {});
      const TaskId r = b.recv(pp, slot, CommClass::PP, 100000000, label, 0, {});
      const TaskId deps[] = {r};
      b.compute(compute, b.add_op(gemm(5e11)), label, 0, deps);
    } else {
      const TaskId k = b.compute(compute, b.add_op(gemm(1e12)), label, 0, {});
      const TaskId deps[] = {k};
      b.send(pp, slot, CommClass::PP, 100000000, label, 0, deps);
    }
    setup.programs.push_back(std::move(b).finish());
    setup.ranks.push_back(
        RankProgram{stage == 0 ? "stage 0" : "stage 1", static_cast<std::uint32_t>(stage), stage, {0}, true});
  }
  const SimulationResult a = run_with_and_without_chains(setup, cluster, costs, net);
  // Stage 0's last kernel waits for the 1 ms transfer: from 11 ms to 16 ms.
  CHECK(a.finish[0] == Time::ns(16000000));
}

namespace {
// The chain rules of sim/task_chains.hpp written out plainly (the form
// find_task_chains had before it kept one state byte per task): per task its
// chain and position, the tasks of each chain in order.
TaskChains chains_by_the_rules(const ProgramTemplate& p, std::span<const std::uint8_t> linkable_slot) {
  const auto n = static_cast<std::uint32_t>(p.tasks.size());
  std::vector<std::uint32_t> chain_of(n, kNoChain), index(n, 0), position(n, kNoChain);
  std::vector<std::uint32_t> next_on_stream(n, kNoChain), prev_on_stream(n, kNoChain);
  for (std::uint32_t s = 0; s < p.streams.size(); ++s) {
    const auto on_stream = p.stream(s);
    for (std::size_t i = 1; i < on_stream.size(); ++i) {
      next_on_stream[on_stream[i - 1]] = on_stream[i];
      prev_on_stream[on_stream[i]] = on_stream[i - 1];
    }
  }
  auto chainable = [&](std::uint32_t t) {
    const Task& task = p.tasks[t];
    return task.kind == TaskKind::Compute || (task.kind == TaskKind::Collective && linkable_slot[task.ref]);
  };
  TaskChains out;
  out.offsets.push_back(0);
  std::vector<std::uint32_t> run;
  for (std::uint32_t first = 0; first < n; ++first) {
    if (chain_of[first] != kNoChain || !chainable(first)) continue;
    run.assign(1, first);
    position[first] = 0;
    auto done = [&](std::uint32_t d) {
      return d == kNoChain || position[d] != kNoChain || d < first || chain_of[d] != kNoChain;
    };
    auto ready = [&](std::uint32_t u) {
      if (position[u] != kNoChain || !done(prev_on_stream[u])) return false;
      for (const std::uint32_t d : p.deps_of(u))
        if (!done(d)) return false;
      return true;
    };
    for (;;) {
      std::uint32_t next = kNoChain, count = 0;
      for (const std::uint32_t u : p.succs_of(run.back())) {
        if (ready(u)) {
          next = u;
          ++count;
        }
      }
      const std::uint32_t after = next_on_stream[run.back()];
      if (after != kNoChain && after != next && ready(after)) {
        next = after;
        ++count;
      }
      if (count != 1 || !chainable(next) || chain_of[next] != kNoChain) break;
      position[next] = static_cast<std::uint32_t>(run.size());
      run.push_back(next);
    }
    std::size_t length = run.size();
    for (std::size_t i = 0; i + 1 < run.size(); ++i) {
      bool inside = true;
      for (const std::uint32_t s : p.succs_of(run[i])) inside &= position[s] != kNoChain;
      const std::uint32_t after = next_on_stream[run[i]];
      inside &= after == kNoChain || position[after] != kNoChain;
      if (!inside) {
        length = i + 1;
        break;
      }
    }
    for (const std::uint32_t t : run) position[t] = kNoChain;
    if (length < 2) continue;
    for (std::size_t i = 0; i < length; ++i) {
      chain_of[run[i]] = static_cast<std::uint32_t>(out.size());
      index[run[i]] = static_cast<std::uint32_t>(i);
      out.tasks.push_back(run[i]);
    }
    out.offsets.push_back(static_cast<std::uint32_t>(out.tasks.size()));
  }
  out.at.resize(n);
  for (std::uint32_t t = 0; t < n; ++t) out.at[t] = ChainPosition{chain_of[t], index[t]};
  return out;
}
}  // namespace

TEST_CASE("find_task_chains finds the chains its rules define on random programs") {
  // Random programs: compute tasks and collectives on two slots (one linkable)
  // and sends, on four streams, with random earlier dependencies.
  std::size_t chained = 0;
  for (std::uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    ProgramBuilder b("random");
    const std::uint8_t streams[] = {b.add_stream("compute"), b.add_stream("tp"), b.add_stream("dp"),
                                    b.add_stream("pp")};
    const std::uint32_t slots[] = {b.add_comm_slot("tp"), b.add_comm_slot("pp")};
    const auto label = b.add_label("x");
    const auto op = b.add_op(gemm(1e9));
    const int n = 5 + static_cast<int>(rng() % 120);
    for (int i = 0; i < n; ++i) {
      std::vector<TaskId> deps;
      // Mostly the previous task (long runs), sometimes a few random earlier ones.
      if (i > 0 && rng() % 4 != 0) deps.push_back(static_cast<TaskId>(i - 1));
      for (int k = static_cast<int>(rng() % 3); i > 0 && k > 0; --k) deps.push_back(static_cast<TaskId>(rng() % i));
      std::sort(deps.begin(), deps.end());
      deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
      const std::uint8_t stream = streams[rng() % 5 == 0 ? 1 + rng() % 3 : 0];
      switch (rng() % 6) {
        case 0:
          b.collective(stream, slots[rng() % 2], CollectiveKind::AllReduce, CommClass::TP, 1000, label, 0, deps);
          break;
        case 1:
          b.send(stream, slots[1], CommClass::PP, 1000, label, 0, deps);
          break;
        default:
          b.compute(stream, op, label, 0, deps);
      }
    }
    const ProgramTemplate p = std::move(b).finish();
    const std::uint8_t linkable[] = {1, 0};
    const TaskChains got = find_task_chains(p, linkable);
    const TaskChains want = chains_by_the_rules(p, linkable);
    CAPTURE(seed);
    CHECK(got.offsets == want.offsets);
    CHECK(got.tasks == want.tasks);
    REQUIRE(got.at.size() == want.at.size());
    for (std::size_t t = 0; t < got.at.size(); ++t) {
      CHECK(got.at[t].chain == want.at[t].chain);
      CHECK(got.at[t].index == want.at[t].index);
    }
    chained += got.tasks.size();
  }
  CHECK(chained > 1000);  // the programs do have chains
}

namespace {
// A pipeline of three stages, each with a tensor-parallel group of which it is
// the only simulated member, drawn from `seed`: GPipe order (every forward,
// then every backward), each pass a random run of kernels and TP all-reduces
// with random extra dependencies on earlier tasks of the pass, sometimes a
// kernel on a second compute stream (no chains with contention then),
// activations and gradients sent between neighbours with receives posted
// ahead. Durations are multiples of `grain` FLOPs, so a coarse grain makes
// instants coincide.
SimulationSetup random_pipeline(std::uint32_t seed, double grain) {
  std::mt19937 rng(seed);
  auto draw = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<std::uint32_t>(hi - lo + 1)); };
  constexpr int kStages = 3;
  SimulationSetup setup;
  for (int s = 0; s < kStages; ++s) setup.comms.push_back(Communicator{"tp" + std::to_string(s), {s, s + kStages}, 1});
  for (int s = 0; s + 1 < kStages; ++s) setup.comms.push_back(Communicator{"pp" + std::to_string(s), {s, s + 1}, 2});
  const int microbatches = draw(1, 4);
  const bool second_stream = rng() % 3 == 0;
  for (int stage = 0; stage < kStages; ++stage) {
    ProgramBuilder b("stage " + std::to_string(stage));
    const auto compute = b.add_stream("compute");
    const auto side = b.add_stream("side");
    const auto tp = b.add_stream("tp");
    const auto pp_in = b.add_stream("pp.recv");
    const auto pp_out = b.add_stream("pp.send");
    const auto tp_slot = b.add_comm_slot("tp");
    const auto prev_slot = b.add_comm_slot("pp.prev");
    const auto next_slot = b.add_comm_slot("pp.next");
    const auto label = b.add_label("x");
    auto pass = [&](std::vector<TaskId> deps, int mb) {
      std::vector<TaskId> made;
      TaskId last = 0;
      for (int i = draw(2, 14); i > 0; --i) {
        if (!made.empty() && rng() % 4 == 0) deps.push_back(made[rng() % made.size()]);
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        const int what = draw(0, 9);
        if (what < 3 && !made.empty()) {
          last = b.collective(tp, tp_slot, CollectiveKind::AllReduce, CommClass::TP,
                              static_cast<std::uint64_t>(grain * draw(1, 30) / 1e3), label, mb, deps);
        } else {
          const auto stream = second_stream && what == 9 ? side : compute;
          last = b.compute(stream, b.add_op(gemm(grain * draw(1, 40))), label, mb, deps);
        }
        made.push_back(last);
        deps.clear();
        if (rng() % 5 != 0) deps.push_back(last);  // else after it by stream order only (or not at all)
      }
      return std::vector<TaskId>{last};
    };
    const std::uint64_t act = 100000000, grad = 200000000;
    for (int mb = 0; mb < microbatches; ++mb) {
      std::vector<TaskId> deps;
      if (stage > 0) deps.push_back(b.recv(pp_in, prev_slot, CommClass::PP, act, label, mb, {}));
      deps = pass(deps, mb);
      if (stage + 1 < kStages) b.send(pp_out, next_slot, CommClass::PP, act, label, mb, deps);
    }
    for (int mb = 0; mb < microbatches; ++mb) {
      std::vector<TaskId> deps;
      if (stage + 1 < kStages) deps.push_back(b.recv(pp_in, next_slot, CommClass::PP, grad, label, mb, {}));
      deps = pass(deps, mb);
      if (stage > 0) b.send(pp_out, prev_slot, CommClass::PP, grad, label, mb, deps);
    }
    setup.programs.push_back(std::move(b).finish());
    const auto tp_comm = static_cast<std::uint32_t>(stage);
    const auto prev = static_cast<std::uint32_t>(kStages + std::max(stage - 1, 0));
    const auto next = static_cast<std::uint32_t>(kStages + std::min(stage, kStages - 2));
    setup.ranks.push_back(RankProgram{
        "stage " + std::to_string(stage), static_cast<std::uint32_t>(stage), stage, {tp_comm, prev, next}, true});
  }
  return setup;
}
}  // namespace

TEST_CASE("chains give the task-by-task result on random pipelines") {
  // Random dependencies inside passes make chains start, fail to start (a
  // later task waits for a task outside the chain, which chain_can_start
  // remembers for the next try) and get cut; contention changes in the middle
  // of chains, equal instants on several ranks and a second compute stream are
  // all drawn. Every figure and interval must agree with the run without
  // chains to the nanosecond.
  for (const double share : {1.0, 0.7, 0.5}) {
    const Cluster cluster{toy_cluster(1, 8)};
    const std::vector<CalibrationProfile> profiles{ideal_profile_sharing(share)};
    const ComputeCostModel costs{cluster, profiles};
    const AnalyticalNetwork net{cluster, profiles};
    for (const double grain : {1.37e10, 1e11}) {
      for (std::uint32_t seed = 1; seed <= 40; ++seed) {
        CAPTURE(share);
        CAPTURE(grain);
        CAPTURE(seed);
        run_with_and_without_chains(random_pipeline(seed, grain), cluster, costs, net, true);
      }
    }
  }
}

TEST_CASE("chains under slowdown windows give the task-by-task result") {
  // Inside a window a chain's kernels are each rounded to the nanosecond after
  // the window's factor; windows open and close in the middle of chains, which
  // re-times the running kernel and projects the chain again.
  ClusterSpec spec = toy_cluster(1, 8);
  spec.groups[0].node.gpu.slowdown_windows = {SlowdownWindow{0.0123, 0.0456, 1.37}, SlowdownWindow{0.05, 0.09, 0.83}};
  const Cluster cluster{spec};
  const std::vector<CalibrationProfile> profiles{ideal_profile_sharing(0.7)};
  const ComputeCostModel costs{cluster, profiles};
  const AnalyticalNetwork net{cluster, profiles};
  for (std::uint32_t seed = 1; seed <= 30; ++seed) {
    CAPTURE(seed);
    run_with_and_without_chains(random_pipeline(seed, 1.37e10), cluster, costs, net, true);
    run_with_and_without_chains(two_stage_pipeline(seed, 1.37e10), cluster, costs, net);
  }
}

namespace {
// A pipeline of three stages whose passes repeat: per stage a forward and a
// backward pass template drawn from `seed` (kernels on one or two compute
// streams, TP all-reduces on a slot of which the rank is the only simulated
// member, random dependencies inside the pass, sometimes a task that also
// waits for the pass's entry), stamped per layer and micro-batch and marked
// (ProgramTemplate::passes); receives posted ahead, sends after each unit, and
// sometimes a gradient all-reduce after a backward pass that waits for a task
// in its middle. Durations are multiples of `grain` FLOPs.
SimulationSetup repeated_pass_pipeline(std::uint32_t seed, double grain) {
  std::mt19937 rng(seed);
  auto draw = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<std::uint32_t>(hi - lo + 1)); };
  constexpr int kStages = 3;
  SimulationSetup setup;
  for (int s = 0; s < kStages; ++s) setup.comms.push_back(Communicator{"tp" + std::to_string(s), {s, s + kStages}, 1});
  for (int s = 0; s + 1 < kStages; ++s) setup.comms.push_back(Communicator{"pp" + std::to_string(s), {s, s + 1}, 2});
  for (int s = 0; s < kStages; ++s)
    setup.comms.push_back(Communicator{"dp" + std::to_string(s), {s, s + 2 * kStages}, 1});
  const int microbatches = draw(1, 5);
  const int layers = draw(1, 4);
  const bool second_stream = rng() % 3 == 0;
  const bool one_f_one_b = rng() % 2 == 0;
  struct Item {
    bool collective = false, side = false, entry = false;
    double flops = 0;
    std::vector<std::uint32_t> deps;  // positions of earlier items
  };
  for (int stage = 0; stage < kStages; ++stage) {
    ProgramBuilder b("stage " + std::to_string(stage));
    const auto compute = b.add_stream("compute");
    const auto side = b.add_stream("side");
    const auto tp = b.add_stream("tp");
    const auto pp_in = b.add_stream("pp.recv");
    const auto pp_out = b.add_stream("pp.send");
    const auto dp = b.add_stream("dp");
    const auto tp_slot = b.add_comm_slot("tp");
    const auto prev_slot = b.add_comm_slot("pp.prev");
    const auto next_slot = b.add_comm_slot("pp.next");
    const auto dp_slot = b.add_comm_slot("dp");
    const auto label = b.add_label("x");
    std::vector<Item> templates[2];
    std::vector<std::uint32_t> ops[2];
    for (auto& items : templates) {
      const int n = draw(2, 12);
      for (int i = 0; i < n; ++i) {
        Item it;
        it.collective = i > 0 && draw(0, 9) < 3;
        it.side = !it.collective && second_stream && draw(0, 9) == 9;
        it.flops = grain * draw(1, 40);
        if (i > 0) {
          if (rng() % 5 != 0) it.deps.push_back(static_cast<std::uint32_t>(i - 1));
          if (rng() % 4 == 0) it.deps.push_back(static_cast<std::uint32_t>(rng() % i));
          it.entry = it.deps.empty() || rng() % 10 == 0;
          std::sort(it.deps.begin(), it.deps.end());
          it.deps.erase(std::unique(it.deps.begin(), it.deps.end()), it.deps.end());
        }
        items.push_back(it);
      }
    }
    for (int k = 0; k < 2; ++k) {
      for (const Item& it : templates[k]) ops[k].push_back(it.collective ? 0 : b.add_op(gemm(it.flops)));
    }
    // A side kernel released by a pass's entry but emitted after the pass: it becomes ready at
    // the instant the pass may be applied, after the pass's first task in the successor order.
    const bool sibling = rng() % 3 == 0;
    const auto sibling_op = b.add_op(gemm(grain * draw(1, 10)));
    // One pass of template k after `entry`; returns its last task.
    auto pass = [&](int k, std::vector<TaskId> entry, int mb) {
      const auto base = static_cast<TaskId>(b.size());
      std::sort(entry.begin(), entry.end());
      entry.erase(std::unique(entry.begin(), entry.end()), entry.end());
      for (std::size_t i = 0; i < templates[k].size(); ++i) {
        const Item& it = templates[k][i];
        std::vector<TaskId> deps;
        if (i == 0 || it.entry) deps = entry;
        for (const std::uint32_t d : it.deps) deps.push_back(base + d);
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        if (it.collective) {
          b.collective(tp, tp_slot, CollectiveKind::AllReduce, CommClass::TP,
                       static_cast<std::uint64_t>(it.flops / 1e3), label, mb, deps);
        } else {
          b.compute(it.side ? side : compute, ops[k][i], label, mb, deps);
        }
      }
      const auto n = static_cast<std::uint32_t>(templates[k].size());
      b.mark_pass(base, n, static_cast<std::uint32_t>(k));
      return base + n - 1;
    };
    const std::uint64_t act = 100000000, grad = 200000000;
    auto forward = [&](int mb) {
      std::vector<TaskId> entry;
      if (stage > 0) entry.push_back(b.recv(pp_in, prev_slot, CommClass::PP, act, label, mb, {}));
      TaskId last = 0;
      for (int l = 0; l < layers; ++l) {
        const std::vector<TaskId> pass_entry = entry;
        last = pass(0, entry, mb);
        if (sibling && !pass_entry.empty() && rng() % 2 == 0) {
          if (rng() % 2 == 0) {
            b.compute(side, sibling_op, label, mb, pass_entry);
          } else {
            b.collective(dp, dp_slot, CollectiveKind::AllReduce, CommClass::DP, static_cast<std::uint64_t>(grain / 1e2),
                         label, mb, pass_entry);
          }
        }
        entry.assign(1, last);
      }
      const TaskId d[] = {last};
      if (stage + 1 < kStages) b.send(pp_out, next_slot, CommClass::PP, act, label, mb, d);
    };
    auto backward = [&](int mb) {
      std::vector<TaskId> entry;
      if (stage + 1 < kStages) entry.push_back(b.recv(pp_in, next_slot, CommClass::PP, grad, label, mb, {}));
      TaskId last = 0;
      for (int l = 0; l < layers; ++l) {
        const auto base = static_cast<TaskId>(b.size());
        last = pass(1, entry, mb);
        entry.assign(1, last);
        if (mb + 1 == microbatches && rng() % 2 == 0) {
          const TaskId d[] = {base + static_cast<TaskId>(rng() % templates[1].size())};
          b.collective(dp, dp_slot, CollectiveKind::AllReduce, CommClass::DP, static_cast<std::uint64_t>(grain / 1e2),
                       label, mb, d);
        }
      }
      const TaskId d[] = {last};
      if (stage > 0) b.send(pp_out, prev_slot, CommClass::PP, grad, label, mb, d);
    };
    if (one_f_one_b) {
      // Warm-up forwards, then one forward and one backward at a time.
      const int warmup = std::min(microbatches, kStages - stage);
      for (int mb = 0; mb < warmup; ++mb) forward(mb);
      for (int mb = 0; mb < microbatches; ++mb) {
        backward(mb);
        if (mb + warmup < microbatches) forward(mb + warmup);
      }
    } else {
      for (int mb = 0; mb < microbatches; ++mb) forward(mb);
      for (int mb = 0; mb < microbatches; ++mb) backward(mb);
    }
    setup.programs.push_back(std::move(b).finish());
    const auto tp_comm = static_cast<std::uint32_t>(stage);
    const auto prev = static_cast<std::uint32_t>(kStages + std::max(stage - 1, 0));
    const auto next = static_cast<std::uint32_t>(kStages + std::min(stage, kStages - 2));
    const auto dp_comm = static_cast<std::uint32_t>(2 * kStages - 1 + stage);
    setup.ranks.push_back(RankProgram{"stage " + std::to_string(stage),
                                      static_cast<std::uint32_t>(stage),
                                      stage,
                                      {tp_comm, prev, next, dp_comm},
                                      true});
  }
  return setup;
}

// Each rank's intervals of `x` and of `y`, both sorted by `order`, agree one for one.
template <class Order>
void check_same_intervals(const SimulationResult& x, const SimulationResult& y, Order order) {
  REQUIRE(x.timelines.size() == y.timelines.size());
  for (std::size_t r = 0; r < x.timelines.size(); ++r) {
    std::vector<Interval> u = x.timelines[r].intervals;
    std::vector<Interval> v = y.timelines[r].intervals;
    std::sort(u.begin(), u.end(), order);
    std::sort(v.begin(), v.end(), order);
    REQUIRE(u.size() == v.size());
    for (std::size_t i = 0; i < u.size(); ++i) {
      CAPTURE(r);
      CAPTURE(i);
      CHECK((u[i].start == v[i].start && u[i].end == v[i].end && u[i].task == v[i].task && u[i].stream == v[i].stream &&
             u[i].category == v[i].category));
    }
  }
}

// Each rank's breakdown and first kernel's start in `x` and in `y`, to the bit
// (what a report reads of timelines whose intervals are merged, blocks included).
void check_same_breakdowns(const SimulationResult& x, const SimulationResult& y) {
  REQUIRE(x.timelines.size() == y.timelines.size());
  auto first_compute = [](const RankTimeline& tl) {
    Time first = Time::max();
    for (const Interval& iv : tl.intervals) {
      if (iv.category == kComputeCategory) first = std::min(first, iv.start);
      if (iv.category == kBlockCategory) first = std::min(first, tl.blocks.at(iv.task).first_compute);
    }
    return first;
  };
  for (std::size_t r = 0; r < x.timelines.size(); ++r) {
    CAPTURE(r);
    const TimeBreakdown u = breakdown(x.timelines[r], x.makespan), v = breakdown(y.timelines[r], y.makespan);
    CHECK(u.compute_s == v.compute_s);
    CHECK(u.exposed_comm_s == v.exposed_comm_s);
    CHECK(u.idle_s == v.idle_s);
    CHECK(u.bubble_s == v.bubble_s);
    CHECK(first_compute(x.timelines[r]) == first_compute(y.timelines[r]));
  }
}

// Runs `setup` with the memo, with chains but without the memo, and task by
// task: every figure and interval must agree to the nanosecond (intervals
// compared sorted, as chains may list those ending at one instant in another
// order). Returns the memo's statistics.
// `blocks`: adds the blocks the merged run with the memo kept.
Executor::MemoStats run_with_and_without_memo(const SimulationSetup& setup, const Cluster& cluster,
                                              const ComputeCostModel& costs, const AnalyticalNetwork& net,
                                              std::uint64_t* blocks = nullptr) {
  Executor with(setup, cluster, costs, net);
  Executor chains_only(setup, cluster, costs, net);
  chains_only.memo_passes(false);
  Executor plain(setup, cluster, costs, net);
  plain.collapse_chains(false);
  const SimulationResult a = with.run();
  const SimulationResult c = chains_only.run();
  const SimulationResult b = plain.run();
  CHECK(c.makespan == b.makespan);  // chains alone, as their own tests check
  REQUIRE(a.completed);
  REQUIRE(b.completed);
  CHECK(a.makespan == b.makespan);
  CHECK(a.events == b.events);
  CHECK(a.finish == b.finish);
  check_same_intervals(a, b, [](const Interval& u, const Interval& v) {
    return std::tuple(u.end, u.start, u.task, u.stream, u.category) <
           std::tuple(v.end, v.start, v.task, v.stream, v.category);
  });
  // With touching intervals merged and runs of applied passes kept as blocks
  // (as simulate() runs): the same breakdowns to the bit as task by task,
  // merged or not, where blocks hold what the passes' intervals would.
  Executor merged_with(setup, cluster, costs, net);
  merged_with.merge_intervals(true);
  Executor merged_plain(setup, cluster, costs, net);
  merged_plain.collapse_chains(false);
  merged_plain.merge_intervals(true);
  const SimulationResult mw = merged_with.run();
  const SimulationResult mp = merged_plain.run();
  CHECK(mw.makespan == b.makespan);
  check_same_breakdowns(mw, mp);
  check_same_breakdowns(mw, b);
  CHECK(mp.timelines.size() == b.timelines.size());
  for (std::size_t r = 0; r < mw.timelines.size(); ++r) {
    CHECK(mw.timelines[r].intervals.size() <= a.timelines[r].intervals.size());
    CHECK(mp.timelines[r].blocks.empty());  // no memo, no blocks
    if (blocks != nullptr && !merged_with.memo_stats().repeated) *blocks += mw.timelines[r].blocks.size();
  }
  // Runs of passes against one pass at a time: the same intervals in the
  // same order (where neither run was repeated task by task); merged, the
  // same breakdowns (a run is one block, its passes alone are several).
  for (const bool merge : {false, true}) {
    Executor single(setup, cluster, costs, net);
    single.run_passes(false);
    single.merge_intervals(merge);
    const SimulationResult s = single.run();
    const SimulationResult& r = merge ? mw : a;
    const bool repeated = single.memo_stats().repeated || (merge ? merged_with : with).memo_stats().repeated;
    CAPTURE(merge);
    CHECK(s.makespan == r.makespan);
    CHECK(s.events == r.events);
    CHECK(s.finish == r.finish);
    REQUIRE(s.timelines.size() == r.timelines.size());
    if (merge) {
      check_same_breakdowns(s, r);
      continue;
    }
    for (std::size_t k = 0; k < s.timelines.size() && !repeated; ++k) {
      const std::vector<Interval>& u = s.timelines[k].intervals;
      const std::vector<Interval>& v = r.timelines[k].intervals;
      REQUIRE(u.size() == v.size());
      for (std::size_t i = 0; i < u.size(); ++i) {
        CAPTURE(k);
        CAPTURE(i);
        CHECK((u[i].start == v[i].start && u[i].end == v[i].end && u[i].task == v[i].task &&
               u[i].stream == v[i].stream && u[i].category == v[i].category));
      }
    }
  }
  return with.memo_stats();
}
}  // namespace

TEST_CASE("the memo of repeated passes gives the task-by-task result on random pipelines") {
  // Passes applied from a memo, shifted in time, must give every figure and
  // interval of the run that simulates each task: contention from the
  // pipeline's transfers (shares below 1), coinciding instants (a coarse
  // grain), a second compute stream, tasks that wait for a pass's entry
  // besides its first, all-reduces that wait for a task inside a pass, and
  // side kernels outside a pass released by its entry at its start.
  std::uint64_t applied = 0, runs = 0, recorded = 0, refused = 0, repeated = 0, blocks = 0;
  for (const double share : {1.0, 0.7, 0.5}) {
    const Cluster cluster{toy_cluster(2, 8)};
    const std::vector<CalibrationProfile> profiles{ideal_profile_sharing(share)};
    const ComputeCostModel costs{cluster, profiles};
    const AnalyticalNetwork net{cluster, profiles};
    for (const double grain : {1.37e10, 1e11}) {
      for (std::uint32_t seed = 1; seed <= 100; ++seed) {
        CAPTURE(share);
        CAPTURE(grain);
        CAPTURE(seed);
        const Executor::MemoStats st =
            run_with_and_without_memo(repeated_pass_pipeline(seed, grain), cluster, costs, net, &blocks);
        applied += st.applied;
        runs += st.runs;
        recorded += st.recorded;
        refused += st.refused;
        repeated += st.repeated ? 1 : 0;
      }
    }
  }
  MESSAGE("memo: " << applied << " passes applied (" << runs << " runs of several), " << recorded << " recorded, "
                   << refused << " refused, " << repeated << " runs repeated, " << blocks << " blocks kept");
  // The memo does apply, layers in runs too, and is refused where a peer's
  // transfer or another stream could touch a pass.
  CHECK(applied > 1000);
  CHECK(runs > 100);
  CHECK(recorded > 100);
  CHECK(refused > 0);
  CHECK(blocks > 100);  // merged, applied runs are kept as blocks
}

namespace {
// One stage on a toy node: a program of one compute stream with three kernels
// to stamp passes from, and the models to run it (kernels keep
// `compute_share` of the GPU beside a transfer; 70% unless told).
struct OneStageToy {
  explicit OneStageToy(double compute_share = 0.7) : profiles{ideal_profile_sharing(compute_share)} {}
  Cluster cluster{toy_cluster(1, 8)};
  std::vector<CalibrationProfile> profiles;
  ComputeCostModel costs{cluster, profiles};
  AnalyticalNetwork net{cluster, profiles};
  ProgramBuilder b{"stage 0"};
  std::uint8_t compute = b.add_stream("compute");
  std::uint32_t label = b.add_label("x");
  std::uint32_t ops[3] = {b.add_op(gemm(3e12)), b.add_op(gemm(5e12)), b.add_op(gemm(2e12))};
  std::vector<Communicator> comms;
  std::vector<std::uint32_t> comm_of_slot;
  // A slot on a communicator with a GPU of another node that is not
  // simulated (a data-parallel peer: no rendezvous).
  std::uint32_t add_solo_slot(const std::string& name) {
    comm_of_slot.push_back(static_cast<std::uint32_t>(comms.size()));
    comms.push_back(Communicator{name, {0, 8}, 1});
    return b.add_comm_slot(name);
  }
  // A pass of the three kernels in a row (key 0), its first waiting for
  // `after` (the layer below) and `also` where given; returns its last task.
  TaskId stacked_pass(std::optional<TaskId> after, std::optional<TaskId> also = std::nullopt) {
    const auto base = static_cast<TaskId>(b.size());
    TaskId last = 0;
    for (TaskId i = 0; i < 3; ++i) {
      std::vector<TaskId> d;
      if (i > 0) d.push_back(base + i - 1);
      if (i == 0 && after) d.push_back(*after);
      if (i == 0 && also) d.push_back(*also);
      std::sort(d.begin(), d.end());
      last = b.compute(compute, ops[i], label, 0, d);
    }
    b.mark_pass(base, 3, 0);
    return last;
  }
  // The finished program as the only rank's, run with and without the memo.
  Executor::MemoStats run() {
    SimulationSetup setup;
    setup.comms = comms;
    setup.programs.push_back(std::move(b).finish());
    setup.ranks.push_back(RankProgram{"stage 0", 0, 0, comm_of_slot, true});
    return run_with_and_without_memo(setup, cluster, costs, net);
  }
};
}  // namespace

TEST_CASE("a pass whose next task waits only for its stream is applied from the memo") {
  // One rank, passes of one key back to back on one stream, each first task
  // free of dependencies (the next micro-batch's forward already received):
  // the task after a pass cannot start before the pass's last task ends, on
  // the same stream, so every pass after the recorded one is applied.
  OneStageToy toy;
  constexpr int kPasses = 4;
  for (int mb = 0; mb < kPasses; ++mb) {
    const auto base = static_cast<TaskId>(toy.b.size());
    toy.b.compute(toy.compute, toy.ops[0], toy.label, mb, {});
    for (TaskId i = 1; i < 3; ++i) {
      const TaskId d[] = {base + i - 1};
      toy.b.compute(toy.compute, toy.ops[i], toy.label, mb, d);
    }
    toy.b.mark_pass(base, 3, 0);
  }
  const Executor::MemoStats st = toy.run();
  CHECK(st.recorded == 1);
  CHECK(st.applied == kPasses - 1);
  CHECK(st.refused == 0);
}

TEST_CASE("alike passes of two ranks share one memo, passes with other kernel times do not") {
  // Two ranks on two GPUs, each with its own program: a kernel outside the
  // passes, then four stacked passes of three kernels. The second rank's
  // program adds its ops in another order (other op numbers, the same
  // kernels) and starts later, so its passes find the first rank's memo and
  // are applied as one run. With one kernel of its passes 25% longer, its
  // passes are another class and get a memo of their own.
  for (const bool other_times : {false, true}) {
    CAPTURE(other_times);
    const Cluster cluster{toy_cluster(1, 8)};
    const std::vector<CalibrationProfile> profiles{ideal_profile_sharing(0.7)};
    const ComputeCostModel costs{cluster, profiles};
    const AnalyticalNetwork net{cluster, profiles};
    SimulationSetup setup;
    for (int rank = 0; rank < 2; ++rank) {
      ProgramBuilder b("stage " + std::to_string(rank));
      const std::uint8_t compute = b.add_stream("compute");
      const std::uint32_t label = b.add_label("x");
      const double last_flops = rank == 1 && other_times ? 2.5e12 : 2e12;
      std::uint32_t ops[3];
      if (rank == 0) {
        ops[0] = b.add_op(gemm(3e12)), ops[1] = b.add_op(gemm(5e12)), ops[2] = b.add_op(gemm(last_flops));
      } else {
        ops[2] = b.add_op(gemm(last_flops)), ops[1] = b.add_op(gemm(5e12)), ops[0] = b.add_op(gemm(3e12));
      }
      const std::uint32_t lead = b.add_op(gemm(rank == 0 ? 1e11 : 4e13));
      TaskId last = b.compute(compute, lead, label, 0, {});
      for (int layer = 0; layer < 4; ++layer) {
        const auto base = static_cast<TaskId>(b.size());
        for (TaskId i = 0; i < 3; ++i) {
          const TaskId d[] = {i == 0 ? last : base + i - 1};
          last = b.compute(compute, ops[i], label, 0, d);
        }
        b.mark_pass(base, 3, 0);
      }
      setup.programs.push_back(std::move(b).finish());
      setup.ranks.push_back(
          RankProgram{"stage " + std::to_string(rank), static_cast<std::uint32_t>(rank), rank, {}, true});
    }
    const Executor::MemoStats st = run_with_and_without_memo(setup, cluster, costs, net);
    CHECK(st.recorded == (other_times ? 2 : 1));
    CHECK(st.applied == (other_times ? 6 : 7));
    CHECK(st.refused == 0);
  }
}

TEST_CASE("passes of one key that each start as the one before ends are applied as one run") {
  // A stack of layers: each pass waits for the last task of the one before.
  // Every pass after the recorded one would be applied the instant the one
  // before ends, so they are applied at once, with the task-by-task result.
  // A kernel outside the passes between the third and the fourth (a loss, a
  // stage boundary) ends the run there: the fourth starts after it.
  for (const bool between : {false, true}) {
    CAPTURE(between);
    OneStageToy toy;
    constexpr int kPasses = 6;
    std::optional<TaskId> last;
    for (int layer = 0; layer < kPasses; ++layer) {
      last = toy.stacked_pass(last);
      if (between && layer == 2) {
        const TaskId d[] = {*last};
        last = toy.b.compute(toy.compute, toy.ops[0], toy.label, 0, d);
      }
    }
    const Executor::MemoStats st = toy.run();
    CHECK(st.recorded == 1);
    CHECK(st.applied == kPasses - 1);
    CHECK(st.refused == 0);
    // One run of passes 1-5, or runs of 1-2 and 3-5.
    CHECK(st.runs == (between ? 2 : 1));
  }
}

TEST_CASE("a run of passes stops before a pass that waits for a transfer outside it") {
  // The fourth of six stacked passes also waits for a long all-gather on
  // another stream (parameters gathered before a layer): no run goes through
  // it, so it starts after the gather, as task by task; a run through the
  // fourth would start it before its input.
  OneStageToy toy(1.0);
  constexpr int kPasses = 6;
  const std::uint8_t dp = toy.b.add_stream("dp");
  const std::uint32_t slot = toy.add_solo_slot("dp");
  const TaskId gather =
      toy.b.collective(dp, slot, CollectiveKind::AllGather, CommClass::DP, 40'000'000'000ULL, toy.label, 0, {});
  std::optional<TaskId> last;
  for (int layer = 0; layer < kPasses; ++layer)
    last = toy.stacked_pass(last, layer == 3 ? std::optional<TaskId>(gather) : std::nullopt);
  const Executor::MemoStats st = toy.run();
  // The first pass runs beside the gather's start and is not kept; the
  // second is recorded; the third is applied alone (the fourth waits for the
  // gather); the fourth to sixth in one run after it.
  CHECK(st.recorded == 1);
  CHECK(st.applied == 4);
  CHECK(st.runs == 1);
}

TEST_CASE("a pass released with the next receive is applied from the memo, the receive posted beside it") {
  // Two stages on two nodes. The first runs eight kernels per micro-batch
  // and sends its output; the second posts its receives in order on their
  // own stream and runs two stacked passes per micro-batch, the first
  // waiting for the receive. As a receive ends, the next one (waiting for
  // nothing, so holding no SMs when posted) is released at the same instant
  // as the pass, and posted after it: its match comes only after the
  // sender's next eight kernels, past the two passes, so from the second
  // micro-batch on both passes are applied as one run and the receive posted
  // beside them. Refused instead, the first pass of each would run task by task.
  const Cluster cluster{toy_cluster(2, 8)};
  const std::vector<CalibrationProfile> profiles{ideal_profile_sharing(0.7)};
  const ComputeCostModel costs{cluster, profiles};
  const AnalyticalNetwork net{cluster, profiles};
  constexpr int kMicrobatches = 4;
  constexpr std::uint64_t kBytes = 10'000'000;
  SimulationSetup setup;
  setup.comms.push_back(Communicator{"pp", {0, 8}, 2});
  {
    ProgramBuilder b("stage 0");
    const std::uint8_t compute = b.add_stream("compute");
    const std::uint8_t out = b.add_stream("pp.send");
    const std::uint32_t slot = b.add_comm_slot("pp.next");
    const std::uint32_t label = b.add_label("x");
    const std::uint32_t op = b.add_op(gemm(5e12));
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      TaskId last = 0;
      for (int k = 0; k < 8; ++k) last = b.compute(compute, op, label, mb, {});
      const TaskId d[] = {last};
      b.send(out, slot, CommClass::PP, kBytes, label, mb, d);
    }
    setup.programs.push_back(std::move(b).finish());
  }
  {
    ProgramBuilder b("stage 1");
    const std::uint8_t compute = b.add_stream("compute");
    const std::uint8_t in = b.add_stream("pp.recv");
    const std::uint32_t slot = b.add_comm_slot("pp.prev");
    const std::uint32_t label = b.add_label("x");
    const std::uint32_t ops[3] = {b.add_op(gemm(3e12)), b.add_op(gemm(5e12)), b.add_op(gemm(2e12))};
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      TaskId last = b.recv(in, slot, CommClass::PP, kBytes, label, mb, {});
      for (int pass = 0; pass < 2; ++pass) {
        const auto base = static_cast<TaskId>(b.size());
        for (TaskId i = 0; i < 3; ++i) {
          const TaskId d[] = {i == 0 ? last : base + i - 1};
          last = b.compute(compute, ops[i], label, mb, d);
        }
        b.mark_pass(base, 3, 0);
      }
    }
    setup.programs.push_back(std::move(b).finish());
  }
  setup.ranks.push_back(RankProgram{"stage 0", 0, 0, {0}, true});
  setup.ranks.push_back(RankProgram{"stage 1", 1, 8, {0}, true});
  const Executor::MemoStats st = run_with_and_without_memo(setup, cluster, costs, net);
  // The first micro-batch's first pass runs beside the next receive's post
  // and is not kept; its second is recorded.
  CHECK(st.recorded == 1);
  CHECK(st.applied == 2 * (kMicrobatches - 1));
  CHECK(st.runs == kMicrobatches - 1);
  CHECK(st.refused == 0);
}

TEST_CASE("a run of passes needs each pass's first task to wait for the last task of the one before") {
  // Passes of two kernels on two streams: a short one, then a long one on a
  // second stream that ends the pass. The first pass runs alone (the second
  // waits for its end) and is recorded; every later pass's first kernel waits
  // for the short one before it only, so it starts while the long one runs:
  // those passes overlap, none is applied, and no run forms.
  OneStageToy toy(1.0);
  const std::uint8_t side = toy.b.add_stream("side");
  constexpr int kPasses = 5;
  TaskId first_prev = 0, last_prev = 0;
  for (int layer = 0; layer < kPasses; ++layer) {
    const auto base = static_cast<TaskId>(toy.b.size());
    std::vector<TaskId> d;
    if (layer > 0) d.push_back(layer == 1 ? last_prev : first_prev);
    toy.b.compute(toy.compute, toy.ops[2], toy.label, 0, d);
    const TaskId after[] = {base};
    last_prev = toy.b.compute(side, toy.ops[1], toy.label, 0, after);
    toy.b.mark_pass(base, 2, 0);
    first_prev = base;
  }
  const Executor::MemoStats st = toy.run();
  CHECK(st.recorded == 1);
  CHECK(st.applied == 0);
  CHECK(st.runs == 0);
}

TEST_CASE("a pass's place on its streams is read from its memo only where streams run in task order") {
  // Where every stream runs its tasks in task order, a pass whose first and
  // last task on a stream lie count - 1 places apart holds the places between
  // (the executor's check at a pass start). Passes queued out of task order
  // (units run side by side, ProgramBuilder::reorder) can break that: here
  // the later passes run a0, x, a2, a1 on their stream, x outside the pass,
  // so a0 and a2 lie two places apart with x between; such a program is
  // checked task by task, which refuses the memo.
  for (const bool reorder : {false, true}) {
    CAPTURE(reorder);
    OneStageToy toy;
    constexpr int kPasses = 4;
    for (int mb = 0; mb < kPasses; ++mb) {
      const auto base = static_cast<TaskId>(toy.b.size());
      toy.b.compute(toy.compute, toy.ops[0], toy.label, mb, {});
      const TaskId d[] = {base};
      toy.b.compute(toy.compute, toy.ops[1], toy.label, mb, d);
      toy.b.compute(toy.compute, toy.ops[2], toy.label, mb, d);
      toy.b.mark_pass(base, 3, 0);
      if (mb == 0) continue;
      const TaskId x = toy.b.compute(toy.compute, toy.ops[0], toy.label, mb, {});
      if (reorder) {
        const TaskId order[] = {base, x, base + 2, base + 1};
        toy.b.reorder(base, order);
      }
    }
    // The flag, on the program of a copy of the builder: laid out by finish()
    // with each task's place on its stream, which the chains take over.
    const std::vector<std::uint8_t> linkable;
    const ProgramTemplate program = ProgramBuilder(toy.b).finish();
    CHECK(program.streams_in_task_order == !reorder);
    REQUIRE(program.stream_index.size() == program.tasks.size());
    for (std::uint32_t g = 0; g < program.stream_tasks.size(); ++g)
      CHECK(program.stream_index[program.stream_tasks[g]] == g);
    const TaskChains chains = find_task_chains(program, linkable, true);
    CHECK(chains.streams_in_task_order == !reorder);
    CHECK(chains.stream_index == program.stream_index);
    // A program laid out by hand (no index): the chains find the same.
    ProgramTemplate bare = program;
    bare.stream_index.clear();
    bare.streams_in_task_order = true;
    const TaskChains found = find_task_chains(bare, linkable, true);
    CHECK(found.streams_in_task_order == !reorder);
    CHECK(found.stream_index == program.stream_index);
    const Executor::MemoStats st = toy.run();
    CHECK(st.recorded == 1);
    CHECK(st.applied == (reorder ? 0 : kPasses - 1));
  }
}

TEST_CASE("visit_by_pass_key visits the tasks outside passes and one or every pass of each key, in task order") {
  // Tasks 0-1 outside, passes [2, 4) key 0, [4, 6) key 1, task 6 outside,
  // [7, 9) key 0, [9, 11) key 1, task 11 outside.
  ProgramTemplate p;
  p.tasks.resize(12);
  p.passes = {{2, 2, 0}, {4, 2, 1}, {7, 2, 0}, {9, 2, 1}};
  auto ranges = [&](auto which) {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> seen;
    visit_by_pass_key(p, which, [&](std::uint32_t from, std::uint32_t to) {
      if (from < to) seen.emplace_back(from, to);
    });
    return seen;
  };
  using Ranges = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  CHECK(ranges([](std::uint32_t, std::uint32_t) { return KeyVisit::Skip; }) == Ranges{{0, 2}, {6, 7}, {11, 12}});
  CHECK(ranges([](std::uint32_t, std::uint32_t) { return KeyVisit::First; }) ==
        Ranges{{0, 2}, {2, 4}, {4, 6}, {6, 7}, {11, 12}});
  CHECK(ranges([](std::uint32_t, std::uint32_t) { return KeyVisit::Every; }) ==
        Ranges{{0, 2}, {2, 4}, {4, 6}, {6, 7}, {7, 9}, {9, 11}, {11, 12}});
  // The decision is asked of each key's first pass only.
  CHECK(ranges([](std::uint32_t first, std::uint32_t) { return first == 4 ? KeyVisit::Every : KeyVisit::Skip; }) ==
        Ranges{{0, 2}, {4, 6}, {6, 7}, {9, 11}, {11, 12}});
}

TEST_CASE("chains cut at marked passes: none enters or leaves one, and a pass's are found on demand in any order") {
  // find_task_chains with cut_at_passes finds the chains outside the marked
  // passes only; find_pass_chains adds a pass's, which stay inside it and do
  // not depend on which passes were found before (the executor finds them
  // when a pass's first task starts, and never for a pass applied from the
  // memo), nor on whether a pass of the same key and shape lent its chains.
  std::size_t pass_chains = 0, outside_chains = 0, reused = 0;
  for (std::uint32_t seed = 1; seed <= 100; ++seed) {
    CAPTURE(seed);
    const SimulationSetup setup = repeated_pass_pipeline(seed, 1.37e10);
    for (const ProgramTemplate& p : setup.programs) {
      REQUIRE(!p.passes.empty());
      const std::vector<std::uint8_t> linkable(p.comm_slots.size(), 1);
      TaskChains walked = find_task_chains(p, linkable, true);
      for (std::uint32_t t = 0; t < p.tasks.size(); ++t) {
        if (walked.pass_of[t] != kNoChain) CHECK(walked.at[t].chain == kNoChain);  // not found yet
      }
      outside_chains += walked.size();
      TaskChains forward = walked, backward = walked;
      for (std::uint32_t i = 0; i < p.passes.size(); ++i) {
        find_pass_chains(p, linkable, i, walked, false);
        find_pass_chains(p, linkable, i, forward);
      }
      for (std::uint32_t i = static_cast<std::uint32_t>(p.passes.size()); i-- > 0;) {
        find_pass_chains(p, linkable, i, backward);
        find_pass_chains(p, linkable, i, backward);  // once only
      }
      CHECK(walked.reused_passes == 0);
      reused += forward.reused_passes + backward.reused_passes;
      REQUIRE(forward.size() == walked.size());
      REQUIRE(backward.size() == walked.size());
      pass_chains += walked.size();
      // Every chain lies inside one pass or outside all of them, and is the
      // same whichever order found it and whether it was walked or taken.
      for (std::uint32_t c = 0; c < walked.size(); ++c) {
        const auto tasks = walked.chain(c);
        for (const std::uint32_t t : tasks) CHECK(walked.pass_of[t] == walked.pass_of[tasks[0]]);
        const std::vector<std::uint32_t> want(tasks.begin(), tasks.end());
        for (const TaskChains* other : {&forward, &backward}) {
          const std::uint32_t id = other->at[tasks[0]].chain;
          REQUIRE(id != kNoChain);
          const auto got = other->chain(id);
          CHECK(std::vector<std::uint32_t>(got.begin(), got.end()) == want);
          for (std::uint32_t i = 0; i < got.size(); ++i) CHECK(other->at[got[i]].index == i);
        }
      }
      // No chain runs into a pass: its first task, if chained, starts its chain.
      for (const PassMark& m : p.passes) CHECK(walked.at[m.first].index == 0);
    }
  }
  pass_chains -= outside_chains;
  CHECK(pass_chains > 100);
  CHECK(outside_chains > 0);
  CHECK(reused > 100);  // passes of one key and shape do lend their chains
}

TEST_CASE("the chains of a pass applied from the memo are never found") {
  std::uint64_t applied = 0, found = 0, marked = 0;
  const Cluster cluster{toy_cluster(2, 8)};
  const std::vector<CalibrationProfile> profiles{ideal_profile_sharing(0.7)};
  const ComputeCostModel costs{cluster, profiles};
  const AnalyticalNetwork net{cluster, profiles};
  for (std::uint32_t seed = 1; seed <= 100; ++seed) {
    const SimulationSetup setup = repeated_pass_pipeline(seed, 1.37e10);
    Executor ex(setup, cluster, costs, net);
    REQUIRE(ex.run().completed);
    for (const ProgramTemplate& p : setup.programs) marked += p.passes.size();
    applied += ex.memo_stats().applied;
    found += ex.memo_stats().chained_passes;
  }
  MESSAGE(marked << " passes marked, " << applied << " applied, chains found for " << found);
  CHECK(applied > 100);
  // Each rank runs its own program here: a pass applied on it needs no chains.
  CHECK(found + applied <= marked);
  CHECK(found > 0);
}
