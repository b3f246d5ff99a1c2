#include "tools/frontend/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include "models/deepspeed_schedule.hpp"
#include "models/layout_search.hpp"
#include "models/mixed_fleet_search.hpp"
#include "tools/frontend/scenario.hpp"

namespace trainsim {

namespace {

constexpr std::size_t kMaxPoints = 1000000;
constexpr std::size_t kMaxAxisValues = 100000;

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// The file's text; nullopt with the reason when it is missing, a directory, a FIFO...
std::optional<std::string> read_text(const std::string& path, const std::string& unreadable, std::string* why) {
  Diagnostics d(path);
  std::string text = read_text_file(path, d);
  if (d.ok()) return text;
  const std::string& reason = d.items().front().message;
  *why = reason == "cannot read the file" ? unreadable : reason;
  return std::nullopt;
}

std::vector<std::string> split_path(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

std::string key_pointer(const std::string& key) {
  std::string p;
  for (const auto& part : split_path(key)) p = json_pointer_append(p, part);
  return p;
}

// Sets doc[a][b][c] = value for key "a.b.c" as `--set` does; false when a
// non-object is in the way (the scenario loader then reports it).
bool set_key(nlohmann::json& doc, const std::string& key, const nlohmann::json& value) {
  nlohmann::json* node = &doc;
  const auto parts = split_path(key);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!node->is_object()) return false;
    if (i + 1 == parts.size()) {
      (*node)[parts[i]] = value;
      return true;
    }
    if (!node->contains(parts[i])) (*node)[parts[i]] = nlohmann::json::object();
    node = &(*node)[parts[i]];
  }
  return true;
}

// GPUs per node of a scenario's node entry (a preset name or an inline node); 0 if unknown.
int node_gpus(const nlohmann::json& v, const Catalog& cat) {
  if (v.is_string()) {
    const NodeSpec* n = cat.find_node(v.get<std::string>());
    return n != nullptr ? n->gpus_per_node : 0;
  }
  if (!v.is_object()) return 0;
  Diagnostics scratch("");
  ObjectReader r(v, "", scratch);
  const NodeSpec* base = nullptr;
  if (r.has("preset")) {
    base = cat.find_node(r.string("preset", ""));
    if (base == nullptr) return 0;
  }
  const NodeSpec n = read_node(r, cat, base);
  return scratch.ok() ? n.gpus_per_node : 0;
}

// A count from the JSON before validation: fallback unless an integer in [0, 2^20],
// so that products of counts stay far from overflow (the loader reports the rest).
std::int64_t int_or(const nlohmann::json& obj, const char* key, std::int64_t fallback) {
  if (!obj.is_object() || !obj.contains(key)) return fallback;
  const std::optional<std::int64_t> x = json_integer_value(obj[key]);
  return x && *x >= 0 && *x <= (1 << 20) ? *x : fallback;
}

// GPU count of a scenario's cluster entry, from the JSON (before validation); 0 if unknown.
std::int64_t cluster_gpus(const nlohmann::json& c, const Catalog& cat) {
  if (c.is_string()) {
    const ClusterPreset* p = cat.find_cluster(c.get<std::string>());
    if (p == nullptr) return 0;
    const NodeSpec* n = cat.find_node(p->node);
    return n != nullptr ? static_cast<std::int64_t>(n->gpus_per_node) * p->nodes : 0;
  }
  if (!c.is_object()) return 0;
  if (c.contains("groups")) {
    if (!c["groups"].is_array()) return 0;
    std::int64_t total = 0;
    for (const auto& g : c["groups"]) {
      if (!g.is_object() || !g.contains("node")) return 0;
      total += node_gpus(g["node"], cat) * int_or(g, "nodes", 0);
    }
    return total;
  }
  if (!c.contains("node")) return 0;
  return node_gpus(c["node"], cat) * int_or(c, "nodes", 0);
}

// Diagnostics of the base scenario, with pointers inside an inline base prefixed.
std::vector<Diagnostic> rebase(const std::vector<Diagnostic>& in, const std::string& prefix) {
  std::vector<Diagnostic> out = in;
  for (auto& d : out) d.pointer = prefix + d.pointer;
  return out;
}

std::string join_diagnostics(const std::vector<Diagnostic>& ds) {
  std::string out;
  for (const auto& d : ds) {
    out += out.empty() ? "" : "; ";
    out += d.file + ": " + (d.pointer.empty() ? std::string("(document)") : d.pointer) + ": " + d.message;
  }
  return out;
}

std::uint64_t fnv1a(std::uint64_t h, const std::string& s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// ---- sweep file -----------------------------------------------------------

std::vector<nlohmann::json> read_range(const nlohmann::json& v, const std::string& pointer, Diagnostics& d) {
  std::vector<nlohmann::json> values;
  ObjectReader r(v, pointer, d);
  if (!r.valid()) return values;
  const nlohmann::json* range = r.raw("range");
  const nlohmann::json* step_v = r.raw("step");
  const std::string scale = r.choice("scale", "linear", {"linear", "log2"});
  r.finish();
  if (range == nullptr) {
    r.error("range", "required [first, last] is missing");
    return values;
  }
  if (!range->is_array() || range->size() != 2 || !(*range)[0].is_number() || !(*range)[1].is_number()) {
    r.error("range", "expected [first, last] (two numbers), found " + describe_json_type(*range));
    return values;
  }
  if (step_v != nullptr && !step_v->is_number()) {
    r.error("step", "expected a positive number, found " + describe_json_type(*step_v));
    return values;
  }
  const double lo = (*range)[0].get<double>(), hi = (*range)[1].get<double>();
  const bool integral = (*range)[0].is_number_integer() && (*range)[1].is_number_integer() &&
                        (step_v == nullptr || step_v->is_number_integer());
  if (lo > hi) {
    r.error("range", "expected first <= last, found [" + (*range)[0].dump() + ", " + (*range)[1].dump() + "]");
    return values;
  }
  auto push = [&](double x) {
    if (integral) {
      values.emplace_back(static_cast<std::int64_t>(std::llround(x)));
    } else {
      values.emplace_back(x);
    }
  };
  if (scale == "log2") {
    if (step_v != nullptr) r.error("step", "\"step\" does not apply to \"scale\": \"log2\" (values double)");
    if (!(lo > 0)) r.error("range", "\"scale\": \"log2\" needs first > 0, found " + (*range)[0].dump());
    if (!d.ok()) return values;
    for (double x = lo; x <= hi * (1 + 1e-12) && values.size() <= kMaxAxisValues; x *= 2) push(x);
  } else {
    const double step = step_v != nullptr ? step_v->get<double>() : 1.0;
    if (!(step > 0)) {
      r.error("step", "expected a positive number, found " + step_v->dump());
      return values;
    }
    for (std::size_t i = 0; values.size() <= kMaxAxisValues; ++i) {
      const double x = lo + static_cast<double>(i) * step;
      if (x > hi + 1e-9 * step) break;
      push(x);
    }
  }
  if (values.size() > kMaxAxisValues) {
    r.error("range", "more than " + std::to_string(kMaxAxisValues) + " values");
    values.clear();
  }
  return values;
}

// A non-empty list of distinct names from `known`, as the values `kinds` in
// the order written; `fallback` when the key is absent.
template <class Kind>
std::vector<Kind> read_choice_list(ObjectReader& r, const char* key, const std::vector<std::string>& known,
                                   const std::vector<Kind>& kinds, std::vector<Kind> fallback) {
  const nlohmann::json* v = r.raw(key);
  if (v == nullptr) return fallback;
  std::string names;
  for (const std::string& k : known) names += (names.empty() ? "\"" : " | \"") + k + "\"";
  if (!v->is_array() || v->empty()) {
    r.error(key, "expected a non-empty array of " + names + ", found " + describe_json_type(*v));
    return fallback;
  }
  std::vector<Kind> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const auto& x = (*v)[i];
    const std::string name = x.is_string() ? x.get<std::string>() : "";
    const auto at = std::find(known.begin(), known.end(), name);
    if (at == known.end()) {
      std::string msg = "expected one of " + names + ", found " + describe_json_type(x);
      const std::string near = did_you_mean(name, known);
      if (!near.empty()) msg += " (did you mean \"" + near + "\"?)";
      r.diagnostics().error(json_pointer_append(r.at(key), i), msg);
      continue;
    }
    const Kind kind = kinds[static_cast<std::size_t>(at - known.begin())];
    if (std::find(out.begin(), out.end(), kind) == out.end()) out.push_back(kind);
  }
  return out.empty() ? fallback : out;
}

std::vector<int> read_int_list(ObjectReader& r, const char* key, std::vector<int> fallback, int lo, int hi) {
  const nlohmann::json* v = r.raw(key);
  if (v == nullptr) return fallback;
  std::vector<int> out;
  if (!v->is_array() || v->empty()) {
    r.error(key, "expected a non-empty array of integers, found " + describe_json_type(*v));
    return fallback;
  }
  for (std::size_t i = 0; i < v->size(); ++i) {
    const auto& x = (*v)[i];
    if (!x.is_number_integer() || x.get<std::int64_t>() < lo || x.get<std::int64_t>() > hi) {
      r.diagnostics().error(json_pointer_append(r.at(key), i), "expected an integer in [" + std::to_string(lo) + ", " +
                                                                   std::to_string(hi) + "], found " +
                                                                   describe_json_type(x));
      continue;
    }
    const int n = x.get<int>();
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

// Most "search_space.diloco" variants (each multiplies the layouts simulated).
constexpr std::size_t kMaxSearchDiloco = 16;

SearchSpace read_search_space(ObjectReader& top, std::vector<nlohmann::json>& diloco) {
  SearchSpace s;
  const nlohmann::json* v = top.raw("search_space");
  if (v == nullptr) return s;
  ObjectReader r(*v, top.at("search_space"), top.diagnostics());
  if (!r.valid()) return s;
  if (const nlohmann::json* dl = r.raw("diloco")) {
    if (!dl->is_array() || dl->empty() || dl->size() > kMaxSearchDiloco) {
      r.error("diloco", "expected an array of 1 to " + std::to_string(kMaxSearchDiloco) +
                            " \"diloco\" sections (objects, or null for none), found " + describe_json_type(*dl));
    } else {
      for (std::size_t i = 0; i < dl->size(); ++i) {
        const nlohmann::json& x = (*dl)[i];
        if (!x.is_null() && !x.is_object()) {
          r.diagnostics().error(json_pointer_append(r.at("diloco"), i),
                                "expected a \"diloco\" section (an object) or null, found " + describe_json_type(x));
        } else if (std::find(diloco.begin(), diloco.end(), x) == diloco.end()) {
          diloco.push_back(x);
        }
      }
    }
  }
  s.tp = read_int_list(r, "tp", {}, 1, 1 << 16);
  s.pp = read_int_list(r, "pp", {}, 1, 1 << 16);
  s.cp = read_int_list(r, "cp", {}, 1, 1 << 16);
  s.ep = read_int_list(r, "ep", {}, 1, 1 << 16);
  s.etp = read_int_list(r, "etp", {}, 1, 1 << 16);
  s.vpp = read_int_list(r, "vpp", s.vpp, 1, 1 << 10);
  s.micro_batch = read_int_list(r, "micro_batch", s.micro_batch, 1, 1 << 20);
  s.zero = read_int_list(r, "zero", s.zero, 0, 3);
  s.recompute = read_choice_list(r, "recompute", {"none", "selective", "full"},
                                 {Recompute::None, Recompute::Selective, Recompute::Full}, s.recompute);
  s.vpp_schedules = read_choice_list(r, "vpp_schedules", {"interleaved-1f1b", "breadth-first"},
                                     {ScheduleKind::Interleaved1F1B, ScheduleKind::BreadthFirst}, s.vpp_schedules);
  if (const nlohmann::json* sp = r.raw("sequence_parallel")) {
    if (!sp->is_array() || sp->empty()) {
      r.error("sequence_parallel", "expected a non-empty array of booleans, found " + describe_json_type(*sp));
    } else {
      s.sequence_parallel.clear();
      for (std::size_t i = 0; i < sp->size(); ++i) {
        if (!(*sp)[i].is_boolean()) {
          r.diagnostics().error(json_pointer_append(r.at("sequence_parallel"), i),
                                "expected true or false, found " + describe_json_type((*sp)[i]));
        } else if (std::find(s.sequence_parallel.begin(), s.sequence_parallel.end(), (*sp)[i].get<bool>()) ==
                   s.sequence_parallel.end()) {
          s.sequence_parallel.push_back((*sp)[i].get<bool>());
        }
      }
    }
  }
  s.prune_dominated = r.boolean("prune_dominated", true);
  r.finish();
  return s;
}

}  // namespace

const char* to_string(SweepStatus s) {
  switch (s) {
    case SweepStatus::Ok:
      return "ok";
    case SweepStatus::Infeasible:
      return "infeasible";
    case SweepStatus::Invalid:
      return "invalid";
    case SweepStatus::Error:
      return "error";
  }
  return "error";
}

std::vector<std::string> SweepPoint::set_args() const {
  std::vector<std::string> out;
  out.reserve(overrides.size());
  for (const auto& [key, value] : overrides) out.push_back(key + "=" + value.dump());
  return out;
}

const std::vector<std::string>& sweep_metrics() {
  static const std::vector<std::string> m{"tokens_per_s", "samples_per_s",    "tflops_per_gpu",  "mfu",
                                          "hfu",          "iteration_time_s", "peak_memory_gib", "ettr",
                                          "goodput_per_s"};
  return m;
}

bool metric_lower_is_better(const std::string& metric) {  // the others: higher is better
  return metric == "iteration_time_s" || metric == "peak_memory_gib";
}

SweepSpec load_sweep_text(const std::string& text, const std::string& file, const std::string& base_dir,
                          const Catalog& catalog, std::set<std::string>* keys_read) {
  (void)catalog;
  Diagnostics d(file);
  d.log_keys_to(keys_read);
  const std::optional<nlohmann::json> doc = parse_json_text(text, d);
  d.throw_if_errors();
  SweepSpec spec;
  spec.file = file;
  ObjectReader top(*doc, "", d);
  if (!top.valid()) d.throw_if_errors();
  spec.name = top.string("name", std::filesystem::path(file).stem().string());
  top.string("description", "");

  if (const nlohmann::json* base = top.raw("base")) {
    if (base->is_string()) {
      std::filesystem::path p = base->get<std::string>();
      if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
      std::string why;
      if (const auto t = read_text(p.string(), "cannot read the base scenario \"" + p.string() + "\"", &why)) {
        spec.base_text = *t;
        spec.base_file = p.string();
        spec.base_dir = p.parent_path().string();
      } else {
        top.error("base", why);
      }
    } else if (base->is_object()) {
      spec.base_text = base->dump();
      spec.base_file = file;
      spec.base_dir = base_dir;
      spec.base_pointer = "/base";
    } else {
      top.error("base",
                "expected a scenario file path or an inline scenario object, found " + describe_json_type(*base));
    }
  } else {
    top.error("base", "required base scenario (a file path or an inline scenario) is missing");
  }

  if (const nlohmann::json* axes = top.raw("axes")) {
    if (!axes->is_object() || axes->empty()) {
      top.error("axes", "expected an object of \"scenario.key\": [values] or {\"range\": [first, last]}, found " +
                            describe_json_type(*axes));
    } else {
      // Axis order is the file's order (the first axis varies slowest).
      const auto ordered = *parse_ordered_json_text(text, d);
      std::size_t product = 1;
      for (const auto& item : ordered["axes"].items()) {
        const std::string& key = item.key();
        const std::string ptr = json_pointer_append(top.at("axes"), key);
        const nlohmann::json& v = (*axes)[key];
        SweepAxis axis{key, {}};
        bool bad_key = false;
        for (const auto& part : split_path(key)) bad_key |= part.empty();
        if (bad_key) {
          d.error(ptr, "expected a scenario key path such as \"parallel.tp\", found \"" + key + "\"");
          continue;
        }
        if (v.is_array()) {
          if (v.empty()) d.error(ptr, "expected at least one value");
          for (const auto& x : v) axis.values.push_back(x);
        } else if (v.is_object()) {
          axis.values = read_range(v, ptr, d);
        } else {
          d.error(ptr, "expected an array of values or {\"range\": [first, last], \"step\"?, \"scale\"?}, found " +
                           describe_json_type(v));
        }
        if (axis.values.empty()) continue;
        product = std::min(product * axis.values.size(), kMaxPoints + 1);
        spec.axes.push_back(std::move(axis));
      }
      if (product > kMaxPoints) {
        top.error("axes", "the axes span more than " + std::to_string(kMaxPoints) + " points; split the sweep");
      }
    }
  }
  if (top.has("search")) {
    const std::string search = top.choice("search", "", {"auto", "mixed-fleet"});
    spec.auto_search = !search.empty();
    spec.mixed_fleet = search == "mixed-fleet";
    if (top.has("axes")) top.error("search", "give either \"axes\" or \"search\": \"auto\", not both");
  } else if (!top.has("axes")) {
    d.error("", "expected \"axes\" (a cartesian sweep) or \"search\": \"auto\" (every valid parallel layout)");
  }
  if (top.has("search_space") && !top.has("search")) {
    top.error("search_space", "\"search_space\" needs \"search\": \"auto\"");
  }
  spec.search_space = read_search_space(top, spec.search_diloco);
  if (!spec.search_diloco.empty() && spec.mixed_fleet) {
    top.error("search_space", "\"search_space\": {\"diloco\"} needs \"search\": \"auto\", not \"mixed-fleet\"");
  }
  spec.derive_dp = top.boolean("derive_dp", true);
  spec.top_k = static_cast<int>(top.integer("top_k", 10, 0, 1000000));
  spec.metric = top.choice("metric", "tokens_per_s", sweep_metrics());
  spec.fidelity =
      top.choice("fidelity", "analytical", {"analytical", "flow"}) == "flow" ? Fidelity::Flow : Fidelity::Analytical;
  if (const nlohmann::json* v = top.raw("verify")) {
    ObjectReader vr(*v, top.at("verify"), d);
    if (vr.valid()) {
      SweepVerify verify;
      vr.choice("fidelity", "flow", {"flow"});
      verify.top = static_cast<int>(vr.integer("top", 1, 1, 100000, true));
      if (spec.fidelity == verify.fidelity) {
        vr.error("fidelity", std::string("the sweep already runs at ") + to_string(spec.fidelity) +
                                 " fidelity; nothing to verify (remove \"verify\" or run at analytical fidelity)");
      }
      spec.verify = verify;
    }
    vr.finish();
  }
  top.finish();
  d.throw_if_errors();
  return spec;
}

void set_sweep_fidelity(SweepSpec& spec, Fidelity fidelity) {
  spec.fidelity = fidelity;
  if (spec.verify && spec.verify->fidelity == fidelity) {
    throw InputError(
        {Diagnostic{spec.file, "/verify/fidelity",
                    std::string("--fidelity ") + to_string(fidelity) + ": the sweep's points would already run at " +
                        to_string(fidelity) + " fidelity; nothing to verify (drop --fidelity or \"verify\")"}});
  }
}

SweepSpec load_sweep_file(const std::string& path, const Catalog& catalog) {
  std::string why;
  const auto text = read_text(path, "cannot open the sweep file", &why);
  if (!text) throw InputError({Diagnostic{path, "", why}});
  return load_sweep_text(*text, path, std::filesystem::path(path).parent_path().string(), catalog);
}

// ---- expansion ----------------------------------------------------------------

namespace {

nlohmann::json parse_base(const SweepSpec& spec) {
  Diagnostics d(spec.base_file);
  std::optional<nlohmann::json> doc = parse_json_text(spec.base_text, d);
  if (!d.ok()) throw InputError(rebase(d.items(), spec.base_pointer));
  if (!doc->is_object()) {
    throw InputError({Diagnostic{spec.base_file, spec.base_pointer,
                                 "expected a scenario object, found " + describe_json_type(*doc)}});
  }
  return *doc;
}

std::string fingerprint(const nlohmann::json& base, const SweepPlan& plan, bool auto_search) {
  std::uint64_t h = 1469598103934665603ULL;
  h = fnv1a(h, auto_search ? "auto\n" : "axes\n");
  // Shards run at different fidelities must not merge (analytical keeps the old fingerprints).
  if (plan.fidelity != Fidelity::Analytical) h = fnv1a(h, std::string("fidelity=") + to_string(plan.fidelity) + "\n");
  h = fnv1a(h, base.dump());
  for (const auto& p : plan.points) {
    h = fnv1a(h, "\n");
    for (const auto& [k, v] : p.overrides) h = fnv1a(h, k + "=" + v.dump() + ";");
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void expand_axes(const SweepSpec& spec, const nlohmann::json& base, const Catalog& catalog, SweepPlan& plan) {
  bool axis_sets_dp = false;
  for (const auto& a : spec.axes) {
    plan.columns.push_back(a.key);
    axis_sets_dp |= a.key == "parallel.dp";
  }
  const bool derive = spec.derive_dp && !axis_sets_dp;
  if (derive) plan.columns.push_back("parallel.dp");
  std::size_t total = 1;
  for (const auto& a : spec.axes) total *= a.values.size();
  std::vector<std::size_t> digit(spec.axes.size(), 0);
  std::map<std::string, std::string> unknown_axis;  // axis key -> loader message
  for (std::size_t i = 0; i < total; ++i) {
    // Row-major: the last axis varies fastest.
    std::size_t rest = i;
    for (std::size_t a = spec.axes.size(); a-- > 0;) {
      digit[a] = rest % spec.axes[a].values.size();
      rest /= spec.axes[a].values.size();
    }
    SweepPoint p;
    p.index = i;
    for (std::size_t a = 0; a < spec.axes.size(); ++a) {
      p.overrides.emplace_back(spec.axes[a].key, spec.axes[a].values[digit[a]]);
    }
    if (derive) {
      nlohmann::json doc = base;
      for (const auto& [k, v] : p.overrides) set_key(doc, k, v);
      const std::int64_t gpus = doc.contains("cluster") ? cluster_gpus(doc["cluster"], catalog) : 0;
      const nlohmann::json par = doc.contains("parallel") ? doc["parallel"] : nlohmann::json::object();
      const std::int64_t per_replica = int_or(par, "tp", 1) * int_or(par, "pp", 1) * int_or(par, "cp", 1);
      if (gpus > 0 && per_replica > 0 && gpus % per_replica == 0) {
        p.overrides.emplace_back("parallel.dp", gpus / per_replica);
      }
    }
    // Validate with the scenario loader (cheap): count invalid points, catch misspelt axes.
    try {
      load_scenario_text(spec.base_text, spec.base_file, spec.base_dir, p.set_args(), catalog);
    } catch (const InputError& e) {
      ++plan.invalid;
      for (const auto& diag : e.diagnostics()) {
        for (const auto& a : spec.axes) {
          const std::string ptr = key_pointer(a.key);
          const bool unknown = diag.message.rfind("unknown key", 0) == 0 && diag.pointer == ptr;
          const bool blocked = diag.message.rfind("--set \"" + a.key + "=", 0) == 0;
          if (unknown || blocked) unknown_axis.emplace(a.key, diag.message);
        }
      }
    }
    plan.points.push_back(std::move(p));
  }
  if (!unknown_axis.empty()) {
    std::vector<Diagnostic> ds;
    for (const auto& [key, msg] : unknown_axis) {
      ds.push_back(
          Diagnostic{spec.file, json_pointer_append("/axes", key), "not a key the base scenario accepts: " + msg});
    }
    throw InputError(ds);
  }
  plan.grid = total;
}

void expand_auto(const SweepSpec& spec, const nlohmann::json& base, const Catalog& catalog, SweepPlan& plan) {
  const std::string ptr = spec.base_pointer;
  if (!base.contains("cluster")) {
    throw InputError({Diagnostic{spec.base_file, ptr + "/cluster", "the auto-search needs the base's cluster"}});
  }
  // Probe: the base with a trivially valid layout, to read model, cluster, training, profiles.
  const std::int64_t gpus_guess = cluster_gpus(base["cluster"], catalog);
  nlohmann::json probe = base;
  probe["parallel"] = {{"dp", std::max<std::int64_t>(gpus_guess, 1)},
                       {"global_batch", std::max<std::int64_t>(gpus_guess, 1)}};
  Scenario s;
  try {
    s = load_scenario_text(probe.dump(), spec.base_file, spec.base_dir, {}, catalog);
  } catch (const InputError& e) {
    throw InputError(rebase(e.diagnostics(), ptr));
  }
  // The parts of the base's parallel section the search keeps.
  Diagnostics d(spec.base_file);
  int global_batch = 1;
  // DeepSpeed's engine runs its own TrainSchedule (docs/schedules.md).
  const bool deepspeed = s.training.framework == Framework::DeepSpeed;
  std::string schedule = deepspeed ? "deepspeed-1f1b" : "1f1b";
  if (!base.contains("parallel")) {
    d.error(ptr + "/parallel", "the auto-search needs parallel.global_batch in the base scenario");
  } else {
    ObjectReader r(base["parallel"], ptr + "/parallel", d);
    global_batch = static_cast<int>(r.integer("global_batch", 1, 1, 1 << 30, true));
    if (r.has("stage_layers")) r.error("stage_layers", "the auto-search splits layers evenly; remove stage_layers");
    schedule = r.choice("schedule", schedule,
                        {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-v", "dualpipe-v",
                         "breadth-first", "pipedream", "pipedream-2bw", "deepspeed-1f1b", "deepspeed-1f1b-legacy"});
  }
  d.throw_if_errors();

  const NodeSpec& node = s.cluster.groups.front().node;
  double reserved = 0;
  for (const auto& p : s.profiles) {
    if (p.gpu == node.gpu.name) reserved = p.memory_reserved.value;
  }
  ParallelSpec base_parallel;
  base_parallel.global_batch = global_batch;
  base_parallel.schedule = ScheduleKind::OneFOneB;
  for (ScheduleKind k :
       {ScheduleKind::GPipe, ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleH2, ScheduleKind::ZeroBubble1p,
        ScheduleKind::ZeroBubble2p, ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV, ScheduleKind::PipeDream,
        ScheduleKind::PipeDream2BW, ScheduleKind::DeepSpeed1F1B, ScheduleKind::DeepSpeed1F1BLegacy}) {
    if (schedule == to_string(k)) base_parallel.schedule = k;
  }
  if (is_deepspeed_schedule(base_parallel.schedule)) base_parallel.pp_overlap = false;  // blocking send/recv
  // Enumeration and pruning live with the layout rules (models/layout_search.hpp).
  const LayoutSearchResult found = search_layouts(s.model, s.training, s.cluster, base_parallel,
                                                  node.gpu.memory_bytes - reserved, spec.search_space);
  plan.grid = found.grid;
  plan.invalid = found.invalid;
  plan.redundant = found.redundant;
  plan.pruned_oom = found.pruned_oom;
  plan.pruned_dominated = found.pruned_dominated;
  plan.columns = {
      "parallel.tp",       "parallel.pp",          "parallel.dp",        "parallel.cp",   "parallel.vpp",
      "parallel.schedule", "parallel.micro_batch", "parallel.recompute", "parallel.zero", "parallel.sequence_parallel"};
  if (s.model.moe.enabled()) {
    plan.columns.push_back("parallel.ep");
    plan.columns.push_back("parallel.etp");
  }
  std::size_t invalid_variants = 0;  // (layout, DiLoCo variant) points the loader refuses
  for (const ParallelSpec& c : found.candidates) {
    SweepPoint p;
    p.index = plan.points.size();
    p.overrides = {{"parallel.tp", c.tp},
                   {"parallel.pp", c.pp},
                   {"parallel.dp", c.dp},
                   {"parallel.cp", c.cp},
                   {"parallel.vpp", c.vpp},
                   {"parallel.schedule", to_string(c.schedule)},
                   {"parallel.micro_batch", c.micro_batch},
                   {"parallel.recompute", to_string(c.recompute)},
                   {"parallel.zero", c.zero},
                   {"parallel.sequence_parallel", c.sequence_parallel}};
    if (s.model.moe.enabled()) {
      p.overrides.emplace_back("parallel.ep", c.ep);
      p.overrides.emplace_back("parallel.etp", c.etp > 0 ? c.etp : c.tp);
    }
    if (spec.search_diloco.empty()) {
      plan.points.push_back(std::move(p));
      continue;
    }
    // Each layout with each DiLoCo variant the loader accepts (dp a multiple
    // of the sites, a replica inside one site, ...); the others count as invalid.
    for (const nlohmann::json& diloco : spec.search_diloco) {
      SweepPoint q = p;
      q.index = plan.points.size();
      q.overrides.emplace_back("diloco", diloco);
      if (!diloco.is_null()) {
        try {
          load_scenario_text(spec.base_text, spec.base_file, spec.base_dir, q.set_args(), catalog);
        } catch (const InputError&) {
          ++invalid_variants;
          continue;
        }
      }
      plan.points.push_back(std::move(q));
    }
  }
  if (!spec.search_diloco.empty()) {  // the layout counts, once per variant
    const std::size_t k = spec.search_diloco.size();
    plan.columns.push_back("diloco");
    plan.grid *= k;
    plan.invalid = plan.invalid * k + invalid_variants;
    plan.redundant *= k;
    plan.pruned_oom *= k;
    plan.pruned_dominated *= k;
  }
}

// "search": "mixed-fleet" (docs/heterogeneous.md): every plan of the mixed-fleet
// search, as per-stage layouts; the plans with group -1 treat every GPU alike.
void expand_mixed_fleet(const SweepSpec& spec, const nlohmann::json& base, const Catalog& catalog, SweepPlan& plan) {
  const std::string ptr = spec.base_pointer;
  if (!base.contains("cluster") || !base.contains("parallel") || !base["parallel"].is_object()) {
    throw InputError({Diagnostic{spec.base_file, ptr, "the mixed-fleet search needs the base's cluster and parallel"}});
  }
  const std::int64_t gpus = std::max<std::int64_t>(cluster_gpus(base["cluster"], catalog), 1);
  nlohmann::json probe = base;
  probe["parallel"] = {{"dp", gpus}, {"global_batch", gpus}};
  Scenario s;
  try {
    s = load_scenario_text(probe.dump(), spec.base_file, spec.base_dir, {}, catalog);
  } catch (const InputError& e) {
    throw InputError(rebase(e.diagnostics(), ptr));
  }
  Diagnostics d(spec.base_file);
  ObjectReader r(base["parallel"], ptr + "/parallel", d);
  ParallelSpec par;
  par.global_batch = static_cast<int>(r.integer("global_batch", 1, 1, 1 << 30, true));
  d.throw_if_errors();
  std::vector<double> capacity;
  for (const auto& g : s.cluster.groups) {
    double reserved = 0;
    for (const auto& p : s.profiles) {
      if (p.gpu == g.node.gpu.name) reserved = p.memory_reserved.value;
    }
    capacity.push_back(g.node.gpu.memory_bytes - reserved);
  }
  MixedFleetSearchSpace space;
  if (!spec.search_space.micro_batch.empty()) space.micro_batch = spec.search_space.micro_batch;
  if (!spec.search_space.tp.empty()) space.tp = spec.search_space.tp;
  const MixedFleetSearchResult found = search_mixed_fleet(s.model, s.training, s.cluster, par, capacity, space);
  plan.grid = found.enumerated;
  plan.invalid = found.invalid;
  plan.pruned_oom = found.pruned_oom;
  plan.columns = {"parallel.pp", "parallel.dp", "parallel.micro_batch", "parallel.stages"};
  for (const MixedFleetCandidate& c : found.candidates) {
    nlohmann::json stages = nlohmann::json::array();
    for (const StageLayout& st : c.par.stages) {
      nlohmann::json j = {{"tp", st.tp}, {"layers", st.layers}};
      if (st.group >= 0) j["group"] = st.group;
      if (st.dp > 0) j["dp"] = st.dp;
      if (st.cp > 0) j["cp"] = st.cp;
      if (st.micro_batch > 0) j["micro_batch"] = st.micro_batch;
      stages.push_back(j);
    }
    SweepPoint p;
    p.index = plan.points.size();
    p.overrides = {{"parallel.pp", c.par.pp},
                   {"parallel.dp", c.par.dp},
                   {"parallel.micro_batch", c.par.micro_batch},
                   {"parallel.stages", stages}};
    plan.points.push_back(std::move(p));
  }
}

}  // namespace

SweepPlan expand_sweep(const SweepSpec& spec, const Catalog& catalog) {
  const nlohmann::json base = parse_base(spec);
  SweepPlan plan;
  plan.fidelity = spec.fidelity;
  plan.verify = spec.verify;
  if (spec.mixed_fleet) {
    expand_mixed_fleet(spec, base, catalog, plan);
  } else if (spec.auto_search) {
    expand_auto(spec, base, catalog, plan);
  } else {
    expand_axes(spec, base, catalog, plan);
  }
  plan.id = fingerprint(base, plan, spec.auto_search);
  return plan;
}

std::string sweep_summary(const SweepSpec& spec, const SweepPlan& plan) {
  auto n = [](std::size_t x) { return std::to_string(x); };
  if (!spec.auto_search) {
    std::string out =
        "sweep " + spec.name + ": " + n(plan.points.size()) + " points over " + n(spec.axes.size()) + " axes";
    if (plan.invalid > 0) out += ", " + n(plan.invalid) + " rejected by the scenario rules (reported as invalid)";
    return out + "\n";
  }
  return "auto-search " + spec.name + ": " + n(plan.grid) +
         " combinations; pruned before simulation: " + n(plan.invalid) + " invalid, " + n(plan.redundant) +
         " redundant, " + n(plan.pruned_oom) + " out of memory, " + n(plan.pruned_dominated) + " dominated; " +
         n(plan.points.size()) + " to simulate\n";
}

// ---- shards -------------------------------------------------------------------

Shard parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  auto parse = [](const std::string& s, int* out) {
    if (s.empty() || s.size() > 7 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    *out = std::stoi(s);
    return true;
  };
  Shard sh;
  if (slash == std::string::npos || !parse(text.substr(0, slash), &sh.k) || !parse(text.substr(slash + 1), &sh.n) ||
      sh.k < 1 || sh.k > sh.n) {
    throw InputError({Diagnostic{"--shard", "", "expected K/N with 1 <= K <= N (e.g. 1/4), found \"" + text + "\""}});
  }
  return sh;
}

std::vector<SweepPoint> shard_points(const std::vector<SweepPoint>& points, Shard shard) {
  std::vector<SweepPoint> out;
  for (const auto& p : points) {
    if (p.index % static_cast<std::size_t>(shard.n) == static_cast<std::size_t>(shard.k - 1)) out.push_back(p);
  }
  return out;
}

// ---- running ------------------------------------------------------------------

namespace {

// Loads the point (base + overrides) and simulates it; InputError -> Invalid.
struct PointRun {
  SweepStatus status = SweepStatus::Ok;
  JobReport report;
  std::string error;
};

PointRun simulate_point(const SweepPoint& p, const SweepSpec& spec, const Catalog& catalog, Fidelity fidelity) {
  PointRun run;
  try {
    const Scenario s = load_scenario_text(spec.base_text, spec.base_file, spec.base_dir, p.set_args(), catalog);
    if ((spec.metric == "ettr" || spec.metric == "goodput_per_s") && !s.reliability) {
      throw InputError({Diagnostic{
          spec.base_file, "/reliability",
          "the sweep ranks by " + spec.metric + ", which needs a \"reliability\" section (docs/faults.md)"}});
    }
    run.report = simulate(s, fidelity);
    run.report.wall_time_s = 0;  // host time would make the output depend on the machine
    run.status = run.report.feasible ? SweepStatus::Ok : SweepStatus::Infeasible;
    for (const auto& pr : run.report.problems) run.error += (run.error.empty() ? "" : "; ") + pr;
  } catch (const InputError& e) {
    run.status = SweepStatus::Invalid;
    run.error = join_diagnostics(rebase(e.diagnostics(), spec.base_pointer));
  } catch (const std::exception& e) {
    run.status = SweepStatus::Error;
    run.error = e.what();
  }
  return run;
}

SweepRow run_point(const SweepPoint& p, const SweepSpec& spec, const Catalog& catalog) {
  SweepRow row;
  row.index = p.index;
  row.overrides = p.overrides;
  row.fidelity = spec.fidelity;
  PointRun run = simulate_point(p, spec, catalog, spec.fidelity);
  row.status = run.status;
  row.report = std::move(run.report);
  row.error = std::move(run.error);
  return row;
}

// Runs job(i) for i in [0, total) on `threads` workers (<= 0: hardware
// concurrency); progress after each, never concurrently.
void run_pool(std::size_t total, int threads, const std::function<void(std::size_t)>& job,
              const SweepProgress& progress) {
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::size_t done = 0;
  if (progress) progress(0, total);
  auto worker = [&] {
    while (true) {
      const std::size_t i = next.fetch_add(1);
      if (i >= total) return;
      job(i);
      const std::lock_guard<std::mutex> lock(mu);
      ++done;
      if (progress) progress(done, total);
    }
  };
  std::size_t n = threads > 0 ? static_cast<std::size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  n = std::max<std::size_t>(1, std::min(n, total));
  if (n == 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(n);
    for (std::size_t t = 0; t < n; ++t) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
}

// A ranking metric of sweep_metrics().
double sweep_metric(const JobReport& r, const std::string& metric) {
  if (metric == "samples_per_s") return r.samples_per_s;
  if (metric == "hfu") return r.hfu;
  if (metric == "peak_memory_gib") return r.peak_memory_gib;
  return metric_value(r, metric);
}

// Positions of the `ok` rows, best first by metric (ties by index).
std::vector<std::size_t> ranked_ok_rows(const std::vector<SweepRow>& rows, const std::string& metric) {
  std::vector<std::size_t> ok;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].status == SweepStatus::Ok) ok.push_back(i);
  }
  const bool lower = metric_lower_is_better(metric);
  std::stable_sort(ok.begin(), ok.end(), [&](std::size_t a, std::size_t b) {
    const double x = sweep_metric(rows[a].report, metric), y = sweep_metric(rows[b].report, metric);
    if (x != y) return lower ? x < y : x > y;
    return rows[a].index < rows[b].index;
  });
  return ok;
}

}  // namespace

std::vector<SweepRow> run_sweep(const std::vector<SweepPoint>& points, int threads, const SweepSpec& spec,
                                const Catalog& catalog, const SweepProgress& progress) {
  std::vector<SweepRow> rows(points.size());
  run_pool(
      points.size(), threads, [&](std::size_t i) { rows[i] = run_point(points[i], spec, catalog); }, progress);
  return rows;
}

void verify_sweep(std::vector<SweepRow>& rows, int threads, const SweepSpec& spec, const Catalog& catalog,
                  const SweepProgress& progress) {
  if (!spec.verify) return;
  std::vector<std::size_t> best = ranked_ok_rows(rows, spec.metric);
  if (best.size() > static_cast<std::size_t>(spec.verify->top)) best.resize(static_cast<std::size_t>(spec.verify->top));
  const Fidelity fidelity = spec.verify->fidelity;
  run_pool(
      best.size(), threads,
      [&](std::size_t k) {
        SweepRow& row = rows[best[k]];
        SweepPoint point;
        point.index = row.index;
        point.overrides = row.overrides;
        PointRun run = simulate_point(point, spec, catalog, fidelity);
        SweepVerification v;
        v.fidelity = fidelity;
        v.first_rank = k + 1;
        v.status = run.status;
        v.report = std::move(run.report);
        v.error = std::move(run.error);
        row.verified = std::move(v);
      },
      progress);
}

// ---- progress -----------------------------------------------------------------

namespace {
std::string duration_text(double s) {
  if (s < 60) return fmt("%.1f s", s);
  const long total = std::lround(s);
  if (total < 3600) return std::to_string(total / 60) + "m" + fmt("%02.0f", static_cast<double>(total % 60)) + "s";
  return std::to_string(total / 3600) + "h" + fmt("%02.0f", static_cast<double>(total / 60 % 60)) + "m";
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

std::string progress_line(std::size_t done, std::size_t total, double elapsed_s, bool tty) {
  const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const std::string eta =
      done == 0       ? std::string("?")
      : done >= total ? std::string("0.0 s")
                      : duration_text(elapsed_s / static_cast<double>(done) * static_cast<double>(total - done));
  const std::string counts = std::to_string(done) + "/" + std::to_string(total);
  const std::string pct = fmt("%.0f%%", 100 * frac);
  if (!tty) {
    return "sweep: " + counts + " points (" + pct + "), " + duration_text(elapsed_s) + " elapsed, ETA " + eta;
  }
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar += std::string(static_cast<std::size_t>(kWidth - filled), '.');
  return "\r[" + bar + "] " + counts + "  " + pct + "  " + duration_text(elapsed_s) + ", ETA " + eta + "\x1b[K";
}

SweepProgressPrinter::SweepProgressPrinter(std::ostream& out, bool tty) : out_(&out), tty_(tty), start_(now_s()) {}

void SweepProgressPrinter::operator()(std::size_t done, std::size_t total) {
  const double t = now_s() - start_;
  if (tty_) {
    if (done < total && last_draw_ >= 0 && t - last_draw_ < 0.1) return;
    last_draw_ = t;
    drawn_ = true;
    *out_ << progress_line(done, total, t, true) << std::flush;
    return;
  }
  if (total == 0 || done == 0) return;
  const std::size_t decile = done * 10 / total;
  if (decile <= last_decile_ && done < total) return;
  if (done == total && last_decile_ == 10) return;
  last_decile_ = decile;
  *out_ << progress_line(done, total, t, false) << "\n" << std::flush;
}

void SweepProgressPrinter::finish() {
  if (tty_ && drawn_) *out_ << "\n" << std::flush;
  drawn_ = false;
}

// ---- output -------------------------------------------------------------------

namespace {
// The flattened result fields of one simulation, each column name prefixed; null when it did not run.
void add_result_columns(nlohmann::ordered_json& j, const std::string& prefix, bool ran, const JobReport& r) {
  auto num = [&](const std::string& key, double x) {
    j[prefix + key] = ran ? nlohmann::ordered_json(x) : nlohmann::ordered_json();
  };
  j[prefix + "gpus"] = ran ? nlohmann::ordered_json(r.gpus) : nlohmann::ordered_json();
  num("iteration_time_s", r.iteration_time_s);
  num("tokens_per_s", r.tokens_per_s);
  num("samples_per_s", r.samples_per_s);
  num("tflops_per_gpu", r.tflops_per_gpu);
  num("mfu", r.mfu);
  num("hfu", r.hfu);
  num("peak_memory_gib", r.peak_memory_gib);
  num("breakdown.compute_s", r.breakdown.compute_s);
  for (std::size_t c = 0; c < kNumCommClasses; ++c) {
    num(std::string("breakdown.exposed_comm_s.") + to_string(static_cast<CommClass>(c)), r.breakdown.exposed_comm_s[c]);
  }
  num("breakdown.bubble_s", r.breakdown.bubble_s);
  num("breakdown.idle_s", r.breakdown.idle_s);
  j[prefix + "feasible"] = ran && r.feasible;
  j[prefix + "events"] = ran ? nlohmann::ordered_json(r.events) : nlohmann::ordered_json();
  j[prefix + "simulated_ranks"] = ran ? nlohmann::ordered_json(r.simulated_ranks) : nlohmann::ordered_json();
  if (ran && r.reliability) {  // failures over the job's life (docs/faults.md)
    num("ettr", r.reliability->ettr_mean);
    num("goodput_per_s", r.reliability->goodput_units_per_s);
    num("checkpoint_interval_s", r.reliability->checkpoint_interval_s);
    num("interruptions_expected", r.reliability->interruptions_expected);
  }
  if (ran && r.diloco) {  // low-communication training across datacenters (docs/cross-datacenter.md)
    num("compute_utilization", r.diloco->timing.compute_utilization);
    num("wan_bytes_per_token", r.diloco->wan_bytes_per_token);
    num("diloco.outer_step_s", r.diloco->timing.outer_step_s);
  }
}
}  // namespace

nlohmann::ordered_json sweep_row_json(const SweepRow& row, const SweepPlan& plan) {
  nlohmann::ordered_json j;
  j["index"] = row.index;
  j["sweep"] = plan.id;
  j["points"] = plan.points.size();
  j["status"] = to_string(row.status);
  j["fidelity"] = to_string(row.fidelity);
  for (const auto& col : plan.columns) {
    nlohmann::ordered_json v = nullptr;
    for (const auto& [k, x] : row.overrides) {
      if (k == col) v = nlohmann::ordered_json::parse(x.dump());
    }
    j[col] = v;
  }
  const bool ran = row.status == SweepStatus::Ok || row.status == SweepStatus::Infeasible;
  add_result_columns(j, "", ran, row.report);
  j["error"] = row.error;
  if (plan.verify) {
    const SweepVerification* v = row.verified ? &*row.verified : nullptr;
    j["verify.fidelity"] = v != nullptr ? nlohmann::ordered_json(to_string(v->fidelity)) : nlohmann::ordered_json();
    j["verify.status"] = v != nullptr ? nlohmann::ordered_json(to_string(v->status)) : nlohmann::ordered_json();
    j["verify.first_rank"] = v != nullptr ? nlohmann::ordered_json(v->first_rank) : nlohmann::ordered_json();
    const bool vran = v != nullptr && (v->status == SweepStatus::Ok || v->status == SweepStatus::Infeasible);
    add_result_columns(j, "verify.", vran, v != nullptr ? v->report : JobReport{});
    j["verify.error"] = v != nullptr ? nlohmann::ordered_json(v->error) : nlohmann::ordered_json();
  }
  return j;
}

namespace {
// Enough of a plan to print rows: their override keys, and verify columns when a row has them.
SweepPlan plan_of_rows(const std::vector<SweepRow>& rows) {
  SweepPlan plan;
  std::set<std::string> have;
  for (const auto& r : rows) {
    for (const auto& [key, v] : r.overrides) {
      if (have.insert(key).second) plan.columns.push_back(key);
    }
    if (r.verified) plan.verify = SweepVerify{r.verified->fidelity, 0};
  }
  return plan;
}
}  // namespace

std::vector<nlohmann::ordered_json> sweep_rows_json(const std::vector<SweepRow>& rows, const SweepPlan& plan) {
  std::vector<nlohmann::ordered_json> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back(sweep_row_json(r, plan));
  return out;
}

SweepFormat sweep_format_for_path(const std::string& path) {
  if (path.ends_with(".csv")) return SweepFormat::Csv;
  if (path.ends_with(".jsonl") || path.ends_with(".ndjson")) return SweepFormat::Jsonl;
  throw InputError({Diagnostic{path, "", "unknown output format: expected a .csv or .jsonl file name"}});
}

namespace {
std::string csv_cell(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "";
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}
}  // namespace

std::string format_sweep_rows(const std::vector<nlohmann::ordered_json>& rows, SweepFormat format) {
  std::string out;
  if (format == SweepFormat::Jsonl) {
    for (const auto& r : rows) out += r.dump() + "\n";
    return out;
  }
  std::vector<std::string> cols;
  std::set<std::string> have;
  for (const auto& r : rows) {
    for (const auto& item : r.items()) {
      if (have.insert(item.key()).second) cols.push_back(item.key());
    }
  }
  for (std::size_t c = 0; c < cols.size(); ++c) out += (c ? "," : "") + csv_cell(cols[c]);
  out += "\n";
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < cols.size(); ++c) {
      out += c ? "," : "";
      if (r.contains(cols[c])) out += csv_cell(r[cols[c]]);
    }
    out += "\n";
  }
  return out;
}

void write_sweep_rows(const std::string& path, const std::vector<nlohmann::ordered_json>& rows) {
  const SweepFormat f = sweep_format_for_path(path);
  write_text_file(path, format_sweep_rows(rows, f));
}

// ---- merge ----------------------------------------------------------------------

namespace {
// What is wrong with a row read back from a shard output, or "": every field the
// merged tables read must be there with its type (a hand-edited or truncated row
// is an error naming its line, never a crash in the table).
std::string sweep_row_problem(const nlohmann::ordered_json& row) {
  static const std::vector<std::string> statuses{"ok", "infeasible", "invalid", "error"};
  auto is_status = [&](const nlohmann::ordered_json& v) {
    return v.is_string() && std::find(statuses.begin(), statuses.end(), v.get<std::string>()) != statuses.end();
  };
  auto check_results = [&](const std::string& prefix) -> std::string {
    const std::string status_key = prefix + "status";
    if (!row.contains(status_key) || !is_status(row[status_key])) {
      return "expected \"" + status_key + "\" to be one of \"ok\", \"infeasible\", \"invalid\", \"error\"";
    }
    if (!row.contains(prefix + "fidelity") || !row[prefix + "fidelity"].is_string()) {
      return "expected \"" + prefix + "fidelity\" to be a string";
    }
    const std::string status = row[status_key].get<std::string>();
    if (status == "ok" || status == "infeasible") {
      for (const std::string& m : sweep_metrics()) {
        // Failure-model columns exist only for scenarios with a "reliability" section.
        const bool optional = m == "ettr" || m == "goodput_per_s";
        if (optional && !row.contains(prefix + m)) continue;
        if (!row.contains(prefix + m) || !row[prefix + m].is_number()) {
          return "a row with status \"" + status + "\" needs the number \"" + prefix + m + "\"";
        }
      }
    }
    if (!row.contains(prefix + "error") || !row[prefix + "error"].is_string()) {
      return "expected \"" + prefix + "error\" to be a string";
    }
    return "";
  };
  if (std::string p = check_results(""); !p.empty()) return p;
  if (row.contains("verify.status") && !row["verify.status"].is_null()) {
    if (!row.contains("verify.first_rank") || !row["verify.first_rank"].is_number_unsigned()) {
      return "a verified row needs the rank \"verify.first_rank\"";
    }
    if (std::string p = check_results("verify."); !p.empty()) return p;
  }
  return "";
}
}  // namespace

SweepMerge merge_sweep_texts(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<Diagnostic> errors;
  SweepMerge m;
  std::string sweep_id, id_from;
  std::map<std::size_t, std::string> where;  // index -> "file line N"
  for (const auto& file : files) {
    // Named references, not a structured binding: the lambda below captures them (clang < 16).
    const std::string& name = file.first;
    const std::string& text = file.second;
    if (name.ends_with(".csv")) {
      errors.push_back(Diagnostic{name, "", "merge reads JSONL shard outputs; write the shards with --out *.jsonl"});
      continue;
    }
    std::istringstream in(text);
    std::string line;
    for (std::size_t ln = 1; std::getline(in, line); ++ln) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto bad = [&](const std::string& msg) {
        errors.push_back(Diagnostic{name, "", "line " + std::to_string(ln) + ": " + msg});
      };
      Diagnostics scratch(name);
      std::optional<nlohmann::ordered_json> parsed = parse_ordered_json_text(line, scratch);
      if (!parsed) {
        bad("not a JSON row of a sweep output");
        continue;
      }
      nlohmann::ordered_json row = std::move(*parsed);
      if (!row.is_object() || !row.contains("index") || !row["index"].is_number_unsigned() || !row.contains("sweep") ||
          !row["sweep"].is_string() || !row.contains("points") || !row["points"].is_number_unsigned()) {
        bad("expected a sweep output row with \"index\", \"sweep\" and \"points\"");
        continue;
      }
      if (const std::string problem = sweep_row_problem(row); !problem.empty()) {
        bad(problem);
        continue;
      }
      const auto index = row["index"].get<std::size_t>();
      const auto points = row["points"].get<std::size_t>();
      const std::string id = row["sweep"].get<std::string>();
      const std::string here = name + " line " + std::to_string(ln);
      if (sweep_id.empty()) {
        sweep_id = id;
        id_from = here;
        m.points = points;
      } else if (id != sweep_id || points != m.points) {
        bad("row of sweep " + id + " (" + std::to_string(points) + " points), but " + id_from + " is of sweep " +
            sweep_id + " (" + std::to_string(m.points) + " points): outputs of different sweeps");
        continue;
      }
      if (index >= points) {
        bad("point index " + std::to_string(index) + " outside the sweep's " + std::to_string(points) + " points");
        continue;
      }
      const auto [it, fresh] = where.emplace(index, here);
      if (!fresh) {
        bad("point " + std::to_string(index) + " is also in " + it->second + " (overlapping shards)");
        continue;
      }
      m.rows.push_back(std::move(row));
    }
  }
  if (!errors.empty()) throw InputError(errors);
  std::sort(m.rows.begin(), m.rows.end(), [](const auto& a, const auto& b) {
    return a["index"].template get<std::size_t>() < b["index"].template get<std::size_t>();
  });
  m.missing = m.points - m.rows.size();
  return m;
}

SweepMerge merge_sweep_files(const std::vector<std::string>& paths) {
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<Diagnostic> errors;
  for (const auto& p : paths) {
    std::string why;
    if (const auto t = read_text(p, "cannot open the shard output", &why)) {
      files.emplace_back(p, *t);
    } else {
      errors.push_back(Diagnostic{p, "", why});
    }
  }
  if (!errors.empty()) throw InputError(errors);
  return merge_sweep_texts(files);
}

// ---- top-k ------------------------------------------------------------------------

namespace {

// Override columns sit between "status" / "fidelity" and the first result field ("gpus").
std::vector<std::string> config_columns(const nlohmann::ordered_json& row) {
  std::vector<std::string> cols;
  bool in = false;
  for (const auto& item : row.items()) {
    if (item.key() == "gpus") break;
    if (in && item.key() != "fidelity") cols.push_back(item.key());
    if (item.key() == "status") in = true;
  }
  return cols;
}

std::string config_text(const nlohmann::ordered_json& r, const std::vector<std::string>& cols) {
  std::string c;
  for (const auto& col : cols) {
    const auto& v = r[col];
    if (v.is_null()) continue;
    const std::string shortname = col.substr(col.rfind('.') == std::string::npos ? 0 : col.rfind('.') + 1);
    c += (c.empty() ? "" : " ") + shortname + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return c;
}

bool better(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b, const std::string& key, bool lower) {
  const double x = a[key].template get<double>(), y = b[key].template get<double>();
  if (x != y) return lower ? x < y : x > y;
  return a["index"].template get<std::size_t>() < b["index"].template get<std::size_t>();
}

bool standard_metric(const std::string& metric) {
  return metric == "tokens_per_s" || metric == "iteration_time_s" || metric == "mfu" || metric == "peak_memory_gib";
}

}  // namespace

std::string top_k_table(const std::vector<nlohmann::ordered_json>& rows, std::size_t k, const std::string& metric) {
  if (k == 0) return "";
  const bool lower = metric_lower_is_better(metric);
  std::vector<const nlohmann::ordered_json*> ok;
  for (const auto& r : rows) {
    if (r.value("status", "") == "ok" && r.contains(metric) && r[metric].is_number()) ok.push_back(&r);
  }
  if (ok.empty()) return "no feasible point to rank by " + metric + "\n";
  std::stable_sort(ok.begin(), ok.end(), [&](const auto* a, const auto* b) { return better(*a, *b, metric, lower); });
  if (ok.size() > k) ok.resize(k);
  const std::vector<std::string> cfg_cols = config_columns(*ok.front());
  std::vector<std::string> configs;
  std::size_t width = 6;
  for (const auto* r : ok) {
    configs.push_back(config_text(*r, cfg_cols));
    width = std::max(width, configs.back().size());
  }
  const std::string fidelity = ok.front()->value("fidelity", "");
  std::string out = "top " + std::to_string(ok.size()) + " by " + metric + " (" + (lower ? "lower" : "higher") +
                    " is better)" + (fidelity.empty() ? "" : ", " + fidelity + " fidelity") + "\n";
  char line[128];
  std::snprintf(line, sizeof line, "%4s %6s  ", "rank", "point");
  out += line + std::string("config") + std::string(width - 6, ' ');
  // The ranking metric gets its own column unless one of the standard ones shows it.
  const bool extra = !standard_metric(metric);
  std::snprintf(line, sizeof line, "  %12s %10s %7s %9s", "tokens/s", "iter s", "MFU", "mem GiB");
  out += line;
  if (extra) {
    std::snprintf(line, sizeof line, " %15s", metric.c_str());
    out += line;
  }
  out += "\n";
  for (std::size_t i = 0; i < ok.size(); ++i) {
    const auto& r = *ok[i];
    std::snprintf(line, sizeof line, "%4zu %6zu  ", i + 1, r["index"].get<std::size_t>());
    out += line + configs[i] + std::string(width - configs[i].size(), ' ');
    std::snprintf(line, sizeof line, "  %12.0f %10.3f %6.1f%% %9.1f", r["tokens_per_s"].get<double>(),
                  r["iteration_time_s"].get<double>(), 100 * r["mfu"].get<double>(),
                  r["peak_memory_gib"].get<double>());
    out += line;
    if (extra) {
      std::snprintf(line, sizeof line, " %15.6g", r[metric].get<double>());
      out += line;
    }
    out += "\n";
  }
  return out;
}

std::string verified_table(const std::vector<nlohmann::ordered_json>& rows, const std::string& metric) {
  const std::string vmetric = "verify." + metric;
  std::vector<const nlohmann::ordered_json*> ok, failed;
  for (const auto& r : rows) {
    if (!r.contains("verify.status") || !r["verify.status"].is_string()) continue;
    if (r["verify.status"] == "ok" && r.contains(vmetric) && r[vmetric].is_number()) {
      ok.push_back(&r);
    } else {
      failed.push_back(&r);
    }
  }
  if (ok.empty() && failed.empty()) return "";
  const bool lower = metric_lower_is_better(metric);
  std::stable_sort(ok.begin(), ok.end(), [&](const auto* a, const auto* b) { return better(*a, *b, vmetric, lower); });
  const nlohmann::ordered_json& first = ok.empty() ? *failed.front() : *ok.front();
  const std::string vfid = first.value("verify.fidelity", "");
  const std::string ffid = first.value("fidelity", "");
  std::string out = "verified: the best " + std::to_string(ok.size() + failed.size()) + " of the " + ffid +
                    " ranking simulated again at " + vfid + " fidelity, ranked by " + metric + " at " + vfid +
                    " fidelity\n";
  const std::vector<std::string> cfg_cols = config_columns(first);
  std::vector<std::string> configs;
  std::size_t width = 6;
  for (const auto* r : ok) {
    configs.push_back(config_text(*r, cfg_cols));
    width = std::max(width, configs.back().size());
  }
  char line[160];
  std::snprintf(line, sizeof line, "%4s %6s  ", "rank", "point");
  out += line + std::string("config") + std::string(width - 6, ' ');
  // The first-pass figure: tokens/s, or the ranking metric when no standard column shows it.
  const bool extra = !standard_metric(metric);
  std::snprintf(line, sizeof line, "  %12s %10s %7s %9s", "tokens/s", "iter s", "MFU", "mem GiB");
  out += line;
  if (extra) {  // the ranking metric at the verify fidelity
    std::snprintf(line, sizeof line, " %15s", metric.c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, " %19s %4s\n", (ffid + (extra ? " " + metric : std::string(" tokens/s"))).c_str(),
                "was");
  out += line;
  for (std::size_t i = 0; i < ok.size(); ++i) {
    const auto& r = *ok[i];
    std::snprintf(line, sizeof line, "%4zu %6zu  ", i + 1, r["index"].get<std::size_t>());
    out += line + configs[i] + std::string(width - configs[i].size(), ' ');
    std::snprintf(line, sizeof line, "  %12.0f %10.3f %6.1f%% %9.1f", r["verify.tokens_per_s"].get<double>(),
                  r["verify.iteration_time_s"].get<double>(), 100 * r["verify.mfu"].get<double>(),
                  r["verify.peak_memory_gib"].get<double>());
    out += line;
    if (extra) {
      std::snprintf(line, sizeof line, " %15.6g %19.6g", r[vmetric].get<double>(), r[metric].get<double>());
    } else {
      std::snprintf(line, sizeof line, " %19.0f", r["tokens_per_s"].get<double>());
    }
    out += line;
    std::snprintf(line, sizeof line, " %4zu\n", r["verify.first_rank"].get<std::size_t>());
    out += line;
  }
  for (const auto* r : failed) {
    out += "  point " + std::to_string((*r)["index"].get<std::size_t>()) + " (was " + (*r)["verify.first_rank"].dump() +
           "): " + (*r)["verify.status"].get<std::string>() + " at " + vfid +
           " fidelity: " + (*r)["verify.error"].get<std::string>() + "\n";
  }
  return out;
}

std::string top_k_table(const std::vector<SweepRow>& rows, std::size_t k, const std::string& metric) {
  return top_k_table(sweep_rows_json(rows, plan_of_rows(rows)), k, metric);
}

std::string verified_table(const std::vector<SweepRow>& rows, const std::string& metric) {
  return verified_table(sweep_rows_json(rows, plan_of_rows(rows)), metric);
}

}  // namespace trainsim
