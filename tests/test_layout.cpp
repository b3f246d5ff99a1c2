#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "model_fixtures.hpp"
#include "models/layout_rules.hpp"
#include "models/layout_search.hpp"
#include "models/memory_model.hpp"
#include "sim_fixtures.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

const TransformerSpec& gpt3_1_3b() {
  static const TransformerSpec m = fixture_model("gpt3-1.3b");  // 24 layers, 16 heads, ffn 8192
  return m;
}

// tp 2, pp 2, dp 4 on 16 GPUs, global batch 32: valid.
ParallelSpec good_layout() {
  ParallelSpec p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 4;
  p.micro_batch = 1;
  p.global_batch = 32;
  return p;
}

std::string problems_text(const ParallelSpec& p, const ClusterSpec& c = toy_cluster(2, 8), int seq_len = 2048) {
  TrainingSpec t;
  t.seq_len = seq_len;
  std::string out;
  for (const auto& pr : check_layout(gpt3_1_3b(), p, t, c)) out += pr.path + ": " + pr.message + "\n";
  return out;
}

}  // namespace

TEST_CASE("layout rules: a valid layout has no problem; each broken rule names its path") {
  CHECK(problems_text(good_layout()) == "");
  ParallelSpec p = good_layout();
  SUBCASE("GPU count") {
    p.dp = 2;
    CHECK(problems_text(p) == "/parallel: tp*pp*dp*cp = 2*2*2*1 = 8, expected the cluster's GPU count 16\n");
  }
  SUBCASE("heads") {
    p.tp = 3;
    CHECK(problems_text(p).find("/parallel/tp: expected a divisor of the model's 16 attention heads, found 3\n") !=
          std::string::npos);
  }
  SUBCASE("layers over pp * vpp, and the schedule that vpp needs") {
    p.vpp = 5;
    const std::string e = problems_text(p);
    CHECK(e.find("/parallel/schedule: vpp = 5 needs the \"interleaved-1f1b\" or \"breadth-first\" schedule, found "
                 "\"1f1b\"") != std::string::npos);
    CHECK(e.find("/parallel/pp: the model's 24 layers must divide evenly into pp*vpp = 2*5 = 10 stages") !=
          std::string::npos);
  }
  SUBCASE("interleaved needs the micro-batch count to be a multiple of pp, and pp >= 2") {
    p.vpp = 2;
    p.schedule = ScheduleKind::Interleaved1F1B;
    p.global_batch = 12;  // 12 / (micro_batch 1 * dp 4) = 3 micro-batches over pp = 2
    p.micro_batch = 1;
    CHECK(problems_text(p) ==
          "/parallel/global_batch: interleaved-1f1b needs the micro-batch count (3) to be a multiple of pp = 2\n");
    p.global_batch = 32;
    p.pp = 1;
    p.dp = 8;
    CHECK(problems_text(p) == "/parallel/schedule: interleaved-1f1b needs pp >= 2, found pp = 1\n");
  }
  SUBCASE("stage_layers must cover the model") {
    p.stage_layers = {10, 10};
    CHECK(problems_text(p) ==
          "/parallel/stage_layers: expected pp*vpp = 2*1 = 2 entries summing to the model's 24 layers, found 2 "
          "entries summing to 20\n");
  }
  SUBCASE("context parallelism divides the sequence") {
    p.cp = 3;
    p.dp = 1;
    const std::string e = problems_text(p, toy_cluster(1, 12));
    CHECK(e == "/parallel/cp: expected a divisor of seq_len 2048, found 3\n");
  }
  SUBCASE("expert parallelism on a dense model says what it needs, by name") {
    p.ep = 4;
    CHECK(problems_text(p) ==
          "/parallel/ep: expert parallelism (ep > 1) needs a mixture-of-experts model (model.moe), found ep = 4\n");
  }
  SUBCASE("products that do not fit an int are reported, not wrapped") {
    p.tp = 1 << 16;
    p.pp = 1 << 16;
    p.dp = 1 << 20;
    p.cp = 1 << 16;
    p.micro_batch = 1 << 30;
    const std::string e = problems_text(p);
    CHECK(e.find("/parallel: tp*pp*dp*cp = 65536*65536*1048576*65536 = more than 2^63, expected the cluster's GPU "
                 "count 16") != std::string::npos);
    // micro_batch * dp = 2^50 fits in 64 bits (an int would wrap to 0 and divide by zero).
    CHECK(e.find("/parallel/global_batch: expected a multiple of micro_batch*dp = 1073741824*1048576 = "
                 "1125899906842624, found 32") != std::string::npos);
  }
  SUBCASE("sizes below 1 are problems, not divisions by zero") {
    p.dp = 0;
    CHECK(problems_text(p) == "/parallel/dp: expected an integer >= 1, found 0\n");
  }
}

TEST_CASE("layout search: every candidate passes the layout rules and the counts add up") {
  const ClusterSpec cluster = toy_cluster(2, 8);
  TrainingSpec train;
  train.seq_len = 2048;
  ParallelSpec base;
  base.global_batch = 32;
  base.dp_overlap = false;  // kept in every candidate
  LayoutSearchSpace space;
  space.micro_batch = {1, 2};
  space.vpp = {1, 2};
  const LayoutSearchResult r = search_layouts(gpt3_1_3b(), train, cluster, base, 1e12, space);
  // tp 1..8, pp 1..24, cp 1 (2048 tokens), (vpp, schedule): (1, 1f1b), (2, interleaved) (breadth-first is opt-in), ...
  CHECK(r.grid == 8 * 24 * 1 * 2 * 2 * 1 * 3 * 4);
  CHECK(r.grid == r.invalid + r.redundant + r.pruned_oom + r.pruned_dominated + r.candidates.size());
  CHECK(r.pruned_oom == 0);  // 1 TB per toy GPU
  REQUIRE(!r.candidates.empty());
  for (const ParallelSpec& c : r.candidates) {
    CHECK(check_layout(gpt3_1_3b(), c, train, cluster).empty());
    CHECK_FALSE(c.dp_overlap);
    // With memory to spare, the cheapest options dominate: no recompute, ZeRO 1 (or 0 without DP).
    CHECK(c.recompute == Recompute::None);
    CHECK(c.zero == (c.dp * c.cp > 1 ? 1 : 0));
  }
  SUBCASE("layouts with one chunk per rank keep the base's Zero Bubble schedule; vpp > 1 runs both looped ones") {
    ParallelSpec zb = base;
    zb.schedule = ScheduleKind::ZeroBubbleH1;
    space.vpp_schedules = {ScheduleKind::Interleaved1F1B, ScheduleKind::BreadthFirst};
    const LayoutSearchResult found = search_layouts(gpt3_1_3b(), train, cluster, zb, 1e12, space);
    REQUIRE(!found.candidates.empty());
    std::set<ScheduleKind> looped;
    for (const ParallelSpec& c : found.candidates) {
      if (c.vpp > 1) {
        looped.insert(c.schedule);
      } else {
        CHECK(c.schedule == ScheduleKind::ZeroBubbleH1);
      }
    }
    CHECK(looped == std::set<ScheduleKind>{ScheduleKind::Interleaved1F1B, ScheduleKind::BreadthFirst});
    // Breadth-first has no micro-batch rule of its own: it keeps layouts interleaving cannot run
    // (m = 32 / (micro_batch * dp) not a multiple of pp).
    std::size_t interleaved = 0, breadth = 0;
    for (const ParallelSpec& c : found.candidates) {
      interleaved += c.schedule == ScheduleKind::Interleaved1F1B ? 1 : 0;
      breadth += c.schedule == ScheduleKind::BreadthFirst ? 1 : 0;
    }
    CHECK(breadth > interleaved);
    space.vpp_schedules = {ScheduleKind::BreadthFirst};
    for (const ParallelSpec& c : search_layouts(gpt3_1_3b(), train, cluster, zb, 1e12, space).candidates)
      CHECK(c.schedule != ScheduleKind::Interleaved1F1B);
  }
  SUBCASE("a small GPU memory prunes layouts before simulation") {
    const LayoutSearchResult tight = search_layouts(gpt3_1_3b(), train, cluster, base, 4e9, space);
    CHECK(tight.pruned_oom > 0);
    REQUIRE(!tight.candidates.empty());
    for (const ParallelSpec& c : tight.candidates) {
      for (int st = 0; st < c.pp; ++st) CHECK(stage_memory(gpt3_1_3b(), c, train, st).total() <= 4e9);
    }
  }
}
