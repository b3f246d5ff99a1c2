#include "tools/frontend/fault_input.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>

namespace trainsim {

namespace {

// Llama 3 405B: 47 planned interruptions in the 54-day snapshot (arXiv:2407.21783, §3.3.4).
constexpr double kLlama3PlannedPerDay = 47.0 / 54.0;
// Tectonic, the storage of the Llama 3 405B job on 16,384 GPUs, sustains 2 TB/s
// (arXiv:2407.21783, §3.3.1); the default scales that share per GPU.
constexpr double kLlama3StoragePerGpu = 2e12 / 16384;
// Restart overhead u0 = 5 min in the ETTR model of Kokolis et al., "Revisiting
// Reliability in Large-Scale Machine Learning Research Clusters", arXiv:2410.21680.
constexpr double kRestartSeconds = 300;
constexpr double kMaxDuration = 3650.0 * 86400;  // ten years

std::vector<ComponentFailureRate> read_rates(ObjectReader& r) {
  const nlohmann::json* v = r.raw("failure_rates");
  if (v == nullptr || (v->is_string() && v->get<std::string>() == "llama3")) return llama3_failure_rates();
  if (!v->is_array() || v->empty()) {
    r.error("failure_rates", "expected \"llama3\" or a non-empty array of {component, per, per_day}");
    return {};
  }
  std::vector<ComponentFailureRate> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    ObjectReader c((*v)[i], r.at("failure_rates") + "/" + std::to_string(i), r.diagnostics());
    if (!c.valid()) continue;
    ComponentFailureRate rate;
    rate.component = c.string("component", "", true);
    const std::string per = c.choice("per", "", {"gpu", "node", "job"}, true);
    rate.scope = per == "gpu" ? FailureScope::Gpu : per == "node" ? FailureScope::Node : FailureScope::Job;
    rate.per_unit_per_day = c.number("per_day", 0, 0, 1e3, true);
    rate.takes_node_out = c.boolean("takes_node_out", rate.scope != FailureScope::Job);
    rate.source = c.string("source", "scenario");
    c.finish();
    out.push_back(rate);
  }
  return out;
}

constexpr double kMaxSlowdown = 1000;
// Each slowed GPU may be a GPU type of its own; the cost caches grow with types.
constexpr std::size_t kMaxSlowedGpus = 65536;
// Slowdown windows lie within the first 10^9 s of the iteration (as link windows do).
constexpr double kMaxWindowEnd = 1e9;

}  // namespace

void read_perturbations(ObjectReader& top, ClusterSpec& cluster, std::vector<LinkPerturbation>& links,
                        std::vector<PerturbationSource>& sources) {
  const nlohmann::json* v = top.raw("perturbations");
  if (v == nullptr) return;
  ObjectReader r(*v, top.at("perturbations"), top.diagnostics());
  if (!r.valid()) return;
  const int gpus = cluster.total_gpus();
  int nodes = 0;
  for (const NodeGroup& g : cluster.groups) nodes += g.count;
  // gpu -> its slowdown: static factors of entries naming one GPU multiply,
  // windowed ones are listed (GpuSpec::window_slowdown_at multiplies them).
  std::map<int, GpuSlowdown> slowed;
  auto slow = [&slowed](PerturbationSource& src, int gpu, double f, const std::optional<SlowdownWindow>& window) {
    GpuSlowdown& all = slowed.try_emplace(gpu, GpuSlowdown{gpu, 1.0, {}}).first->second;
    GpuSlowdown one{gpu, 1.0, {}};
    if (window) {
      all.windows.push_back(*window);
      one.windows.push_back(*window);
    } else {
      all.factor *= f;
      one.factor = f;
    }
    src.slowdowns.push_back(one);
  };
  struct Entry {
    int id = 0;
    double factor = 1;
    std::optional<SlowdownWindow> window;
    std::string pointer;
  };
  auto entries = [&](const char* key, const char* id_key, int count) {
    const nlohmann::json* list = r.raw(key);
    if (list == nullptr) return std::vector<Entry>{};
    std::vector<Entry> out;
    if (!list->is_array()) {
      r.error(key, std::string("expected an array of {\"") + id_key + "\", \"slowdown\"}");
      return out;
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string at = r.at(key) + "/" + std::to_string(i);
      ObjectReader e((*list)[i], at, r.diagnostics());
      if (!e.valid()) continue;
      Entry en;
      en.pointer = at;
      en.id = static_cast<int>(e.integer(id_key, 0, 0, std::max(0, count - 1), true));
      en.factor = e.number("slowdown", 1, 1, kMaxSlowdown, true);
      if (e.has("start") || e.has("end")) {
        // A slowdown for part of the iteration (thermal throttling, a transient straggler).
        SlowdownWindow w;
        w.factor = en.factor;
        w.start_s = e.quantity("start", Quantity::Time, 0, 0, kMaxWindowEnd);
        w.end_s = e.quantity("end", Quantity::Time, kMaxWindowEnd, 0, kMaxWindowEnd);
        if (w.end_s <= w.start_s) e.error("end", "expected an end after the start");
        en.window = w;
      }
      e.finish();
      out.push_back(en);
    }
    return out;
  };
  for (const Entry& en : entries("gpus", "gpu", gpus)) {
    PerturbationSource src{en.pointer, {}, -1};
    slow(src, en.id, en.factor, en.window);
    sources.push_back(std::move(src));
  }
  // Node ids count nodes in group order; a node's GPUs are consecutive (topologies/hardware.hpp).
  for (const Entry& en : entries("nodes", "node", nodes)) {
    PerturbationSource src{en.pointer, {}, -1};
    int first = 0;
    int n = en.id;
    for (const NodeGroup& g : cluster.groups) {
      if (n < g.count) {
        first += n * g.node.gpus_per_node;
        for (int l = 0; l < g.node.gpus_per_node; ++l) slow(src, first + l, en.factor, en.window);
        break;
      }
      first += g.count * g.node.gpus_per_node;
      n -= g.count;
    }
    sources.push_back(std::move(src));
  }
  if (const nlohmann::json* st = r.raw("stragglers")) {
    ObjectReader sr(*st, r.at("stragglers"), r.diagnostics());
    if (sr.valid()) {
      const bool has_count = sr.has("count"), has_fraction = sr.has("fraction");
      int count = 0;
      if (has_count == has_fraction) {
        sr.error("count", "give either \"count\" (GPUs) or \"fraction\" (of all GPUs) of stragglers");
      } else if (has_count) {
        count = static_cast<int>(sr.integer("count", 0, 0, gpus, true));
      } else {
        count = static_cast<int>(std::llround(sr.number("fraction", 0, 0, 1, true) * gpus));
      }
      double lo = 1, hi = 1;
      if (const nlohmann::json* sl = sr.raw("slowdown")) {
        if (sl->is_array() && sl->size() == 2 && (*sl)[0].is_number() && (*sl)[1].is_number()) {
          lo = (*sl)[0].get<double>();
          hi = (*sl)[1].get<double>();
        } else if (sl->is_number()) {
          lo = hi = sl->get<double>();
        } else {
          lo = hi = 0;
        }
        if (!(lo >= 1 && lo <= hi && hi <= kMaxSlowdown)) {
          sr.error("slowdown", "expected a factor in [1, 1000] or a range [low, high] within it");
          lo = hi = 1;
        }
      } else {
        sr.error("slowdown", "required straggler slowdown (a factor, or a range [low, high]) is missing");
      }
      const auto seed = static_cast<std::uint64_t>(sr.integer("seed", 1, 0, std::int64_t{1} << 62));
      sr.finish();
      // A seeded partial Fisher-Yates draw of `count` distinct GPUs; every step
      // is written out so the draw is the same on every platform.
      std::mt19937_64 rng(seed);
      auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
      std::vector<int> ids(static_cast<std::size_t>(gpus));
      for (int g = 0; g < gpus; ++g) ids[g] = g;
      PerturbationSource src{r.at("stragglers"), {}, -1};
      for (int i = 0; i < count; ++i) {
        const int j = i + static_cast<int>(uniform() * (gpus - i));
        std::swap(ids[i], ids[j]);
        const double f = lo + (hi - lo) * uniform();
        slow(src, ids[i], f, std::nullopt);
      }
      // Sorted by GPU, as the cluster's list is.
      std::sort(src.slowdowns.begin(), src.slowdowns.end(),
                [](const GpuSlowdown& a, const GpuSlowdown& b) { return a.gpu < b.gpu; });
      if (count > 0) sources.push_back(std::move(src));
    }
  }
  if (const nlohmann::json* list = r.raw("links")) {
    if (!list->is_array()) {
      r.error("links", "expected an array of {\"from\", \"to\", \"capacity\"}");
    } else {
      for (std::size_t i = 0; i < list->size(); ++i) {
        const std::string at = r.at("links") + "/" + std::to_string(i);
        ObjectReader e((*list)[i], at, r.diagnostics());
        if (!e.valid()) continue;
        LinkPerturbation lp;
        lp.pointer = at;
        lp.from = e.string("from", "", true);
        lp.to = e.string("to", "", true);
        lp.capacity_factor = e.number("capacity", 1, 1e-6, 1, true);
        lp.start_s = e.quantity("start", Quantity::Time, 0, 0, 1e9);
        lp.end_s = e.has("end") ? e.quantity("end", Quantity::Time, -1, 0, 1e9) : -1;
        if (lp.end_s >= 0 && lp.end_s <= lp.start_s) e.error("end", "expected an end after the start");
        e.finish();
        sources.push_back(PerturbationSource{at, {}, static_cast<int>(links.size())});
        links.push_back(lp);
      }
    }
  }
  if (slowed.size() > kMaxSlowedGpus) {
    r.diagnostics().error(r.pointer(), "slows " + std::to_string(slowed.size()) + " GPUs, above the limit of " +
                                           std::to_string(kMaxSlowedGpus) + " (docs/limits.md)");
  }
  r.finish();
  for (auto& [gpu, sl] : slowed) {
    std::sort(sl.windows.begin(), sl.windows.end());
    if (sl.factor != 1.0 || !sl.windows.empty()) cluster.slowdowns.push_back(sl);
  }
  for (PerturbationSource& src : sources) {
    std::erase_if(src.slowdowns, [](const GpuSlowdown& g) { return g.factor == 1.0 && g.windows.empty(); });
  }
}

std::optional<ReliabilitySpec> read_reliability(ObjectReader& top, const ClusterSpec& cluster) {
  const nlohmann::json* v = top.raw("reliability");
  if (v == nullptr) return std::nullopt;
  ObjectReader r(*v, top.at("reliability"), top.diagnostics());
  if (!r.valid()) return std::nullopt;
  ReliabilitySpec s;
  s.duration_s = r.quantity("duration", Quantity::Time, 0, 60, kMaxDuration, true);
  s.seed = static_cast<std::uint64_t>(r.integer("seed", 1, 0, std::int64_t{1} << 62));
  s.trials = static_cast<int>(r.integer("trials", 200, 1, 100000));
  s.components = read_rates(r);
  const double scale = r.number("failure_rate_scale", 1.0, 0, 1e3);
  for (auto& c : s.components) c.per_unit_per_day *= scale;
  s.planned_per_day = r.number("planned_per_day", kLlama3PlannedPerDay, 0, 1e3);
  s.restart_s = r.quantity("restart", Quantity::Time, kRestartSeconds, 0, 30 * 86400.0);
  const int gpus = cluster.total_gpus();
  double nic_per_gpu = 0;
  for (const NodeGroup& g : cluster.groups) {
    const double bw = g.node.nic_bandwidth_per_gpu();
    nic_per_gpu = nic_per_gpu == 0 ? bw : std::min(nic_per_gpu, bw);
  }
  if (const nlohmann::json* c = r.raw("checkpoint")) {
    ObjectReader cr(*c, r.at("checkpoint"), r.diagnostics());
    if (cr.valid()) {
      const std::string mode = cr.choice("mode", "sync", {"sync", "async", "in-memory"});
      s.checkpoint_mode = mode == "sync"    ? CheckpointMode::Synchronous
                          : mode == "async" ? CheckpointMode::Asynchronous
                                            : CheckpointMode::InMemory;
      const nlohmann::json* iv = cr.raw("interval");
      if (iv != nullptr && !(iv->is_string() && iv->get<std::string>() == "auto")) {
        s.checkpoint_interval_s = cr.quantity("interval", Quantity::Time, 0, 1, kMaxDuration);
      }
      s.storage_bandwidth = cr.quantity("storage_bandwidth", Quantity::Bandwidth, kLlama3StoragePerGpu * gpus, 1, 1e18);
      const double snapshot_default = s.checkpoint_mode == CheckpointMode::InMemory ? nic_per_gpu : 0.0;
      s.snapshot_bandwidth = cr.quantity("snapshot_bandwidth", Quantity::Bandwidth, snapshot_default, 0, 1e15,
                                         s.checkpoint_mode == CheckpointMode::Asynchronous);
      if (s.checkpoint_mode == CheckpointMode::InMemory && s.snapshot_bandwidth <= 0) {
        cr.error("snapshot_bandwidth",
                 "in-memory checkpoints need the bandwidth to a peer node; the cluster has no NIC");
      }
      cr.finish();
    }
  } else {
    s.storage_bandwidth = kLlama3StoragePerGpu * gpus;
  }
  if (r.has("spare_nodes")) {
    s.spare_nodes = static_cast<int>(r.integer("spare_nodes", 0, 0, 1 << 20));
    s.repair_s = r.quantity("repair_time", Quantity::Time, 0, 60, kMaxDuration, true);
  } else if (r.raw("repair_time") != nullptr) {
    r.error("repair_time", "a repair time only matters with \"spare_nodes\" (a limited pool of healthy nodes)");
  }
  r.finish();
  return s;
}

}  // namespace trainsim
