// Context parallelism's three kinds (models/layer_steps.cpp): ring (Transformer
// Engine's ring of K/V blocks over the CP group), DeepSpeed-Ulysses (all-to-all of heads) and the
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

// FLOPs (executed, and by the model convention) of every step called `name`.
double flops_of(const std::vector<Step>& steps, const std::string& name) {
  double f = 0;
  for (const Step& s : steps) f += s.name == name ? s.op.flops : 0.0;
  return f;
}
double model_flops_of(const std::vector<Step>& steps, const std::string& name) {
  double f = 0;
  for (const Step& s : steps) f += s.name == name ? s.model_flops : 0.0;
  return f;
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
  // The attention then runs the whole sequence for 16/8 heads: the same FLOPs as ring CP
  // (whose ring runs them in 8 steps).
  const CpCase ring(8, 1);
  CHECK(flops_of(L.forward, "attn.core") == doctest::Approx(flops_of(ring.dense().forward, "attn.core")));
}

TEST_CASE("ring CP moves the whole sequence's K and V: N*2h elements per GPU, P times Ulysses' K and V share") {
  const CpCase c(8, 1);
  const LayerSteps L = c.dense();
  const double N = 16384, h = 2048, bytes = 2;
  // Transformer Engine's ring: 7 exchanges of one K/V block forward; backward the block
  // again with its dK/dV (the first exchange K/V only, the last dK/dV only).
  CHECK(cp_bytes(L.forward, "cp.p2p.kv", CollectiveKind::AllGather) == doctest::Approx(N * 2 * h * bytes));
  CHECK(cp_bytes(L.backward, "cp.p2p.kv", CollectiveKind::AllGather) +
            cp_bytes(L.backward, "cp.p2p.dkv", CollectiveKind::AllGather) ==
        doctest::Approx(2 * N * 2 * h * bytes));
  CHECK(cp_bytes(L.forward, "cp.ag.kv", CollectiveKind::AllGather) == 0);
  CHECK(cp_bytes(L.forward, "cp.a2a.qkv", CollectiveKind::AllToAll) == 0);
}

TEST_CASE("ring CP runs one attention kernel per ring step, the next block's exchange under the current step") {
  // AttnFuncWithCPAndKVP2P (Transformer Engine v2.2): cp steps over the rank's queries
  // and one rank's K/V block, each 1/cp of the causal work; then the output corrections.
  const CpCase c(8, 1);
  const LayerSteps L = c.dense();
  const double N = 16384, P = 8, s = N / P, heads = 16, d = 128, bytes = 2;
  std::vector<int> kernels, xfers;
  for (std::size_t j = 0; j < L.forward.size(); ++j) {
    if (L.forward[j].name == "attn.core") kernels.push_back(static_cast<int>(j));
    if (L.forward[j].name == "cp.p2p.kv") xfers.push_back(static_cast<int>(j));
  }
  REQUIRE(kernels.size() == 8);
  REQUIRE(xfers.size() == 7);
  const double causal_total = 4 * s * N * heads * d * 0.5;
  for (int k : kernels) CHECK(L.forward[static_cast<std::size_t>(k)].op.flops == doctest::Approx(causal_total / P));
  // Step 0 needs only the rank's own block; step i waits for the exchange posted at step
  // i-1, and that exchange runs alongside step i-1 (it waits for the block before it).
  CHECK(L.forward[static_cast<std::size_t>(kernels[0])].waits.empty());
  for (std::size_t i = 1; i < kernels.size(); ++i) {
    CHECK(L.forward[static_cast<std::size_t>(kernels[i])].waits == std::vector<int>{xfers[i - 1]});
    CHECK(xfers[i - 1] < kernels[i - 1]);
  }
  for (std::size_t i = 1; i < xfers.size(); ++i) {
    CHECK(L.forward[static_cast<std::size_t>(xfers[i])].waits == std::vector<int>{xfers[i - 1]});
    CHECK(L.forward[static_cast<std::size_t>(xfers[i])].overlap_previous);
  }
  // Output corrections of the last rank: the first step's output scaled (read + write),
  // the 7 others scaled and added (3 passes each), plus the fp32 LSE read per step.
  const double out = s * heads * d * bytes, lse = s * heads;
  CHECK(step_named(L.forward, "attn.cp.out.correction").op.bytes == doctest::Approx(23 * out + 8 * lse * 8));
  CHECK(step_named(L.forward, "attn.cp.out.correction").op.kernels == 8);
  CHECK(step_named(L.forward, "attn.cp.lse.correction").op.kernels == 7);
  // Backward: 8 kernels of 2.5x the forward step's work, dQ and dK/dV accumulated per step.
  int bwd = 0, dq = 0, dkv = 0;
  for (const Step& st : L.backward) {
    bwd += st.name == "attn.core.bwd";
    dq += st.name == "attn.cp.dq.acc";
    dkv += st.name == "attn.cp.dkv.acc";
  }
  CHECK(bwd == 8);
  CHECK(dq == 8);
  CHECK(dkv == 8);
  CHECK(step_named(L.backward, "attn.core.bwd").op.flops == doctest::Approx(2.5 * causal_total / P));
  // Model FLOPs are unchanged: the whole sequence's attention, counted once.
  CHECK(model_flops_of(L.forward, "attn.core") == doctest::Approx(4 * s * N * heads * d));
}

TEST_CASE("ring CP keeps the K/V gather where Transformer Engine's ring does not apply") {
  // Unfused attention (no CP in Transformer Engine) and a sliding window keep the
  // all-gather of the whole sequence before one attention over it.
  CpCase c(8, 1);
  c.train.attention = AttentionKind::Unfused;
  const LayerSteps L = c.dense();
  CHECK(cp_bytes(L.forward, "cp.ag.kv", CollectiveKind::AllGather) == doctest::Approx(16384.0 * 2 * 2048 * 2));
  CHECK(cp_bytes(L.forward, "cp.p2p.kv", CollectiveKind::AllGather) == 0);
  CpCase w(8, 1);
  w.model.sliding_window = 4096;
  CHECK(cp_bytes(w.dense().forward, "cp.ag.kv", CollectiveKind::AllGather) > 0);
}

TEST_CASE("hybrid CP: Ulysses all-to-all over u ranks, then a ring of cp/u over 1/u of the heads") {
  const CpCase c(8, 4);
  const LayerSteps L = c.dense();
  const double N = 16384, h = 2048, bytes = 2;
  // Each GPU holds N/8 tokens; the all-to-all over 4 ranks turns them into 4 heads of N/2 tokens.
  CHECK(cp_bytes(L.forward, "cp.a2a.qkv", CollectiveKind::AllToAll) == doctest::Approx(3 * N * h / 8 * bytes));
  // The ring of 2 exchanges K and V of the whole sequence for a quarter of the heads.
  CHECK(cp_bytes(L.forward, "cp.p2p.kv", CollectiveKind::AllGather) == doctest::Approx(N * 2 * h / 4 * bytes));
  for (const Step& s : L.forward) {
    if (s.name == "cp.a2a.qkv") CHECK(s.cp_group == Step::CpGroup::Ulysses);
    if (s.name == "cp.p2p.kv") CHECK(s.cp_group == Step::CpGroup::Ring);
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
