#include "models/placement.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace trainsim {

const char* to_string(ParallelDim d) {
  switch (d) {
    case ParallelDim::TP:
      return "tp";
    case ParallelDim::CP:
      return "cp";
    case ParallelDim::EP:
      return "ep";
    case ParallelDim::DP:
      return "dp";
    case ParallelDim::PP:
      return "pp";
  }
  return "?";
}

namespace {

// The dimensions of an order string, innermost first; empty when malformed.
std::vector<ParallelDim> parse_order(const std::string& order, std::string* why) {
  std::vector<ParallelDim> dims;
  std::stringstream in(order);
  std::string part;
  while (std::getline(in, part, '-')) {
    bool found = false;
    for (std::size_t d = 0; d < kNumParallelDims; ++d) {
      if (part == to_string(static_cast<ParallelDim>(d))) {
        if (std::find(dims.begin(), dims.end(), static_cast<ParallelDim>(d)) != dims.end()) {
          *why = "names \"" + part + "\" twice";
          return {};
        }
        dims.push_back(static_cast<ParallelDim>(d));
        found = true;
      }
    }
    if (!found) {
      *why = "\"" + part + "\" is not a parallel dimension (expected tp, cp, ep, dp, pp)";
      return {};
    }
  }
  if (dims.size() != kNumParallelDims) {
    *why = "expected all five dimensions tp, cp, ep, dp, pp joined by '-', innermost first (e.g. \"tp-cp-ep-dp-pp\")";
    return {};
  }
  return dims;
}

std::array<int, kNumParallelDims> sizes_of(const ParallelSpec& par) {
  // Expert parallelism folds into data parallelism for dense models (ep = 1 today).
  return {par.tp, par.cp, 1, par.dp, par.pp};
}

}  // namespace

Placement::Placement(const ParallelSpec& par) : Placement(par, "tp-cp-ep-dp-pp") {}

Placement::Placement(const ParallelSpec& par, const std::string& order, std::vector<int> gpus)
    : order_(order), gpus_(std::move(gpus)) {
  std::string why;
  const std::vector<ParallelDim> dims = parse_order(order, &why);
  if (dims.empty()) throw std::invalid_argument("placement order \"" + order + "\": " + why);
  size_ = sizes_of(par);
  long stride = 1;
  for (ParallelDim d : dims) {
    stride_[static_cast<std::size_t>(d)] = stride;
    stride *= size_[static_cast<std::size_t>(d)];
  }
  ranks_ = static_cast<int>(stride);
  if (!gpus_.empty() && static_cast<int>(gpus_.size()) != ranks_)
    throw std::invalid_argument("placement lists " + std::to_string(gpus_.size()) + " GPUs for " +
                                std::to_string(ranks_) + " ranks");
}

int Placement::rank_index(const RankCoord& c) const {
  const int coord[] = {c.tp, c.cp, c.ep, c.dp, c.pp};
  long r = 0;
  for (std::size_t d = 0; d < kNumParallelDims; ++d) r += coord[d] * stride_[d];
  return static_cast<int>(r);
}

int Placement::gpu(const RankCoord& c) const {
  const int r = rank_index(c);
  return gpus_.empty() ? r : gpus_[r];
}

std::vector<std::string> Placement::check(const ParallelSpec& par, const std::string& order,
                                          const std::vector<int>& gpus, int gpus_in_cluster) {
  std::vector<std::string> problems;
  std::string why;
  if (parse_order(order, &why).empty()) problems.push_back("order \"" + order + "\": " + why);
  if (gpus.empty()) return problems;
  const long ranks = static_cast<long>(par.tp) * par.cp * par.dp * par.pp;
  if (static_cast<long>(gpus.size()) != ranks) {
    problems.push_back("lists " + std::to_string(gpus.size()) + " GPUs, expected one per rank (" +
                       std::to_string(ranks) + ")");
    return problems;
  }
  std::vector<int> seen(static_cast<std::size_t>(std::max(gpus_in_cluster, 0)), -1);
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const int g = gpus[i];
    if (g < 0 || g >= gpus_in_cluster) {
      problems.push_back("rank " + std::to_string(i) + " is placed on GPU " + std::to_string(g) + ", expected 0.." +
                         std::to_string(gpus_in_cluster - 1));
    } else if (seen[g] >= 0) {
      problems.push_back("ranks " + std::to_string(seen[g]) + " and " + std::to_string(i) + " are both placed on GPU " +
                         std::to_string(g));
    } else {
      seen[g] = static_cast<int>(i);
    }
    if (problems.size() >= 8) break;
  }
  return problems;
}

}  // namespace trainsim
