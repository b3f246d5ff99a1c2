#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/frontend/cli.hpp"

using namespace trainsim;

namespace {

const std::string kRegressionDir = std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/regression";
const std::string kGolden = std::string(TRAINSIM_SOURCE_DIR) + "/tests/golden/regression.json";

int regress(const std::string& golden, std::string* out_text, bool update = false) {
  std::vector<const char*> argv{"trainsim", "regress", kRegressionDir.c_str(), "--golden", golden.c_str()};
  if (update) argv.push_back("--update");
  std::ostringstream out, err;
  const int code = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  *out_text = out.str() + err.str();
  return code;
}

// A copy of the golden file with one scenario's iteration time scaled.
std::string perturbed_golden(double factor) {
  std::ifstream in(kGolden);
  nlohmann::json g = nlohmann::json::parse(in);
  auto& c = g["cases"].begin().value();
  c["iteration_time_s"] = c["iteration_time_s"].get<double>() * factor;
  const auto path = std::filesystem::temp_directory_path() / ("trainsim-golden-" + std::to_string(factor) + ".json");
  std::ofstream(path) << g.dump(2);
  return path.string();
}

}  // namespace

TEST_CASE("the shipped golden file matches the current model") {
  std::string text;
  CHECK(regress(kGolden, &text) == 0);
  CHECK(text.find("tolerance 0.50%: ok") != std::string::npos);
}

TEST_CASE("a prediction that moves more than 0.5% fails; within tolerance passes") {
  std::string text;
  CHECK(regress(perturbed_golden(1.01), &text) == 1);  // the model now predicts 1% off the golden value
  CHECK(text.find("DRIFT") != std::string::npos);
  CHECK(regress(perturbed_golden(1.003), &text) == 0);
}

TEST_CASE("--update rewrites the golden file, after which it passes") {
  const std::string path = perturbed_golden(1.2);
  std::string text;
  CHECK(regress(path, &text, /*update=*/true) == 0);
  CHECK(text.find("+") != std::string::npos);  // the old-vs-new table was printed
  CHECK(regress(path, &text) == 0);
  // Entries checked at flow fidelity stay so.
  std::ifstream in(path);
  const nlohmann::json g = nlohmann::json::parse(in);
  CHECK(g["cases"]["gpt3-1.3b-two-dc-pp-wan-h100"]["fidelity"] == "flow");
  CHECK_FALSE(g["cases"]["llama3-8b-fsdp-a100"].contains("fidelity"));
  std::filesystem::remove(path);
}

TEST_CASE("each golden entry is checked at the fidelity it names") {
  std::string text;
  CHECK(regress(kGolden, &text) == 0);
  CHECK(text.find("gpt3-1.3b-two-dc-pp-wan-h100       flow       iteration_time_s") != std::string::npos);
  CHECK(text.find("llama3-8b-fsdp-a100                analytical iteration_time_s") != std::string::npos);
  // Without "fidelity" the entry is checked at analytical fidelity.
  std::ifstream in(kGolden);
  nlohmann::json g = nlohmann::json::parse(in);
  g["cases"]["gpt3-1.3b-two-dc-pp-wan-h100"].erase("fidelity");
  const auto path = std::filesystem::temp_directory_path() / "trainsim-golden-analytical.json";
  std::ofstream(path) << g.dump(2);
  regress(path.string(), &text);
  CHECK(text.find("gpt3-1.3b-two-dc-pp-wan-h100       analytical iteration_time_s") != std::string::npos);
  g["cases"]["gpt3-1.3b-two-dc-pp-wan-h100"]["fidelity"] = "flw";
  std::ofstream(path) << g.dump(2);
  CHECK(regress(path.string(), &text) == 2);
  CHECK(text.find("/cases/gpt3-1.3b-two-dc-pp-wan-h100/fidelity: expected one of") != std::string::npos);
  std::filesystem::remove(path);
}
