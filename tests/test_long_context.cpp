// Long-context levers in scenarios: ring context parallelism, DeepSpeed-Ulysses
// and their hybrid (parallel.cp_kind) on the Llama-3.1 8B, 128k-token example
// (docs/long-context.md), at both fidelities, and the input errors of the keys.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "scenario_fixtures.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

const std::string kExample = std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/examples/llama3.1-8b-128k-16xh100.json";

JobReport run(const std::vector<std::string>& sets, Fidelity fidelity = Fidelity::Analytical) {
  const JobReport r = run_job(load_scenario_file(kExample, sets, catalog()), fidelity).report;
  REQUIRE(r.feasible);
  return r;
}

double exposed_cp(const JobReport& r) { return r.breakdown.exposed_comm_s[static_cast<std::size_t>(CommClass::CP)]; }

const char* kSmall = R"({
  "model": "llama3-8b",
  "cluster": {"node": "dgx-h100", "nodes": 1},
  "parallel": {"tp": 1, "pp": 1, "dp": 1, "cp": 8, "global_batch": 1, "zero": 1, "recompute": "full"},
  "training": {"seq_len": 32768, "dropout": false}
})";

}  // namespace

TEST_CASE("long context: in one node the ring hides its exchange behind its steps, Ulysses still runs faster") {
  // 131072 tokens on CP 8 (one DGX H100). Per GPU and layer, the ring passes 7 K/V blocks
  // of 16384 tokens (8 KV heads of 128), each under the attention step before it; Ulysses
  // sends its 16384 tokens' Q, K, V and output (4096 + 2048 + 4096 values: 335 MB) before
  // and after one attention kernel over the whole sequence for 4 heads.
  const std::vector<std::string> node = {"cluster.nodes=1", "parallel.cp=8"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), node.begin(), node.end());
    return run(sets);
  };
  const JobReport ring = with({});
  const JobReport ulysses = with({R"(parallel.cp_kind="ulysses")"});
  CHECK(exposed_cp(ring) < 0.01 * ring.iteration_time_s);
  CHECK(exposed_cp(ulysses) > exposed_cp(ring));
  CHECK(ulysses.iteration_time_s < ring.iteration_time_s);
  // The same attention FLOPs whichever way the sequence is split; the ring's eight
  // kernels of an eighth each, its output corrections and gradient accumulations
  // take more compute time (within 2%).
  CHECK(ring.breakdown.compute_s > ulysses.breakdown.compute_s);
  CHECK(ulysses.breakdown.compute_s == doctest::Approx(ring.breakdown.compute_s).epsilon(0.02));
  // Ring CP holds the gathered K and V of one layer and their gradient: more memory.
  CHECK(ring.peak_memory_gib > ulysses.peak_memory_gib + 0.5);
}

TEST_CASE("long context: across two nodes the hybrid (Ulysses in a node, ring across) is fastest") {
  // USP (arXiv:2405.07719) recommends the Ulysses degree up to the GPUs of a node and
  // the ring across nodes. Across nodes, Ulysses' all-to-all sends half of every GPU's
  // Q, K, V and output through that GPU's own NIC; the ring of 16 runs sixteen
  // attention steps of a sixteenth each, the hybrid's ring of 2 two of a half.
  const JobReport ring = run({});
  const JobReport ulysses = run({R"(parallel.cp_kind="ulysses")"});
  const JobReport hybrid = run({R"(parallel.cp_kind="hybrid")", "parallel.cp_ulysses=8"});
  CHECK(hybrid.iteration_time_s < ring.iteration_time_s);
  CHECK(hybrid.iteration_time_s < ulysses.iteration_time_s);
  CHECK(exposed_cp(hybrid) < exposed_cp(ulysses));
  CHECK(hybrid.breakdown.compute_s < ring.breakdown.compute_s);
}

TEST_CASE("long context: the flow fidelity runs every CP kind and agrees on the order") {
  const Scenario base = load_scenario_text(kSmall, "small.json", "", {}, catalog());
  const Scenario uly = load_scenario_text(kSmall, "small.json", "", {R"(parallel.cp_kind="ulysses")"}, catalog());
  const Scenario hyb = load_scenario_text(kSmall, "small.json", "",
                                          {R"(parallel.cp_kind="hybrid")", "parallel.cp_ulysses=2"}, catalog());
  for (const Scenario* s : {&base, &uly, &hyb}) {
    const JobReport an = run_job(*s, Fidelity::Analytical).report;
    const JobReport fl = run_job(*s, Fidelity::Flow).report;
    REQUIRE(an.feasible);
    REQUIRE(fl.feasible);
    CHECK(fl.iteration_time_s == doctest::Approx(an.iteration_time_s).epsilon(0.05));
  }
}

TEST_CASE("long context: cp_kind and cp_ulysses errors name the key and what was expected") {
  const std::string hybrid_without = errors_of(kSmall, {R"(parallel.cp_kind="hybrid")"});
  CHECK(hybrid_without.find("/parallel/cp_ulysses") != std::string::npos);
  const std::string ring_with = errors_of(kSmall, {"parallel.cp_ulysses=2"});
  CHECK(ring_with.find("/parallel/cp_ulysses") != std::string::npos);
  CHECK(ring_with.find("hybrid") != std::string::npos);
  const std::string not_divisor = errors_of(kSmall, {R"(parallel.cp_kind="hybrid")", "parallel.cp_ulysses=3"});
  CHECK(not_divisor.find("divides cp = 8") != std::string::npos);
  const std::string kind = errors_of(kSmall, {R"(parallel.cp_kind="striped")"});
  CHECK(kind.find("/parallel/cp_kind") != std::string::npos);
  // 32 heads over a Ulysses degree of 64 (cp 64 on 8 nodes).
  const std::string heads =
      errors_of(replace(replace(kSmall, R"("nodes": 1)", R"("nodes": 8)"), R"("cp": 8)", R"("cp": 64)"),
                {R"(parallel.cp_kind="ulysses")"});
  CHECK(heads.find("/parallel/cp") != std::string::npos);
  CHECK(heads.find("32 attention heads") != std::string::npos);
}

TEST_CASE("long context: seq1f1b shrinks the bubble and the activations of 1F1B at 128k tokens") {
  // The example without CP: TP 4 with SP, PP 4, 4 micro-batches of 131072 tokens.
  std::vector<std::string> pipeline = {"parallel.cp=1", "parallel.tp=4", "parallel.pp=4",
                                       "parallel.sequence_parallel=true"};
  std::vector<std::string> seq = pipeline;
  pipeline.emplace_back(R"(parallel.schedule="1f1b")");
  seq.emplace_back(R"(parallel.schedule="seq1f1b")");
  seq.emplace_back("parallel.seq_chunks=8");
  const JobReport one = run(pipeline);
  const JobReport chunked = run(seq);
  // Even chunks: at 128k attention dominates and chunk j costs about 2j+1 times
  // chunk 0's, so the bubble shrinks far less than k-fold (docs/long-context.md).
  CHECK(chunked.breakdown.bubble_s < 0.8 * one.breakdown.bubble_s);
  CHECK(chunked.iteration_time_s < one.iteration_time_s);
  CHECK(chunked.peak_memory_gib < 0.5 * one.peak_memory_gib);
  // At 16k tokens the chunks cost about the same: 4 chunks nearly halve the bubble.
  pipeline.emplace_back("training.seq_len=16384");
  seq.back() = "parallel.seq_chunks=4";
  seq.emplace_back("training.seq_len=16384");
  const JobReport chunked_16k = run(seq);
  CHECK(chunked_16k.breakdown.bubble_s < 0.6 * run(pipeline).breakdown.bubble_s);
  // The flow fidelity runs the chunks' programs too and agrees without contention.
  CHECK(run(seq, Fidelity::Flow).iteration_time_s == doctest::Approx(chunked_16k.iteration_time_s).epsilon(0.05));
  // The same model FLOPs: the chunks' attention adds up to the sequence's.
  CHECK(chunked.tflops_per_gpu * chunked.iteration_time_s ==
        doctest::Approx(one.tflops_per_gpu * one.iteration_time_s).epsilon(1e-9));
}

TEST_CASE("long context: seq_chunks errors name the key and what was expected") {
  CHECK(errors_of(kSmall, {"parallel.seq_chunks=2"}).find("/parallel/seq_chunks") != std::string::npos);
  const std::string with_cp = errors_of(kSmall, {R"(parallel.schedule="seq1f1b")", "parallel.seq_chunks=2"});
  CHECK(with_cp.find("/parallel/cp") != std::string::npos);
  const std::string not_divisor = errors_of(replace(kSmall, R"("cp": 8)", R"("cp": 1)"),
                                            {R"(parallel.schedule="seq1f1b")", "parallel.seq_chunks=3",
                                             "cluster.nodes=1", "parallel.dp=8", "parallel.global_batch=8"});
  CHECK(not_divisor.find("divisor of seq_len 32768") != std::string::npos);
}
