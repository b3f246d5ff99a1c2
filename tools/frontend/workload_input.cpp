#include "tools/frontend/workload_input.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

namespace trainsim {

namespace {

constexpr std::int64_t kMaxGraphNodes = std::int64_t{1} << 40;
constexpr std::int64_t kMaxGraphEdges = std::int64_t{1} << 44;
constexpr std::int64_t kMaxTableRows = std::int64_t{1} << 40;

Dtype read_precision(ObjectReader& r, const char* key, const std::string& fallback) {
  const std::string p = r.choice(key, fallback, {"fp32", "tf32", "fp16", "bf16"});
  for (std::size_t d = 0; d < kNumDtypes; ++d) {
    if (p == to_string(static_cast<Dtype>(d))) return static_cast<Dtype>(d);
  }
  return Dtype::FP32;
}

std::vector<int> read_sizes(ObjectReader& r, const char* key, bool required) {
  const nlohmann::json* v = r.raw(key);
  if (v == nullptr) {
    if (required) r.error(key, "required list of layer sizes is missing");
    return {};
  }
  bool ok = v->is_array() && !v->empty() && v->size() <= 64;
  for (const auto& x : *v)
    ok = ok && x.is_number_integer() && x.get<std::int64_t>() >= 1 && x.get<std::int64_t>() <= 65536;
  if (!ok) {
    r.error(key, "expected an array of 1 to 64 layer sizes, each 1 to 65,536");
    return {};
  }
  return v->get<std::vector<int>>();
}

GnnSpec read_gnn(ObjectReader& r, const ParallelSpec& par) {
  GnnSpec g;
  const std::string m = r.choice("model", "graphsage", {"gcn", "graphsage", "gat"});
  g.model = m == "gcn" ? GnnModel::Gcn : m == "gat" ? GnnModel::Gat : GnnModel::GraphSage;
  const nlohmann::json* gj = r.raw("graph");
  if (gj == nullptr) {
    r.error("graph", "required graph (a preset name or {nodes, edges, features, classes}) is missing");
  } else if (gj->is_string()) {
    const std::string name = gj->get<std::string>();
    if (const GraphStats* p = find_graph_preset(name)) {
      g.graph = *p;
    } else {
      std::string names;
      for (const auto& n : graph_preset_names()) names += (names.empty() ? "" : ", ") + n;
      const std::string near = did_you_mean(name, graph_preset_names());
      r.error("graph", "unknown graph preset \"" + name + "\"" +
                           (near.empty() ? "" : " (did you mean \"" + near + "\"?)") + "; known: " + names);
    }
  } else {
    ObjectReader gr(*gj, r.at("graph"), r.diagnostics());
    if (gr.valid()) {
      g.graph.name = gr.string("name", "graph");
      g.graph.nodes = gr.integer("nodes", 0, 1, kMaxGraphNodes, true);
      g.graph.edges = gr.integer("edges", 0, 1, kMaxGraphEdges, true);
      g.graph.features = static_cast<int>(gr.integer("features", 0, 1, 1 << 20, true));
      g.graph.classes = static_cast<int>(gr.integer("classes", 0, 1, 1 << 20, true));
      gr.finish();
    }
  }
  g.layers = static_cast<int>(r.integer("layers", 2, 1, 1024));
  g.hidden = static_cast<int>(r.integer("hidden", 256, 1, 1 << 16));
  g.heads = static_cast<int>(r.integer("heads", g.model == GnnModel::Gat ? 4 : 1, 1, 1024));
  if (g.model != GnnModel::Gat && r.has("heads")) r.error("heads", "attention heads apply to the gat model only");
  g.partitions = par.dp;
  g.edge_cut = r.number("edge_cut", random_partition_edge_cut(par.dp), 0, 1);
  g.halo_nodes = r.integer("halo_nodes", -1, 0, kMaxGraphNodes);
  g.pipelined = r.choice("pipeline", "none", {"none", "pipegcn"}) == "pipegcn";
  g.aggregate_first = r.boolean("aggregate_first", false);
  g.index_bytes = r.choice("index_dtype", "int64", {"int64", "int32"}) == "int32" ? 4 : 8;
  g.precision = read_precision(r, "precision", "fp32");
  return g;
}

DlrmSpec read_dlrm(ObjectReader& r, const ParallelSpec& par) {
  DlrmSpec d;
  if (r.has("preset")) {
    const std::string p = r.choice("preset", "dlrm-dcnv2", {"dlrm-dcnv2"});
    d = dlrm_dcnv2_mlperf();
  }
  if (const nlohmann::json* t = r.raw("tables")) {
    d.tables.clear();
    if (!t->is_array() || t->empty() || t->size() > 4096) {
      r.error("tables", "expected an array of 1 to 4,096 tables {rows, dim, pooling}");
    } else {
      for (std::size_t i = 0; i < t->size(); ++i) {
        ObjectReader tr((*t)[i], json_pointer_append(r.at("tables"), i), r.diagnostics());
        if (!tr.valid()) continue;
        EmbeddingTable e;
        e.rows = tr.integer("rows", 0, 1, kMaxTableRows, true);
        e.dim = static_cast<int>(tr.integer("dim", 0, 1, 65536, true));
        e.pooling = tr.number("pooling", 1, 0, 1e6);
        tr.finish();
        d.tables.push_back(e);
      }
    }
  } else if (d.tables.empty()) {
    r.error("tables", "required embedding tables (or \"preset\") are missing");
  }
  d.dense_features = static_cast<int>(r.integer("dense_features", d.dense_features, 0, 65536));
  if (r.has("bottom_mlp") || d.bottom_mlp.empty()) d.bottom_mlp = read_sizes(r, "bottom_mlp", true);
  if (r.has("top_mlp") || d.top_mlp.empty()) d.top_mlp = read_sizes(r, "top_mlp", true);
  const std::string inter =
      r.choice("interaction", d.interaction == DlrmInteraction::Dcnv2 ? "dcnv2" : "dot", {"dot", "dcnv2"});
  d.interaction = inter == "dcnv2" ? DlrmInteraction::Dcnv2 : DlrmInteraction::Dot;
  d.cross_layers = static_cast<int>(r.integer("cross_layers", d.cross_layers, 0, 64));
  d.cross_rank = static_cast<int>(r.integer("cross_rank", d.cross_rank, 0, 65536));
  d.precision = read_precision(r, "precision", "fp16");
  d.embedding_dtype = read_precision(r, "embedding_precision", "fp32");
  const std::string opt = r.choice("embedding_optimizer", "rowwise-adagrad", {"rowwise-adagrad", "adagrad", "sgd"});
  d.optimizer_state_per_element = 0;
  if (opt == "adagrad") d.optimizer_state_per_element = 1;
  const std::string sh = r.choice("sharding", "auto",
                                  {"auto", "table-wise", "row-wise", "column-wise", "data-parallel", "table-row-wise"});
  d.sharding = sh == "table-wise"       ? EmbeddingSharding::TableWise
               : sh == "row-wise"       ? EmbeddingSharding::RowWise
               : sh == "column-wise"    ? EmbeddingSharding::ColumnWise
               : sh == "data-parallel"  ? EmbeddingSharding::DataParallel
               : sh == "table-row-wise" ? EmbeddingSharding::TableRowWise
                                        : EmbeddingSharding::Auto;
  d.data_parallel_threshold_bytes = r.quantity("data_parallel_threshold", Quantity::Bytes, 0, 0, 1e13);
  if (!d.bottom_mlp.empty()) {
    for (const EmbeddingTable& t : d.tables) {
      if (d.interaction == DlrmInteraction::Dcnv2 || d.interaction == DlrmInteraction::Dot) {
        if (t.dim != d.bottom_mlp.back()) {
          r.error("bottom_mlp", "the bottom MLP's last size (" + std::to_string(d.bottom_mlp.back()) +
                                    ") must equal every table's dim (" + std::to_string(t.dim) +
                                    ") for the feature interaction");
          break;
        }
      }
    }
  }
  // Row-wise Adagrad keeps one state per row: per element 1/dim.
  if (opt == "rowwise-adagrad" && !d.tables.empty()) d.optimizer_state_per_element = 1.0 / d.tables.front().dim;
  d.global_batch = par.global_batch;
  return d;
}

CollectiveKind chakra_collective(std::int64_t code, bool* ok) {
  // Chakra's CollectiveCommType (et_def.proto): ALL_REDUCE 0, REDUCE 1,
  // ALL_GATHER 2, GATHER 3, SCATTER 4, BROADCAST 5, ALL_TO_ALL 6, REDUCE_SCATTER 7.
  *ok = true;
  switch (code) {
    case 0:
      return CollectiveKind::AllReduce;
    case 2:
      return CollectiveKind::AllGather;
    case 5:
      return CollectiveKind::Broadcast;
    case 6:
      return CollectiveKind::AllToAll;
    case 7:
      return CollectiveKind::ReduceScatter;
    default:
      *ok = false;
      return CollectiveKind::AllReduce;
  }
}

}  // namespace

TraceSpec read_chakra_json(const std::string& text, const std::string& file) {
  Diagnostics diags(file);
  std::optional<nlohmann::json> doc = parse_json_text(text, diags);
  diags.throw_if_errors();
  TraceSpec spec;
  spec.file = file;
  if (!doc->is_object() || !doc->contains("nodes") || !(*doc)["nodes"].is_array()) {
    diags.error("", "expected a Chakra execution trace in JSON form: an object with a \"nodes\" array");
    diags.throw_if_errors();
  }
  const nlohmann::json& nodes = (*doc)["nodes"];
  if (nodes.empty() || nodes.size() > kMaxTraceNodes) {
    diags.error("/nodes",
                "expected 1 to " + std::to_string(kMaxTraceNodes) + " nodes, found " + std::to_string(nodes.size()));
    diags.throw_if_errors();
  }
  std::map<std::int64_t, std::uint32_t> index_of_id;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::string at = json_pointer_append("/nodes", i);
    const nlohmann::json& n = nodes[i];
    TraceNode tn;
    if (!n.is_object()) {
      diags.error(at, "expected a node object, found " + describe_json_type(n));
      continue;
    }
    auto get = [&](const char* key) -> const nlohmann::json* {
      auto it = n.find(key);
      return it == n.end() ? nullptr : &*it;
    };
    const nlohmann::json* id = get("id");
    if (id == nullptr || !id->is_number_integer()) {
      diags.error(json_pointer_append(at, "id"), "required integer node id is missing");
      continue;
    }
    if (index_of_id.count(id->get<std::int64_t>()) > 0) {
      diags.error(json_pointer_append(at, "id"), "node id " + id->dump() + " appears twice");
      continue;
    }
    const nlohmann::json* name = get("name");
    tn.name = name != nullptr && name->is_string() ? name->get<std::string>() : "node " + id->dump();
    const nlohmann::json* type = get("type");
    const std::string kind = type != nullptr && type->is_string() ? type->get<std::string>() : "";
    if (kind == "COMP_NODE") {
      tn.collective = false;
    } else if (kind == "COMM_COLL_NODE") {
      tn.collective = true;
    } else {
      diags.error(json_pointer_append(at, "type"),
                  "node \"" + tn.name + "\" has kind " + (type == nullptr ? "(none)" : type->dump()) +
                      "; only COMP_NODE and COMM_COLL_NODE are replayed (point-to-point and memory nodes are not)");
      continue;
    }
    if (const nlohmann::json* d = get("duration_micros")) {
      if (!d->is_number() || d->get<double>() < 0 || d->get<double>() > 1e12) {
        diags.error(json_pointer_append(at, "duration_micros"), "expected a duration of 0 to 1e12 microseconds");
      } else {
        tn.duration_s = d->get<double>() * 1e-6;
      }
    } else if (!tn.collective) {
      diags.error(json_pointer_append(at, "duration_micros"), "a compute node needs its measured duration_micros");
    }
    bool have_type = false, have_size = false;
    if (const nlohmann::json* attrs = get("attr")) {
      if (!attrs->is_array()) {
        diags.error(json_pointer_append(at, "attr"), "expected an array of {name, *_val} attributes");
      } else {
        for (std::size_t a = 0; a < attrs->size(); ++a) {
          const std::string ap = json_pointer_append(json_pointer_append(at, "attr"), a);
          const nlohmann::json& attr = (*attrs)[a];
          if (!attr.is_object() || !attr.contains("name") || !attr["name"].is_string()) {
            diags.error(ap, "expected an attribute {name, *_val}");
            continue;
          }
          const std::string an = attr["name"].get<std::string>();
          const nlohmann::json* val = nullptr;
          for (const char* k : {"int64_val", "uint64_val", "int32_val", "double_val", "string_val", "bool_val"}) {
            if (attr.contains(k)) val = &attr[k];
          }
          if (val == nullptr) {
            diags.error(ap, "attribute \"" + an + "\" has no value (int64_val, double_val, string_val, ...)");
            continue;
          }
          auto number = [&](double lo, double hi) {
            if (!val->is_number() || val->get<double>() < lo || val->get<double>() > hi) {
              diags.error(ap, "attribute \"" + an + "\": expected a number in [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "]");
              return 0.0;
            }
            return val->get<double>();
          };
          if (an == "comm_type") {
            bool ok = val->is_number_integer();
            if (ok) tn.kind = chakra_collective(val->get<std::int64_t>(), &ok);
            if (!ok) {
              diags.error(ap, "collective type " + val->dump() +
                                  " is not replayed; known: 0 ALL_REDUCE, 2 ALL_GATHER, 5 BROADCAST, 6 ALL_TO_ALL, 7 "
                                  "REDUCE_SCATTER");
            }
            have_type = true;
          } else if (an == "comm_size") {
            tn.comm_bytes = static_cast<std::uint64_t>(number(0, 1e15));
            have_size = true;
          } else if (an == "num_ops") {
            tn.flops = number(0, 1e21);
          } else if (an == "tensor_size") {
            tn.bytes = number(0, 1e18);
          } else if (an == "pg_name") {
            const std::string g = val->is_string() ? val->get<std::string>() : "";
            if (g == "tp") {
              tn.group = TraceGroup::TP;
            } else if (g == "dp") {
              tn.group = TraceGroup::DP;
            } else if (g == "world" || g == "0") {
              tn.group = TraceGroup::World;
            } else {
              diags.error(ap, "process group " + val->dump() + " is not known; expected \"tp\", \"dp\" or \"world\"");
            }
          } else if (an == "stream") {
            if (!val->is_string() || val->get<std::string>().empty() || val->get<std::string>().size() > 64) {
              diags.error(ap, "expected a stream name of 1 to 64 characters");
            } else {
              tn.stream = val->get<std::string>();
            }
          }
          // Other attributes (is_cpu_op, op_schema, ...) do not change the replay.
        }
      }
    }
    if (tn.collective && (!have_type || !have_size)) {
      diags.error(json_pointer_append(at, "attr"), "a COMM_COLL_NODE needs the comm_type and comm_size attributes");
    }
    for (const char* key : {"data_deps", "ctrl_deps"}) {
      const nlohmann::json* deps = get(key);
      if (deps == nullptr) continue;
      if (!deps->is_array()) {
        diags.error(json_pointer_append(at, key), "expected an array of node ids");
        continue;
      }
      for (std::size_t k = 0; k < deps->size(); ++k) {
        const nlohmann::json& d = (*deps)[k];
        const auto it = d.is_number_integer() ? index_of_id.find(d.get<std::int64_t>()) : index_of_id.end();
        if (it == index_of_id.end()) {
          diags.error(
              json_pointer_append(json_pointer_append(at, key), k),
              "dependency " + d.dump() + " is not the id of an earlier node (nodes must be in dependency order)");
          continue;
        }
        if (std::find(tn.deps.begin(), tn.deps.end(), it->second) == tn.deps.end()) tn.deps.push_back(it->second);
      }
    }
    index_of_id.emplace(id->get<std::int64_t>(), static_cast<std::uint32_t>(spec.nodes.size()));
    spec.nodes.push_back(std::move(tn));
  }
  if (const auto it = doc->find("samples_per_replica"); it != doc->end()) {
    if (!it->is_number() || it->get<double>() <= 0 || it->get<double>() > 1e12) {
      diags.error("/samples_per_replica", "expected a number of samples in (0, 1e12]");
    } else {
      spec.samples_per_replica = it->get<double>();
    }
  }
  diags.throw_if_errors();
  return spec;
}

TraceSpec read_kineto_json(const std::string& text, const std::string& file) {
  Diagnostics diags(file);
  std::optional<nlohmann::json> doc = parse_json_text(text, diags);
  diags.throw_if_errors();
  const nlohmann::json* events = nullptr;
  std::string base;
  if (doc->is_array()) {
    events = &*doc;
  } else if (doc->is_object() && doc->contains("traceEvents") && (*doc)["traceEvents"].is_array()) {
    events = &(*doc)["traceEvents"];
    base = "/traceEvents";
  } else {
    diags.error("", "expected a PyTorch profiler trace: an object with a \"traceEvents\" array, or an array of events");
    diags.throw_if_errors();
  }
  struct ProfiledOp {
    std::size_t index;
    std::string name, stream;
    double ts, dur;
    bool kernel, collective;
    CollectiveKind kind;
    std::uint64_t bytes;
  };
  std::vector<ProfiledOp> all;
  bool any_kernel = false;
  for (std::size_t i = 0; i < events->size(); ++i) {
    const nlohmann::json& e = (*events)[i];
    if (!e.is_object() || e.value("ph", "") != "X") continue;  // metadata, flows, instants
    const std::string at = json_pointer_append(base, i);
    const auto ts = e.find("ts");
    const auto dur = e.find("dur");
    if (ts == e.end() || !ts->is_number() || dur == e.end() || !dur->is_number() || dur->get<double>() < 0 ||
        dur->get<double>() > 1e12 || std::abs(ts->get<double>()) > 1e18) {
      diags.error(at, "a complete event (\"ph\": \"X\") needs numeric ts and dur (0 to 1e12 microseconds)");
      continue;
    }
    ProfiledOp ev{i,
                  e.value("name", std::string("event")),
                  "",
                  ts->get<double>(),
                  dur->get<double>(),
                  false,
                  false,
                  CollectiveKind::AllReduce,
                  0};
    const std::string cat = e.value("cat", std::string());
    ev.kernel = cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset";
    any_kernel = any_kernel || ev.kernel;
    const auto tid = e.find("tid");
    ev.stream = (ev.kernel ? "stream " : "thread ") + (tid == e.end() ? std::string("0") : tid->dump());
    if (ev.kernel && ev.name.rfind("nccl", 0) == 0) {
      const auto args = e.find("args");
      const bool sized = args != e.end() && args->is_object() && args->contains("Collective name") &&
                         args->contains("In msg nelems") && (*args)["In msg nelems"].is_number_unsigned();
      if (!sized) {
        diags.error(at, "NCCL kernel \"" + ev.name +
                            "\" has no \"Collective name\" and \"In msg nelems\" arguments: its message size is "
                            "unknown, so it cannot be re-costed on the simulated network");
        continue;
      }
      const std::string coll =
          (*args)["Collective name"].is_string() ? (*args)["Collective name"].get<std::string>() : "";
      bool ok = true;
      ev.kind = coll == "allreduce"                                          ? CollectiveKind::AllReduce
                : coll == "allgather" || coll == "_allgather_base"           ? CollectiveKind::AllGather
                : coll == "reduce_scatter" || coll == "_reduce_scatter_base" ? CollectiveKind::ReduceScatter
                : coll == "all_to_all" || coll == "all_to_allv"              ? CollectiveKind::AllToAll
                : coll == "broadcast"                                        ? CollectiveKind::Broadcast
                                                                             : (ok = false, CollectiveKind::AllReduce);
      if (!ok) {
        diags.error(at, "NCCL collective \"" + coll +
                            "\" is not replayed (allreduce, allgather, reduce_scatter, "
                            "all_to_all, broadcast)");
        continue;
      }
      const std::string dtype = args->value("dtype", std::string("Float"));
      const double elem = dtype == "Float" || dtype == "Int" ? 4 : dtype == "Double" || dtype == "Long" ? 8 : 2;
      ev.bytes = static_cast<std::uint64_t>((*args)["In msg nelems"].get<double>() * elem);
      ev.collective = true;
    }
    all.push_back(std::move(ev));
  }
  diags.throw_if_errors();
  // The nodes: GPU work when the trace has any; else the CPU ops directly under a
  // ProfilerStep (or top-level ops when the trace has no steps).
  std::vector<ProfiledOp> steps;
  for (const ProfiledOp& e : all) {
    if (!e.kernel && e.name.rfind("ProfilerStep#", 0) == 0) steps.push_back(e);
  }
  std::vector<ProfiledOp> chosen;
  if (any_kernel) {
    for (const ProfiledOp& e : all) {
      if (e.kernel) chosen.push_back(e);
    }
  } else {
    std::vector<ProfiledOp> cpu;
    for (const ProfiledOp& e : all) {
      if (e.name.rfind("ProfilerStep#", 0) == 0) continue;
      const bool in_step = steps.empty() || std::any_of(steps.begin(), steps.end(), [&](const ProfiledOp& s) {
                             return s.stream == e.stream && e.ts >= s.ts && e.ts + e.dur <= s.ts + s.dur;
                           });
      if (in_step) cpu.push_back(e);
    }
    std::stable_sort(cpu.begin(), cpu.end(), [](const ProfiledOp& a, const ProfiledOp& b) {
      return a.ts < b.ts || (a.ts == b.ts && a.dur > b.dur);
    });
    std::map<std::string, double> open_until;  // per thread: end of the current top-level op
    for (const ProfiledOp& e : cpu) {
      auto it = open_until.find(e.stream);
      if (it != open_until.end() && e.ts < it->second) continue;  // nested in a top-level op
      open_until[e.stream] = e.ts + e.dur;
      chosen.push_back(e);
    }
  }
  std::stable_sort(chosen.begin(), chosen.end(), [](const ProfiledOp& a, const ProfiledOp& b) { return a.ts < b.ts; });
  if (chosen.empty() || chosen.size() > kMaxTraceNodes) {
    diags.error(base, "expected 1 to " + std::to_string(kMaxTraceNodes) +
                          " replayable events (GPU kernels, or CPU ops "
                          "of the profiled steps), found " +
                          std::to_string(chosen.size()));
    diags.throw_if_errors();
  }
  TraceSpec spec;
  spec.file = file;
  std::map<std::string, std::uint32_t> last_of_stream;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const ProfiledOp& e = chosen[i];
    TraceNode n;
    n.name = e.name;
    n.collective = e.collective;
    n.kind = e.kind;
    n.comm_bytes = e.bytes;
    n.duration_s = e.dur * 1e-6;
    n.stream = e.stream;
    // Happens-before across streams: the latest-ending op of each other stream that ended before this one began.
    for (const auto& [stream, last] : last_of_stream) {
      if (stream == e.stream) continue;
      for (std::size_t j = last + 1; j-- > 0;) {
        if (chosen[j].stream == stream && chosen[j].ts + chosen[j].dur <= e.ts) {
          n.deps.push_back(static_cast<std::uint32_t>(j));
          break;
        }
      }
    }
    last_of_stream[e.stream] = static_cast<std::uint32_t>(i);
    spec.nodes.push_back(std::move(n));
  }
  return spec;
}

namespace {

TraceSpec read_trace(ObjectReader& r, const ParallelSpec& par, const std::string& base_dir) {
  TraceSpec t;
  const std::string file = r.string("file", "", true);
  const bool kineto = r.choice("format", "chakra-json", {"chakra-json", "kineto"}) == "kineto";
  const bool recost = r.choice("compute", "measured", {"measured", "recost"}) == "recost";
  const Dtype dt = read_precision(r, "precision", "bf16");
  const double samples = r.number("samples_per_replica", 0, 0, 1e12);
  if (file.empty()) return t;
  std::filesystem::path p = file;
  if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
  Diagnostics fd(p.string());
  const std::string text = read_text_file(p.string(), fd);
  if (!fd.ok()) {
    r.error("file", "cannot read the trace \"" + p.string() + "\": " + fd.items().front().message);
    return t;
  }
  try {
    t = kineto ? read_kineto_json(text, p.string()) : read_chakra_json(text, p.string());
  } catch (const InputError& e) {
    for (const Diagnostic& d : e.diagnostics()) r.error("file", d.format());
    return t;
  }
  t.recost = recost;
  t.dtype = dt;
  t.tp = par.tp;
  if (samples > 0) t.samples_per_replica = samples;
  return t;
}

}  // namespace

WorkloadSpec read_workload(ObjectReader& top, const ParallelSpec& par, const ClusterSpec& cluster,
                           const std::string& base_dir) {
  const int cluster_gpus = cluster.total_gpus();
  WorkloadSpec w;
  const nlohmann::json* v = top.raw("workload");
  if (v == nullptr) return w;
  ObjectReader r(*v, top.at("workload"), top.diagnostics());
  if (!r.valid()) return w;
  const std::string kind = r.choice("kind", "", {"gnn", "dlrm", "trace"}, true);
  w.kind = kind == "gnn" ? WorkloadKind::Gnn : kind == "dlrm" ? WorkloadKind::Dlrm : WorkloadKind::Trace;
  if (kind == "gnn") w.gnn = read_gnn(r, par);
  if (kind == "dlrm") w.dlrm = read_dlrm(r, par);
  if (kind == "trace") w.trace = read_trace(r, par, base_dir);
  r.finish();
  if (kind.empty()) return w;
  // Ranks of these workloads are data-parallel (a trace: tp x dp).
  Diagnostics& d = top.diagnostics();
  const bool tp_ok = par.tp == 1 || kind == "trace";
  if (!tp_ok || par.pp != 1 || par.cp != 1 || par.ep != 1 || par.vpp != 1) {
    d.error("/parallel",
            "a " + kind + " workload runs " +
                (kind == "trace" ? std::string("tp x dp ranks (pp, cp, ep and vpp must be 1)")
                                 : std::string("data-parallel ranks only (tp, pp, cp, ep, vpp must be 1)")));
  } else if (par.tp * par.dp != cluster_gpus) {
    d.error("/parallel/dp", "tp*dp = " + std::to_string(par.tp * par.dp) + " ranks, but the cluster has " +
                                std::to_string(cluster_gpus) + " GPUs (one rank per GPU)");
  }
  if (par.tp * static_cast<double>(par.dp) > kMaxWorkloadRanks) {
    d.error("/parallel/dp", "a " + kind + " workload simulates every rank: at most " +
                                std::to_string(kMaxWorkloadRanks) + " ranks (tp*dp)");
  } else if (kind == "trace" && static_cast<double>(w.trace.nodes.size()) * par.tp * par.dp > kMaxTraceTasks) {
    d.error("/parallel/dp", "the trace's " + std::to_string(w.trace.nodes.size()) + " nodes on " +
                                std::to_string(par.tp * par.dp) +
                                " ranks exceed the 134,217,728 simulated tasks a trace replay may have");
  }
  // The precision the work runs in must be one every GPU of the cluster computes in.
  const bool computes = kind != "trace" || w.trace.recost;
  const Dtype dt = kind == "gnn" ? w.gnn.precision : kind == "dlrm" ? w.dlrm.precision : w.trace.dtype;
  for (const NodeGroup& g : cluster.groups) {
    if (computes && !(g.node.gpu.peak(dt) > 0)) {
      d.error("/workload/precision", std::string("the ") + g.node.gpu.name + " has no " + to_string(dt) +
                                         " peak in the catalog; choose a precision it computes in");
      break;
    }
  }
  if (kind == "dlrm" && par.global_batch % par.dp != 0) {
    d.error("/parallel/global_batch",
            "the global batch must split evenly over the dp=" + std::to_string(par.dp) + " ranks");
  }
  return w;
}

std::unique_ptr<Workload> make_workload(const WorkloadSpec& spec) {
  switch (spec.kind) {
    case WorkloadKind::Gnn:
      return std::make_unique<GnnWorkload>(spec.gnn);
    case WorkloadKind::Dlrm:
      return std::make_unique<DlrmWorkload>(spec.dlrm);
    case WorkloadKind::Trace:
      return std::make_unique<TraceWorkload>(spec.trace);
    case WorkloadKind::Transformer:
      break;
  }
  return nullptr;
}

}  // namespace trainsim
