#include "models/layout_search.hpp"

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>

#include "models/layout_rules.hpp"
#include "models/memory_model.hpp"
#include "models/schedule.hpp"

namespace trainsim {

namespace {

// Recompute options from the least to the most extra work.
int recompute_rank(Recompute r) { return r == Recompute::None ? 0 : r == Recompute::Selective ? 1 : 2; }
// ZeRO stages from the least to the most time: 1 and 2 reduce-scatter the
// gradients and gather the updated parameters (the bytes of one all-reduce, the
// gather prefetched) and step only their optimizer shard; 0 all-reduces and steps
// everything; 3 adds a parameter gather per layer and micro-batch.
int zero_rank(int z) { return z == 1 ? 0 : z == 2 ? 1 : z == 0 ? 2 : 3; }

}  // namespace

LayoutSearchResult search_layouts(const TransformerSpec& m, const TrainingSpec& training, const ClusterSpec& cluster,
                                  const ParallelSpec& base, double memory_capacity, const LayoutSearchSpace& ss) {
  LayoutSearchResult out;
  std::int64_t gpus = 0;
  for (const auto& g : cluster.groups) gpus += static_cast<std::int64_t>(g.count) * g.node.gpus_per_node;
  const int gpus_per_node = cluster.groups.empty() ? 0 : cluster.groups.front().node.gpus_per_node;
  // Layouts with vpp = 1 keep the base's schedule of one chunk per rank (GPipe,
  // 1F1B, the Zero Bubble ones); vpp > 1 runs each of the looped schedules.
  const bool flat_base = base.schedule != ScheduleKind::Interleaved1F1B && base.schedule != ScheduleKind::Custom &&
                         base.schedule != ScheduleKind::BreadthFirst;
  const ScheduleKind flat_schedule = flat_base ? base.schedule : ScheduleKind::OneFOneB;

  std::vector<int> tps = ss.tp, pps = ss.pp, cps = ss.cp;
  if (cps.empty()) {
    for (int cp : {1, 2, 4, 8}) {
      if (cp == 1 || training.seq_len / cp >= kMinTokensPerCpRank) cps.push_back(cp);
    }
  }
  if (tps.empty()) {
    for (int t = 1; t <= gpus_per_node; ++t) tps.push_back(t);
  }
  if (pps.empty()) {
    for (int p = 1; p <= m.layers; ++p) pps.push_back(p);
  }

  // Expert parallelism: explicit lists, or for a MoE model every divisor of its
  // experts and expert TP 1 or tp (0 stands for "= tp"); dense models keep ep = 1.
  std::vector<int> eps = ss.ep, etps = ss.etp;
  if (eps.empty()) {
    for (int e = 1; e <= std::max(1, m.moe.experts); ++e) {
      if (m.moe.experts % e == 0 || e == 1) eps.push_back(e);
    }
  }
  if (etps.empty()) etps = m.moe.enabled() ? std::vector<int>{1, 0} : std::vector<int>{0};

  const std::size_t n_sp = ss.sequence_parallel.size(), n_rc = ss.recompute.size(), n_z = ss.zero.size();
  const std::size_t per_expert = n_sp * n_rc * n_z;
  const std::size_t per_mb = eps.size() * etps.size() * per_expert;
  // (vpp, schedule) pairs: the flat schedule with vpp = 1, each looped one with vpp > 1.
  std::vector<std::pair<int, ScheduleKind>> vpp_schedules;
  for (int vpp : ss.vpp) {
    if (vpp <= 1) {
      vpp_schedules.emplace_back(vpp, flat_schedule);
    } else {
      for (ScheduleKind k : ss.vpp_schedules) vpp_schedules.emplace_back(vpp, k);
    }
  }
  const std::size_t per_tp = pps.size() * cps.size() * vpp_schedules.size() * ss.micro_batch.size() * per_mb;
  out.grid = tps.size() * per_tp;

  // Every sequence-parallel, recompute and ZeRO option of a valid layout: those
  // that fit in memory and are not dominated become candidates.
  auto add_expert_layout = [&](ParallelSpec par) {
    const int tp = par.tp, pp = par.pp, cp = par.cp;
    std::set<bool> sp_seen;
    for (bool sp_in : ss.sequence_parallel) {
      const bool sp = sp_in && tp > 1;
      if (!sp_seen.insert(sp).second) {
        out.redundant += n_rc * n_z;
        continue;
      }
      if (m.moe.enabled() && tp > 1 && !sp) {  // MoE with TP needs sequence parallelism (layout rules)
        out.invalid += n_rc * n_z;
        continue;
      }
      par.sequence_parallel = sp;
      // Every (recompute, zero) of this layout that fits in memory.
      std::vector<ParallelSpec> fits;
      std::set<std::pair<Recompute, int>> seen;
      for (Recompute rc : ss.recompute) {
        for (int z_in : ss.zero) {
          const int zero = par.dp * cp > 1 ? z_in : 0;
          if (!seen.insert({rc, zero}).second) {
            ++out.redundant;
            continue;
          }
          par.zero = zero;
          par.recompute = rc;
          bool oom = false;
          const PipelineSchedule sched = schedule_of(par);  // once per layout: ZB-1p/2p and ZB-V are searched
          for (int st = 0; st < pp && !oom; ++st) {
            oom = stage_memory(m, par, training, sched, st).total() > memory_capacity;
          }
          if (oom) {
            ++out.pruned_oom;
          } else {
            fits.push_back(par);
          }
        }
      }
      for (const ParallelSpec& o : fits) {
        bool dominated = false;
        if (ss.prune_dominated) {
          for (const ParallelSpec& other : fits) {
            const bool different = other.recompute != o.recompute || other.zero != o.zero;
            dominated |= different && recompute_rank(other.recompute) <= recompute_rank(o.recompute) &&
                         zero_rank(other.zero) <= zero_rank(o.zero);
          }
        }
        if (dominated) {
          ++out.pruned_dominated;
        } else {
          out.candidates.push_back(o);
        }
      }
    }
  };

  for (int tp : tps) {
    // The search keeps TP inside a node's scale-up domain (the scenario rules allow more).
    if (tp < 1 || tp > gpus_per_node) {
      out.invalid += per_tp;
      continue;
    }
    for (int pp : pps) {
      for (int cp : cps) {
        // dp follows from the GPU count; where it is not an integer the rules reject the layout.
        const std::int64_t per_replica = static_cast<std::int64_t>(tp) * std::max(pp, 1) * std::max(cp, 1);
        const std::int64_t dp = std::max<std::int64_t>(1, gpus / per_replica);
        for (const auto& [vpp, schedule] : vpp_schedules) {
          for (int mb : ss.micro_batch) {
            ParallelSpec par = base;
            par.stage_layers.clear();
            par.tp = tp;
            par.pp = pp;
            par.dp = static_cast<int>(std::min<std::int64_t>(dp, 1 << 30));
            par.cp = cp;
            par.vpp = vpp;
            par.schedule = schedule;
            par.micro_batch = mb;
            std::set<int> etp_seen;
            for (int ep : eps) {
              for (int etp_in : etps) {
                par.ep = ep;
                par.etp = etp_in;
                if (etp_in == 0 || etp_in == tp) {
                  // "= tp" and an explicit tp are one layout (and with ep = 1 on a dense model the only one).
                  if (!etp_seen.insert(ep * 65536 + tp).second) {
                    out.redundant += per_expert;
                    continue;
                  }
                }
                par.sequence_parallel = m.moe.enabled() && tp > 1;  // the options are tried below
                if (!check_layout(m, par, training, cluster).empty()) {
                  out.invalid += per_expert;
                  continue;
                }
                add_expert_layout(par);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace trainsim
