// Flow fidelity end to end: scenarios through the reader and run_job at both
// fidelities (the flow network itself: test_flow.cpp).
#include <doctest/doctest.h>

#include <string>

#include "sim/metrics.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

const Catalog& catalog() {
  static const Catalog c = load_builtin_catalog();
  return c;
}

// A small GPT on DGX H100 nodes; `cluster` is the scenario's cluster object;
// `extra`: more keys of "parallel" (e.g. context parallelism).
Scenario small_scenario(const std::string& cluster, int tp, int dp, int pp, bool dp_overlap = true,
                        const std::string& extra = "") {
  const std::string text = R"({
    "name": "flow-test",
    "model": {"name": "gpt-small", "layers": 8, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 32000},
    "cluster": )" + cluster +
                           R"(,
    "parallel": {"tp": )" + std::to_string(tp) +
                           R"(, "dp": )" + std::to_string(dp) + R"(, "pp": )" + std::to_string(pp) +
                           R"(, "micro_batch": 1, "global_batch": )" + std::to_string(4 * dp * pp) +
                           R"(, "dp_overlap": )" + (dp_overlap ? "true" : "false") + extra + R"(},
    "training": {"seq_len": 2048}
  })";
  return load_scenario_text(text, "flow-test.json", "", {}, catalog());
}

// The same scenario at flow fidelity with every rank and with `mode`: both must be
// feasible (a test compares what the representatives give with every rank's run).
struct FlowRankRuns {
  JobReport all;
  JobReport some;
};
FlowRankRuns run_every_rank_and(Scenario s, FlowRanks mode) {
  s.flow_ranks = FlowRanks::All;
  FlowRankRuns r{run_job(s, Fidelity::Flow).report, {}};
  s.flow_ranks = mode;
  r.some = run_job(s, Fidelity::Flow).report;
  REQUIRE(r.all.feasible);
  REQUIRE(r.some.feasible);
  return r;
}

}  // namespace

TEST_CASE("scenario reader: inconsistent cluster descriptions are errors naming the JSON pointer") {
  try {
    small_scenario(R"({"node": "dgx-h100", "nodes": 2, "datacenters": {"count": 3, "wan_bandwidth": "400Gbps"}})", 8, 2,
                   1);
    FAIL("expected an input error");
  } catch (const InputError& e) {
    REQUIRE(!e.diagnostics().empty());
    CHECK(e.diagnostics()[0].pointer == "/cluster/datacenters/count");
  }
  try {
    small_scenario(R"({"node": "dgx-h100", "nodes": 2, "fabric": {"kind": "torus"}})", 8, 2, 1);
    FAIL("expected an input error");
  } catch (const InputError& e) {
    REQUIRE(!e.diagnostics().empty());
    CHECK(e.diagnostics()[0].pointer == "/cluster/fabric/kind");
  }
  try {
    small_scenario(R"({"node": "dgx-h100", "nodes": 2, "datacenters": {"count": 2}})", 8, 2, 1);
    FAIL("expected an input error");
  } catch (const InputError& e) {
    REQUIRE(!e.diagnostics().empty());
    CHECK(e.diagnostics()[0].pointer == "/cluster/datacenters/wan_bandwidth");
  }
}

TEST_CASE("scenario reader: fabric routing defaults from the NICs' link layer; bad values at their pointer") {
  // InfiniBand NICs (the DGX nodes): adaptive routing, as NCCL enables it there.
  const Scenario ib = small_scenario(R"({"node": "dgx-h100", "nodes": 2})", 8, 2, 1);
  CHECK(ib.cluster.fabric.routing == FabricRouting::Adaptive);
  CHECK(ib.cluster.fabric.qps_per_connection == 1);
  // Ethernet NICs (RoCE): ECMP; an inline node override says which.
  const Scenario roce =
      small_scenario(R"({"node": {"preset": "dgx-h100", "nics": {"link_layer": "ethernet"}}, "nodes": 2})", 8, 2, 1);
  CHECK(roce.cluster.groups[0].node.nic_link_layer == NicLinkLayer::Ethernet);
  CHECK(roce.cluster.fabric.routing == FabricRouting::Ecmp);
  // Given explicitly, the fabric's keys win.
  const Scenario set = small_scenario(
      R"({"node": "dgx-h100", "nodes": 2, "fabric": {"routing": "ecmp", "qps_per_connection": 4}})", 8, 2, 1);
  CHECK(set.cluster.fabric.routing == FabricRouting::Ecmp);
  CHECK(set.cluster.fabric.qps_per_connection == 4);
  const std::pair<std::string, std::string> bad[] = {
      {R"({"node": "dgx-h100", "nodes": 2, "fabric": {"routing": "spray"}})", "/cluster/fabric/routing"},
      {R"({"node": "dgx-h100", "nodes": 2, "fabric": {"qps_per_connection": 0}})",
       "/cluster/fabric/qps_per_connection"},
      {R"({"node": "dgx-h100", "nodes": 2, "fabric": {"qps_per_connection": 129}})",
       "/cluster/fabric/qps_per_connection"},
      {R"({"node": {"preset": "dgx-h100", "nics": {"link_layer": "omnipath"}}, "nodes": 2})",
       "/cluster/node/nics/link_layer"},
  };
  for (const auto& entry : bad) {
    const std::string& cluster = entry.first;  // named, not a structured binding: CAPTURE's lambda captures it
    const std::string& pointer = entry.second;
    CAPTURE(cluster);
    try {
      small_scenario(cluster, 8, 2, 1);
      FAIL("expected an input error");
    } catch (const InputError& e) {
      REQUIRE(!e.diagnostics().empty());
      CHECK(e.diagnostics()[0].pointer == pointer);
    }
  }
}

TEST_CASE("run_job: flow and analytical fidelity agree within 5% without contention") {
  // TP 8 inside each node (NVLS / ring on NVLink), DP 2 across two nodes: each
  // rail carries one data-parallel ring, nothing shares a link.
  const Scenario s = small_scenario(R"({"node": "dgx-h100", "nodes": 2})", 8, 2, 1);
  const JobReport an = run_job(s, Fidelity::Analytical).report;
  const JobReport fl = run_job(s, Fidelity::Flow).report;
  REQUIRE(an.feasible);
  REQUIRE(fl.feasible);
  CHECK(fl.simulated_ranks == 1);  // the images of the node swap and the TP rotation (flow.ranks auto)
  CHECK(fl.iteration_time_s == doctest::Approx(an.iteration_time_s).epsilon(0.05));
  // Pipeline parallel across nodes too (point-to-point on one rail each).
  const Scenario p = small_scenario(R"({"node": "dgx-h100", "nodes": 4})", 8, 2, 2);
  CHECK(run_job(p, Fidelity::Flow).report.iteration_time_s ==
        doctest::Approx(run_job(p, Fidelity::Analytical).report.iteration_time_s).epsilon(0.05));
}

TEST_CASE("run_job: both fidelities see an oversubscribed uplink that no two flows share") {
  // One node per leaf, one spine, 8:1 oversubscribed: the data-parallel ring of
  // each rail leaves its leaf through one uplink of 1/8 the NIC bandwidth, and
  // no other ring shares it (rails have their own leaves).
  const std::string fabric = R"({"node": "dgx-h100", "nodes": 2,
      "fabric": {"kind": "rail-optimized", "nodes_per_leaf": 1, "spines": 1, "oversubscription": 8}})";
  const Scenario s = small_scenario(fabric, 8, 2, 1, false);
  const JobReport an = run_job(s, Fidelity::Analytical).report;
  const JobReport fl = run_job(s, Fidelity::Flow).report;
  const double dp_an = an.breakdown.exposed_comm_s[static_cast<int>(CommClass::DP)];
  const double dp_fl = fl.breakdown.exposed_comm_s[static_cast<int>(CommClass::DP)];
  CHECK(dp_an == doctest::Approx(dp_fl).epsilon(0.03));
  // Against the same cluster on a non-blocking fabric, the exposed DP time grows
  // with the uplink's 8x lower bandwidth at both fidelities.
  const JobReport plain = run_job(small_scenario(R"({"node": "dgx-h100", "nodes": 2})", 8, 2, 1, false)).report;
  const double dp_plain = plain.breakdown.exposed_comm_s[static_cast<int>(CommClass::DP)];
  CHECK(dp_an > 6 * dp_plain);
  CHECK(an.iteration_time_s > plain.iteration_time_s);
  // The analytical report names what it cannot model.
  CHECK(!an.warnings.empty());
  CHECK(plain.warnings.empty());
}

TEST_CASE("run_job on the two-datacenter preset: flow and analytical within 15%") {
  // 1024 H100 in two datacenters joined by 3.2 Tb/s at 10 ms. A small GPT so
  // that the WAN matters and every rank can be simulated quickly.
  auto scenario = [](int dp, int pp) {
    const std::string text = R"({
      "name": "two-dc",
      "model": {"name": "gpt-small", "layers": 8, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 32000},
      "cluster": "two-dc-h100-2x512gpu",
      "parallel": {"tp": 8, "dp": )" +
                             std::to_string(dp) + R"(, "pp": )" + std::to_string(pp) +
                             R"(, "micro_batch": 1, "global_batch": )" + std::to_string(dp * pp * 2) + R"(},
      "training": {"seq_len": 2048}
    })";
    return load_scenario_text(text, "two-dc.json", "", {}, catalog());
  };
  SUBCASE("data parallel across the WAN (hierarchical all-reduce)") {
    const Scenario s = scenario(128, 1);
    const JobReport an = run_job(s, Fidelity::Analytical).report;
    const JobReport fl = run_job(s, Fidelity::Flow).report;
    CHECK(fl.simulated_ranks == 1024);
    CHECK(fl.iteration_time_s == doctest::Approx(an.iteration_time_s).epsilon(0.15));
    // Each all-reduce pays two WAN steps of 10 ms: it dominates the iteration.
    CHECK(an.breakdown.exposed_comm_s[static_cast<int>(CommClass::DP)] > 0.02);
    CHECK(!an.warnings.empty());
  }
  SUBCASE("pipeline stages in different datacenters") {
    const Scenario s = scenario(64, 2);
    const JobReport an = run_job(s, Fidelity::Analytical).report;
    const JobReport fl = run_job(s, Fidelity::Flow).report;
    CHECK(fl.iteration_time_s == doctest::Approx(an.iteration_time_s).epsilon(0.15));
    CHECK(an.breakdown.exposed_comm_s[static_cast<int>(CommClass::PP)] > 0.01);
  }
}

TEST_CASE("flow fidelity is deterministic") {
  const Scenario s = small_scenario(R"({"node": "dgx-h100", "nodes": 4, "fabric": {"spines": 3}})", 8, 2, 2);
  const JobReport a = run_job(s, Fidelity::Flow).report;
  const JobReport b = run_job(s, Fidelity::Flow).report;
  CHECK(a.iteration_time_s == b.iteration_time_s);
  CHECK(a.events == b.events);
}

TEST_CASE("flow fidelity refuses up front a run whose memory estimate exceeds its limit") {
  // Llama 3.1 405B on 16,384 H100 with 2,048 micro-batches per pipeline: ~7 M
  // tasks per stage program, x 1,024 ranks per stage when every rank runs: far
  // above 16 GiB of state.
  const Scenario s =
      load_scenario_file(std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/examples/llama3.1-405b-16384xh100.json",
                         {"parallel.global_batch=262144", "flow.ranks=all"}, catalog());
  const JobRun run = run_job(s, Fidelity::Flow);
  CHECK_FALSE(run.report.feasible);
  REQUIRE(run.report.problems.size() == 1);
  const std::string& p = run.report.problems[0];
  CHECK(p.find("flow fidelity would need about") != std::string::npos);
  CHECK(p.find("above its limit of 16 GiB") != std::string::npos);
  CHECK(run.result.events == 0);  // nothing was simulated
}

TEST_CASE("flow.ranks groups: one rank per TP group at flow fidelity, close to every rank") {
  // 64 H100: TP 8 in each node, PP 2 and DP 4 across 8 nodes under 4 leaves
  // per rail with 3 spines, so data-parallel rings collide on ECMP-hashed uplinks.
  const std::string cluster =
      R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 2, "spines": 3, "routing": "ecmp"}})";
  const Scenario every = small_scenario(cluster, 8, 4, 2);
  const FlowRankRuns runs = run_every_rank_and(every, FlowRanks::Groups);
  const JobReport& all = runs.all;
  const JobReport& one = runs.some;
  CHECK(all.simulated_ranks == 64);
  CHECK(one.simulated_ranks == 8);
  CHECK(one.events * 8 == all.events);
  // The approximation: each group's other members behave like its simulated one.
  MESSAGE("every rank " << all.iteration_time_s << " s, groups " << one.iteration_time_s << " s");
  CHECK(one.iteration_time_s == doctest::Approx(all.iteration_time_s).epsilon(0.01));
  // Said in the report, never silent; the analytical fidelity ignores the key (it already runs representatives).
  bool said = false;
  for (const std::string& w : one.warnings) said = said || w.find("flow.ranks \"groups\": 8 of 64 ranks") == 0;
  CHECK(said);
  Scenario groups = every;
  groups.flow_ranks = FlowRanks::Groups;
  CHECK(run_job(groups, Fidelity::Analytical).report.iteration_time_s ==
        run_job(every, Fidelity::Analytical).report.iteration_time_s);
  // A bad value is an input error at its pointer.
  try {
    load_scenario_file(std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/examples/llama3.1-405b-16384xh100.json",
                       {"flow.ranks=some"}, catalog());
    FAIL("expected an input error");
  } catch (const InputError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].pointer == "/flow/ranks");
  }
}

TEST_CASE("flow.ranks auto: one rank per TP group where the cluster is symmetric, to the nanosecond") {
  // Symmetric: one spine, or adaptive routing over several spines (InfiniBand's
  // default, a leaf's up-links one bundle), or one leaf per rail with TP over
  // whole nodes, or a fat-tree of one leaf; TP 8 and TP 4 (two groups per node,
  // rails 0-3 and 4-7).
  struct Case {
    std::string cluster;
    int tp, dp, pp;
  };
  const Case cases[] = {
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 2, "spines": 1, "routing": "ecmp"}})", 8, 4, 2},
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 2, "spines": 1, "routing": "ecmp"}})", 4, 8, 2},
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 2, "spines": 3}})", 8, 4, 2},
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 2, "spines": 3}})", 4, 8, 2},
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 4, "spines": 8, "oversubscription": 2,
           "routing": "adaptive"}})",
       8, 8, 1},
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"routing": "ecmp"}})", 8, 4, 2},
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"kind": "fat-tree", "nodes_per_leaf": 8}})", 4, 4, 4},
  };
  for (const Case& c : cases) {
    CAPTURE(c.cluster);
    CAPTURE(c.tp);
    const FlowRankRuns runs = run_every_rank_and(small_scenario(c.cluster, c.tp, c.dp, c.pp), FlowRanks::Auto);
    const JobReport& all = runs.all;
    const JobReport& one = runs.some;
    CHECK(all.flow_ranks == "all");
    // One rank per TP group, or fewer where the rank images leave fewer (next test case).
    CHECK((one.flow_ranks == "groups (exact)" || one.flow_ranks == "images (exact)"));
    CHECK(one.simulated_ranks * c.tp <= all.simulated_ranks);
    CHECK(Time::seconds(one.iteration_time_s).count_ns() == Time::seconds(all.iteration_time_s).count_ns());
    CHECK(one.breakdown.exposed_comm_s == all.breakdown.exposed_comm_s);
    for (const std::string& w : one.warnings) CHECK(w.find("flow.ranks") == std::string::npos);  // exact: no warning
  }
  // Not provably exact, so every rank: ECMP over several spines (the images of
  // a flow hash to different spines), also with several queue pairs per
  // connection, a straggler. (A fat-tree of several leaves, whose up-links
  // every rail shares, runs the rank images of the next test case.)
  const std::string asymmetric[] = {
      R"({"node": "dgx-h100", "nodes": 8})",
      R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 2, "spines": 3, "routing": "ecmp"}})",
      R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 2, "spines": 3, "routing": "ecmp",
          "qps_per_connection": 4}})",
  };
  for (const std::string& cluster : asymmetric) {
    CAPTURE(cluster);
    Scenario s = small_scenario(cluster, 8, 4, 2);
    if (cluster == asymmetric[0]) s.cluster.slowdowns.push_back(GpuSlowdown{3, 1.2, {}});
    const JobReport r = run_job(s, Fidelity::Flow).report;
    CHECK(r.flow_ranks == "all");
    CHECK(r.simulated_ranks == 64);
  }
  // Analytical fidelity says nothing about flow ranks.
  CHECK(run_job(small_scenario(cases[0].cluster, 8, 4, 2), Fidelity::Analytical).report.flow_ranks.empty());
}

TEST_CASE("flow.ranks auto: rank images with context parallelism, to the nanosecond") {
  // Context parallelism inside a node (TP 2 x CP 2, TP 1 x CP 4, ring and
  // Ulysses) and across nodes (TP 8 x CP 2), data-parallel replicas whose
  // traffic is the image of the first ones' under a shift of whole nodes:
  // inside one leaf (the leaf's up-links shared by the images) and over two
  // leaves (the leaves swapped), and with TP > 1 the rotation of the TP index
  // inside each node too; adaptive routing over 3 spines, and fat-trees of two
  // leaves (TP 8, no CP). ZeRO-1 (reduce-scatter and all-gather over
  // the data-parallel rings); ZeRO-0's all-reduce below.
  struct Case {
    std::string cluster;
    int tp, dp, pp;
    std::string cp;
    int simulated;  // ranks the images leave
  };
  const std::string two_leaves = R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 2, "spines": 3}})";
  const std::string one_leaf = R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 4, "spines": 3}})";
  const Case cases[] = {
      {two_leaves, 2, 8, 2, R"(, "cp": 2)", 16},
      {one_leaf, 2, 8, 2, R"(, "cp": 2)", 8},
      {one_leaf, 2, 4, 2, R"(, "cp": 4)", 8},
      {one_leaf, 1, 4, 4, R"(, "cp": 4)", 32},
      {one_leaf, 2, 8, 2, R"(, "cp": 2, "cp_kind": "ulysses")", 8},
      {one_leaf, 8, 2, 2, R"(, "cp": 2)", 4},
      // Leaves of 3 nodes cut the stages of 4 unevenly: the TP rotation alone.
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 3, "spines": 3}})", 2, 8, 2, R"(, "cp": 2)",
       32},
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"kind": "fat-tree", "nodes_per_leaf": 2, "spines": 1}})", 8, 4, 2,
       "", 4},
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"kind": "fat-tree", "nodes_per_leaf": 2, "spines": 4}})", 8, 4, 2,
       "", 4},
  };
  for (const Case& c : cases) {
    CAPTURE(c.cluster);
    CAPTURE(c.tp);
    CAPTURE(c.cp);
    const FlowRankRuns runs =
        run_every_rank_and(small_scenario(c.cluster, c.tp, c.dp, c.pp, true, c.cp + R"(, "zero": 1)"), FlowRanks::Auto);
    const JobReport& all = runs.all;
    const JobReport& some = runs.some;
    CHECK(all.simulated_ranks == 64);
    CHECK(some.flow_ranks == "images (exact)");
    CHECK(some.simulated_ranks == c.simulated);
    CHECK(Time::seconds(some.iteration_time_s).count_ns() == Time::seconds(all.iteration_time_s).count_ns());
    CHECK(some.breakdown.compute_s == all.breakdown.compute_s);
    CHECK(some.breakdown.exposed_comm_s == all.breakdown.exposed_comm_s);
    CHECK(some.breakdown.bubble_s == all.breakdown.bubble_s);
    CHECK(some.breakdown.idle_s == all.breakdown.idle_s);
    for (const std::string& w : some.warnings) CHECK(w.find("flow.ranks") == std::string::npos);
  }
  // Not symmetric, so every rank: ECMP over several spines, a straggler; and
  // ZeRO-0, whose small all-reduces take NCCL's double binary tree over
  // the nodes (rooted, so not symmetric): the run finds it and runs every rank.
  struct Asymmetric {
    std::string cluster, parallel;
    bool straggler;
  };
  const Asymmetric asymmetric[] = {
      {R"({"node": "dgx-h100", "nodes": 8, "fabric": {"nodes_per_leaf": 2, "spines": 3, "routing": "ecmp"}})",
       R"(, "cp": 2, "zero": 1)", false},
      {one_leaf, R"(, "cp": 2, "zero": 1)", true},
      {one_leaf, R"(, "cp": 2, "zero": 0)", false},
  };
  for (const Asymmetric& a : asymmetric) {
    CAPTURE(a.cluster);
    CAPTURE(a.parallel);
    Scenario s = small_scenario(a.cluster, 2, 8, 2, true, a.parallel);
    if (a.straggler) s.cluster.slowdowns.push_back(GpuSlowdown{3, 1.2, {}});
    const JobReport r = run_job(s, Fidelity::Flow).report;
    CHECK(r.flow_ranks == "all");
    CHECK(r.simulated_ranks == 64);
  }
}
