#pragma once
// `trainsim validate`: predictions of scenarios that carry a published
// measurement (`expected`) against that measurement: per case error, MAPE per
// source table and overall. The same model and profiles serve every case.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/frontend/catalog.hpp"
#include "tools/frontend/job.hpp"

namespace trainsim {

struct ValidationCase {
  std::string id, source, group, metric;
  double measured = 0, predicted = 0, error_pct = 0;
  bool feasible = true;
  std::string problem;  // why the prediction is not usable (infeasible, ...)
};

struct ValidationReport {
  std::vector<ValidationCase> cases;
  double mape_pct = 0, max_error_pct = 0;
  std::string max_error_id;
  int failed = 0;  // infeasible cases: listed, outside the MAPE and the largest error
  std::vector<std::pair<std::string, double>> mape_by_group;  // sorted by group
};

// Scenario texts with their names (file path or embedded path).
struct ScenarioText {
  std::string file, text, base_dir;
};
// Expands files and directories (every *.json inside, sorted) into scenario texts.
std::vector<ScenarioText> collect_scenarios(const std::vector<std::string>& paths);
std::vector<ScenarioText> builtin_validation_scenarios();

ValidationReport validate(const std::vector<ScenarioText>& scenarios, const Catalog& catalog,
                          Fidelity fidelity = Fidelity::Analytical);
std::string validation_table(const ValidationReport& r);
nlohmann::json to_json(const ValidationReport& r);

}  // namespace trainsim
