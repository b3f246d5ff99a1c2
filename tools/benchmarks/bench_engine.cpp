// Engine and end-to-end benchmarks (Google Benchmark). Figures are recorded in
// docs/performance.md; they never gate CI (machines are noisy).
#include <benchmark/benchmark.h>

#include <random>
#include <span>
#include <vector>

#include "sim/event_queue.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

namespace trainsim {
std::span<const EmbeddedFile> validation_scenario_files();
}

namespace {

using namespace trainsim;

// Steady state of a discrete-event simulation: a queue of `n` pending events,
// each pop followed by one push a little later. Counts push+pop pairs.
void BM_EventQueueHold(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  EventQueue q;
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<std::int64_t> dt(1, 1000);
  // Time increments drawn up front, so the loop measures the queue alone.
  std::vector<Time> steps(4096);
  for (Time& s : steps) s = Time::ns(dt(rng));
  for (std::size_t i = 0; i < n; ++i) q.push(steps[i % steps.size()], 0, static_cast<std::uint32_t>(i));
  std::size_t k = 0;
  for (auto _ : state) {
    const Event e = q.pop();
    q.push(e.time + steps[k++ & 4095], e.rank, e.payload);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventQueueHold)->Arg(64)->Arg(4096)->Arg(262144);

const Catalog& catalog() {
  static const Catalog c = load_builtin_catalog();
  return c;
}

Scenario scenario(std::string_view id) {
  if (id == "default") {
    const EmbeddedFile& f = default_scenario_file();
    return load_scenario_text(std::string(f.text), std::string(f.path), "", {}, catalog());
  }
  for (const auto& f : validation_scenario_files()) {
    if (f.path.find(id) != std::string_view::npos) {
      return load_scenario_text(std::string(f.text), std::string(f.path), "", {}, catalog());
    }
  }
  throw std::runtime_error("no scenario " + std::string(id));
}

void run_scenario(benchmark::State& state, const Scenario& s) {
  std::uint64_t events = 0;
  for (auto _ : state) {
    const JobReport r = simulate(s);
    events += r.events;
    benchmark::DoNotOptimize(r.iteration_time_s);
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}

// The embedded default: Llama-3 70B on 64 H100 (TP8 PP4 DP2), analytical fidelity.
void BM_DefaultScenario(benchmark::State& state) { run_scenario(state, scenario("default")); }
BENCHMARK(BM_DefaultScenario)->Unit(benchmark::kMillisecond);

// GPT-3 175B-class on 1536 A100 (TP8 PP8 DP24, Megatron-LM 2021 Table 1), analytical fidelity.
void BM_Megatron145B_1536Gpu(benchmark::State& state) { run_scenario(state, scenario("megatron2021_t1_145.6B")); }
BENCHMARK(BM_Megatron145B_1536Gpu)->Unit(benchmark::kMillisecond);

// 1T parameters on 3072 A100 (TP8 PP64 DP6, 512 micro-batches per pipeline).
void BM_Megatron1T_3072Gpu(benchmark::State& state) { run_scenario(state, scenario("megatron2021_t1_1008.0B")); }
BENCHMARK(BM_Megatron1T_3072Gpu)->Unit(benchmark::kMillisecond);

// Every validation scenario once (what `trainsim validate` costs).
void BM_ValidationSet(benchmark::State& state) {
  std::vector<Scenario> all;
  for (const auto& f : validation_scenario_files()) {
    all.push_back(load_scenario_text(std::string(f.text), std::string(f.path), "", {}, catalog()));
  }
  for (auto _ : state) {
    for (const auto& s : all) benchmark::DoNotOptimize(simulate(s).iteration_time_s);
  }
}
BENCHMARK(BM_ValidationSet)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
