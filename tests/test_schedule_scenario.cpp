// Custom pipeline schedules and placements written in scenarios: parsed,
// checked at the edge with the JSON pointer of the problem, and run.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "scenario_fixtures.hpp"
#include "sim/platform.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

// GPT-3 1.3B on 16 A100: tp 2, pp 2, dp 4, 4 micro-batches per replica.
const char* kScenario = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 2},
  "parallel": {"tp": 2, "pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 16},
  "training": {"seq_len": 2048}
})";

Scenario load(const std::vector<std::string>& sets) {
  return load_scenario_text(kScenario, "s.json", "", sets, testing::catalog());
}

std::string errors_of(const std::vector<std::string>& sets) {
  try {
    load(sets);
    return "";
  } catch (const InputError& e) {
    std::string out;
    for (const auto& d : e.diagnostics()) out += d.format() + "\n";
    return out;
  }
}

const char* kOneFOneB = R"(parallel.schedule={"units": [["F0", "BW0", "F1", "BW1", "F2", "BW2", "F3", "BW3"],
                                                         ["F0", "BW0", "F1", "BW1", "F2", "BW2", "F3", "BW3"]]})";

}  // namespace

TEST_CASE("custom schedule: a JSON 1F1B predicts what the built-in 1F1B does") {
  // Rank 0 of a 2-stage 1F1B runs one forward ahead.
  const JobReport builtin = simulate(load({}));
  const JobReport custom = simulate(load({R"(parallel.schedule={"units": [
      ["F0", "F1", "BW0", "F2", "BW1", "F3", "BW2", "BW3"],
      ["F0", "BW0", "F1", "BW1", "F2", "BW2", "F3", "BW3"]], "chunk_stages": [0, 1]})"}));
  REQUIRE(custom.feasible);
  CHECK(custom.iteration_time_s == builtin.iteration_time_s);
  CHECK(custom.peak_memory_gib == builtin.peak_memory_gib);
  // A schedule that keeps rank 0 from running ahead is valid but slower.
  const JobReport lockstep = simulate(load({kOneFOneB}));
  CHECK(lockstep.iteration_time_s > builtin.iteration_time_s);
}

TEST_CASE("custom schedule: bad units, shapes and deadlocks are input errors at their JSON pointer") {
  CHECK(errors_of({R"(parallel.schedule={"units": [["F0", "X1"], []]})"}) ==
        "error: s.json: /parallel/schedule/units/0/1: expected a unit such as \"F3\" (forward), \"B3\" (input "
        "gradient), \"W3\" (weight gradient), \"BW3\" (whole backward) or \"F3.1\" (micro-batch 3 of the rank's "
        "chunk 1), found \"X1\"\n");
  CHECK(errors_of({R"(parallel.schedule={"units": [["F0"]], "stages": 2})"}) ==
        "error: s.json: /parallel/schedule/stages: unknown key \"stages\"; known keys: chunk_stages, units\n");
  CHECK(errors_of({R"(parallel.schedule={"units": [["F0", "F1", "F2", "F3", "BW0", "BW1", "BW2", "BW3"]]})"}) ==
        "error: s.json: /parallel/schedule/units: expected a unit list for each of the pp = 2 pipeline ranks, "
        "found 1\n");
  const std::string missing = errors_of({R"(parallel.schedule={"units": [
      ["F0", "F1", "BW0", "F2", "BW1", "F3", "BW2"],
      ["F0", "BW0", "F1", "BW1", "F2", "BW2", "F3", "BW3"]]})"});
  CHECK(missing ==
        "error: s.json: /parallel/schedule: pipeline rank 0: the backward (B or BW) of micro-batch 3, chunk 0 is "
        "missing\n");
  const std::string deadlock = errors_of({R"(parallel.schedule={"units": [
      ["F0", "BW0", "F1", "BW1", "F2", "BW2", "F3", "BW3"],
      ["F0", "F1", "BW0", "BW1", "F2", "F3", "BW2", "BW3"]]})"});
  CHECK(deadlock.find("/parallel/schedule: deadlock: pipeline rank 0 waits forever at unit 1 (BW0)") !=
        std::string::npos);
  CHECK(errors_of({R"(parallel.schedule={"units": [["F0"], ["F0"]], "chunk_stages": [0, 2]})"})
            .find("chunk 1 is mapped to pipeline rank 2, expected 0..1") != std::string::npos);
}

TEST_CASE("placement: an order string moves ranks and so the prediction; bad placements are input errors") {
  const JobReport megatron = simulate(load({}));
  // TP outermost: each tensor-parallel pair spans the two nodes.
  const JobReport tp_outer = simulate(load({"parallel.placement=pp-dp-cp-ep-tp"}));
  REQUIRE(tp_outer.feasible);
  CHECK(tp_outer.iteration_time_s > 1.05 * megatron.iteration_time_s);
  CHECK(tp_outer.breakdown.exposed_comm_s[static_cast<int>(CommClass::TP)] >
        2 * megatron.breakdown.exposed_comm_s[static_cast<int>(CommClass::TP)]);
  // The explicit list of Megatron's order is Megatron's placement.
  std::string list = "parallel.placement=[";
  for (int g = 0; g < 16; ++g) list += std::to_string(g) + (g < 15 ? "," : "]");
  CHECK(simulate(load({list})).iteration_time_s == megatron.iteration_time_s);
  CHECK(errors_of({"parallel.placement=tp-cp-dp-pp"}) ==
        "error: s.json: /parallel/placement: order \"tp-cp-dp-pp\": expected all five dimensions tp, cp, ep, dp, pp "
        "joined by '-', innermost first (e.g. \"tp-cp-ep-dp-pp\")\n");
  CHECK(errors_of({"parallel.placement=[0,1,2]"}) ==
        "error: s.json: /parallel/placement: lists 3 GPUs, expected one per rank (16)\n");
  CHECK(errors_of({"parallel.placement=[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,99]"}) ==
        "error: s.json: /parallel/placement: rank 15 is placed on GPU 99, expected 0..15\n");
  CHECK(errors_of({"parallel.placement=true"}).find("/parallel/placement: expected an order") != std::string::npos);
}

TEST_CASE("zero bubble schedules by name: zb-h1 as the same units written out, faster than 1F1B; vpp is an error") {
  const JobReport one = simulate(load({}));
  const JobReport h1 = simulate(load({"parallel.schedule=zb-h1"}));
  REQUIRE(h1.feasible);
  CHECK(h1.iteration_time_s < one.iteration_time_s);
  // Rank 0 defers no W, rank 1 one (models/schedule.cpp): the same order written
  // as JSON. zb-h1 posts its receives where the Zero Bubble runtime does
  // (receive_posts), a custom schedule ahead: the iteration times differ by 0.1%.
  const JobReport custom = simulate(load({R"(parallel.schedule={"units": [
      ["F0", "F1", "B0", "W0", "F2", "B1", "W1", "F3", "B2", "W2", "B3", "W3"],
      ["F0", "B0", "F1", "B1", "W0", "F2", "B2", "W1", "F3", "B3", "W2", "W3"]]})"}));
  CHECK(custom.iteration_time_s == doctest::Approx(h1.iteration_time_s).epsilon(0.002));
  CHECK(custom.iteration_time_s != h1.iteration_time_s);
  CHECK(custom.peak_memory_gib == h1.peak_memory_gib);
  CHECK(simulate(load({"parallel.schedule=zb-h2"})).iteration_time_s <= h1.iteration_time_s);
  // The automatic schedules: searched with the cost model's pass times, never slower than ZB-H1.
  const JobReport p1 = simulate(load({"parallel.schedule=zb-1p"}));
  const JobReport p2 = simulate(load({"parallel.schedule=zb-2p"}));
  CHECK(p1.iteration_time_s <= h1.iteration_time_s * (1 + 1e-9));
  CHECK(p2.iteration_time_s <= p1.iteration_time_s * (1 + 1e-9));
  CHECK(p2.peak_memory_gib >= p1.peak_memory_gib);
  CHECK(errors_of({"parallel.schedule=zb-h1", "parallel.vpp=2"}) ==
        "error: s.json: /parallel/schedule: vpp = 2 needs the \"interleaved-1f1b\" or \"breadth-first\" schedule, "
        "found \"zb-h1\"\n");
  CHECK(errors_of({"parallel.schedule=zb-x"}).find("zb-h1") != std::string::npos);
  CHECK(errors_of({"training.zb_receives=sorted"}) ==
        "error: s.json: /training/zb_receives: \"sorted\" is the Zero Bubble runtime's receive placement: expected "
        "a schedule zb-h1, zb-h2, zb-1p, zb-2p or zb-v, found \"1f1b\"\n");
  CHECK(errors_of({"parallel.schedule=zb-1p", "training.zb_receives=late"}).find("/training/zb_receives") !=
        std::string::npos);
}

namespace {

// Per configuration of a validation set (tools/make-schedule-validation-scenarios),
// per schedule: the measured and the predicted iteration time.
using RunsByConfig = std::map<std::string, std::map<std::string, std::pair<double, double>>>;
RunsByConfig runs_by_config(const char* set) {
  const std::filesystem::path dir = std::filesystem::path(TRAINSIM_SOURCE_DIR) / "scenarios" / set;
  RunsByConfig by_config;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const Scenario s = load_scenario_file(entry.path().string(), {}, testing::catalog());
    REQUIRE(s.expected.has_value());
    const std::string id = entry.path().stem().string();
    const std::string schedule = to_string(s.parallel.schedule);
    const std::string config = id.substr(0, id.size() - schedule.size() - 1);
    by_config[config][schedule] = {s.expected->value, simulate(s).iteration_time_s};
  }
  return by_config;
}

// Every pair of schedules of a configuration the paper measured apart is
// predicted in the measured order, except the pairs `known` lists ("config
// schedule-a schedule-b", a before b alphabetically), which are predicted in
// the other order (docs/schedules.md says what is known of why). A pair that
// comes right, or a new mismatch, fails: the list and the docs stay exact.
void check_measured_order(const RunsByConfig& by_config, const std::set<std::string>& known) {
  std::set<std::string> mismatched;
  for (const auto& entry : by_config) {
    const std::string& config = entry.first;  // a named variable: doctest's CAPTURE cannot take a binding
    const auto& runs = entry.second;
    CAPTURE(config);
    REQUIRE(runs.size() == 4);
    for (auto a = runs.begin(); a != runs.end(); ++a) {
      for (auto b = std::next(a); b != runs.end(); ++b) {
        const auto& [measured_a, predicted_a] = a->second;
        const auto& [measured_b, predicted_b] = b->second;
        if (measured_a == measured_b) continue;  // a tie in the paper: no order to keep
        if ((measured_a < measured_b) != (predicted_a < predicted_b))
          mismatched.insert(config + " " + a->first + " " + b->first);
      }
    }
  }
  CHECK(mismatched == known);
}

}  // namespace

TEST_CASE("zero bubble validation: the paper's measured order of schedules on every configuration") {
  // 1F1B slowest everywhere but on 14.6B, ZB-2p ahead of ZB-1p everywhere;
  // interleaved 1F1B against ZB-1p changes sides between configurations in the
  // paper: kept on 1.5B at every m (m = 32 is a measured tie) and on 6.2B at
  // m = 24, 32; ZB-2p, as the runtime's heuristic builds it, ahead of
  // interleaved on 6.2B at m = 24 and 32. Four pairs come out the other way
  // (docs/schedules.md): with Megatron-LM's blocking exchange the 14.6B
  // interleaved runs (two nodes) are predicted 2.5% and 7.7% behind 1F1B at
  // m = 64 and 128 (measured 6.3% and 1.2% ahead; at m = 48 0.5% ahead,
  // measured 9.1%), and on 6.2B at m = 64 interleaved, 6.9% fast, is
  // predicted ahead of ZB-2p (1.4%, measured 4.8% behind) and of ZB-1p (5.4%,
  // measured 0.2% behind).
  const RunsByConfig runs = runs_by_config("validation-schedules");
  CHECK(runs.size() == 9);
  check_measured_order(runs,
                       {"zb_iclr_14.6B_p16_m64 1f1b interleaved-1f1b", "zb_iclr_14.6B_p16_m128 1f1b interleaved-1f1b",
                        "zb_iclr_6.2B_p8_m64 interleaved-1f1b zb-1p", "zb_iclr_6.2B_p8_m64 interleaved-1f1b zb-2p"});
}

TEST_CASE("zero bubble validation: ZB-2p's peak memory is that of the runtime's own schedule") {
  // The runtime builds ZB-1p and ZB-2p with its heuristic on these runs (3pm >=
  // 500 passes; docs/schedules.md), which fills ZB-2p's limit of 2p
  // micro-batches on the first ranks: the paper measures 59, 70 and 51 GB
  // (1.5B, 6.2B, 14.6B at their smallest m). The family search, which keeps
  // the least memory that reaches its fastest makespan, gave 45, 55 and 42 GB.
  const std::filesystem::path dir = std::filesystem::path(TRAINSIM_SOURCE_DIR) / "scenarios/validation-schedules";
  for (const auto& run : std::vector<std::pair<std::string, double>>{
           {"zb_iclr_1.5B_p8_m24", 59}, {"zb_iclr_6.2B_p8_m24", 70}, {"zb_iclr_14.6B_p16_m48", 51}}) {
    const std::string& config = run.first;  // a plain reference: clang cannot capture a structured binding
    const double measured_gb = run.second;
    CAPTURE(config);
    const JobReport r = simulate(load_scenario_file((dir / (config + "_zb-2p.json")).string(), {}, testing::catalog()));
    const double gb = r.peak_memory_gib * 1.073741824;
    CHECK(gb > 0.92 * measured_gb);
    CHECK(gb < 1.05 * measured_gb);
  }
}

TEST_CASE("zero bubble validation: the interleaved runs' blocking exchange against the overlapped one") {
  // docs/schedules.md ("The interleaved runs' excess"): with the overlapped
  // exchange the single-node interleaved runs are predicted 3-4 points faster,
  // relative to their measurement, than 1F1B on the same configuration. With
  // Megatron-LM's blocking exchange (pp_overlap false: one batched exchange per
  // step, what the scenarios run) half to two thirds of that remains, and the
  // two-node 14.6B runs fall behind 1F1B at m = 64 and 128 (at m = 48 they stay
  // 0.5% ahead), which they are measured ahead of, and behind ZB-1p;
  // 6.2B at m = 64 stays ahead of ZB-1p (measured 0.2% behind).
  const std::filesystem::path dir = std::filesystem::path(TRAINSIM_SOURCE_DIR) / "scenarios/validation-schedules";
  struct Run {
    double predicted, measured;
  };
  auto run = [&](const std::string& config, const std::string& schedule, bool blocking) {
    // The interleaved runs with either exchange; the other schedules as their scenarios say.
    std::vector<std::string> sets;
    if (schedule == "interleaved-1f1b")
      sets.push_back(blocking ? "parallel.pp_overlap=false" : "parallel.pp_overlap=true");
    const Scenario s =
        load_scenario_file((dir / (config + "_" + schedule + ".json")).string(), sets, testing::catalog());
    REQUIRE(s.expected.has_value());
    return Run{simulate(s).iteration_time_s, s.expected->value};
  };
  auto error = [&](const std::string& config, const std::string& schedule, bool blocking) {
    const Run r = run(config, schedule, blocking);
    return r.predicted / r.measured - 1;
  };
  for (const char* config : {"zb_iclr_1.5B_p8_m24", "zb_iclr_1.5B_p8_m32", "zb_iclr_1.5B_p8_m64", "zb_iclr_6.2B_p8_m24",
                             "zb_iclr_6.2B_p8_m32", "zb_iclr_6.2B_p8_m64"}) {
    CAPTURE(config);
    const double one = error(config, "1f1b", false);
    CHECK(one - error(config, "interleaved-1f1b", false) > 0.03);
    const double blocking_gap = one - error(config, "interleaved-1f1b", true);
    CHECK(blocking_gap > 0.01);
    CHECK(blocking_gap < 0.03);
  }
  for (const char* config : {"zb_iclr_14.6B_p16_m48", "zb_iclr_14.6B_p16_m64", "zb_iclr_14.6B_p16_m128"}) {
    CAPTURE(config);
    const double one = run(config, "1f1b", false).predicted;
    const double overlapped = run(config, "interleaved-1f1b", false).predicted;
    CHECK(overlapped < one);
    const double blocking = run(config, "interleaved-1f1b", true).predicted;
    CHECK(blocking > overlapped);
    CHECK((blocking > one) == (std::string(config) != "zb_iclr_14.6B_p16_m48"));
    CHECK(blocking > run(config, "zb-1p", false).predicted);
  }
  CHECK(run("zb_iclr_6.2B_p8_m64", "interleaved-1f1b", true).predicted <
        run("zb_iclr_6.2B_p8_m64", "zb-1p", false).predicted);
}

TEST_CASE("zero bubble validation: the network between nodes gives the paper's profiled T_comm") {
  // The runtime's T_comm is the mean hop of one activation message along the
  // pipeline (docs/schedules.md); on the 14.6B runs (PP 16 on two nodes,
  // 1024 x 5120 fp16 activations) the paper profiles 0.377-0.379 ms. The
  // scenarios' network between nodes is derived from it: the mean of the 15
  // hops on this platform must give it back, and the dgx-a100 preset's HDR
  // NICs would be far faster.
  const std::filesystem::path dir = std::filesystem::path(TRAINSIM_SOURCE_DIR) / "scenarios/validation-schedules";
  auto mean_hop = [&](const std::vector<std::string>& sets) {
    const Scenario s =
        load_scenario_file((dir / "zb_iclr_14.6B_p16_m48_zb-1p.json").string(), sets, testing::catalog());
    const Platform platform(s.cluster, s.profiles);
    const AnalyticalNetwork& net = platform.analytical_network();
    const double bytes = 1024.0 * 5120 * 2;
    double total = 0;
    for (int stage = 0; stage + 1 < 16; ++stage) total += net.p2p_seconds(net.shape({stage, stage + 1}), bytes);
    return total / 15;
  };
  CHECK(mean_hop({}) == doctest::Approx(0.378e-3).epsilon(0.01));
  CHECK(mean_hop({"cluster.node.nics.bandwidth=\"200Gbps\""}) < 0.7 * 0.378e-3);
}

TEST_CASE("zero bubble validation: no network share between the nodes gives the 14.6B runs' measured order") {
  // docs/schedules.md ("What T_comm measures"): a fixed cost per blocking call
  // in the runtime's benchmark would leave a larger network share than the
  // pure-bandwidth derivation (tools/make-schedule-validation-scenarios
  // --per-call-us: 35.2 Gb/s per GPU with none, 82.9 with 150 us). With the
  // shipped share interleaved 1F1B is predicted behind 1F1B at m = 64 and 128
  // and 0.4% ahead at m = 48 (measured 1.2-9.1% ahead at every m); with the
  // share that puts it ahead at every m it is also ahead of ZB-1p at m = 48 and
  // 64 (measured 4.5% and 5.0% behind). 1F1B is predicted fast at either share
  // (1.6-2.3% at the shipped one, 4.9-5.2% at 82.9 Gb/s): the pair turns on
  // 1F1B's shortfall as much as on the hop between the nodes.
  const std::filesystem::path dir = std::filesystem::path(TRAINSIM_SOURCE_DIR) / "scenarios/validation-schedules";
  struct Run {
    double predicted, measured;
  };
  auto run = [&](int m, const std::string& schedule, const std::string& share) {
    const Scenario s =
        load_scenario_file((dir / ("zb_iclr_14.6B_p16_m" + std::to_string(m) + "_" + schedule + ".json")).string(),
                           {"cluster.node.nics.bandwidth=\"" + share + "\""}, testing::catalog());
    REQUIRE(s.expected.has_value());
    return Run{simulate(s).iteration_time_s, s.expected->value};
  };
  for (const int m : {48, 64, 128}) {
    CAPTURE(m);
    for (const char* share : {"35.2Gbps", "82.9Gbps"}) {
      CAPTURE(share);
      const Run one = run(m, "1f1b", share);
      CHECK(one.predicted < 0.99 * one.measured);
      const bool ahead = run(m, "interleaved-1f1b", share).predicted < one.predicted;
      CHECK(ahead == (std::string(share) == "82.9Gbps" || m == 48));
    }
    if (m != 128) CHECK(run(m, "interleaved-1f1b", "82.9Gbps").predicted < run(m, "zb-1p", "82.9Gbps").predicted);
  }
}

TEST_CASE("zb-v validation: the paper's measured order of schedules on every configuration") {
  // 1F1B slowest everywhere; ZB-V ahead of ZB-1p everywhere and of ZB-2p* on
  // 14.6B at m = 96 and 192 and behind ZB-2p* on 6.2B at m = 48 and 64, as
  // measured. Three pairs come out the other way (docs/schedules.md): on 14.6B
  // ZB-2p* ahead of ZB-1p at m = 192 (predicted 2.1%, measured 2.2% behind) and
  // of ZB-V at m = 72 (predicted 0.7%, measured 0.6% behind), on 6.2B ZB-V
  // ahead of ZB-2p* at m = 128 (predicted 1.4%, measured 2.2% behind), where
  // ZB-V is predicted 5% fast.
  const RunsByConfig runs = runs_by_config("validation-zbv");
  CHECK(runs.size() == 6);
  check_measured_order(runs, {"zbv_arxiv_14.6B_p24_m192 zb-1p zb-2p", "zbv_arxiv_14.6B_p24_m72 zb-2p zb-v",
                              "zbv_arxiv_6.2B_p16_m128 zb-2p zb-v"});
}

TEST_CASE("post-validation: overlapping iterations hide ZB-2p's fill ramp, not 1F1B's") {
  // training.optimizer_sync: with post-validation each rank starts its next
  // iteration when it is done, so the period is the longest rank span. Under
  // 1F1B rank 0 starts first and finishes last: nothing changes. Under ZB-2p
  // the ranks finish together and the last one starts (p-1)(T_F+T_comm) late.
  // Without the tied embedding's all-reduce between the first and last rank
  // (below), which couples their ends, and with it.
  const std::filesystem::path dir = std::filesystem::path(TRAINSIM_SOURCE_DIR) / "scenarios/validation-schedules";
  auto run = [&](const std::string& schedule, const std::string& sync, const std::string& tied = "none") {
    return simulate(load_scenario_file((dir / ("zb_iclr_1.5B_p8_m24_" + schedule + ".json")).string(),
                                       {"training.optimizer_sync=" + sync, "training.tied_grad_sync=" + tied},
                                       testing::catalog()));
  };
  const JobReport zb_sync = run("zb-2p", "all-reduce");
  const JobReport zb_pv = run("zb-2p", "post-validation");
  CHECK(zb_sync.single_iteration_s == 0);
  CHECK(zb_pv.single_iteration_s == doctest::Approx(zb_sync.iteration_time_s));
  // At most the ramp of 7 stage forwards and messages of about 16 ms (9% of the
  // iteration); the rank with the longest span keeps part of it (8.3% hidden with the runtime's
  // schedule, 4.0% with the family search's).
  CHECK(zb_pv.iteration_time_s < 0.97 * zb_sync.iteration_time_s);
  CHECK(zb_pv.iteration_time_s > 0.91 * zb_sync.iteration_time_s);
  // The Zero Bubble runtime all-reduces the tied embedding's gradient and waits
  // for it before the step (docs/frameworks.md): rank 0 cannot start its next
  // iteration before the last rank's share is done. The last rank issues its
  // share in WeightGradStore.clear, after the LM head's part of its trailing W
  // units and before their layers' (15 of them here, about 90 ms), which hides
  // the coupling on this single-node run; issued after them, as the model did
  // before, the all-reduce brought 3.7% of the ramp back.
  const JobReport tied_pv = run("zb-2p", "post-validation", "overlapped");
  CHECK(tied_pv.iteration_time_s < 1.001 * zb_pv.iteration_time_s);
  CHECK(tied_pv.iteration_time_s < 0.98 * run("zb-2p", "all-reduce", "overlapped").iteration_time_s);
  CHECK(errors_of({"training.tied_grad_sync=\"early\""}).find("/training/tied_grad_sync") != std::string::npos);
  const JobReport one_sync = run("1f1b", "all-reduce");
  const JobReport one_pv = run("1f1b", "post-validation");
  CHECK(one_pv.iteration_time_s == doctest::Approx(one_sync.iteration_time_s).epsilon(1e-3));
}

TEST_CASE(
    "breadth-first: a chunk's gradient reduction overlaps the earlier chunks' backward; every micro-batch in flight") {
  // GPT-3 1.3B, pp 4 x vpp 2 inside each node, dp 4 across the two nodes, 8
  // micro-batches per replica of 512 tokens: each rank's gradient all-reduce
  // is long beside its backward. Interleaved 1F1B finishes its later chunk's
  // backwards p micro-batches before the end, breadth-first m: more of that
  // chunk's reduction hides, and the iteration is shorter.
  const std::vector<std::string> layout{"parallel.tp=1",
                                        "parallel.pp=4",
                                        "parallel.dp=4",
                                        "parallel.vpp=2",
                                        "parallel.global_batch=32",
                                        "parallel.placement=tp-cp-ep-pp-dp",
                                        "training.seq_len=512"};
  auto with = [&](const std::string& schedule) {
    std::vector<std::string> sets = layout;
    sets.push_back("parallel.schedule=" + schedule);
    return simulate(load(sets));
  };
  const JobReport bf = with("breadth-first");
  const JobReport il = with("interleaved-1f1b");
  REQUIRE(bf.feasible);
  REQUIRE(il.feasible);
  const auto dp = static_cast<std::size_t>(CommClass::DP);
  CHECK(bf.breakdown.exposed_comm_s[dp] < 0.9 * il.breakdown.exposed_comm_s[dp]);
  CHECK(bf.iteration_time_s < il.iteration_time_s);
  CHECK(bf.peak_memory_gib > il.peak_memory_gib);  // all 8 micro-batches of both chunks held
  MESSAGE("exposed dp " << bf.breakdown.exposed_comm_s[dp] << " s against " << il.breakdown.exposed_comm_s[dp]
                        << " s; iteration " << bf.iteration_time_s << " s against " << il.iteration_time_s
                        << " s; peak " << bf.peak_memory_gib << " GiB against " << il.peak_memory_gib);
}
