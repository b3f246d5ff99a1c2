// Cross-datacenter training: DP across the WAN, PP across the WAN and DiLoCo
// (docs/cross-datacenter.md), the DiLoCo outer-step timing and its input checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "models/diloco.hpp"
#include "scenario_fixtures.hpp"
#include "tools/frontend/diloco_input.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/outer_loop.hpp"
#include "tools/frontend/sweep.hpp"

using namespace trainsim;
using trainsim::testing::catalog;
using trainsim::testing::errors_of;

namespace {

// Llama-3 8B on two sites of two DGX H100 nodes each, joined by one WAN link.
const char* const kTwoSites = R"({
  "name": "two-sites",
  "model": "llama3-8b",
  "cluster": {"node": "dgx-h100", "nodes": 4, "fabric": {"kind": "rail-optimized", "nodes_per_leaf": 2},
              "datacenters": {"count": 2, "wan_bandwidth": "100Gbps", "wan_latency": "20ms"}},
  "parallel": {"tp": 8, "pp": 1, "dp": 4, "micro_batch": 1, "global_batch": 64, "sequence_parallel": true,
               "zero": 1},
  "training": {"seq_len": 4096}
})";

enum class Strategy { DpAcrossWan, PpAcrossWan, Diloco };

std::vector<std::string> sets_of(Strategy s, const std::string& wan_bandwidth) {
  std::vector<std::string> sets = {"cluster.datacenters.wan_bandwidth=" + wan_bandwidth};
  if (s == Strategy::PpAcrossWan) {
    // Megatron order (pp outermost): stage 0 in one datacenter, stage 1 in the other.
    sets.push_back("parallel.pp=2");
    sets.push_back("parallel.dp=2");
  }
  if (s == Strategy::Diloco) sets.push_back(R"(diloco={"inner_steps": 100})");
  return sets;
}

JobReport run_strategy(Strategy s, const std::string& wan_bandwidth, Fidelity f = Fidelity::Analytical) {
  return run_job(load_scenario_text(kTwoSites, "two-sites.json", "", sets_of(s, wan_bandwidth), catalog()), f).report;
}

}  // namespace

TEST_CASE(
    "two sites, 100 Gbps and 20 ms: DiLoCo H=100, PP across the WAN and DP across it rank by their WAN "
    "traffic, and the gap closes as the WAN grows") {
  // WAN bytes per step: DP all-reduces every gradient (fp32) across the sites,
  // PP sends activations of every micro-batch across, DiLoCo all-reduces the
  // model once per 100 steps. A faster WAN helps the WAN-bound ones most.
  const std::vector<std::string> sweep = {"100Gbps", "400Gbps", "1.6Tbps"};
  double last_gap = 1e9;
  for (const std::string& bw : sweep) {
    CAPTURE(bw);
    const JobReport dp = run_strategy(Strategy::DpAcrossWan, bw);
    const JobReport pp = run_strategy(Strategy::PpAcrossWan, bw);
    const JobReport lo = run_strategy(Strategy::Diloco, bw);
    REQUIRE(dp.feasible);
    REQUIRE(pp.feasible);
    REQUIRE(lo.feasible);
    REQUIRE(lo.diloco.has_value());
    CHECK(lo.tokens_per_s > pp.tokens_per_s);
    if (bw == "100Gbps") CHECK(pp.tokens_per_s > dp.tokens_per_s);
    const double gap = lo.tokens_per_s / dp.tokens_per_s;
    CHECK(gap < last_gap);
    last_gap = gap;
    // DiLoCo's WAN traffic per token is H (100) times smaller than data parallelism's at the same precision (fp32).
    CHECK(lo.diloco->wan_bytes_per_token * 100 == doctest::Approx(lo.diloco->dp_wan_bytes_per_token));
  }
  // At 100 Gbps DP spends most of its step on the WAN; at 1.6 Tbps DiLoCo leads by far less.
  CHECK(last_gap < 0.7 * (run_strategy(Strategy::Diloco, "100Gbps").tokens_per_s /
                          run_strategy(Strategy::DpAcrossWan, "100Gbps").tokens_per_s));
}

// 1F1B with `extra` more forwards in flight on every stage but the last
// (tools/make-wan-pipeline-schedule, docs/cross-datacenter.md).
std::string wan_1f1b(int pp, int micro_batches, int extra) {
  std::string out = R"({"units": [)";
  for (int s = 0; s < pp; ++s) {
    const int warmup = std::min(micro_batches, pp - 1 - s + (s < pp - 1 ? extra : 0));
    std::string units;
    auto add = [&units](const std::string& u) { units += (units.empty() ? "\"" : ", \"") + u + "\""; };
    for (int i = 0; i < warmup; ++i) add("F" + std::to_string(i));
    int next = warmup;
    for (int mb = 0; mb < micro_batches; ++mb) {
      if (next < micro_batches) add("F" + std::to_string(next++));
      add("BW" + std::to_string(mb));
    }
    out += (s == 0 ? "[" : ", [") + units + "]";
  }
  return out + "]}";
}

TEST_CASE("PP across the WAN: more micro-batches in flight before the slow link hide its latency, at a memory cost") {
  auto run = [](const std::string& schedule) {
    std::vector<std::string> sets = sets_of(Strategy::PpAcrossWan, "100Gbps");
    sets.push_back("parallel.schedule=" + schedule);
    return run_job(load_scenario_text(kTwoSites, "s.json", "", sets, catalog()), Fidelity::Analytical).report;
  };
  // 64 sequences over dp 2 at micro-batch 1: 32 micro-batches per pipeline.
  const JobReport plain = run(wan_1f1b(2, 32, 0));
  const JobReport deep = run(wan_1f1b(2, 32, 8));
  REQUIRE(plain.feasible);
  REQUIRE(deep.feasible);
  const JobReport named = run_strategy(Strategy::PpAcrossWan, "100Gbps");
  CHECK(plain.iteration_time_s == doctest::Approx(named.iteration_time_s).epsilon(1e-9));  // extra 0 is 1F1B
  const auto pp = static_cast<std::size_t>(CommClass::PP);
  CHECK(deep.breakdown.exposed_comm_s[pp] < 0.5 * plain.breakdown.exposed_comm_s[pp]);
  CHECK(deep.iteration_time_s < 0.9 * plain.iteration_time_s);
  CHECK(deep.peak_memory_gib > plain.peak_memory_gib);
}

TEST_CASE("the report names the communicators that cross the WAN") {
  auto crossing = [](const JobReport& r, const std::string& kind) {
    for (const WanCrossing& w : r.wan) {
      if (w.kind == kind) return w.crossing;
    }
    return -1;
  };
  const JobReport dp = run_strategy(Strategy::DpAcrossWan, "100Gbps");
  CHECK(crossing(dp, "dp") > 0);
  CHECK(crossing(dp, "tp") == 0);
  const JobReport pp = run_strategy(Strategy::PpAcrossWan, "100Gbps");
  CHECK(crossing(pp, "pp") > 0);
  CHECK(crossing(pp, "dp") == 0);
  const JobReport lo = run_strategy(Strategy::Diloco, "100Gbps");
  CHECK(crossing(lo, "diloco.outer") == 8);  // one per TP rank
  CHECK(crossing(lo, "dp") == -1);           // the inner steps' reduction stays inside the site
  // Per inner step the WAN carries the outer step's bytes over H = 100.
  REQUIRE(lo.wan_links.size() == 1);
  CHECK(lo.wan_links[0].bytes * 100 == doctest::Approx(lo.diloco->wan_bytes_per_outer_step));
  CHECK(lo.wan_links[0].kinds == std::vector<std::string>{"diloco.outer"});
  CHECK(lo.wan_links[0].busy_fraction == -1);
  CHECK(to_json(dp).contains("wan_communicators"));
  CHECK(summary_text(pp).find("across the WAN:") != std::string::npos);
}

TEST_CASE(
    "WAN utilisation: the bytes per iteration on the WAN are the hand count of the cross-site gradient reduction") {
  // One node per site, plain data parallelism (tp 1, no ZeRO): each step
  // all-reduces every gradient in fp32 over 16 GPUs, 8 per site. The
  // hierarchical all-reduce sends each GPU's shard (1/8 of the gradients)
  // around a ring over the 2 sites: each direction of the WAN carries the
  // whole gradient once, so the WAN carries 2 x 4 bytes x gradients.
  const char* const kDpOverWan = R"({
    "name": "dp-over-wan", "model": "gpt3-350m",
    "cluster": {"node": "dgx-h100", "nodes": 2, "fabric": {"kind": "rail-optimized", "nodes_per_leaf": 1},
                "datacenters": {"count": 2, "wan_bandwidth": "100Gbps", "wan_latency": "20ms"}},
    "parallel": {"tp": 1, "pp": 1, "dp": 16, "micro_batch": 1, "global_batch": 16, "zero": 0},
    "training": {"seq_len": 2048}
  })";
  const Scenario s = load_scenario_text(kDpOverWan, "dp-over-wan.json", "", {}, catalog());
  const TransformerSpec& m = s.model;
  // The gradients the planner reduces: every layer, the embedding and, untied, the LM head
  // (GPT-3's tied head at pp = 1 is the embedding itself).
  const double gradients =
      m.layers * m.params_per_layer() + m.embedding_params() + (m.tied_embeddings ? 0 : double(m.vocab) * m.hidden);
  const double expected = 2.0 * 4.0 * gradients;
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    const JobReport r = run_job(s, f).report;
    REQUIRE(r.wan_links.size() == 1);
    const WanLinkLoad& w = r.wan_links.front();
    CHECK(w.site_a == 0);
    CHECK(w.site_b == 1);
    CHECK(w.links == 1);
    CHECK(w.bytes == doctest::Approx(expected).epsilon(1e-6));
    CHECK(w.kinds == std::vector<std::string>{"dp"});
    CHECK(w.utilization == doctest::Approx(w.bytes / (2 * 12.5e9 * r.iteration_time_s)));
    CHECK(w.utilization > 0);
    CHECK(w.utilization < 1);
    if (f == Fidelity::Flow) {
      // The busiest direction is busy at least as long as its bytes take at full rate.
      CHECK(w.busy_fraction >= w.utilization * 0.999);
      CHECK(w.busy_fraction <= 1);
    } else {
      CHECK(w.busy_fraction == -1);  // no link occupancy in the analytical model
    }
    CHECK(to_json(r).at("wan_links").at(0).at("communicators") == nlohmann::json::array({"dp"}));
    CHECK(summary_text(r).find("WAN site 0 - site 1") != std::string::npos);
  }
}

TEST_CASE("DiLoCo: the outer step at both fidelities, and what the section changes") {
  const JobReport an = run_strategy(Strategy::Diloco, "100Gbps");
  const JobReport fl = run_strategy(Strategy::Diloco, "100Gbps", Fidelity::Flow);
  REQUIRE(an.diloco.has_value());
  REQUIRE(fl.diloco.has_value());
  CHECK(an.gpus == 32);
  CHECK(fl.simulated_ranks == 1);  // one site's ranks, their images folded (a site is symmetric)
  CHECK(fl.flow_ranks == "images (exact)");
  // The outer all-reduce: a ring over two sites sends 2(n-1)/n = 1 buffer, so each
  // site sends its whole fp32 model over the 12.5 GB/s link its 16 GPUs share.
  const double params = 8.03e9;
  const double wan_only = params * 4 / 12.5e9;
  CHECK(an.diloco->fragment_sync_s > wan_only);
  CHECK(an.diloco->fragment_sync_s < 1.3 * wan_only);
  CHECK(fl.diloco->fragment_sync_s == doctest::Approx(an.diloco->fragment_sync_s).epsilon(0.05));
  CHECK(an.diloco->timing.outer_step_s > 100 * an.diloco->inner_step_s);
  CHECK(an.diloco->timing.compute_utilization < 1.0);
  CHECK(an.diloco->timing.compute_utilization > 0.9);
  CHECK(an.iteration_time_s == doctest::Approx(an.diloco->timing.outer_step_s / 100));
  // int8 quarters the bytes; Streaming DiLoCo's overlap hides the rest of the sync.
  const Scenario base = load_scenario_text(kTwoSites, "s.json", "",
                                           {R"(diloco={"inner_steps": 100, "outer_precision": "int8"})"}, catalog());
  const JobReport q = run_job(base, Fidelity::Analytical).report;
  CHECK(q.diloco->wan_bytes_per_token * 4 == doctest::Approx(an.diloco->wan_bytes_per_token));
  CHECK(q.diloco->timing.exposed_sync_s < an.diloco->timing.exposed_sync_s);
  const Scenario streaming = load_scenario_text(
      kTwoSites, "s.json", "",
      {R"(diloco={"inner_steps": 100, "outer_precision": "int8", "fragments": 4, "overlap_steps": 5})"}, catalog());
  const JobReport st = run_job(streaming, Fidelity::Analytical).report;
  CHECK(st.diloco->timing.exposed_sync_s < q.diloco->timing.exposed_sync_s);
  CHECK(st.diloco->timing.compute_utilization > q.diloco->timing.compute_utilization);
  // The outer state (fp32 parameters and momentum of the GPU's shard) is in the memory report, unless on the host.
  const Scenario host =
      load_scenario_text(kTwoSites, "s.json", "", {R"(diloco={"inner_steps": 100, "outer_state": "host"})"}, catalog());
  const JobReport h = run_job(host, Fidelity::Analytical).report;
  CHECK(h.diloco->outer_state_gib == 0);
  CHECK(an.diloco->outer_state_gib > 0);
  CHECK(an.peak_memory_gib > h.peak_memory_gib);
  // Deterministic.
  CHECK(run_strategy(Strategy::Diloco, "100Gbps").iteration_time_s == an.iteration_time_s);
}

TEST_CASE("outer loop: a diloco section selects the DiLoCo strategy, a plain job none") {
  const Scenario plain = load_scenario_text(kTwoSites, "two-sites.json", "", {}, catalog());
  CHECK(outer_loop_of(plain) == nullptr);
  const Scenario lo =
      load_scenario_text(kTwoSites, "two-sites.json", "", sets_of(Strategy::Diloco, "100Gbps"), catalog());
  const std::unique_ptr<OuterLoop> outer = outer_loop_of(lo);
  REQUIRE(outer != nullptr);
  CHECK(std::string(outer->name()) == "diloco");
  // run_job goes through the strategy: the same figures as asking it directly.
  const JobReport direct = outer->run(lo, Fidelity::Analytical).report;
  const JobReport via = run_job(lo, Fidelity::Analytical).report;
  REQUIRE(via.diloco.has_value());
  CHECK(via.iteration_time_s == direct.iteration_time_s);
  CHECK(via.diloco->timing.outer_step_s == direct.diloco->timing.outer_step_s);
}

TEST_CASE("DiLoCo per-layer outer all-reduce: every layer group pays the ring's WAN latencies, same bytes") {
  // Llama-3 8B: embedding, 32 layers, head = 34 groups, all-reduced one after
  // another; a ring over 2 sites crosses the 20 ms WAN 2 (2 - 1) times per group.
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    const JobReport fused =
        run_job(load_scenario_text(kTwoSites, "s.json", "",
                                   {R"(diloco={"inner_steps": 100, "outer_precision": "int8"})"}, catalog()),
                f)
            .report;
    const JobReport layer =
        run_job(load_scenario_text(kTwoSites, "s.json", "", {R"(diloco={"inner_steps": 100, "outer_precision": "int8",
                                                                   "outer_allreduce": "per_layer"})"},
                                   catalog()),
                f)
            .report;
    REQUIRE(fused.diloco.has_value());
    REQUIRE(layer.diloco.has_value());
    const double extra = layer.diloco->fragment_sync_s - fused.diloco->fragment_sync_s;
    CHECK(extra == doctest::Approx(33 * 2 * 0.020).epsilon(0.1));
    CHECK(layer.diloco->wan_bytes_per_token == fused.diloco->wan_bytes_per_token);
    CHECK(layer.diloco->timing.compute_utilization < fused.diloco->timing.compute_utilization);
  }
  CHECK(errors_of(kTwoSites, {R"(diloco={"inner_steps": 10, "outer_allreduce": "bucketed"})"})
            .find("/diloco/outer_allreduce") != std::string::npos);
}

TEST_CASE(
    "the auto-search ranks DP across the WAN, PP across it and DiLoCo variants, and the gap closes on a fast WAN") {
  // scenarios/sweeps/two-sites-auto.json: 2 layouts (pp 1: DP across the WAN;
  // pp 2: a stage per site) x (no DiLoCo, DiLoCo fp32, DiLoCo int8).
  SweepSpec spec =
      load_sweep_file(std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/sweeps/two-sites-auto.json", catalog());
  REQUIRE(spec.search_diloco.size() == 3);
  auto tokens_per_s = [&](const std::string& wan_bandwidth) {
    nlohmann::json base = nlohmann::json::parse(spec.base_text);
    base["cluster"]["datacenters"]["wan_bandwidth"] = wan_bandwidth;
    spec.base_text = base.dump();
    const SweepPlan plan = expand_sweep(spec, catalog());
    REQUIRE(plan.points.size() == 6);
    CHECK(plan.columns.back() == "diloco");
    std::map<std::string, double> out;  // "pp=1 null", "pp=2 {...}", ...
    for (const SweepRow& r : run_sweep(plan.points, 1, spec, catalog())) {
      REQUIRE(r.status == SweepStatus::Ok);
      std::string key;
      for (const auto& [k, v] : r.overrides) {
        if (k == "parallel.pp") key += "pp=" + v.dump() + " ";
        if (k == "diloco") key += v.dump();
      }
      out[key] = r.report.tokens_per_s;
    }
    return out;
  };
  const std::string fp32 = R"({"inner_steps":100})", int8 = R"({"inner_steps":100,"outer_precision":"int8"})";
  const std::map<std::string, double> slow = tokens_per_s("100Gbps");
  CHECK(slow.at("pp=1 " + int8) > slow.at("pp=1 " + fp32));  // a quarter of the outer bytes
  CHECK(slow.at("pp=1 " + fp32) > slow.at("pp=2 null"));     // PP across the WAN
  CHECK(slow.at("pp=2 null") > slow.at("pp=1 null"));        // DP across the WAN
  const std::map<std::string, double> fast = tokens_per_s("1.6Tbps");
  CHECK(fast.at("pp=1 " + fp32) / fast.at("pp=1 null") < slow.at("pp=1 " + fp32) / slow.at("pp=1 null"));
  CHECK(fast.at("pp=1 " + int8) / fast.at("pp=1 " + fp32) < slow.at("pp=1 " + int8) / slow.at("pp=1 " + fp32));
}

TEST_CASE("search_space.diloco: bad input names the key") {
  const std::string sweep = R"({"base": "../examples/llama3-8b-two-sites-wan.json", "search": "auto",
                                "search_space": {"diloco": [5]}})";
  try {
    load_sweep_text(sweep, "s.json", std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/sweeps", catalog());
    FAIL("expected an input error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("/search_space/diloco/0") != std::string::npos);
  }
}

TEST_CASE("wan_links: several WAN paths between the sites carry the cross-site step in parallel, at both fidelities") {
  const std::vector<std::string> diloco = {R"(diloco={"inner_steps": 100})"};
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    std::vector<std::string> four = diloco;
    four.push_back("cluster.datacenters.wan_links=4");
    const JobReport one_link = run_job(load_scenario_text(kTwoSites, "s.json", "", diloco, catalog()), f).report;
    const JobReport four_links = run_job(load_scenario_text(kTwoSites, "s.json", "", four, catalog()), f).report;
    REQUIRE(one_link.diloco.has_value());
    REQUIRE(four_links.diloco.has_value());
    // The outer all-reduce is bandwidth-bound (2.6 s on one 100 Gb/s link,
    // 40 ms of latency): the 16 rings of a site spread over the links.
    CHECK(four_links.diloco->fragment_sync_s <
          (f == Fidelity::Analytical ? 0.3 : 0.6) * one_link.diloco->fragment_sync_s);
    CHECK(four_links.diloco->wan_bytes_per_token == one_link.diloco->wan_bytes_per_token);
    // DP across the WAN: the gradient reduction crosses faster too (its
    // per-bucket WAN latencies stay: 4.1 s -> 2.6 s analytical, 2.8 s flow).
    const JobReport dp_one = run_job(load_scenario_text(kTwoSites, "s.json", "", {}, catalog()), f).report;
    const JobReport dp_four =
        run_job(load_scenario_text(kTwoSites, "s.json", "", {"cluster.datacenters.wan_links=4"}, catalog()), f).report;
    CHECK(dp_four.iteration_time_s < 0.75 * dp_one.iteration_time_s);
  }
  CHECK(errors_of(kTwoSites, {"cluster.datacenters.wan_links=0"}).find("/cluster/datacenters/wan_links") !=
        std::string::npos);
}

TEST_CASE("diloco_timing: overlap, fragments and a saturated WAN") {
  DilocoSpec spec;
  spec.inner_steps = 10;
  // Alone: inner steps, then the whole sync and the outer compute.
  DilocoTiming t = diloco_timing(spec, 1.0, 4.0, 0.5);
  CHECK(t.outer_step_s == doctest::Approx(14.5));
  CHECK(t.compute_utilization == doctest::Approx(10.0 / 14.5));
  // Overlapped with 3 inner steps: 1 s of the 4 stays exposed.
  spec.overlap_steps = 3;
  t = diloco_timing(spec, 1.0, 4.0, 0.5);
  CHECK(t.exposed_sync_s == doctest::Approx(1.0));
  CHECK(t.outer_step_s == doctest::Approx(11.5));
  // Four fragments of 1 s each, each hidden behind 3 steps.
  spec.fragments = 4;
  t = diloco_timing(spec, 1.0, 1.0, 0.125);
  CHECK(t.exposed_sync_s == doctest::Approx(0.0));
  CHECK(t.outer_step_s == doctest::Approx(10.5));
  // A WAN busier than the outer step: the communication sets the pace.
  t = diloco_timing(spec, 1.0, 3.0, 0.0);
  CHECK(t.outer_step_s == doctest::Approx(12.0));
  CHECK(wan_allreduce_bytes(1e9, 4, 1) == doctest::Approx(6e9));
  CHECK(wan_allreduce_bytes(1e9, 1, 1) == 0);
}

TEST_CASE("diloco section: bad input names the key and what was expected") {
  const std::string two = kTwoSites;
  CHECK(errors_of(two, {R"(diloco={"inner_steps": 0})"}).find("bad.json: /diloco/inner_steps: expected an integer") !=
        std::string::npos);
  CHECK(errors_of(two, {R"(diloco={})"}).find("/diloco/inner_steps") != std::string::npos);
  CHECK(errors_of(two, {R"(diloco={"inner_steps": 10, "outer_precision": "int3"})"}).find("/diloco/outer_precision") !=
        std::string::npos);
  CHECK(errors_of(two, {R"(diloco={"inner_steps": 10, "overlap_steps": 11})"}).find("/diloco/overlap_steps") !=
        std::string::npos);
  CHECK(errors_of(two, {R"(diloco={"inner_steps": 10, "inner_step": 3})"}).find("/diloco/inner_step") !=
        std::string::npos);
  CHECK(
      errors_of(two, {R"(diloco={"inner_steps": 10})", "cluster.datacenters.count=1"}).find("datacenters.count >= 2") !=
      std::string::npos);
  CHECK(errors_of(two, {R"(diloco={"inner_steps": 10})", "parallel.dp=2", "parallel.pp=2",
                        "parallel.placement=tp-cp-ep-dp-pp"})
            .find("every replica must sit in one datacenter") != std::string::npos);
  CHECK(errors_of(two, {R"(diloco={"inner_steps": 10})", "parallel.global_batch=63"}).find("/parallel/global_batch") !=
        std::string::npos);
  CHECK(errors_of(two, {R"(diloco={"inner_steps": 10})", R"(reliability={"duration": "30d"})"})
            .find("together with \"reliability\" is not modelled") != std::string::npos);
  CHECK(errors_of(two, {R"(diloco={"inner_steps": 10})", R"(perturbations={"gpus": [{"gpu": 1, "slowdown": 2}]})"})
            .find("no perturbations") != std::string::npos);
  // A section that is not an object, and a cluster that is already invalid: errors, never a crash.
  CHECK(errors_of(two, {"diloco=5"}).find("bad.json: /diloco:") != std::string::npos);
  CHECK(!errors_of(two, {R"(diloco={"inner_steps": 10})", "cluster.nodes=3"}).empty());
  CHECK(!errors_of(two, {R"(diloco={"inner_steps": 10})", "cluster.datacenters.count=3"}).empty());
  // null: no DiLoCo (a sweep axis switches it off).
  CHECK(!load_scenario_text(kTwoSites, "s.json", "", {"diloco=null"}, catalog()).diloco.has_value());
  // Without a placement, DP goes outermost: a pipeline of two stages stays inside each site.
  CHECK(errors_of(two, {R"(diloco={"inner_steps": 10})", "parallel.dp=2", "parallel.pp=2"}).empty());
}

TEST_CASE("docs/limits.md states the diloco section's bounds") {
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/docs/limits.md");
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str().find("| `diloco.inner_steps` | 1 to 1,000,000 |") != std::string::npos);
  CHECK(kMaxDilocoInnerSteps == 1000000);
  CHECK(errors_of(kTwoSites, {R"(diloco={"inner_steps": 1000001})"}).find("/diloco/inner_steps") != std::string::npos);
}
