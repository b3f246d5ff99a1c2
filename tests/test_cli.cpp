#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "sim/check.hpp"
#include "sim/flow_network.hpp"
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
  // The workload names its throughput unit; the figures say which fidelity they come from.
  CHECK(j["throughput"]["unit"] == "tokens");
  CHECK(j["throughput"]["per_s"].get<double>() == j["tokens_per_s"].get<double>());
  CHECK(j["fidelity"] == "analytical");
  CHECK(j["flops_convention"] == "Megatron-LM (Narayanan et al. 2021, eq. 3)");
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

TEST_CASE("--fidelity flow agrees with analytical where nothing contends; rank images where exact") {
  const CliResult a = cli({"run", "--json"});
  const CliResult f = cli({"run", "--json", "--fidelity", "flow"});
  const CliResult every = cli({"run", "--json", "--fidelity", "flow", "--set", "flow.ranks=all"});
  REQUIRE(a.code == 0);
  REQUIRE(f.code == 0);
  REQUIRE(every.code == 0);
  const auto ja = nlohmann::json::parse(a.out);
  const auto jf = nlohmann::json::parse(f.out);
  const auto je = nlohmann::json::parse(every.out);
  // The default cluster (8 DGX H100 under one leaf per rail) is symmetric: the
  // automatic choice runs the rank images (fewer than one rank per TP group)
  // and predicts what every rank does.
  CHECK(jf["simulated_ranks"] == 4);
  CHECK(jf["flow_ranks"] == "images (exact)");
  CHECK(je["simulated_ranks"] == 64);
  CHECK(je["flow_ranks"] == "all");
  CHECK(jf["iteration_time_s"] == je["iteration_time_s"]);
  CHECK(ja["simulated_ranks"] == 4);
  CHECK(!ja.contains("flow_ranks"));
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
  // Known from the memory model alone, so it is refused before simulation: no events, no times, only
  // memory; --ignore-memory times it all the same as a what-if, and it stays infeasible.
  const nlohmann::json refused =
      nlohmann::json::parse(cli({"run", "--json", "--set", "parallel.micro_batch=16", "--set",
                                 "parallel.recompute=none", "--set", "parallel.global_batch=512"})
                                .out);
  CHECK(refused["simulated"] == false);
  CHECK(refused["events"] == 0);
  CHECK(refused["iteration_time_s"] == 0.0);
  CHECK(refused["per_stage"][0]["memory_gib"]["total"].get<double>() >
        refused["per_stage"][0]["memory_gib"]["capacity"].get<double>());
  const CliResult timed = cli({"run", "--ignore-memory", "--json", "--set", "parallel.micro_batch=16", "--set",
                               "parallel.recompute=none", "--set", "parallel.global_batch=512"});
  CHECK(timed.code == 1);
  const nlohmann::json t = nlohmann::json::parse(timed.out);
  CHECK(t["simulated"] == true);
  CHECK(t["feasible"] == false);
  CHECK(t["events"].get<std::uint64_t>() > 0);
  CHECK(t["iteration_time_s"].get<double>() > 0);
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

TEST_CASE("validate: an infeasible case is a failed row, outside the MAPE, and fails only a gated run") {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(TRAINSIM_SOURCE_DIR) / "scenarios/validation/mpt_7b_a100_8gpu_seq2048.json";
  const fs::path dir = fs::temp_directory_path() / ("trainsim-validate-failed-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(src, dir / "a_feasible.json", fs::copy_options::overwrite_existing);
  nlohmann::json oom = nlohmann::json::parse(std::ifstream(src));
  oom["id"] = "oom_case";
  oom["parallel"]["micro_batch"] = 96;
  oom["parallel"]["global_batch"] = 768;
  std::ofstream(dir / "b_oom.json") << oom.dump(2);
  const std::string d = dir.string();
  const CliResult alone = cli({"validate", src.string().c_str(), "--json"});
  const CliResult both = cli({"validate", d.c_str(), "--json"});
  fs::remove_all(dir);
  REQUIRE(alone.code == 0);
  CHECK(both.code == 0);  // the directory is reported, not rejected
  const auto j = nlohmann::json::parse(both.out);
  CHECK(j["failed"] == 1);
  REQUIRE(j["cases"].size() == 2);
  CHECK(j["cases"][1]["feasible"] == false);
  CHECK(j["cases"][1]["problem"].get<std::string>().find("out of memory") != std::string::npos);
  // The MAPE is that of the feasible case alone.
  CHECK(j["mape_pct"].get<double>() == nlohmann::json::parse(alone.out)["mape_pct"].get<double>());
  CHECK(both.err.find("failed: oom_case") != std::string::npos);
  fs::create_directories(dir);
  fs::copy_file(src, dir / "a_feasible.json", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "b_oom.json") << oom.dump(2);
  const CliResult gated = cli({"validate", d.c_str(), "--max-mape", "100"});
  fs::remove_all(dir);
  CHECK(gated.code == 1);
  CHECK(gated.err.find("could not be predicted") != std::string::npos);
  CHECK(gated.out.find("FAILED") != std::string::npos);
}

TEST_CASE("run --kernels --json carries the kernel table of every stage") {
  const CliResult r = cli({"run", "--kernels", "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.contains("kernels"));
  REQUIRE(j["kernels"].size() == j["per_stage"].size());
  for (const auto& st : j["kernels"]) {
    REQUIRE(st["kernels"].size() > 3);
    double sum = 0, prev = 1e300;
    for (const auto& k : st["kernels"]) {
      CHECK(k["count"].get<int>() > 0);
      CHECK(k["seconds"].get<double>() <= prev);  // the largest first
      prev = k["seconds"].get<double>();
      sum += prev;
    }
    CHECK(sum == doctest::Approx(st["compute_s"].get<double>()).epsilon(1e-9));
  }
  // Without --json the same table is printed as text.
  CHECK(cli({"run", "--kernels"}).out.find("kernels of stage 0") != std::string::npos);
  CHECK_FALSE(cli({"run", "--json"}).out.find("\"kernels\"") != std::string::npos);
}

TEST_CASE("exit codes per error class: bad quantities, schema version and topology exit 2 naming file and pointer") {
  const CliResult bare = cli({"run", "--set", "cluster.fabric.link_latency=1"});
  CHECK(bare.code == 2);
  CHECK(bare.err.find("llama3-70b-64xh100.json: /cluster/fabric/link_latency: expected a duration with a unit") !=
        std::string::npos);
  const CliResult schema_run = cli({"run", "--set", "schema_version=7"});
  CHECK(schema_run.code == 2);
  CHECK(schema_run.err.find("llama3-70b-64xh100.json: /schema_version: unsupported scenario schema version 7") !=
        std::string::npos);
  for (const char* fidelity : {"analytical", "flow"}) {
    CAPTURE(fidelity);
    const CliResult topo = cli({"run", "--fidelity", fidelity, "--set", "cluster.datacenters.count=16", "--set",
                                "cluster.datacenters.wan_bandwidth=100Gbps"});
    CHECK(topo.code == 2);
    CHECK(topo.err.find("llama3-70b-64xh100.json: /cluster/datacenters/count: 16 datacenters cannot split") !=
          std::string::npos);
  }
}

TEST_CASE("an internal error prints \"error: internal: <message>\" and exits 3") {
  SUBCASE("a failed check names the file and line") {
    std::ostringstream err;
    const int line = __LINE__ + 3;  // the line of the check below
    const int code = run_guarded(
        []() -> int {
          TRAINSIM_CHECK(1 + 1 == 3, "arithmetic is broken");
          return 0;
        },
        err);
    CHECK(code == kExitInternal);
    CHECK(code == 3);
    CHECK(err.str().rfind("error: internal: tests/test_cli.cpp:" + std::to_string(line) + ": arithmetic is broken",
                          0) == 0);
    CHECK(err.str().find("check failed: 1 + 1 == 3") != std::string::npos);
  }
  SUBCASE("a broken invariant inside the simulator") {
    std::ostringstream err;
    const int code = run_guarded(
        [] {
          FlowNetwork net({10e9});
          const std::uint32_t path[] = {0};
          const FlowSpec f{path, 1e9, Time{}};
          net.start(Time::ns(1000), {&f, 1}, 0);
          net.start(Time::ns(10), {&f, 1}, 1);  // time runs backwards: a caller's bug
          return 0;
        },
        err);
    CHECK(code == 3);
    CHECK(err.str().find("error: internal: sim/flow_network.cpp:") == 0);
  }
  SUBCASE("any other exception escaping a command is internal too") {
    std::ostringstream err;
    CHECK(run_guarded([]() -> int { throw std::runtime_error("boom"); }, err) == 3);
    CHECK(err.str().rfind("error: internal: boom\n", 0) == 0);
    std::ostringstream err2;
    CHECK(run_guarded([]() -> int { throw 42; }, err2) == 3);
    CHECK(err2.str().find("error: internal:") == 0);
  }
  SUBCASE("input errors keep exit 2 and other results pass through") {
    std::ostringstream err;
    CHECK(run_guarded([]() -> int { throw InputError({Diagnostic{"x.json", "/a", "bad"}}); }, err) == 2);
    CHECK(err.str() == "error: x.json: /a: bad\n");
    CHECK(run_guarded([] { return 1; }, err) == 1);
  }
  SUBCASE("the help lists exit code 3") {
    const CliResult help = cli({"--help"});
    CHECK(help.code == 0);
    CHECK(help.out.find("3 internal error") != std::string::npos);
  }
}
