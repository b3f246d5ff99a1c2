#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tools/frontend/cli.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace trainsim {
std::span<const EmbeddedFile> example_scenario_files();
}

namespace {

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(std::vector<const char*> args) {
  args.insert(args.begin(), "trainsim");
  std::ostringstream out, err;
  const int code = run_cli(static_cast<int>(args.size()), args.data(), out, err);
  return {code, out.str(), err.str()};
}

}  // namespace

TEST_CASE("run with no scenario runs the embedded default and carries every result field") {
  const CliResult r = cli({"run", "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"iteration_time_s", "tokens_per_s", "samples_per_s", "tflops_per_gpu", "mfu", "hfu",
                          "peak_memory_gib", "breakdown", "per_stage", "feasible", "events", "wall_time_s"}) {
    CAPTURE(key);
    CHECK(j.contains(key));
  }
  for (const char* key : {"compute_s", "exposed_comm_s", "bubble_s", "idle_s"}) CHECK(j["breakdown"].contains(key));
  for (const char* key : {"tp", "dp", "pp", "ep", "cp"}) CHECK(j["breakdown"]["exposed_comm_s"].contains(key));
  CHECK(j["gpus"] == 64);
  CHECK(j["per_stage"].size() == 4);
  CHECK(j["feasible"] == true);
  CHECK(j["iteration_time_s"].get<double>() > 0);
  // The parts of the breakdown add up to the iteration time.
  const auto& b = j["breakdown"];
  double sum = b["compute_s"].get<double>() + b["bubble_s"].get<double>() + b["idle_s"].get<double>();
  for (const auto& [k, v] : b["exposed_comm_s"].items()) sum += v.get<double>();
  CHECK(sum == doctest::Approx(j["iteration_time_s"].get<double>()).epsilon(1e-6));
  // MFU is consistent with TFLOP/s per GPU and the H100 BF16 peak.
  CHECK(j["mfu"].get<double>() == doctest::Approx(j["tflops_per_gpu"].get<double>() / 989.4).epsilon(1e-6));
}

TEST_CASE("the same scenario twice gives identical results") {
  auto strip = [](const std::string& s) {
    auto j = nlohmann::json::parse(s);
    j.erase("wall_time_s");  // the only field that measures the host, not the simulated job
    return j.dump();
  };
  const CliResult a = cli({"run", "--json", "--set", "parallel.dp_overlap=false"});
  const CliResult b = cli({"run", "--json", "--set", "parallel.dp_overlap=false"});
  REQUIRE(a.code == 0);
  CHECK(strip(a.out) == strip(b.out));
  const CliResult c = cli({"run", "--json"});
  CHECK(strip(a.out) != strip(c.out));  // and a change of input changes the result
}

TEST_CASE("--fidelity flow simulates every rank and agrees with analytical where nothing contends") {
  const CliResult a = cli({"run", "--json"});
  const CliResult f = cli({"run", "--json", "--fidelity", "flow"});
  REQUIRE(a.code == 0);
  REQUIRE(f.code == 0);
  const auto ja = nlohmann::json::parse(a.out);
  const auto jf = nlohmann::json::parse(f.out);
  CHECK(jf["simulated_ranks"] == 64);
  CHECK(ja["simulated_ranks"] == 4);
  CHECK(jf["iteration_time_s"].get<double>() == doctest::Approx(ja["iteration_time_s"].get<double>()).epsilon(0.05));
}

TEST_CASE("human summary") {
  const CliResult r = cli({"run"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("tokens/s") != std::string::npos);
  CHECK(r.out.find("MFU") != std::string::npos);
  CHECK(r.out.find("pipeline bubble") != std::string::npos);
}

TEST_CASE("an oversized configuration is infeasible: exit 1 naming the rank and its memory") {
  const CliResult r = cli({"run", "--set", "parallel.micro_batch=16", "--set", "parallel.recompute=none", "--set",
                           "parallel.global_batch=512"});
  CHECK(r.code == 1);
  CHECK(r.err.find("out of memory on stage 0") != std::string::npos);
  CHECK(r.err.find("activations") != std::string::npos);
}

TEST_CASE("command-line errors exit 2") {
  CHECK(cli({"run", "--no-such-option"}).code == 2);
  CHECK(cli({"frobnicate"}).code == 2);
  CHECK(cli({"run", "--fidelity", "quantum"}).code == 2);
  const CliResult missing = cli({"run", "/nonexistent/scenario.json"});
  CHECK(missing.code == 2);
  CHECK(missing.err.find("/nonexistent/scenario.json") != std::string::npos);
}

TEST_CASE("check and catalog") {
  CHECK(cli({"check", "--set", "parallel.tp=4", "/nonexistent.json"}).code == 2);
  const CliResult cat = cli({"catalog", "gpus"});
  CHECK(cat.code == 0);
  CHECK(cat.out.find("H100-SXM-80GB") != std::string::npos);
  CHECK(cli({"catalog", "models"}).out.find("llama3-70b") != std::string::npos);
}

TEST_CASE("every embedded example scenario loads (CTest example_* runs each file)") {
  const Catalog catalog = load_builtin_catalog();
  for (const auto& f : example_scenario_files()) {
    CAPTURE(f.path);
    const Scenario s = load_scenario_text(std::string(f.text), std::string(f.path), "", {}, catalog);
    CHECK(s.cluster.total_gpus() > 0);
  }
  CHECK(example_scenario_files().size() >= 1);
}

TEST_CASE("validate: --max-mape and --max-error gate the exit code") {
  const std::string mpt = std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation/mpt_7b_a100_8gpu_seq2048.json";
  const CliResult ok = cli({"validate", mpt.c_str(), "--json"});
  REQUIRE(ok.code == 0);
  const double err_pct = std::abs(nlohmann::json::parse(ok.out)["max_error_pct"].get<double>());
  REQUIRE(err_pct > 0.1);
  const std::string below = std::to_string(err_pct * 0.9), above = std::to_string(err_pct * 1.1);
  CHECK(cli({"validate", mpt.c_str(), "--max-error", above.c_str()}).code == 0);
  const CliResult bad = cli({"validate", mpt.c_str(), "--max-error", below.c_str()});
  CHECK(bad.code == 1);
  CHECK(bad.err.find("exceeds --max-error") != std::string::npos);
  CHECK(cli({"validate", mpt.c_str(), "--max-mape", below.c_str()}).code == 1);
}
