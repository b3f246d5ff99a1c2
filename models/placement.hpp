#pragma once
// Explicit placement: which GPU runs the rank at parallel coordinates
// (tp, cp, ep, dp, pp). Megatron-LM's order (tp innermost, then cp, ep, dp, pp)
// by default, any other order of the dimensions, or an explicit GPU per rank.
// The planner asks the placement for every rank and communicator member, so a
// layout that puts DP across datacenters and one that keeps it inside are two
// placements of the same plan.
#include <array>
#include <string>
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim {

enum class ParallelDim : std::uint8_t { TP, CP, EP, DP, PP };
inline constexpr std::size_t kNumParallelDims = 5;
const char* to_string(ParallelDim d);

struct RankCoord {
  int tp = 0, cp = 0, ep = 0, dp = 0, pp = 0;
};

class Placement {
 public:
  // Megatron-LM order for `par` ("tp-cp-ep-dp-pp").
  explicit Placement(const ParallelSpec& par);
  // `order`: the five dimension names joined by '-', innermost first; `gpus`
  // (optional): the GPU of each rank, ranks numbered by that order. Throws
  // std::invalid_argument with a message naming the problem.
  Placement(const ParallelSpec& par, const std::string& order, std::vector<int> gpus = {});
  // The placement `par` asks for (placement_order, placement_gpus).
  static Placement of(const ParallelSpec& par) { return Placement(par, par.placement_order, par.placement_gpus); }

  // Rank index in the order (0 .. ranks-1) and its GPU.
  int rank_index(const RankCoord& c) const;
  int gpu(const RankCoord& c) const;
  int ranks() const { return ranks_; }
  const std::string& order() const { return order_; }
  bool explicit_gpus() const { return !gpus_.empty(); }

  // Problems of an order string / explicit GPU list for `par` on `gpus_in_cluster`
  // GPUs, each a message (empty = valid); used by the scenario loader.
  static std::vector<std::string> check(const ParallelSpec& par, const std::string& order, const std::vector<int>& gpus,
                                        int gpus_in_cluster);

 private:
  std::array<int, kNumParallelDims> size_{};     // by ParallelDim
  std::array<long, kNumParallelDims> stride_{};  // by ParallelDim
  std::string order_;
  std::vector<int> gpus_;
  int ranks_ = 1;
};

}  // namespace trainsim
