#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "models/layer_steps.hpp"
#include "models/layout_search.hpp"
#include "models/moe.hpp"
#include "sim/platform.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/report_html.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

// Mixture-of-experts models: presets, routed token counts under skew and
// capacity, expert-parallel groups and gradients, and the iteration time the
// busiest expert-parallel rank sets.

namespace {

const Catalog& catalog() {
  static const Catalog c = load_builtin_catalog();
  return c;
}

// OLMoE (64 experts, top-8) on one DGX H100: EP 8 = DP 8, 8 experts per rank,
// 4 micro-batches per replica; gradient reduction after the backward, so no
// transfer runs beside a kernel and every step's time adds up serially.
const char* kOneNode = R"({
  "model": "olmoe-1b-7b",
  "cluster": {"node": "dgx-h100", "nodes": 1},
  "parallel": {"tp": 1, "dp": 8, "ep": 8, "micro_batch": 1, "global_batch": 32, "dp_overlap": false},
  "training": {"seq_len": 4096, "precision": "bf16", "dropout": false}
})";

Scenario load(const std::vector<std::string>& sets, const std::string& text = kOneNode) {
  return load_scenario_text(text, "moe.json", "", sets, catalog());
}

JobReport run(const Scenario& s) {
  const JobReport r = simulate(s);
  REQUIRE(r.feasible);
  return r;
}

// Seconds of one MoE layer's forward and backward steps on the busiest rank,
// priced alone: kernels by the cost model, EP collectives by the analytical
// network on the group of all eight GPUs (all-to-all-v: from its per-pair bytes).
double moe_layer_seconds(const Scenario& s) {
  const Platform platform(s.cluster, s.profiles);
  const ModelSteps steps = build_model_steps(s.model, s.parallel, s.training);
  const LayerSteps& moe = steps.of(LayerKind::Moe);
  const std::vector<int> members{0, 1, 2, 3, 4, 5, 6, 7};
  const AnalyticalNetwork& net = platform.analytical_network();
  const CommShape ep_group = net.shape(members);
  double total = 0;
  for (const auto* list : {&moe.forward, &moe.backward}) {
    for (const Step& st : *list) {
      if (!st.is_comm) {
        total += platform.costs().seconds(st.op, 0);
      } else {
        REQUIRE(st.comm_class == CommClass::EP);
        total += st.matrix >= 0 ? net.all_to_all_v_seconds(ep_group, members, steps.traffic[st.matrix])
                                : net.collective_seconds(ep_group, st.collective, st.bytes);
      }
    }
  }
  return total;
}

int moe_layers(const TransformerSpec& m) {
  int n = 0;
  for (int l = 0; l < m.layers; ++l) n += m.layer_kind(l) == LayerKind::Moe ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("moe presets: parameter counts of the model cards, dense first layers where the model has them") {
  // Totals the model cards state (billions), within 3%.
  const std::vector<std::pair<const char*, double>> totals = {{"mixtral-8x7b", 46.7},     {"mixtral-8x22b", 141},
                                                              {"deepseek-v2-lite", 15.7}, {"deepseek-v3", 671},
                                                              {"qwen3-30b-a3b", 30.5},    {"qwen3-235b-a22b", 235},
                                                              {"gpt-oss-20b", 20.9},      {"gpt-oss-120b", 116.8},
                                                              {"olmoe-1b-7b", 6.9},       {"dbrx", 132}};
  for (const auto& entry : totals) {
    const auto& name = entry.first;  // named variables: doctest's message macros cannot take a binding (clang 14)
    const double billions = entry.second;
    const TransformerSpec* m = catalog().find_model(name);
    REQUIRE_MESSAGE(m != nullptr, name);
    CHECK_MESSAGE(m->total_params() / 1e9 == doctest::Approx(billions).epsilon(0.03), name);
    CHECK(m->moe.enabled());
  }
  const TransformerSpec& v3 = *catalog().find_model("deepseek-v3");
  CHECK(v3.layer_kind(0) == LayerKind::Dense);
  CHECK(v3.layer_kind(2) == LayerKind::Dense);
  CHECK(v3.layer_kind(3) == LayerKind::Moe);
  CHECK(moe_layers(v3) == 58);
  CHECK(v3.moe.router == RouterKind::SigmoidBias);
}

TEST_CASE("moe routing: the busiest rank's tokens under imbalance, Zipf and capacity limits") {
  const Scenario base = load({});
  const double tokens = 4096, k = 8;
  SUBCASE("uniform routing: every rank gets tokens * top_k") {
    const RoutedTokens rt = routed_tokens(base.model, base.parallel, base.training);
    CHECK(rt.max_rank_tokens == doctest::Approx(tokens * k));
    for (double t : rt.rank_tokens) CHECK(t == doctest::Approx(tokens * k));
    CHECK(rt.dropped_fraction == doctest::Approx(0));
  }
  SUBCASE("an imbalance factor f gives the busiest rank f times the mean") {
    const Scenario s = load({"training.routing={\"distribution\": \"imbalance\", \"imbalance\": 3}"});
    const RoutedTokens rt = routed_tokens(s.model, s.parallel, s.training);
    CHECK(rt.max_rank_tokens == doctest::Approx(3 * tokens * k));
    CHECK(rt.rank_tokens[1] == doctest::Approx((8 - 3) / 7.0 * tokens * k));
  }
  SUBCASE("capacity factor 1.0 vs 2.0: the hot rank keeps one or two even shares") {
    // Imbalance 3: each hot expert is offered 3x its even share; the others 5/7 of it.
    const std::string skew = "training.routing={\"distribution\": \"imbalance\", \"imbalance\": 3}";
    const RoutedTokens one = [&] {
      const Scenario s = load({skew, "model={\"preset\": \"olmoe-1b-7b\", \"moe\": {\"capacity_factor\": 1.0}}"});
      return routed_tokens(s.model, s.parallel, s.training);
    }();
    const RoutedTokens two = [&] {
      const Scenario s = load({skew, "model={\"preset\": \"olmoe-1b-7b\", \"moe\": {\"capacity_factor\": 2.0}}"});
      return routed_tokens(s.model, s.parallel, s.training);
    }();
    CHECK(one.max_rank_tokens == doctest::Approx(tokens * k));
    CHECK(two.max_rank_tokens == doctest::Approx(2 * tokens * k));
    // Dropped: (3 - 1) / 8 resp. (3 - 2) / 8 of the group's copies, all on the hot rank.
    CHECK(one.dropped_fraction == doctest::Approx(2.0 / 8));
    CHECK(two.dropped_fraction == doctest::Approx(1.0 / 8));
  }
  SUBCASE("Zipf routing is seeded: the same seed gives the same loads, another seed others") {
    auto shares = [&](int seed) {
      const Scenario s = load({"training.routing={\"distribution\": \"zipf\", \"zipf_exponent\": 1.2, \"seed\": " +
                               std::to_string(seed) + "}"});
      return expert_shares(s.model.moe, s.training.routing, s.parallel.ep);
    };
    CHECK(shares(7) == shares(7));
    CHECK(shares(7) != shares(8));
    const std::vector<double> z = shares(7);
    double sum = 0, top = 0;
    for (double x : z) sum += x, top = std::max(top, x);
    CHECK(sum == doctest::Approx(1.0));
    double harmonic = 0;  // the most popular expert gets 1 / sum_r r^-1.2
    for (int r = 1; r <= 64; ++r) harmonic += std::pow(r, -1.2);
    CHECK(top == doctest::Approx(1 / harmonic));
  }
}

TEST_CASE("moe: doubling the routing skew lengthens the iteration by the busiest rank's extra expert time") {
  const Scenario a = load({"training.routing={\"distribution\": \"imbalance\", \"imbalance\": 1.5}"});
  const Scenario b = load({"training.routing={\"distribution\": \"imbalance\", \"imbalance\": 3}"});
  const double per_layer = moe_layer_seconds(b) - moe_layer_seconds(a);
  CHECK(per_layer > 0);
  // Every micro-batch (4) runs every MoE layer (16) forward and backward on the busiest rank's counts.
  const double expected = 4.0 * moe_layers(a.model) * per_layer;
  const double delta = run(b).iteration_time_s - run(a).iteration_time_s;
  CHECK(delta == doctest::Approx(expected).epsilon(1e-4));
}

TEST_CASE("moe: capacity factor 1.0 vs 2.0 differ by the time of the tokens the hot rank keeps") {
  const std::string skew = "training.routing={\"distribution\": \"imbalance\", \"imbalance\": 3}";
  const Scenario one = load({skew, "model={\"preset\": \"olmoe-1b-7b\", \"moe\": {\"capacity_factor\": 1.0}}"});
  const Scenario two = load({skew, "model={\"preset\": \"olmoe-1b-7b\", \"moe\": {\"capacity_factor\": 2.0}}"});
  const double expected = 4.0 * moe_layers(one.model) * (moe_layer_seconds(two) - moe_layer_seconds(one));
  CHECK(expected > 0);
  CHECK(run(two).iteration_time_s - run(one).iteration_time_s == doctest::Approx(expected).epsilon(1e-4));
  // Uniform routing never reaches capacity 1.0: the same time as dropless.
  const Scenario uniform_cf = load({"model={\"preset\": \"olmoe-1b-7b\", \"moe\": {\"capacity_factor\": 1.0}}"});
  CHECK(run(uniform_cf).iteration_time_s == run(load({})).iteration_time_s);
}

TEST_CASE("moe: expert-parallel groups, expert gradients over the expert data-parallel group, memory per rank") {
  const std::string text = R"({
    "model": "mixtral-8x7b",
    "cluster": {"node": "dgx-h100", "nodes": 4},
    "parallel": {"tp": 2, "pp": 2, "dp": 8, "ep": 4, "etp": 1, "micro_batch": 1, "global_batch": 64,
                 "sequence_parallel": true, "zero": 1},
    "training": {"seq_len": 4096, "precision": "bf16", "dropout": false}
  })";
  const Scenario s = load({}, text);
  // tp*dp = 16 ranks per stage: ep*etp = 4 -> edp = 4.
  CHECK(expert_dp(s.parallel) == 4);
  for (int d = 0; d < 8; ++d) {
    for (int t = 0; t < 2; ++t) {
      const ExpertCoord e = expert_coord(s.parallel, t, 0, d);
      const DenseCoord back = dense_coord(s.parallel, e);
      CHECK(back.tp == t);
      CHECK(back.dp == d);
    }
  }
  const JobRun job = run_job(s);
  REQUIRE(job.report.feasible);
  int ep_groups = 0, edp_groups = 0;
  for (const Communicator& c : job.plan.setup.comms) {
    if (c.name.rfind("ep group", 0) == 0) {
      ++ep_groups;
      CHECK(c.members.size() == 4);
      // etp 1: the EP group is four consecutive ranks of the (tp, dp) order, GPUs 0-3 on stage 0.
      if (c.name == "ep group [stage 0]" && c.members.front() == 0) CHECK(c.members == std::vector<int>{0, 1, 2, 3});
    }
    if (c.name.rfind("expert dp group", 0) == 0) {
      ++edp_groups;
      CHECK(c.members.size() == 4);
    }
  }
  CHECK(ep_groups > 0);
  CHECK(edp_groups > 0);
  bool expert_grads = false;
  const LabelTable& labels = job.plan.setup.programs[0].labels;
  for (std::uint32_t l = 0; l < labels.size(); ++l) expert_grads |= labels[l] == "edp.rs.grads";
  CHECK(expert_grads);  // ZeRO-1: expert gradients reduce-scattered over edp
  CHECK(job.report.breakdown.exposed_comm_s[static_cast<std::size_t>(CommClass::EP)] > 0);

  // Doubling ep halves the routed experts' weights on a rank (16 MoE layers per stage, 2 B each).
  const Scenario ep8 = load({"parallel.ep=8"}, text);
  const double expert_params = 3.0 * 4096 * 14336;  // one SwiGLU expert
  const double weights4 = stage_memory(s.model, s.parallel, s.training, 0).weights;
  const double weights8 = stage_memory(ep8.model, ep8.parallel, ep8.training, 0).weights;
  CHECK(weights4 - weights8 == doctest::Approx(16 * expert_params * (8.0 / 4 - 8.0 / 8) * 2));
}

TEST_CASE("moe: the shipped examples run at analytical fidelity with expert-parallel time in the breakdown") {
  for (const char* name : {"mixtral-8x7b-64xh100", "deepseek-v3-2048xh800", "deepseek-v3-2048xh800-deepep"}) {
    const Scenario s =
        load_scenario_file(std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/examples/" + name + ".json", {}, catalog());
    const JobReport r = run(s);
    CHECK(r.breakdown.exposed_comm_s[static_cast<std::size_t>(CommClass::EP)] > 0);
    CHECK(r.mfu > 0.05);
    CHECK(r.mfu < 0.7);
  }
}

TEST_CASE("moe: bad MoE input names the path and what was expected") {
  auto errors = [&](const std::vector<std::string>& sets) {
    try {
      load(sets);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(errors({"model={\"preset\": \"olmoe-1b-7b\", \"moe\": {\"top_k\": 65}}"})
            .find("/model/moe/top_k: expected at most the 64 experts, found 65") != std::string::npos);
  CHECK(errors({"parallel.ep=3"}).find("/parallel/ep: expected a divisor of the model's 64 experts, found 3") !=
        std::string::npos);
  CHECK(errors({"training.routing={\"distribution\": \"histogram\", \"histogram\": [1, 2]}"})
            .find("/training/routing/histogram: expected one load per expert (64), found 2") != std::string::npos);
  CHECK(errors({"training.routing={\"distribution\": \"imbalance\", \"imbalance\": 9}"})
            .find("/training/routing/imbalance: expected at most ep = 8") != std::string::npos);
  CHECK(errors({"training.routing={\"distribution\": \"skewed\"}"}).find("/training/routing/distribution") !=
        std::string::npos);
}

TEST_CASE("moe validation: MoE Parallel Folding beats the coupled layout in every pair, as the paper measures") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(TRAINSIM_SOURCE_DIR) / "scenarios" / "validation-moe";
  int pairs = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string folded = e.path().string();
    const std::string suffix = "_mcore_folding.json";
    if (folded.size() < suffix.size() || folded.compare(folded.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string coupled = folded.substr(0, folded.size() - suffix.size()) + "_mcore.json";
    const Scenario f = load_scenario_file(folded, {}, catalog());
    const Scenario c = load_scenario_file(coupled, {}, catalog());
    REQUIRE(f.expected.has_value());
    REQUIRE(c.expected.has_value());
    REQUIRE(f.expected->value > c.expected->value);  // the published ordering
    CHECK_MESSAGE(run(f).mfu > run(c).mfu, folded);
    ++pairs;
  }
  CHECK(pairs == 8);
}

TEST_CASE("moe auto-search: expert parallelism and expert TP (folded and coupled) are searched") {
  const Scenario s = load({}, R"({
    "model": "mixtral-8x7b",
    "cluster": {"node": "dgx-h100", "nodes": 8},
    "parallel": {"tp": 1, "dp": 64, "global_batch": 256},
    "training": {"seq_len": 4096, "precision": "bf16", "dropout": false}
  })");
  LayoutSearchSpace space;
  space.tp = {1, 2};
  space.pp = {2};
  space.cp = {1};
  space.vpp = {1};
  space.micro_batch = {1};
  space.zero = {1};
  space.recompute = {Recompute::None, Recompute::Full};
  ParallelSpec base;
  base.global_batch = 256;
  const LayoutSearchResult r = search_layouts(s.model, s.training, s.cluster, base, 78e9, space);
  // tp x ep (1, 2, 4, 8) x etp (1, = tp): with tp = 1 the two expert TP options are one layout.
  CHECK(r.grid == 2 * 4 * 2 * 2);
  bool folded = false, coupled = false;
  std::set<int> eps;
  for (const ParallelSpec& p : r.candidates) {
    eps.insert(p.ep);
    folded |= p.tp == 2 && p.etp == 1 && p.ep > 1;
    coupled |= p.tp == 2 && p.etp == 0 && p.ep > 1;
    CHECK(p.sequence_parallel == (p.tp > 1));
  }
  CHECK(eps.size() > 1);
  CHECK(folded);
  CHECK(coupled);
}

TEST_CASE("moe report: per-rank expert load in the JSON result and the HTML report") {
  const Scenario s = load({"training.routing={\"distribution\": \"zipf\", \"zipf_exponent\": 1.0, \"seed\": 3}"});
  const JobRun job = run_job(s);
  REQUIRE(job.report.feasible);
  const nlohmann::json j = to_json(job.report);
  REQUIRE(j.contains("expert_load"));
  const std::vector<double> tokens = j["expert_load"]["rank_tokens"].get<std::vector<double>>();
  REQUIRE(tokens.size() == 8);
  double sum = 0, top = 0;
  for (double t : tokens) sum += t, top = std::max(top, t);
  CHECK(sum == doctest::Approx(8 * 4096.0 * 8));  // every routed copy lands on some rank (dropless)
  CHECK(top > sum / 8);                           // Zipf: the busiest rank is above the mean
  const std::string html = html_report(s, job);
  CHECK(html.find("Expert load per EP rank") != std::string::npos);
  CHECK(html.find("routing zipf") != std::string::npos);
  // A dense model's result has no expert load.
  const Scenario dense = load_scenario_text(R"({"model": "gpt3-1.3b", "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"dp": 8, "global_batch": 16}, "training": {"seq_len": 2048}})",
                                            "dense.json", "", {}, catalog());
  CHECK_FALSE(to_json(run(dense)).contains("expert_load"));
}

TEST_CASE("moe dispatchers: allgather traffic ignores routing skew, alltoall follows the busiest rank") {
  auto dispatch_bytes = [&](const std::vector<std::string>& sets) {
    const Scenario s = load(sets);
    const ModelSteps steps = build_model_steps(s.model, s.parallel, s.training);
    for (const Step& st : steps.of(LayerKind::Moe).forward) {
      if (st.name == "ep.dispatch") return std::make_pair(st.collective, st.bytes);
    }
    FAIL("no dispatch step");
    return std::make_pair(CollectiveKind::AllToAll, 0.0);
  };
  const std::string skew = "training.routing={\"distribution\": \"imbalance\", \"imbalance\": 3}";
  const double h = 2048, tokens = 4096, k = 8, ep = 8;
  const auto a2a = dispatch_bytes({});
  const auto a2a_skewed = dispatch_bytes({skew});
  CHECK(a2a.first == CollectiveKind::AllToAll);
  // All-to-all-v: the most any rank sends to or receives from the others (its own copies stay).
  CHECK(a2a.second == doctest::Approx(7.0 / 8 * tokens * k * h * 2));
  CHECK(a2a_skewed.second == doctest::Approx(7 * 3.0 / 8 * tokens * k * h * 2));  // the busiest rank's receipts
  const auto ag = dispatch_bytes({"parallel.moe_dispatcher=allgather"});
  const auto ag_skewed = dispatch_bytes({"parallel.moe_dispatcher=allgather", skew});
  CHECK(ag.first == CollectiveKind::AllGather);
  CHECK(ag.second == doctest::Approx(ep * tokens * h * 2));  // every EP rank's tokens
  CHECK(ag_skewed.second == ag.second);

  // Top-2 routing over 8 ranks: alltoall moves 2 copies per token, allgather all 8 ranks' tokens.
  const std::string top2 = "model={\"preset\": \"olmoe-1b-7b\", \"moe\": {\"top_k\": 2}}";
  CHECK(run(load({top2})).iteration_time_s < run(load({top2, "parallel.moe_dispatcher=allgather"})).iteration_time_s);
  // A dispatcher on a dense model is refused by name.
  try {
    load_scenario_text(R"({"model": "gpt3-1.3b", "cluster": {"node": "dgx-a100", "nodes": 1},
      "parallel": {"dp": 8, "global_batch": 16, "moe_dispatcher": "allgather"}, "training": {"seq_len": 2048}})",
                       "dense.json", "", {}, catalog());
    FAIL("expected an input error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("/parallel/moe_dispatcher: a token dispatcher needs a mixture-of-experts model") !=
          std::string::npos);
  }
}

TEST_CASE("moe all-to-all-v: the per-pair matrix follows the routing, multinomial draws differ per micro-batch") {
  const double tokens = 4096, k = 8, h = 2048;
  SUBCASE("imbalance: every rank sends rank 0 three times its even share") {
    const Scenario s = load({"training.routing={\"distribution\": \"imbalance\", \"imbalance\": 3}"});
    const std::vector<RoutingDraw> draws = routing_draws(s.model, s.parallel, s.training);
    REQUIRE(draws.size() == 1);  // expected sampling: every micro-batch alike
    const std::vector<double> bytes = dispatch_bytes(s.model, s.parallel, draws[0], tokens, {}, h * 2);
    CHECK(bytes[1 * 8 + 0] == doctest::Approx(tokens * k * 3 / 8 * h * 2));
    CHECK(bytes[1 * 8 + 2] == doctest::Approx(tokens * k * 5.0 / 7 / 8 * h * 2));
    const ModelSteps steps = build_model_steps(s.model, s.parallel, s.training);
    int matrices = 0;
    for (const Step& st : steps.of(LayerKind::Moe).forward) {
      if (st.name == "ep.dispatch") CHECK(steps.traffic[st.matrix] == bytes);
      if (st.name == "ep.combine") CHECK(steps.traffic[st.matrix][0 * 8 + 1] == bytes[1 * 8 + 0]);  // the transpose
      matrices += st.matrix >= 0 ? 1 : 0;
    }
    CHECK(matrices == 2);
  }
  SUBCASE("multinomial: seeded per-micro-batch counts, the busiest draw sets each micro-batch's pace") {
    auto scenario = [&](int seed) {
      return load(
          {"training.routing={\"distribution\": \"zipf\", \"zipf_exponent\": 0.5, \"sampling\": "
           "\"multinomial\", \"seed\": " +
           std::to_string(seed) + "}"});
    };
    const Scenario s = scenario(5);
    const std::vector<RoutingDraw> draws = routing_draws(s.model, s.parallel, s.training);
    REQUIRE(draws.size() == 4);  // one per micro-batch of a replica
    CHECK(draws[0].received != draws[1].received);
    for (const RoutingDraw& d : draws) {
      for (int i = 0; i < 8; ++i) {
        double sent = 0;  // every rank routes all its copies, in whole tokens
        for (int j = 0; j < 8; ++j) sent += d.copies[i * 8 + j];
        CHECK(sent == tokens * k);
      }
      // Ranks differ within a draw, and the draw's busiest rank is above the mean.
      CHECK(d.max_received > tokens * k);
    }
    // Two draws from the same seed are the same; another seed differs.
    CHECK(routing_draws(s.model, s.parallel, s.training)[2].copies == draws[2].copies);
    const Scenario other = scenario(6);
    CHECK(routing_draws(other.model, other.parallel, other.training)[2].copies != draws[2].copies);
    const ModelSteps steps = build_model_steps(s.model, s.parallel, s.training);
    CHECK(steps.moe_draws.size() == 4);
    CHECK(&steps.of(LayerKind::Moe, 1) == &steps.moe_draws[1]);
    // Identical seeds give bit-identical iterations; the sampled run is slower
    // than the same shares split exactly (expected sampling).
    const double t = run(s).iteration_time_s;
    CHECK(run(scenario(5)).iteration_time_s == t);
    const Scenario expected =
        load({"training.routing={\"distribution\": \"zipf\", \"zipf_exponent\": 0.5, \"seed\": 5}"});
    CHECK(t > run(expected).iteration_time_s);
  }
}

TEST_CASE("moe deepep dispatch: a token crosses the network once per distinct destination node") {
  // OLMoE (64 experts, top-8) with EP 16 over two DGX H100 nodes: 4 experts per rank.
  const char* two_nodes = R"({
    "model": "olmoe-1b-7b",
    "cluster": {"node": "dgx-h100", "nodes": 2},
    "parallel": {"tp": 1, "dp": 16, "ep": 16, "micro_batch": 1, "global_batch": 64, "dp_overlap": false,
                 "moe_dispatcher": "deepep"},
    "training": {"seq_len": 4096, "precision": "bf16", "dropout": false}
  })";
  const double tokens = 4096, k = 8, h = 2048, token = h * 2;
  const std::vector<int> ep_node{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  auto network_bytes = [&](const std::vector<double>& bytes) {
    double b = 0;
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) b += ep_node[i] != ep_node[j] ? bytes[i * 16 + j] : 0.0;
    }
    return b;
  };
  const Scenario s = load({}, two_nodes);
  const RoutingDraw draw = routing_draws(s.model, s.parallel, s.training).front();
  // Uniform routing: each node holds half the experts, so a token with 8 picks
  // reaches the other node with probability 1 - (1/2)^8: it crosses the network
  // that often, once, however many of its experts sit there.
  const double reach = 1 - std::pow(0.5, 8);
  CHECK(network_bytes(dispatch_bytes(s.model, s.parallel, draw, tokens, ep_node, token)) ==
        doctest::Approx(16 * tokens * reach * token));
  // The alltoall dispatcher sends every copy: half of each rank's 8 copies per token leave the node.
  ParallelSpec flat = s.parallel;
  flat.moe_dispatcher = MoeDispatcher::AllToAll;
  CHECK(network_bytes(dispatch_bytes(s.model, flat, draw, tokens, ep_node, token)) ==
        doctest::Approx(16 * tokens * k / 2 * token));
  // Node-limited to one node: tokens x 1 distinct node, of which half lies on the other node.
  const Scenario limited =
      load({"model={\"preset\": \"olmoe-1b-7b\", \"moe\": {\"max_nodes_per_token\": 1}}"}, two_nodes);
  CHECK(network_bytes(dispatch_bytes(limited.model, limited.parallel, draw, tokens, ep_node, token)) ==
        doctest::Approx(16 * tokens * 0.5 * token));
  // The planner hands the run the same matrices, on EP groups laid over both nodes.
  const JobRun job = run_job(s);
  REQUIRE(job.report.feasible);
  bool found = false;
  for (const std::vector<double>& m : job.plan.setup.traffic) {
    if (network_bytes(m) == doctest::Approx(16 * tokens * reach * token)) found = true;
  }
  CHECK(found);
  // Fewer bytes on the NICs: deepep beats alltoall here, at both fidelities.
  const Scenario a2a = load({"parallel.moe_dispatcher=alltoall"}, two_nodes);
  CHECK(job.report.iteration_time_s < run(a2a).iteration_time_s);
  const JobReport deepep_flow = simulate(s, Fidelity::Flow);
  REQUIRE(deepep_flow.feasible);
  CHECK(deepep_flow.iteration_time_s < simulate(a2a, Fidelity::Flow).iteration_time_s);
  // Node-limited routing is refused with another dispatcher, by its key.
  try {
    load({"model={\"preset\": \"olmoe-1b-7b\", \"moe\": {\"max_nodes_per_token\": 1}}",
          "parallel.moe_dispatcher=alltoall"},
         two_nodes);
    FAIL("expected an input error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("/model/moe/max_nodes_per_token") != std::string::npos);
  }
}

TEST_CASE("moe: flow fidelity agrees with the analytical model on one node") {
  const Scenario s = load({"training.routing={\"distribution\": \"zipf\", \"zipf_exponent\": 0.8, \"seed\": 1}"});
  const double analytical = run(s).iteration_time_s;
  const JobReport flow = simulate(s, Fidelity::Flow);
  REQUIRE(flow.feasible);
  CHECK(flow.iteration_time_s == doctest::Approx(analytical).epsilon(0.05));
  CHECK(flow.breakdown.exposed_comm_s[static_cast<std::size_t>(CommClass::EP)] > 0);
}

TEST_CASE("moe model FLOPs: the closed form counts routed, shared experts, router and MLA as the steps do") {
  // DeepSeek-V2-Lite (MLA without a query bottleneck, 2 shared + 64 routed experts,
  // top-6, one dense first layer) and OLMoE (64 experts, top-8), TP 2 with SP on one node.
  for (const char* model : {"deepseek-v2-lite", "olmoe-1b-7b"}) {
    const std::string text = std::string(R"({"model": ")") + model + R"(",
      "cluster": {"node": "dgx-h100", "nodes": 1},
      "parallel": {"tp": 2, "dp": 4, "ep": 4, "etp": 1, "sequence_parallel": true, "micro_batch": 1, "global_batch": 8},
      "training": {"seq_len": 2048, "precision": "bf16", "dropout": false}})";
    const Scenario s = load({}, text);
    const JobRun job = run_job(s);
    REQUIRE(job.report.feasible);
    const double closed = model_flops_per_iteration(s.model, s.training, s.parallel.global_batch);
    CHECK_MESSAGE(job.plan.model_flops == doctest::Approx(closed).epsilon(1e-9), model);
    // A dense model of the same attention and every expert active would count far more.
    TransformerSpec all_active = s.model;
    all_active.moe.top_k = all_active.moe.experts;
    CHECK(model_flops_per_iteration(all_active, s.training, 8) > 2 * closed);
  }
}

TEST_CASE("multi-token prediction: one more block and LM head per depth on the last stage") {
  CHECK(catalog().find_model("deepseek-v3")->mtp_depth == 1);  // the report's D = 1
  const Scenario base = load({});
  const Scenario mtp = load({"model={\"preset\": \"olmoe-1b-7b\", \"mtp_depth\": 1}"});
  const double h = 2048, tokens = 4096;
  // Weights: the 2h -> h projection, two norms and one MoE block.
  CHECK(mtp.model.mtp_params() == doctest::Approx(2 * h * h + 2 * h + mtp.model.params_of_kind(LayerKind::Moe)));
  const ModelSteps steps = build_model_steps(mtp.model, mtp.parallel, mtp.training);
  bool proj = false, logits = false, expert = false, proj_wgrad = false;
  for (const Step& st : steps.head_forward) {
    if (st.name == "mtp1.proj") {
      proj = true;
      CHECK(st.op.m == tokens);
      CHECK(st.op.n == h);
      CHECK(st.op.k == 2 * h);
    }
    logits |= st.name == "mtp1.head.logits";
    expert |= st.name == "mtp1.moe.expert.up";
  }
  for (const Step& st : steps.head_backward) proj_wgrad |= st.name == "mtp1.proj.wgrad";
  CHECK(proj);
  CHECK(logits);
  CHECK(expert);
  CHECK(proj_wgrad);
  // Model FLOPs: the steps' sum is the closed form, which adds per token
  // 3 x (projection + block + LM head) to the model without prediction.
  const JobRun with = run_job(mtp);
  REQUIRE(with.report.feasible);
  const double closed = model_flops_per_iteration(mtp.model, mtp.training, mtp.parallel.global_batch);
  CHECK(with.plan.model_flops == doctest::Approx(closed).epsilon(1e-9));
  CHECK(closed > model_flops_per_iteration(base.model, base.training, base.parallel.global_batch));
  // Time and memory on the last stage: longer, and the module's weights (nothing sharded here).
  CHECK(with.report.iteration_time_s > run(base).iteration_time_s);
  const MoeLayerParams block = moe_layer_params_per_rank(mtp.model, mtp.parallel);
  const double added = stage_memory(mtp.model, mtp.parallel, mtp.training, 0).weights -
                       stage_memory(base.model, base.parallel, base.training, 0).weights;
  CHECK(added == doctest::Approx(2 * (2 * h * h + 2 * h + block.dense + block.expert)));
}

TEST_CASE("multi-head latent attention: DeepSeek-V3's projections, parameters and attention sizes") {
  const TransformerSpec& v3 = *catalog().find_model("deepseek-v3");
  REQUIRE(v3.mla.enabled());
  // config.json: hidden 7168, 128 heads, q_lora 1536, kv_lora 512, qk 128 + 64 rope, v 128.
  const double attention = 7168.0 * 1536 + 1536.0 * 128 * 192  // W_DQ, W_UQ
                           + 7168.0 * (512 + 64)               // W_DKV and the shared rotary key
                           + 512.0 * 128 * (128 + 128)         // W_UK, W_UV
                           + 128.0 * 128 * 7168                // W_O
                           + 1536 + 512 + 2 * 7168.0;          // latent and layer norms
  CHECK(v3.attention_params() == doctest::Approx(attention));
  CHECK(v3.total_params() / 1e9 == doctest::Approx(671).epsilon(0.005));

  ParallelSpec par;
  par.tp = 2;
  par.sequence_parallel = true;
  TrainingSpec train;
  train.seq_len = 4096;
  const ModelSteps steps = build_model_steps(v3, par, train);
  bool kv_up = false, qkv = false, proj = false;
  for (const Step& s : steps.of(LayerKind::Moe).forward) {
    if (s.name == "attn.kv.up") {
      kv_up = true;
      CHECK(s.op.n == 64 * (128 + 128));  // 64 heads per TP rank, key and value up-projections
      CHECK(s.op.k == 512);
    }
    qkv |= s.name == "attn.qkv";
    if (s.name == "attn.proj") {
      proj = true;
      CHECK(s.op.k == 64 * 128);  // the value head size
    }
    if (s.name == "attn.core") {
      // QK^T over 192 and AV over 128 per head: 2 s^2 (192 + 128) per head, full count.
      CHECK(s.model_flops == doctest::Approx(2.0 * 4096 * 4096 * 64 * (192 + 128)));
    }
  }
  CHECK(kv_up);
  CHECK(proj);
  CHECK_FALSE(qkv);
  // A model without MLA keeps its fused QKV projection.
  const TransformerSpec& mixtral = *catalog().find_model("mixtral-8x7b");
  bool fused = false;
  const ModelSteps mixtral_steps = build_model_steps(mixtral, par, train);
  for (const Step& s : mixtral_steps.of(LayerKind::Moe).forward) fused |= s.name == "attn.qkv";
  CHECK(fused);
}
