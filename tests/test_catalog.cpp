#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "model_fixtures.hpp"
#include "tools/frontend/catalog.hpp"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("the model tests' hand-built shapes are the shipped presets") {
  const Catalog cat = load_builtin_catalog();
  for (const TransformerSpec& f : fixture_models()) {
    CAPTURE(f.name);
    const TransformerSpec* m = cat.find_model(f.name);
    REQUIRE(m != nullptr);
    CHECK(m->name == f.name);
    CHECK(m->family == f.family);
    CHECK(m->layers == f.layers);
    CHECK(m->hidden == f.hidden);
    CHECK(m->heads == f.heads);
    CHECK(m->kv_heads == f.kv_heads);
    CHECK(m->ffn_hidden == f.ffn_hidden);
    CHECK(m->vocab == f.vocab);
    CHECK(m->mlp == f.mlp);
    CHECK(m->rmsnorm == f.rmsnorm);
    CHECK(m->rope == f.rope);
    CHECK(m->tied_embeddings == f.tied_embeddings);
    CHECK(m->bias == f.bias);
    CHECK(m->max_seq_len == f.max_seq_len);
  }
  // Every GPT-3 preset is among them (test_models checks their FLOPs).
  int gpt3 = 0;
  for (const TransformerSpec& m : cat.models) {
    if (m.family != "gpt3") continue;
    CAPTURE(m.name);
    ++gpt3;
    bool found = false;
    for (const TransformerSpec& f : gpt3_models()) found |= f.name == m.name;
    CHECK(found);
  }
  CHECK(gpt3 == static_cast<int>(gpt3_models().size()));
}

TEST_CASE("shipped catalogs and profiles cite public sources, not files outside the repository") {
  std::vector<EmbeddedFile> files(topology_catalog_files().begin(), topology_catalog_files().end());
  files.insert(files.end(), calibration_profile_files().begin(), calibration_profile_files().end());
  REQUIRE(files.size() > 3);
  for (const EmbeddedFile& f : files) {
    CAPTURE(f.path);
    CHECK(f.text.find("../") == std::string_view::npos);
    CHECK(f.text.find("hardware.md") == std::string_view::npos);
  }
}
