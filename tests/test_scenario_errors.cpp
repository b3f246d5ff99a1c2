#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "scenario_fixtures.hpp"
#include "tools/frontend/cli.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// A valid scenario; each subcase breaks one thing.
std::string good() {
  return R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 2},
  "parallel": {"tp": 2, "pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 32},
  "training": {"seq_len": 2048}
})";
}

}  // namespace

TEST_CASE("the base scenario is valid") { CHECK(errors_of(good()) == ""); }

TEST_CASE("each class of bad input names the file, the JSON pointer and what was expected") {
  SUBCASE("malformed JSON gives line and column") {
    const std::string e = errors_of(replace(good(), "\"tp\": 2,", "\"tp\": 2,,"));
    CHECK(e.find("bad.json") != std::string::npos);
    CHECK(e.find("malformed JSON at line 4") != std::string::npos);
  }
  SUBCASE("unknown key with did-you-mean") {
    const std::string e = errors_of(replace(good(), "\"tp\": 2", "\"tpp\": 2"));
    CHECK(e.find("bad.json: /parallel/tpp: unknown key \"tpp\" (did you mean \"tp\"?)") != std::string::npos);
  }
  SUBCASE("wrong type") {
    const std::string e = errors_of(replace(good(), "\"tp\": 2", "\"tp\": \"two\""));
    CHECK(e.find("/parallel/tp: expected an integer, found the string \"two\"") != std::string::npos);
  }
  SUBCASE("out of range") {
    const std::string e = errors_of(replace(good(), "\"micro_batch\": 1", "\"micro_batch\": 0"));
    CHECK(e.find("/parallel/micro_batch: expected an integer in [1,") != std::string::npos);
  }
  SUBCASE("unknown preset lists the valid ones") {
    const std::string e = errors_of(replace(good(), "gpt3-1.3b", "gpt3-1.4b"));
    CHECK(e.find("/model: unknown model preset \"gpt3-1.4b\"") != std::string::npos);
    CHECK(e.find("did you mean \"gpt3-1.3b\"") != std::string::npos);
    CHECK(e.find("llama3-70b") != std::string::npos);
  }
  SUBCASE("unknown node preset") {
    const std::string e = errors_of(replace(good(), "dgx-a100", "dgx-a1000"));
    CHECK(e.find("/cluster/node: unknown node preset \"dgx-a1000\" (did you mean \"dgx-a100\"?)") != std::string::npos);
  }
  SUBCASE("tp*pp*dp*cp must equal the GPU count") {
    const std::string e = errors_of(replace(good(), "\"dp\": 4", "\"dp\": 2"));
    CHECK(e.find("/parallel: tp*pp*dp*cp = 2*2*2*1 = 8, expected the cluster's GPU count 16") != std::string::npos);
  }
  SUBCASE("heads must divide by tp") {
    const std::string e = errors_of(R"({
      "model": "gpt3-1.3b",
      "cluster": {"node": {"preset": "dgx-a100", "gpus_per_node": 3}, "nodes": 1},
      "parallel": {"tp": 3, "global_batch": 8},
      "training": {"seq_len": 2048}})");
    CHECK(e.find("/parallel/tp: expected a divisor of the model's 16 attention heads, found 3") != std::string::npos);
  }
  SUBCASE("layers must divide by pp*vpp") {
    const std::string e = errors_of(replace(replace(good(), "\"pp\": 2", "\"pp\": 2, \"vpp\": 5"), "\"micro_batch\"",
                                            "\"schedule\": \"interleaved-1f1b\", \"micro_batch\""));
    CHECK(e.find("/parallel/pp: the model's 24 layers must divide evenly into pp*vpp = 2*5 = 10 stages") !=
          std::string::npos);
  }
  SUBCASE("global batch must divide by micro_batch*dp") {
    const std::string e = errors_of(replace(good(), "\"global_batch\": 32", "\"global_batch\": 30"));
    CHECK(e.find("/parallel/global_batch: expected a multiple of micro_batch*dp = 1*4 = 4, found 30") !=
          std::string::npos);
  }
  SUBCASE("layout rules come from the one checker (models/layout_rules.hpp), all at once") {
    const std::string e = errors_of(good(), {"parallel.vpp=2", "parallel.schedule=1f1b", "parallel.cp=3"});
    CHECK(e.find("/parallel/schedule: vpp = 2 needs the \"interleaved-1f1b\" or \"breadth-first\" schedule, found "
                 "\"1f1b\"") != std::string::npos);
    CHECK(e.find("/parallel: tp*pp*dp*cp = 2*2*4*3 = 48, expected the cluster's GPU count 16") != std::string::npos);
    CHECK(e.find("/parallel/cp: expected a divisor of seq_len 2048, found 3") != std::string::npos);
  }
  SUBCASE("a feature the model cannot use says so by name") {
    const std::string e = errors_of(replace(good(), "\"dp\": 4", "\"dp\": 4, \"ep\": 2"));
    CHECK(e.find("bad.json: /parallel/ep: expert parallelism (ep > 1) needs a mixture-of-experts model (model.moe), "
                 "found ep = 2") != std::string::npos);
  }
  SUBCASE("quantities with a bad unit") {
    const std::string e =
        errors_of(replace(good(), "\"node\": \"dgx-a100\"",
                          "\"node\": {\"preset\": \"dgx-a100\", \"nics\": {\"bandwidth\": \"200Gbs\"}}"));
    CHECK(e.find("/cluster/node/nics/bandwidth: expected a bandwidth") != std::string::npos);
    CHECK(e.find("unknown unit \"Gbs\"") != std::string::npos);
  }
  SUBCASE("a missing required key") {
    const std::string e = errors_of(replace(good(), "\"global_batch\": 32", "\"zero\": 1"));
    CHECK(e.find("/parallel/global_batch: required integer is missing") != std::string::npos);
  }
  SUBCASE("a bad enum value") {
    const std::string e =
        errors_of(replace(good(), "\"micro_batch\": 1", "\"schedule\": \"1f2b\", \"micro_batch\": 1"));
    CHECK(e.find("/parallel/schedule: expected one of") != std::string::npos);
    CHECK(e.find("did you mean \"1f1b\"") != std::string::npos);
  }
  SUBCASE("all problems are reported at once") {
    const std::string e = errors_of(replace(replace(good(), "\"tp\": 2", "\"tp\": \"x\""), "\"seq_len\": 2048",
                                            "\"seq_len\": 2048, \"precison\": \"bf16\""));
    CHECK(e.find("/parallel/tp") != std::string::npos);
    CHECK(e.find("/training/precison: unknown key \"precison\" (did you mean \"precision\"?)") != std::string::npos);
  }
}

TEST_CASE("--set overrides go through the same validation") {
  CHECK(errors_of(good(), {"parallel.tp=4", "parallel.dp=2"}) == "");
  const std::string e = errors_of(good(), {"parallel.tp=three"});
  CHECK(e.find("/parallel/tp: expected an integer, found the string \"three\"") != std::string::npos);
  // A preset named by a string takes field overrides ({"preset": name, ...}); a key it does not have is still an error.
  CHECK(errors_of(good(), {"model.bias=false", "cluster.node.nics.count=4"}) == "");
  const std::string e2 = errors_of(good(), {"model.layerz=12"});
  CHECK(e2.find("/model/layerz: unknown key") != std::string::npos);
  CHECK(errors_of(good(), {"parallel.tp.x=1"}).find("/parallel/tp is") != std::string::npos);
  CHECK(errors_of(good(), {"nonsense"}).find("expected key.path=value") != std::string::npos);
}

TEST_CASE("bad input exits with code 2 and names file and pointer") {
  std::ostringstream out, err;
  const char* argv[] = {"trainsim", "run", "--set", "parallel.tp=0"};
  CHECK(run_cli(4, argv, out, err) == 2);
  CHECK(err.str().find("/parallel/tp: expected an integer in [1,") != std::string::npos);
  CHECK(err.str().find("llama3-70b-64xh100.json") != std::string::npos);
}

TEST_CASE("a quantity without a unit is an error unless it is 0") {
  auto with_cluster = [](const std::string& cluster) {
    return replace(good(), R"("cluster": {"node": "dgx-a100", "nodes": 2})", "\"cluster\": " + cluster);
  };
  SUBCASE("a latency of 1 is not one second") {
    const std::string e = errors_of(with_cluster(R"({"node": "dgx-a100", "nodes": 2, "fabric": {"link_latency": 1}})"));
    CHECK(e.find("bad.json: /cluster/fabric/link_latency: expected a duration with a unit such as \"0.5us\", "
                 "found the number 1; a bare number is only allowed for 0") != std::string::npos);
  }
  SUBCASE("a WAN bandwidth of 400 is not 400 bytes/s") {
    const std::string e = errors_of(with_cluster(
        R"({"node": "dgx-a100", "nodes": 2, "datacenters": {"count": 2, "wan_bandwidth": 400, "wan_latency": "5ms"}})"));
    CHECK(e.find("bad.json: /cluster/datacenters/wan_bandwidth: expected a bandwidth with a unit such as "
                 "\"400Gbps\", found the number 400") != std::string::npos);
  }
  SUBCASE("a unitless string is refused too") {
    const std::string e =
        errors_of(with_cluster(R"({"node": "dgx-a100", "nodes": 2, "fabric": {"link_latency": "2"}})"));
    CHECK(e.find("bad.json: /cluster/fabric/link_latency: expected a time") != std::string::npos);
    CHECK(e.find("\"2\" has no unit; a bare number is only allowed for 0") != std::string::npos);
  }
  SUBCASE("inline node definitions") {
    const std::string e = errors_of(with_cluster(
        R"({"node": {"preset": "dgx-a100", "nics": {"count": 8, "bandwidth": 25000000000}}, "nodes": 2})"));
    CHECK(e.find("bad.json: /cluster/node/nics/bandwidth: expected a bandwidth with a unit") != std::string::npos);
  }
  SUBCASE("parallel sizes") {
    const std::string e =
        errors_of(replace(good(), "\"micro_batch\": 1", "\"dp_bucket\": 40000000, \"micro_batch\": 1"));
    CHECK(e.find("bad.json: /parallel/dp_bucket: expected a size with a unit such as \"80GiB\"") != std::string::npos);
  }
  SUBCASE("0 needs no unit, and units still work") {
    CHECK(errors_of(with_cluster(R"({"node": "dgx-a100", "nodes": 2, "fabric": {"link_latency": 0}})")) == "");
    CHECK(errors_of(with_cluster(R"({"node": "dgx-a100", "nodes": 2, "fabric": {"link_latency": "0.7us"}})")) == "");
  }
}

TEST_CASE("a calibration profile with a unitless quantity names the profile file and its pointer") {
  std::string text;
  for (const auto& f : calibration_profile_files()) {
    if (f.path.find("a100-sxm4-80gb.json") != std::string_view::npos) text = std::string(f.text);
  }
  REQUIRE_FALSE(text.empty());
  nlohmann::json profile = nlohmann::json::parse(text);
  profile["launch_overhead"]["value"] = 3e-6;  // seconds, but without the unit
  const auto path = std::filesystem::temp_directory_path() / "trainsim_test_bare_launch_overhead.json";
  std::ofstream(path) << profile.dump(2);
  std::string scenario = good();
  scenario.insert(scenario.rfind('}'), ", \"calibration\": {\"profiles\": [\"" + path.string() + "\"]}\n");
  const std::string e = errors_of(scenario);
  CHECK(e.find("bad.json: /calibration/profiles/0: error: " + path.string() +
               ": /launch_overhead/value: expected a duration with a unit such as \"0.5us\", found the number") !=
        std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("schema_version: absent or 1 is accepted, anything else is an error naming it") {
  CHECK(errors_of(replace(good(), "{", "{\"schema_version\": 1,")) == "");
  const std::string two = errors_of(replace(good(), "{", "{\"schema_version\": 2,"));
  CHECK(two.find("bad.json: /schema_version: unsupported scenario schema version 2; this trainsim reads version 1") !=
        std::string::npos);
  const std::string text = errors_of(replace(good(), "{", "{\"schema_version\": \"1\","));
  CHECK(text.find("bad.json: /schema_version: expected the integer scenario schema version 1, found the string") !=
        std::string::npos);
  CHECK(errors_of(good(), {"schema_version=0"}).find("/schema_version: unsupported scenario schema version 0") !=
        std::string::npos);
}

TEST_CASE("a cluster the router cannot connect is a load-time input error, whatever the fidelity") {
  auto with_cluster = [](const std::string& cluster) {
    return replace(good(), R"("cluster": {"node": "dgx-a100", "nodes": 2})", "\"cluster\": " + cluster);
  };
  SUBCASE("more datacenters than nodes") {
    const std::string e = errors_of(
        with_cluster(R"({"node": "dgx-a100", "nodes": 2, "datacenters": {"count": 4, "wan_bandwidth": "100Gbps"}})"));
    CHECK(e.find("bad.json: /cluster/datacenters/count: 4 datacenters cannot split the cluster's 2 nodes evenly") !=
          std::string::npos);
  }
  SUBCASE("several datacenters with a WAN of zero bandwidth") {
    const std::string e =
        errors_of(with_cluster(R"({"node": "dgx-a100", "nodes": 2, "datacenters": {"count": 2, "wan_bandwidth": 0}})"));
    CHECK(e.find("bad.json: /cluster/datacenters/wan_bandwidth: expected a bandwidth") != std::string::npos);
  }
  SUBCASE("at --fidelity flow the CLI exits 2 before simulating") {
    std::ostringstream out, err;
    const char* argv[] = {"trainsim", "run",   "--fidelity",
                          "flow",     "--set", "cluster.datacenters={\"count\": 3, \"wan_bandwidth\": \"100Gbps\"}"};
    CHECK(run_cli(6, argv, out, err) == 2);
    CHECK(err.str().find("llama3-70b-64xh100.json: /cluster/datacenters/count: 3 datacenters cannot split the "
                         "cluster's 8 nodes evenly") != std::string::npos);
  }
}
