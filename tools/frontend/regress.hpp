#pragma once
// `trainsim regress`: predictions of the regression scenarios against a golden
// file. A prediction that moves more than the golden file's tolerance fails
// unless the golden file is updated (`--update`) in the same change. Each golden
// entry names the network fidelity it is checked at (default analytical).
#include <string>
#include <vector>

#include "tools/frontend/catalog.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/validate.hpp"

namespace trainsim {

struct RegressionRow {
  std::string name, metric;
  Fidelity fidelity = Fidelity::Analytical;  // the golden entry's "fidelity"
  double golden = 0, current = 0, change_pct = 0;
  bool missing = false;  // no golden value yet
  bool drifted = false;  // |change| above tolerance (or missing)
};

struct RegressionReport {
  double tolerance_pct = 0.5;
  std::vector<RegressionRow> rows;
  std::vector<std::string> stale;  // golden entries without a scenario
  bool ok() const;
};

// The metrics compared for every scenario.
const std::vector<std::string>& regression_metrics();

// `golden_text`, when given, is the golden file's content (the embedded copy);
// otherwise it is read from `golden_path` (absent: every scenario is "missing").
RegressionReport regress(const std::vector<ScenarioText>& scenarios, const std::string& golden_path,
                         const Catalog& catalog, const std::string* golden_text = nullptr);
// scenarios/regression/*.json and tests/golden/regression.json as built into the
// binary: `trainsim regress` without arguments outside the repository uses them.
std::vector<ScenarioText> builtin_regression_scenarios();
std::string builtin_regression_golden();
// Writes the current predictions as the new golden file (keeps the tolerance and
// each entry's fidelity).
void write_golden(const RegressionReport& report, const std::string& golden_path);
std::string regression_table(const RegressionReport& report);

}  // namespace trainsim
