// Hostile input: each defect found by directed cases and fuzzing, kept as a
// regression test. Every case must end in a clear error naming the file and the
// JSON pointer (exit 2), never a crash, an internal error or a silent default.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "models/layout_rules.hpp"
#include "scenario_fixtures.hpp"
#include "sim/time.hpp"
#include "tools/frontend/cli.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"
#include "tools/frontend/sweep.hpp"
#include "tools/frontend/workload_input.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

const char* kGood = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 2},
  "parallel": {"tp": 2, "pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 32},
  "training": {"seq_len": 2048}
})";

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(std::vector<std::string> args) {
  args.insert(args.begin(), "trainsim");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

// A fresh directory under the system temporary directory, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "trainsim-hostile-XXXXXX").string();
    REQUIRE(mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name, const std::string& text) const {
    const auto p = path / name;
    std::ofstream(p) << text;
    return p.string();
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("numbers beyond double range are input errors with their pointer, in the file and in --set") {
  CHECK(contains(errors_of(replace(kGood, "\"global_batch\": 32", "\"global_batch\": 1e400")),
                 "bad.json: /parallel/global_batch: number beyond the range of a double"));
  CHECK(contains(errors_of(kGood, {"parallel.global_batch=1e400"}),
                 "bad.json: /parallel/global_batch: --set \"parallel.global_batch=1e400\": number beyond the range"));
  CHECK(contains(errors_of(kGood, {"parallel={\"tp\": -1e999}"}), "/parallel/tp: --set"));
}

TEST_CASE("integers out of range are reported as written, never wrapped or truncated") {
  CHECK(contains(errors_of(replace(kGood, "\"tp\": 2", "\"tp\": 18446744073709551615")),
                 "/parallel/tp: expected an integer in [1, 65536], found 18446744073709551615"));
  CHECK(contains(errors_of(replace(kGood, "\"tp\": 2", "\"tp\": 4294967298")),
                 "/parallel/tp: expected an integer in [1, 65536], found 4294967298"));
  // A whole number too large for int64 arrives as a double; converting it would be undefined.
  CHECK(contains(errors_of(replace(kGood, "\"tp\": 2", "\"tp\": 1e30")), "/parallel/tp: expected an integer"));
  CHECK(contains(errors_of(replace(kGood, "\"micro_batch\": 1",
                                   "\"micro_batch\": 1, \"stage_layers\": [4294967308, "
                                   "4294967308]")),
                 "/parallel/stage_layers: expected an array of layer counts"));
}

TEST_CASE("structure: nesting depth, duplicate keys and non-UTF-8 are refused before use") {
  SUBCASE("deep nesting stops at the documented depth with its pointer") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    const std::string e = errors_of(deep);
    CHECK(contains(e, "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"));
    const std::string ok_depth = std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']');
    CHECK(contains(errors_of("{\"x\": " + ok_depth + "}"), "unknown key \"x\""));
  }
  SUBCASE("a duplicate key names the key and where") {
    const std::string e = errors_of(replace(kGood, "\"tp\": 2,", "\"tp\": 2, \"tp\": 8,"));
    CHECK(contains(e, "bad.json: /parallel/tp: duplicate key \"tp\": /parallel gives it twice"));
  }
  SUBCASE("a --set string that is not UTF-8 is refused, never a throw from the JSON writer") {
    CHECK(contains(errors_of(kGood, {"name=\xff\xfe"}), "/name: --set \"name=...\": the value is not valid UTF-8"));
    CHECK(is_valid_utf8("plain ascii and \xc3\xa9"));
    CHECK_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong '/'
    CHECK_FALSE(is_valid_utf8("\xed\xa0\x80"));      // a surrogate
    CHECK_FALSE(is_valid_utf8("\xe2\x82"));          // truncated
    CHECK_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // beyond U+10FFFF
  }
  SUBCASE("describing a non-UTF-8 value never throws") {
    CHECK(contains(describe_json_type(nlohmann::json(std::string("\xff"))), "the string"));
  }
  SUBCASE("comments are allowed, as in the README's example") {
    CHECK(errors_of(replace(kGood, "\"model\"", "// the model\n  /* block */ \"model\"")) == "");
  }
}

TEST_CASE("json_integer_value is exact or nothing") {
  CHECK(json_integer_value(nlohmann::json::parse("1e3")) == 1000);
  CHECK(json_integer_value(nlohmann::json::parse("-9223372036854775808")) == INT64_MIN);
  CHECK_FALSE(json_integer_value(nlohmann::json::parse("9223372036854775808")));
  CHECK_FALSE(json_integer_value(nlohmann::json::parse("9.3e18")));
  CHECK_FALSE(json_integer_value(nlohmann::json::parse("2.5")));
}

TEST_CASE("inputs that are not regular files are refused without reading them") {
  TempDir dir;
  const std::string fifo = (dir.path / "fifo").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string cmd : {"check", "run"}) {
    CAPTURE(cmd);
    const CliResult d = cli({cmd, dir.path.string()});
    CHECK(d.code == 2);
    CHECK(contains(d.err, "is a directory; expected a file"));
    const CliResult f = cli({cmd, fifo});
    CHECK(f.code == 2);
    CHECK(contains(f.err, "is not a regular file"));
  }
  const CliResult v = cli({"validate", fifo});
  CHECK(v.code == 2);
  CHECK(contains(v.err, "is not a regular file"));
  const CliResult g = cli({"regress", std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/regression", "--golden", fifo});
  CHECK(g.code == 2);
  CHECK(contains(g.err, "is not a regular file"));
  const CliResult s = cli({"sweep", fifo});
  CHECK(s.code == 2);
  CHECK(contains(s.err, "is not a regular file"));
  const CliResult m = cli({"sweep", "merge", fifo, "--out", (dir.path / "m.jsonl").string()});
  CHECK(m.code == 2);
  CHECK(contains(m.err, "is not a regular file"));
}

TEST_CASE("outputs: write errors exit non-zero naming the file, nothing half-written, never over an input") {
  TempDir dir;
  const std::string scenario = dir.file("s.json", kGood);
  SUBCASE("an output equal to the input is refused and the input is kept") {
    const CliResult r = cli({"run", scenario, "--out", scenario});
    CHECK(r.code == 2);
    CHECK(contains(r.err, "--out names the input scenario"));
    std::ifstream in(scenario);
    std::stringstream ss;
    ss << in.rdbuf();
    CHECK(ss.str() == kGood);
  }
  SUBCASE("two outputs naming one file are refused") {
    const std::string out = (dir.path / "o").string();
    const CliResult r = cli({"run", scenario, "--out", out, "--report", out});
    CHECK(r.code == 2);
    CHECK(contains(r.err, "--report and --out name the same file"));
  }
  SUBCASE("a write error is an error naming the file") {
    if (std::filesystem::exists("/dev/full")) {
      const CliResult r = cli({"run", scenario, "--out", "/dev/full"});
      CHECK(r.code == 2);
      CHECK(contains(r.err, "/dev/full"));
    }
    const CliResult r = cli({"run", scenario, "--out", (dir.path / "no-such-dir" / "o.json").string()});
    CHECK(r.code == 2);
    CHECK(contains(r.err, "cannot write the file"));
    const CliResult d = cli({"run", scenario, "--report", dir.path.string()});
    CHECK(d.code == 2);
    CHECK(contains(d.err, "is a directory"));
  }
  SUBCASE("a written file is whole and no temporary file is left behind") {
    const std::string out = (dir.path / "r.json").string();
    const CliResult r = cli({"run", scenario, "--out", out});
    REQUIRE(r.code == 0);
    std::ifstream in(out);
    CHECK(nlohmann::json::parse(in)["feasible"] == true);
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path)) ++files;
    CHECK(files == 2);  // the scenario and the result
  }
  SUBCASE("an OutputFile not committed leaves the old file as it was") {
    const std::string p = dir.file("keep.txt", "old");
    {
      OutputFile f(p);
      f.stream() << "new, but never committed";
    }
    std::ifstream in(p);
    std::string text;
    std::getline(in, text);
    CHECK(text == "old");
  }
}

TEST_CASE("sweep merge validates every row and names the file and line") {
  auto merge_error = [](const std::string& text) {
    try {
      merge_sweep_texts({{"s.jsonl", text}});
      return std::string();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
  };
  const std::string head = R"({"index": 0, "sweep": "abc", "points": 2, )";
  CHECK(contains(merge_error(head + R"("status": "ok", "fidelity": "analytical", "error": ""})" + "\n"),
                 "s.jsonl: (document): line 1: a row with status \"ok\" needs the number \"tokens_per_s\""));
  CHECK(contains(merge_error(head + R"("status": 3, "fidelity": "analytical", "error": ""})" + "\n"),
                 "line 1: expected \"status\" to be one of"));
  CHECK(contains(merge_error(head + R"("status": "invalid", "fidelity": "analytical", "error": 1})" + "\n"),
                 "line 1: expected \"error\" to be a string"));
  CHECK(contains(merge_error("\n" + head + R"("status": "ok", "x": 1e999})" + "\n"), "line 2: not a JSON row"));
  // A valid invalid-point row merges.
  CHECK(merge_error(head + R"("status": "invalid", "fidelity": "analytical", "error": "bad tp"})" + "\n") == "");
}

TEST_CASE("the cluster's GPU count is bounded before its topology is built") {
  CHECK(contains(errors_of(kGood, {"cluster.nodes=1048576"}),
                 "/cluster/nodes: the cluster has 8388608 GPUs; at most 1048576 are simulated"));
  CHECK(contains(
      errors_of(kGood,
                {R"(cluster={"groups": [{"node": "dgx-a100", "nodes": 1048576}, {"node": "dgx-a100", "nodes": 1}]})"}),
      "/cluster/groups: the cluster has 8388616 GPUs"));
}

TEST_CASE("the integer-nanosecond clock saturates instead of wrapping, and a run that reaches it is refused") {
  CHECK(Time::seconds(1e300) == Time::saturated());
  CHECK(Time::seconds(std::nan("")) == Time::saturated());
  CHECK(Time::saturated() + Time::saturated() == Time::saturated());
  CHECK(Time::max() + Time::ns(1) == Time::max());  // "never" stays never
  CHECK(Time::seconds(1.5) + Time::seconds(2.5) == Time::seconds(4.0));
  // A model so large that one layer takes centuries: an error, never a wrapped time and a wrong MFU.
  const Scenario s = load_scenario_text(R"({
    "model": {"name": "huge", "layers": 2, "hidden": 1048576, "heads": 64, "ffn_hidden": 4194304,
              "vocab": 16777216, "max_seq_len": 16777216},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1073741824, "global_batch": 1073741824},
    "training": {"seq_len": 16777216}})",
                                        "huge.json", "", {}, catalog());
  // It cannot fit either: without --ignore-memory it is refused before simulation.
  CHECK_FALSE(simulate(s).simulated);
  const JobReport r = simulate(s, Fidelity::Analytical, MemoryCheck::SimulateAnyway);
  CHECK_FALSE(r.feasible);
  CHECK(r.mfu == 0);
  REQUIRE_FALSE(r.problems.empty());
  CHECK(std::any_of(r.problems.begin(), r.problems.end(),
                    [](const std::string& p) { return contains(p, "longer than the simulator's clock can count"); }));
}

TEST_CASE("micro-batches x layers per iteration are bounded at load") {
  CHECK(contains(errors_of(kGood, {"parallel.global_batch=131072"}),
                 "/parallel/global_batch: global_batch / (micro_batch*dp) = 32768 micro-batches of 24 layers"));
}

TEST_CASE("catalog: every category its help names works, and no GPU shows 0 TFLOP/s") {
  const CliResult help = cli({"catalog", "--help"});
  for (const std::string what : {"gpus", "nodes", "models", "topologies"}) {
    CAPTURE(what);
    CHECK(contains(help.out, what));
    const CliResult r = cli({"catalog", what});
    CHECK(r.code == 0);
    CHECK_FALSE(r.out.empty());
  }
  const CliResult gpus = cli({"catalog", "gpus"});
  CHECK_FALSE(contains(gpus.out, " 0 TFLOP/s"));
  CHECK(contains(gpus.out, "V100-SXM2-32GB  125 TFLOP/s (FP16)  32 GiB"));
  CHECK(contains(gpus.out, "H100-SXM-80GB  989 TFLOP/s  80 GiB"));
  CHECK_FALSE(contains(gpus.out, " GB\n"));
}

TEST_CASE("a seq_len beyond the model's maximum context and a profile for a GPU not in the cluster warn") {
  const Scenario s = load_scenario_text(kGood, "s.json", "", {"training.seq_len=4096"}, catalog());
  REQUIRE(s.warnings.size() == 1);
  CHECK(
      contains(s.warnings[0], "s.json: /training/seq_len: 4096 tokens is beyond the model's maximum context of 2048"));
  CHECK(load_scenario_text(kGood, "s.json", "", {}, catalog()).warnings.empty());
  const CliResult r = cli({"check", "--set", "training.seq_len=4096",
                           std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/regression/gpt3-13b-gpipe-h200.json"});
  CHECK(r.code == 0);
  CHECK(contains(r.err, "warning: "));
  const std::string profile = std::string(TRAINSIM_SOURCE_DIR) + "/calibration/profiles/h100-sxm-80gb.json";
  const Scenario p = load_scenario_text(kGood, "s.json", "", {"calibration.profiles=[\"" + profile + "\"]"}, catalog());
  REQUIRE(p.warnings.size() == 1);
  CHECK(contains(p.warnings[0], "/calibration/profiles/0: the profile is for GPU"));
}

TEST_CASE("docs/limits.md states the reader's bounds") {
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/docs/limits.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  CHECK(contains(doc, std::to_string(kMaxJsonDepth) + " levels of arrays and objects"));
  CHECK(contains(doc, std::to_string(kMaxInputFileBytes >> 20) + " MiB"));
  CHECK(contains(doc, "GPUs in the cluster (all groups) | at most 1,048,576"));
  CHECK(contains(doc, "micro-batches per iteration (`global_batch / (micro_batch*dp)`) | at most 16,384"));
  CHECK(contains(doc, "micro-batches per iteration under `parallel.schedule` `dualpipe-v` | at least 2*pp"));
  CHECK(contains(doc, "trace nodes | at most 1,048,576"));
  CHECK(kMaxTraceNodes == 1048576);
  CHECK(contains(doc, "every rank is simulated) | at most 16,384"));
  CHECK(kMaxWorkloadRanks == 16384);
  CHECK(contains(doc, "trace nodes x ranks | at most 134,217,728"));
  CHECK(kMaxTraceTasks == 134217728);
  CHECK(contains(doc, "micro-batches x ep x max(ep, experts) | at most 16,777,216"));
  CHECK(kMaxRoutingDrawWork == 16777216);
  CHECK(contains(doc, "`cluster.fabric.qps_per_connection` | 1 to 128"));
  CHECK(kMaxQpsPerConnection == 128);
}
