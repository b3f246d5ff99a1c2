#include "models/mixed_fleet_search.hpp"

#include <algorithm>
#include <numeric>

#include "models/layout_rules.hpp"
#include "models/memory_model.hpp"
#include "models/mpmd.hpp"
#include "models/schedule.hpp"

namespace trainsim {

namespace {

// Splits `layers` over `stages` stages of layout `st` as evenly as possible
// (the first ones take the remainder).
void split_even(int layers, int stages, StageLayout st, std::vector<StageLayout>& out) {
  for (int i = 0; i < stages; ++i) {
    st.layers = layers / stages + (i < layers % stages ? 1 : 0);
    out.push_back(st);
  }
}

StageLayout layout_of(int group, int tp) {
  StageLayout st;
  st.group = group;
  st.tp = tp;
  return st;
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
        split_even(layers, pp, layout_of(-1, tp), par.stages);
        consider(par, true);
      }
      // Per-group plans: each group its stage count and TP (using all its GPUs),
      // groups in every order, every split of the layers between the groups.
      std::sort(order.begin(), order.end());
      do {
        std::vector<int> stages_of(static_cast<std::size_t>(groups), 1);
        while (true) {
          // Layers of each group (in `order`), a multiple of layer_step except the last group's.
          std::vector<int> share(static_cast<std::size_t>(groups), 0);
          auto assign = [&](auto&& self, const std::vector<StageLayout>& layout, int i, int left) -> void {
            const int g = order[i];
            if (i == groups - 1) {
              if (left < stages_of[g]) return;
              share[g] = left;
              par.stages.clear();
              for (int k = 0; k < groups; ++k)
                split_even(share[order[k]], stages_of[order[k]], layout[order[k]], par.stages);
              par.tp = par.stages.front().tp;
              consider(par, false);
              return;
            }
            int rest_min = 0;
            for (int k = i + 1; k < groups; ++k) rest_min += stages_of[order[k]];
            for (int l = stages_of[g]; l <= left - rest_min; l += std::max(1, space.layer_step)) {
              share[g] = l;
              self(self, layout, i + 1, left - l);
            }
          };
          // One DP for every stage: each group the TP that then uses all of its GPUs.
          std::vector<StageLayout> layout(static_cast<std::size_t>(groups));
          bool ok = true;
          for (int g = 0; g < groups && ok; ++g) {
            const long per = static_cast<long>(stages_of[g]) * dp;
            ok = group_gpus[g] % per == 0 &&
                 std::find(tps.begin(), tps.end(), static_cast<int>(group_gpus[g] / per)) != tps.end();
            if (ok) layout[g] = layout_of(g, static_cast<int>(group_gpus[g] / per));
          }
          if (ok) assign(assign, layout, 0, layers);
          // Per-stage DP: each group any TP of the space, its DP then using all of
          // its GPUs and its micro-batch the step's dp*mb samples over them; the
          // first group in `order` keeps dp and mb (so each plan comes once).
          if (space.stage_dp) {
            std::vector<int> pick(static_cast<std::size_t>(groups), 0);
            while (true) {
              bool valid = true, differs = false;
              for (int g = 0; g < groups && valid; ++g) {
                const int tp = tps[static_cast<std::size_t>(pick[g])];
                const long per = static_cast<long>(stages_of[g]) * tp;
                const long gdp = group_gpus[g] % per == 0 ? group_gpus[g] / per : 0;
                valid = gdp > 0 && (static_cast<long>(dp) * mb) % gdp == 0 && (g != order[0] || gdp == dp);
                if (!valid) break;
                differs = differs || gdp != dp;
                layout[g] = layout_of(g, tp);
                layout[g].dp = static_cast<int>(gdp);
                layout[g].micro_batch = static_cast<int>(static_cast<long>(dp) * mb / gdp);
              }
              if (valid && differs) assign(assign, layout, 0, layers);
              int g = 0;
              while (g < groups && ++pick[g] == static_cast<int>(tps.size())) pick[g++] = 0;
              if (g == groups) break;
            }
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
