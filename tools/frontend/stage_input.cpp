#include "tools/frontend/stage_input.hpp"

#include <string>

namespace trainsim {

void read_stage_layouts(ObjectReader& r, ParallelSpec& par) {
  const nlohmann::json* v = r.raw("stages");
  if (v == nullptr) return;
  if (!v->is_array() || v->empty()) {
    r.error(
        "stages",
        "expected an array with one layout per pipeline stage ({group, tp, dp, cp, micro_batch, layers, recompute})");
    return;
  }
  for (std::size_t i = 0; i < v->size(); ++i) {
    ObjectReader sr((*v)[i], json_pointer_append(r.at("stages"), i), r.diagnostics());
    if (!sr.valid()) continue;
    StageLayout st;
    st.group = static_cast<int>(sr.integer("group", -1, 0, 1 << 16));
    st.tp = static_cast<int>(sr.integer("tp", par.tp, 1, 1 << 16));
    st.dp = static_cast<int>(sr.integer("dp", -1, 1, 1 << 20));
    st.cp = static_cast<int>(sr.integer("cp", -1, 1, 1 << 16));
    st.micro_batch = static_cast<int>(sr.integer("micro_batch", -1, 1, 1 << 20));
    st.layers = static_cast<int>(sr.integer("layers", 0, 0, 1 << 24, true));
    if (sr.has("recompute")) {
      const std::string rc = sr.choice("recompute", "none", {"none", "selective", "full"});
      st.recompute = static_cast<int>(rc == "full"        ? Recompute::Full
                                      : rc == "selective" ? Recompute::Selective
                                                          : Recompute::None);
    }
    sr.finish();
    par.stages.push_back(st);
  }
}

void read_model_encoder(ObjectReader& r, const Catalog& cat, TransformerSpec& model) {
  const nlohmann::json* v = r.raw("encoder");
  if (v == nullptr) return;
  ObjectReader er(*v, r.at("encoder"), r.diagnostics());
  if (!er.valid()) return;
  model.encoder_tokens = static_cast<int>(er.integer("tokens", 0, 1, 1 << 24, true));
  const nlohmann::json* m = er.raw("model");
  if (m == nullptr) {
    er.error("model", "required encoder model (a preset name or an object) is missing");
  } else if (m->is_string()) {
    if (const TransformerSpec* preset = cat.find_model(m->get<std::string>())) {
      model.encoder.push_back(*preset);
    } else {
      er.error("model", "unknown model preset \"" + m->get<std::string>() + "\"; known: see `trainsim catalog models`");
    }
  } else {
    ObjectReader mr(*m, er.at("model"), er.diagnostics());
    if (mr.valid()) {
      const TransformerSpec* base = nullptr;
      if (mr.has("preset")) {
        const std::string name = mr.string("preset", "");
        base = cat.find_model(name);
        if (base == nullptr) mr.error("preset", "unknown model preset \"" + name + "\"");
      }
      if (base != nullptr || !mr.has("preset")) model.encoder.push_back(read_model(mr, base));
    }
    mr.finish();
  }
  er.finish();
}

}  // namespace trainsim
