#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sim/cost_model.hpp"
#include "tools/frontend/calibrate.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

// Synthetic raw measurements generated from the known curves below (their
// provenance says so); the fitter must find these curves again.
const std::string kDataDir = std::string(TRAINSIM_SOURCE_DIR) + "/tests/data/calibrate";
const std::string kKernelRaw = kDataDir + "/kernel_profile_h100_synthetic.json";
const std::string kSweepRaw = kDataDir + "/collective_sweep_h100_synthetic.json";

const Catalog& catalog() {
  static const Catalog c = load_builtin_catalog();
  return c;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

CalibrationProfile to_profile(const nlohmann::ordered_json& j) {
  Diagnostics d("fitted");
  const nlohmann::json plain = nlohmann::json::parse(j.dump());
  ObjectReader r(plain, "", d);
  CalibrationProfile p = read_profile(r);
  r.finish();
  REQUIRE(d.ok());
  return p;
}

// The known curves the synthetic data were generated from.
double sq_flops(double d) { return 2 * d * d * d; }
EfficiencyCurve known_gemm(const std::string& dtype) {
  const std::vector<double> dims{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<double> eff;
  if (dtype == "bf16") eff = {0.30, 0.55, 0.72, 0.80, 0.84, 0.86};
  if (dtype == "fp16") eff = {0.29, 0.54, 0.71, 0.79, 0.83, 0.85};
  if (dtype == "tf32") eff = {0.35, 0.60, 0.74, 0.80, 0.82, 0.83};
  if (dtype == "fp8") eff = {0.15, 0.36, 0.56, 0.66, 0.71, 0.74};
  std::vector<std::pair<double, double>> pts;
  for (std::size_t i = 0; i < dims.size(); ++i) pts.emplace_back(sq_flops(dims[i]), eff[i]);
  return EfficiencyCurve(pts);
}
const EfficiencyCurve kKnownMinDim({{64, 0.40}, {128, 0.55}, {256, 0.72}, {512, 0.90}, {1024, 1.0}});
EfficiencyCurve known_memory() {
  std::vector<std::pair<double, double>> pts;
  for (int e = 17; e <= 32; ++e) {
    const double b = std::exp2(e);
    pts.emplace_back(b, 0.93 * b / (b + 4e5));
  }
  return EfficiencyCurve(pts);
}
// Synthetic collectives: time = 8 us + steps x 1.5 us + factor x bytes / B on 8 GPUs.
double known_busbw_eff(double bytes, double bus_bandwidth, int steps, double factor) {
  const double t = 8e-6 + steps * 1.5e-6 + factor * bytes / bus_bandwidth;
  return factor * bytes / t / 450e9;  // dgx-h100: 450 GB/s per direction
}

std::size_t dtype_index(const std::string& name) {
  for (std::size_t d = 0; d < kNumDtypes; ++d) {
    if (name == to_string(static_cast<Dtype>(d))) return d;
  }
  FAIL("unknown dtype " << name);
  return 0;
}

bool within(double got, double want, double rel) { return std::abs(got - want) <= rel * std::abs(want); }

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("trainsim-calibrate-" + name)).string();
}

std::string errors_of_files(const std::vector<std::string>& paths, const std::string& gpu = "") {
  try {
    fit_profile_files(paths, gpu, catalog());
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

std::string write_temp(const std::string& name, const nlohmann::json& j) {
  const std::string p = temp_path(name);
  std::ofstream(p) << j.dump(2);
  return p;
}

}  // namespace

TEST_CASE("the fitter reproduces the known curves of the synthetic sample within 2%") {
  const nlohmann::ordered_json fitted = fit_profile_files({kKernelRaw, kSweepRaw}, "", catalog());
  CHECK(fitted["gpu"] == "H100-SXM-80GB");  // recognised from "NVIDIA H100 80GB HBM3"
  const CalibrationProfile p = to_profile(fitted);

  SUBCASE("GEMM efficiency vs FLOPs per dtype") {
    for (const std::string dt : {"bf16", "fp16", "tf32", "fp8"}) {
      const std::size_t d = dtype_index(dt);
      INFO("dtype " << dt);
      CHECK(p.gemm[d].provenance.kind == "fitted");
      CHECK(p.gemm[d].provenance.source.find("SYNTHETIC") != std::string::npos);
      const EfficiencyCurve known = known_gemm(dt);
      for (const double flops : {sq_flops(512), 1e9, sq_flops(1024), 16e9, 137e9, 1100e9, sq_flops(16384)}) {
        INFO("flops " << flops);
        CHECK(within(p.gemm[d].curve.at(flops), known.at(flops), 0.02));
      }
    }
  }
  SUBCASE("skinny-GEMM factor vs the smallest dimension") {
    CHECK(p.gemm_min_dim.provenance.kind == "fitted");
    for (const double dim : {64.0, 96.0, 128.0, 192.0, 256.0, 512.0, 768.0, 1024.0, 4096.0}) {
      INFO("min dim " << dim);
      CHECK(within(p.gemm_min_dim.curve.at(dim), kKnownMinDim.at(dim), 0.02));
    }
  }
  SUBCASE("memory-bound efficiency vs bytes and the launch overhead") {
    const EfficiencyCurve known = known_memory();
    for (const double bytes : {262144.0, 1e6, 1e7, 1e8, 1e9, 2e9}) {
      INFO("bytes " << bytes);
      CHECK(within(p.memory_bound.curve.at(bytes), known.at(bytes), 0.02));
    }
    CHECK(within(p.launch_overhead.value, 2.5e-6, 0.02));
    CHECK(p.launch_overhead.provenance.kind == "measured");
  }
  SUBCASE("scale-up: all-reduce above the link bandwidth is NVLS; ring from all-gather / reduce-scatter") {
    for (const double bytes : {1048576.0, 16777216.0, 268435456.0, 8589934592.0}) {
      INFO("bytes " << bytes);
      CHECK(within(p.scaleup.nvls_busbw_curve.curve.at(bytes), known_busbw_eff(bytes, 480e9, 14, 1.75), 0.02));
      CHECK(within(p.scaleup.busbw_curve.curve.at(bytes), known_busbw_eff(bytes, 370e9, 7, 0.875), 0.02));
    }
    CHECK(within(p.scaleup.nvls_busbw_efficiency.value, known_busbw_eff(8589934592.0, 480e9, 14, 1.75), 0.02));
    CHECK(within(p.scaleup.busbw_efficiency.value, known_busbw_eff(8589934592.0, 370e9, 7, 0.875), 0.02));
    CHECK(within(p.scaleup.latency.value, 1.5e-6, 0.02));
    CHECK(within(p.scaleup.base_latency.value, 8e-6, 0.02));
    CHECK(p.scaleup.latency.provenance.kind == "fitted");
  }
  SUBCASE("what was not measured is copied from the shipped profile with its provenance") {
    const CalibrationProfile& def = *catalog().find_profile_for_gpu("H100-SXM-80GB");
    std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/calibration/profiles/h100-sxm-80gb.json");
    const nlohmann::ordered_json shipped = nlohmann::ordered_json::parse(in);
    CHECK(fitted["attention"] == shipped["attention"]);
    CHECK(fitted["attention_backward"] == shipped["attention_backward"]);
    CHECK(fitted["network"] == shipped["network"]);
    CHECK(p.attention_backward.provenance.source == def.attention_backward.provenance.source);
    CHECK(p.memory_reserved.value == def.memory_reserved.value);
    CHECK(p.memory_reserved.provenance.kind == "assumed");
    CHECK(p.network.busbw_efficiency.value == def.network.busbw_efficiency.value);
    CHECK(p.network.latency.provenance.source == def.network.latency.provenance.source);
    CHECK(fitted["description"].get<std::string>().find("SYNTHETIC") != std::string::npos);
  }
}

TEST_CASE("fit_profile on in-memory documents; --gpu must agree with the measured device") {
  const std::vector<nlohmann::json> docs{read_json(kKernelRaw)};
  Diagnostics d("raw");
  const auto fitted = fit_profile(docs, "h100", catalog(), d);
  CHECK(d.ok());
  CHECK(fitted["gpu"] == "H100-SXM-80GB");
  // Only a kernel profile: the collective figures stay those of the shipped profile.
  CHECK(fitted["scaleup"]["busbw_efficiency"]["kind"] == "assumed");

  Diagnostics d2("raw");
  CHECK(fit_profile(docs, "a100", catalog(), d2).is_null());
  REQUIRE(!d2.ok());
  CHECK(d2.items()[0].pointer == "/provenance/gpu");
  CHECK(d2.items()[0].message.find("A100-SXM4-80GB") != std::string::npos);

  Diagnostics d3("raw");
  CHECK(fit_profile(docs, "h1000", catalog(), d3).is_null());
  CHECK(d3.items().at(0).message.find("unknown GPU \"h1000\"") != std::string::npos);
}

TEST_CASE("bad raw input: every problem with the file and the JSON pointer") {
  nlohmann::json k = read_json(kKernelRaw);
  nlohmann::json s = read_json(kSweepRaw);
  SUBCASE("wrong kind, unknown key, missing provenance") {
    k["kind"] = "kernel_profiles";
    k["gemms"] = nlohmann::json::array();
    k.erase("provenance");
    const std::string path = write_temp("bad1.json", k);
    const std::string e = errors_of_files({path});
    CHECK(e.find(path + ": /kind: expected one of \"kernel_profile\", \"collective_sweep\"") != std::string::npos);
    CHECK(e.find(path + ": /gemms: unknown key") != std::string::npos);
    CHECK(e.find(path + ": /provenance: required provenance object") != std::string::npos);
  }
  SUBCASE("out-of-range and inconsistent entries") {
    k["gemm"][3]["seconds"] = -1;
    k["gemm"][4]["tflops"] = k["gemm"][4]["tflops"].get<double>() * 2;
    k["gemm"][5]["dtype"] = "bf61";
    k["memory"][0]["gbps"] = "fast";
    k["launch_overhead_s"] = 1.0;
    s["results"][2]["busbw_gbps"] = s["results"][2]["busbw_gbps"].get<double>() * 1.5;
    s["results"][3]["ranks"] = 1;
    const std::string pk = write_temp("bad2k.json", k), ps = write_temp("bad2s.json", s);
    const std::string e = errors_of_files({pk, ps});
    CHECK(e.find(pk + ": /gemm/3/seconds: expected a number in") != std::string::npos);
    CHECK(e.find(pk + ": /gemm/4/tflops: inconsistent with the other fields") != std::string::npos);
    CHECK(e.find(pk + ": /gemm/5/dtype: expected one of") != std::string::npos);
    CHECK(e.find("(did you mean \"bf16\"?)") != std::string::npos);
    CHECK(e.find(pk + ": /memory/0/gbps: expected a number, found the string \"fast\"") != std::string::npos);
    CHECK(e.find(pk + ": /launch_overhead_s: expected a number in") != std::string::npos);
    CHECK(e.find(ps + ": /results/2/busbw_gbps: inconsistent") != std::string::npos);
    CHECK(e.find(ps + ": /results/3/ranks: expected an integer in [2,") != std::string::npos);
  }
  SUBCASE("an unrecognised device needs --gpu; malformed JSON; missing file") {
    k["provenance"]["gpu"] = "Mystery Accelerator 9000";
    const std::string path = write_temp("bad3.json", k);
    CHECK(errors_of_files({path}).find(path + ": /provenance/gpu: cannot tell which catalog GPU") != std::string::npos);
    CHECK(errors_of_files({path}, "H100-SXM-80GB") == "");
    const std::string broken = temp_path("bad4.json");
    std::ofstream(broken) << "{\"kind\": ";
    CHECK(errors_of_files({broken}).find(broken + ": (document): ") != std::string::npos);
    CHECK(errors_of_files({temp_path("does-not-exist.json")}).find("cannot read the file") != std::string::npos);
  }
  SUBCASE("several in-memory documents: the message says which one") {
    s["results"][0]["collective"] = "allreduce";
    Diagnostics d("raw");
    CHECK(fit_profile({k, s}, "", catalog(), d).is_null());
    REQUIRE(d.items().size() == 1);
    CHECK(d.items()[0].pointer == "/results/0/collective");
    CHECK(d.items()[0].message.rfind("raw input #2: ", 0) == 0);
  }
}

TEST_CASE("a fitted profile, loaded like a scenario's calibration.profiles entry, changes predictions") {
  // The same synthetic kernel profile with every GEMM 25% faster.
  nlohmann::json fast = read_json(kKernelRaw);
  for (auto& g : fast["gemm"]) {
    g["seconds"] = g["seconds"].get<double>() / 1.25;
    g["tflops"] = g["tflops"].get<double>() * 1.25;
  }
  const std::string fast_raw = write_temp("fast-raw.json", fast);
  const std::string base_profile = temp_path("h100-base-measured.json");
  const std::string fast_profile = temp_path("h100-fast-measured.json");
  write_profile_file(fit_profile_files({kKernelRaw, kSweepRaw}, "", catalog()), base_profile);
  write_profile_file(fit_profile_files({fast_raw, kSweepRaw}, "", catalog()), fast_profile);

  auto iteration = [&](const std::string& profile) {
    std::string text = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-h100", "nodes": 1},
  "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
  "training": {"seq_len": 2048, "precision": "bf16"})";
    if (!profile.empty()) text += ",\n  \"calibration\": {\"profiles\": [\"" + profile + "\"]}";
    text += "\n}";
    const Scenario s = load_scenario_text(text, "calibrated.json", "", {}, catalog());
    REQUIRE(s.profiles.size() == 1);
    if (!profile.empty()) CHECK(s.profiles[0].description.find("trainsim calibrate fit") != std::string::npos);
    const JobReport r = simulate(s);
    std::string problems;
    for (const auto& problem : r.problems) problems += problem + "\n";
    INFO(problems);
    REQUIRE(r.feasible);
    return r.iteration_time_s;
  };
  const double shipped = iteration("");
  const double base = iteration(base_profile);
  const double faster = iteration(fast_profile);
  // The synthetic GEMM table is well above the shipped one, so the measured
  // profile predicts a shorter iteration; 25% faster GEMMs shorten it further,
  // by less than 25% (attention, memory-bound kernels and communication stay).
  CHECK(base < shipped);
  CHECK(faster < base);
  CHECK(faster > base / 1.25);

  SUBCASE("the report compares the profile with the shipped default, ratio B/A") {
    const std::string rep = calibration_report(fast_profile, "", catalog());
    CHECK(rep.find("A: shipped default profile (H100-SXM-80GB)") != std::string::npos);
    CHECK(rep.find("gemm bf16 @ 137 GFLOP") != std::string::npos);
    CHECK(rep.find("memory_bound @ 100 MB") != std::string::npos);
    CHECK(rep.find("NVLS all-reduce busbw @ 8 GiB") != std::string::npos);
    CHECK(rep.find("launch_overhead (us)") != std::string::npos);
    // Fields not measured keep the shipped values: same contention share, ratio 1.
    const auto share = rep.find("compute_share_during_comm");
    REQUIRE(share != std::string::npos);
    CHECK(rep.substr(share, rep.find('\n', share) - share).find(" 1.000 ") != std::string::npos);
    CHECK(rep.find("triton_attention_speed") != std::string::npos);
    // A fit keeps the base profile's framework-kernel shares of the memory-bound curve.
    const auto cast = rep.find("memory_kernels.te-cast-transpose");
    REQUIRE(cast != std::string::npos);
    CHECK(rep.substr(cast, rep.find('\n', cast) - cast).find(" 0.48 ") != std::string::npos);
    CHECK(rep.substr(cast, rep.find('\n', cast) - cast).find(" 1.000 ") != std::string::npos);
    const std::string vs = calibration_report(fast_profile, base_profile, catalog());
    // bf16 at 137 GFLOP: 1.25 x the base fit.
    const auto pos = vs.find("gemm bf16 @ 137 GFLOP");
    REQUIRE(pos != std::string::npos);
    CHECK(vs.substr(pos, vs.find('\n', pos) - pos).find(" 1.250 ") != std::string::npos);
    const auto att = vs.find("attention @ 100 GFLOP");
    CHECK(vs.substr(att, vs.find('\n', att) - att).find(" 1.000 ") != std::string::npos);
  }
  for (const auto& p : {fast_raw, base_profile, fast_profile}) std::filesystem::remove(p);
}

namespace {

const std::string kH200Dir = std::string(TRAINSIM_SOURCE_DIR) + "/calibration/measurements/h200";
const std::string kH200Kernels = kH200Dir + "/kernel_profile_full.json";
const std::string kH200Attention = kH200Dir + "/attention_sweep.json";
const std::string kV100Dir = std::string(TRAINSIM_SOURCE_DIR) + "/calibration/measurements/v100";

// Sources name the raw files by the path given, so fitted and shipped entries
// are compared by curve and kind.
void check_same(const CurveEntry& a, const CurveEntry& b) {
  CHECK(a.curve == b.curve);
  CHECK(a.provenance.kind == b.provenance.kind);
}

// Seconds of the first compute op called `name` in stage 0's program (no contention).
double op_seconds(const Scenario& s, const std::string& name) {
  const Cluster cluster(s.cluster);
  const ComputeCostModel costs(cluster, s.profiles);
  const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
  for (const ComputeOp& op : plan.setup.programs.at(0).ops) {
    if (op.name == name) return costs.seconds(op, 0);
  }
  FAIL("no kernel " << name);
  return 0;
}

}  // namespace

TEST_CASE("the shipped H200 profile is what calibrate fit gives from the in-repo H200 measurements") {
  const CalibrationProfile fitted =
      to_profile(fit_profile_files({kH200Kernels, kH200Attention}, "", catalog(), {"gemm.fp8"}));
  const CalibrationProfile* shipped = catalog().find_profile_for_gpu("H200-SXM-141GB");
  REQUIRE(shipped != nullptr);
  for (const Dtype d : {Dtype::BF16, Dtype::FP16, Dtype::TF32}) {
    check_same(fitted.gemm[static_cast<std::size_t>(d)], shipped->gemm[static_cast<std::size_t>(d)]);
    CHECK(shipped->gemm[static_cast<std::size_t>(d)].provenance.kind == "fitted");
  }
  // FP8 keeps the public cuBLASLt sweep (--keep gemm.fp8).
  CHECK(shipped->gemm[static_cast<std::size_t>(Dtype::FP8)].provenance.kind == "measured");
  check_same(fitted.gemm[static_cast<std::size_t>(Dtype::FP8)], shipped->gemm[static_cast<std::size_t>(Dtype::FP8)]);
  check_same(fitted.gemm_min_dim, shipped->gemm_min_dim);
  check_same(fitted.gemm_small_k, shipped->gemm_small_k);
  check_same(fitted.attention, shipped->attention);
  check_same(fitted.attention_backward, shipped->attention_backward);
  const auto cudnn = static_cast<std::size_t>(AttentionKernel::Cudnn);
  check_same(fitted.attention_kernels[cudnn].forward, shipped->attention_kernels[cudnn].forward);
  check_same(fitted.attention_kernels[cudnn].backward, shipped->attention_kernels[cudnn].backward);
  check_same(fitted.memory_bound, shipped->memory_bound);
  CHECK(fitted.launch_overhead.value == shipped->launch_overhead.value);
  CHECK(shipped->launch_overhead.provenance.kind == "measured");
}

TEST_CASE(
    "the shipped V100 profiles' FP16 GEMM curve is what calibrate fit gives from the in-repo public V100 figures") {
  // DeepBench's cuBLAS GEMMs (CUDA 10.1) and a torch.matmul sweep; neither file has
  // memory kernels or a launch figure, so those are the shipped profile's.
  const CalibrationProfile fitted = to_profile(fit_profile_files(
      {kV100Dir + "/deepbench_gemm_fp16.json", kV100Dir + "/torch_matmul_fp16.json"}, "V100-SXM2-32GB", catalog()));
  const CalibrationProfile* sxm2 = catalog().find_profile_for_gpu("V100-SXM2-32GB");
  const CalibrationProfile* sxm3 = catalog().find_profile_for_gpu("V100-SXM3-32GB");
  REQUIRE(sxm2 != nullptr);
  REQUIRE(sxm3 != nullptr);
  const auto fp16 = static_cast<std::size_t>(Dtype::FP16);
  check_same(fitted.gemm[fp16], sxm2->gemm[fp16]);
  CHECK(sxm2->gemm[fp16].provenance.kind == "fitted");
  // CUDA 10.1's cuBLAS from 2.5e11 FLOPs: the median of its shapes there, above the
  // 0.75 of PyTorch 2.7 / CUDA 12.8 alone.
  CHECK(sxm2->gemm[fp16].curve.at(3e11) == doctest::Approx(0.8301));
  check_same(fitted.memory_bound, sxm2->memory_bound);
  CHECK(fitted.launch_overhead == sxm2->launch_overhead);
  CHECK(sxm2->launch_overhead.provenance.kind == "assumed");
  // Memory-bound kernels of about 0.66 GB at BabelStream's mean of Copy, Mul, Add
  // and Triad on a V100 SXM2 (795.6, 791.2, 834.1, 836.9 GB/s) over the 900 GB/s spec.
  CHECK(sxm2->memory_bound.curve.at(6.6e8) ==
        doctest::Approx((795.6 + 791.2 + 834.1 + 836.9) / 4 / 900).epsilon(0.001));
  // The DGX-2H part: the same fractions of its own peak and of the same HBM2.
  CHECK(sxm3->gemm[fp16].curve == sxm2->gemm[fp16].curve);
  CHECK(sxm3->memory_bound.curve == sxm2->memory_bound.curve);
}

TEST_CASE("a GEMM whose K is its smallest dimension runs slower than one with that small an M, as measured") {
  // The H200 measurements hold 8192 x 8192 x K and K x 8192 x 8192 GEMMs of the same
  // FLOPs; with a small K the tile's short main loop leaves its fixed prologue and
  // epilogue exposed (calibrate fit: gemm_small_k).
  const nlohmann::json raw = read_json(kH200Kernels);
  auto measured = [&](double m, double n, double k) {
    for (const auto& g : raw["gemm"]) {
      if (g["dtype"] == "bf16" && g["m"] == m && g["n"] == n && g["k"] == k) return g["tflops"].get<double>();
    }
    FAIL("no measured bf16 GEMM " << m << "x" << n << "x" << k);
    return 0.0;
  };
  const double measured_ratio = measured(128, 8192, 8192) / measured(8192, 8192, 128);  // time small K / small M
  REQUIRE(measured_ratio > 1.2);
  const CalibrationProfile* h200 = catalog().find_profile_for_gpu("H200-SXM-141GB");
  REQUIRE(h200 != nullptr);
  CHECK(h200->gemm_small_k.provenance.kind == "fitted");
  CHECK(h200->gemm_small_k.curve.at(128) < 0.85);
  CHECK(h200->gemm_small_k.curve.at(1024) == 1.0);
  const Scenario s = load_scenario_text(R"({"model": "gpt3-1.3b", "cluster": {"node": "dgx-h200", "nodes": 1},
    "parallel": {"tp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64}, "training": {"seq_len": 2048}})",
                                        "h200.json", "", {}, catalog());
  const Cluster cluster(s.cluster);
  const ComputeCostModel costs(cluster, s.profiles);
  auto gemm = [](std::int64_t m, std::int64_t n, std::int64_t k) {
    ComputeOp op;
    op.kind = OpKind::Gemm;
    op.dtype = Dtype::BF16;
    op.m = m;
    op.n = n;
    op.k = k;
    op.flops = 2.0 * static_cast<double>(m * n * k);
    op.bytes = 2.0 * static_cast<double>(m * k + k * n + m * n);
    return op;
  };
  const double small_k = costs.seconds(gemm(8192, 8192, 128), 0), small_m = costs.seconds(gemm(128, 8192, 8192), 0);
  // Without the factor both would take the same time (same FLOPs, same smallest dimension).
  CHECK(small_k / small_m > 1.15);
  CHECK(small_k / small_m == doctest::Approx(measured_ratio).epsilon(0.1));
  // From K = 1024 on no factor applies.
  CHECK(costs.seconds(gemm(8192, 8192, 1024), 0) == doctest::Approx(costs.seconds(gemm(1024, 8192, 8192), 0)));
  // Nor to a cubic GEMM (the size curve was fitted on them); a tie of K with one
  // other dimension still has the short main loop.
  std::vector<CalibrationProfile> without = s.profiles;
  for (CalibrationProfile& p : without) p.gemm_small_k = CurveEntry{};
  const ComputeCostModel plain(cluster, without);
  CHECK(costs.seconds(gemm(512, 512, 512), 0) == plain.seconds(gemm(512, 512, 512), 0));
  CHECK(costs.seconds(gemm(8192, 256, 256), 0) > plain.seconds(gemm(8192, 256, 256), 0));
  CHECK(costs.seconds(gemm(8192, 8192, 128), 0) > 1.15 * plain.seconds(gemm(8192, 8192, 128), 0));
}

TEST_CASE("attention sweep: each family's curve gives back the measured TFLOP/s") {
  const CalibrationProfile p = to_profile(fit_profile_files({kH200Attention}, "", catalog()));
  const nlohmann::json raw = read_json(kH200Attention);
  const double peak = catalog().find_gpu("H200-SXM-141GB")->peak(Dtype::BF16);
  const auto& cudnn = p.attention_kernels[static_cast<std::size_t>(AttentionKernel::Cudnn)];
  int n = 0;
  for (const auto& pt : raw["points"]) {
    const double flops = 2.0 * pt["batch"].get<double>() * pt["heads"].get<double>() * pt["seq"].get<double>() *
                         pt["seq"].get<double>() * pt["head_dim"].get<double>();
    const bool fa2 = pt["backend"] == "flash_attention";
    const EfficiencyCurve& fwd = fa2 ? p.attention.curve : cudnn.forward.curve;
    const EfficiencyCurve& bwd = fa2 ? p.attention_backward.curve : cudnn.backward.curve;
    // Within 2%: the curve is a per-bucket median made non-decreasing.
    CHECK(within(fwd.at(flops) * peak / 1e12, pt["fwd_tflops"].get<double>(), 0.02));
    CHECK(within(bwd.at(2.5 * flops) * peak / 1e12, pt["bwd_tflops"].get<double>(), 0.02));
    ++n;
  }
  CHECK(n == 12);
  // The rest of the profile is the shipped one (no GEMM in this raw file).
  CHECK(p.gemm[static_cast<std::size_t>(Dtype::BF16)] ==
        catalog().find_profile_for_gpu("H200-SXM-141GB")->gemm[static_cast<std::size_t>(Dtype::BF16)]);

  SUBCASE("an inconsistent figure and an unknown backend are reported with their pointers") {
    nlohmann::json bad = raw;
    bad["points"][1]["fwd_tflops"] = 2 * bad["points"][1]["fwd_tflops"].get<double>();
    bad["points"][2]["backend"] = "xformers";
    Diagnostics d("sweep.json");
    CHECK(fit_profile({bad}, "", catalog(), d).is_null());
    REQUIRE(d.items().size() == 2);
    CHECK(d.items()[0].pointer == "/points/1/fwd_tflops");
    CHECK(d.items()[1].pointer == "/points/2/backend");
  }
  SUBCASE("--keep names a field the shipped profile has") {
    Diagnostics d("sweep.json");
    CHECK(fit_profile({raw}, "", catalog(), d, {"gemm.fp4"}).is_null());
    REQUIRE(d.items().size() == 1);
    CHECK(d.items()[0].message.find("--keep gemm.fp4") != std::string::npos);
  }
}

TEST_CASE("attention families on H200 change the attention kernels by the measured ratio") {
  // 16 heads of 128, 2 x 8192 tokens per micro-batch: the forward kernel has the
  // FLOPs of the sweep's seq-2048 point (16 x 32 heads x 2048^2), where it was measured.
  const std::string text = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-h200", "nodes": 1},
  "parallel": {"tp": 1, "dp": 8, "micro_batch": 2, "global_batch": 64},
  "training": {"seq_len": 8192, "precision": "bf16", "dropout": false}
})";
  auto load = [&](const std::string& attention) {
    return load_scenario_text(text, "h200.json", "", {"training.attention=" + attention}, catalog());
  };
  // The sweep ran without dropout.
  const Scenario fa2 = load("flash"), cudnn = load("cudnn"), fa3 = load("flash-attention-3");
  const nlohmann::json raw = read_json(kH200Attention);
  double fwd_ratio = 0, bwd_ratio = 0;  // measured FlashAttention-2 time / cuDNN time at that point
  for (const auto& pt : raw["points"]) {
    if (pt["seq"] != 2048) continue;
    fwd_ratio =
        pt["backend"] == "flash_attention" ? pt["fwd_ms"].get<double>() : fwd_ratio / pt["fwd_ms"].get<double>();
    bwd_ratio =
        pt["backend"] == "flash_attention" ? pt["bwd_ms"].get<double>() : bwd_ratio / pt["bwd_ms"].get<double>();
  }
  REQUIRE(fwd_ratio > 1.5);
  CHECK(op_seconds(fa2, "attn.core") / op_seconds(cudnn, "attn.core") == doctest::Approx(fwd_ratio).epsilon(0.01));
  CHECK(op_seconds(fa2, "attn.core.bwd") / op_seconds(cudnn, "attn.core.bwd") ==
        doctest::Approx(bwd_ratio).epsilon(0.01));
  // GEMMs do not depend on the attention kernel.
  CHECK(op_seconds(fa2, "mlp.up") == op_seconds(cudnn, "mlp.up"));
  // FlashAttention-3 (derived from the paper's 1.5-2x) is faster than FlashAttention-2.
  CHECK(op_seconds(fa3, "attn.core") < op_seconds(fa2, "attn.core") / 1.5);
  const double t_fa2 = simulate(fa2).iteration_time_s, t_cudnn = simulate(cudnn).iteration_time_s;
  // The iteration shortens by at most the attention time saved (1 - 1/ratio of it).
  CHECK(t_cudnn < t_fa2);
  CHECK(t_cudnn > t_fa2 / fwd_ratio);

  SUBCASE("a family the GPU's profile has no curves for is an input error") {
    std::string error;
    try {
      load_scenario_text(R"({"model": "gpt3-1.3b", "cluster": {"node": "dgx-a100", "nodes": 1},
        "parallel": {"tp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64},
        "training": {"seq_len": 2048, "attention": "cudnn"}})",
                         "a100.json", "", {}, catalog());
    } catch (const InputError& e) {
      error = e.what();
    }
    CHECK(error.find("a100.json: /training/attention:") != std::string::npos);
    CHECK(error.find("attention_kernels.cudnn") != std::string::npos);
  }
}

TEST_CASE("dropout inside cuDNN fused attention slows its kernels by the profile's dropout speed") {
  const std::string text = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-h100", "nodes": 1},
  "parallel": {"tp": 1, "dp": 8, "micro_batch": 2, "global_batch": 64},
  "training": {"seq_len": 2048, "precision": "bf16"}
})";
  auto load = [&](const std::string& attention, bool dropout) {
    return load_scenario_text(
        text, "h100.json", "",
        {"training.attention=" + attention, std::string("training.dropout=") + (dropout ? "true" : "false")},
        catalog());
  };
  const Scenario with = load("cudnn", true), without = load("cudnn", false);
  const double speed =
      with.profiles.at(0).attention_kernels[static_cast<std::size_t>(AttentionKernel::Cudnn)].dropout_speed.value;
  REQUIRE(speed == doctest::Approx(0.594 / 0.614).epsilon(0.001));  // TransformerEngine issue 3312
  CHECK(op_seconds(with, "attn.core") == doctest::Approx(op_seconds(without, "attn.core") / speed));
  CHECK(op_seconds(with, "attn.core.bwd") == doctest::Approx(op_seconds(without, "attn.core.bwd") / speed));
  CHECK(op_seconds(with, "mlp.up") == op_seconds(without, "mlp.up"));
  // FlashAttention-2 has no dropout figure in the profile: its kernels do not change.
  CHECK(op_seconds(load("flash", true), "attn.core") == op_seconds(load("flash", false), "attn.core"));
  CHECK(simulate(with).iteration_time_s > simulate(without).iteration_time_s);
}

TEST_CASE("the profiler's reference GEMM is accepted beside the GEMM table, and checked") {
  nlohmann::json k = read_json(kKernelRaw);
  k["reference_gemm"] = {{"dtype", "bf16"},
                         {"m", 8192},
                         {"n", 8192},
                         {"k", 8192},
                         {"tflops", 760.0},
                         {"first_algorithm_tflops", 690.0},
                         {"burst_tflops", 790.0},
                         {"candidates", 8}};
  Diagnostics ok("raw");
  const nlohmann::ordered_json with_ref = fit_profile({k}, "", catalog(), ok);
  CHECK(ok.ok());
  // The curves come from the GEMM table alone.
  Diagnostics plain("raw");
  CHECK(with_ref["gemm"] == fit_profile({read_json(kKernelRaw)}, "", catalog(), plain)["gemm"]);
  k["reference_gemm"]["burst_tflops"] = "fast";
  Diagnostics bad("raw");
  CHECK(fit_profile({k}, "", catalog(), bad).is_null());
  REQUIRE(bad.items().size() == 1);
  CHECK(bad.items()[0].pointer == "/reference_gemm/burst_tflops");
}

TEST_CASE("calibrate compare: predicted vs measured per kernel category of a one-GPU scenario") {
  const std::string dir = std::string(TRAINSIM_SOURCE_DIR) + "/tests/data/measure";
  const std::string scenario = dir + "/tiny-llama-1gpu.json";
  const std::string measured = dir + "/step_measurement_synthetic.json";
  const StepCategories m = read_step_measurement(measured);
  CHECK(m.gemm == 0.0008);
  CHECK(m.iteration == 0.002);
  const Scenario s = load_scenario_file(scenario, {}, catalog());
  const StepCategories p = predicted_categories(s);
  CHECK(p.gemm > 0);
  CHECK(p.attention > 0);
  CHECK(p.elementwise > 0);
  CHECK(p.optimizer > 0);
  // One GPU, no communication: the iteration is its compute.
  CHECK(p.iteration == doctest::Approx(p.gemm + p.attention + p.elementwise + p.optimizer).epsilon(1e-6));
  // The eager framework's unfused kernels show up in the elementwise share.
  const StepCategories fused =
      predicted_categories(load_scenario_file(scenario, {"training.framework=default"}, catalog()));
  CHECK(p.elementwise > fused.elementwise);
  // The same GEMM kernels; this tiny model's shortest ones wait for the eager host
  // (host dispatch, docs/frameworks.md), which the fused default lists do not charge.
  CHECK(p.gemm >= fused.gemm);
  CHECK(p.gemm < 1.5 * fused.gemm);
  const std::string text = compare_step(measured, scenario, catalog());
  const auto row = text.find("\ngemm");
  REQUIRE(row != std::string::npos);
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, " %.3f\n", p.gemm / m.gemm);
  CHECK(text.substr(row, text.find('\n', row + 1) - row + 1).find(ratio) != std::string::npos);

  SUBCASE("a measurement without a category, and a scenario on several GPUs, are input errors") {
    nlohmann::json bad = read_json(measured);
    bad["categories_s"].erase("attention");
    bad["iteration_s"] = -1;
    const std::string path = write_temp("bad-step.json", bad);
    std::string error;
    try {
      read_step_measurement(path);
    } catch (const InputError& e) {
      error = e.what();
    }
    CHECK(error.find("/categories_s/attention") != std::string::npos);
    CHECK(error.find("/iteration_s") != std::string::npos);
    std::filesystem::remove(path);
    std::string multi;
    try {
      predicted_categories(load_scenario_file(
          scenario, {"cluster.node.gpus_per_node=2", "parallel.dp=2", "parallel.global_batch=4"}, catalog()));
    } catch (const InputError& e) {
      multi = e.what();
    }
    CHECK(multi.find("/parallel: calibrate compare needs a one-GPU scenario") != std::string::npos);
  }
}
