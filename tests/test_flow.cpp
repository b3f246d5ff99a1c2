// Flow-level network: max-min fair sharing, collectives as flows and the
// executor at flow fidelity (the cluster graph: test_graph.cpp; flow fidelity
// end to end: test_flow_job.cpp). Expected values are derived in comments.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <set>
#include <string>
#include <vector>

#include "sim/executor.hpp"
#include "sim/flow_collectives.hpp"
#include "sim/flow_network.hpp"
#include "sim/link_images.hpp"
#include "sim/metrics.hpp"
#include "sim_fixtures.hpp"
#include "topologies/graph.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// Runs `network` until idle; returns completion time (s) by cookie.
std::vector<double> run_all(FlowNetwork& net, std::size_t transfers) {
  std::vector<double> at(transfers, -1);
  std::vector<TransferDone> done;
  while (net.next_event() != Time::max()) net.advance(net.next_event(), done);
  for (const TransferDone& d : done) at[d.cookie] = d.time.to_seconds();
  return at;
}

std::vector<double> run_all(FlowCollectives& fc, std::size_t plans) {
  std::vector<double> at(plans, -1);
  std::vector<TransferDone> done;
  while (fc.next_event() != Time::max()) fc.advance(fc.next_event(), done);
  for (const TransferDone& d : done) at[d.cookie] = d.time.to_seconds();
  return at;
}

std::vector<int> iota(int from, int n, int stride = 1) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(from + i * stride);
  return v;
}

}  // namespace

TEST_CASE("flow network: one flow takes latency + bytes / bandwidth") {
  FlowNetwork net({10e9});
  const std::uint32_t path[] = {0};
  const FlowSpec f{path, 1e9, Time::ns(2000)};
  net.start(Time{}, {&f, 1}, 0);
  // 1 GB / 10 GB/s = 100 ms, then 2 us of latency.
  CHECK(run_all(net, 1)[0] == doctest::Approx(0.1 + 2e-6).epsilon(1e-9));
}

TEST_CASE("flow network: n flows on one link share it equally; rates follow arrivals and departures") {
  for (int n : {1, 2, 4, 16}) {
    CAPTURE(n);
    FlowNetwork net({10e9});
    const std::uint32_t path[] = {0};
    std::vector<FlowSpec> flows(n, FlowSpec{path, 1e9, Time{}});
    const TransferId t = net.start(Time{}, flows, 0);
    CHECK(net.flow_rate(t, 0) == doctest::Approx(10e9 / n));
    // n GB through 10 GB/s.
    CHECK(run_all(net, 1)[0] == doctest::Approx(0.1 * n).epsilon(1e-9));
  }
  // A alone for 50 ms (0.5 GB sent); B (0.25 GB) joins: 5 GB/s each, B done at
  // 100 ms; A has 0.25 GB left and finishes alone at 125 ms.
  FlowNetwork net({10e9});
  const std::uint32_t path[] = {0};
  const FlowSpec a{path, 1e9, Time{}}, b{path, 0.25e9, Time{}};
  std::vector<TransferDone> done;
  net.start(Time{}, {&a, 1}, 0);
  net.advance(Time::seconds(0.05), done);
  const TransferId tb = net.start(Time::seconds(0.05), {&b, 1}, 1);
  CHECK(net.flow_rate(tb, 0) == doctest::Approx(5e9));
  const auto at = run_all(net, 2);
  CHECK(at[1] == doctest::Approx(0.100).epsilon(1e-9));
  CHECK(at[0] == doctest::Approx(0.125).epsilon(1e-9));
}

TEST_CASE("flow network: parking lot gets the max-min fair rates") {
  // Links 0, 1 at 10 GB/s, link 2 at 4 GB/s. The long flow crosses all three;
  // one short flow on each link. Link 2 saturates first: long and short2 get
  // 2 GB/s each; then links 0 and 1 give their short flows the remaining 8 GB/s.
  FlowNetwork net({10e9, 10e9, 4e9, 1e9});
  const std::uint32_t all[] = {0, 1, 2}, l0[] = {0}, l1[] = {1}, l2[] = {2}, l3[] = {3};
  const std::vector<FlowSpec> flows{{all, 1e9, {}}, {l0, 1e9, {}}, {l1, 1e9, {}}, {l2, 1e9, {}}};
  const TransferId t = net.start(Time{}, flows, 0);
  CHECK(net.flow_rate(t, 0) == doctest::Approx(2e9));
  CHECK(net.flow_rate(t, 1) == doctest::Approx(8e9));
  CHECK(net.flow_rate(t, 2) == doctest::Approx(8e9));
  CHECK(net.flow_rate(t, 3) == doctest::Approx(2e9));
  // A flow on an unrelated link is its own component: only it is rated.
  const std::uint64_t before = net.rerated_flows();
  const FlowSpec lone{l3, 1e9, {}};
  net.start(Time{}, {&lone, 1}, 1);
  CHECK(net.rerated_flows() == before + 1);
  // Long flow: 2 GB/s until the short flows on links 0/1 finish (125 ms), still
  // 2 GB/s (link 2 is shared with short2 until 0.5 s), so 1 GB at 0.5 s; short2 too.
  const auto at = run_all(net, 2);
  CHECK(at[0] == doctest::Approx(0.5).epsilon(1e-6));
  CHECK(at[1] == doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("flow network: a link that cannot saturate does not join its flows' components") {
  // NICs a and b (10 GB/s) each send one flow through uplink u. With u at
  // 100 GB/s the flows' bounds off u (10 + 10) leave it slack: a new flow on a
  // re-rates a's flows only. At 15 GB/s u could saturate and joins all three.
  for (const double uplink : {100e9, 15e9}) {
    CAPTURE(uplink);
    FlowNetwork net({10e9, 10e9, uplink});
    const std::uint32_t au[] = {0, 2}, bu[] = {1, 2}, a[] = {0};
    const std::vector<FlowSpec> two{{au, 1e9, {}}, {bu, 1e9, {}}};
    const TransferId t = net.start(Time{}, two, 0);
    CHECK(net.flow_rate(t, 0) == doctest::Approx(uplink > 20e9 ? 10e9 : 7.5e9));
    const std::uint64_t before = net.rerated_flows();
    const FlowSpec third{a, 1e9, {}};
    const TransferId t3 = net.start(Time{}, {&third, 1}, 1);
    CHECK(net.rerated_flows() == before + (uplink > 20e9 ? 2 : 3));
    // Max-min either way: a is shared by two flows; the flow from b takes what u leaves it.
    CHECK(net.flow_rate(t, 0) == doctest::Approx(5e9));
    CHECK(net.flow_rate(t3, 0) == doctest::Approx(5e9));
    CHECK(net.flow_rate(t, 1) == doctest::Approx(std::min(10e9, uplink - 5e9)));
  }
}

TEST_CASE("flow network: rates stay max-min fair as random flows come and go over slack and full links") {
  // Random paths from a NIC (1-4 GB/s) through up to two core links (40-160
  // GB/s, most of them slack, so components are cut there) to another NIC or
  // none; after every start and every event each active flow's rate is
  // checked against max-min fairness recomputed from scratch over all flows.
  std::uint64_t state = 12345;
  auto next = [&](std::uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  constexpr std::size_t kNics = 10, kLinks = 14;
  std::vector<double> cap(kLinks);
  for (std::size_t l = 0; l < kLinks; ++l) cap[l] = (l < kNics ? 1e9 : 40e9) * static_cast<double>(1 + next(4));
  FlowNetwork net(cap);
  struct Started {
    TransferId id;  // reused by a later transfer once this one completes
    std::vector<std::vector<std::uint32_t>> paths;
  };
  std::vector<Started> started;
  std::vector<TransferDone> done;
  auto check_max_min = [&] {
    // Progressive filling over every flow still draining.
    std::vector<std::uint8_t> completed(started.size(), 0);
    for (const TransferDone& d : done) completed[d.cookie] = 1;
    std::vector<std::pair<const std::vector<std::uint32_t>*, double>> active;  // path, rate
    for (std::size_t k = 0; k < started.size(); ++k)
      for (std::size_t i = 0; i < started[k].paths.size() && !completed[k]; ++i) {
        const Started& s = started[k];
        const double r = net.flow_rate(s.id, i);
        if (r > 0) active.emplace_back(&s.paths[i], r);
      }
    std::vector<double> rem = cap, want(active.size(), -1);
    std::size_t left = active.size();
    while (left > 0) {
      double best = 0;
      std::size_t link = kLinks;
      for (std::size_t l = 0; l < kLinks; ++l) {
        std::size_t n = 0;
        for (std::size_t f = 0; f < active.size(); ++f)
          if (want[f] < 0)
            n += static_cast<std::size_t>(std::count(active[f].first->begin(), active[f].first->end(), l));
        if (n > 0 && (link == kLinks || rem[l] / static_cast<double>(n) < best)) {
          best = rem[l] / static_cast<double>(n);
          link = l;
        }
      }
      for (std::size_t f = 0; f < active.size(); ++f) {
        if (want[f] >= 0 || std::count(active[f].first->begin(), active[f].first->end(), link) == 0) continue;
        want[f] = best;
        --left;
        for (const std::uint32_t l : *active[f].first) rem[l] -= best;
      }
    }
    for (std::size_t f = 0; f < active.size(); ++f) CHECK(active[f].second == doctest::Approx(want[f]).epsilon(1e-9));
  };
  Time now{};
  for (int round = 0; round < 60; ++round) {
    Started s;
    std::vector<FlowSpec> specs;
    const std::size_t flows = 1 + next(3);
    s.paths.resize(flows);
    for (std::vector<std::uint32_t>& path : s.paths) {
      auto add = [&](std::size_t from, std::size_t n) {
        const auto l = static_cast<std::uint32_t>(from + next(n));
        if (std::find(path.begin(), path.end(), l) == path.end()) path.push_back(l);
      };
      add(0, kNics);
      for (std::uint64_t k = next(3); k > 0; --k) add(kNics, kLinks - kNics);
      if (next(2) == 0) add(0, kNics);
    }
    for (const auto& path : s.paths) specs.push_back(FlowSpec{path, 1e6 * static_cast<double>(1 + next(1000)), {}});
    s.id = net.start(now, specs, static_cast<std::uint64_t>(round));
    started.push_back(std::move(s));
    check_max_min();
    // Let up to two events pass before the next start.
    for (std::uint64_t k = next(3); k > 0 && net.next_event() != Time::max(); --k) {
      now = net.next_event();
      net.advance(now, done);
      check_max_min();
    }
  }
  while (net.next_event() != Time::max()) {
    net.advance(net.next_event(), done);
    check_max_min();
  }
  CHECK(done.size() == started.size());
}

TEST_CASE("ring all-reduce on flows = 2(n-1)/n * S/B + 2(n-1) * alpha") {
  // Inside one node: 8 GPUs, 100 GB/s scale-up links, alpha = 2 us per step.
  {
    const Cluster cluster(toy_cluster(1, 8));
    const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 0)};
    Topology topo(cluster);
    FlowCollectives fc(cluster, topo, profiles);
    const CollectivePlan p = fc.plan_collective(iota(0, 8), CollectiveKind::AllReduce, 1e9, 0, FlowAlgorithm::Ring);
    CHECK(p.flows.size() == 8);
    // 2*7/8 * 1e9 B / 100e9 B/s = 17.5 ms; 14 steps * 2 us = 28 us.
    CHECK(fc.measure(p).to_seconds() == doctest::Approx(17.5e-3 + 28e-6).epsilon(0.01));
  }
  // Across 4 nodes, one GPU per node (a data-parallel group): 10 GB/s NICs;
  // alpha = 2 us hop latency + 2 x 1 us of links (NIC-leaf, leaf-NIC) = 4 us.
  {
    ClusterSpec spec = toy_cluster(4, 8);
    spec.fabric.link_latency = 1e-6;
    const Cluster cluster(spec);
    const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 0)};
    Topology topo(cluster);
    FlowCollectives fc(cluster, topo, profiles);
    const CollectivePlan p = fc.plan_collective(iota(0, 4, 8), CollectiveKind::AllReduce, 1e9, 0, FlowAlgorithm::Ring);
    // 2*3/4 * 1e9 / 10e9 = 150 ms; 6 steps * 4 us = 24 us.
    CHECK(fc.measure(p).to_seconds() == doctest::Approx(0.150 + 24e-6).epsilon(0.01));
    const AnalyticalNetwork an(cluster, profiles);
    CHECK(
        fc.measure(p).to_seconds() ==
        doctest::Approx(an.collective_seconds(an.shape(iota(0, 4, 8)), CollectiveKind::AllReduce, 1e9)).epsilon(0.01));
  }
}

TEST_CASE("multi-node algorithms: rail-aligned ring channels, double binary tree, hierarchical, NVLS") {
  ClusterSpec spec4 = toy_cluster(4, 8);
  spec4.fabric.link_latency = 0;
  const Cluster cluster(spec4);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  const AnalyticalNetwork an(cluster, profiles);
  const std::vector<int> all = iota(0, 32);
  // Ring, 8 channels: each NIC carries one channel's 2*31/32 * 1 GB / 8 at 10 GB/s
  // = 24.2 ms = the analytical busbw min(100, 8 x 10) GB/s.
  const CollectivePlan ring = fc.plan_collective(all, CollectiveKind::AllReduce, 1e9, 0, FlowAlgorithm::Ring);
  CHECK(ring.channels == 8);
  const double analytical = an.collective_seconds(an.shape(all), CollectiveKind::AllReduce, 1e9);
  CHECK(fc.measure(ring).to_seconds() == doctest::Approx(2.0 * 31 / 32 / 80).epsilon(1e-3));
  CHECK(fc.measure(ring).to_seconds() == doctest::Approx(analytical).epsilon(1e-3));
  // Double binary tree over 4 nodes, per channel 62.5 MB per tree edge and
  // direction; the busiest NIC (internal in one tree, root in the other)
  // carries 4 of them each way: 250 MB / 10 GB/s = 25 ms.
  const CollectivePlan tree = fc.plan_collective(all, CollectiveKind::AllReduce, 1e9, 0, FlowAlgorithm::Tree);
  CHECK(tree.algorithm == FlowAlgorithm::Tree);
  CHECK(fc.measure(tree).to_seconds() == doctest::Approx(0.025).epsilon(1e-3));
  // Hierarchical: reduce-scatter in the node (7/8 GB / 100 GB/s = 8.75 ms), ring
  // all-reduce per rail over 4 nodes (2*3/4 * 1/8 GB / 10 GB/s = 18.75 ms),
  // all-gather in the node (8.75 ms), one after the other.
  const CollectivePlan hier = fc.plan_collective(all, CollectiveKind::AllReduce, 1e9, 0, FlowAlgorithm::Hierarchical);
  CHECK(hier.phases() == 3);
  CHECK(fc.measure(hier).to_seconds() == doctest::Approx(0.00875 + 0.01875 + 0.00875).epsilon(1e-3));
  CHECK(algorithm_seconds(an.shape(all), CollectiveKind::AllReduce, FlowAlgorithm::Hierarchical, 1e9) ==
        doctest::Approx(0.00875 + 0.01875 + 0.00875).epsilon(1e-3));
  // All-gather across nodes: ring factor 31/32 at 80 GB/s bus bandwidth.
  const CollectivePlan ag = fc.plan_collective(all, CollectiveKind::AllGather, 1e9, 0);
  CHECK(fc.measure(ag).to_seconds() == doctest::Approx(31.0 / 32 / 80).epsilon(1e-3));

  // NVLS inside an NVSwitch node: 2*7/8 * 1 GB / (100 GB/s * 1.5) + base + 2 hops.
  ClusterSpec spec = toy_cluster(1, 8);
  spec.groups[0].node.nvls = true;
  const Cluster one(spec);
  std::vector<CalibrationProfile> nv{ideal_profile(1e-6, 3e-6)};
  nv[0].scaleup.nvls_busbw_efficiency.value = 1.5;
  Topology t1(one);
  FlowCollectives f1(one, t1, nv);
  const CollectivePlan nvls = f1.plan_collective(iota(0, 8), CollectiveKind::AllReduce, 1e9, 0);
  CHECK(nvls.algorithm == FlowAlgorithm::Nvls);
  CHECK(f1.measure(nvls).to_seconds() == doctest::Approx(1.75 / 150 + 5e-6).epsilon(1e-3));
}

TEST_CASE("double binary tree: NCCL's construction, every node interior in at most one tree") {
  for (int m = 2; m <= 130; ++m) {
    CAPTURE(m);
    std::vector<int> children(m, 0);
    for (int t = 0; t < 2; ++t) {
      int roots = 0;
      std::vector<int> in_tree(m, 0);
      for (int r = 0; r < m; ++r) {
        const int up = double_binary_tree_parent(m, r, t);
        if (up < 0) {
          ++roots;
          continue;
        }
        REQUIRE(up < m);
        ++children[up];
        ++in_tree[up];
        int x = r, steps = 0;  // reaches the root: a tree, no cycle
        while (x >= 0 && steps <= m) x = double_binary_tree_parent(m, x, t), ++steps;
        CHECK(x < 0);
      }
      CHECK(roots == 1);
      CHECK(*std::max_element(in_tree.begin(), in_tree.end()) <= 2);  // binary
    }
    // Two children at most over both trees: a NIC carries 2S/k, like the ring.
    CHECK(*std::max_element(children.begin(), children.end()) <= 2);
  }
  // On 16 nodes the flow tree costs what the analytical model charges for it
  // (each NIC: 4 tree edges x S/(2k) each way = 25 ms) instead of 1.5x that.
  ClusterSpec spec = toy_cluster(16, 8);
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  const AnalyticalNetwork an(cluster, profiles);
  const std::vector<int> all = iota(0, 128);
  const CollectivePlan tree = fc.plan_collective(all, CollectiveKind::AllReduce, 1e9, 0, FlowAlgorithm::Tree);
  const double analytical = algorithm_seconds(an.shape(all), CollectiveKind::AllReduce, FlowAlgorithm::Tree, 1e9);
  CHECK(fc.measure(tree).to_seconds() == doctest::Approx(0.025).epsilon(0.02));
  CHECK(fc.measure(tree).to_seconds() == doctest::Approx(analytical).epsilon(0.03));
}

TEST_CASE("automatic all-reduce choice: tree across nodes for small messages, ring for large") {
  const Cluster cluster(toy_cluster(4, 8));
  const std::vector<CalibrationProfile> profiles{ideal_profile(5e-6, 0)};
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  // Ring latency 62 steps x 5 us = 310 us; tree 2*2 + 2*7 steps = 90 us; the
  // tree's derated bandwidth costs 8.7% of 24.2 ms per GB: the crossover is ~0.1 GB.
  CHECK(fc.plan_collective(iota(0, 32), CollectiveKind::AllReduce, 1e6, 0).algorithm == FlowAlgorithm::Tree);
  CHECK(fc.plan_collective(iota(0, 32), CollectiveKind::AllReduce, 1e9, 0).algorithm == FlowAlgorithm::Ring);
  CHECK(fc.plan_collective(iota(0, 8), CollectiveKind::AllReduce, 1e9, 0).algorithm == FlowAlgorithm::Ring);
}

TEST_CASE("all-to-all: pairwise flows; all-to-all-v with per-pair sizes") {
  ClusterSpec spec = toy_cluster(2, 8);
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  const AnalyticalNetwork an(cluster, profiles);
  const std::vector<int> all = iota(0, 16);
  const CollectivePlan p = fc.plan_collective(all, CollectiveKind::AllToAll, 1e9, 0);
  CHECK(p.flows.size() == 16 * 15);
  // Each GPU sends 8/16 of its 1 GB off the node. Cross-rail pieces are relayed
  // over NVLink to the GPU on the destination's rail (PXN), so each rail's NIC
  // carries 8 x 1/16 GB: 50 ms at 10 GB/s, as in the analytical model.
  CHECK(fc.measure(p).to_seconds() == doctest::Approx(0.05).epsilon(1e-3));
  CHECK(fc.measure(p).to_seconds() ==
        doctest::Approx(an.collective_seconds(an.shape(all), CollectiveKind::AllToAll, 1e9)).epsilon(1e-3));
  // Uneven: GPU 0 sends 2 GB to GPU 8 (other node, same rail) and 1 GB to GPU 1
  // (NVLink); the NIC path dominates: 2 GB / 10 GB/s = 200 ms.
  const std::vector<int> m{0, 1, 8};
  const std::vector<double> sizes{0, 1e9, 2e9, 0, 0, 0, 0, 0, 0};
  const CollectivePlan v = fc.plan_all_to_all_v(m, sizes, 0);
  CHECK(v.flows.size() == 2);
  CHECK(fc.measure(v).to_seconds() == doctest::Approx(0.2).epsilon(1e-6));
}

TEST_CASE("all-to-all inside one node reads the measured scale-up curve at both fidelities") {
  // One toy node of 8 GPUs (100 GB/s links) whose profile has a measured bus-bandwidth
  // curve (30% at 1 MB, 80% from 1 GB; it holds the latency), hop latency 2 us, base 5 us.
  const Cluster cluster(toy_cluster(1, 8));
  std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 5e-6)};
  profiles[0].scaleup.busbw_curve.curve = EfficiencyCurve({{1e6, 0.3}, {1e9, 0.8}});
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  const AnalyticalNetwork an(cluster, profiles);
  const std::vector<int> all = iota(0, 8);
  const CommShape shape = an.shape(all);
  // Uniform, 1 GB per GPU: 7/8 GB leaves each GPU at 80% of 100 GB/s = 10.9375 ms,
  // as the ring reduce-scatter of the same buffer (no hop latencies: the curve has them).
  const double analytical = an.collective_seconds(shape, CollectiveKind::AllToAll, 1e9);
  CHECK(analytical == doctest::Approx(0.875 / 80).epsilon(1e-9));
  CHECK(analytical == doctest::Approx(an.collective_seconds(shape, CollectiveKind::ReduceScatter, 1e9)));
  CHECK(fc.measure(fc.plan_collective(all, CollectiveKind::AllToAll, 1e9, 0)).to_seconds() ==
        doctest::Approx(analytical).epsilon(1e-6));
  // Per-pair sizes: GPU 3 receives four times what the others do; its link in takes
  // 7 x 0.4 GB, the load of a 3.2 GB uniform buffer (curve 80%): 35 ms at both fidelities.
  std::vector<double> skewed(8 * 8, 0.0);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) skewed[i * 8 + j] = i == j ? 0.0 : (j == 3 ? 4e8 : 1e8);
  }
  CHECK(an.all_to_all_v_seconds(shape, all, skewed) == doctest::Approx(2.8 / 80).epsilon(1e-9));
  CHECK(fc.measure(fc.plan_all_to_all_v(all, skewed, 0)).to_seconds() == doctest::Approx(2.8 / 80).epsilon(1e-6));
}

TEST_CASE("all-to-all-v: the analytical time from per-rank bytes per link class agrees with the flows") {
  // Two toy nodes of 8 GPUs (100 GB/s NVLink, 10 GB/s NICs, rail-optimized), no latencies.
  ClusterSpec spec = toy_cluster(2, 8);
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  const AnalyticalNetwork an(cluster, profiles);
  const std::vector<int> all = iota(0, 16);
  const CommShape shape = an.shape(all);
  // Uniform: exactly the all-to-all of the same buffer (1 GB per GPU, 1/16 per peer).
  const std::vector<double> uniform(16 * 16, 1e9 / 16);
  CHECK(an.all_to_all_v_seconds(shape, all, uniform) ==
        doctest::Approx(an.collective_seconds(shape, CollectiveKind::AllToAll, 1e9)));
  // Skewed: GPU 3 receives four times what the others do from every peer.
  std::vector<double> skewed(16 * 16, 0.0);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) skewed[i * 16 + j] = i == j ? 0.0 : (j == 3 ? 4e8 : 1e8);
  }
  // By hand: GPU 3's NIC (rail 3 of node 0) takes 8 x 0.4 GB from node 1 = 3.2 GB:
  // 320 ms at 10 GB/s; node 1's rail-3 NIC sends the same. Every other NIC moves 0.8 GB.
  const double analytical = an.all_to_all_v_seconds(shape, all, skewed);
  CHECK(analytical == doctest::Approx(0.32).epsilon(1e-9));
  const CollectivePlan plan = fc.plan_all_to_all_v(all, skewed, 0);
  CHECK(plan.flows.size() == 16 * 15);  // one flow per (src, dst) pair with its bytes
  CHECK(fc.measure(plan).to_seconds() == doctest::Approx(analytical).epsilon(1e-3));
  // A lighter pair matrix on the same ranks takes less time in both.
  std::vector<double> lighter = skewed;
  for (double& b : lighter) b /= 2;
  CHECK(an.all_to_all_v_seconds(shape, all, lighter) == doctest::Approx(analytical / 2));
  CHECK(fc.measure(fc.plan_all_to_all_v(all, lighter, 0)).to_seconds() ==
        doctest::Approx(analytical / 2).epsilon(1e-3));
}

TEST_CASE("two rings sharing a 4:1 oversubscribed uplink take the max-min time") {
  // 4 nodes x 2 GPUs, rail-optimized, 2 nodes per leaf, one spine, 4:1: the
  // leaf of rail 0 in group 0 has 2 x 10 GB/s down and 5 GB/s up.
  ClusterSpec spec = toy_cluster(4, 2);
  spec.fabric.nodes_per_leaf = 2;
  spec.fabric.spines = 1;
  spec.fabric.oversubscription = 4;
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  // Ring A: GPU 0 (node 0) <-> GPU 4 (node 2); ring B: GPU 2 (node 1) <-> GPU 6
  // (node 3); all on rail 0, crossing the same uplink in each direction.
  const PlanId a = fc.add_plan(fc.plan_collective({0, 4}, CollectiveKind::AllReduce, 1e9, 1));
  const PlanId b = fc.add_plan(fc.plan_collective({2, 6}, CollectiveKind::AllReduce, 1e9, 2));
  // Alone: each edge carries 2*1/2 * 1 GB through the 5 GB/s uplink: 200 ms.
  CHECK(fc.measure(fc.plan(a)).to_seconds() == doctest::Approx(0.2).epsilon(1e-6));
  // Together: max-min gives each flow 2.5 GB/s on the uplink: 400 ms (from the
  // network's clock, which measure() moved on; it never runs backwards).
  const Time t0 = fc.network().now();
  fc.start(t0, a, 0);
  fc.start(t0, b, 1);
  const auto at = run_all(fc, 2);
  CHECK(at[0] - t0.to_seconds() == doctest::Approx(0.4).epsilon(1e-6));
  CHECK(at[1] - t0.to_seconds() == doctest::Approx(0.4).epsilon(1e-6));
  // The analytical model sees the uplink a ring alone gets (200 ms, not the
  // 100 ms of the NICs), but not the other ring, and says so.
  const AnalyticalNetwork an(cluster, profiles);
  CHECK(an.collective_seconds(an.shape({0, 4}), CollectiveKind::AllReduce, 1e9) == doctest::Approx(0.2));
  REQUIRE(an.warnings().size() == 1);
  CHECK(an.warnings()[0].find("oversubscription 4:1") != std::string::npos);
}

TEST_CASE("a middle stage's batched pipeline exchange shares its GPU's one NIC in each direction") {
  // 3 nodes x 2 GPUs, 10 GB/s NICs, one per GPU (rail 0: GPUs 0, 2, 4). GPU 2
  // is a middle pipeline stage: Megatron-LM's steady-state exchange without
  // overlap_p2p_comm (send_forward_backward_recv_forward_backward, one
  // batch_isend_irecv) sends to both neighbours and receives from both at
  // once, and NCCL sends a GPU's p2p traffic to any peer through its local
  // NIC (ncclTopoGetLocalNet: one NIC per GPU gives every channel that NIC).
  ClusterSpec spec = toy_cluster(3, 2);
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  // One 1 GB message alone: 1 GB / 10 GB/s = 100 ms, as the analytical model
  // charges every message whatever else its GPU sends.
  CHECK(fc.measure(fc.plan_p2p(2, 4, 1e9, 1)).to_seconds() == doctest::Approx(0.1).epsilon(1e-6));
  const AnalyticalNetwork an(cluster, profiles);
  CHECK(an.p2p_seconds(an.shape({2, 4}), 1e9) == doctest::Approx(0.1));
  auto together = [&](const std::vector<std::array<int, 2>>& pairs) {
    std::vector<PlanId> ids;
    for (const auto& pr : pairs) ids.push_back(fc.add_plan(fc.plan_p2p(pr[0], pr[1], 1e9, 1)));
    const Time t0 = fc.network().now();
    for (std::size_t i = 0; i < ids.size(); ++i) fc.start(t0, ids[i], i);
    std::vector<double> at = run_all(fc, ids.size());
    for (double& t : at) t -= t0.to_seconds();
    return at;
  };
  // The exchange: two messages leave GPU 2's NIC and two enter it; each
  // direction of the NIC carries 2 GB: 200 ms for all four.
  for (double t : together({{2, 4}, {2, 0}, {0, 2}, {4, 2}})) CHECK(t == doctest::Approx(0.2).epsilon(1e-6));
  // Not an artefact of the links: the two directions of one pair are full
  // duplex (100 ms each), and another rail's exchange uses its own NIC.
  for (double t : together({{0, 2}, {2, 0}})) CHECK(t == doctest::Approx(0.1).epsilon(1e-6));
  for (double t : together({{2, 4}, {3, 5}})) CHECK(t == doctest::Approx(0.1).epsilon(1e-6));
}

TEST_CASE("routing: queue pairs per connection under ECMP, a bundle of up-links under adaptive routing") {
  // 4 nodes x 1 GPU, one leaf per node, 4 spines: each leaf has 10 GB/s down
  // and 4 up-links of 2.5 GB/s. A 1 GB all-reduce of GPUs 0 and 3 sends 1 GB
  // each way (2(n-1)/n = 1) across the spines.
  ClusterSpec spec = toy_cluster(4, 1);
  spec.fabric.nodes_per_leaf = 1;
  spec.fabric.spines = 4;
  spec.fabric.link_latency = 0;
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  auto time_of = [&](FabricRouting routing, int qps, std::size_t* flows) {
    ClusterSpec c = spec;
    c.fabric.routing = routing;
    c.fabric.qps_per_connection = qps;
    const Cluster cluster(c);
    Topology topo(cluster);
    FlowCollectives fc(cluster, topo, profiles);
    const CollectivePlan p = fc.plan_collective({0, 3}, CollectiveKind::AllReduce, 1e9, 7);
    double bytes = 0;
    for (const PlannedFlow& f : p.flows) bytes += f.bytes;
    CHECK(bytes == doctest::Approx(2e9));  // the queue pairs split the bytes, never add any
    *flows = p.flows.size();
    // Both fidelities read the routing: the analytical time of the same collective.
    const AnalyticalNetwork an(cluster, profiles);
    const double analytical = an.collective_seconds(an.shape({0, 3}), CollectiveKind::AllReduce, 1e9);
    const double flow = fc.measure(p).to_seconds();
    CHECK(flow == doctest::Approx(analytical).epsilon(1e-6));
    return flow;
  };
  std::size_t flows = 0;
  // ECMP, one queue pair: each direction is one flow on one 2.5 GB/s up-link: 0.4 s.
  CHECK(time_of(FabricRouting::Ecmp, 1, &flows) == doctest::Approx(0.4).epsilon(1e-6));
  CHECK(flows == 2);
  // Adaptive routing: the leaf's four up-links as one 10 GB/s bundle, the NIC's rate: 0.1 s.
  CHECK(time_of(FabricRouting::Adaptive, 1, &flows) == doctest::Approx(0.1).epsilon(1e-6));
  CHECK(flows == 2);
  CHECK(time_of(FabricRouting::Adaptive, 8, &flows) == doctest::Approx(0.1).epsilon(1e-6));
  CHECK(flows == 2);  // nothing to hash apart
}

TEST_CASE("routing: k queue pairs under ECMP are k flows of S/k hashed onto spines independently") {
  ClusterSpec spec = toy_cluster(4, 1);
  spec.fabric.nodes_per_leaf = 1;
  spec.fabric.spines = 4;
  spec.fabric.link_latency = 0;
  spec.fabric.qps_per_connection = 4;
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  const Cluster cluster(spec);
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  const CollectivePlan p = fc.plan_p2p(0, 3, 1e9, 7);
  REQUIRE(p.flows.size() == 4);
  std::set<std::uint32_t> uplinks;
  for (const PlannedFlow& f : p.flows) {
    CHECK(f.bytes == doctest::Approx(0.25e9));
    for (std::uint32_t l : topo.links_of(f.route)) {
      if (topo.link(l).kind == LinkKind::Uplink && topo.vertex(topo.link(l).to).kind == VertexKind::Spine) {
        uplinks.insert(l);
      }
    }
  }
  // The hash spreads the queue pairs: between one up-link (0.4 s) and four (0.1 s);
  // the busiest up-link sets the time, 0.25 GB per queue pair on it at 2.5 GB/s
  // shared max-min fairly.
  CHECK(uplinks.size() > 1);
  const double t = fc.measure(p).to_seconds();
  CHECK(t < 0.4 - 1e-9);
  CHECK(t >= 0.1 - 1e-9);
  // Inside one leaf there is nothing to hash: one flow.
  ClusterSpec one_leaf = spec;
  one_leaf.fabric.nodes_per_leaf = 4;
  const Cluster c1(one_leaf);
  Topology t1(c1);
  FlowCollectives f1(c1, t1, profiles);
  CHECK(f1.plan_p2p(0, 3, 1e9, 7).flows.size() == 1);
}

TEST_CASE("WAN latency dominates small messages between datacenters") {
  ClusterSpec spec = toy_cluster(2, 2);
  spec.datacenters.count = 2;
  spec.datacenters.wan_bandwidth = 12.5e9;  // 100 Gbps
  spec.datacenters.wan_latency = 10e-3;
  spec.fabric.link_latency = 1e-6;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 0)};
  Topology topo(cluster);
  CHECK(topo.num_datacenters() == 2);
  FlowCollectives fc(cluster, topo, profiles);
  // GPU 0 (datacenter 0) -> GPU 2 (datacenter 1): NIC, leaf, spine, gateway,
  // WAN, gateway, spine, leaf, NIC: 6 links of 1 us + 10 ms of WAN + 2 us hop.
  const CollectivePlan small = fc.plan_p2p(0, 2, 1e3, 0);
  bool wan = false;
  for (std::uint32_t l : topo.links_of(small.flows[0].route)) wan |= topo.link(l).kind == LinkKind::Wan;
  CHECK(wan);
  const double t_small = fc.measure(small).to_seconds();
  CHECK(t_small == doctest::Approx(10e-3 + 8e-6 + 1e3 / 10e9).epsilon(1e-6));
  CHECK(1e3 / 10e9 < 0.001 * t_small);  // the bytes are negligible
  // Within a datacenter the same message takes microseconds.
  ClusterSpec one = spec;
  one.datacenters = DatacenterSpec{};
  const Cluster c1(one);
  Topology t1(c1);
  FlowCollectives f1(c1, t1, profiles);
  CHECK(f1.measure(f1.plan_p2p(0, 2, 1e3, 0)).to_seconds() < 10e-6);
  // Large messages: the 10 GB/s NIC, not the 12.5 GB/s WAN, is the bottleneck.
  CHECK(fc.measure(fc.plan_p2p(0, 2, 10e9, 0)).to_seconds() == doctest::Approx(1.0 + 10e-3).epsilon(1e-4));
}

TEST_CASE("uncontended collectives: flow and analytical agree across the WAN, leaf uplinks and NIC-only nodes") {
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 5e-6)};
  auto agree = [&](const ClusterSpec& spec, const std::vector<int>& members, CollectiveKind kind,
                   FlowAlgorithm expected) {
    const Cluster cluster(spec);
    Topology topo(cluster);
    FlowCollectives fc(cluster, topo, profiles);
    const AnalyticalNetwork an(cluster, profiles);
    const CollectivePlan plan = fc.plan_collective(members, kind, 1e9, 7);
    CHECK(plan.algorithm == expected);
    const double flow = fc.measure(plan).to_seconds();
    const double analytical = an.collective_seconds(an.shape(members), kind, 1e9);
    CHECK(flow == doctest::Approx(analytical).epsilon(0.03));
    return flow;
  };
  SUBCASE("a communicator spanning two datacenters") {
    // All 8 GPUs of 2 datacenters x 2 nodes x 2 GPUs: the 4 GPUs of a
    // datacenter share its 12.5 GB/s WAN link in the middle phase.
    ClusterSpec spec = toy_cluster(4, 2);
    spec.datacenters = DatacenterSpec{2, 12.5e9, 10e-3};
    spec.fabric.link_latency = 1e-6;
    const std::vector<int> all = iota(0, 8);
    const double t = agree(spec, all, CollectiveKind::AllReduce, FlowAlgorithm::DatacenterHierarchical);
    CHECK(t > 0.25 / 3.125);  // the shard's WAN time is in it
    agree(spec, all, CollectiveKind::AllGather, FlowAlgorithm::DatacenterHierarchical);
    agree(spec, all, CollectiveKind::ReduceScatter, FlowAlgorithm::DatacenterHierarchical);
  }
  SUBCASE("a ring crossing a 4:1 oversubscribed leaf uplink") {
    // 4 nodes x 2 GPUs, 2 nodes per leaf, one spine: each rail's ring leaves a
    // leaf through a 5 GB/s uplink.
    ClusterSpec spec = toy_cluster(4, 2);
    spec.fabric.nodes_per_leaf = 2;
    spec.fabric.spines = 1;
    spec.fabric.oversubscription = 4;
    const double t = agree(spec, iota(0, 8), CollectiveKind::AllGather, FlowAlgorithm::Ring);
    // 7/8 GB over 2 channels of 5 GB/s (the NICs alone would allow 2 x 10 GB/s).
    CHECK(t == doctest::Approx(7.0 / 8 / 10).epsilon(0.01));
    agree(spec, iota(0, 4, 2), CollectiveKind::AllReduce, FlowAlgorithm::Ring);
  }
  SUBCASE("a node without scale-up links") {
    ClusterSpec spec = toy_cluster(1, 4);
    spec.groups[0].node.scaleup = ScaleupKind::None;
    const double t = agree(spec, iota(0, 4), CollectiveKind::AllReduce, FlowAlgorithm::Ring);
    // 2*3/4 GB over 10 GB/s NICs (NVLink's 100 GB/s would take 15 ms).
    CHECK(t == doctest::Approx(1.5 / 10).epsilon(0.01));
    // Fat-tree, two GPUs per NIC: GPU 0 -> 1 stays under their NIC (PCIe).
    spec.groups[0].node.nic_count = 2;
    spec.fabric.kind = FabricKind::FatTree;
    const Cluster cluster(spec);
    Topology topo(cluster);
    FlowCollectives fc(cluster, topo, profiles);
    CHECK(fc.measure(fc.plan_p2p(0, 1, 1e9, 0)).to_seconds() == doctest::Approx(0.1 + 7e-6).epsilon(1e-3));
  }
}

TEST_CASE("executor at flow fidelity: a collective starts when the last member arrives") {
  const Cluster cluster(toy_cluster(1, 2));
  const std::vector<CalibrationProfile> profiles{ideal_profile()};
  const ComputeCostModel costs(cluster, profiles);
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  SimulationSetup setup;
  setup.comms.push_back(Communicator{"pair", {0, 1}, 2});
  for (double flops : {1e12, 3e12}) {  // 10 ms and 30 ms of compute before the all-reduce
    ProgramBuilder b("p");
    const auto c = b.add_stream("compute");
    const auto comm = b.add_stream("comm");
    const auto slot = b.add_comm_slot("pair");
    ComputeOp op;
    op.name = "gemm";
    op.kind = OpKind::Gemm;
    op.flops = flops;
    op.m = op.n = op.k = 4096;
    const TaskId t0 = b.compute(c, b.add_op(op), b.add_label("work"), 0, {});
    const TaskId deps[] = {t0};
    b.collective(comm, slot, CollectiveKind::AllReduce, CommClass::DP, 1000000000, b.add_label("ar"), 0, deps);
    setup.programs.push_back(std::move(b).finish());
  }
  setup.ranks.push_back(RankProgram{"fast", 0, 0, {0}, true});
  setup.ranks.push_back(RankProgram{"slow", 1, 1, {0}, true});
  Executor ex(setup, cluster, costs, fc);
  const SimulationResult r = ex.run();
  REQUIRE(r.completed);
  // 2*1/2 * 1 GB over 100 GB/s = 10 ms after the slow rank's 30 ms.
  CHECK(r.makespan.to_seconds() == doctest::Approx(0.040));
  const TimeBreakdown fast = breakdown(r.timelines[0].intervals, r.makespan);
  CHECK(fast.idle_s == doctest::Approx(0.020));
  CHECK(fast.exposed_comm_s[static_cast<int>(CommClass::DP)] == doctest::Approx(0.010));
}

TEST_CASE("a measured send/recv curve times a p2p inside a node at both fidelities, not the ring bandwidth") {
  // NCCL drives one peer with few channels: the profile's scaleup.p2p_curve
  // (send/recv bandwidth / link bandwidth, latency included) replaces the
  // ring efficiency for a p2p inside the scale-up domain.
  const Cluster cluster(toy_cluster(2, 4));
  CalibrationProfile p = ideal_profile(2e-6, 5e-6);
  p.scaleup.p2p_curve.curve = EfficiencyCurve({{1e6, 0.1}, {1e9, 0.5}});
  const std::vector<CalibrationProfile> profiles{p};
  const AnalyticalNetwork net(cluster, profiles);
  Topology topo(cluster);
  FlowCollectives fc(cluster, topo, profiles);
  const double link = cluster.node_spec_of_gpu(0).scaleup_bandwidth;
  for (double bytes : {1e6, 1e9}) {
    CAPTURE(bytes);
    const double expected = bytes / (link * p.scaleup.p2p_curve.curve.at(bytes));
    CHECK(net.p2p_seconds(net.shape({0, 1}), bytes) == doctest::Approx(expected));
    CHECK(fc.measure(fc.plan_p2p(0, 1, bytes, 0)).to_seconds() == doctest::Approx(expected).epsilon(1e-3));
  }
  // Across nodes the NIC figures stay in charge.
  const CalibrationProfile plain = ideal_profile(2e-6, 5e-6);
  const std::vector<CalibrationProfile> without{plain};
  const AnalyticalNetwork net_plain(cluster, without);
  CHECK(net.p2p_seconds(net.shape({0, 4}), 1e9) ==
        doctest::Approx(net_plain.p2p_seconds(net_plain.shape({0, 4}), 1e9)));
}

TEST_CASE("link images: a node swap under one leaf maps links to the representatives' and shares the up-links") {
  // 4 nodes of 2 GPUs under one leaf per rail, adaptive routing over 2
  // spines; the group swaps nodes 0 <-> 1 and 2 <-> 3 (representatives 0, 2).
  ClusterSpec spec = toy_cluster(4, 2);
  spec.fabric.nodes_per_leaf = 4;
  spec.fabric.spines = 2;
  spec.fabric.routing = FabricRouting::Adaptive;
  const Cluster cluster(spec);
  const Topology topo(cluster);
  const std::vector<int> rep{0, 1, 0, 1, 4, 5, 4, 5};
  const std::optional<LinkImages> im = link_images(topo, rep, 2);
  REQUIRE(im.has_value());
  int uplinks = 0;
  for (std::uint32_t l = 0; l < topo.num_links(); ++l) {
    const TopologyLink& link = topo.link(l);
    const TopologyLink& image = topo.link(im->link_rep[l]);
    CHECK(image.capacity == link.capacity);
    CHECK(image.kind == link.kind);
    const VertexKind from = topo.vertex(link.from).kind;
    if (from == VertexKind::Gpu) CHECK(image.from == static_cast<std::uint32_t>(rep[link.from]));
    if (link.kind == LinkKind::Uplink) {
      // Fixed by the swap (one leaf per rail): both images of a flow cross it.
      ++uplinks;
      CHECK(im->link_rep[l] == l);
      CHECK(im->capacity[l] == link.capacity / 2);
    } else if (im->link_rep[l] == l) {
      CHECK(im->capacity[l] == link.capacity);  // a representative GPU's or NIC's link
    }
  }
  CHECK(uplinks == 4);  // a leaf per rail, up and down to the one vertex of the bundled spines
  // A map that splits a node over two nodes is no symmetry.
  CHECK_FALSE(link_images(topo, {0, 1, 2, 1, 4, 5, 4, 5}, 2).has_value());
}
