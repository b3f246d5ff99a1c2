#pragma once
// Calibration on real GPUs: turns the raw measurements of
// calibration/cuda/kernel_profiler and collective_sweep into a calibration
// profile in the shipped format (docs/calibration.md, "Calibrating on your
// GPUs"), and compares two profiles component by component.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibration/profile.hpp"
#include "calibration/profile_io.hpp"
#include "tools/frontend/catalog.hpp"
#include "tools/frontend/json_reader.hpp"
#include "tools/frontend/scenario.hpp"

namespace trainsim {

// Fits a profile from raw documents ({"kind": "kernel_profile"},
// {"kind": "collective_sweep"} and/or {"kind": "attention_sweep"}). `gpu_name_or_empty` is a catalog GPU name or
// alias; empty = recognised from the raw provenance's device name. Measured
// components get kind "measured"/"fitted" and a source naming the raw
// provenance; everything not measured is copied, provenance included, from the
// shipped profile of that GPU. Problems go to `diags` (pointer into the raw
// document; with several documents the message names which); the result is
// then empty. `keep` names shipped fields ("gemm.fp8", "launch_overhead") that
// stay as shipped although measured, where the shipped source is better supported.
nlohmann::ordered_json fit_profile(const std::vector<nlohmann::json>& raw_docs, const std::string& gpu_name_or_empty,
                                   const Catalog& catalog, Diagnostics& diags,
                                   const std::vector<std::string>& keep = {});

// `trainsim calibrate fit RAW.json... -o PROFILE.json [--gpu NAME] [--keep FIELD]...`:
// reads the files and fits; errors carry the raw file and JSON pointer. Throws InputError.
nlohmann::ordered_json fit_profile_files(const std::vector<std::string>& raw_paths,
                                         const std::string& gpu_name_or_empty, const Catalog& catalog,
                                         const std::vector<std::string>& keep = {});

// Reading and writing profile files (load_profile_file, write_profile_file):
// calibration/profile_io.hpp.

// Per-component comparison of two profiles, one line per figure with the
// ratio b/a: GEMM efficiency at 1/16/137/1100 GFLOP per dtype, the skinny-GEMM
// factor, memory-bound efficiency at 1 MB/100 MB/1 GB, attention, launch
// overhead, reserved memory, scale-up bus bandwidth at 16 MB/256 MB/8 GB (ring
// and NVLS), latencies and the network figures.
std::string compare_profiles(const CalibrationProfile& a, const CalibrationProfile& b, const std::string& name_a,
                             const std::string& name_b);

// `trainsim calibrate report PROFILE.json [--against PROFILE2.json]`: the
// profile (b) against `against_path_or_empty` (a), by default the shipped
// profile of the same GPU. Throws InputError.
std::string calibration_report(const std::string& profile_path, const std::string& against_path_or_empty,
                               const Catalog& catalog);

// Per-kernel-category time of one training iteration: measured on a GPU host
// (tools/measure-step writes {"kind": "step_measurement"}) or predicted.
struct StepCategories {
  double gemm = 0, attention = 0, elementwise = 0, optimizer = 0;
  double iteration = 0;  // wall time of one iteration
};

// Reads a step_measurement file strictly (errors carry the file and JSON pointer).
// Throws InputError.
StepCategories read_step_measurement(const std::string& path);

// Predicted compute time per category of one iteration of a one-GPU scenario
// (GEMM ops, fused attention, optimizer.*, every other memory-bound op) and its
// iteration time. Throws InputError naming /parallel when the scenario has more
// than one GPU.
StepCategories predicted_categories(const Scenario& scenario);

// `trainsim calibrate compare MEASURED.json SCENARIO.json`: predicted vs measured
// per category and per iteration, with the ratio predicted / measured.
std::string compare_step(const std::string& measured_path, const std::string& scenario_path, const Catalog& catalog);

}  // namespace trainsim
