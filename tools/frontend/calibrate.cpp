#include "tools/frontend/calibrate.hpp"

#include "calibration/collective_cost.hpp"
#include "calibration/fit.hpp"
#include "tools/frontend/job.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

namespace trainsim {

namespace {

// ---------------------------------------------------------------- helpers

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string time_text(double seconds) {
  const double us = seconds * 1e6;
  return us < 1e-3 ? std::string("0us") : fmt("%.4g", us) + "us";
}

std::optional<Dtype> dtype_from_name(const std::string& s) {
  for (std::size_t d = 0; d < kNumDtypes; ++d) {
    if (s == to_string(static_cast<Dtype>(d))) return static_cast<Dtype>(d);
  }
  return std::nullopt;
}

nlohmann::ordered_json curve_json(const std::vector<FitPoint>& pts, const std::string& kind,
                                  const std::string& source) {
  nlohmann::ordered_json j;
  j["points"] = nlohmann::ordered_json::array();
  for (const FitPoint& p : pts) j["points"].push_back(nlohmann::ordered_json::array({p.x, p.y}));
  j["kind"] = kind;
  j["source"] = source;
  return j;
}

nlohmann::ordered_json value_json(nlohmann::ordered_json value, const std::string& kind, const std::string& source) {
  nlohmann::ordered_json j;
  j["value"] = std::move(value);
  j["kind"] = kind;
  j["source"] = source;
  return j;
}

// ---------------------------------------------------------------- raw input

struct Source {
  std::string label;   // file path, or "raw input #i"
  std::string kind;    // kernel_profile | collective_sweep
  std::string device;  // provenance.gpu
  std::string summary;
  double memory_bytes = 0;
  Diagnostics* diags = nullptr;
};

struct GemmSample {
  Dtype dtype;
  double m, n, k, tflops;
  std::size_t src;
  std::string pointer;
  double flops() const { return 2 * m * n * k; }
  double min_dim() const { return std::min({m, n, k}); }
};

struct MemSample {
  double bytes, gbps;
  std::size_t src;
};

struct CollSample {
  std::string coll;
  double bytes;
  int ranks;
  double seconds, busbw;
  std::size_t src;
};

// One fused-attention measurement: forward and backward of one call.
struct AttnSample {
  std::string backend;  // flash_attention | flash_attention_3 | cudnn_attention
  double fwd_flops, fwd_tflops, bwd_tflops;
  std::size_t src;
};

struct RawData {
  std::vector<Source> sources;
  std::vector<AttnSample> attns;
  std::vector<GemmSample> gemms;
  std::vector<MemSample> mems;
  std::vector<std::pair<double, std::size_t>> launches;
  std::vector<CollSample> colls;
};

void check_consistent(ObjectReader& r, const char* key, double given, double expected) {
  if (expected > 0 && std::abs(given - expected) > 0.01 * expected) {
    r.error(key, "inconsistent with the other fields: " + fmt("%.6g", given) + " given, " + fmt("%.6g", expected) +
                     " computed");
  }
}

void read_source_provenance(ObjectReader& top, Source& s) {
  const nlohmann::json* p = top.raw("provenance");
  if (p == nullptr) {
    top.error("provenance", "required provenance object (gpu, date, hostname, ...) is missing");
    return;
  }
  ObjectReader pr(*p, top.at("provenance"), top.diagnostics());
  if (!pr.valid()) return;
  s.device = pr.string("gpu", "", true);
  if (pr.has("gpu") && s.device.empty()) pr.error("gpu", "expected the measured device's name, found \"\"");
  s.memory_bytes = pr.number("memory_bytes", 0, 0, 1e15);
  std::string summary = s.device;
  if (const nlohmann::json* g = pr.raw("gpus"); g != nullptr && g->is_array()) {
    summary = std::to_string(g->size()) + "x " + summary;
  }
  auto add = [&](const char* key, const char* label) {
    const std::string v = pr.string(key, "");
    if (!v.empty()) summary += std::string(", ") + label + v;
  };
  add("hostname", "host ");
  add("date", "");
  add("runtime_version", "CUDA ");
  add("cublas_version", "cuBLAS ");
  add("nccl_version", "NCCL ");
  add("framework", "");
  const std::string note = pr.string("note", "");
  if (!note.empty()) summary += "; " + note;
  s.summary = summary;
  // Other provenance keys (sm_count, method, ...) are free-form metadata.
}

void read_kernel_profile(ObjectReader& top, std::size_t src, RawData& raw) {
  Diagnostics& d = top.diagnostics();
  if (const nlohmann::json* g = top.raw("gemm")) {
    if (!g->is_array()) {
      top.error("gemm", "expected an array of GEMM measurements, found " + describe_json_type(*g));
    } else {
      for (std::size_t i = 0; i < g->size(); ++i) {
        const std::size_t before = d.items().size();
        ObjectReader r((*g)[i], json_pointer_append(top.at("gemm"), i), d);
        if (!r.valid()) continue;
        const std::string dt = r.choice("dtype", "", {"fp32", "tf32", "fp16", "bf16", "fp8"}, true);
        const auto m = static_cast<double>(r.integer("m", 0, 1, 1 << 24, true));
        const auto n = static_cast<double>(r.integer("n", 0, 1, 1 << 24, true));
        const auto k = static_cast<double>(r.integer("k", 0, 1, 1 << 24, true));
        const double seconds = r.number("seconds", 0, 1e-9, 1e4, true);
        const double tflops = r.number("tflops", 0, 1e-6, 1e6, true);
        r.finish();
        if (d.items().size() != before) continue;
        check_consistent(r, "tflops", tflops, 2 * m * n * k / seconds / 1e12);
        if (d.items().size() != before) continue;
        raw.gemms.push_back({*dtype_from_name(dt), m, n, k, tflops, src, r.pointer()});
      }
    }
  } else {
    top.error("gemm", "required array of GEMM measurements is missing (may be empty)");
  }
  if (const nlohmann::json* mem = top.raw("memory")) {
    if (!mem->is_array()) {
      top.error("memory", "expected an array of memory-bound kernel measurements, found " + describe_json_type(*mem));
    } else {
      for (std::size_t i = 0; i < mem->size(); ++i) {
        const std::size_t before = d.items().size();
        ObjectReader r((*mem)[i], json_pointer_append(top.at("memory"), i), d);
        if (!r.valid()) continue;
        r.choice("kernel", "", {"copy", "add", "rownorm"}, true);
        const double bytes = r.number("bytes", 0, 1, 1e13, true);
        const double seconds = r.number("seconds", 0, 1e-9, 1e4, true);
        const double gbps = r.number("gbps", 0, 1e-6, 1e6, true);
        r.finish();
        if (d.items().size() != before) continue;
        check_consistent(r, "gbps", gbps, bytes / seconds / 1e9);
        if (d.items().size() == before) raw.mems.push_back({bytes, gbps, src});
      }
    }
  } else {
    top.error("memory", "required array of memory-bound kernel measurements is missing (may be empty)");
  }
  // Optional: a file assembled from published kernel figures has no launch measurement,
  // and the shipped profile's launch overhead is then kept.
  if (top.has("launch_overhead_s")) {
    const std::size_t before = d.items().size();
    const double launch = top.number("launch_overhead_s", 0, 1e-9, 1e-3, true);
    if (d.items().size() == before) raw.launches.emplace_back(launch, src);
  }
  // The profiler's reference GEMM (bf16 8192^3 timed three ways): read for its
  // types, reported by the profiler; the curves come from `gemm` alone.
  if (const nlohmann::json* ref = top.raw("reference_gemm")) {
    ObjectReader r(*ref, top.at("reference_gemm"), d);
    if (r.valid()) {
      r.choice("dtype", "", {"fp32", "tf32", "fp16", "bf16", "fp8"}, true);
      for (const char* dim : {"m", "n", "k"}) r.integer(dim, 0, 1, 1 << 24, true);
      for (const char* f : {"tflops", "first_algorithm_tflops", "burst_tflops"}) r.number(f, 0, 1e-6, 1e6, true);
      r.integer("candidates", 0, 1, 1024, true);
      r.finish();
    }
  }
  if (const nlohmann::json* p = top.raw("peaks"); p != nullptr && !p->is_object()) {
    top.error("peaks", "expected an object, found " + describe_json_type(*p));
  }
}

void read_collective_sweep(ObjectReader& top, std::size_t src, RawData& raw) {
  Diagnostics& d = top.diagnostics();
  const nlohmann::json* res = top.raw("results");
  if (res == nullptr || !res->is_array() || res->empty()) {
    top.error("results", "expected a non-empty array of collective measurements" +
                             (res ? ", found " + describe_json_type(*res) : std::string()));
    return;
  }
  for (std::size_t i = 0; i < res->size(); ++i) {
    const std::size_t before = d.items().size();
    ObjectReader r((*res)[i], json_pointer_append(top.at("results"), i), d);
    if (!r.valid()) continue;
    const std::string coll =
        r.choice("collective", "", {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv"}, true);
    const double bytes = r.number("bytes", 0, 1, 1e14, true);
    const int ranks = static_cast<int>(r.integer("ranks", 0, 2, 1 << 20, true));
    const double seconds = r.number("seconds", 0, 1e-9, 1e4, true);
    const double algbw = r.number("algbw_gbps", 0, 1e-9, 1e6, true);
    const double busbw = r.number("busbw_gbps", 0, 1e-9, 1e6, true);
    r.finish();
    if (d.items().size() != before) continue;
    check_consistent(r, "algbw_gbps", algbw, bytes / seconds / 1e9);
    check_consistent(r, "busbw_gbps", busbw, algbw * bus_factor(coll.c_str(), ranks));
    if (d.items().size() == before) raw.colls.push_back({coll, bytes, ranks, seconds, busbw, src});
  }
}

// {"kind": "attention_sweep"}: causal bf16 fused attention, forward FLOPs
// 2 b h s^2 d (half of the full 4 b h s^2 d), backward 2.5x forward.
void read_attention_sweep(ObjectReader& top, std::size_t src, RawData& raw) {
  Diagnostics& d = top.diagnostics();
  const nlohmann::json* pts = top.raw("points");
  if (pts == nullptr || !pts->is_array() || pts->empty()) {
    top.error("points", "expected a non-empty array of attention measurements" +
                            (pts ? ", found " + describe_json_type(*pts) : std::string()));
    return;
  }
  for (std::size_t i = 0; i < pts->size(); ++i) {
    const std::size_t before = d.items().size();
    ObjectReader r((*pts)[i], json_pointer_append(top.at("points"), i), d);
    if (!r.valid()) continue;
    const std::string backend =
        r.choice("backend", "", {"flash_attention", "flash_attention_3", "cudnn_attention"}, true);
    const auto b = static_cast<double>(r.integer("batch", 0, 1, 1 << 20, true));
    const auto h = static_cast<double>(r.integer("heads", 0, 1, 1 << 12, true));
    const auto hd = static_cast<double>(r.integer("head_dim", 0, 1, 1 << 12, true));
    const auto seq = static_cast<double>(r.integer("seq", 0, 1, 1 << 24, true));
    const double fwd_ms = r.number("fwd_ms", 0, 1e-6, 1e7, true);
    const double bwd_ms = r.number("bwd_ms", 0, 1e-6, 1e7, true);
    const double fwd_tflops = r.number("fwd_tflops", 0, 1e-6, 1e6, true);
    const double bwd_tflops = r.number("bwd_tflops", 0, 1e-6, 1e6, true);
    r.finish();
    if (d.items().size() != before) continue;
    const double flops = 2 * b * h * seq * seq * hd;
    check_consistent(r, "fwd_tflops", fwd_tflops, flops / (fwd_ms * 1e-3) / 1e12);
    check_consistent(r, "bwd_tflops", bwd_tflops, 2.5 * flops / (bwd_ms * 1e-3) / 1e12);
    if (d.items().size() == before) raw.attns.push_back({backend, flops, fwd_tflops, bwd_tflops, src});
  }
}

// ---------------------------------------------------------------- GPU lookup

std::vector<std::string> name_tokens(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : lower(s)) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur += c;
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The catalog GPU a CUDA device name ("NVIDIA H100 80GB HBM3") describes, or
// nullptr when none or several fit. The family token (h100, a100, ...) must
// appear; then the most shared name tokens win, then the closest memory size.
const GpuSpec* gpu_for_device(const std::string& device, double memory_bytes, const Catalog& catalog) {
  const auto dev = name_tokens(device);
  auto has = [&](const std::string& t) { return std::find(dev.begin(), dev.end(), t) != dev.end(); };
  const bool other_form = has("pcie") || has("nvl");
  const GpuSpec* best = nullptr;
  int best_score = -1;
  double best_mem = 0;
  bool tie = false;
  for (const GpuSpec& g : catalog.gpus) {
    const auto toks = name_tokens(g.name);
    if (toks.empty() || !has(toks[0])) continue;
    bool sxm = false;
    int score = 0;
    for (const auto& t : toks) {
      sxm |= t.rfind("sxm", 0) == 0;
      score += has(t) ? 1 : 0;
    }
    if (sxm && other_form) continue;
    const double mem_err = memory_bytes > 0 ? std::abs(std::log(memory_bytes / g.memory_bytes)) : 0.0;
    if (memory_bytes > 0 && mem_err > 0.25) continue;
    if (score > best_score || (score == best_score && mem_err < best_mem - 1e-9)) {
      best = &g;
      best_score = score;
      best_mem = mem_err;
      tie = false;
    } else if (score == best_score && std::abs(mem_err - best_mem) <= 1e-9) {
      tie = true;
    }
  }
  return tie ? nullptr : best;
}

const NodeSpec* node_for_gpu(const GpuSpec& gpu, const Catalog& catalog) {
  for (const NodeSpec& n : catalog.nodes) {
    if (lower(n.gpu.name) == lower(gpu.name)) return &n;
  }
  return nullptr;
}

// The shipped profile of `gpu` as ordered JSON (its exact text and provenance).
std::optional<nlohmann::ordered_json> shipped_profile_json(const std::string& gpu) {
  for (const EmbeddedFile& f : calibration_profile_files()) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(std::string(f.text), nullptr, false);
    if (j.is_object() && j.contains("gpu") && j["gpu"].is_string() && lower(j["gpu"].get<std::string>()) == lower(gpu))
      return j;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- the fit

struct Doc {
  const nlohmann::json* json;
  std::string label;
  Diagnostics* diags;
};

std::string sources_text(const RawData& raw, const std::string& kind) {
  std::string out;
  for (const Source& s : raw.sources) {
    if (s.kind != kind) continue;
    out += (out.empty() ? "" : "; ") + kind + " " + s.label + " (" + s.summary + ")";
  }
  return out;
}

nlohmann::ordered_json fit_core(const std::vector<Doc>& docs, const std::string& gpu_name, const Catalog& catalog,
                                const std::vector<std::string>& keep, Diagnostics& general) {
  RawData raw;
  if (docs.empty()) {
    general.error("", "no raw measurements given (kernel_profile and/or collective_sweep JSON)");
    return {};
  }
  bool input_ok = true;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    Diagnostics& d = *docs[i].diags;
    const std::size_t before = d.items().size();
    Source s;
    s.label = docs[i].label;
    s.diags = &d;
    ObjectReader top(*docs[i].json, "", d);
    if (top.valid()) {
      s.kind = top.choice("kind", "", {"kernel_profile", "collective_sweep", "attention_sweep"}, true);
      read_source_provenance(top, s);
      if (s.kind == "kernel_profile") read_kernel_profile(top, i, raw);
      if (s.kind == "collective_sweep") read_collective_sweep(top, i, raw);
      if (s.kind == "attention_sweep") read_attention_sweep(top, i, raw);
      top.finish();
    }
    raw.sources.push_back(s);
    input_ok &= d.items().size() == before;
  }
  if (!input_ok) return {};

  // The GPU: --gpu, else recognised from the device names; all must agree.
  const GpuSpec* gpu = nullptr;
  if (!gpu_name.empty()) {
    gpu = catalog.find_gpu(gpu_name);
    if (gpu == nullptr) {
      std::string msg = "unknown GPU \"" + gpu_name + "\"";
      const std::string near = did_you_mean(gpu_name, catalog.gpu_names());
      if (!near.empty()) msg += " (did you mean \"" + near + "\"?)";
      general.error("", msg + "; known GPUs: see `trainsim catalog gpus`");
      return {};
    }
  }
  for (const Source& s : raw.sources) {
    const GpuSpec* g = gpu_for_device(s.device, s.memory_bytes, catalog);
    if (g == nullptr) {
      if (gpu == nullptr) {
        s.diags->error("/provenance/gpu", "cannot tell which catalog GPU \"" + s.device +
                                              "\" is; name it with --gpu (see `trainsim catalog gpus`)");
      }
      continue;
    }
    if (gpu == nullptr) {
      gpu = g;
    } else if (g != gpu) {
      s.diags->error("/provenance/gpu", "measured on \"" + s.device + "\" (" + g->name + "), but the profile is for " +
                                            gpu->name + "; fit each GPU type separately");
    }
  }
  bool ok = general.ok();
  for (const Source& s : raw.sources) ok &= s.diags->ok();
  if (!ok || gpu == nullptr) return {};

  std::optional<nlohmann::ordered_json> base = shipped_profile_json(gpu->name);
  if (!base) {
    general.error("", "no shipped calibration profile for " + gpu->name +
                          " to take the unmeasured fields from; add calibration/profiles/ for it first");
    return {};
  }
  nlohmann::ordered_json prof = *base;
  const std::string kp = sources_text(raw, "kernel_profile");
  const std::string cs = sources_text(raw, "collective_sweep");

  // --- GEMMs: efficiency = measured / dense peak, per dtype.
  std::map<Dtype, std::vector<const GemmSample*>> by_dtype;
  for (const GemmSample& g : raw.gemms) {
    if (gpu->peak(g.dtype) <= 0) {
      raw.sources[g.src].diags->error(json_pointer_append(g.pointer, "dtype"),
                                      std::string("the catalog lists no dense ") + to_string(g.dtype) + " peak for " +
                                          gpu->name + ", so no efficiency can be computed");
      continue;
    }
    by_dtype[g.dtype].push_back(&g);
  }
  for (const Source& s : raw.sources) {
    if (!s.diags->ok()) return {};
  }
  constexpr double kWellShaped = 1024;  // min(M, N, K) from which no skinny penalty is assumed
  auto eff = [&](const GemmSample& g) { return g.tflops * 1e12 / gpu->peak(g.dtype); };
  // Stage 1: the size curve from well-shaped GEMMs.
  std::map<Dtype, std::vector<FitPoint>> size0;
  for (const auto& [dt, list] : by_dtype) {
    std::vector<std::pair<double, double>> s;
    for (const GemmSample* g : list) {
      if (g->min_dim() >= kWellShaped) s.emplace_back(g->flops(), eff(*g));
    }
    auto pts = bucket_medians(s);
    make_non_decreasing(pts);
    if (pts.size() >= 2) size0[dt] = std::move(pts);
  }
  // Stage 2: the skinny penalty, relative to the size curve of the same dtype,
  // from shapes whose FLOPs lie within that curve.
  std::map<double, std::vector<double>> factors;
  for (const auto& [dt, list] : by_dtype) {
    const auto it = size0.find(dt);
    if (it == size0.end()) continue;
    const EfficiencyCurve c = to_curve(it->second);
    for (const GemmSample* g : list) {
      if (g->min_dim() < kWellShaped && g->flops() >= it->second.front().x)
        factors[g->min_dim()].push_back(eff(*g) / c.at(g->flops()));
    }
  }
  EfficiencyCurve min_dim_curve;
  // A factor curve from per-dimension samples: their medians (at most 1), made
  // non-decreasing, 1.0 from kWellShaped on; `n` counts the samples.
  auto factor_curve = [&](const std::map<double, std::vector<double>>& samples, std::size_t* n) {
    std::vector<FitPoint> pts;
    for (const auto& [dim, f] : samples) {
      pts.push_back({dim, std::min(1.0, median(f)), static_cast<double>(f.size())});
      *n += f.size();
    }
    make_non_decreasing(pts);
    pts.push_back({kWellShaped, 1.0, 1.0});
    return finish_points(pts, true, 1.0);
  };
  if (!factors.empty()) {
    std::size_t n = 0;
    const std::vector<FitPoint> pts = factor_curve(factors, &n);
    min_dim_curve = to_curve(pts);
    prof["gemm_min_dim"] =
        curve_json(pts, "fitted",
                   "trainsim calibrate fit: median over " + std::to_string(n) +
                       " skinny GEMMs (min(M,N,K) < 1024, all dtypes) of measured efficiency / the size curve at "
                       "the same FLOPs, per smallest dimension, made non-decreasing, 1.0 from 1024; " +
                       kp);
  } else {
    std::vector<std::pair<double, double>> v;
    for (const auto& p : (*base)["gemm_min_dim"]["points"]) v.emplace_back(p[0].get<double>(), p[1].get<double>());
    min_dim_curve = EfficiencyCurve(std::move(v));
  }
  // Stage 2b: GEMMs whose reduction dimension K is their smallest run slower than the
  // skinny factor says (few main-loop steps per output tile around a fixed prologue and
  // epilogue): their measured efficiency over size curve x skinny factor, per K.
  std::map<double, std::vector<double>> k_factors;
  for (const auto& [dt, list] : by_dtype) {
    const auto it = size0.find(dt);
    if (it == size0.end()) continue;
    const EfficiencyCurve c = to_curve(it->second);
    for (const GemmSample* g : list) {
      if (small_k_applies(g->m, g->n, g->k) && g->k < kWellShaped && g->flops() >= it->second.front().x)
        k_factors[g->k].push_back(eff(*g) / (c.at(g->flops()) * min_dim_curve.at(g->k)));
    }
  }
  if (!k_factors.empty()) {
    std::size_t n = 0;
    const std::vector<FitPoint> pts = factor_curve(k_factors, &n);
    prof["gemm_small_k"] =
        curve_json(pts, "fitted",
                   "trainsim calibrate fit: median over " + std::to_string(n) +
                       " GEMMs whose K is their smallest dimension (K < 1024, all dtypes) of measured efficiency / "
                       "(the size curve at the same FLOPs x gemm_min_dim at K), per K, made non-decreasing, 1.0 "
                       "from 1024; " +
                       kp);
  }
  // Stage 3: the final size curve per dtype; GEMMs smaller than the well-shaped
  // ones (e.g. 512^3) enter divided by their skinny factor.
  for (const auto& [dt, list] : by_dtype) {
    const auto it = size0.find(dt);
    const double lowest = it == size0.end() ? 1e300 : it->second.front().x;
    std::vector<std::pair<double, double>> s;
    for (const GemmSample* g : list) {
      if (g->min_dim() >= kWellShaped) {
        s.emplace_back(g->flops(), eff(*g));
      } else if (g->flops() < lowest) {
        s.emplace_back(g->flops(), eff(*g) / min_dim_curve.at(g->min_dim()));
      }
    }
    auto pts = bucket_medians(s);
    make_non_decreasing(pts);
    pts = finish_points(pts, false, 1.5);
    if (pts.empty()) continue;
    const char* name = to_string(dt);
    prof["gemm"][name] = curve_json(
        pts, "fitted",
        std::string("trainsim calibrate fit: ") + name + " GEMMs, measured TFLOP/s / " +
            fmt("%.1f", gpu->peak(dt) / 1e12) + " TFLOP/s dense peak, median per factor-2 FLOP bucket (" +
            std::to_string(s.size()) +
            " shapes with min(M,N,K) >= 1024, smaller ones divided by gemm_min_dim), made non-decreasing; " + kp);
  }

  // --- Fused attention, forward and backward, per kernel family (bf16 peak).
  if (!raw.attns.empty()) {
    const std::string as = sources_text(raw, "attention_sweep");
    const double peak = gpu->peak(Dtype::BF16);
    const std::string how = " causal bf16 attention, measured TFLOP/s / " + fmt("%.1f", peak / 1e12) +
                            " TFLOP/s dense bf16 peak vs FLOPs of one kernel (forward 2 b h s^2 d, backward 2.5x), "
                            "median per factor-2 bucket, made non-decreasing; ";
    auto fit_pass = [&](const std::string& backend, bool backward) {
      std::vector<std::pair<double, double>> s;
      for (const AttnSample& a : raw.attns) {
        if (a.backend != backend) continue;
        s.emplace_back(backward ? 2.5 * a.fwd_flops : a.fwd_flops,
                       (backward ? a.bwd_tflops : a.fwd_tflops) * 1e12 / peak);
      }
      auto pts = bucket_medians(s);
      make_non_decreasing(pts);
      return finish_points(pts, false, 1.5);
    };
    for (const auto& [backend, key, name] : {std::tuple{"flash_attention", "", "FlashAttention-2"},
                                             std::tuple{"flash_attention_3", "flash-attention-3", "FlashAttention-3"},
                                             std::tuple{"cudnn_attention", "cudnn", "cuDNN fused attention"}}) {
      const auto fwd = fit_pass(backend, false);
      if (fwd.empty()) continue;
      const auto bwd = fit_pass(backend, true);
      const std::string src = std::string("trainsim calibrate fit: ") + name;
      if (std::string(key).empty()) {
        prof["attention"] = curve_json(fwd, "fitted", src + " forward," + how + as);
        prof["attention_backward"] = curve_json(bwd, "fitted", src + " backward," + how + as);
      } else {
        prof["attention_kernels"][key]["forward"] = curve_json(fwd, "fitted", src + " forward," + how + as);
        prof["attention_kernels"][key]["backward"] = curve_json(bwd, "fitted", src + " backward," + how + as);
      }
    }
  }

  // --- Memory-bound kernels: achieved / spec HBM bandwidth vs bytes moved.
  if (!raw.mems.empty()) {
    std::vector<std::pair<double, double>> s;
    for (const MemSample& m : raw.mems) s.emplace_back(m.bytes, m.gbps * 1e9 / gpu->memory_bandwidth);
    auto pts = bucket_medians(s);
    make_non_decreasing(pts);
    pts = finish_points(pts, true, 1.5);
    prof["memory_bound"] =
        curve_json(pts, "fitted",
                   "trainsim calibrate fit: copy / add / row-norm kernels (L2-cold), GB/s / " +
                       fmt("%.0f", gpu->memory_bandwidth / 1e9) +
                       " GB/s spec HBM bandwidth vs bytes read + written, median per factor-2 bucket (" +
                       std::to_string(s.size()) + " measurements), made non-decreasing; " + kp);
  }

  // --- Launch overhead.
  if (!raw.launches.empty()) {
    std::vector<double> v;
    for (const auto& l : raw.launches) v.push_back(l.first);
    prof["launch_overhead"] =
        value_json(time_text(median(v)), "measured",
                   "trainsim calibrate fit: empty kernels launched back to back (eager), seconds per launch; " + kp);
  }

  // --- Collectives within the host (scale-up domain).
  if (!raw.colls.empty()) {
    const NodeSpec* node = node_for_gpu(*gpu, catalog);
    const double link = node ? node->scaleup_bandwidth : gpu->scaleup_bandwidth / 2;
    const std::string link_text = fmt("%.0f", link / 1e9) + " GB/s per direction (" +
                                  (node ? "node preset " + node->name : std::string("half the GPU's aggregate")) + ")";
    if (link <= 0) {
      general.error("", "the catalog has no scale-up bandwidth for " + gpu->name +
                            "; a collective sweep cannot be normalised (leave it out)");
      return {};
    }
    int n = 0;
    for (const CollSample& c : raw.colls) n = std::max(n, c.ranks);
    // collective -> bytes -> samples (measurements with fewer ranks are ignored).
    std::map<std::string, std::map<double, std::vector<const CollSample*>>> by;
    for (const CollSample& c : raw.colls) {
      if (c.ranks == n) by[c.coll][c.bytes].push_back(&c);
    }
    auto curve_of = [&](std::initializer_list<const char*> colls) {
      std::map<double, std::vector<double>> per_size;
      for (const char* c : colls) {
        for (const auto& [bytes, list] : by[c]) {
          for (const CollSample* x : list) per_size[bytes].push_back(x->busbw * 1e9 / link);
        }
      }
      std::vector<FitPoint> pts;
      for (const auto& [bytes, v] : per_size) pts.push_back({bytes, median(v), static_cast<double>(v.size())});
      make_non_decreasing(pts);
      return pts;
    };
    const std::vector<FitPoint> ar = curve_of({"all_reduce"});
    double ar_max = 0;
    for (const FitPoint& p : ar) ar_max = std::max(ar_max, p.y);
    const bool nvls = ar_max > 1.0;  // only in-switch reduction beats the link bandwidth
    const std::string n_text = std::to_string(n) + " GPUs";
    nlohmann::ordered_json& su = prof["scaleup"];
    if (nvls) {
      const auto pts = finish_points(ar, true, 1.5);
      su["nvls_busbw_curve"] = curve_json(pts, "fitted",
                                          "trainsim calibrate fit: NVLS all_reduce busbw (exceeds the link, so "
                                          "in-switch reduction) / " +
                                              link_text + ", " + n_text + ", made non-decreasing; " + cs);
      su["nvls_busbw_efficiency"] = value_json(std::min(2.0, round_significant(ar.back().y, 4)), "measured",
                                               "trainsim calibrate fit: NVLS all_reduce busbw at " +
                                                   fmt("%.0f", ar.back().x) + " bytes / " + link_text + "; " + cs);
    }
    const std::vector<FitPoint> ring = nvls ? curve_of({"all_gather", "reduce_scatter"}) : ar;
    if (!ring.empty()) {
      const std::string what = nvls ? "all_gather and reduce_scatter" : "all_reduce";
      su["busbw_curve"] = curve_json(finish_points(ring, true, 1.5), "fitted",
                                     "trainsim calibrate fit: " + what + " busbw / " + link_text + ", " + n_text +
                                         ", median per size, made non-decreasing; " + cs);
      su["busbw_efficiency"] = value_json(std::clamp(round_significant(ring.back().y, 4), 0.01, 1.5), "measured",
                                          "trainsim calibrate fit: " + what + " busbw at " +
                                              fmt("%.0f", ring.back().x) + " bytes / " + link_text + "; " + cs);
    }
    // Latencies: time of the smallest message of each operation = base + steps x hop.
    std::vector<std::pair<double, double>> st;  // (steps, seconds)
    for (const auto& [coll, sizes] : by) {
      if (sizes.empty()) continue;
      std::vector<double> t;
      for (const CollSample* x : sizes.begin()->second) t.push_back(x->seconds);
      st.emplace_back(hop_steps(coll.c_str(), n), median(t));
    }
    if (const std::optional<StepLatencyFit> fit = fit_step_latency(st)) {
      const double hop = fit->hop, base_lat = fit->base;
      const std::string how = "trainsim calibrate fit: least squares of the smallest-message time of " +
                              std::to_string(st.size()) + " operations (" + n_text +
                              ") = base_latency + steps x latency (all_reduce 2(n-1), "
                              "all_gather / reduce_scatter / all_to_all n-1, sendrecv 1 steps); " +
                              cs;
      su["latency"] = value_json(time_text(hop), "fitted", how);
      su["base_latency"] = value_json(time_text(base_lat), "fitted", how);
    }
  }

  // Fields kept from the shipped profile (`--keep gemm.fp8`): its source is better supported there.
  for (const std::string& k : keep) {
    nlohmann::ordered_json::json_pointer ptr("/" + [&] {
      std::string p = k;
      std::replace(p.begin(), p.end(), '.', '/');
      return p;
    }());
    if (!base->contains(ptr)) {
      general.error("", "--keep " + k + ": the shipped profile of " + gpu->name + " has no such field");
      continue;
    }
    prof[ptr] = (*base)[ptr];
  }
  if (!general.ok()) return {};

  // Description, then a check that the result reads back as a valid profile.
  std::string desc = "Fitted by trainsim calibrate fit on " + gpu->name + " from ";
  std::string from;
  for (const Source& s : raw.sources) from += (from.empty() ? "" : " and ") + s.kind + " (" + s.summary + ")";
  std::string kept;
  for (const std::string& k : keep) kept += (kept.empty() ? "" : ", ") + k;
  prof["description"] = desc + from + "; fields not measured" + (kept.empty() ? "" : " and " + kept) +
                        " are copied from the shipped profile with their provenance";
  prof["gpu"] = gpu->name;

  Diagnostics check("(fitted profile)");
  const nlohmann::json plain = nlohmann::json::parse(prof.dump());
  ObjectReader r(plain, "", check);
  read_profile(r);
  r.finish();
  for (const Diagnostic& d : check.items())
    general.error(d.pointer, "internal error: the fitted profile does not validate: " + d.message);
  return general.ok() ? prof : nlohmann::ordered_json{};
}

}  // namespace

nlohmann::ordered_json fit_profile(const std::vector<nlohmann::json>& raw_docs, const std::string& gpu_name_or_empty,
                                   const Catalog& catalog, Diagnostics& diags, const std::vector<std::string>& keep) {
  std::vector<Diagnostics> per_doc;
  per_doc.reserve(raw_docs.size());
  std::vector<Doc> docs;
  for (std::size_t i = 0; i < raw_docs.size(); ++i) {
    const std::string label = "raw input #" + std::to_string(i + 1);
    per_doc.emplace_back(raw_docs.size() == 1 ? diags.file() : label);
    docs.push_back({&raw_docs[i], label, &per_doc.back()});
  }
  nlohmann::ordered_json out = fit_core(docs, gpu_name_or_empty, catalog, keep, diags);
  for (std::size_t i = 0; i < per_doc.size(); ++i) {
    for (const Diagnostic& d : per_doc[i].items()) {
      diags.error(d.pointer, raw_docs.size() == 1 ? d.message : docs[i].label + ": " + d.message);
    }
  }
  return diags.ok() ? out : nlohmann::ordered_json{};
}

nlohmann::ordered_json fit_profile_files(const std::vector<std::string>& raw_paths,
                                         const std::string& gpu_name_or_empty, const Catalog& catalog,
                                         const std::vector<std::string>& keep) {
  std::vector<Diagnostics> per_file;
  per_file.reserve(raw_paths.size());
  std::vector<nlohmann::json> jsons;
  jsons.reserve(raw_paths.size());
  std::vector<Doc> docs;
  for (const std::string& p : raw_paths) {
    per_file.emplace_back(p);
    const std::string text = read_text_file(p, per_file.back());
    std::optional<nlohmann::json> j;
    if (per_file.back().ok()) j = parse_json_text(text, per_file.back());
    jsons.push_back(j ? std::move(*j) : nlohmann::json());
  }
  std::vector<Diagnostic> all;
  for (const auto& d : per_file) all.insert(all.end(), d.items().begin(), d.items().end());
  if (!all.empty()) throw InputError(all);
  for (std::size_t i = 0; i < raw_paths.size(); ++i) docs.push_back({&jsons[i], raw_paths[i], &per_file[i]});
  Diagnostics general("trainsim calibrate fit");
  nlohmann::ordered_json out = fit_core(docs, gpu_name_or_empty, catalog, keep, general);
  for (const auto& d : per_file) all.insert(all.end(), d.items().begin(), d.items().end());
  all.insert(all.end(), general.items().begin(), general.items().end());
  if (!all.empty()) throw InputError(all);
  return out;
}

namespace {

const char* kind_of(const CurveEntry& e) { return e.curve.empty() ? "-" : e.provenance.kind.c_str(); }

}  // namespace

std::string compare_profiles(const CalibrationProfile& a, const CalibrationProfile& b, const std::string& name_a,
                             const std::string& name_b) {
  std::ostringstream out;
  out << "Calibration comparison (ratio = B / A)\n"
      << "  A: " << name_a << " (" << a.gpu << ")\n"
      << "  B: " << name_b << " (" << b.gpu << ")\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-42s %12s %12s %8s  %s\n", "component", "A", "B", "B/A", "B kind");
  out << line;
  auto row = [&](const std::string& name, std::optional<double> va, std::optional<double> vb, const std::string& kind) {
    const std::string sa = va ? fmt("%.4g", *va) : "-";
    const std::string sb = vb ? fmt("%.4g", *vb) : "-";
    const std::string ratio = va && vb && *va != 0 ? fmt("%.3f", *vb / *va) : "-";
    std::snprintf(line, sizeof line, "%-42s %12s %12s %8s  %s\n", name.c_str(), sa.c_str(), sb.c_str(), ratio.c_str(),
                  kind.c_str());
    out << line;
  };
  auto curve_at = [](const CurveEntry& e, double x) -> std::optional<double> {
    if (e.curve.empty()) return std::nullopt;
    return e.curve.at(x);
  };
  out << "GEMM efficiency (fraction of dense peak) by FLOPs of one GEMM\n";
  for (std::size_t d = 0; d < kNumDtypes; ++d) {
    if (a.gemm[d].curve.empty() && b.gemm[d].curve.empty()) continue;
    for (const double gf : {1.0, 16.0, 137.0, 1100.0}) {
      row(std::string("  gemm ") + to_string(static_cast<Dtype>(d)) + " @ " + fmt("%g", gf) + " GFLOP",
          curve_at(a.gemm[d], gf * 1e9), curve_at(b.gemm[d], gf * 1e9), kind_of(b.gemm[d]));
    }
  }
  for (const double dim : {64.0, 128.0, 256.0, 512.0}) {
    row("  gemm_min_dim @ " + fmt("%g", dim), curve_at(a.gemm_min_dim, dim), curve_at(b.gemm_min_dim, dim),
        kind_of(b.gemm_min_dim));
  }
  for (const double k : {64.0, 128.0, 256.0, 512.0}) {
    row("  gemm_small_k @ K " + fmt("%g", k), curve_at(a.gemm_small_k, k), curve_at(b.gemm_small_k, k),
        kind_of(b.gemm_small_k));
  }
  out << "Attention efficiency by FLOPs of one kernel\n";
  for (const double gf : {1.0, 100.0, 1000.0}) {
    row("  attention @ " + fmt("%g", gf) + " GFLOP", curve_at(a.attention, gf * 1e9), curve_at(b.attention, gf * 1e9),
        kind_of(b.attention));
  }
  if (!a.attention_backward.curve.empty() || !b.attention_backward.curve.empty()) {
    for (const double gf : {100.0, 1000.0, 10000.0}) {
      row("  attention_backward @ " + fmt("%g", gf) + " GFLOP", curve_at(a.attention_backward, gf * 1e9),
          curve_at(b.attention_backward, gf * 1e9), kind_of(b.attention_backward));
    }
  }
  for (std::size_t i = 0; i < kNumAttentionKernels; ++i) {
    const AttentionKernelCurves &ka = a.attention_kernels[i], &kb = b.attention_kernels[i];
    if (ka.forward.curve.empty() && kb.forward.curve.empty()) continue;
    const std::string key(attention_kernel_key(static_cast<AttentionKernel>(i)));
    for (const double gf : {100.0, 1000.0}) {
      row("  " + key + " @ " + fmt("%g", gf) + " GFLOP", curve_at(ka.forward, gf * 1e9), curve_at(kb.forward, gf * 1e9),
          kind_of(kb.forward));
    }
    for (const double gf : {1000.0, 10000.0}) {
      row("  " + key + " bwd @ " + fmt("%g", gf) + " GFLOP", curve_at(ka.backward, gf * 1e9),
          curve_at(kb.backward, gf * 1e9), kind_of(kb.backward));
    }
  }
  out << "Memory-bound efficiency (fraction of spec HBM bandwidth) by bytes moved\n";
  for (const auto& [label, bytes] : {std::pair{"1 MB", 1e6}, std::pair{"100 MB", 1e8}, std::pair{"1 GB", 1e9}}) {
    row(std::string("  memory_bound @ ") + label, curve_at(a.memory_bound, bytes), curve_at(b.memory_bound, bytes),
        kind_of(b.memory_bound));
  }
  // Framework kernels' shares of that curve (1: at the curve, the default).
  for (std::size_t i = 1; i < kNumMemoryKernels; ++i) {
    const ValueEntry &ka = a.memory_kernels[i], &kb = b.memory_kernels[i];
    row("  memory_kernels." + std::string(memory_kernel_key(static_cast<MemoryKernel>(i))), ka.value, kb.value,
        kb.provenance.kind.empty() ? "-" : kb.provenance.kind);
  }
  out << "Per kernel\n";
  row("  launch_overhead (us)", a.launch_overhead.value * 1e6, b.launch_overhead.value * 1e6,
      b.launch_overhead.provenance.kind);
  row("  memory_reserved (GiB)", a.memory_reserved.value / 1073741824.0, b.memory_reserved.value / 1073741824.0,
      b.memory_reserved.provenance.kind);
  row("  compute_share_during_comm", a.compute_share_during_comm.value, b.compute_share_during_comm.value,
      b.compute_share_during_comm.provenance.kind);
  row("  fp8_split_accumulator_speed", a.fp8_split_accumulator_speed.value, b.fp8_split_accumulator_speed.value,
      b.fp8_split_accumulator_speed.provenance.kind);
  row("  gpu_speed_spread", a.gpu_speed_spread.value, b.gpu_speed_spread.value,
      b.gpu_speed_spread.provenance.kind.empty() ? "-" : b.gpu_speed_spread.provenance.kind);
  auto optional_value = [](const ValueEntry& e) { return e.value > 0 ? std::optional(e.value) : std::nullopt; };
  row("  triton_attention_speed", optional_value(a.triton_attention_speed), optional_value(b.triton_attention_speed),
      b.triton_attention_speed.provenance.kind);
  out << "Scale-up collectives (bus bandwidth / per-direction link bandwidth)\n";
  auto ring = [](const LinkCalibration& l, double bytes) -> std::optional<double> {
    return l.busbw_curve.curve.empty() ? l.busbw_efficiency.value : l.busbw_curve.curve.at(bytes);
  };
  auto nvls = [](const LinkCalibration& l, double bytes) -> std::optional<double> {
    if (!l.nvls_busbw_curve.curve.empty()) return l.nvls_busbw_curve.curve.at(bytes);
    if (l.nvls_busbw_efficiency.value > 0) return l.nvls_busbw_efficiency.value;
    return std::nullopt;
  };
  const bool any_nvls = nvls(a.scaleup, 1).has_value() || nvls(b.scaleup, 1).has_value();
  for (const auto& [label, bytes] :
       {std::pair{"16 MiB", 16777216.0}, std::pair{"256 MiB", 268435456.0}, std::pair{"8 GiB", 8589934592.0}}) {
    row(std::string("  ring busbw @ ") + label, ring(a.scaleup, bytes), ring(b.scaleup, bytes),
        b.scaleup.busbw_curve.curve.empty() ? b.scaleup.busbw_efficiency.provenance.kind
                                            : b.scaleup.busbw_curve.provenance.kind);
    if (any_nvls) {
      row(std::string("  NVLS all-reduce busbw @ ") + label, nvls(a.scaleup, bytes), nvls(b.scaleup, bytes),
          b.scaleup.nvls_busbw_curve.curve.empty() ? b.scaleup.nvls_busbw_efficiency.provenance.kind
                                                   : b.scaleup.nvls_busbw_curve.provenance.kind);
    }
  }
  row("  busbw_efficiency (large messages)", a.scaleup.busbw_efficiency.value, b.scaleup.busbw_efficiency.value,
      b.scaleup.busbw_efficiency.provenance.kind);
  if (any_nvls) {
    row("  nvls_busbw_efficiency", a.scaleup.nvls_busbw_efficiency.value, b.scaleup.nvls_busbw_efficiency.value,
        b.scaleup.nvls_busbw_efficiency.provenance.kind);
  }
  row("  latency per step (us)", a.scaleup.latency.value * 1e6, b.scaleup.latency.value * 1e6,
      b.scaleup.latency.provenance.kind);
  row("  base_latency (us)", a.scaleup.base_latency.value * 1e6, b.scaleup.base_latency.value * 1e6,
      b.scaleup.base_latency.provenance.kind);
  out << "Network (scale-out)\n";
  row("  busbw_efficiency", a.network.busbw_efficiency.value, b.network.busbw_efficiency.value,
      b.network.busbw_efficiency.provenance.kind);
  row("  latency per step (us)", a.network.latency.value * 1e6, b.network.latency.value * 1e6,
      b.network.latency.provenance.kind);
  row("  base_latency (us)", a.network.base_latency.value * 1e6, b.network.base_latency.value * 1e6,
      b.network.base_latency.provenance.kind);
  return out.str();
}

std::string calibration_report(const std::string& profile_path, const std::string& against_path_or_empty,
                               const Catalog& catalog) {
  const CalibrationProfile b = load_profile_file(profile_path);
  if (!against_path_or_empty.empty()) {
    const CalibrationProfile a = load_profile_file(against_path_or_empty);
    return compare_profiles(a, b, against_path_or_empty, profile_path);
  }
  const CalibrationProfile* a = catalog.find_profile_for_gpu(b.gpu);
  if (a == nullptr) {
    throw InputError({Diagnostic{profile_path, "/gpu",
                                 "no shipped profile for \"" + b.gpu + "\" to compare with; use --against PROFILE"}});
  }
  return compare_profiles(*a, b, "shipped default profile", profile_path);
}

StepCategories read_step_measurement(const std::string& path) {
  Diagnostics d(path);
  const std::string text = read_text_file(path, d);
  StepCategories c;
  if (d.ok()) {
    if (auto doc = parse_json_text(text, d)) {
      ObjectReader top(*doc, "", d);
      if (top.valid()) {
        top.choice("kind", "", {"step_measurement"}, true);
        if (const nlohmann::json* p = top.raw("provenance"); p == nullptr || !p->is_object()) {
          top.error("provenance", "expected an object saying where and how the step was measured");
        }
        top.string("scenario", "");
        top.integer("steps", 0, 1, 1 << 20, true);
        c.iteration = top.number("iteration_s", 0, 1e-9, 1e6, true);
        if (const nlohmann::json* cat = top.raw("categories_s")) {
          ObjectReader r(*cat, top.at("categories_s"), d);
          if (r.valid()) {
            c.gemm = r.number("gemm", 0, 0, 1e6, true);
            c.attention = r.number("attention", 0, 0, 1e6, true);
            c.elementwise = r.number("elementwise", 0, 0, 1e6, true);
            c.optimizer = r.number("optimizer", 0, 0, 1e6, true);
            r.finish();
          }
        } else {
          top.error("categories_s",
                    "required object {gemm, attention, elementwise, optimizer} (seconds per iteration)");
        }
        top.finish();
      }
    }
  }
  d.throw_if_errors();
  return c;
}

StepCategories predicted_categories(const Scenario& s) {
  const ParallelSpec& par = s.parallel;
  if (par.tp * par.pp * par.dp * par.cp * par.ep != 1) {
    throw InputError({Diagnostic{s.file, "/parallel",
                                 "calibrate compare needs a one-GPU scenario (tp, pp, dp, cp, ep all 1), like the "
                                 "measurement; found " +
                                     std::to_string(par.tp * par.pp * par.dp * par.cp * par.ep) + " GPUs"}});
  }
  const Platform platform(s.cluster, s.profiles);
  const WorkloadPlan plan = workload_of(s)->plan(platform, Placement::of(s.parallel), PlanOptions{});
  const ProgramTemplate& prog = plan.setup.programs.at(0);
  const int type = platform.cluster().gpu_type_of(plan.setup.ranks[plan.recorded_rank_of_stage[0]].gpu);
  StepCategories c;
  for (const Task& t : prog.tasks) {
    if (t.kind != TaskKind::Compute) continue;
    const ComputeOp& op = prog.ops[t.ref];
    const double sec = platform.costs().duration(op, type).to_seconds();
    if (op.kind == OpKind::Gemm) {
      c.gemm += sec;
    } else if (op.kind == OpKind::Attention || op.kind == OpKind::AttentionBackward) {
      c.attention += sec;
    } else if (op.name.rfind("optimizer.", 0) == 0) {
      c.optimizer += sec;
    } else {
      c.elementwise += sec;
    }
  }
  c.iteration = simulate(s).iteration_time_s;
  return c;
}

std::string compare_step(const std::string& measured_path, const std::string& scenario_path, const Catalog& catalog) {
  const StepCategories m = read_step_measurement(measured_path);
  const Scenario s = load_scenario_file(scenario_path, {}, catalog);
  const StepCategories p = predicted_categories(s);
  std::ostringstream out;
  out << "Predicted (" << scenario_path << ") vs measured (" << measured_path << "), seconds per iteration\n";
  char line[160];
  std::snprintf(line, sizeof line, "%-14s %12s %12s %10s\n", "category", "predicted", "measured", "pred/meas");
  out << line;
  auto row = [&](const char* name, double pv, double mv) {
    const std::string ratio = mv > 0 ? fmt("%.3f", pv / mv) : "-";
    std::snprintf(line, sizeof line, "%-14s %12.6g %12.6g %10s\n", name, pv, mv, ratio.c_str());
    out << line;
  };
  row("gemm", p.gemm, m.gemm);
  row("attention", p.attention, m.attention);
  row("elementwise", p.elementwise, m.elementwise);
  row("optimizer", p.optimizer, m.optimizer);
  row("iteration", p.iteration, m.iteration);
  return out.str();
}

}  // namespace trainsim
