#include "tools/frontend/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

namespace trainsim {

namespace fs = std::filesystem;

std::vector<ScenarioText> collect_scenarios(const std::vector<std::string>& paths) {
  std::vector<ScenarioText> out;
  auto read = [&](const fs::path& p) {
    Diagnostics d(p.string());
    std::string text = read_text_file(p.string(), d);
    if (!d.ok()) {
      const std::string& why = d.items().front().message;
      throw InputError(
          {Diagnostic{p.string(), "", why == "cannot read the file" ? "cannot open the scenario file" : why}});
    }
    out.push_back(ScenarioText{p.string(), std::move(text), p.parent_path().string()});
  };
  for (const auto& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(path)) {
        if (e.path().extension() == ".json") files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) throw InputError({Diagnostic{path, "", "the directory holds no *.json scenario"}});
      for (const auto& f : files) read(f);
    } else {
      read(path);
    }
  }
  return out;
}

std::vector<ScenarioText> builtin_validation_scenarios() {
  std::vector<ScenarioText> out;
  for (const auto& f : validation_scenario_files())
    out.push_back(ScenarioText{std::string(f.path), std::string(f.text), ""});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  return out;
}

ValidationReport validate(const std::vector<ScenarioText>& scenarios, const Catalog& catalog, Fidelity fidelity) {
  ValidationReport rep;
  std::vector<Diagnostic> problems;
  std::vector<Scenario> loaded;
  for (const auto& st : scenarios) {
    try {
      Scenario s = load_scenario_text(st.text, st.file, st.base_dir, {}, catalog);
      if (!s.expected) {
        problems.push_back(
            Diagnostic{st.file, "/expected", "a validation scenario needs expected {metric, value, source}"});
        continue;
      }
      loaded.push_back(std::move(s));
    } catch (const InputError& e) {
      problems.insert(problems.end(), e.diagnostics().begin(), e.diagnostics().end());
    }
  }
  if (!problems.empty()) throw InputError(problems);
  std::map<std::string, std::pair<double, int>> groups;
  double sum = 0;
  for (const Scenario& s : loaded) {
    const JobReport jr = simulate(s, fidelity);
    ValidationCase c;
    c.id = s.id.empty() ? s.name : s.id;
    c.source = s.expected->source;
    c.group = s.expected->group.empty() ? c.id : s.expected->group;
    c.metric = s.expected->metric;
    c.measured = s.expected->value;
    c.predicted = metric_value(jr, c.metric);
    c.error_pct = 100.0 * (c.predicted - c.measured) / c.measured;
    c.feasible = jr.feasible;
    if (!jr.feasible) {
      c.problem = jr.problems.empty() ? "infeasible" : jr.problems.front();
      rep.failed += 1;
      rep.cases.push_back(std::move(c));
      continue;
    }
    const double a = std::fabs(c.error_pct);
    sum += a;
    groups[c.group].first += a;
    groups[c.group].second += 1;
    if (a >= rep.max_error_pct) {
      rep.max_error_pct = a;
      rep.max_error_id = c.id;
    }
    rep.cases.push_back(std::move(c));
  }
  const std::size_t predicted = rep.cases.size() - static_cast<std::size_t>(rep.failed);
  if (predicted > 0) rep.mape_pct = sum / static_cast<double>(predicted);
  for (const auto& [g, v] : groups) rep.mape_by_group.emplace_back(g, v.first / v.second);
  return rep;
}

std::string validation_table(const ValidationReport& r) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-52s %-16s %12s %12s %8s\n", "id", "metric", "measured", "predicted", "error");
  out += line;
  for (const auto& c : r.cases) {
    std::snprintf(line, sizeof line, "%-52s %-16s %12.4g %12.4g %+7.1f%%%s\n", c.id.c_str(), c.metric.c_str(),
                  c.measured, c.predicted, c.error_pct, c.feasible ? "" : "  FAILED (infeasible)");
    out += line;
  }
  out += "\nMAPE by source:\n";
  for (const auto& [g, m] : r.mape_by_group) {
    std::snprintf(line, sizeof line, "  %-40s %6.1f%%\n", g.c_str(), m);
    out += line;
  }
  std::snprintf(line, sizeof line, "\noverall MAPE %.1f%% over %zu cases; max |error| %.1f%% (%s)\n", r.mape_pct,
                r.cases.size() - static_cast<std::size_t>(r.failed), r.max_error_pct, r.max_error_id.c_str());
  out += line;
  if (r.failed > 0) {
    std::snprintf(line, sizeof line, "%d case(s) failed (infeasible), not in the MAPE\n", r.failed);
    out += line;
  }
  return out;
}

nlohmann::json to_json(const ValidationReport& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : r.cases) {
    cases.push_back({{"id", c.id},
                     {"source", c.source},
                     {"group", c.group},
                     {"metric", c.metric},
                     {"measured", c.measured},
                     {"predicted", c.predicted},
                     {"error_pct", c.error_pct},
                     {"feasible", c.feasible},
                     {"problem", c.problem}});
  }
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [g, m] : r.mape_by_group) groups[g] = m;
  return {{"cases", cases},
          {"mape_pct", r.mape_pct},
          {"max_error_pct", r.max_error_pct},
          {"failed", r.failed},
          {"mape_by_group_pct", groups}};
}

}  // namespace trainsim
