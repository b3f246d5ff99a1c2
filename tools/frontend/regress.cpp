#include "tools/frontend/regress.hpp"

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

std::span<const EmbeddedFile> regression_files();

std::vector<ScenarioText> builtin_regression_scenarios() {
  std::vector<ScenarioText> out;
  for (const auto& f : regression_files()) {
    if (f.path.starts_with("scenarios/")) out.push_back(ScenarioText{std::string(f.path), std::string(f.text), ""});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  return out;
}

std::string builtin_regression_golden() {
  for (const auto& f : regression_files()) {
    if (f.path.ends_with("regression.json") && f.path.starts_with("tests/")) return std::string(f.text);
  }
  return "";
}

const std::vector<std::string>& regression_metrics() {
  static const std::vector<std::string> m{"iteration_time_s", "tokens_per_s", "peak_memory_gib"};
  return m;
}

bool RegressionReport::ok() const {
  for (const auto& r : rows) {
    if (r.drifted) return false;
  }
  return stale.empty();
}

namespace {

struct Golden {
  double tolerance_pct = 0.5;
  std::map<std::string, std::map<std::string, double>> values;
  std::map<std::string, Fidelity> fidelity;  // entries that name one
};

Golden read_golden(const std::string& path, const std::string* golden_text) {
  Golden g;
  std::error_code ec;
  if (golden_text == nullptr && !std::filesystem::exists(path, ec)) return g;  // no golden yet: all "missing"
  Diagnostics d(path);
  const std::string text = golden_text != nullptr ? *golden_text : read_text_file(path, d);
  d.throw_if_errors();
  auto doc = parse_json_text(text, d);
  d.throw_if_errors();
  ObjectReader top(*doc, "", d);
  g.tolerance_pct = top.number("tolerance_pct", 0.5, 0, 100, true);
  top.string("note", "");
  if (const nlohmann::json* cases = top.raw("cases")) {
    ObjectReader cr(*cases, top.at("cases"), d);
    if (cr.valid()) {
      for (const auto& [name, v] : cases->items()) {
        ObjectReader mr(v, json_pointer_append(cr.pointer(), name), d);
        if (!mr.valid()) continue;
        if (mr.has("fidelity")) {
          g.fidelity[name] = mr.choice("fidelity", "analytical", {"analytical", "flow"}) == "flow"
                                 ? Fidelity::Flow
                                 : Fidelity::Analytical;
        }
        for (const auto& m : regression_metrics()) g.values[name][m] = mr.number(m.c_str(), 0, 0, 1e18, true);
        mr.finish();
      }
    }
  }
  top.finish();
  d.throw_if_errors();
  return g;
}

double metric_of(const JobReport& r, const std::string& m) {
  return m == "peak_memory_gib" ? r.peak_memory_gib : metric_value(r, m);
}

}  // namespace

RegressionReport regress(const std::vector<ScenarioText>& scenarios, const std::string& golden_path,
                         const Catalog& catalog, const std::string* golden_text) {
  const Golden g = read_golden(golden_path, golden_text);
  RegressionReport rep;
  rep.tolerance_pct = g.tolerance_pct;
  std::map<std::string, bool> seen;
  for (const auto& st : scenarios) {
    const Scenario s = load_scenario_text(st.text, st.file, st.base_dir, {}, catalog);
    const auto fid = g.fidelity.find(s.name);
    const Fidelity fidelity = fid != g.fidelity.end() ? fid->second : Fidelity::Analytical;
    const JobReport jr = simulate(s, fidelity);
    seen[s.name] = true;
    const auto it = g.values.find(s.name);
    for (const auto& m : regression_metrics()) {
      RegressionRow row;
      row.name = s.name;
      row.fidelity = fidelity;
      row.metric = m;
      row.current = metric_of(jr, m);
      if (it == g.values.end()) {
        row.missing = row.drifted = true;
      } else {
        row.golden = it->second.at(m);
        row.change_pct = row.golden != 0 ? 100.0 * (row.current - row.golden) / row.golden : 0.0;
        row.drifted = std::fabs(row.change_pct) > g.tolerance_pct;
      }
      rep.rows.push_back(row);
    }
  }
  for (const auto& [name, v] : g.values) {
    if (!seen.count(name)) rep.stale.push_back(name);
  }
  return rep;
}

void write_golden(const RegressionReport& report, const std::string& golden_path) {
  nlohmann::ordered_json cases = nlohmann::ordered_json::object();
  for (const auto& r : report.rows) {
    if (r.fidelity != Fidelity::Analytical && !cases.contains(r.name))
      cases[r.name]["fidelity"] = to_string(r.fidelity);
    cases[r.name][r.metric] = r.current;
  }
  nlohmann::ordered_json doc;
  doc["tolerance_pct"] = report.tolerance_pct;
  doc["note"] =
      "Golden predictions of scenarios/regression; rewrite with `trainsim regress --update` and review the diff.";
  doc["cases"] = cases;
  write_text_file(golden_path, doc.dump(2) + "\n");
}

std::string regression_table(const RegressionReport& r) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-34s %-10s %-18s %14s %14s %9s\n", "scenario", "fidelity", "metric", "golden",
                "current", "change");
  out += line;
  for (const auto& row : r.rows) {
    if (row.missing) {
      std::snprintf(line, sizeof line, "%-34s %-10s %-18s %14s %14.6g %9s\n", row.name.c_str(), to_string(row.fidelity),
                    row.metric.c_str(), "-", row.current, "new");
    } else {
      std::snprintf(line, sizeof line, "%-34s %-10s %-18s %14.6g %14.6g %+8.2f%%%s\n", row.name.c_str(),
                    to_string(row.fidelity), row.metric.c_str(), row.golden, row.current, row.change_pct,
                    row.drifted ? "  DRIFT" : "");
    }
    out += line;
  }
  for (const auto& s : r.stale) out += "stale golden entry without a scenario: " + s + "\n";
  std::snprintf(line, sizeof line, "tolerance %.2f%%: %s\n", r.tolerance_pct, r.ok() ? "ok" : "FAILED");
  out += line;
  return out;
}

}  // namespace trainsim
