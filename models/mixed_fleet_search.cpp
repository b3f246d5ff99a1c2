#include "models/mixed_fleet_search.hpp"

#include <algorithm>
#include <numeric>

#include "models/layout_rules.hpp"
#include "models/memory_model.hpp"
#include "models/mpmd.hpp"
#include "models/schedule.hpp"

namespace trainsim {

namespace {

// Splits `layers` over `stages` stages as evenly as possible (the first ones take the remainder).
void split_even(int layers, int stages, int tp, int group, std::vector<StageLayout>& out) {
  for (int i = 0; i < stages; ++i) {
    StageLayout st;
    st.group = group;
    st.tp = tp;
    st.layers = layers / stages + (i < layers % stages ? 1 : 0);
    out.push_back(st);
  }
}

}  // namespace

MixedFleetSearchResult search_mixed_fleet(const TransformerSpec& model, const TrainingSpec& training,
                                          const ClusterSpec& cluster, const ParallelSpec& base,
                                          const std::vector<double>& memory_capacity,
                                          const MixedFleetSearchSpace& space) {
  MixedFleetSearchResult out;
  const int groups = static_cast<int>(cluster.groups.size());
  std::vector<long> group_gpus, group_first;
  long total = 0;
  int max_node = 1;
  for (const auto& g : cluster.groups) {
    group_first.push_back(total);
    group_gpus.push_back(static_cast<long>(g.count) * g.node.gpus_per_node);
    total += group_gpus.back();
    max_node = std::max(max_node, g.node.gpus_per_node);
  }
  std::vector<int> tps = space.tp;
  if (tps.empty()) {
    for (int t = 1; t <= max_node; t *= 2) tps.push_back(t);
  }
  const int layers = model.layers + (model.encoder.empty() ? 0 : model.encoder.front().layers);

  auto consider = [&](ParallelSpec par, bool homogeneous) {
    ++out.enumerated;
    par.pp = static_cast<int>(par.stages.size());
    if (!check_layout(model, par, training, cluster).empty()) {
      ++out.invalid;
      return;
    }
    const std::vector<int> first = stage_first_gpus(par, cluster);
    const PipelineSchedule sched = schedule_of(par);
    for (int s = 0; s < par.pp; ++s) {
      const StageProgramSpec sp = stage_program_spec(model, par, training, s);
      const double need = stage_memory(sp.model, sp.par, sp.train, sched, s, sp.first_stage).total();
      // The smallest capacity of the groups the stage's GPUs fall in.
      const long lo = first[s], hi = lo + static_cast<long>(sp.par.tp) * sp.par.dp * par.cp;
      double capacity = -1;
      for (int g = 0; g < groups; ++g) {
        if (lo < group_first[g] + group_gpus[g] && hi > group_first[g])
          capacity = capacity < 0 ? memory_capacity[g] : std::min(capacity, memory_capacity[g]);
      }
      if (need > capacity) {
        ++out.pruned_oom;
        return;
      }
    }
    out.candidates.push_back(MixedFleetCandidate{std::move(par), homogeneous});
  };

  std::vector<int> order(static_cast<std::size_t>(groups));
  std::iota(order.begin(), order.end(), 0);
  for (int dp = 1; dp <= total; ++dp) {
    if (total % dp != 0) continue;
    for (int mb : space.micro_batch) {
      if (base.global_batch % (static_cast<long>(mb) * dp) != 0) continue;
      ParallelSpec par = base;
      par.dp = dp;
      par.cp = 1;
      par.micro_batch = mb;
      par.vpp = 1;
      par.stage_layers.clear();
      // Plans that treat every GPU alike: uniform TP, pp stages in GPU order, even layers.
      for (int tp : tps) {
        if (total % (static_cast<long>(tp) * dp) != 0) continue;
        const int pp = static_cast<int>(total / (static_cast<long>(tp) * dp));
        if (pp > layers) continue;
        par.tp = tp;
        par.stages.clear();
        split_even(layers, pp, tp, -1, par.stages);
        consider(par, true);
      }
      // Per-group plans: each group its stage count and TP (using all its GPUs),
      // groups in every order, every split of the layers between the groups.
      std::sort(order.begin(), order.end());
      do {
        std::vector<int> stages_of(static_cast<std::size_t>(groups), 1);
        while (true) {
          std::vector<int> tp_of(static_cast<std::size_t>(groups), 0);
          bool ok = true;
          for (int g = 0; g < groups && ok; ++g) {
            const long per = static_cast<long>(stages_of[g]) * dp;
            ok = group_gpus[g] % per == 0 &&
                 std::find(tps.begin(), tps.end(), static_cast<int>(group_gpus[g] / per)) != tps.end();
            if (ok) tp_of[g] = static_cast<int>(group_gpus[g] / per);
          }
          if (ok) {
            // Layers of each group (in `order`), a multiple of layer_step except the last group's.
            std::vector<int> share(static_cast<std::size_t>(groups), 0);
            auto assign = [&](auto&& self, int i, int left) -> void {
              const int g = order[i];
              if (i == groups - 1) {
                if (left < stages_of[g]) return;
                share[g] = left;
                par.stages.clear();
                for (int k = 0; k < groups; ++k)
                  split_even(share[order[k]], stages_of[order[k]], tp_of[order[k]], order[k], par.stages);
                par.tp = par.stages.front().tp;
                consider(par, false);
                return;
              }
              int rest_min = 0;
              for (int k = i + 1; k < groups; ++k) rest_min += stages_of[order[k]];
              for (int l = stages_of[g]; l <= left - rest_min; l += std::max(1, space.layer_step)) {
                share[g] = l;
                self(self, i + 1, left - l);
              }
            };
            assign(assign, 0, layers);
          }
          int g = 0;
          while (g < groups && ++stages_of[g] > space.max_stages_per_group) stages_of[g++] = 1;
          if (g == groups) break;
        }
      } while (std::next_permutation(order.begin(), order.end()));
    }
  }
  return out;
}

}  // namespace trainsim
