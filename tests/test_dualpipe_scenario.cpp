// DualPipeV and ZB-V in scenarios: the overlapped F&B pairs of DualPipeV hide
// a MoE layer's expert-parallel all-to-all behind the other micro-batch's
// computation (DeepSeek-V3 technical report, arXiv:2412.19437, Section 3.2.1).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "models/schedule.hpp"
#include "scenario_fixtures.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

// OLMoE (16 layers, 64 experts, top-8) on two DGX H100: PP 2, EP 8 = DP 8,
// 8 micro-batches per replica (DualPipeV needs 2 * pp).
const char* kMoe = R"({
  "model": "olmoe-1b-7b",
  "cluster": {"node": "dgx-h100", "nodes": 2},
  "parallel": {"tp": 1, "pp": 2, "dp": 8, "ep": 8, "micro_batch": 1, "global_batch": 64},
  "training": {"seq_len": 4096, "precision": "bf16", "dropout": false}
})";

Scenario load(const std::vector<std::string>& sets) {
  return load_scenario_text(kMoe, "moe.json", "", sets, testing::catalog());
}

JobReport run(const std::vector<std::string>& sets) {
  const JobReport r = simulate(load(sets));
  REQUIRE(r.feasible);
  return r;
}

double exposed_ep(const JobReport& r) { return r.breakdown.exposed_comm_s[static_cast<std::size_t>(CommClass::EP)]; }

// A schedule as the custom JSON form writes it, with or without its overlaps.
std::string custom_json(const PipelineSchedule& s, bool keep_overlaps) {
  std::string out = R"(parallel.schedule={"chunk_stages": [)";
  for (std::size_t v = 0; v < s.chunk_stage.size(); ++v) out += (v ? ", " : "") + std::to_string(s.chunk_stage[v]);
  out += R"(], "units": [)";
  for (std::size_t st = 0; st < s.units.size(); ++st) {
    out += st ? ", [" : "[";
    for (std::size_t i = 0; i < s.units[st].size(); ++i) {
      ScheduleUnit u = s.units[st][i];
      u.overlapped = u.overlapped && keep_overlaps;
      out += (i ? ", \"" : "\"") + to_string(u) + "\"";
    }
    out += "]";
  }
  return out + "]}";
}

}  // namespace

TEST_CASE("dualpipe-v: the overlapped pairs hide expert-parallel all-to-all behind the other micro-batch") {
  const JobReport dualpipe = run({"parallel.schedule=dualpipe-v"});
  const PipelineSchedule units = builtin_schedule(ScheduleKind::DualPipeV, 2, 8, 1);
  // The same units written as a custom schedule: the same prediction, bit for bit.
  const JobReport custom = run({custom_json(units, true)});
  CHECK(custom.iteration_time_s == dualpipe.iteration_time_s);
  CHECK(custom.peak_memory_gib == dualpipe.peak_memory_gib);
  // The same units run one after the other: the all-to-all is exposed again.
  const JobReport serial = run({custom_json(units, false)});
  MESSAGE("exposed EP " << exposed_ep(serial) << " s serial, " << exposed_ep(dualpipe) << " s overlapped; iteration "
                        << serial.iteration_time_s << " s, " << dualpipe.iteration_time_s << " s");
  CHECK(exposed_ep(dualpipe) < 0.8 * exposed_ep(serial));
  CHECK(dualpipe.iteration_time_s < serial.iteration_time_s);
  CHECK(dualpipe.breakdown.compute_s > 0);
}

TEST_CASE("zb-v and dualpipe-v: layouts they cannot run are input errors") {
  auto errors_of = [](const std::vector<std::string>& sets) {
    try {
      load(sets);
      return std::string();
    } catch (const InputError& e) {
      std::string out;
      for (const auto& d : e.diagnostics()) out += d.format() + "\n";
      return out;
    }
  };
  CHECK(errors_of({"parallel.schedule=dualpipe-v", "parallel.global_batch=24"}) ==
        "error: moe.json: /parallel/global_batch: dualpipe-v needs at least 2*pp = 4 micro-batches, found 3\n");
  CHECK(errors_of({"parallel.schedule=zb-v", "parallel.vpp=2"}) ==
        "error: moe.json: /parallel/schedule: vpp = 2 needs the \"interleaved-1f1b\" or \"breadth-first\" schedule, "
        "found \"zb-v\"\n");
  CHECK(errors_of({"parallel.schedule=zb-v", "parallel.stage_layers=[4, 4, 8]"})
            .find("/parallel/stage_layers: expected two per pipeline rank (4) entries") != std::string::npos);
  CHECK(errors_of({"parallel.schedule=zb-v", "parallel.pp=3", "cluster.nodes=3"}) ==
        "error: moe.json: /parallel/pp: the model's 16 layers must divide evenly into the 6 chunks of zb-v (two per "
        "pipeline rank), or give stage_layers\n");
  CHECK(errors_of({"parallel.schedule=zb-h1", "parallel.moe_a2a_overlap=true"}) ==
        "error: moe.json: /parallel/moe_a2a_overlap: overlaps the steady phase of 1f1b or interleaved-1f1b; the "
        "schedule is \"zb-h1\"\n");
  CHECK(errors_of({"parallel.schedule=interleaved-1f1b", "parallel.vpp=2", "parallel.pp_overlap=false",
                   "parallel.moe_a2a_overlap=true"}) ==
        "error: moe.json: /parallel/moe_a2a_overlap: with interleaved-1f1b needs pp_overlap true: the blocking "
        "batched exchange between the two passes it overlaps is not modelled\n");
  // Units written with a '+' run overlapped; one that cannot is named at its pointer.
  CHECK(errors_of({R"(parallel.schedule={"units": [["+F0", "F1", "F2", "F3", "F4", "F5", "F6", "F7", "BW0", "BW1",
      "BW2", "BW3", "BW4", "BW5", "BW6", "BW7"], ["F0", "BW0", "F1", "BW1", "F2", "BW2", "F3", "BW3", "F4", "BW4",
      "F5", "BW5", "F6", "BW6", "F7", "BW7"]]})"})
            .find("/parallel/schedule: pipeline rank 0, unit 0 (+F0): overlapped units come in pairs") !=
        std::string::npos);
}

TEST_CASE("dualpipe-v: DeepSeek-V3's example hides a third of its exposed expert-parallel time") {
  // scenarios/examples: the same job under 1F1B and under DualPipeV (docs/schedules.md quotes both),
  // without multi-token prediction: its block makes 1F1B's last stage the one
  // the breakdown reports, while the overlap happens on every stage.
  const std::string dir = std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/examples/";
  const std::vector<std::string> no_mtp{"model={\"preset\": \"deepseek-v3\", \"mtp_depth\": 0}"};
  const JobReport one = simulate(load_scenario_file(dir + "deepseek-v3-2048xh800.json", no_mtp, testing::catalog()));
  const JobReport dual =
      simulate(load_scenario_file(dir + "deepseek-v3-2048xh800-dualpipe-v.json", no_mtp, testing::catalog()));
  REQUIRE(one.feasible);
  REQUIRE(dual.feasible);
  MESSAGE("exposed EP " << exposed_ep(one) << " s of " << one.iteration_time_s << " s under 1F1B, " << exposed_ep(dual)
                        << " s of " << dual.iteration_time_s << " s under DualPipeV");
  CHECK(exposed_ep(dual) < 0.7 * exposed_ep(one));
  CHECK(dual.iteration_time_s < 0.85 * one.iteration_time_s);
}

TEST_CASE("dualpipe: DeepSeek-V3 with both copies of the model hides expert-parallel time; two copies in memory") {
  // The 1F1B example run under the bidirectional DualPipe (same 16 parts of
  // the model, a copy of each on ranks i and 15-i), without multi-token prediction as above.
  const std::string dir = std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/examples/";
  std::vector<std::string> sets{"model={\"preset\": \"deepseek-v3\", \"mtp_depth\": 0}"};
  const JobReport one = simulate(load_scenario_file(dir + "deepseek-v3-2048xh800.json", sets, testing::catalog()));
  sets.push_back("parallel.schedule=\"dualpipe\"");
  const JobReport dual = simulate(load_scenario_file(dir + "deepseek-v3-2048xh800.json", sets, testing::catalog()));
  REQUIRE(one.feasible);
  REQUIRE(dual.feasible);
  MESSAGE("exposed EP " << exposed_ep(one) << " s of " << one.iteration_time_s << " s under 1F1B, " << exposed_ep(dual)
                        << " s of " << dual.iteration_time_s << " s under DualPipe");
  CHECK(exposed_ep(dual) < 0.7 * exposed_ep(one));
  CHECK(dual.iteration_time_s < 0.85 * one.iteration_time_s);
  // Rank i holds part i of one copy and part 15-i of the other: the weights
  // of two parts, the same on ranks i and 15-i.
  const int pp = static_cast<int>(one.per_stage.size());
  for (int i = 0; i < pp; ++i) {
    CAPTURE(i);
    const double both = one.per_stage[i].memory.weights + one.per_stage[pp - 1 - i].memory.weights;
    CHECK(dual.per_stage[i].memory.weights == doctest::Approx(both));
  }
}

TEST_CASE("moe_a2a_overlap: 1F1B's steady phase as F&B pairs hides all-to-all time, at a cost without chunks") {
  for (const char* schedule : {"1f1b", "interleaved-1f1b"}) {
    CAPTURE(schedule);
    const std::vector<std::string> base = {std::string("parallel.schedule=") + schedule,
                                           std::string("parallel.vpp=") + (schedule[0] == 'i' ? "2" : "1")};
    std::vector<std::string> overlapped = base;
    overlapped.push_back("parallel.moe_a2a_overlap=true");
    const JobReport plain = run(base);
    const JobReport pairs = run(overlapped);
    MESSAGE("exposed EP " << exposed_ep(plain) << " s -> " << exposed_ep(pairs) << " s; iteration "
                          << plain.iteration_time_s << " s -> " << pairs.iteration_time_s << " s");
    CHECK(exposed_ep(pairs) < 0.8 * exposed_ep(plain));
    // A pair sends its forward's output when it ends: with one chunk per rank
    // each hop of the pipeline waits for a whole pair (F and B), and on this
    // 2-rank, 8-micro-batch job that costs more than the hidden all-to-all;
    // with two chunks per rank the hops overlap and the iteration is shorter.
    if (schedule[0] == 'i') {
      CHECK(pairs.iteration_time_s < plain.iteration_time_s);
    } else {
      CHECK(pairs.iteration_time_s > plain.iteration_time_s);
    }
    // The units and so the activations in flight are 1F1B's.
    CHECK(pairs.peak_memory_gib == plain.peak_memory_gib);
  }
  // Every forward after a backward of another micro-batch is paired; the check accepts the result.
  for (int pp : {1, 2, 4, 8}) {
    for (int m : {1, 4, 9, 16}) {
      CAPTURE(pp);
      CAPTURE(m);
      PipelineSchedule s = builtin_schedule(ScheduleKind::OneFOneB, pp, m, 1);
      overlap_backward_with_next_forward(s);
      CHECK(check_schedule(s).empty());
      for (int i = 0; i < pp; ++i) {
        // 1F1B rank i: m - min(p-1-i, m) forwards follow a backward, all but the first of the steady phase.
        const long pairs =
            std::count_if(s.units[i].begin(), s.units[i].end(), [](const ScheduleUnit& u) { return u.overlapped; });
        CHECK(pairs == std::max(0, m - std::min(pp - 1 - i, m) - 1));
      }
    }
  }
}
