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

RegressionReport regress(const std::vector<ScenarioText>& scenarios, const std::string& golden_path,
                         const Catalog& catalog);
// Writes the current predictions as the new golden file (keeps the tolerance and
// each entry's fidelity).
void write_golden(const RegressionReport& report, const std::string& golden_path);
std::string regression_table(const RegressionReport& report);

}  // namespace trainsim
