#include "models/layout_rules.hpp"

#include "models/mpmd.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <optional>

#include "models/dp_shares.hpp"
#include "models/moe.hpp"
#include "models/mpmd.hpp"
#include "models/pipedream.hpp"
#include "models/placement.hpp"
#include "models/schedule.hpp"

namespace trainsim {

namespace {

// PipeDream and PipeDream-2BW (models/pipedream.hpp): what their steady state
// needs and what trainsim does not model of them.
template <class Problem>
void check_asynchronous_pipeline(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& t,
                                 Problem&& problem) {
  if (!asynchronous_pipeline(p.schedule)) return;
  const std::string name = to_string(p.schedule);
  const bool pipedream = p.schedule == ScheduleKind::PipeDream;
  if (!p.uneven_shares() && p.micro_batches() < p.pp) {
    // 1F1B's steady state holds pp - i micro-batches on rank i; 2BW's two
    // weight versions suffice only when a batch has m >= pp micro-batches.
    problem("/parallel/global_batch", name + " needs at least pp = " + std::to_string(p.pp) +
                                          " micro-batches per replica (its steady state), found " +
                                          std::to_string(p.micro_batches()));
  }
  if (pipedream && (p.dp * p.cp > 1 || (m.moe.enabled() && expert_dp(p) > 1))) {
    problem("/parallel/dp",
            "pipedream updates the weights after every micro-batch; a gradient reduction per "
            "micro-batch over data or context parallelism is not modelled (use pipedream-2bw, "
            "which reduces once per batch)");
  }
  if (pipedream && t.optimizer == "muon") {
    problem("/training/optimizer",
            "pipedream steps after every micro-batch; Muon's orthogonalisation per step is "
            "not modelled under it");
  }
  if (p.zero >= 3) {
    problem("/parallel/zero", name +
                                  " keeps several versions of the weights; with ZeRO-3 sharding them is not "
                                  "modelled");
  }
  if (t.post_validation) {
    problem("/training/optimizer_sync", name +
                                            " has no synchronous optimizer step to validate; remove "
                                            "\"post-validation\"");
  }
}

// The product of positive factors, or nullopt when it does not fit in 63 bits.
std::optional<std::int64_t> product(std::initializer_list<std::int64_t> factors) {
  std::int64_t p = 1;
  for (std::int64_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return std::nullopt;
  }
  return p;
}

std::string str(std::int64_t x) { return std::to_string(x); }

std::string product_text(const std::optional<std::int64_t>& p) { return p ? str(*p) : "more than 2^63"; }

std::int64_t cluster_gpus(const ClusterSpec& cluster) {
  std::int64_t n = 0;
  for (const auto& g : cluster.groups) n += static_cast<std::int64_t>(g.count) * g.node.gpus_per_node;
  return n;
}

// Expert parallelism: carved out of tp*cp*dp (Megatron-Core's expert rank
// order), whole experts per rank, TP only with sequence parallelism (Megatron-Core
// requires it for MoE), a routing skew the EP group can hold.
template <class Problem>
void check_moe_layout(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& t, Problem&& problem) {
  const int etp = expert_tp(p);
  if (!m.moe.enabled()) {
    if (p.ep > 1) {
      problem("/parallel/ep",
              "expert parallelism (ep > 1) needs a mixture-of-experts model (model.moe), found ep = " + str(p.ep));
    }
    if (p.moe_dispatcher != MoeDispatcher::AllToAll) {
      problem("/parallel/moe_dispatcher",
              std::string("a token dispatcher needs a mixture-of-experts model (model.moe), "
                          "found \"") +
                  to_string(p.moe_dispatcher) + "\"");
    }
    if (p.etp > 0 && p.etp != p.tp) {
      problem("/parallel/etp",
              "expert tensor parallelism needs a mixture-of-experts model (model.moe), found etp = " + str(p.etp));
    }
    return;
  }
  if (m.moe.experts % p.ep != 0) {
    problem("/parallel/ep", "expected a divisor of the model's " + str(m.moe.experts) + " experts, found " + str(p.ep));
  }
  const auto dense_ranks = product({p.tp, p.cp, p.dp});
  const auto expert_ranks = product({p.ep, etp});
  if (!dense_ranks || !expert_ranks || *dense_ranks % *expert_ranks != 0) {
    problem("/parallel/ep", "ep*etp = " + str(p.ep) + "*" + str(etp) + " = " + product_text(expert_ranks) +
                                " must divide tp*cp*dp = " + product_text(dense_ranks) +
                                " (expert parallelism is carved out of the attention layout)");
  }
  if (m.moe.expert_ffn % etp != 0) {
    problem("/parallel/etp",
            "expected a divisor of the expert FFN size " + str(m.moe.expert_ffn) + ", found " + str(etp));
  }
  if (p.tp > 1 && !p.sequence_parallel) {
    problem("/parallel/sequence_parallel",
            "a mixture-of-experts model with tp > 1 needs sequence_parallel: true (as Megatron-Core requires)");
  }
  if (t.routing.distribution == RoutingDistribution::Imbalance && t.routing.imbalance > p.ep) {
    problem("/training/routing/imbalance", "expected at most ep = " + str(p.ep) + " (all tokens on one rank), found " +
                                               std::to_string(t.routing.imbalance));
  }
  if (m.moe.max_nodes_per_token > 0 && p.moe_dispatcher != MoeDispatcher::DeepEP) {
    problem("/model/moe/max_nodes_per_token",
            std::string("node-limited routing is modelled for the deepep dispatcher (its traffic per destination "
                        "node), found moe_dispatcher \"") +
                to_string(p.moe_dispatcher) + "\"; set parallel.moe_dispatcher to \"deepep\" or drop the key");
  }
  if (t.routing.sampling == RoutingSampling::Multinomial) {
    // One draw per micro-batch: ep source ranks each split over every expert (docs/limits.md).
    const auto work =
        product({p.global_batch / std::max<std::int64_t>(1, static_cast<std::int64_t>(p.micro_batch) * p.dp), p.ep,
                 std::max(p.ep, m.moe.experts)});
    if (!work || *work > kMaxRoutingDrawWork) {
      problem("/training/routing/sampling",
              "multinomial routing draws micro-batches*ep*max(ep, experts) = " + product_text(work) + ", more than " +
                  str(kMaxRoutingDrawWork) + "; use \"expected\" sampling");
    }
  }
  if (t.routing.distribution == RoutingDistribution::Histogram &&
      static_cast<int>(t.routing.histogram.size()) != m.moe.experts) {
    problem("/training/routing/histogram", "expected one load per expert (" + str(m.moe.experts) + "), found " +
                                               str(static_cast<std::int64_t>(t.routing.histogram.size())));
  }
}

// Uneven data-parallel shares (models/dp_shares.hpp): one micro-batch count per
// replica, each valid for the schedule, summing to global_batch / micro_batch.
void check_shares(const TransformerSpec& m, const ParallelSpec& p, bool mpmd, std::vector<LayoutProblem>& out) {
  auto problem = [&](std::string path, std::string message) { out.push_back({std::move(path), std::move(message)}); };
  const std::size_t before = out.size();
  // Per-stage layouts: each replica is a pipeline of its own when every stage has
  // parallel.dp replicas; stages of other DP sizes mix the replicas' samples.
  for (int s = 0; mpmd && s < static_cast<int>(p.stages.size()); ++s) {
    if (stage_dp(p, s) != p.dp) {
      problem(
          "/parallel/dp_shares",
          "uneven data-parallel shares with per-stage layouts need every stage's dp to be parallel.dp = " + str(p.dp) +
              " (each replica then is a pipeline of its own); stage " + str(s) + " has dp " + str(stage_dp(p, s)));
      break;
    }
  }
  if (p.schedule == ScheduleKind::Custom) {
    problem("/parallel/dp_shares",
            "a custom schedule's units are for one micro-batch count; uneven shares need a built-in schedule");
  }
  if (p.zero == 3) {
    problem("/parallel/dp_shares",
            "ZeRO-3 gathers the parameters over the data-parallel group for every micro-batch, which replicas with "
            "different counts cannot share; use zero <= 2 with uneven shares");
  }
  if (m.moe.enabled() && p.ep > 1) {
    problem("/parallel/dp_shares",
            "expert-parallel all-to-alls span data-parallel replicas for every micro-batch, which replicas with "
            "different counts cannot share; use ep = 1 with uneven shares");
  }
  if (p.global_batch % p.micro_batch != 0) {
    problem("/parallel/global_batch",
            "expected a multiple of micro_batch = " + str(p.micro_batch) + ", found " + str(p.global_batch));
  }
  if (out.size() != before) return;
  const std::int64_t total = p.global_batch / p.micro_batch;
  if (p.dp_shares_balanced) {
    const ShareRule rule = share_rule(p);
    if (total < static_cast<std::int64_t>(p.dp) * rule.min || total % rule.unit != 0) {
      problem("/parallel/dp_shares", "\"balanced\" needs global_batch / micro_batch = " + str(total) +
                                         " micro-batches to give each of dp = " + str(p.dp) + " replicas at least " +
                                         str(rule.min) +
                                         (rule.unit > 1 ? " in multiples of " + str(rule.unit) : std::string()) + " (" +
                                         to_string(p.schedule) + ")");
    }
    return;
  }
  if (static_cast<std::int64_t>(p.dp_shares.size()) != p.dp) {
    problem("/parallel/dp_shares", "expected one micro-batch count per data-parallel replica (dp = " + str(p.dp) +
                                       "), found " + str(static_cast<std::int64_t>(p.dp_shares.size())));
    return;
  }
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < p.dp_shares.size(); ++i) {
    sum += p.dp_shares[i];
    const std::string why = share_problem(p, p.dp_shares[i]);
    if (!why.empty()) problem("/parallel/dp_shares/" + std::to_string(i), why);
  }
  if (sum != total) {
    problem("/parallel/dp_shares", "the shares sum to " + str(sum) + " micro-batches; global_batch / micro_batch = " +
                                       str(p.global_batch) + " / " + str(p.micro_batch) + " = " + str(total));
  }
}

// Uneven CP sequence shares (docs/heterogeneous.md): one token count per CP
// rank, each even (the ring's causal load-balancing split halves it), summing to
// seq_len; a plain ring or Ulysses, refused where a share could not be costed alone.
void check_cp_shares(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& t, bool mpmd,
                     std::vector<LayoutProblem>& out) {
  auto problem = [&](std::string path, std::string message) { out.push_back({std::move(path), std::move(message)}); };
  const std::size_t before = out.size();
  const char* at = "/parallel/cp_shares";
  if (p.cp < 2) problem(at, "uneven sequence shares need cp >= 2, found cp = " + str(p.cp));
  if (p.cp_ulysses != 1 && p.cp_ulysses != p.cp) {
    problem(at,
            "uneven sequence shares are modelled for a ring or Ulysses (cp_kind \"ring\" or \"ulysses\"), not for "
            "hybrid CP, whose rings would hold Ulysses groups of unequal tokens");
  }
  if (mpmd)
    problem(at, "uneven sequence shares are not modelled with per-stage layouts (parallel.stages) or an encoder");
  if (p.uneven_shares()) problem(at, "uneven sequence shares together with parallel.dp_shares are not modelled");
  if (p.seq_chunks > 1) problem(at, "uneven sequence shares with seq1f1b's sequence chunks are not modelled");
  if (m.moe.enabled()) problem(at, "uneven sequence shares with mixture-of-experts layers are not modelled");
  if (p.schedule == ScheduleKind::Custom) problem(at, "uneven sequence shares need a built-in schedule");
  if (out.size() != before) return;
  if (p.cp_shares_auto) {
    if (t.seq_len % 2 != 0 || t.seq_len < 2 * static_cast<std::int64_t>(p.cp)) {
      problem(at, "\"auto\" gives each CP rank an even number of tokens, at least 2: seq_len = " + str(t.seq_len) +
                      " must be even and at least 2*cp = " + str(2 * static_cast<std::int64_t>(p.cp)));
    }
    return;
  }
  if (static_cast<std::int64_t>(p.cp_shares.size()) != p.cp) {
    problem(at, "expected one token count per CP rank (cp = " + str(p.cp) + "), found " +
                    str(static_cast<std::int64_t>(p.cp_shares.size())));
    return;
  }
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < p.cp_shares.size(); ++i) {
    sum += p.cp_shares[i];
    if (p.cp_shares[i] < 2 || p.cp_shares[i] % 2 != 0) {
      problem(std::string(at) + "/" + std::to_string(i),
              "expected an even token count of at least 2 (the causal load-balancing split gives each CP rank two "
              "halves), found " +
                  str(p.cp_shares[i]));
    }
  }
  if (sum != t.seq_len) {
    problem(at, "the shares sum to " + str(sum) + " tokens; expected seq_len = " + str(t.seq_len));
  }
}

// Uneven Ulysses head shares (docs/heterogeneous.md): query heads of a TP rank per
// Ulysses rank, at least one each, summing to heads/tp; Ulysses or hybrid CP only.
void check_head_shares(const TransformerSpec& m, const ParallelSpec& p, bool mpmd, std::vector<LayoutProblem>& out) {
  auto problem = [&](std::string path, std::string message) { out.push_back({std::move(path), std::move(message)}); };
  const std::size_t before = out.size();
  const char* at = "/parallel/head_shares";
  if (p.cp_ulysses < 2) {
    problem(at,
            "uneven head shares need Ulysses or hybrid CP (cp_kind \"ulysses\" or \"hybrid\"); the Ulysses "
            "degree is " +
                str(p.cp_ulysses));
  }
  if (mpmd) problem(at, "uneven head shares are not modelled with per-stage layouts (parallel.stages) or an encoder");
  if (p.uneven_shares()) problem(at, "uneven head shares together with parallel.dp_shares are not modelled");
  if (m.moe.enabled()) problem(at, "uneven head shares with mixture-of-experts layers are not modelled");
  if (p.schedule == ScheduleKind::Custom) problem(at, "uneven head shares need a built-in schedule");
  if (out.size() != before || m.heads <= 0 || p.tp < 1 || m.heads % p.tp != 0) return;
  const int heads = m.heads / p.tp;
  if (p.head_shares_auto) {
    if (heads < p.cp_ulysses) {
      problem(at, "\"auto\" gives each Ulysses rank at least one head: the " + str(heads) +
                      " heads of a tensor-parallel rank are fewer than the Ulysses degree " + str(p.cp_ulysses));
    }
    return;
  }
  if (static_cast<std::int64_t>(p.head_shares.size()) != p.cp_ulysses) {
    problem(at, "expected one head count per Ulysses rank (Ulysses degree " + str(p.cp_ulysses) + "), found " +
                    str(static_cast<std::int64_t>(p.head_shares.size())));
    return;
  }
  const std::int64_t sum = std::accumulate(p.head_shares.begin(), p.head_shares.end(), std::int64_t{0});
  if (sum != heads) {
    problem(at, "the shares sum to " + str(sum) + " heads; expected the " + str(heads) +
                    " heads of a tensor-parallel rank (" + str(m.heads) + " heads / tp " + str(p.tp) + ")");
  }
}

}  // namespace

// Ulysses (DeepSpeed-Ulysses, arXiv:2309.14509: the head count must be divisible
// by the sequence-parallel degree) splits each TP rank's heads over the Ulysses group; K and V heads fewer than
// the degree are replicated, so the degree must then be a multiple of them.
template <typename Problem>
void check_ulysses(const TransformerSpec& m, const ParallelSpec& p, bool mpmd, Problem&& problem) {
  const int u = p.cp_ulysses;
  if (u == 1) return;
  const char* at = u == p.cp ? "/parallel/cp" : "/parallel/cp_ulysses";
  if (u > p.cp || p.cp % u != 0) {
    problem("/parallel/cp_ulysses", "expected a Ulysses degree that divides cp = " + str(p.cp) + ", found " + str(u));
  } else if (mpmd) {
    problem("/parallel/cp_kind",
            "Ulysses context parallelism with per-stage layouts is not modelled; use cp_kind \"ring\"");
  } else if (m.parallel_block) {
    problem("/parallel/cp_kind",
            "Ulysses context parallelism with a parallel attention+MLP block is not modelled; use cp_kind \"ring\"");
  } else if (m.heads > 0 && m.heads % p.tp == 0 && !p.head_shares_auto && p.head_shares.empty()) {
    // Uneven head shares give each rank its own heads (check_head_shares).
    const int heads = m.heads / p.tp;
    const int kv = std::max(1, m.kv_heads / p.tp);
    if (heads % u != 0) {
      problem(at, "Ulysses splits the " + str(heads) + " attention heads of each tensor-parallel rank (" +
                      str(m.heads) + " heads / tp " + str(p.tp) + ") over its degree " + str(u) +
                      ", which must divide them");
    } else if (!m.mla.enabled() && kv % u != 0 && u % kv != 0) {
      problem(at, "Ulysses splits the " + str(kv) + " KV heads of each tensor-parallel rank over its degree " + str(u) +
                      "; the degree must divide them or be a multiple of them (KV heads replicated)");
    }
  }
}

std::vector<LayoutProblem> check_layout(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& t,
                                        const ClusterSpec& cluster) {
  std::vector<LayoutProblem> out;
  auto problem = [&](const char* path, std::string message) { out.push_back({path, std::move(message)}); };

  // Sizes below 1 make the divisibility rules meaningless (the loader never lets them through).
  bool sizes_ok = true;
  for (const auto& [key, value] : {std::pair<const char*, int>{"/parallel/tp", p.tp},
                                   {"/parallel/pp", p.pp},
                                   {"/parallel/dp", p.dp},
                                   {"/parallel/cp", p.cp},
                                   {"/parallel/ep", p.ep},
                                   {"/parallel/vpp", p.vpp},
                                   {"/parallel/micro_batch", p.micro_batch},
                                   {"/parallel/global_batch", p.global_batch}}) {
    if (value < 1) {
      problem(key, "expected an integer >= 1, found " + str(value));
      sizes_ok = false;
    }
  }
  if (!sizes_ok) return out;

  check_moe_layout(m, p, t, problem);

  // The schedule and the virtual stages belong together.
  const bool interleaved = p.schedule == ScheduleKind::Interleaved1F1B;
  const bool looped = interleaved || p.schedule == ScheduleKind::BreadthFirst;  // chunk v on rank v mod pp
  const bool custom = p.schedule == ScheduleKind::Custom;
  if (interleaved && p.vpp < 2) {
    problem("/parallel/vpp", "the interleaved-1f1b schedule needs vpp >= 2 virtual stages, found " + str(p.vpp));
  }
  if (custom && p.vpp > 1) {
    problem("/parallel/vpp",
            "a custom schedule places its chunks with chunk_stages; vpp must stay 1, found " + str(p.vpp));
  } else if (!looped && p.vpp > 1) {
    problem("/parallel/schedule", "vpp = " + str(p.vpp) +
                                      " needs the \"interleaved-1f1b\" or \"breadth-first\" schedule, found \"" +
                                      to_string(p.schedule) + "\"");
  }

  const std::int64_t gpus = cluster_gpus(cluster);
  const bool mpmd = !p.stages.empty() || !m.encoder.empty();  // per-stage layouts: models/mpmd.cpp checks them
  for (LayoutProblem& q : check_stage_layouts(m, p, t, cluster)) out.push_back(std::move(q));
  const auto ranks = mpmd ? std::optional<std::int64_t>(gpus) : product({p.tp, p.pp, p.dp, p.cp});
  if (mpmd) {
  } else if (!ranks || *ranks != gpus) {
    problem("/parallel", "tp*pp*dp*cp = " + str(p.tp) + "*" + str(p.pp) + "*" + str(p.dp) + "*" + str(p.cp) + " = " +
                             product_text(ranks) + ", expected the cluster's GPU count " + str(gpus));
  }
  if (mpmd) {
  } else if (m.heads > 0 && m.heads % p.tp != 0) {
    problem("/parallel/tp",
            "expected a divisor of the model's " + str(m.heads) + " attention heads, found " + str(p.tp));
  } else if (m.kv_heads > 0 && m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0) {
    problem("/parallel/tp", "expected tp to divide or be a multiple of the model's " + str(m.kv_heads) +
                                " KV heads, found " + str(p.tp));
  }
  if (!mpmd && m.ffn_hidden > 0 && m.ffn_hidden % p.tp != 0) {
    problem("/parallel/tp", "expected a divisor of ffn_hidden " + str(m.ffn_hidden) + ", found " + str(p.tp));
  }
  // Model chunks: pp*vpp, or one per entry of a custom schedule's chunk_stages.
  const bool v_shape = p.schedule == ScheduleKind::ZeroBubbleV || p.schedule == ScheduleKind::DualPipeV;
  const auto chunks = custom    ? std::optional<std::int64_t>(p.custom_schedule.chunks())
                      : v_shape ? product({p.pp, 2})
                                : product({p.pp, p.vpp});
  if (mpmd) {
  } else if (!p.stage_layers.empty()) {
    std::int64_t sum = 0;
    for (int l : p.stage_layers) sum += l;
    if (!chunks || static_cast<std::int64_t>(p.stage_layers.size()) != *chunks || sum != m.layers) {
      const std::string what = custom    ? "one per chunk of the custom schedule (" + product_text(chunks) + ")"
                               : v_shape ? "two per pipeline rank (" + product_text(chunks) + ")"
                                         : "pp*vpp = " + str(p.pp) + "*" + str(p.vpp) + " = " + product_text(chunks);
      problem("/parallel/stage_layers", "expected " + what + " entries summing to the model's " + str(m.layers) +
                                            " layers, found " + str(static_cast<std::int64_t>(p.stage_layers.size())) +
                                            " entries summing to " + str(sum));
    }
  } else if (custom) {
    if (p.custom_schedule.chunks() > 0 && m.layers % p.custom_schedule.chunks() != 0) {
      problem("/parallel/schedule/chunk_stages",
              "the model's " + str(m.layers) + " layers must divide evenly into the schedule's " +
                  str(p.custom_schedule.chunks()) + " chunks (or give stage_layers)");
    }
  } else {
    if (v_shape && (!chunks || m.layers % *chunks != 0)) {
      problem("/parallel/pp", "the model's " + str(m.layers) + " layers must divide evenly into the " +
                                  product_text(chunks) + " chunks of " + to_string(p.schedule) +
                                  " (two per pipeline rank), or give stage_layers");
    } else if (!chunks || m.layers % *chunks != 0) {
      problem("/parallel/pp", "the model's " + str(m.layers) + " layers must divide evenly into pp*vpp = " + str(p.pp) +
                                  "*" + str(p.vpp) + " = " + product_text(chunks) + " stages");
    }
  }
  const auto per_step = product({p.micro_batch, p.dp});
  if (p.uneven_shares()) {
    check_shares(m, p, mpmd, out);
  } else if (!per_step || p.global_batch % *per_step != 0) {
    problem("/parallel/global_batch", "expected a multiple of micro_batch*dp = " + str(p.micro_batch) + "*" +
                                          str(p.dp) + " = " + product_text(per_step) + ", found " +
                                          str(p.global_batch));
  } else if (p.schedule == ScheduleKind::DualPipeV &&
             p.global_batch / *per_step < 2 * static_cast<std::int64_t>(p.pp)) {
    problem("/parallel/global_batch", "dualpipe-v needs at least 2*pp = " + str(2 * static_cast<std::int64_t>(p.pp)) +
                                          " micro-batches, found " + str(p.global_batch / *per_step));
  } else if (interleaved && (p.global_batch / *per_step) % p.pp != 0) {
    problem("/parallel/global_batch", "interleaved-1f1b needs the micro-batch count (" +
                                          str(p.global_batch / *per_step) + ") to be a multiple of pp = " + str(p.pp));
  }
  check_asynchronous_pipeline(m, p, t, problem);
  if (p.schedule == ScheduleKind::DualPipe) {
    // Two copies of the model fed from both ends (models/v_schedules.hpp): half the micro-batches each way.
    if (p.pp < 2 || p.pp % 2 != 0) {
      problem("/parallel/pp", "dualpipe needs an even pp >= 2, found " + str(p.pp));
    } else if (p.uneven_shares()) {
      problem("/parallel/dp_shares", "dualpipe with uneven data-parallel shares is not modelled");
    } else if (p.micro_batches() < 2 * p.pp || p.micro_batches() % 2 != 0) {
      problem("/parallel/global_batch", "dualpipe needs an even number of micro-batches per replica, at least 2*pp = " +
                                            str(2 * static_cast<std::int64_t>(p.pp)) + ", found " +
                                            str(p.micro_batches()));
    }
    if (mpmd) problem("/parallel/schedule", "dualpipe with per-stage layouts is not modelled");
  }
  if (p.moe_a2a_overlap && p.schedule != ScheduleKind::OneFOneB && !interleaved) {
    problem("/parallel/moe_a2a_overlap", "overlaps the steady phase of 1f1b or interleaved-1f1b; the schedule is \"" +
                                             std::string(to_string(p.schedule)) + "\"");
  }
  if (p.moe_a2a_overlap && interleaved && !p.pp_overlap) {
    // Megatron-LM's batched exchange without overlap runs between the two passes an
    // overlapped pair fuses (models/schedule.hpp, megatron_batched_exchanges).
    problem("/parallel/moe_a2a_overlap",
            "with interleaved-1f1b needs pp_overlap true: the blocking batched exchange between the two passes it "
            "overlaps is not modelled");
  }
  if (interleaved && p.pp < 2) {
    problem("/parallel/schedule", "interleaved-1f1b needs pp >= 2, found pp = " + str(p.pp));
  }
  if (p.uneven_cp()) {
    check_cp_shares(m, p, t, mpmd, out);
  } else if (t.seq_len % p.cp != 0) {
    problem("/parallel/cp", "expected a divisor of seq_len " + str(t.seq_len) + ", found " + str(p.cp));
  }
  check_ulysses(m, p, mpmd, problem);
  if (p.uneven_heads()) check_head_shares(m, p, mpmd, out);
  if (p.seq_chunks > 1 && p.schedule != ScheduleKind::Seq1F1B) {
    problem("/parallel/seq_chunks", "splits micro-batches for the \"seq1f1b\" schedule; the schedule is \"" +
                                        std::string(to_string(p.schedule)) + "\"");
  } else if (p.seq_chunks > 1 && t.seq_len % p.seq_chunks != 0) {
    problem("/parallel/seq_chunks", "expected a divisor of seq_len " + str(t.seq_len) + ", found " + str(p.seq_chunks));
  } else if (p.seq_chunks > 1 && p.cp > 1) {
    problem("/parallel/cp",
            "seq1f1b's sequence chunks with context parallelism are not modelled; use cp = 1 or "
            "seq_chunks = 1");
  } else if (p.seq_chunks > 1 && mpmd) {
    problem("/parallel/seq_chunks", "seq1f1b's sequence chunks with per-stage layouts are not modelled");
  } else if (p.seq_chunks > 1 && m.moe.enabled()) {
    problem("/parallel/seq_chunks", "seq1f1b's sequence chunks with mixture-of-experts layers are not modelled");
  }
  for (const auto& g : cluster.groups) {
    if (g.node.gpu.peak(t.precision) <= 0) {
      problem("/training/precision",
              std::string("GPU ") + g.node.gpu.name + " has no " + to_string(t.precision) + " tensor cores");
    }
  }
  if (custom && out.empty()) {
    // The units must fit this layout (pp ranks, its micro-batch count) and be free of deadlock.
    PipelineSchedule s = p.custom_schedule;
    s.microbatches = p.micro_batches();
    if (s.stages != p.pp) {
      problem("/parallel/schedule/units",
              "expected a unit list for each of the pp = " + str(p.pp) + " pipeline ranks, found " + str(s.stages));
    } else {
      for (const std::string& why : check_schedule(s)) problem("/parallel/schedule", why);
    }
  }
  if (!mpmd && ranks && *ranks == gpus && out.empty()) {
    for (const std::string& why : Placement::check(p, p.placement_order, p.placement_gpus, static_cast<int>(gpus)))
      problem("/parallel/placement", why);
  }
  return out;
}

}  // namespace trainsim
