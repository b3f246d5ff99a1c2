#pragma once
// Scenario loading for front-end tests: the built-in catalog (parsed once per
// test binary) and the diagnostics a scenario text gives.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tools/frontend/scenario.hpp"

namespace trainsim::testing {

inline const Catalog& catalog() {
  static const Catalog c = load_builtin_catalog();
  return c;
}

// Every diagnostic of loading `text` (as "bad.json") with `sets`, one per line; "" if valid.
inline std::string errors_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    load_scenario_text(text, "bad.json", "", sets, catalog());
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

// `s` with the first `from` replaced by `to` (which must be there).
inline std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

}  // namespace trainsim::testing
