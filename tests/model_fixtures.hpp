#pragma once
// Transformer shapes for model tests, built directly (no catalog parsing). They
// are the shapes of the shipped presets of the same name; test_catalog.cpp
// checks that the catalog and these stay equal.
#include <stdexcept>
#include <string>
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim::testing {

// GPT-3 (Brown et al. 2020, Table 2.1): GELU MLP of 4 x hidden, LayerNorm,
// learned positions, tied embeddings, Megatron-LM's padded vocab of 51200,
// linear biases (GPT-2's model).
inline TransformerSpec gpt3(const std::string& size, int layers, int hidden, int heads) {
  TransformerSpec m;
  m.name = "gpt3-" + size;
  m.family = "gpt3";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.vocab = 51200;
  m.mlp = MlpKind::Gelu;
  m.rmsnorm = false;
  m.rope = false;
  m.tied_embeddings = true;
  m.bias = true;
  m.max_seq_len = 2048;
  return m;
}

inline std::vector<TransformerSpec> gpt3_models() {
  return {gpt3("125m", 12, 768, 12),  gpt3("350m", 24, 1024, 16), gpt3("760m", 24, 1536, 16),
          gpt3("1.3b", 24, 2048, 16), gpt3("2.7b", 32, 2560, 32), gpt3("6.7b", 32, 4096, 32),
          gpt3("13b", 40, 5120, 40),  gpt3("175b", 96, 12288, 96)};
}

// Llama 3 8B: grouped-query attention (8 KV heads), SwiGLU, RMSNorm, RoPE.
inline TransformerSpec llama3_8b() {
  TransformerSpec m;
  m.name = "llama3-8b";
  m.family = "llama3";
  m.layers = 32;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 8;
  m.ffn_hidden = 14336;
  m.vocab = 128256;
  m.mlp = MlpKind::SwiGlu;
  m.rmsnorm = true;
  m.rope = true;
  m.tied_embeddings = false;
  m.max_seq_len = 8192;
  return m;
}

// Every model above, to look up by preset name.
inline std::vector<TransformerSpec> fixture_models() {
  std::vector<TransformerSpec> all = gpt3_models();
  all.push_back(llama3_8b());
  return all;
}

inline TransformerSpec fixture_model(const std::string& name) {
  for (const TransformerSpec& m : fixture_models()) {
    if (m.name == name) return m;
  }
  throw std::invalid_argument("no test model named " + name);
}

}  // namespace trainsim::testing
