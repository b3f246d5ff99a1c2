#include "calibration/profile_io.hpp"

#include <charconv>
#include <fstream>
#include <optional>
#include <span>
#include <system_error>
#include <utility>

namespace trainsim {

namespace {

Provenance read_provenance(ObjectReader& r) {
  Provenance p;
  p.kind = r.choice("kind", "", {"spec", "measured", "derived", "assumed", "fitted"}, true);
  p.source = r.string("source", "", true);
  return p;
}

CurveEntry read_curve(ObjectReader& parent, const char* key, bool required) {
  CurveEntry e;
  const nlohmann::json* v = parent.raw(key);
  if (v == nullptr) {
    if (required) parent.error(key, "required efficiency curve is missing");
    return e;
  }
  ObjectReader r(*v, parent.at(key), parent.diagnostics());
  if (!r.valid()) return e;
  const nlohmann::json* pts = r.raw("points");
  std::vector<std::pair<double, double>> points;
  if (pts == nullptr || !pts->is_array() || pts->empty()) {
    r.error("points", "expected a non-empty array of [size, efficiency] pairs");
  } else {
    for (std::size_t i = 0; i < pts->size(); ++i) {
      const auto& p = (*pts)[i];
      const std::string ptr = json_pointer_append(r.at("points"), i);
      if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) {
        r.diagnostics().error(ptr, "expected [size, efficiency], found " + describe_json_type(p));
        continue;
      }
      const double x = p[0].get<double>(), y = p[1].get<double>();
      if (!(x > 0) || !(y > 0 && y <= 1.5)) {
        r.diagnostics().error(ptr, "expected size > 0 and efficiency in (0, 1.5]");
        continue;
      }
      if (!points.empty() && x <= points.back().first) {
        r.diagnostics().error(ptr, "sizes must increase strictly");
        continue;
      }
      points.emplace_back(x, y);
    }
  }
  e.curve = EfficiencyCurve(std::move(points));
  e.provenance = read_provenance(r);
  r.finish();
  return e;
}

ValueEntry read_value(ObjectReader& parent, const char* key, std::optional<Quantity> unit, double lo, double hi,
                      bool required) {
  ValueEntry e;
  const nlohmann::json* v = parent.raw(key);
  if (v == nullptr) {
    if (required) parent.error(key, "required calibration value is missing");
    return e;
  }
  ObjectReader r(*v, parent.at(key), parent.diagnostics());
  if (!r.valid()) return e;
  e.value = unit ? r.quantity("value", *unit, 0, lo, hi, true) : r.number("value", 0, lo, hi, true);
  e.provenance = read_provenance(r);
  r.finish();
  return e;
}

// `attention_kernels`: {"cudnn": {"forward": curve, "backward": curve, "dropout_speed": value}, ...}.
void read_attention_kernels(ObjectReader& parent, CalibrationProfile& p) {
  const nlohmann::json* v = parent.raw("attention_kernels");
  if (v == nullptr) return;
  ObjectReader r(*v, parent.at("attention_kernels"), parent.diagnostics());
  if (!r.valid()) return;
  for (std::size_t i = 0; i < kNumAttentionKernels; ++i) {
    const std::string key(attention_kernel_key(static_cast<AttentionKernel>(i)));
    if (key.empty()) continue;
    const nlohmann::json* f = r.raw(key.c_str());
    if (f == nullptr) continue;
    ObjectReader fr(*f, r.at(key.c_str()), r.diagnostics());
    if (!fr.valid()) continue;
    p.attention_kernels[i].forward = read_curve(fr, "forward", true);
    p.attention_kernels[i].backward = read_curve(fr, "backward", false);
    if (fr.raw("dropout_speed") != nullptr)
      p.attention_kernels[i].dropout_speed = read_value(fr, "dropout_speed", std::nullopt, 0.05, 1, true);
    fr.finish();
  }
  r.finish();  // unknown family names are errors
}

// `memory_kernels`: {"apex-layer-norm-forward": {"value": 0.7, "kind": ..., "source": ...}, ...}.
void read_memory_kernels(ObjectReader& parent, CalibrationProfile& p) {
  const nlohmann::json* v = parent.raw("memory_kernels");
  if (v == nullptr) return;
  ObjectReader r(*v, parent.at("memory_kernels"), parent.diagnostics());
  if (!r.valid()) return;
  for (std::size_t i = 0; i < kNumMemoryKernels; ++i) {
    const std::string key(memory_kernel_key(static_cast<MemoryKernel>(i)));
    if (key.empty() || r.raw(key.c_str()) == nullptr) continue;
    p.memory_kernels[i] = read_value(r, key.c_str(), std::nullopt, 0.05, 1.5, true);
  }
  r.finish();  // unknown implementation names are errors
}

LinkCalibration read_link(ObjectReader& parent, const char* key) {
  LinkCalibration l;
  const nlohmann::json* v = parent.raw(key);
  if (v == nullptr) {
    parent.error(key, "required link calibration is missing");
    return l;
  }
  ObjectReader r(*v, parent.at(key), parent.diagnostics());
  if (!r.valid()) return l;
  l.busbw_curve = read_curve(r, "busbw_curve", false);
  l.nvls_busbw_curve = read_curve(r, "nvls_busbw_curve", false);
  l.p2p_curve = read_curve(r, "p2p_curve", false);
  l.busbw_efficiency = read_value(r, "busbw_efficiency", std::nullopt, 0.01, 1.5, true);
  l.nvls_busbw_efficiency = read_value(r, "nvls_busbw_efficiency", std::nullopt, 0.01, 2.0, false);
  l.latency = read_value(r, "latency", Quantity::Time, 0, 1, true);
  l.base_latency = read_value(r, "base_latency", Quantity::Time, 0, 1, true);
  r.finish();
  return l;
}

}  // namespace

CalibrationProfile read_profile(ObjectReader& r) {
  CalibrationProfile p;
  p.gpu = r.string("gpu", "", true);
  p.description = r.string("description", "", true);
  if (const nlohmann::json* g = r.raw("gemm")) {
    ObjectReader gr(*g, r.at("gemm"), r.diagnostics());
    for (std::size_t d = 0; d < kNumDtypes; ++d) {
      p.gemm[d] = read_curve(gr, to_string(static_cast<Dtype>(d)), false);
    }
    gr.finish();
  } else {
    r.error("gemm", "required GEMM efficiency curves are missing");
  }
  p.gemm_min_dim = read_curve(r, "gemm_min_dim", true);
  p.gemm_small_k = read_curve(r, "gemm_small_k", false);
  p.attention = read_curve(r, "attention", true);
  p.attention_backward = read_curve(r, "attention_backward", false);
  p.triton_attention_speed = read_value(r, "triton_attention_speed", std::nullopt, 0.05, 1, false);
  read_attention_kernels(r, p);
  p.memory_bound = read_curve(r, "memory_bound", true);
  read_memory_kernels(r, p);
  p.launch_overhead = read_value(r, "launch_overhead", Quantity::Time, 0, 1e-3, true);
  p.compute_share_during_comm = read_value(r, "compute_share_during_comm", std::nullopt, 0.05, 1, false);
  if (r.raw("compute_share_during_comm") == nullptr) p.compute_share_during_comm = ValueEntry{1.0, {}};  // none
  p.compute_share_during_net_p2p = read_value(r, "compute_share_during_net_p2p", std::nullopt, 0.05, 1, false);
  if (r.raw("compute_share_during_net_p2p") == nullptr) p.compute_share_during_net_p2p = p.compute_share_during_comm;
  p.fp8_split_accumulator_speed = read_value(r, "fp8_split_accumulator_speed", std::nullopt, 0.05, 1, false);
  if (r.raw("fp8_split_accumulator_speed") == nullptr) p.fp8_split_accumulator_speed = ValueEntry{1.0, {}};  // none
  p.gpu_speed_spread = read_value(r, "gpu_speed_spread", std::nullopt, 0, 0.2, false);
  if (r.raw("gpu_speed_spread") == nullptr) p.gpu_speed_spread = ValueEntry{0.0, {}};  // none
  p.memory_reserved = read_value(r, "memory_reserved", Quantity::Bytes, 0, 1e12, true);
  p.scaleup = read_link(r, "scaleup");
  p.network = read_link(r, "network");
  return p;
}

void write_profile_file(const nlohmann::ordered_json& profile, const std::string& path) {
  write_text_file(path, profile.dump(2) + "\n");
}

CalibrationProfile load_profile_file(const std::string& path) {
  Diagnostics d(path);
  const std::string text = read_text_file(path, d);
  CalibrationProfile p;
  if (d.ok()) {
    if (auto doc = parse_json_text(text, d)) {
      ObjectReader r(*doc, "", d);
      if (r.valid()) p = read_profile(r);
      r.finish();
    }
  }
  d.throw_if_errors();
  return p;
}

namespace {

// Shortest text of `x` that reads back as exactly `x`.
std::string shortest(double x) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc() ? std::string(buf, end) : std::string("nan");
}

// A quantity with the most readable unit that reads back as exactly `x`
// (base units always do).
std::string quantity_text(double x, Quantity kind) {
  if (x == 0) return "0";
  struct Unit {
    const char* suffix;
    double factor;
  };
  static constexpr Unit kTime[] = {{"us", 1e-6}, {"ms", 1e-3}, {"ns", 1e-9}, {"s", 1}};
  static constexpr Unit kBytes[] = {{"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"B", 1}};
  static constexpr Unit kBandwidth[] = {{"GB/s", 1e9}, {"B/s", 1}};
  static constexpr Unit kFlops[] = {{"TFLOPS", 1e12}, {"FLOPS", 1}};
  const std::span<const Unit> units = kind == Quantity::Time        ? std::span<const Unit>(kTime)
                                      : kind == Quantity::Bytes     ? std::span<const Unit>(kBytes)
                                      : kind == Quantity::Bandwidth ? std::span<const Unit>(kBandwidth)
                                                                    : std::span<const Unit>(kFlops);
  for (const Unit& u : units) {
    const std::string text = shortest(x / u.factor) + u.suffix;
    const ParsedQuantity q = parse_quantity(text, kind);
    if (q.value && *q.value == x) return text;
  }
  return shortest(x) + units.back().suffix;
}

nlohmann::ordered_json provenance_json(nlohmann::ordered_json j, const Provenance& p) {
  j["kind"] = p.kind;
  j["source"] = p.source;
  return j;
}

nlohmann::ordered_json curve_to_json(const CurveEntry& e) {
  nlohmann::ordered_json j;
  j["points"] = nlohmann::ordered_json::array();
  for (const auto& [x, y] : e.curve.points()) j["points"].push_back(nlohmann::ordered_json::array({x, y}));
  return provenance_json(std::move(j), e.provenance);
}

nlohmann::ordered_json value_to_json(const ValueEntry& e, std::optional<Quantity> unit) {
  nlohmann::ordered_json j;
  if (unit) {
    j["value"] = quantity_text(e.value, *unit);
  } else {
    j["value"] = e.value;
  }
  return provenance_json(std::move(j), e.provenance);
}

// Optional entries are absent when they were absent from the profile read
// (a read entry always has a provenance kind).
bool present(const ValueEntry& e) { return !e.provenance.kind.empty(); }
bool present(const CurveEntry& e) { return !e.curve.empty() || !e.provenance.kind.empty(); }

nlohmann::ordered_json link_to_json(const LinkCalibration& l) {
  nlohmann::ordered_json j;
  if (present(l.busbw_curve)) j["busbw_curve"] = curve_to_json(l.busbw_curve);
  if (present(l.nvls_busbw_curve)) j["nvls_busbw_curve"] = curve_to_json(l.nvls_busbw_curve);
  if (present(l.p2p_curve)) j["p2p_curve"] = curve_to_json(l.p2p_curve);
  j["busbw_efficiency"] = value_to_json(l.busbw_efficiency, std::nullopt);
  if (present(l.nvls_busbw_efficiency))
    j["nvls_busbw_efficiency"] = value_to_json(l.nvls_busbw_efficiency, std::nullopt);
  j["latency"] = value_to_json(l.latency, Quantity::Time);
  j["base_latency"] = value_to_json(l.base_latency, Quantity::Time);
  return j;
}

}  // namespace

nlohmann::ordered_json profile_to_json(const CalibrationProfile& p) {
  nlohmann::ordered_json j;
  j["gpu"] = p.gpu;
  j["description"] = p.description;
  j["gemm"] = nlohmann::ordered_json::object();
  for (std::size_t d = 0; d < kNumDtypes; ++d) {
    if (present(p.gemm[d])) j["gemm"][to_string(static_cast<Dtype>(d))] = curve_to_json(p.gemm[d]);
  }
  j["gemm_min_dim"] = curve_to_json(p.gemm_min_dim);
  if (present(p.gemm_small_k)) j["gemm_small_k"] = curve_to_json(p.gemm_small_k);
  j["attention"] = curve_to_json(p.attention);
  if (present(p.attention_backward)) j["attention_backward"] = curve_to_json(p.attention_backward);
  if (present(p.triton_attention_speed))
    j["triton_attention_speed"] = value_to_json(p.triton_attention_speed, std::nullopt);
  nlohmann::ordered_json kernels = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < kNumAttentionKernels; ++i) {
    const AttentionKernelCurves& k = p.attention_kernels[i];
    if (!present(k.forward)) continue;
    nlohmann::ordered_json f;
    f["forward"] = curve_to_json(k.forward);
    if (present(k.backward)) f["backward"] = curve_to_json(k.backward);
    if (present(k.dropout_speed)) f["dropout_speed"] = value_to_json(k.dropout_speed, std::nullopt);
    kernels[std::string(attention_kernel_key(static_cast<AttentionKernel>(i)))] = std::move(f);
  }
  if (!kernels.empty()) j["attention_kernels"] = std::move(kernels);
  j["memory_bound"] = curve_to_json(p.memory_bound);
  nlohmann::ordered_json memory_kernels = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < kNumMemoryKernels; ++i) {
    if (!present(p.memory_kernels[i])) continue;
    memory_kernels[std::string(memory_kernel_key(static_cast<MemoryKernel>(i)))] =
        value_to_json(p.memory_kernels[i], std::nullopt);
  }
  if (!memory_kernels.empty()) j["memory_kernels"] = std::move(memory_kernels);
  j["launch_overhead"] = value_to_json(p.launch_overhead, Quantity::Time);
  if (present(p.compute_share_during_comm))
    j["compute_share_during_comm"] = value_to_json(p.compute_share_during_comm, std::nullopt);
  if (present(p.compute_share_during_net_p2p) && p.compute_share_during_net_p2p != p.compute_share_during_comm)
    j["compute_share_during_net_p2p"] = value_to_json(p.compute_share_during_net_p2p, std::nullopt);
  if (present(p.fp8_split_accumulator_speed))
    j["fp8_split_accumulator_speed"] = value_to_json(p.fp8_split_accumulator_speed, std::nullopt);
  if (present(p.gpu_speed_spread)) j["gpu_speed_spread"] = value_to_json(p.gpu_speed_spread, std::nullopt);
  j["memory_reserved"] = value_to_json(p.memory_reserved, Quantity::Bytes);
  j["scaleup"] = link_to_json(p.scaleup);
  j["network"] = link_to_json(p.network);
  return j;
}

}  // namespace trainsim
