#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tools/frontend/cli.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

const Catalog& catalog() {
  static const Catalog c = load_builtin_catalog();
  return c;
}

// A valid scenario; each subcase breaks one thing.
std::string good() {
  return R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 2},
  "parallel": {"tp": 2, "pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 32},
  "training": {"seq_len": 2048}
})";
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

// Loads text; returns all diagnostics formatted, one per line ("" if valid).
std::string errors_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    load_scenario_text(text, "bad.json", "", sets, catalog());
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
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
    CHECK(e.find("/parallel/schedule: vpp = 2 needs the \"interleaved-1f1b\" schedule, found \"1f1b\"") !=
          std::string::npos);
    CHECK(e.find("/parallel: tp*pp*dp*cp = 2*2*4*3 = 48, expected the cluster's GPU count 16") != std::string::npos);
    CHECK(e.find("/parallel/cp: expected a divisor of seq_len 2048, found 3") != std::string::npos);
  }
  SUBCASE("an unsupported feature says so by name") {
    const std::string e = errors_of(replace(good(), "\"dp\": 4", "\"dp\": 4, \"ep\": 2"));
    CHECK(e.find("bad.json: /parallel/ep: expert parallelism (ep > 1) needs a mixture-of-experts model; not "
                 "supported yet (found ep = 2)") != std::string::npos);
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
  const std::string e2 = errors_of(good(), {"model.layers=12"});
  CHECK(e2.find("/model") != std::string::npos);
  CHECK(errors_of(good(), {"nonsense"}).find("expected key.path=value") != std::string::npos);
}

TEST_CASE("bad input exits with code 2 and names file and pointer") {
  std::ostringstream out, err;
  const char* argv[] = {"trainsim", "run", "--set", "parallel.tp=0"};
  CHECK(run_cli(4, argv, out, err) == 2);
  CHECK(err.str().find("/parallel/tp: expected an integer in [1,") != std::string::npos);
  CHECK(err.str().find("llama3-70b-64xh100.json") != std::string::npos);
}
