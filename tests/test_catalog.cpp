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

TEST_CASE("Blackwell Ultra: B300 and GB300 nodes carry their own GPU, links and profile") {
  const Catalog cat = load_builtin_catalog();
  struct Expect {
    const char* node;
    const char* gpu;
    int gpus_per_node;
    double bf16_tflops;
    double host_gb_s;
  };
  for (const Expect& e :
       {Expect{"dgx-b300", "B300-288GB", 8, 2250, 256}, Expect{"gb300-nvl72", "GB300", 72, 2500, 900}}) {
    CAPTURE(e.node);
    const NodeSpec* n = cat.find_node(e.node);
    REQUIRE(n != nullptr);
    CHECK(n->gpu.name == e.gpu);
    CHECK(n->gpus_per_node == e.gpus_per_node);
    // 288 GB of HBM3e, twice the FP16 rate in FP8, one 800 Gb/s ConnectX-8 per GPU.
    CHECK(n->gpu.memory_bytes == doctest::Approx(288e9));
    CHECK(n->gpu.peak(Dtype::BF16) == doctest::Approx(e.bf16_tflops * 1e12));
    CHECK(n->gpu.peak(Dtype::FP8) == doctest::Approx(2 * e.bf16_tflops * 1e12));
    CHECK(n->gpu.host_bandwidth == doctest::Approx(e.host_gb_s * 1e9));
    CHECK(n->nic_bandwidth_per_gpu() == doctest::Approx(100e9));
    const CalibrationProfile* p = cat.find_profile_for_gpu(e.gpu);
    REQUIRE(p != nullptr);
    CHECK(p->gpu == e.gpu);
  }
  // More memory than the Blackwell GPUs before them.
  CHECK(cat.find_gpu("b300")->memory_bytes > cat.find_gpu("b200")->memory_bytes);
  CHECK(cat.find_gpu("gb300")->memory_bytes > cat.find_gpu("gb200")->memory_bytes);
}
