#include "tools/frontend/scenario.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "models/deepspeed_schedule.hpp"
#include "models/layout_rules.hpp"
#include "tools/frontend/diloco_input.hpp"
#include "tools/frontend/fault_input.hpp"
#include "tools/frontend/moe_reader.hpp"
#include "tools/frontend/stage_input.hpp"
#include "topologies/graph.hpp"

namespace trainsim {

std::span<const EmbeddedFile> example_scenario_files();

const EmbeddedFile& default_scenario_file() {
  for (const auto& f : example_scenario_files()) {
    if (f.path.ends_with("llama3-70b-64xh100.json")) return f;
  }
  return example_scenario_files().front();
}

namespace {

constexpr std::int64_t kMaxInt = 1 << 30;
// The most GPUs a cluster may have (docs/limits.md).
constexpr std::int64_t kMaxClusterGpus = 1 << 20;
// The most micro-batches per iteration, and micro-batches x model layers (docs/limits.md).
constexpr std::int64_t kMaxMicroBatches = 1 << 14;
constexpr std::int64_t kMaxMicroBatchLayers = 1 << 20;

// Applies one "a.b.c=value" override to the document.
void apply_override(nlohmann::json& doc, const std::string& spec, Diagnostics& diags) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    diags.error("", "--set \"" + spec + "\": expected key.path=value");
    return;
  }
  const std::string path = spec.substr(0, eq);
  const std::string text = spec.substr(eq + 1);
  std::string value_pointer;
  for (std::size_t start = 0; start <= path.size();) {
    const auto dot = std::min(path.find('.', start), path.size());
    value_pointer = json_pointer_append(value_pointer, path.substr(start, dot - start));
    start = dot + 1;
  }
  nlohmann::json value;
  Diagnostics value_diags(diags.file());
  if (std::optional<nlohmann::json> parsed = parse_json_text(text, value_diags, value_pointer)) {
    value = std::move(*parsed);
  } else if (value_diags.items().front().message.rfind("malformed JSON", 0) == 0) {
    // Not JSON: a bare word such as 1f1b or bf16, taken as a string (which must be UTF-8).
    if (!is_valid_utf8(text)) {
      diags.error(value_pointer, "--set \"" + path + "=...\": the value is not valid UTF-8");
      return;
    }
    value = text;
  } else {
    // JSON, but a number beyond double range, a duplicate key or too deep.
    for (const Diagnostic& d : value_diags.items()) diags.error(d.pointer, "--set \"" + spec + "\": " + d.message);
    return;
  }
  nlohmann::json* node = &doc;
  std::string pointer;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) {
      diags.error(pointer, "--set \"" + spec + "\": empty key in path");
      return;
    }
    // A model or node preset given by name takes field overrides in the object form the
    // loader accepts for it: "model": "gpt3-1.3b" with model.bias=true is {"preset": "gpt3-1.3b", "bias": true}.
    if (node->is_string() && (pointer == "/model" || pointer == "/cluster/node")) {
      const std::string preset = node->get<std::string>();
      *node = nlohmann::json::object({{"preset", preset}});
    }
    if (!node->is_object()) {
      diags.error(pointer, "--set \"" + spec + "\": " + (pointer.empty() ? "the document" : pointer) + " is " +
                               describe_json_type(*node) + ", not an object");
      return;
    }
    pointer = json_pointer_append(pointer, key);
    if (dot == std::string::npos) {
      (*node)[key] = value;
      return;
    }
    if (!node->contains(key)) (*node)[key] = nlohmann::json::object();
    node = &(*node)[key];
    start = dot + 1;
  }
}

std::string known_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void unknown_preset(ObjectReader& r, const char* key, const std::string& what, const std::string& name,
                    const std::vector<std::string>& known) {
  std::string msg = "unknown " + what + " \"" + name + "\"";
  const std::string near = did_you_mean(name, known);
  if (!near.empty()) msg += " (did you mean \"" + near + "\"?)";
  r.error(key, msg + "; known: " + known_list(known));
}

TransformerSpec read_scenario_model(ObjectReader& top, const Catalog& cat) {
  const nlohmann::json* v = top.raw("model");
  if (v == nullptr) {
    top.error("model", "required model (a preset name or an object) is missing");
    return {};
  }
  if (v->is_string()) {
    const std::string name = v->get<std::string>();
    if (const TransformerSpec* m = cat.find_model(name)) return *m;
    unknown_preset(top, "model", "model preset", name, cat.model_names());
    return {};
  }
  ObjectReader r(*v, top.at("model"), top.diagnostics());
  if (!r.valid()) return {};
  const TransformerSpec* base = nullptr;
  if (r.has("preset")) {
    const std::string name = r.string("preset", "");
    base = cat.find_model(name);
    if (base == nullptr) unknown_preset(r, "preset", "model preset", name, cat.model_names());
    if (base == nullptr) {
      r.finish();
      return {};
    }
  }
  TransformerSpec m = read_model(r, base);
  read_model_encoder(r, cat, m);
  r.finish();
  return m;
}

NodeSpec read_scenario_node(ObjectReader& r, const char* key, const Catalog& cat, bool* ok) {
  const nlohmann::json* v = r.raw(key);
  *ok = false;
  if (v == nullptr) {
    r.error(key, "required node (a preset name or an object) is missing");
    return {};
  }
  if (v->is_string()) {
    const std::string name = v->get<std::string>();
    if (const NodeSpec* n = cat.find_node(name)) {
      *ok = true;
      return *n;
    }
    unknown_preset(r, key, "node preset", name, cat.node_names());
    return {};
  }
  ObjectReader nr(*v, r.at(key), r.diagnostics());
  if (!nr.valid()) return {};
  const NodeSpec* base = nullptr;
  if (nr.has("preset")) {
    const std::string name = nr.string("preset", "");
    base = cat.find_node(name);
    if (base == nullptr) {
      unknown_preset(nr, "preset", "node preset", name, cat.node_names());
      nr.finish();
      return {};
    }
  }
  const std::size_t errors = r.diagnostics().items().size();
  NodeSpec n = read_node(nr, cat, base);
  nr.finish();
  *ok = r.diagnostics().items().size() == errors;
  return n;
}

ClusterSpec read_cluster_object(const nlohmann::json& v, const std::string& pointer, Diagnostics& diags,
                                const Catalog& cat);

ClusterSpec read_cluster(ObjectReader& top, const Catalog& cat) {
  const nlohmann::json* v = top.raw("cluster");
  if (v == nullptr) {
    top.error("cluster", "required cluster (a preset name or an object) is missing");
    return {};
  }
  if (v->is_string()) {
    const std::string name = v->get<std::string>();
    const ClusterPreset* p = cat.find_cluster(name);
    if (p == nullptr) {
      unknown_preset(top, "cluster", "cluster preset", name, cat.cluster_names());
      return {};
    }
    // A preset is an inline cluster from topologies/catalog/clusters.json.
    return read_cluster_object(p->definition, top.at("cluster"), top.diagnostics(), cat);
  }
  return read_cluster_object(*v, top.at("cluster"), top.diagnostics(), cat);
}

ClusterSpec read_cluster_object(const nlohmann::json& v, const std::string& pointer, Diagnostics& diags,
                                const Catalog& cat) {
  ClusterSpec c;
  ObjectReader r(v, pointer, diags);
  if (!r.valid()) return c;
  const std::size_t errors_before = r.diagnostics().items().size();
  c.name = r.string("name", "custom");
  if (r.has("groups")) {
    const nlohmann::json* g = r.raw("groups");
    if (!g->is_array() || g->empty()) {
      r.error("groups", "expected a non-empty array of {node, nodes}");
    } else {
      for (std::size_t i = 0; i < g->size(); ++i) {
        ObjectReader gr((*g)[i], json_pointer_append(r.at("groups"), i), r.diagnostics());
        if (!gr.valid()) continue;
        bool ok = false;
        NodeSpec n = read_scenario_node(gr, "node", cat, &ok);
        const int count = static_cast<int>(gr.integer("nodes", 1, 1, 1 << 20, true));
        gr.finish();
        if (ok) c.groups.push_back(NodeGroup{n, count});
      }
    }
    if (r.has("node") || r.has("nodes")) r.error("groups", "give either groups or node + nodes, not both");
  } else {
    bool ok = false;
    NodeSpec n = read_scenario_node(r, "node", cat, &ok);
    const int count = static_cast<int>(r.integer("nodes", 1, 1, 1 << 20, true));
    if (ok) c.groups.push_back(NodeGroup{n, count});
  }
  // Work and memory grow with the GPU count: bounded before the topology is built.
  std::int64_t gpus = 0;
  for (const auto& g : c.groups) gpus += static_cast<std::int64_t>(g.count) * g.node.gpus_per_node;
  if (gpus > kMaxClusterGpus) {
    r.error(r.has("groups") ? "groups" : "nodes", "the cluster has " + std::to_string(gpus) + " GPUs; at most " +
                                                      std::to_string(kMaxClusterGpus) +
                                                      " are simulated (docs/limits.md)");
  }
  // The scale-out network (used at flow fidelity; docs/network.md).
  const nlohmann::json* fabric = r.raw("fabric");
  // Routing by default as NCCL enables it (NCCL_IB_ADAPTIVE_ROUTING: on for
  // InfiniBand, off for RoCE) and as InfiniBand fabrics run (docs/network.md).
  bool infiniband = true;
  for (const auto& g : c.groups) infiniband = infiniband && g.node.nic_link_layer == NicLinkLayer::InfiniBand;
  c.fabric.routing = infiniband ? FabricRouting::Adaptive : FabricRouting::Ecmp;
  if (fabric != nullptr) {
    ObjectReader fr(*fabric, r.at("fabric"), r.diagnostics());
    if (fr.valid()) {
      const std::string kind = fr.choice("kind", to_string(c.fabric.kind), {"rail-optimized", "fat-tree"});
      c.fabric.kind = kind == "fat-tree" ? FabricKind::FatTree : FabricKind::RailOptimized;
      c.fabric.oversubscription = fr.number("oversubscription", 1.0, 1.0, 1000.0);
      c.fabric.nodes_per_leaf = static_cast<int>(fr.integer("nodes_per_leaf", 0, 1, 1 << 20));
      c.fabric.spines = static_cast<int>(fr.integer("spines", 0, 1, 1 << 16));
      c.fabric.link_latency = fr.quantity("link_latency", Quantity::Time, c.fabric.link_latency, 0, 1);
      const std::string routing = fr.choice("routing", to_string(c.fabric.routing), {"ecmp", "adaptive"});
      c.fabric.routing = routing == "adaptive" ? FabricRouting::Adaptive : FabricRouting::Ecmp;
      c.fabric.qps_per_connection = static_cast<int>(fr.integer("qps_per_connection", 1, 1, kMaxQpsPerConnection));
    }
    fr.finish();
  }
  // The spread of speed between GPUs of one model, for every model of the cluster
  // (docs/calibration.md, "Slowest GPU"); absent: each GPU model's profile figure.
  if (r.has("gpu_speed_spread")) c.gpu_speed_spread = r.number("gpu_speed_spread", 0, 0, 0.2, true);
  const nlohmann::json* dcs = r.raw("datacenters");
  if (dcs != nullptr) {
    ObjectReader dr(*dcs, r.at("datacenters"), r.diagnostics());
    if (dr.valid()) {
      c.datacenters.count = static_cast<int>(dr.integer("count", 1, 1, 1 << 16, true));
      c.datacenters.wan_bandwidth =
          dr.quantity("wan_bandwidth", Quantity::Bandwidth, 0, 1e3, 1e18, c.datacenters.count > 1);
      c.datacenters.wan_latency = dr.quantity("wan_latency", Quantity::Time, 0, 0, 10);
      c.datacenters.wan_links = static_cast<int>(dr.integer("wan_links", 1, 1, kMaxWanLinks, false));
    }
    dr.finish();
  }
  // Every cluster, described network or defaults, must form a graph where every
  // GPU reaches every other, whatever the fidelity: a load-time error, never a
  // failure in the middle of a flow simulation.
  if (r.diagnostics().items().size() == errors_before && !c.groups.empty()) {
    for (const TopologyProblem& p : check_topology(c)) {
      std::string ptr = r.pointer();
      std::size_t start = 0;
      while (start < p.key.size()) {
        const auto slash = p.key.find('/', start);
        std::string key = p.key.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
        if (start == 0 && key == "groups" && !r.has("groups")) key = "node";
        ptr = json_pointer_append(ptr, key);
        if (slash == std::string::npos) break;
        start = slash + 1;
      }
      r.diagnostics().error(ptr, p.message);
    }
  }
  r.finish();
  return c;
}

// A unit as custom schedules write it: optionally '+' (overlapped with the
// unit before it), F|B|W|BW, the micro-batch (up to 9 digits), optionally '.'
// and the rank's chunk (up to 4 digits).
std::optional<ScheduleUnit> parse_unit(const std::string& text) {
  ScheduleUnit u;
  std::size_t pos = 0;
  if (text.rfind('+', 0) == 0) {
    u.overlapped = true;
    pos = 1;
  }
  if (text.compare(pos, 2, "BW") == 0) {
    u.kind = UnitKind::Backward;
    pos += 2;
  } else if (pos < text.size() && (text[pos] == 'F' || text[pos] == 'B' || text[pos] == 'W')) {
    u.kind = text[pos] == 'F'   ? UnitKind::Forward
             : text[pos] == 'B' ? UnitKind::BackwardInput
                                : UnitKind::BackwardWeight;
    pos += 1;
  } else {
    return std::nullopt;
  }
  auto number = [&](std::size_t max_digits, int* out) {
    const std::size_t start = pos;
    long value = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && pos - start < max_digits) {
      value = value * 10 + (text[pos] - '0');
      ++pos;
    }
    *out = static_cast<int>(value);
    return pos > start;
  };
  if (!number(9, &u.microbatch)) return std::nullopt;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    if (!number(4, &u.chunk)) return std::nullopt;
  }
  if (pos != text.size()) return std::nullopt;
  return u;
}

// A custom pipeline schedule: {"units": [[unit, ...] per pipeline rank],
// "chunk_stages": [rank of each model chunk, in layer order]} with units written
// "F3", "B3", "W3", "BW3" (micro-batch 3 of the rank's chunk 0) or "F3.1" (its chunk 1).
PipelineSchedule read_custom_schedule(const nlohmann::json& v, const std::string& pointer, Diagnostics& diags) {
  PipelineSchedule sched;
  sched.name = "custom";
  ObjectReader r(v, pointer, diags);
  if (!r.valid()) return sched;
  const nlohmann::json* units = r.raw("units");
  if (units == nullptr || !units->is_array() || units->empty()) {
    r.error("units", "expected an array with the list of units of each pipeline rank");
  } else {
    for (std::size_t st = 0; st < units->size(); ++st) {
      const nlohmann::json& list = (*units)[st];
      const std::string at = json_pointer_append(r.at("units"), std::to_string(st));
      if (!list.is_array()) {
        diags.error(at, "expected the array of units of pipeline rank " + std::to_string(st));
        continue;
      }
      std::vector<ScheduleUnit> out;
      for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string text = list[i].is_string() ? list[i].get<std::string>() : "";
        const std::optional<ScheduleUnit> u = parse_unit(text);
        if (!u) {
          diags.error(json_pointer_append(at, std::to_string(i)),
                      "expected a unit such as \"F3\" (forward), \"B3\" (input gradient), \"W3\" (weight gradient), "
                      "\"BW3\" (whole backward) or \"F3.1\" (micro-batch 3 of the rank's chunk 1), found " +
                          list[i].dump());
          continue;
        }
        out.push_back(*u);
      }
      sched.units.push_back(std::move(out));
    }
  }
  sched.stages = static_cast<int>(sched.units.size());
  if (const nlohmann::json* cs = r.raw("chunk_stages")) {
    const bool ok = cs->is_array() && !cs->empty() && std::all_of(cs->begin(), cs->end(), [](const nlohmann::json& x) {
                      return x.is_number_integer() && x.get<std::int64_t>() >= 0 && x.get<std::int64_t>() < (1 << 16);
                    });
    if (ok) {
      sched.chunk_stage = cs->get<std::vector<int>>();
    } else {
      r.error("chunk_stages", "expected an array with the pipeline rank of each model chunk, in layer order");
    }
  } else {
    for (int st = 0; st < sched.stages; ++st) sched.chunk_stage.push_back(st);
  }
  r.finish();
  return sched;
}

// An uneven-share key of `parallel`: "even", its automatic word, or an array of
// counts (an out-of-range entry is an error at its index, replaced by `placeholder`).
struct ShareKey {
  const char* key;
  const char* automatic;  // the word that lets the planner choose the shares
  std::int64_t min;       // the smallest entry the reader lets through (the layout rules refine it)
  int placeholder;
  const char* count;  // what one entry is, for its error
  const char* array;  // what the array holds, for the key's error
};
void read_share_key(ObjectReader& r, const ShareKey& k, std::vector<int>* shares, bool* automatic) {
  const nlohmann::json* sh = r.raw(k.key);
  if (sh == nullptr) return;
  if (sh->is_string() && (*sh == "even" || *sh == k.automatic)) {
    *automatic = *sh == k.automatic;
  } else if (sh->is_array() && !sh->empty() && sh->size() <= (1U << 20)) {
    for (std::size_t i = 0; i < sh->size(); ++i) {
      const std::optional<std::int64_t> x = json_integer_value((*sh)[i]);
      if (!x || *x < k.min || *x > kMaxInt) {
        r.diagnostics().error(r.at(k.key) + "/" + std::to_string(i),
                              std::string("expected a ") + k.count + " in [1, " + std::to_string(kMaxInt) + "]");
        shares->push_back(k.placeholder);
      } else {
        shares->push_back(static_cast<int>(*x));
      }
    }
  } else {
    r.error(k.key, std::string("expected \"even\", \"") + k.automatic + "\" or an array with the " + k.array);
  }
}

// Whether the scenario names DeepSpeed's engine (training.framework, read and
// checked with the training section): its pipeline schedule is the default.
bool names_deepspeed(ObjectReader& top) {
  const nlohmann::json* t = top.raw("training");
  if (t == nullptr || !t->is_object()) return false;
  const auto it = t->find("framework");
  return it != t->end() && it->is_string() && it->get<std::string>() == "deepspeed";
}

ParallelSpec read_parallel(ObjectReader& top, bool batch_required) {
  ParallelSpec p;
  const bool deepspeed = names_deepspeed(top);
  const nlohmann::json* v = top.raw("parallel");
  if (v == nullptr) {
    top.error("parallel", "required parallel settings are missing");
    return p;
  }
  ObjectReader r(*v, top.at("parallel"), top.diagnostics());
  if (!r.valid()) return p;
  p.tp = static_cast<int>(r.integer("tp", 1, 1, 1 << 16));
  p.pp = static_cast<int>(r.integer("pp", 1, 1, 1 << 16));
  p.dp = static_cast<int>(r.integer("dp", 1, 1, 1 << 20));
  p.cp = static_cast<int>(r.integer("cp", 1, 1, 1 << 16));
  // How attention splits the sequence over cp (docs/long-context.md); the layout
  // rules check cp_ulysses against cp and the heads.
  const std::string cp_kind = r.choice("cp_kind", "ring", {"ring", "ulysses", "hybrid"});
  const bool hybrid = cp_kind == "hybrid";
  const int cp_ulysses = static_cast<int>(r.integer("cp_ulysses", 1, 2, 1 << 16, hybrid));
  if (!hybrid && r.raw("cp_ulysses") != nullptr) {
    r.error("cp_ulysses", "sets the Ulysses degree of cp_kind \"hybrid\"; cp_kind is \"" + cp_kind + "\"");
  }
  if (hybrid && (cp_ulysses >= p.cp || p.cp % cp_ulysses != 0)) {
    r.error("cp_ulysses", "expected a Ulysses degree that divides cp = " + std::to_string(p.cp) +
                              " and is smaller than it (cp_kind \"ulysses\" uses all of cp), found " +
                              std::to_string(cp_ulysses));
  }
  p.cp_ulysses = hybrid ? cp_ulysses : cp_kind == "ulysses" ? p.cp : 1;
  p.ep = static_cast<int>(r.integer("ep", 1, 1, 1 << 16));
  p.etp = static_cast<int>(r.integer("etp", 0, 1, 1 << 16));
  const std::string dispatcher = r.choice("moe_dispatcher", "alltoall", {"alltoall", "allgather", "deepep"});
  p.moe_dispatcher = dispatcher == "allgather" ? MoeDispatcher::AllGather
                     : dispatcher == "deepep"  ? MoeDispatcher::DeepEP
                                               : MoeDispatcher::AllToAll;
  p.vpp = static_cast<int>(r.integer("vpp", 1, 1, 1 << 10));
  const nlohmann::json* sched_json = r.raw("schedule");
  if (sched_json != nullptr && sched_json->is_object()) {
    p.schedule = ScheduleKind::Custom;
    p.custom_schedule = read_custom_schedule(*sched_json, r.at("schedule"), r.diagnostics());
  } else {
    const char* fallback = p.vpp > 1 ? "interleaved-1f1b" : deepspeed && p.pp > 1 ? "deepspeed-1f1b" : "1f1b";
    const std::string sched = r.choice(
        "schedule", fallback,
        {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-v", "dualpipe-v", "breadth-first",
         "seq1f1b", "pipedream", "pipedream-2bw", "dualpipe", "deepspeed-1f1b", "deepspeed-1f1b-legacy"});
    p.schedule = sched == "gpipe"                   ? ScheduleKind::GPipe
                 : sched == "deepspeed-1f1b"        ? ScheduleKind::DeepSpeed1F1B
                 : sched == "deepspeed-1f1b-legacy" ? ScheduleKind::DeepSpeed1F1BLegacy
                 : sched == "seq1f1b"               ? ScheduleKind::Seq1F1B
                 : sched == "zb-v"                  ? ScheduleKind::ZeroBubbleV
                 : sched == "dualpipe-v"            ? ScheduleKind::DualPipeV
                 : sched == "dualpipe"              ? ScheduleKind::DualPipe
                 : sched == "breadth-first"         ? ScheduleKind::BreadthFirst
                 : sched == "1f1b"                  ? ScheduleKind::OneFOneB
                 : sched == "zb-h1"                 ? ScheduleKind::ZeroBubbleH1
                 : sched == "zb-h2"                 ? ScheduleKind::ZeroBubbleH2
                 : sched == "zb-1p"                 ? ScheduleKind::ZeroBubble1p
                 : sched == "zb-2p"                 ? ScheduleKind::ZeroBubble2p
                 : sched == "pipedream"             ? ScheduleKind::PipeDream
                 : sched == "pipedream-2bw"         ? ScheduleKind::PipeDream2BW
                                                    : ScheduleKind::Interleaved1F1B;
  }
  p.seq_chunks = static_cast<int>(r.integer("seq_chunks", 1, 1, 1 << 10));
  p.micro_batch = static_cast<int>(r.integer("micro_batch", 1, 1, kMaxInt));
  p.global_batch = static_cast<int>(r.integer("global_batch", 1, 1, kMaxInt, batch_required));
  p.sequence_parallel = r.boolean("sequence_parallel", false);
  p.zero = static_cast<int>(r.integer("zero", 0, 0, 3));
  const std::string rc = r.choice("recompute", "none", {"none", "selective", "full"});
  p.recompute = rc == "full" ? Recompute::Full : rc == "selective" ? Recompute::Selective : Recompute::None;
  p.distribute_saved_activations = r.boolean("distribute_saved_activations", false);
  p.offload_layers = static_cast<int>(r.integer("activation_offload_layers", 0, 0, 100000));
  if (p.distribute_saved_activations && (p.recompute != Recompute::Full || p.sequence_parallel)) {
    r.error("distribute_saved_activations",
            "sharding the checkpointed layer inputs over TP ranks needs \"recompute\": \"full\" and no "
            "sequence_parallel (Megatron-LM asserts both)");
  }
  p.dp_overlap = r.boolean("dp_overlap", true);
  p.tp_comm_overlap = r.boolean("tp_comm_overlap", false);
  p.tp_grad_overlap = r.boolean("tp_grad_overlap", true);
  p.backward_prefetch_pre = r.choice("backward_prefetch", "pre", {"pre", "post"}) == "pre";
  // DeepSpeed's engine sends and receives blocking (deepspeed/runtime/pipe/p2p.py).
  const bool ds_schedule = is_deepspeed_schedule(p.schedule);
  p.pp_overlap = r.boolean("pp_overlap", !ds_schedule);
  if (ds_schedule && p.pp_overlap) {
    r.error("pp_overlap", "expected false with the schedule \"" + std::string(to_string(p.schedule)) +
                              "\": DeepSpeed's pipeline engine sends and receives blocking (p2p.py)");
  }
  p.pp_scatter_gather = r.boolean("pp_scatter_gather", true);
  p.moe_a2a_overlap = r.boolean("moe_a2a_overlap", false);
  p.dp_bucket_bytes = r.quantity("dp_bucket", Quantity::Bytes, 0, 1e3, 1e13);
  p.torch_ddp = r.choice("ddp_impl", "local", {"local", "torch"}) == "torch";
  if (const nlohmann::json* sl = r.raw("stage_layers")) {
    bool ok = sl->is_array() && !sl->empty();
    for (const auto& x : *sl)
      ok = ok && x.is_number_integer() && x.get<std::int64_t>() >= 0 && x.get<std::int64_t>() <= (1 << 24);
    if (ok) {
      p.stage_layers = sl->get<std::vector<int>>();
    } else {
      r.error("stage_layers",
              "expected an array of layer counts in [0, 16777216], one per model chunk (pipeline stage)");
    }
  }
  if (const nlohmann::json* pl = r.raw("placement")) {
    if (pl->is_string()) {
      p.placement_order = pl->get<std::string>();
    } else if (pl->is_array() && !pl->empty() && std::all_of(pl->begin(), pl->end(), [](const nlohmann::json& x) {
                 return x.is_number_integer() && x.get<std::int64_t>() >= 0 && x.get<std::int64_t>() < (1 << 30);
               })) {
      p.placement_gpus = pl->get<std::vector<int>>();
    } else {
      r.error("placement",
              "expected an order of the parallel dimensions, innermost first (e.g. \"tp-cp-ep-dp-pp\"), or an "
              "array with the GPU id of each rank in that order");
    }
  }
  read_stage_layouts(r, p);
  // Uneven shares (docs/heterogeneous.md); the layout rules check them against the
  // batch (dp_shares: micro-batches per replica), seq_len (cp_shares: tokens per CP
  // rank) and the heads (head_shares: query heads of a TP rank per Ulysses rank).
  read_share_key(r,
                 {"dp_shares", "balanced", 0, 1, "micro-batch count",
                  "micro-batches of each data-parallel replica (1 to 1,048,576 entries)"},
                 &p.dp_shares, &p.dp_shares_balanced);
  read_share_key(r, {"cp_shares", "auto", 1, 2, "token count", "tokens of each CP rank"}, &p.cp_shares,
                 &p.cp_shares_auto);
  read_share_key(r, {"head_shares", "auto", 1, 1, "head count", "query heads of each Ulysses rank"}, &p.head_shares,
                 &p.head_shares_auto);
  r.finish();
  p.custom_schedule.microbatches = p.micro_batches();
  return p;
}

TrainingSpec read_training(ObjectReader& top, const TransformerSpec& model) {
  TrainingSpec t;
  const nlohmann::json* v = top.raw("training");
  if (v == nullptr) {
    top.error("training", "required training settings (at least seq_len) are missing");
    return t;
  }
  ObjectReader r(*v, top.at("training"), top.diagnostics());
  if (!r.valid()) return t;
  t.seq_len = static_cast<int>(r.integer("seq_len", model.max_seq_len, 1, 1 << 24, true));
  const std::string prec = r.choice("precision", "bf16", {"fp32", "tf32", "fp16", "bf16", "fp8"});
  for (std::size_t d = 0; d < kNumDtypes; ++d) {
    if (prec == to_string(static_cast<Dtype>(d))) t.precision = static_cast<Dtype>(d);
  }
  t.optimizer = r.choice("optimizer", "adam", {"adam", "adam-unfused", "sgd", "lamb", "adafactor", "muon"});
  if (t.optimizer == "muon" && (model.moe.enabled() || model.mla.enabled())) {
    r.error("optimizer",
            "Muon is modelled for dense layers with (grouped-query) attention; this model has routed "
            "experts or latent attention");
  }
  // NeMo's distributed_fused_adam with optim.dtype bf16 (docs/frameworks.md, "Optimizers"):
  // fused Adam over 16-bit weights only.
  t.bf16_optimizer_state = r.choice("optimizer_dtype", "fp32", {"fp32", "bf16"}) == "bf16";
  if (t.bf16_optimizer_state && t.optimizer != "adam") {
    r.error("optimizer_dtype",
            "bf16 optimizer state is modelled for \"optimizer\": \"adam\" (found \"" + t.optimizer + "\")");
  }
  if (t.bf16_optimizer_state && t.precision != Dtype::BF16 && t.precision != Dtype::FP8) {
    r.error("optimizer_dtype",
            "bf16 optimizer state needs bf16 weights: \"precision\": \"bf16\" or \"fp8\" (found \"" + prec + "\")");
  }
  const std::string attn =
      r.choice("attention", "flash", {"flash", "flash-attention-3", "cudnn", "flash-triton", "unfused"});
  t.attention = attn == "flash"               ? AttentionKind::Flash
                : attn == "flash-attention-3" ? AttentionKind::FlashAttention3
                : attn == "cudnn"             ? AttentionKind::Cudnn
                : attn == "flash-triton"      ? AttentionKind::FlashTriton
                                              : AttentionKind::Unfused;
  const std::string fw =
      r.choice("framework", "default",
               {"default", "megatron-te", "torch-compile", "eager", "fsdp2", "deepspeed", "megatron-legacy"});
  t.framework = fw == "megatron-te"       ? Framework::MegatronTe
                : fw == "torch-compile"   ? Framework::TorchCompile
                : fw == "eager"           ? Framework::Eager
                : fw == "fsdp2"           ? Framework::Fsdp2
                : fw == "deepspeed"       ? Framework::DeepSpeed
                : fw == "megatron-legacy" ? Framework::MegatronLegacy
                                          : Framework::Default;
  // Megatron-Core's loss kernels (docs/frameworks.md, "Cross-entropy"): a setting of
  // that framework only; the other lists carry their framework's own loss.
  if (r.has("cross_entropy_loss_fusion") && t.framework != Framework::MegatronTe) {
    r.error("cross_entropy_loss_fusion",
            "Megatron-Core's cross-entropy fusion needs \"framework\": \"megatron-te\" (found \"" + fw + "\")");
  }
  t.cross_entropy_loss_fusion = r.boolean("cross_entropy_loss_fusion", false);
  // Megatron-LM's persistent LayerNorm kernel (docs/frameworks.md): its legacy model code only.
  if (r.has("persist_layer_norm") && t.framework != Framework::MegatronLegacy) {
    r.error("persist_layer_norm",
            "Megatron-LM's persistent LayerNorm needs \"framework\": \"megatron-legacy\" (found \"" + fw + "\")");
  }
  t.persist_layer_norm = r.boolean("persist_layer_norm", false);
  if (r.has("host_dispatch_us")) {
    t.host_seconds_per_kernel = r.number("host_dispatch_us", 0, 0, 100000) * 1e-6;
  }
  t.launch_blocking = r.boolean("launch_blocking", false);
  t.fsdp_pad_copy = r.boolean("fsdp_pad_copy", false);
  // The loss kernel and the trainer's metric cross-entropies (docs/frameworks.md, "The
  // loss and the training metrics"): steps of the model's own PyTorch code.
  const bool own_loss = t.framework == Framework::Eager || t.framework == Framework::Fsdp2;
  if (r.has("loss_kernel") && !own_loss) {
    r.error("loss_kernel",
            "a loss kernel of the model's own PyTorch code needs \"framework\": \"eager\" or "
            "\"fsdp2\" (found \"" +
                fw + "\")");
  }
  t.xentropy_loss = r.choice("loss_kernel", "framework", {"framework", "xentropy"}) == "xentropy";
  if (r.has("metric_cross_entropies") && !own_loss) {
    r.error("metric_cross_entropies",
            "training-metric cross-entropies of a PyTorch trainer need \"framework\": "
            "\"eager\" or \"fsdp2\" (found \"" +
                fw + "\")");
  }
  t.metric_cross_entropies = static_cast<int>(r.integer("metric_cross_entropies", 0, 0, 16));
  t.apex_distributed_adam = r.boolean("apex_distributed_adam", false);
  t.grad_reduce_bytes = r.choice("grad_reduce", "fp32", {"fp32", "bf16", "fp16"}) == "fp32" ? 4 : 2;
  t.dropout = r.boolean("dropout", true);
  t.post_validation = r.choice("optimizer_sync", "all-reduce", {"all-reduce", "post-validation"}) == "post-validation";
  t.zb_receives_sorted = r.choice("zb_receives", "overlapped", {"overlapped", "sorted"}) == "sorted";
  const std::string tied = r.choice("tied_grad_sync", t.framework == Framework::DeepSpeed ? "before-dp" : "after-dp",
                                    {"after-dp", "before-dp", "overlapped", "none"});
  t.tied_grad_sync = tied == "before-dp"    ? TiedGradSync::BeforeDp
                     : tied == "overlapped" ? TiedGradSync::Overlapped
                     : tied == "none"       ? TiedGradSync::None
                                            : TiedGradSync::AfterDp;
  if (r.has("fp8_recipe") && t.precision != Dtype::FP8) {
    r.error("fp8_recipe", "an FP8 scaling recipe needs \"precision\": \"fp8\" (found \"" + prec + "\")");
  }
  const std::string recipe = r.choice("fp8_recipe", "delayed", {"delayed", "current", "mxfp8", "blockwise"});
  t.fp8_recipe = recipe == "current"     ? Fp8Recipe::Current
                 : recipe == "mxfp8"     ? Fp8Recipe::Mxfp8
                 : recipe == "blockwise" ? Fp8Recipe::Blockwise
                                         : Fp8Recipe::Delayed;
  // Transformer Engine's FP8 primary weights (docs/frameworks.md, "FP8 parameters").
  if (r.has("fp8_params") && (t.precision != Dtype::FP8 || t.framework != Framework::MegatronTe)) {
    r.error("fp8_params",
            "FP8 parameters are Transformer Engine's: they need \"precision\": \"fp8\" and "
            "\"framework\": \"megatron-te\" (found \"" +
                prec + "\", \"" + fw + "\")");
  }
  t.fp8_params = r.boolean("fp8_params", false);
  // Megatron-Core's deferred output-layer weight gradients (docs/frameworks.md, "Deferred
  // output-layer weight gradients"): a setting of Megatron's pipeline schedules.
  if (r.has("defer_embedding_wgrad_compute") && t.framework != Framework::MegatronTe &&
      t.framework != Framework::Default) {
    r.error("defer_embedding_wgrad_compute",
            "Megatron-Core's deferred output-layer weight gradients need Megatron's kernel lists (\"framework\": "
            "\"megatron-te\" or \"default\"; found \"" +
                fw + "\")");
  }
  t.defer_embedding_wgrad = r.boolean("defer_embedding_wgrad_compute", false);
  t.wgrad_deferral_limit = static_cast<int>(r.integer("wgrad_deferral_limit", 0, 0, 1 << 20));
  const std::string graphs = r.choice("cuda_graphs", "none", {"none", "layers", "full"});
  t.cuda_graphs = graphs == "layers" ? CudaGraphScope::Layers
                  : graphs == "full" ? CudaGraphScope::Full
                                     : CudaGraphScope::None;
  t.grad_accumulation = r.choice("grad_accumulation", "fused", {"fused", "autograd"}) == "autograd"
                            ? GradAccumulation::Autograd
                            : GradAccumulation::Fused;
  t.routing = read_routing(r);
  r.finish();
  return t;
}

// The optional top-level "schema_version": absent means the current version.
void read_schema_version(ObjectReader& top) {
  const nlohmann::json* v = top.raw("schema_version");
  if (v == nullptr) return;
  const std::string supported = std::to_string(kScenarioSchemaVersion);
  if (!v->is_number_integer()) {
    top.error("schema_version",
              "expected the integer scenario schema version " + supported + ", found " + describe_json_type(*v));
  } else if (v->get<std::int64_t>() != kScenarioSchemaVersion) {
    top.error("schema_version",
              "unsupported scenario schema version " + v->dump() + "; this trainsim reads version " + supported);
  }
}

std::optional<Expected> read_expected(ObjectReader& top) {
  const nlohmann::json* v = top.raw("expected");
  if (v == nullptr) return std::nullopt;
  ObjectReader r(*v, top.at("expected"), top.diagnostics());
  if (!r.valid()) return std::nullopt;
  Expected e;
  e.metric = r.choice("metric", "",
                      {"iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "compute_utilization"}, true);
  e.value = r.number("value", 0, 1e-12, 1e18, true);
  e.source = r.string("source", "", true);
  e.group = r.string("group", "");
  r.finish();
  return e;
}

std::vector<CalibrationProfile> read_calibration(ObjectReader& top, const Catalog& cat, const ClusterSpec& cluster,
                                                 const std::string& base_dir, std::vector<std::string>& warnings) {
  std::vector<CalibrationProfile> chosen;
  if (const nlohmann::json* v = top.raw("calibration")) {
    ObjectReader r(*v, top.at("calibration"), top.diagnostics());
    if (const nlohmann::json* list = r.raw("profiles")) {
      if (!list->is_array()) {
        r.error("profiles", "expected an array of profile file paths, found " + describe_json_type(*list));
      } else {
        for (std::size_t i = 0; i < list->size(); ++i) {
          const std::string ptr = json_pointer_append(r.at("profiles"), i);
          if (!(*list)[i].is_string()) {
            r.diagnostics().error(ptr, "expected a file path, found " + describe_json_type((*list)[i]));
            continue;
          }
          std::filesystem::path p = (*list)[i].get<std::string>();
          if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
          // The profile's own problems (its file and pointer) are reported at this entry.
          try {
            chosen.push_back(load_profile_file(p.string()));
            bool used = false;
            for (const auto& g : cluster.groups) used |= g.node.gpu.name == chosen.back().gpu;
            if (!used && !cluster.groups.empty()) {
              warnings.push_back(top.diagnostics().file() + ": " + ptr + ": the profile is for GPU \"" +
                                 chosen.back().gpu + "\", which the cluster does not have; it is not used");
            }
          } catch (const InputError& e) {
            for (const auto& d : e.diagnostics()) {
              r.diagnostics().error(ptr, d.pointer.empty() && d.message == "cannot read the file"
                                             ? "cannot read calibration profile \"" + p.string() + "\""
                                             : d.format());
            }
          }
        }
      }
    }
    r.finish();
  }
  // Every GPU type needs a profile: the scenario's own, else the shipped one.
  std::vector<CalibrationProfile> out;
  for (const auto& g : cluster.groups) {
    bool have = false;
    for (const auto& p : out) have |= p.gpu == g.node.gpu.name;
    if (have) continue;
    const CalibrationProfile* p = nullptr;
    for (const auto& c : chosen) {
      if (c.gpu == g.node.gpu.name) p = &c;
    }
    if (p == nullptr) p = cat.find_profile_for_gpu(g.node.gpu.name);
    if (p == nullptr && !g.node.gpu.profile_gpu.empty()) {
      // An inline GPU borrowing the profile of a catalog GPU with the same chip.
      for (const auto& c : chosen) {
        if (c.gpu == g.node.gpu.profile_gpu) p = &c;
      }
      if (p == nullptr) p = cat.find_profile_for_gpu(g.node.gpu.profile_gpu);
      if (p != nullptr) {
        CalibrationProfile borrowed = *p;
        borrowed.gpu = g.node.gpu.name;
        out.push_back(std::move(borrowed));
        continue;
      }
    }
    if (p == nullptr) {
      top.error("cluster",
                "no calibration profile for GPU \"" + g.node.gpu.name + "\"; add one under calibration.profiles");
      continue;
    }
    out.push_back(*p);
  }
  return out;
}

// Megatron-Core with Transformer Engine runs cuDNN fused attention where cuDNN
// supports the GPU (Hopper, Blackwell): the default when the scenario names that
// framework but no attention kernel, and every GPU's profile has cuDNN curves.
// Megatron-LM's pre-Core model code runs its unfused attention core.
void default_attention_of_framework(ObjectReader& top, Scenario& s) {
  const nlohmann::json* t = top.raw("training");
  if (t == nullptr || !t->is_object() || t->contains("attention")) return;
  if (s.training.framework == Framework::MegatronLegacy) s.training.attention = AttentionKind::Unfused;
  if (s.training.framework != Framework::MegatronTe) return;
  const auto cudnn = static_cast<std::size_t>(AttentionKernel::Cudnn);
  const bool all = !s.profiles.empty() && std::all_of(s.profiles.begin(), s.profiles.end(), [&](const auto& p) {
    return !p.attention_kernels[cudnn].forward.curve.empty();
  });
  if (all) s.training.attention = AttentionKind::Cudnn;
}

void check_consistency(Scenario& s, Diagnostics& d) {
  if (s.training.attention == AttentionKind::FlashTriton) {
    for (const auto& prof : s.profiles) {
      if (prof.triton_attention_speed.value <= 0) {
        d.error("/training/attention", "\"flash-triton\" needs triton_attention_speed in the calibration profile of " +
                                           prof.gpu + ", which has none");
      }
    }
  }
  // FlashAttention-3 and FlashAttention in Triton have no dropout (flash-attention's
  // hopper/flash_attn_interface.py and flash_attn/flash_attn_triton.py take no dropout
  // probability; Dao-AILab/flash-attention issue 1251): a run that drops out cannot use them.
  if (s.training.dropout &&
      (s.training.attention == AttentionKind::FlashAttention3 || s.training.attention == AttentionKind::FlashTriton)) {
    d.error("/training/attention",
            std::string("\"") +
                (s.training.attention == AttentionKind::FlashAttention3 ? "flash-attention-3" : "flash-triton") +
                "\" has no attention dropout: set \"training.dropout\": false (trainsim's one switch for attention "
                "and residual dropout; default true), or choose \"flash\", \"cudnn\" or \"unfused\"");
  }
  const auto family = s.training.attention == AttentionKind::Cudnn             ? AttentionKernel::Cudnn
                      : s.training.attention == AttentionKind::FlashAttention3 ? AttentionKernel::FlashAttention3
                                                                               : AttentionKernel::FlashAttention2;
  if (family != AttentionKernel::FlashAttention2) {
    const std::string key(attention_kernel_key(family));
    for (const auto& prof : s.profiles) {
      if (prof.attention_kernels[static_cast<std::size_t>(family)].forward.curve.empty()) {
        d.error("/training/attention", "\"" + key + "\" needs attention_kernels." + key +
                                           " in the calibration profile of " + prof.gpu + ", which has none");
      }
    }
  }
  // The Zero Bubble runtime's receive placement applies to the schedules it runs.
  if (s.training.zb_receives_sorted) {
    const ScheduleKind k = s.parallel.schedule;
    if (!is_zero_bubble_schedule(k)) {
      d.error("/training/zb_receives",
              "\"sorted\" is the Zero Bubble runtime's receive placement: expected a schedule "
              "zb-h1, zb-h2, zb-1p, zb-2p or zb-v, found \"" +
                  std::string(to_string(k)) + "\"");
    }
  }
  // Blocking launches (CUDA_LAUNCH_BLOCKING=1) return only when the kernel, NCCL's
  // included, has finished: no collective or transfer can run beside computation.
  if (s.training.launch_blocking && s.workload.kind != WorkloadKind::Transformer) {
    d.error("/training/launch_blocking", "blocking launches are modelled for transformer workloads only");
  } else if (s.training.launch_blocking) {
    const ParallelSpec& p = s.parallel;
    const std::pair<bool, const char*> overlaps[] = {
        {p.dp_overlap, "dp_overlap"},           {p.tp_grad_overlap, "tp_grad_overlap"},
        {p.tp_comm_overlap, "tp_comm_overlap"}, {p.pp_overlap, "pp_overlap"},
        {p.moe_a2a_overlap, "moe_a2a_overlap"}, {p.sequence_parallel, "sequence_parallel"}};
    for (const auto& [on, key] : overlaps) {
      if (on) {
        d.error("/training/launch_blocking", std::string("blocking launches run no communication beside "
                                                         "computation; set parallel.") +
                                                 key + " to false");
      }
    }
    if (p.cp > 1 || p.zero == 3 || p.offload_layers > 0) {
      d.error("/training/launch_blocking",
              "blocking launches are modelled without context parallelism, ZeRO-3 "
              "and activation offload, whose transfers run beside computation");
    }
    if (s.training.cuda_graphs != CudaGraphScope::None) {
      d.error("/training/launch_blocking", "blocking launches are modelled for eager kernels, not CUDA graphs");
    }
  }
  if (s.workload.kind != WorkloadKind::Transformer) return;  // its layout: read_workload
  // The QKV split's backward cat is a kernel of the eager lists; DeepSpeed's lists
  // charge Megatron's split already, the fused lists say nothing about theirs.
  const Framework fw = s.training.framework;
  if (s.model.qkv_split && fw != Framework::Eager && fw != Framework::Fsdp2 && fw != Framework::DeepSpeed &&
      fw != Framework::MegatronLegacy) {
    d.error("/model/qkv_split",
            "the fused QKV split's backward is modelled for the eager and fsdp2 kernel lists (deepspeed and "
            "megatron-legacy charge it already); set training.framework to eager or fsdp2, or leave qkv_split off");
  }
  // megatron-legacy is Megatron-LM's model code of 2020-2022 (docs/frameworks.md): GPT with
  // LayerNorm (apex's fused or persistent kernels), a GeLU MLP and learned positions, in fp16,
  // bf16 or fp32 without Transformer Engine. RMSNorm (Sept 2023, plain PyTorch), SwiGLU and RoPE
  // (2023, unfused), FP8 (Transformer Engine), FlashAttention, cuDNN and Triton attention and
  // CUDA graphs came later or never; their kernel lists here are other frameworks'.
  if (fw == Framework::MegatronLegacy) {
    const std::string pre_core = " (Megatron-LM's pre-Core code)";
    if (s.model.rmsnorm) d.error("/model/norm", "megatron-legacy models LayerNorm only" + pre_core);
    if (s.model.mlp != MlpKind::Gelu) d.error("/model/mlp", "megatron-legacy models a GeLU MLP only" + pre_core);
    if (s.model.rope || s.model.alibi) {
      d.error("/model/position", "megatron-legacy models learned position embeddings only" + pre_core);
    }
    if (s.training.precision == Dtype::FP8) {
      d.error("/training/precision",
              "megatron-legacy runs fp32, fp16 or bf16; FP8 came with Transformer Engine" + pre_core);
    }
    if (s.training.attention != AttentionKind::Unfused) {
      d.error(
          "/training/attention",
          "megatron-legacy runs \"unfused\" attention (FusedScaleMaskSoftmax between two batched GEMMs)" + pre_core);
    }
    if (s.training.cuda_graphs != CudaGraphScope::None) {
      d.error("/training/cuda_graphs", "megatron-legacy launches its kernels eagerly: expected \"none\"" + pre_core);
    }
    // Grouped-query attention (num_query_groups) came with the 2023 Llama support; sliding
    // windows and latent attention never reached the legacy model, and its SwitchMLP (top-1
    // experts, late 2022) is not modelled.
    if (s.model.kv_heads > 0 && s.model.kv_heads != s.model.heads) {
      d.error("/model/kv_heads", "megatron-legacy models multi-head attention only (kv_heads = heads)" + pre_core);
    }
    if (s.model.sliding_window > 0) {
      d.error("/model/sliding_window", "megatron-legacy models full causal attention only" + pre_core);
    }
    if (s.model.moe.enabled()) {
      d.error("/model/moe", "megatron-legacy models dense MLPs only (its SwitchMLP is not modelled)" + pre_core);
    }
    if (s.model.mla.enabled()) d.error("/model/mla", "megatron-legacy models multi-head attention only" + pre_core);
  }
  // apex.contrib's persistent kernel is a LayerNorm (gamma and beta); RMSNorm has no such path.
  if (s.training.persist_layer_norm && s.model.rmsnorm) {
    d.error("/training/persist_layer_norm",
            "Megatron-LM's persistent LayerNorm needs a LayerNorm model "
            "(\"norm\": \"layernorm\"), found \"rmsnorm\"");
  }
  // PyTorch 1.13's padded gradient copy is a step of FSDP1's eager reduce path (torch.compile
  // and FSDP2 came with 2.0 and later).
  if (s.training.fsdp_pad_copy && (s.training.framework != Framework::Eager || s.parallel.zero < 3)) {
    d.error("/training/fsdp_pad_copy",
            "PyTorch 1.13's padded gradient copy is modelled for FSDP1 under ZeRO-3 with the eager kernel lists "
            "(\"framework\": \"eager\", \"zero\": 3)");
  }
  // bf16 Adam state without an fp32 master copy is NeMo's distributed Adam (optim.dtype bf16):
  // Megatron's kernel lists with a sharded optimizer. DeepSpeed's BF16_Optimizer and PyTorch's
  // Adam under FSDP keep fp32 masters and state.
  if (s.training.bf16_optimizer_state) {
    const Framework f = s.training.framework;
    if (f != Framework::MegatronTe && f != Framework::Default) {
      d.error("/training/optimizer_dtype",
              "bf16 optimizer state is modelled for NeMo's distributed Adam on Megatron's kernel lists "
              "(\"framework\": \"megatron-te\" or \"default\")");
    }
    if (s.parallel.zero < 1 || s.parallel.zero > 2) {
      d.error("/training/optimizer_dtype",
              "bf16 optimizer state is modelled for NeMo's distributed Adam, a sharded optimizer (\"zero\": 1 or 2)");
    }
  }
  // apex's DistributedFusedAdam is a ZeRO-2 optimizer with overlapped synchronisation;
  // NeMo buckets it by layer without virtual pipeline stages, by virtual stage with them.
  if (s.training.apex_distributed_adam) {
    if (s.parallel.zero < 1 || s.parallel.zero > 2 || !s.parallel.dp_overlap || s.parallel.vpp > 1) {
      d.error("/training/apex_distributed_adam",
              "apex's DistributedFusedAdam buckets are modelled for a sharded optimizer (\"zero\": 1 or 2) with "
              "\"dp_overlap\": true and no virtual pipeline stages (\"vpp\": 1)");
    }
    // NeMo's GPT model on Megatron's kernels, one model chunk per rank (the V and
    // bidirectional schedules place two), every stage holding layers.
    const Framework f = s.training.framework;
    const ScheduleKind k = s.parallel.schedule;
    const bool one_chunk = k == ScheduleKind::GPipe || k == ScheduleKind::OneFOneB ||
                           (is_zero_bubble_schedule(k) && k != ScheduleKind::ZeroBubbleV);
    if (f != Framework::MegatronTe && f != Framework::Default) {
      d.error("/training/apex_distributed_adam",
              "NeMo's DistributedFusedAdam buckets are modelled with Megatron's kernel lists (\"framework\": "
              "\"megatron-te\" or \"default\")");
    }
    if (!one_chunk) {
      d.error("/training/apex_distributed_adam",
              "NeMo's DistributedFusedAdam buckets are modelled for one model chunk per rank (gpipe, 1f1b or the "
              "zb-h1/zb-h2/zb-1p/zb-2p schedules)");
    }
    for (const int n : s.parallel.stage_layers) {
      if (n == 0) {
        d.error("/training/apex_distributed_adam",
                "NeMo's DistributedFusedAdam buckets need layers on every pipeline stage (a stage_layers entry is 0)");
        break;
      }
    }
  }
  // FP8 primary weights: Transformer Engine's Float8Tensor parameters with per-tensor scales
  // (DelayedScaling or current scaling) of dense layers; the block-scaled recipes quantise
  // their weights otherwise, and grouped expert weights are not modelled.
  if (s.training.fp8_params) {
    const Fp8Recipe r = s.training.fp8_recipe;
    if (r != Fp8Recipe::Delayed && r != Fp8Recipe::Current) {
      d.error("/training/fp8_params", std::string("FP8 parameters are modelled for per-tensor scaling (\"fp8_recipe\": "
                                                  "\"delayed\" or \"current\"), found \"") +
                                          to_string(r) + "\"");
    }
    if (s.model.moe.enabled()) d.error("/training/fp8_params", "FP8 parameters are modelled for dense layers only");
    if (s.parallel.zero >= 3) {
      d.error("/training/fp8_params", "FP8 parameters are modelled with whole weights per rank (\"zero\" 0-2)");
    }
  }
  // Megatron-Core defers the output layer's weight gradients in its 1F1B and interleaved
  // schedules (finish_embedding_wgrad_compute), with pipeline parallelism and gradient
  // accumulation fusion (ModelParallelConfig.__post_init__ refuses the rest).
  if (s.training.defer_embedding_wgrad) {
    const ScheduleKind k = s.parallel.schedule;
    if (s.parallel.pp < 2 || (k != ScheduleKind::OneFOneB && k != ScheduleKind::Interleaved1F1B)) {
      d.error("/training/defer_embedding_wgrad_compute",
              "deferred output-layer weight gradients need pipeline parallelism (\"pp\" >= 2) with the \"1f1b\" "
              "or \"interleaved-1f1b\" schedule");
    }
    if (s.training.grad_accumulation != GradAccumulation::Fused) {
      d.error("/training/defer_embedding_wgrad_compute",
              "deferred output-layer weight gradients need gradient accumulation fusion (\"grad_accumulation\": "
              "\"fused\")");
    }
    if (s.parallel.zero >= 3 || s.model.mtp_depth > 0 || s.parallel.seq_chunks > 1) {
      d.error("/training/defer_embedding_wgrad_compute",
              "deferred output-layer weight gradients are modelled without ZeRO-3, multi-token prediction and "
              "sequence chunks");
    }
  }
  // Autograd's accumulation runs on the whole .grad of each parameter; FSDP reduce-
  // scatters every micro-batch's gradient and DeepSpeed accumulates in its own pass.
  if (s.training.grad_accumulation == GradAccumulation::Autograd &&
      (s.parallel.zero == 3 || s.training.framework == Framework::DeepSpeed)) {
    d.error("/training/grad_accumulation",
            "\"autograd\" accumulation is modelled for data parallelism with whole gradients per rank (zero 0-2, "
            "not the deepspeed framework, which accumulates in its own pass)");
  }
  // Megatron-LM's --DDP-impl exists in its pre-Megatron-Core code only, and PyTorch's DDP
  // all-reduces whole gradients (no optimizer sharding).
  // Only its no-pipelining loop runs the micro-batches under no_sync (one copy and all-reduce
  // per step, what the planner charges); with a pipeline DDP would sync every micro-batch.
  if (s.parallel.torch_ddp &&
      (s.training.framework != Framework::MegatronLegacy || s.parallel.zero != 0 || s.parallel.pp != 1)) {
    d.error("/parallel/ddp_impl",
            "\"torch\" (Megatron-LM's --DDP-impl torch) needs \"framework\": "
            "\"megatron-legacy\", \"zero\": 0 and \"pp\": 1");
  }
  // Block-scaled recipes need the tensor cores Transformer Engine's support matrix
  // names (nvidia.github.io/TransformerEngine/support_matrix.html): MXFP8 data-centre
  // Blackwell (compute capability 10.x), Float8BlockScaling Hopper or Blackwell.
  const Fp8Recipe recipe = s.training.fp8_recipe;
  if (s.training.precision == Dtype::FP8 && (recipe == Fp8Recipe::Mxfp8 || recipe == Fp8Recipe::Blockwise)) {
    for (const auto& g : s.cluster.groups) {
      const std::string& arch = g.node.gpu.arch;
      if (arch == "blackwell" || (recipe == Fp8Recipe::Blockwise && arch == "hopper")) continue;
      d.error("/training/fp8_recipe", std::string("\"") + to_string(recipe) + "\" scaling needs " +
                                          (recipe == Fp8Recipe::Mxfp8 ? "Blackwell" : "Hopper or Blackwell") +
                                          " GPUs; " + g.node.gpu.name + " is " + (arch.empty() ? "neither" : arch));
    }
  }
  // Activation offload needs the GPUs' host link and keeps one layer of each chunk
  // on the GPU (Transformer Engine offloads at most all but one layer).
  if (s.parallel.offload_layers > 0) {
    if (s.model.moe.enabled()) {
      d.error("/parallel/activation_offload_layers", "activation offload is modelled for dense layers only");
    }
    for (const auto& g : s.cluster.groups) {
      if (g.node.gpu.host_bandwidth <= 0) {
        d.error("/parallel/activation_offload_layers",
                "activation offload needs the GPU's host link; " + g.node.gpu.name + " has no host_bandwidth");
      }
    }
    const int chunks = s.parallel.pp * s.parallel.vpp;
    if (s.parallel.stage_layers.empty() && s.parallel.offload_layers >= s.model.layers / chunks) {
      d.error("/parallel/activation_offload_layers",
              std::to_string(s.parallel.offload_layers) + " layers offloaded of " +
                  std::to_string(s.model.layers / chunks) + " per model chunk; at most all but one");
    }
  }
  // The layout rules live with the planner (models/layout_rules.hpp).
  for (const LayoutProblem& p : check_layout(s.model, s.parallel, s.training, s.cluster)) d.error(p.path, p.message);
  // The simulation's work and memory grow with micro-batches x layers (every
  // layer of every micro-batch is a task): bounded before anything is built.
  if (d.ok()) {
    // Uneven shares: the planner builds programs for each distinct explicit
    // share (their sum bounds the work); "balanced" may give one replica up to
    // every micro-batch of the iteration, and its distinct shares sum to no more.
    const ParallelSpec& par = s.parallel;
    std::int64_t micro_batches = par.global_batch / (std::int64_t{par.micro_batch} * par.dp);
    std::string what = "global_batch / (micro_batch*dp) = ";
    if (par.dp_shares_balanced) {
      micro_batches = par.global_batch / par.micro_batch;
      what = "\"balanced\" shares of global_batch / micro_batch = ";
    }
    if (!par.dp_shares.empty()) {
      std::vector<int> distinct = par.dp_shares;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      micro_batches = std::accumulate(distinct.begin(), distinct.end(), std::int64_t{0});
      what = "the distinct shares (one program each) add up to ";
    }
    if (par.per_cp_rank_programs()) {  // uneven CP or head shares: each CP rank runs a program of its own
      micro_batches *= par.cp;
      what = "micro-batches x cp (uneven cp_shares or head_shares: one program per CP rank) = ";
    }
    if (par.seq_chunks > 1) {  // seq1f1b: each sequence chunk is a unit of its own
      micro_batches *= par.seq_chunks;
      what = "micro-batches x seq_chunks = ";
    }
    // An encoder's layers are tasks too (model.encoder, docs/heterogeneous.md).
    const std::int64_t layers = s.model.layers + (s.model.encoder.empty() ? 0 : s.model.encoder.front().layers);
    if (micro_batches > kMaxMicroBatches || micro_batches * layers > kMaxMicroBatchLayers) {
      d.error(par.uneven_cp()       ? "/parallel/cp_shares"
              : par.uneven_heads()  ? "/parallel/head_shares"
              : par.uneven_shares() ? "/parallel/dp_shares"
                                    : "/parallel/global_batch",
              what + std::to_string(micro_batches) + " micro-batches of " + std::to_string(layers) +
                  " layers; at most " + std::to_string(kMaxMicroBatches) + " micro-batches and " +
                  std::to_string(kMaxMicroBatchLayers) +
                  " micro-batch layers per iteration are simulated (docs/limits.md)");
    }
  }
}

}  // namespace

Scenario load_scenario_text(const std::string& text, const std::string& file, const std::string& base_dir,
                            const std::vector<std::string>& overrides, const Catalog& catalog,
                            std::set<std::string>* keys_read) {
  Diagnostics diags(file);
  diags.log_keys_to(keys_read);
  std::optional<nlohmann::json> doc = parse_json_text(text, diags);
  diags.throw_if_errors();
  for (const auto& o : overrides) apply_override(*doc, o, diags);
  diags.throw_if_errors();

  Scenario s;
  s.file = file;
  ObjectReader top(*doc, "", diags);
  if (!top.valid()) diags.throw_if_errors();
  read_schema_version(top);
  s.name = top.string("name", std::filesystem::path(file).stem().string());
  s.description = top.string("description", "");
  s.id = top.string("id", "");
  // A "workload" section (GNN, DLRM, trace) replaces the transformer's model and training.
  const bool transformer = !top.has("workload");
  if (transformer) s.model = read_scenario_model(top, catalog);
  s.cluster = read_cluster(top, catalog);
  const nlohmann::json* wj = top.raw("workload");
  const bool dlrm = wj != nullptr && wj->is_object() && wj->contains("kind") && (*wj)["kind"] == "dlrm";
  s.parallel = read_parallel(top, transformer || dlrm);
  if (transformer) s.training = read_training(top, s.model);
  s.workload = read_workload(top, s.parallel, s.cluster, base_dir);
  s.expected = read_expected(top);
  s.reliability = read_reliability(top, s.cluster);
  read_perturbations(top, s.cluster, s.link_perturbations, s.perturbation_sources);
  s.diloco = read_diloco(top, s.model, s.parallel, s.training, s.cluster);
  s.profiles = read_calibration(top, catalog, s.cluster, base_dir, s.warnings);
  if (const nlohmann::json* fj = top.raw("flow")) {
    ObjectReader fr(*fj, top.at("flow"), diags);
    if (fr.valid()) {
      const std::string ranks = fr.choice("ranks", "auto", {"auto", "all", "groups"});
      s.flow_ranks = ranks == "all" ? FlowRanks::All : ranks == "groups" ? FlowRanks::Groups : FlowRanks::Auto;
      fr.finish();
    }
  }
  if (s.model.max_seq_len > 0 && s.training.seq_len > s.model.max_seq_len) {
    s.warnings.push_back(file + ": /training/seq_len: " + std::to_string(s.training.seq_len) +
                         " tokens is beyond the model's maximum context of " + std::to_string(s.model.max_seq_len) +
                         " (max_seq_len); the simulation assumes the model was extended to it");
  }
  if (s.model.tied_embeddings && s.parallel.pp > 1 && !s.parallel.stages.empty() &&
      s.training.tied_grad_sync != TiedGradSync::None) {
    s.warnings.push_back(file +
                         ": /parallel/stages: the all-reduce of the tied embedding's gradient between the first and "
                         "last stage is not modelled with per-stage layouts (docs/frameworks.md)");
  }
  // As in Megatron-Core, a deferral limit without the deferral does nothing: said, not refused
  // (a sweep or --set may switch the deferral off and leave the recipe's limit).
  if (const nlohmann::json* t = top.raw("training");
      t != nullptr && t->is_object() && t->contains("wgrad_deferral_limit") && !s.training.defer_embedding_wgrad) {
    s.warnings.push_back(file +
                         ": /training/wgrad_deferral_limit: no effect without \"defer_embedding_wgrad_compute\": true");
  }
  default_attention_of_framework(top, s);
  top.finish();
  if (diags.ok()) check_consistency(s, diags);
  diags.throw_if_errors();
  return s;
}

Scenario load_scenario_file(const std::string& path, const std::vector<std::string>& overrides,
                            const Catalog& catalog) {
  Diagnostics diags(path);
  const std::string text = read_text_file(path, diags);
  if (!diags.ok()) {
    const std::string& why = diags.items().front().message;
    throw InputError({Diagnostic{path, "", why == "cannot read the file" ? "cannot open the scenario file" : why}});
  }
  return load_scenario_text(text, path, std::filesystem::path(path).parent_path().string(), overrides, catalog);
}

}  // namespace trainsim
