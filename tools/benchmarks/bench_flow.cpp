// Flow-level network benchmarks (Google Benchmark). Figures are recorded in
// docs/network.md; they never gate CI.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <string>

#include "sim/executor.hpp"
#include "sim/flow_collectives.hpp"
#include "sim/flow_network.hpp"
#include "tools/frontend/cli.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"
#include "topologies/graph.hpp"

namespace trainsim {
std::span<const EmbeddedFile> validation_scenario_files();
}

namespace {

using namespace trainsim;

// Peak resident set of this process, GiB (Linux VmHWM).
double peak_rss_gib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / (1024.0 * 1024.0);
  }
  return 0;
}

const Catalog& catalog() {
  static const Catalog c = load_builtin_catalog();
  return c;
}

Scenario validation_scenario(std::string_view id) {
  for (const auto& f : validation_scenario_files()) {
    if (f.path.find(id) != std::string_view::npos) {
      return load_scenario_text(std::string(f.text), std::string(f.path), "", {}, catalog());
    }
  }
  throw std::runtime_error("no scenario " + std::string(id));
}

// Rate recomputation with N concurrent long flows between random GPU pairs of a
// 3072-GPU rail-optimized cluster (384 DGX A100 nodes, 12 leaves per rail, ECMP
// over the spines): the flows share spine links, so one component holds nearly
// all of them (the worst case). Each iteration starts one more flow and lets it
// finish: two recomputations (arrival, departure) of that component.
void BM_FlowRecompute(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  NodeSpec node;
  node.name = "dgx-a100";
  node.gpus_per_node = 8;
  node.scaleup_bandwidth = 300e9;
  node.nic_count = 8;
  node.nic_bandwidth = 25e9;
  ClusterSpec spec;
  spec.groups.push_back(NodeGroup{node, 384});
  const Cluster cluster(spec);
  Topology topo(cluster);
  std::vector<double> caps;
  for (const TopologyLink& l : topo.links()) caps.push_back(l.capacity);
  FlowNetwork net(caps);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> gpu(0, cluster.num_gpus() - 1);
  auto random_route = [&](std::uint64_t tag) {
    int a = gpu(rng), b = gpu(rng);
    while (cluster.node_of(a) == cluster.node_of(b)) b = gpu(rng);
    return topo.route(static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(b), tag);
  };
  std::vector<FlowSpec> flows;
  std::vector<Route> routes;
  for (std::size_t i = 0; i < n; ++i) routes.push_back(random_route(i));
  for (const Route& r : routes) flows.push_back(FlowSpec{topo.links_of(r), 1e18, Time{}});
  net.start(Time{}, flows, 0);  // long-lived background
  const Route probe = random_route(n + 1);
  const FlowSpec one{topo.links_of(probe), 1e3, Time{}};
  std::vector<TransferDone> done;
  const std::uint64_t rerated0 = net.rerated_flows(), recomputed0 = net.recomputations();
  const std::uint64_t retimed0 = net.retimed_flows();
  Time now = net.now();
  for (auto _ : state) {
    net.start(now, {&one, 1}, 1);
    done.clear();
    while (done.empty()) net.advance(net.next_event(), done);
    now = done.back().time;
  }
  const double recomputes = static_cast<double>(net.recomputations() - recomputed0);
  state.counters["flows/recompute"] =
      recomputes > 0 ? static_cast<double>(net.rerated_flows() - rerated0) / recomputes : 0.0;
  state.counters["retimed/recompute"] =
      recomputes > 0 ? static_cast<double>(net.retimed_flows() - retimed0) / recomputes : 0.0;
  state.counters["recomputes/s"] = benchmark::Counter(recomputes, benchmark::Counter::kIsRate);
  state.counters["net_MiB"] = static_cast<double>(net.memory_bytes()) / (1 << 20);
}
BENCHMARK(BM_FlowRecompute)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

void run_flow_job(benchmark::State& state, const Scenario& s) {
  std::uint64_t events = 0;
  double iteration = 0, analytical = 0;
  for (auto _ : state) {
    const JobReport r = simulate(s, Fidelity::Flow);
    events += r.events;
    iteration = r.iteration_time_s;
    state.counters["ranks"] = r.simulated_ranks;
  }
  analytical = simulate(s).iteration_time_s;
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["iter_s_flow"] = iteration;
  state.counters["iter_s_analytical"] = analytical;
  state.counters["peak_rss_GiB"] = peak_rss_gib();
}

// Llama-3 70B on 64 H100 (TP8 PP4 DP2) at flow fidelity (exact representatives).
void BM_FlowDefaultScenario(benchmark::State& state) {
  const EmbeddedFile& f = default_scenario_file();
  run_flow_job(state, load_scenario_text(std::string(f.text), std::string(f.path), "", {}, catalog()));
}
BENCHMARK(BM_FlowDefaultScenario)->Unit(benchmark::kMillisecond)->Iterations(1);

// GPT-3 175B-class (145.6B) on 1536 A100 (TP8 PP8 DP24, interleaved), one
// iteration at flow fidelity (one rank per TP group of the 1536, exact).
void BM_FlowMegatron145B_1536Gpu(benchmark::State& state) {
  run_flow_job(state, validation_scenario("megatron2021_t1_145.6B"));
}
BENCHMARK(BM_FlowMegatron145B_1536Gpu)->Unit(benchmark::kMillisecond)->Iterations(1);

// 1T parameters on 3072 A100 (TP8 PP64 DP6, 512 micro-batches per pipeline):
// the largest validation run at flow fidelity (one rank per TP group, exact).
void BM_FlowMegatron1T_3072Gpu(benchmark::State& state) {
  run_flow_job(state, validation_scenario("megatron2021_t1_1008.0B"));
}
BENCHMARK(BM_FlowMegatron1T_3072Gpu)->Unit(benchmark::kMillisecond)->Iterations(1);

// Llama 3.1 405B (scenarios/examples/llama3.1-405b-16384xh100.json: TP8 PP16,
// 16 micro-batches per pipeline) on `gpus` H100: DP = gpus / 128, one
// 32-node leaf per rail group as in the shipped scenario.
Scenario llama405b_on(int gpus) {
  const int dp = gpus / 128;
  return load_scenario_file(std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/examples/llama3.1-405b-16384xh100.json",
                            {"parallel.dp=" + std::to_string(dp), "cluster.nodes=" + std::to_string(16 * dp),
                             "parallel.global_batch=" + std::to_string(16 * dp)},
                            catalog());
}

// One flow-fidelity iteration with the scenario's `flow.ranks` ("auto": the
// exact representatives, docs/network.md). Peak RSS is the process's: run one
// size per process (--benchmark_filter) for its figure. 65,536 and 131,072 GPUs
// run only when asked for.
void BM_FlowLlama405B(benchmark::State& state) {
  const Scenario s = llama405b_on(static_cast<int>(state.range(0)));
  std::uint64_t events = 0;
  for (auto _ : state) {
    const JobRun run = run_job(s, Fidelity::Flow);
    events += run.report.events;
    state.counters["estimate_GiB"] =
        static_cast<double>(estimate_run_bytes(run.plan.setup, true)) / (1024.0 * 1024 * 1024);
    state.counters["iter_s_flow"] = run.report.iteration_time_s;
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["peak_rss_GiB"] = peak_rss_gib();
}
BENCHMARK(BM_FlowLlama405B)->Arg(16384)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK(BM_FlowLlama405B)
    ->Name("BM_FlowLlama405B_Large")
    ->Arg(65536)
    ->Arg(131072)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

// The analytical cost of one configuration (scenario already loaded: planning
// and simulation of one rank per class), 128 to 1,048,576 GPUs. At 128 and 512
// GPUs the configuration does not fit in memory: it is refused after planning.
void BM_AnalyticalLlama405B(benchmark::State& state) {
  const Scenario s = llama405b_on(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(simulate(s, Fidelity::Analytical).iteration_time_s);
}
BENCHMARK(BM_AnalyticalLlama405B)->RangeMultiplier(8)->Range(128, 1 << 20)->Unit(benchmark::kMillisecond);

// The auto-search of scenarios/sweeps/llama3-70b-1024xh100-auto.json (Llama-3
// 70B on 1,024 H100) with its best 20 layouts simulated again at flow fidelity
// and re-ranked, on one thread.
void BM_SearchWithFlowVerify(benchmark::State& state) {
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/sweeps/llama3-70b-1024xh100-auto.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string sweep = text.str();
  const std::size_t end = sweep.rfind('}');
  sweep = sweep.substr(0, end) + R"(, "verify": {"fidelity": "flow", "top": 20}})";
  sweep.replace(sweep.find(R"("top_k": 10)"), 11, R"("top_k": 20)");
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / "bench-search-flow-verify.json").string();
  const std::string out_csv = (dir / "bench-search-flow-verify.csv").string();
  std::ofstream(path) << sweep;
  for (auto _ : state) {
    const char* argv[] = {"trainsim", "sweep", path.c_str(), "-j", "1", "--out", out_csv.c_str()};
    std::ostringstream out, err;
    if (run_cli(7, argv, out, err) != 0) state.SkipWithError(("sweep failed: " + err.str()).c_str());
  }
}
BENCHMARK(BM_SearchWithFlowVerify)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
