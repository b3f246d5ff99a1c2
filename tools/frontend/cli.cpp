#include "tools/frontend/cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tools/frontend/catalog.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/regress.hpp"
#include "tools/frontend/scenario.hpp"
#include "tools/frontend/validate.hpp"

namespace trainsim {

namespace {

constexpr int kOk = 0, kInfeasible = 1, kBadInput = 2;

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

Scenario load(const std::string& path, const std::vector<std::string>& sets, const Catalog& catalog) {
  if (path.empty()) {
    const EmbeddedFile& f = default_scenario_file();
    return load_scenario_text(std::string(f.text), std::string(f.path), "", sets, catalog);
  }
  return load_scenario_file(path, sets, catalog);
}

void print_catalog(const Catalog& c, const std::string& what, std::ostream& out) {
  if (what.empty() || what == "gpus") {
    out << "GPUs (dense BF16 TFLOP/s, HBM):\n";
    for (const auto& g : c.gpus) {
      out << "  " << g.name << "  " << fmt("%.0f", g.peak(Dtype::BF16) / 1e12) << " TFLOP/s  "
          << fmt("%.0f", g.memory_bytes / 1e9) << " GB\n";
    }
  }
  if (what.empty() || what == "nodes" || what == "topologies") {
    out << "Nodes:\n";
    for (const auto& n : c.nodes) {
      out << "  " << n.name << "  " << n.gpus_per_node << "x " << n.gpu.name << ", " << to_string(n.scaleup) << " "
          << fmt("%.0f", n.scaleup_bandwidth / 1e9) << " GB/s, " << n.nic_count << "x "
          << fmt("%.0f", n.nic_bandwidth * 8 / 1e9) << " Gb/s NICs\n";
    }
    out << "Clusters:\n";
    for (const auto& cl : c.clusters)
      out << "  " << cl.name << "  " << cl.nodes << "x " << cl.node << "  " << cl.description << "\n";
  }
  if (what.empty() || what == "models") {
    out << "Models:\n";
    for (const auto& m : c.models) {
      out << "  " << m.name << "  " << fmt("%.1f", m.total_params() / 1e9) << "B params, " << m.layers
          << " layers, hidden " << m.hidden << "\n";
    }
  }
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"trainsim: simulate distributed training of LLMs on GPU clusters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "trainsim 0.1.0");

  std::string scenario_path, out_path, fidelity = "analytical";
  std::vector<std::string> sets;
  bool json = false;
  auto* run = app.add_subcommand("run", "Simulate one scenario (the embedded default when none is given)");
  run->add_option("scenario", scenario_path, "Scenario JSON file");
  run->add_option("--fidelity", fidelity, "Network fidelity")->check(CLI::IsMember({"analytical", "flow"}));
  run->add_flag("--json", json, "Print the result as JSON");
  run->add_option("--out", out_path, "Also write the JSON result to this file");
  bool kernels = false;
  run->add_flag("--kernels", kernels, "Also print per-kernel compute time of every pipeline stage");
  run->add_option("--set", sets, "Override a scenario key, e.g. --set parallel.tp=4")->allow_extra_args(false);

  std::string check_path;
  auto* check = app.add_subcommand("check", "Validate a scenario without simulating it; all errors at once");
  check->add_option("scenario", check_path, "Scenario JSON file")->required();
  check->add_option("--set", sets, "Override a scenario key")->allow_extra_args(false);

  std::vector<std::string> validate_paths;
  double max_mape = -1;
  bool validate_json = false;
  auto* validate_cmd = app.add_subcommand("validate", "Compare predictions with published measurements (MAPE)");
  validate_cmd->add_option("paths", validate_paths,
                           "Validation scenario files or directories (default: the shipped set)");
  validate_cmd->add_option("--max-mape", max_mape, "Exit 1 when the overall MAPE (percent) exceeds this")
      ->check(CLI::Range(0.0, 1000.0));
  validate_cmd->add_flag("--json", validate_json, "Print the report as JSON");

  std::string regress_dir = "scenarios/regression", golden = "tests/golden/regression.json";
  bool update = false;
  auto* regress_cmd =
      app.add_subcommand("regress", "Compare predictions of the regression scenarios with the golden file");
  regress_cmd->add_option("dir", regress_dir, "Directory (or file) of regression scenarios")->capture_default_str();
  regress_cmd->add_option("--golden", golden, "Golden predictions file")->capture_default_str();
  regress_cmd->add_flag("--update", update, "Rewrite the golden file with the current predictions");

  std::string what;
  auto* catalog_cmd = app.add_subcommand("catalog", "List the shipped presets");
  catalog_cmd->add_option("what", what, "gpus | models | topologies")
      ->check(CLI::IsMember({"gpus", "models", "topologies", "nodes"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
    return kOk;
  } catch (const CLI::CallForAllHelp& e) {
    out << app.help();
    return kOk;
  } catch (const CLI::CallForVersion& e) {
    out << "trainsim 0.1.0\n";
    return kOk;
  } catch (const CLI::ParseError& e) {
    err << "error: " << e.what() << "\n"
        << "run 'trainsim --help' for usage\n";
    return kBadInput;
  }

  try {
    const Catalog catalog = load_builtin_catalog();
    if (catalog_cmd->parsed()) {
      print_catalog(catalog, what, out);
      return kOk;
    }
    if (validate_cmd->parsed()) {
      const auto texts = validate_paths.empty() ? builtin_validation_scenarios() : collect_scenarios(validate_paths);
      if (texts.empty()) {
        err << "error: no validation scenarios given and none shipped\n";
        return kBadInput;
      }
      const ValidationReport rep = validate(texts, catalog);
      out << (validate_json ? to_json(rep).dump(2) + "\n" : validation_table(rep));
      int code = kOk;
      for (const auto& c : rep.cases) {
        if (!c.feasible) {
          err << "infeasible: " << c.id << ": " << c.problem << "\n";
          code = kInfeasible;
        }
      }
      if (max_mape >= 0 && rep.mape_pct > max_mape) {
        err << "validation failed: MAPE " << fmt("%.2f", rep.mape_pct) << "% exceeds --max-mape " << max_mape << "%\n";
        code = kInfeasible;
      }
      return code;
    }
    if (regress_cmd->parsed()) {
      const RegressionReport rep = regress(collect_scenarios({regress_dir}), golden, catalog);
      out << regression_table(rep);
      if (update) {
        write_golden(rep, golden);
        out << "wrote " << golden << "\n";
        return kOk;
      }
      if (!rep.ok()) {
        err << "regression: predictions moved beyond the tolerance; review and run `trainsim regress --update`\n";
        return kInfeasible;
      }
      return kOk;
    }
    if (check->parsed()) {
      const Scenario s = load(check_path, sets, catalog);
      out << "ok: " << s.file << ": " << s.model.name << " on " << s.cluster.total_gpus() << " GPUs, tp "
          << s.parallel.tp << " pp " << s.parallel.pp << " dp " << s.parallel.dp << " cp " << s.parallel.cp << "\n";
      return kOk;
    }
    if (fidelity == "flow") {
      err << "error: --fidelity flow: the flow-level network model is not part of this build yet; "
             "use --fidelity analytical\n";
      return kBadInput;
    }
    const Scenario s = load(scenario_path, sets, catalog);
    const JobReport rep = simulate(s);
    const nlohmann::json j = to_json(rep);
    if (!out_path.empty()) {
      std::ofstream f(out_path);
      if (!f) {
        err << "error: --out " << out_path << ": cannot write the file\n";
        return kBadInput;
      }
      f << j.dump(2) << "\n";
    }
    if (json) {
      out << j.dump(2) << "\n";
    } else {
      out << summary_text(rep);
      if (kernels) {
        for (int st = 0; st < s.parallel.pp; ++st) out << kernel_table(s, st);
      }
    }
    if (!rep.feasible) {
      for (const auto& p : rep.problems) err << "infeasible: " << p << "\n";
      return kInfeasible;
    }
    return kOk;
  } catch (const InputError& e) {
    for (const auto& d : e.diagnostics()) err << d.format() << "\n";
    return kBadInput;
  }
}

}  // namespace trainsim
