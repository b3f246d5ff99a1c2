#include "tools/frontend/cli.hpp"

#include <unistd.h>
#include <CLI/CLI.hpp>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tools/frontend/calibrate.hpp"
#include "tools/frontend/catalog.hpp"
#include "tools/frontend/chakra_export.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/regress.hpp"
#include "tools/frontend/report_html.hpp"
#include "tools/frontend/scenario.hpp"
#include "tools/frontend/sweep.hpp"
#include "tools/frontend/trace.hpp"
#include "tools/frontend/validate.hpp"

namespace trainsim {

namespace {

constexpr int kOk = kExitOk, kInfeasible = kExitInfeasible, kBadInput = kExitBadInput;

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
    // A GPU without BF16 tensor cores (V100) shows its FP16 rate, never "0 TFLOP/s";
    // memory in GiB, the unit of every memory figure trainsim prints.
    out << "GPUs (dense BF16 TFLOP/s, or FP16 where marked; HBM GiB):\n";
    for (const auto& g : c.gpus) {
      const bool bf16 = g.peak(Dtype::BF16) > 0;
      out << "  " << g.name << "  " << fmt("%.0f", g.peak(bf16 ? Dtype::BF16 : Dtype::FP16) / 1e12) << " TFLOP/s"
          << (bf16 ? "" : " (FP16)") << "  " << fmt("%.0f", g.memory_bytes / (1024.0 * 1024 * 1024)) << " GiB\n";
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

int run_sweep_command(const CLI::App* sweep_cmd, const CLI::App* merge_cmd, const std::string& path, int threads,
                      const std::string& fidelity, const std::string& shard_text, const std::string& out_path,
                      const std::string& report_path, const std::vector<std::string>& merge_inputs,
                      const std::string& merge_out, const Catalog& catalog, std::ostream& out, std::ostream& err) {
  if (merge_cmd->parsed()) {
    std::vector<std::pair<std::string, std::string>> inputs;
    for (const auto& in : merge_inputs) inputs.emplace_back("shard output", in);
    check_output_paths({{"--out", merge_out}}, inputs);
    const SweepMerge m = merge_sweep_files(merge_inputs);
    write_sweep_rows(merge_out, m.rows);
    out << "merged " << m.rows.size() << " of " << m.points << " points into " << merge_out << "\n";
    if (m.missing > 0) err << "warning: " << m.missing << " points are in no shard output\n";
    out << top_k_table(m.rows, 10, "tokens_per_s");
    out << verified_table(m.rows, "tokens_per_s");
    return kOk;
  }
  if (path.empty()) {
    err << "error: sweep: a sweep file is required (see `trainsim sweep --help`)\n";
    return kBadInput;
  }
  (void)sweep_cmd;
  SweepSpec spec = load_sweep_file(path, catalog);
  check_output_paths({{"--out", out_path}, {"--report", report_path}},
                     {{"sweep file", path}, {"base scenario", spec.base_file}});
  if (!fidelity.empty()) set_sweep_fidelity(spec, fidelity == "flow" ? Fidelity::Flow : Fidelity::Analytical);
  if (spec.verify && !shard_text.empty()) {
    err << "error: " << path << ": /verify: verification re-ranks the best points of the whole sweep; "
        << "it does not combine with --shard (remove \"verify\" for sharded runs)\n";
    return kBadInput;
  }
  const SweepPlan plan = expand_sweep(spec, catalog);
  err << sweep_summary(spec, plan);
  std::vector<SweepPoint> points = plan.points;
  if (!shard_text.empty()) points = shard_points(points, parse_shard(shard_text));
  const bool tty = isatty(2) != 0;
  SweepProgressPrinter bar(err, tty);
  std::vector<SweepRow> rows = run_sweep(points, threads, spec, catalog, std::ref(bar));
  bar.finish();
  if (spec.verify) {
    err << "verify: simulating the best " << spec.verify->top << " points again at " << to_string(spec.verify->fidelity)
        << " fidelity\n";
    SweepProgressPrinter verify_bar(err, tty);
    verify_sweep(rows, threads, spec, catalog, std::ref(verify_bar));
    verify_bar.finish();
  }
  const auto json_rows = sweep_rows_json(rows, plan);
  if (!out_path.empty()) write_sweep_rows(out_path, json_rows);
  if (!report_path.empty()) {
    std::vector<ReportPoint> pts;
    for (const SweepRow& r : rows) {
      if (r.status == SweepStatus::Invalid || r.status == SweepStatus::Error) continue;
      std::string label;
      for (const auto& [k, v] : r.overrides)
        label += (label.empty() ? "" : " ") + k.substr(k.find('.') + 1) + "=" +
                 (v.is_string() ? v.get<std::string>() : v.dump());
      pts.push_back(ReportPoint{label, r.report.tokens_per_s, r.report.peak_memory_gib, r.report.gpus,
                                r.status == SweepStatus::Ok});
      // A verified point appears a second time with its figures at the verify fidelity.
      if (r.verified && (r.verified->status == SweepStatus::Ok || r.verified->status == SweepStatus::Infeasible)) {
        pts.push_back(ReportPoint{"[" + std::string(to_string(r.verified->fidelity)) + "] " + label,
                                  r.verified->report.tokens_per_s, r.verified->report.peak_memory_gib,
                                  r.verified->report.gpus, r.verified->status == SweepStatus::Ok});
      }
    }
    OutputFile f(report_path);
    std::string title = (spec.name.empty() ? path : spec.name) + " (" + to_string(spec.fidelity) + " fidelity";
    if (spec.verify) {
      title += "; the best " + std::to_string(spec.verify->top) + " again at " + to_string(spec.verify->fidelity) +
               " fidelity, labelled [" + to_string(spec.verify->fidelity) + "]";
    }
    f.stream() << sweep_html_report(title + ")", pts);
    f.commit();
  }
  out << top_k_table(json_rows, static_cast<std::size_t>(spec.top_k), spec.metric);
  out << verified_table(json_rows, spec.metric);
  // A sweep none of whose points is a valid scenario measured nothing: an input error.
  const bool any_ran = std::any_of(rows.begin(), rows.end(), [](const SweepRow& r) {
    return r.status == SweepStatus::Ok || r.status == SweepStatus::Infeasible;
  });
  if (!rows.empty() && !any_ran) {
    err << "error: " << path << ": none of the " << rows.size()
        << " points is a valid scenario (see the \"error\" column of --out)\n";
    return kBadInput;
  }
  return kOk;
}

int run_commands(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"trainsim: simulate distributed training of LLMs on GPU clusters"};
  app.footer(
      "Exit codes: 0 ok, 1 the simulated job is infeasible (out of memory, deadlock), 2 bad input,\n"
      "3 internal error (a bug in trainsim; please report it with the scenario).");
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
  std::string trace_path, report_path, chakra_path;
  std::vector<int> trace_ranks;
  run->add_option("--trace", trace_path, "Write a Chrome/Perfetto trace of the simulated ranks to this file");
  run->add_option("--chakra", chakra_path, "Write rank 0's operator graph as a Chakra execution trace (JSON)");
  run->add_option("--trace-ranks", trace_ranks, "Simulated rank indices to trace (default: every recorded rank)")
      ->delimiter(',');
  run->add_option("--report", report_path, "Write a self-contained HTML report to this file");
  bool kernels = false;
  run->add_flag("--kernels", kernels,
                "Also report per-kernel compute time of every pipeline stage (with --json: the field kernels)");
  run->add_option("--set", sets, "Override a scenario key, e.g. --set parallel.tp=4")->allow_extra_args(false);
  bool ignore_memory = false;
  run->add_flag("--ignore-memory", ignore_memory,
                "Simulate a job even when it does not fit in GPU memory (a what-if; still exit 1 and reported "
                "infeasible). Without it such a job is refused before simulation");

  std::string check_path;
  auto* check = app.add_subcommand("check", "Validate a scenario without simulating it; all errors at once");
  check->add_option("scenario", check_path, "Scenario JSON file")->required();
  check->add_option("--set", sets, "Override a scenario key")->allow_extra_args(false);

  std::vector<std::string> validate_paths;
  double max_mape = -1, max_error = -1;
  bool validate_json = false;
  auto* validate_cmd = app.add_subcommand("validate", "Compare predictions with published measurements (MAPE)");
  validate_cmd->add_option("paths", validate_paths,
                           "Validation scenario files or directories (default: the shipped set)");
  validate_cmd->add_option("--max-mape", max_mape, "Exit 1 when the overall MAPE (percent) exceeds this")
      ->check(CLI::Range(0.0, 1000.0));
  validate_cmd->add_option("--max-error", max_error, "Exit 1 when any case's |error| (percent) exceeds this")
      ->check(CLI::Range(0.0, 1000.0));
  validate_cmd->add_flag("--json", validate_json, "Print the report as JSON");
  std::string validate_fidelity = "analytical";
  validate_cmd->add_option("--fidelity", validate_fidelity, "Network fidelity")
      ->check(CLI::IsMember({"analytical", "flow"}));

  std::string regress_dir = "scenarios/regression", golden = "tests/golden/regression.json";
  bool update = false;
  auto* regress_cmd =
      app.add_subcommand("regress", "Compare predictions of the regression scenarios with the golden file");
  auto* regress_dir_opt =
      regress_cmd->add_option("dir", regress_dir, "Directory (or file) of regression scenarios")->capture_default_str();
  auto* golden_opt = regress_cmd->add_option("--golden", golden, "Golden predictions file")->capture_default_str();
  regress_cmd->add_flag("--update", update, "Rewrite the golden file with the current predictions");

  std::string sweep_path, sweep_out, shard_text, sweep_report;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto* sweep_cmd = app.add_subcommand("sweep", "Run a configuration sweep or auto-search (docs/sweeps.md)");
  sweep_cmd->add_option("sweep", sweep_path, "Sweep JSON file");
  sweep_cmd->add_option("-j,--threads", threads, "Worker threads")->check(CLI::Range(1, 1024));
  std::string sweep_fidelity;
  sweep_cmd
      ->add_option("--fidelity", sweep_fidelity,
                   "Network fidelity of every point (default: the sweep file's, else analytical)")
      ->check(CLI::IsMember({"analytical", "flow"}));
  sweep_cmd->add_option("--shard", shard_text, "Run only shard K of N (K/N, 1-based)");
  sweep_cmd->add_option("--out", sweep_out, "Write every point's result (.csv or .jsonl)");
  sweep_cmd->add_option("--report", sweep_report, "Write a self-contained HTML report of the sweep");
  std::vector<std::string> merge_inputs;
  std::string merge_out;
  auto* merge_cmd = sweep_cmd->add_subcommand("merge", "Join the .jsonl outputs of sweep shards");
  merge_cmd->add_option("inputs", merge_inputs, "Shard outputs (.jsonl)")->required();
  merge_cmd->add_option("--out", merge_out, "Merged output (.csv or .jsonl)")->required();

  auto* calibrate_cmd =
      app.add_subcommand("calibrate", "Fit a calibration profile from GPU measurements, or compare profiles");
  calibrate_cmd->require_subcommand(1);
  std::vector<std::string> raw_paths;
  std::string fit_out, fit_gpu;
  std::vector<std::string> fit_keep;
  auto* fit_cmd = calibrate_cmd->add_subcommand(
      "fit", "Fit a profile from raw kernel_profile / collective_sweep / attention_sweep JSON");
  fit_cmd->add_option("raw", raw_paths, "Raw measurement files")->required();
  fit_cmd->add_option("-o,--out", fit_out, "Profile to write")->required();
  fit_cmd->add_option("--gpu", fit_gpu, "Catalog GPU name (default: recognised from the raw provenance)");
  fit_cmd->add_option("--keep", fit_keep, "Shipped field kept although measured (e.g. gemm.fp8); repeatable");
  std::string profile_path, against;
  auto* profile_report_cmd =
      calibrate_cmd->add_subcommand("report", "Compare a profile with the shipped one of its GPU (or --against)");
  profile_report_cmd->add_option("profile", profile_path, "Profile JSON")->required();
  profile_report_cmd->add_option("--against", against, "Profile to compare with");
  std::string measured_path, compare_scenario;
  auto* compare_cmd = calibrate_cmd->add_subcommand(
      "compare", "Predicted vs measured time per kernel category of a one-GPU scenario (tools/measure-step)");
  compare_cmd->add_option("measured", measured_path, "step_measurement JSON")->required();
  compare_cmd->add_option("scenario", compare_scenario, "Scenario JSON")->required();

  std::string what;
  auto* catalog_cmd = app.add_subcommand("catalog", "List the shipped presets");
  catalog_cmd->add_option("what", what, "gpus | nodes | models | topologies (nodes and clusters)")
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
      const ValidationReport rep =
          validate(texts, catalog, validate_fidelity == "flow" ? Fidelity::Flow : Fidelity::Analytical);
      out << (validate_json ? to_json(rep).dump(2) + "\n" : validation_table(rep));
      // A case that cannot be predicted (infeasible) is a failed row: it leaves
      // the MAPE, and fails a run that gates on the figures.
      int code = kOk;
      for (const auto& c : rep.cases) {
        if (!c.feasible) err << "failed: " << c.id << ": infeasible: " << c.problem << "\n";
      }
      if ((max_mape >= 0 || max_error >= 0) && rep.failed > 0) {
        err << "validation failed: " << rep.failed << " case(s) could not be predicted\n";
        code = kInfeasible;
      }
      if (max_mape >= 0 && rep.mape_pct > max_mape) {
        err << "validation failed: MAPE " << fmt("%.2f", rep.mape_pct) << "% exceeds --max-mape " << max_mape << "%\n";
        code = kInfeasible;
      }
      if (max_error >= 0 && rep.max_error_pct > max_error) {
        err << "validation failed: largest |error| " << fmt("%.2f", rep.max_error_pct) << "% exceeds --max-error "
            << max_error << "%\n";
        code = kInfeasible;
      }
      return code;
    }
    if (sweep_cmd->parsed())
      return run_sweep_command(sweep_cmd, merge_cmd, sweep_path, threads, sweep_fidelity, shard_text, sweep_out,
                               sweep_report, merge_inputs, merge_out, catalog, out, err);
    if (fit_cmd->parsed()) {
      std::vector<std::pair<std::string, std::string>> inputs;
      for (const auto& in : raw_paths) inputs.emplace_back("raw measurement file", in);
      check_output_paths({{"--out", fit_out}}, inputs);
      write_profile_file(fit_profile_files(raw_paths, fit_gpu, catalog, fit_keep), fit_out);
      out << "wrote " << fit_out << "\n";
      return kOk;
    }
    if (profile_report_cmd->parsed()) {
      out << calibration_report(profile_path, against, catalog);
      return kOk;
    }
    if (compare_cmd->parsed()) {
      out << compare_step(measured_path, compare_scenario, catalog);
      return kOk;
    }
    if (regress_cmd->parsed()) {
      // Without arguments outside the repository: the copies built into the binary.
      std::error_code ec;
      const bool builtin = regress_dir_opt->count() == 0 && golden_opt->count() == 0 &&
                           !std::filesystem::exists(regress_dir, ec) && !std::filesystem::exists(golden, ec);
      if (builtin && update) {
        err << "error: regress --update rewrites " << golden
            << ": run it from the repository root, or give DIR and --golden\n";
        return kBadInput;
      }
      const std::string builtin_golden = builtin ? builtin_regression_golden() : "";
      const RegressionReport rep = builtin ? regress(builtin_regression_scenarios(), golden, catalog, &builtin_golden)
                                           : regress(collect_scenarios({regress_dir}), golden, catalog);
      out << regression_table(rep);
      if (update) {
        write_golden(rep, golden);
        out << "wrote " << golden << "\n";
        return kOk;
      }
      if (!rep.ok()) {
        // A scenario without a golden value is "missing", not a prediction that moved.
        bool missing = false, moved = false;
        for (const auto& row : rep.rows) (row.missing ? missing : moved) |= row.drifted;
        if (missing) {
          err << "regression: scenarios without a golden prediction in " << golden
              << " (marked missing); record them with `trainsim regress --update`\n";
        }
        if (moved) {
          err << "regression: predictions moved beyond the tolerance; review and run `trainsim regress --update`\n";
        }
        if (!rep.stale.empty()) {
          err << "regression: golden entries without a scenario; remove them with `trainsim regress --update`\n";
        }
        return kInfeasible;
      }
      return kOk;
    }
    if (check->parsed()) {
      const Scenario s = load(check_path, sets, catalog);
      for (const auto& w : s.warnings) err << "warning: " << w << "\n";
      std::string tp = std::to_string(s.parallel.tp), dp = std::to_string(s.parallel.dp);
      std::string cp = std::to_string(s.parallel.cp);
      if (!s.parallel.stages.empty()) {  // per-stage layouts: each stage's TP, DP and CP
        tp.clear();
        dp.clear();
        cp.clear();
        for (const StageLayout& st : s.parallel.stages) {
          tp += (tp.empty() ? "" : "/") + std::to_string(st.tp);
          dp += (dp.empty() ? "" : "/") + std::to_string(st.dp > 0 ? st.dp : s.parallel.dp);
          cp += (cp.empty() ? "" : "/") + std::to_string(st.cp > 0 ? st.cp : s.parallel.cp);
        }
      }
      const std::string trained = s.workload.kind == WorkloadKind::Transformer ? s.model.name : workload_of(s)->name();
      out << "ok: " << s.file << ": " << trained << " on " << s.cluster.total_gpus() << " GPUs, tp " << tp << " pp "
          << s.parallel.pp << " dp " << dp << " cp " << cp << "\n";
      return kOk;
    }
    check_output_paths(
        {{"--out", out_path}, {"--trace", trace_path}, {"--report", report_path}, {"--chakra", chakra_path}},
        {{"scenario", scenario_path}});
    const Scenario s = load(scenario_path, sets, catalog);
    for (const auto& w : s.warnings) err << "warning: " << w << "\n";
    const JobRun job = run_job(s, fidelity == "flow" ? Fidelity::Flow : Fidelity::Analytical,
                               ignore_memory ? MemoryCheck::SimulateAnyway : MemoryCheck::BeforeSimulation);
    const JobReport& rep = job.report;
    if (!trace_path.empty()) {
      const std::vector<int> recorded = recorded_ranks(job);
      for (int r : trace_ranks) {
        if (std::find(recorded.begin(), recorded.end(), r) == recorded.end()) {
          std::string list;
          for (int x : recorded) list += (list.empty() ? "" : ", ") + std::to_string(x);
          err << "error: --trace-ranks: rank " << r << " has no timeline; traced ranks: " << list << "\n";
          return kBadInput;
        }
      }
      OutputFile f(trace_path);
      write_chrome_trace(f.stream(), job, trace_ranks);
      f.commit();
    }
    if (!chakra_path.empty()) write_text_file(chakra_path, chakra_trace_of(s, job).dump(1) + "\n");
    if (!report_path.empty()) {
      write_text_file(report_path, html_report(s, job));
    }
    nlohmann::json j = to_json(rep);
    if (kernels) j["kernels"] = kernels_json(s);
    if (!out_path.empty()) {
      write_text_file(out_path, j.dump(2) + "\n");
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

}  // namespace

int run_guarded(const std::function<int()>& body, std::ostream& err) {
  try {
    return body();
  } catch (const InputError& e) {
    for (const auto& d : e.diagnostics()) err << d.format() << "\n";
    return kBadInput;
  } catch (const std::exception& e) {
    err << "error: internal: " << e.what() << "\n"
        << "this is a bug in trainsim; please report it with the scenario and the command line\n";
    return kExitInternal;
  } catch (...) {
    err << "error: internal: an exception of unknown type\n";
    return kExitInternal;
  }
}

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  return run_guarded([&] { return run_commands(argc, argv, out, err); }, err);
}

void keep_freed_memory() {
#if defined(__GLIBC__)
  // Blocks up to 32 MiB (glibc's largest allowed threshold) come from the heap
  // instead of a mapping of their own, and the heap's free top is never
  // returned: the process keeps its peak instead of paying page faults again.
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace trainsim
