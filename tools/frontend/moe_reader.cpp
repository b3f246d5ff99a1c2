#include "tools/frontend/moe_reader.hpp"

#include <string>

namespace trainsim {

MoeSpec read_moe(ObjectReader& model, const MoeSpec& base, int layers) {
  MoeSpec m = base;
  const nlohmann::json* v = model.raw("moe");
  if (v == nullptr) return m;
  ObjectReader r(*v, model.at("moe"), model.diagnostics());
  if (!r.valid()) return m;
  const bool req = !base.enabled();
  m.experts = static_cast<int>(r.integer("experts", m.experts, 1, 1 << 16, req));
  m.top_k = static_cast<int>(r.integer("top_k", m.top_k, 1, 1 << 16, req));
  m.expert_ffn = static_cast<int>(r.integer("expert_ffn", m.expert_ffn, 1, 1 << 22, req));
  m.shared_experts = static_cast<int>(r.integer("shared_experts", m.shared_experts, 0, 1 << 10));
  m.shared_ffn = static_cast<int>(r.integer("shared_ffn", m.shared_ffn > 0 ? m.shared_ffn : m.expert_ffn, 1, 1 << 22));
  m.dense_layers = static_cast<int>(r.integer("dense_layers", m.dense_layers, 0, 100000));
  m.layer_freq = static_cast<int>(r.integer("layer_freq", m.layer_freq, 1, 100000));
  m.router = r.choice("router", to_string(m.router), {"softmax", "sigmoid-bias"}) == "softmax"
                 ? RouterKind::Softmax
                 : RouterKind::SigmoidBias;
  m.capacity_factor = r.number("capacity_factor", m.capacity_factor, 0, 1e6);
  m.max_nodes_per_token = static_cast<int>(r.integer("max_nodes_per_token", m.max_nodes_per_token, 0, 1 << 16));
  if (m.top_k > m.experts) {
    r.error("top_k",
            "expected at most the " + std::to_string(m.experts) + " experts, found " + std::to_string(m.top_k));
  }
  if (m.dense_layers >= layers) {
    r.error("dense_layers", "expected fewer than the model's " + std::to_string(layers) +
                                " layers (a model without MoE layers has no \"moe\"), found " +
                                std::to_string(m.dense_layers));
  }
  if (m.capacity_factor > 0 && m.capacity_factor * m.experts < m.top_k) {
    r.error("capacity_factor",
            "expected 0 (dropless) or at least top_k / experts, found " + std::to_string(m.capacity_factor));
  }
  r.finish();
  return m;
}

MlaSpec read_mla(ObjectReader& model, const MlaSpec& base) {
  MlaSpec m = base;
  const nlohmann::json* v = model.raw("mla");
  if (v == nullptr) return m;
  ObjectReader r(*v, model.at("mla"), model.diagnostics());
  if (!r.valid()) return m;
  const bool req = !base.enabled();
  m.q_lora_rank = static_cast<int>(r.integer("q_lora_rank", m.q_lora_rank, 0, 1 << 20));
  m.kv_lora_rank = static_cast<int>(r.integer("kv_lora_rank", m.kv_lora_rank, 1, 1 << 20, req));
  m.qk_nope_dim = static_cast<int>(r.integer("qk_nope_dim", m.qk_nope_dim, 1, 1 << 16, req));
  m.qk_rope_dim = static_cast<int>(r.integer("qk_rope_dim", m.qk_rope_dim, 0, 1 << 16, req));
  m.v_head_dim = static_cast<int>(r.integer("v_head_dim", m.v_head_dim, 1, 1 << 16, req));
  r.finish();
  return m;
}

RoutingSpec read_routing(ObjectReader& training) {
  RoutingSpec s;
  const nlohmann::json* v = training.raw("routing");
  if (v == nullptr) return s;
  ObjectReader r(*v, training.at("routing"), training.diagnostics());
  if (!r.valid()) return s;
  const std::string d = r.choice("distribution", "uniform", {"uniform", "zipf", "histogram", "imbalance"}, true);
  s.distribution = d == "uniform"     ? RoutingDistribution::Uniform
                   : d == "zipf"      ? RoutingDistribution::Zipf
                   : d == "histogram" ? RoutingDistribution::Histogram
                                      : RoutingDistribution::Imbalance;
  using RD = RoutingDistribution;
  if (s.distribution == RD::Zipf) s.zipf_exponent = r.number("zipf_exponent", 1.0, 0, 100, true);
  s.sampling = r.choice("sampling", "expected", {"expected", "multinomial"}) == "multinomial"
                   ? RoutingSampling::Multinomial
                   : RoutingSampling::Expected;
  if (s.distribution == RD::Zipf || s.sampling == RoutingSampling::Multinomial) {
    s.seed = static_cast<std::uint64_t>(r.integer("seed", 0, 0, INT64_MAX));
  }
  if (s.distribution == RD::Imbalance) s.imbalance = r.number("imbalance", 1.0, 1.0, 1e6, true);
  if (s.distribution == RD::Histogram) {
    const nlohmann::json* h = r.raw("histogram");
    bool positive = false;
    if (h == nullptr || !h->is_array()) {
      r.error("histogram", "expected an array of relative loads, one per expert");
    } else {
      for (const auto& x : *h) {
        if (!x.is_number() || x.get<double>() < 0) {
          r.error("histogram", "expected non-negative numbers, found " + x.dump());
          break;
        }
        s.histogram.push_back(x.get<double>());
        positive = positive || x.get<double>() > 0;
      }
      if (!positive && !h->empty()) r.error("histogram", "expected at least one positive load");
    }
  }
  r.finish();
  return s;
}

}  // namespace trainsim
