// Context parallelism's three kinds (models/layer_steps.cpp): ring (K and V
// gathered over the CP group), DeepSpeed-Ulysses (all-to-all of heads) and the
// hybrid of the two (USP), checked against the papers' byte counts by hand.
#include <doctest/doctest.h>

#include <algorithm>

#include "model_fixtures.hpp"
#include "models/layer_steps.hpp"
#include "models/layout_rules.hpp"
#include "models/planner.hpp"
#include "sim_fixtures.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// Bytes of the dense layer's CP collectives named `name` in one pass list (0 if none).
double cp_bytes(const std::vector<Step>& steps, const std::string& name, CollectiveKind kind) {
  double bytes = 0;
  for (const Step& s : steps) {
    if (s.is_comm && s.comm_class == CommClass::CP && s.name == name) {
      CHECK(s.collective == kind);
      bytes += s.bytes;
    }
  }
  return bytes;
}

const Step& step_named(const std::vector<Step>& steps, const std::string& name) {
  const auto it = std::find_if(steps.begin(), steps.end(), [&](const Step& s) { return s.name == name; });
  REQUIRE(it != steps.end());
  return *it;
}

struct CpCase {
  TransformerSpec model = fixture_model("gpt3-1.3b");  // MHA: 16 heads of 128, hidden 2048
  ParallelSpec par;
  TrainingSpec train;
  CpCase(int cp, int ulysses) {
    par.cp = cp;
    par.cp_ulysses = ulysses;
    par.global_batch = 1;
    train.seq_len = 16384;
  }
  LayerSteps dense() const { return build_model_steps(model, par, train).of(LayerKind::Dense); }
};

}  // namespace

TEST_CASE("Ulysses: the all-to-alls of one layer carry 4Nh/P elements per GPU each pass, no KV gather") {
  const CpCase c(8, 8);
  const LayerSteps L = c.dense();
  // DeepSpeed-Ulysses (arXiv:2309.14509): each GPU holds N/P tokens; the
  // all-to-all of Q, K, V moves a 3Nh/P buffer per GPU, that of the output Nh/P.
  const double N = 16384, h = 2048, P = 8, bytes = 2;
  CHECK(cp_bytes(L.forward, "cp.a2a.qkv", CollectiveKind::AllToAll) == doctest::Approx(3 * N * h / P * bytes));
  CHECK(cp_bytes(L.forward, "cp.a2a.out", CollectiveKind::AllToAll) == doctest::Approx(N * h / P * bytes));
  CHECK(cp_bytes(L.backward, "cp.a2a.out.grad", CollectiveKind::AllToAll) == doctest::Approx(N * h / P * bytes));
  CHECK(cp_bytes(L.backward, "cp.a2a.qkv.grad", CollectiveKind::AllToAll) == doctest::Approx(3 * N * h / P * bytes));
  CHECK(cp_bytes(L.forward, "cp.ag.kv", CollectiveKind::AllGather) == 0);
  CHECK(cp_bytes(L.backward, "cp.rs.kv.grad", CollectiveKind::ReduceScatter) == 0);
  // The attention then runs the whole sequence for 16/8 heads: the same FLOPs as ring CP.
  const CpCase ring(8, 1);
  CHECK(step_named(L.forward, "attn.core").op.flops ==
        doctest::Approx(step_named(ring.dense().forward, "attn.core").op.flops));
}

TEST_CASE("ring CP gathers the whole sequence's K and V: N*2h elements per GPU, P times Ulysses' K and V share") {
  const CpCase c(8, 1);
  const LayerSteps L = c.dense();
  const double N = 16384, h = 2048, bytes = 2;
  CHECK(cp_bytes(L.forward, "cp.ag.kv", CollectiveKind::AllGather) == doctest::Approx(N * 2 * h * bytes));
  CHECK(cp_bytes(L.backward, "cp.rs.kv.grad", CollectiveKind::ReduceScatter) == doctest::Approx(N * 2 * h * bytes));
  CHECK(cp_bytes(L.forward, "cp.a2a.qkv", CollectiveKind::AllToAll) == 0);
}

TEST_CASE("hybrid CP: Ulysses all-to-all over u ranks, then a ring of cp/u over 1/u of the heads") {
  const CpCase c(8, 4);
  const LayerSteps L = c.dense();
  const double N = 16384, h = 2048, bytes = 2;
  // Each GPU holds N/8 tokens; the all-to-all over 4 ranks turns them into 4 heads of N/2 tokens.
  CHECK(cp_bytes(L.forward, "cp.a2a.qkv", CollectiveKind::AllToAll) == doctest::Approx(3 * N * h / 8 * bytes));
  // The ring of 2 gathers K and V of the whole sequence for a quarter of the heads.
  CHECK(cp_bytes(L.forward, "cp.ag.kv", CollectiveKind::AllGather) == doctest::Approx(N * 2 * h / 4 * bytes));
  for (const Step& s : L.forward) {
    if (s.name == "cp.a2a.qkv") CHECK(s.cp_group == Step::CpGroup::Ulysses);
    if (s.name == "cp.ag.kv") CHECK(s.cp_group == Step::CpGroup::Ring);
  }
  // The plan puts Ulysses on consecutive CP ranks (inside a node) and rings across them.
  const Cluster cluster(toy_cluster(2, 4));
  ParallelSpec par = c.par;
  par.global_batch = 1;
  PlanOptions every_rank;
  every_rank.representatives = false;
  const TrainingPlan plan = plan_training(c.model, par, c.train, cluster, every_rank);
  std::vector<std::vector<int>> ulysses, rings;
  for (const Communicator& cm : plan.setup.comms) {
    if (cm.name.rfind("cp ulysses group", 0) == 0) ulysses.push_back(cm.members);
    if (cm.name.rfind("cp ring group", 0) == 0) rings.push_back(cm.members);
  }
  CHECK(ulysses == std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(rings == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
}

TEST_CASE("Ulysses: a degree that does not divide the heads of a TP rank is a layout error") {
  CpCase c(8, 8);
  c.model.heads = 12;  // 12 heads / tp 1 over Ulysses 8
  c.model.kv_heads = 12;
  const ClusterSpec cluster = toy_cluster(1, 8);
  const std::vector<LayoutProblem> problems = check_layout(c.model, c.par, c.train, cluster);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].path == "/parallel/cp");
  CHECK(problems[0].message.find("12 attention heads") != std::string::npos);
  // Grouped-query attention: 2 KV heads are replicated over a degree of 8, 3 are not.
  c.model.heads = 16;
  c.model.kv_heads = 2;
  CHECK(check_layout(c.model, c.par, c.train, cluster).empty());
  c.model.heads = 24;
  c.model.kv_heads = 3;
  REQUIRE(check_layout(c.model, c.par, c.train, cluster).size() == 1);
  CHECK(check_layout(c.model, c.par, c.train, cluster)[0].message.find("KV heads") != std::string::npos);
}
