#include "tools/frontend/catalog.hpp"

#include <algorithm>
#include <cctype>

#include "calibration/profile.hpp"
#include "models/moe.hpp"
#include "tools/frontend/moe_reader.hpp"

namespace trainsim {

std::span<const EmbeddedFile> model_catalog_files();

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

template <class T>
const T* find_by_name(const std::vector<T>& v, const std::string& name) {
  for (const T& x : v) {
    if (lower(x.name) == lower(name)) return &x;
  }
  return nullptr;
}

constexpr double kBig = 1e30;

}  // namespace

TransformerSpec read_model(ObjectReader& r, const TransformerSpec* base) {
  TransformerSpec m = base ? *base : TransformerSpec{};
  const bool req = base == nullptr;
  m.name = r.string("name", m.name, req);
  m.family = r.string("family", m.family);
  m.layers = static_cast<int>(r.integer("layers", m.layers, 1, 100000, req));
  m.hidden = static_cast<int>(r.integer("hidden", m.hidden, 1, 1 << 20, req));
  m.heads = static_cast<int>(r.integer("heads", m.heads, 1, 1 << 16, req));
  m.head_dim_override = static_cast<int>(r.integer("head_dim", m.head_dim_override, 1, 1 << 16));
  m.kv_heads = static_cast<int>(r.integer("kv_heads", m.kv_heads, 1, 1 << 16));
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  m.ffn_hidden = static_cast<int>(r.integer("ffn_hidden", m.ffn_hidden, 1, 1 << 22, req));
  m.vocab = static_cast<int>(r.integer("vocab", m.vocab, 1, 1 << 24, req));
  const std::string mlp = r.choice("mlp",
                                   m.mlp == MlpKind::SwiGlu ? "swiglu"
                                   : m.mlp == MlpKind::Relu ? "relu"
                                                            : "gelu",
                                   {"gelu", "relu", "swiglu"});
  m.mlp = mlp == "swiglu" ? MlpKind::SwiGlu : mlp == "relu" ? MlpKind::Relu : MlpKind::Gelu;
  m.rmsnorm = r.choice("norm", m.rmsnorm ? "rmsnorm" : "layernorm", {"layernorm", "rmsnorm"}) == "rmsnorm";
  const std::string position = r.choice("position",
                                        m.rope    ? "rope"
                                        : m.alibi ? "alibi"
                                                  : "learned",
                                        {"learned", "rope", "alibi"});
  m.rope = position == "rope";
  m.alibi = position == "alibi";
  m.tied_embeddings = r.boolean("tied_embeddings", m.tied_embeddings);
  m.bias = r.boolean("bias", m.bias);
  m.qkv_split = r.boolean("qkv_split", m.qkv_split);
  m.sliding_window = static_cast<int>(r.integer("sliding_window", m.sliding_window, 1, 1 << 24));
  m.max_seq_len = static_cast<int>(r.integer("max_seq_len", m.max_seq_len ? m.max_seq_len : 2048, 1, 1 << 24));
  m.source = r.string("source", m.source);
  m.moe = read_moe(r, m.moe, m.layers);
  m.mla = read_mla(r, m.mla);
  m.mtp_depth = static_cast<int>(r.integer("mtp_depth", m.mtp_depth, 0, 16));
  m.layer_kinds = moe_layer_kinds(m);
  m.parallel_block = r.boolean("parallel_block", m.parallel_block);
  if (m.parallel_block && (m.moe.enabled() || m.mla.enabled()))
    r.error("parallel_block",
            "a parallel attention + MLP block is modelled for dense layers with (grouped-query) "
            "attention; this model has routed experts or latent attention");
  if (m.bias && (m.parallel_block || m.moe.enabled() || m.mla.enabled()))
    r.error("bias",
            "linear-layer biases are modelled for the standard dense block (attention then MLP); this "
            "model has a parallel block, routed experts or latent attention");
  if (m.qkv_split && (m.parallel_block || m.mla.enabled()))
    r.error("qkv_split",
            "the split of a fused QKV output is modelled for (grouped-query) attention in the standard block; "
            "this model has a parallel block or latent attention");
  if (m.heads > 0 && m.head_dim_override == 0 && m.hidden % m.heads != 0)
    r.error("heads",
            "hidden (" + std::to_string(m.hidden) + ") must be divisible by heads (" + std::to_string(m.heads) + ")");
  if (m.kv_heads > 0 && m.heads % m.kv_heads != 0) {
    r.error("kv_heads", "heads (" + std::to_string(m.heads) + ") must be divisible by kv_heads (" +
                            std::to_string(m.kv_heads) + ")");
  }
  return m;
}

NodeSpec read_node(ObjectReader& r, const Catalog& catalog, const NodeSpec* base) {
  NodeSpec n = base ? *base : NodeSpec{};
  const bool req = base == nullptr;
  n.name = r.string("name", n.name.empty() ? "custom" : n.name);
  if (const nlohmann::json* inline_gpu = r.raw("gpu"); inline_gpu != nullptr && inline_gpu->is_object()) {
    // A GPU the catalog does not have, with its figures; "profile" names the
    // catalog GPU whose calibration profile it borrows (docs/heterogeneous.md).
    ObjectReader gr(*inline_gpu, r.at("gpu"), r.diagnostics());
    n.gpu = read_gpu_figures(gr);
    if (gr.has("profile")) {
      const std::string borrowed = gr.string("profile", "");
      if (const GpuSpec* g = catalog.find_gpu(borrowed)) {
        n.gpu.profile_gpu = g->name;
      } else {
        gr.error("profile", "unknown GPU \"" + borrowed +
                                "\" to borrow a calibration profile from; known GPUs: see "
                                "`trainsim catalog gpus`");
      }
    }
    if (catalog.find_gpu(n.gpu.name) != nullptr) {
      gr.error("name", "\"" + n.gpu.name + "\" is a catalog GPU; give it by name or choose another name");
    }
    gr.finish();
  } else if (r.has("gpu")) {
    const std::string gpu = r.string("gpu", "");
    if (const GpuSpec* g = catalog.find_gpu(gpu)) {
      n.gpu = *g;
    } else {
      std::string msg = "unknown GPU \"" + gpu + "\"";
      const std::string near = did_you_mean(gpu, catalog.gpu_names());
      if (!near.empty()) msg += " (did you mean \"" + near + "\"?)";
      r.error("gpu", msg + "; known GPUs: see `trainsim catalog gpus`");
    }
  } else if (req) {
    r.error("gpu", "required GPU name is missing");
  }
  n.gpus_per_node = static_cast<int>(r.integer("gpus_per_node", n.gpus_per_node, 1, 1024, req));
  if (const nlohmann::json* s = r.raw("scaleup")) {
    ObjectReader sr(*s, r.at("scaleup"), r.diagnostics());
    const std::string kind = sr.choice("kind", to_string(n.scaleup), {"nvswitch", "direct", "pcie", "none"});
    n.scaleup = kind == "nvswitch" ? ScaleupKind::NVSwitch
                : kind == "direct" ? ScaleupKind::Direct
                : kind == "pcie"   ? ScaleupKind::PCIe
                                   : ScaleupKind::None;
    n.scaleup_bandwidth = sr.quantity("bandwidth", Quantity::Bandwidth, n.scaleup_bandwidth, 1e6, kBig, req);
    n.nvls = sr.boolean("nvls", n.nvls);
    sr.finish();
  } else if (req) {
    r.error("scaleup", "required scale-up description is missing");
  }
  if (const nlohmann::json* s = r.raw("nics")) {
    ObjectReader nr(*s, r.at("nics"), r.diagnostics());
    n.nic_count = static_cast<int>(nr.integer("count", n.nic_count, 1, 1024, req));
    n.nic_bandwidth = nr.quantity("bandwidth", Quantity::Bandwidth, n.nic_bandwidth, 1e6, kBig, req);
    const std::string layer = nr.choice("link_layer", to_string(n.nic_link_layer), {"infiniband", "ethernet"});
    n.nic_link_layer = layer == "ethernet" ? NicLinkLayer::Ethernet : NicLinkLayer::InfiniBand;
    nr.finish();
  } else if (req) {
    r.error("nics", "required NIC description is missing");
  }
  n.source = r.string("source", n.source);
  return n;
}

const GpuSpec* Catalog::find_gpu(const std::string& name) const {
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (lower(gpus[i].name) == lower(name)) return &gpus[i];
    for (const auto& a : gpu_aliases[i]) {
      if (lower(a) == lower(name)) return &gpus[i];
    }
  }
  return nullptr;
}
const NodeSpec* Catalog::find_node(const std::string& name) const { return find_by_name(nodes, name); }
const ClusterPreset* Catalog::find_cluster(const std::string& name) const { return find_by_name(clusters, name); }
const TransformerSpec* Catalog::find_model(const std::string& name) const { return find_by_name(models, name); }
const CalibrationProfile* Catalog::find_profile_for_gpu(const std::string& gpu) const {
  for (const auto& p : profiles) {
    if (lower(p.gpu) == lower(gpu)) return &p;
  }
  return nullptr;
}

namespace {
template <class T>
std::vector<std::string> names(const std::vector<T>& v) {
  std::vector<std::string> out;
  for (const auto& x : v) out.push_back(x.name);
  return out;
}
}  // namespace

std::vector<std::string> Catalog::gpu_names() const {
  std::vector<std::string> out = names(gpus);
  for (const auto& a : gpu_aliases) out.insert(out.end(), a.begin(), a.end());
  return out;
}
std::vector<std::string> Catalog::node_names() const { return names(nodes); }
std::vector<std::string> Catalog::cluster_names() const { return names(clusters); }
std::vector<std::string> Catalog::model_names() const { return names(models); }

GpuSpec read_gpu_figures(ObjectReader& r) {
  GpuSpec g;
  g.name = r.string("name", "", true);
  g.vendor = r.choice("vendor", "", {"nvidia", "amd"}, true);
  g.arch = r.string("arch", "", true);
  if (const nlohmann::json* pk = r.raw("peak_tflops")) {
    ObjectReader pr(*pk, r.at("peak_tflops"), r.diagnostics());
    for (std::size_t t = 0; t < kNumDtypes; ++t) {
      g.peak_flops[t] = pr.number(to_string(static_cast<Dtype>(t)), 0, 0, 1e6) * 1e12;
    }
    pr.finish();
  } else {
    r.error("peak_tflops", "required peak_tflops (dense TFLOP/s per precision) is missing");
  }
  g.memory_bytes = r.quantity("memory", Quantity::Bytes, 0, 1e6, kBig, true);
  g.memory_bandwidth = r.quantity("memory_bandwidth", Quantity::Bandwidth, 0, 1e6, kBig, true);
  g.scaleup_bandwidth = r.quantity("scaleup_bandwidth", Quantity::Bandwidth, 0, 0, kBig, true);
  g.host_bandwidth = r.quantity("host_bandwidth", Quantity::Bandwidth, 0, 1e6, kBig);
  g.source = r.string("source", "", true);
  return g;
}

namespace {

void read_gpus(const nlohmann::json& doc, Diagnostics& d, Catalog& c) {
  ObjectReader top(doc, "", d);
  const nlohmann::json* list = top.raw("gpus");
  top.finish();
  if (list == nullptr || !list->is_array()) {
    d.error("/gpus", "expected an array of GPUs");
    return;
  }
  for (std::size_t i = 0; i < list->size(); ++i) {
    ObjectReader r((*list)[i], json_pointer_append("/gpus", i), d);
    std::vector<std::string> aliases;
    if (const nlohmann::json* a = r.raw("aliases")) {
      for (const auto& x : *a) {
        if (x.is_string()) aliases.push_back(x.get<std::string>());
      }
    }
    GpuSpec g = read_gpu_figures(r);
    r.finish();
    c.gpus.push_back(std::move(g));
    c.gpu_aliases.push_back(std::move(aliases));
  }
}

template <class Fn>
void read_list(const nlohmann::json& doc, const char* key, Diagnostics& d, Fn fn) {
  ObjectReader top(doc, "", d);
  const nlohmann::json* list = top.raw(key);
  top.finish();
  if (list == nullptr || !list->is_array()) {
    d.error(std::string("/") + key, "expected an array");
    return;
  }
  for (std::size_t i = 0; i < list->size(); ++i) {
    ObjectReader r((*list)[i], json_pointer_append(std::string("/") + key, i), d);
    if (r.valid()) fn(r);
    r.finish();
  }
}

}  // namespace

Catalog load_builtin_catalog() {
  Catalog c;
  std::vector<Diagnostic> all;
  auto parse = [&](const EmbeddedFile& f, auto&& fn) {
    Diagnostics d(std::string(f.path));
    if (auto doc = parse_json_text(std::string(f.text), d)) fn(*doc, d);
    all.insert(all.end(), d.items().begin(), d.items().end());
  };
  const auto topo = topology_catalog_files();
  for (const auto& f : topo) {
    if (f.path.ends_with("gpus.json"))
      parse(f, [&](const nlohmann::json& doc, Diagnostics& d) { read_gpus(doc, d, c); });
  }
  for (const auto& f : topo) {
    if (f.path.ends_with("nodes.json")) {
      parse(f, [&](const nlohmann::json& doc, Diagnostics& d) {
        read_list(doc, "nodes", d, [&](ObjectReader& r) { c.nodes.push_back(read_node(r, c, nullptr)); });
      });
    }
  }
  for (const auto& f : topo) {
    if (f.path.ends_with("clusters.json")) {
      parse(f, [&](const nlohmann::json& doc, Diagnostics& d) {
        read_list(doc, "clusters", d, [&](ObjectReader& r) {
          ClusterPreset p;
          p.name = r.string("name", "", true);
          p.node = r.string("node", "", true);
          if (c.find_node(p.node) == nullptr) r.error("node", "unknown node preset \"" + p.node + "\"");
          p.nodes = static_cast<int>(r.integer("nodes", 1, 1, 1 << 20, true));
          p.description = r.string("description", "", true);
          // Network keys are read by the scenario loader's cluster reader, like an inline cluster.
          for (const char* key : {"fabric", "datacenters"}) {
            if (const nlohmann::json* x = r.raw(key)) p.definition[key] = *x;
          }
          p.definition["node"] = p.node;
          p.definition["nodes"] = p.nodes;
          p.definition["name"] = p.name;
          c.clusters.push_back(std::move(p));
        });
      });
    }
  }
  for (const auto& f : model_catalog_files()) {
    parse(f, [&](const nlohmann::json& doc, Diagnostics& d) {
      read_list(doc, "models", d, [&](ObjectReader& r) { c.models.push_back(read_model(r, nullptr)); });
    });
  }
  for (const auto& f : calibration_profile_files()) {
    parse(f, [&](const nlohmann::json& doc, Diagnostics& d) {
      ObjectReader r(doc, "", d);
      if (r.valid()) c.profiles.push_back(read_profile(r));
      r.finish();
    });
  }
  if (!all.empty()) throw InputError(all);
  return c;
}

}  // namespace trainsim
