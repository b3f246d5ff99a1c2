// Every key the scenario and sweep loaders accept is documented: each shipped
// scenario and sweep is loaded with the loader's key log, and each key asked for
// must appear in the README or docs/ as `key`, "key" or `.key`.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "scenario_fixtures.hpp"
#include "tools/frontend/sweep.hpp"

namespace trainsim {
namespace {

const std::filesystem::path kRoot = TRAINSIM_SOURCE_DIR;

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The keys of `keys` (pointers like "/parallel/tp") that no doc names, one per line.
std::string undocumented_keys(const std::set<std::string>& keys) {
  std::string docs = read_all(kRoot / "README.md");
  for (const auto& e : std::filesystem::directory_iterator(kRoot / "docs")) {
    if (e.path().extension() == ".md") docs += read_all(e.path());
  }
  std::string undocumented;
  for (const std::string& path : keys) {
    const std::string key = path.substr(path.rfind('/') + 1);
    const bool found =
        docs.find("`" + key + "`") != std::string::npos || docs.find("\"" + key + "\"") != std::string::npos ||
        docs.find("." + key + "`") != std::string::npos || docs.find("`" + key + ".") != std::string::npos;
    if (!found) undocumented += "  " + path + "\n";
  }
  return undocumented;
}

TEST_CASE("every scenario key the loader reads is documented in the README or docs/") {
  std::set<std::string> keys;
  int loaded = 0;
  for (const char* dir : {"scenarios", "tests/data"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(kRoot / dir)) {
      if (!e.is_regular_file() || e.path().extension() != ".json") continue;
      try {
        load_scenario_text(read_all(e.path()), e.path().string(), e.path().parent_path().string(), {},
                           testing::catalog(), &keys);
        ++loaded;
      } catch (const InputError&) {
        // Not a scenario (a sweep, a trace, a profile): the keys asked before the error still count.
      }
    }
  }
  CHECK(loaded > 100);
  REQUIRE(keys.size() > 100);
  CHECK(keys.count("/parallel/tp") == 1);
  CHECK(keys.count("/training/seq_len") == 1);
  MESSAGE(keys.size() << " scenario keys read from " << loaded << " scenarios");
  const std::string undocumented = undocumented_keys(keys);
  INFO("keys the loader reads that no doc names:\n" << undocumented);
  CHECK(undocumented.empty());
}

TEST_CASE("every sweep key the loader reads is documented in the README or docs/") {
  const std::filesystem::path dir = kRoot / "scenarios/sweeps";
  std::set<std::string> keys;
  int loaded = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    load_sweep_text(read_all(e.path()), e.path().string(), dir.string(), testing::catalog(), &keys);
    ++loaded;
  }
  CHECK(loaded >= 8);
  CHECK(keys.count("/axes") == 1);
  MESSAGE(keys.size() << " sweep keys read from " << loaded << " sweeps");
  const std::string undocumented = undocumented_keys(keys);
  INFO("sweep keys the loader reads that no doc names:\n" << undocumented);
  CHECK(undocumented.empty());
}

}  // namespace
}  // namespace trainsim
