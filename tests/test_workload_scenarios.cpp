// Scenarios with a "workload" section (docs/workloads.md): GNN and DLRM runs
// end to end, the Chakra trace import against the built-in transformer it was
// written from, and the loader's errors for bad workload sections and traces.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>

#include "scenario_fixtures.hpp"
#include "tools/frontend/chakra_export.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/report_html.hpp"
#include "tools/frontend/trace.hpp"
#include "tools/frontend/workload_input.hpp"

using namespace trainsim;
using trainsim::testing::catalog;
using trainsim::testing::errors_of;

namespace {
const std::string kSource = TRAINSIM_SOURCE_DIR;

Scenario load(const std::string& path, const std::vector<std::string>& sets = {}) {
  return load_scenario_file(kSource + "/" + path, sets, catalog());
}

std::string trace_errors(const std::string& text) {
  try {
    read_chakra_json(text, "trace.json");
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("GraphSAGE on ogbn-products over 8 partitions reports epochs/s, a breakdown and memory per partition") {
  const Scenario s = load("scenarios/examples/graphsage-ogbn-products-8xh100.json");
  const JobRun run = run_job(s);
  const JobReport& r = run.report;
  // The HTML report names the workload, not an empty transformer.
  const std::string html = html_report(s, run);
  CHECK(contains(html, "graphsage on ogbn-products"));
  CHECK(!contains(html, "B parameters"));
  CHECK(r.feasible);
  CHECK(r.throughput_unit == "epochs");
  CHECK(r.units_per_s == doctest::Approx(1 / r.iteration_time_s));
  CHECK(r.breakdown.compute_s > 0);
  CHECK(r.breakdown.exposed_comm_s[static_cast<std::size_t>(CommClass::EP)] > 0);  // the halo exchange
  CHECK(r.peak_memory_gib > 0);
  CHECK(r.wall_time_s < 1.0);
  // Its fp32 GEMMs run on the H100 profile's fp32 curve; on a GPU whose profile has
  // none (B200) they are timed at peak, and the report says so.
  auto warns_fp32 = [](const JobReport& rep) {
    bool warned = false;
    for (const std::string& w : rep.warnings) warned = warned || contains(w, "no fp32 GEMM curve");
    return warned;
  };
  CHECK(!warns_fp32(r));
  CHECK(warns_fp32(
      simulate(load("scenarios/examples/graphsage-ogbn-products-8xh100.json", {"cluster.node=\"dgx-b200\""}))));
  // PipeGCN overlaps the exchange: faster, same work.
  const JobReport pipe =
      simulate(load("scenarios/examples/graphsage-ogbn-products-8xh100.json", {"workload.pipeline=pipegcn"}));
  CHECK(pipe.iteration_time_s < r.iteration_time_s);
}

TEST_CASE("DLRM-DCNv2 on 64 GPUs reports samples/s with the embedding all-to-all in its breakdown") {
  const JobReport r = simulate(load("scenarios/examples/dlrm-dcnv2-64xh100.json"));
  CHECK(r.feasible);
  CHECK(r.throughput_unit == "samples");
  CHECK(r.samples_per_s == doctest::Approx(135168 / r.iteration_time_s));
  CHECK(r.breakdown.exposed_comm_s[static_cast<std::size_t>(CommClass::EP)] > 0);
  CHECK(r.wall_time_s < 1.0);
  // Forcing every table to be replicated costs the full table gradients' all-reduce
  // (and more memory than a GPU has: timed as a what-if).
  const JobReport dp = simulate(load("scenarios/examples/dlrm-dcnv2-64xh100.json", {"workload.sharding=data-parallel"}),
                                Fidelity::Analytical, MemoryCheck::SimulateAnyway);
  CHECK_FALSE(dp.feasible);
  CHECK(dp.iteration_time_s > r.iteration_time_s);
  // Every table row-wise over whole nodes: a valid choice, the exchange still reported under ep.
  const JobReport twrw =
      simulate(load("scenarios/examples/dlrm-dcnv2-64xh100.json", {"workload.sharding=table-row-wise"}));
  CHECK(twrw.feasible);
  CHECK(twrw.breakdown.exposed_comm_s[static_cast<std::size_t>(CommClass::EP)] > 0);
}

TEST_CASE(
    "DLRM-DCNv2 on 8 DGX H100: the node exchange is an all-to-all; the fidelities part only where transfers overlap") {
  // MLPerf v4.0's 8-node run (hier_auto plan). Rank 0's transfers at each fidelity: (kind, time
  // busy, start, end) by label, the waits for peers left out.
  struct Span {
    std::string kind;
    double busy = 0, start = 1e30, end = 0;
  };
  const Scenario s = load("scenarios/validation-gnn/mlperf_v4.0_dlrmv2_nvidia_eos_n8_ngc24_04.json");
  auto spans = [&](Fidelity f, double& iteration) {
    const JobRun run = run_job(s, f);
    REQUIRE(run.report.feasible);
    iteration = run.report.iteration_time_s;
    std::map<std::string, Span> out;
    const nlohmann::json trace = chrome_trace(run, {0});
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] != "X" || e["cat"] == "wait" || e["cat"] == "compute") continue;
      Span& sp = out[e["name"].get<std::string>()];
      sp.kind = e["args"]["kind"].get<std::string>();
      sp.busy += e["dur"].get<double>();
      sp.start = std::min(sp.start, e["ts"].get<double>());
      sp.end = std::max(sp.end, e["ts"].get<double>() + e["dur"].get<double>());
    }
    return out;
  };
  double it_a = 0, it_f = 0;
  auto a = spans(Fidelity::Analytical, it_a);
  auto f = spans(Fidelity::Flow, it_f);
  // HugeCTR's hierarchical embedding writes every partial sum straight into the buffer of the
  // GPU owning the sample and reads the gradients back from it (peer access over NVLink, not an
  // NCCL ring): an all-to-all inside the node each way, then one along the rail.
  for (const char* name :
       {"embeddings.node.fwd", "embeddings.node.bwd", "embeddings.rail.fwd", "embeddings.rail.bwd"}) {
    CAPTURE(name);
    REQUIRE(a.count(name) == 1);
    CHECK(a[name].kind == "all-to-all");
  }
  // Alone (the forward half) each exchange takes the same time at both fidelities: the node
  // one on the measured NVLink curve, the rail one on the NICs.
  for (const char* name : {"embeddings.node.fwd", "embeddings.rail.fwd"}) {
    CAPTURE(name);
    CHECK(f[name].busy == doctest::Approx(a[name].busy).epsilon(1e-4));
  }
  // Backward: the dense gradients' all-reduce starts while the rail exchange runs (HugeCTR's
  // intra-iteration overlap) and shares each GPU's NIC with it, then NVLink with the node
  // exchange; the flow model charges that, the analytical model does not.
  const Span& ar = f["dense.gradients"];
  CHECK(ar.start < f["embeddings.rail.bwd"].end);
  CHECK(ar.end > f["embeddings.node.bwd"].start);
  CHECK(f["embeddings.rail.bwd"].busy > 1.2 * a["embeddings.rail.bwd"].busy);
  CHECK(f["embeddings.node.bwd"].busy > 1.1 * a["embeddings.node.bwd"].busy);
  CHECK(ar.busy > 1.3 * a["dense.gradients"].busy);
  // The iteration: 2.397 ms analytical, 2.490 ms at flow fidelity (+3.9%; +8.5% while the node
  // exchange was a ring, one flow per GPU against the all-reduce's seven on its NVLink link).
  CHECK(it_a == doctest::Approx(2.3967e-3).epsilon(1e-3));
  CHECK(it_f > it_a * 1.03);
  CHECK(it_f < it_a * 1.05);
}

TEST_CASE("A Chakra trace of the transformer replays to its iteration time within 5%") {
  const Scenario job = load("tests/data/traces/gpt3-1.3b-8xh100.json");
  const JobRun built_in = run_job(job);
  const JobReport replay = simulate(load("tests/data/traces/gpt3-1.3b-replay-8xh100.json"));
  REQUIRE(replay.feasible);
  CHECK(replay.iteration_time_s == doctest::Approx(built_in.report.iteration_time_s).epsilon(0.05));
  CHECK(replay.samples_per_s == doctest::Approx(built_in.report.samples_per_s).epsilon(0.05));
  // The shipped trace is what the exporter writes for that job today.
  const nlohmann::json now = chakra_trace_of(job, built_in);
  CHECK(now["nodes"].size() == load("tests/data/traces/gpt3-1.3b-replay-8xh100.json").workload.trace.nodes.size());
  // Rescaled to 16 GPUs (DP 8): twice the samples per iteration, gradients over a larger group.
  const JobReport wide =
      simulate(load("tests/data/traces/gpt3-1.3b-replay-8xh100.json", {"parallel.dp=8", "cluster.nodes=2"}));
  CHECK(wide.samples_per_s > 1.5 * replay.samples_per_s);
  CHECK(wide.iteration_time_s >= replay.iteration_time_s);
}

TEST_CASE("Trace import: nodes it cannot interpret are errors naming the node") {
  CHECK(contains(trace_errors("[]"), "an object with a \"nodes\" array"));
  CHECK(contains(trace_errors(R"({"nodes": []})"), "/nodes: expected 1 to"));
  CHECK(
      contains(trace_errors(R"({"nodes": [{"id": 1, "name": "x", "type": "COMM_SEND_NODE"}]})"),
               "trace.json: /nodes/0/type: node \"x\" has kind \"COMM_SEND_NODE\"; only COMP_NODE and COMM_COLL_NODE"));
  CHECK(contains(trace_errors(R"({"nodes": [{"id": 1, "type": "COMP_NODE", "duration_micros": 5, "data_deps": [2]},
                                            {"id": 2, "type": "COMP_NODE", "duration_micros": 5}]})"),
                 "/nodes/0/data_deps/0: dependency 2 is not the id of an earlier node"));
  CHECK(contains(trace_errors(R"({"nodes": [{"id": 1, "type": "COMP_NODE"}]})"), "needs its measured duration_micros"));
  CHECK(contains(trace_errors(R"({"nodes": [{"id": 1, "type": "COMM_COLL_NODE",
      "attr": [{"name": "comm_type", "int64_val": 9}, {"name": "comm_size", "int64_val": 8}]}]})"),
                 "/nodes/0/attr/0: collective type 9 is not replayed"));
  CHECK(contains(trace_errors(R"({"nodes": [{"id": 1, "type": "COMM_COLL_NODE", "attr": [{"name": "pg_name",
      "string_val": "ep"}, {"name": "comm_type", "int64_val": 0}, {"name": "comm_size", "int64_val": 8}]}]})"),
                 "process group \"ep\" is not known"));
  CHECK(contains(trace_errors(R"({"nodes": [{"id": 1, "type": "COMP_NODE", "duration_micros": -1}]})"),
                 "expected a duration of 0 to 1e12 microseconds"));
  CHECK(contains(trace_errors(R"({"nodes": [{"id": 1, "type": "COMP_NODE", "duration_micros": 1},
                                            {"id": 1, "type": "COMP_NODE", "duration_micros": 1}]})"),
                 "node id 1 appears twice"));
}

TEST_CASE("Workload sections: layouts, presets and files are checked at load") {
  const std::string gnn = R"({"workload": {"kind": "gnn", "graph": "ogbn-products"},
                              "cluster": {"node": "dgx-h100", "nodes": 1}, "parallel": {"dp": 8}})";
  CHECK(errors_of(gnn).empty());
  CHECK(contains(errors_of(gnn, {"parallel.tp=2"}), "bad.json: /parallel: a gnn workload runs data-parallel ranks"));
  CHECK(contains(errors_of(gnn, {"parallel.dp=4"}), "/parallel/dp: tp*dp = 4 ranks, but the cluster has 8 GPUs"));
  CHECK(contains(errors_of(gnn, {"workload.graph=ogbn-product"}), "(did you mean \"ogbn-products\"?)"));
  CHECK(contains(errors_of(gnn, {"workload.edge_cut=1.5"}), "/workload/edge_cut"));
  CHECK(contains(errors_of(gnn, {"workload.heads=4"}), "attention heads apply to the gat model only"));
  CHECK(contains(errors_of(gnn, {"cluster.node=dgx-v100", "workload.precision=bf16"}),
                 "/workload/precision: the V100-SXM2-32GB has no bf16 peak"));
  CHECK(contains(errors_of(gnn, {"workload.kind=rnn"}), "/workload/kind"));
  CHECK(contains(errors_of(gnn, {"parallel.dp=32768", "cluster.nodes=4096"}), "at most 16384 ranks"));
  const std::string dlrm = R"({"workload": {"kind": "dlrm", "preset": "dlrm-dcnv2"},
                               "cluster": {"node": "dgx-h100", "nodes": 1}, "parallel": {"dp": 8, "global_batch": 8000}})";
  CHECK(errors_of(dlrm).empty());
  CHECK(contains(errors_of(dlrm, {"parallel.global_batch=8001"}), "must split evenly over the dp=8 ranks"));
  CHECK(contains(errors_of(dlrm, {"workload.bottom_mlp=[512,64]"}), "must equal every table's dim (128)"));
  const std::string trace = R"({"workload": {"kind": "trace", "file": "missing.json"},
                                "cluster": {"node": "dgx-h100", "nodes": 1}, "parallel": {"dp": 8}})";
  CHECK(contains(errors_of(trace), "/workload/file: cannot read the trace \"missing.json\""));
}

TEST_CASE("A real PyTorch profiler trace replays its profiled step's top-level ops in order") {
  const JobReport r = simulate(load("tests/data/traces/mlp-cpu-replay.json"));
  REQUIRE(r.feasible);
  // Ground truth from the file itself: the ops directly under the ProfilerStep, back to back.
  std::ifstream in(kSource + "/tests/data/traces/mlp-cpu.kineto.json");
  const nlohmann::json events = nlohmann::json::parse(in);
  double step_start = 0, step_end = 0;
  for (const auto& e : events) {
    if (e["name"].get<std::string>().rfind("ProfilerStep#", 0) == 0) {
      step_start = e["ts"].get<double>();
      step_end = step_start + e["dur"].get<double>();
    }
  }
  REQUIRE(step_end > step_start);
  double busy = 0, open_until = step_start;
  for (const auto& e : events) {  // the trace lists events by start time
    const double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
    if (e["name"].get<std::string>().rfind("ProfilerStep#", 0) == 0 || ts < step_start || end > step_end) continue;
    if (ts < open_until) continue;  // nested in the previous top-level op
    busy += e["dur"].get<double>();
    open_until = end;
  }
  CHECK(r.iteration_time_s == doctest::Approx(busy * 1e-6).epsilon(1e-6));
  CHECK(r.iteration_time_s <= (step_end - step_start) * 1e-6);  // the gaps between ops are not replayed
  CHECK(r.iteration_time_s > 0.5 * (step_end - step_start) * 1e-6);
  CHECK(r.samples_per_s == doctest::Approx(64 / r.iteration_time_s));
}

TEST_CASE("Profiler trace import: what cannot be replayed is an error naming the event") {
  auto errors = [](const std::string& text) {
    try {
      read_kineto_json(text, "k.json");
      return std::string();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
  };
  CHECK(contains(errors("{}"), "k.json: (document): expected a PyTorch profiler trace"));
  CHECK(contains(errors(R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "ts": 1,
                            "dur": 5, "tid": 7}]})"),
                 "/traceEvents/0: NCCL kernel \"ncclKernel_AllReduce\" has no \"Collective name\""));
  CHECK(contains(errors(R"([{"ph": "X", "name": "op", "ts": 1}])"), "/0: a complete event"));
  CHECK(contains(errors(R"([{"ph": "i", "name": "marker", "ts": 1}])"), "replayable events"));
  // GPU kernels win over CPU ops; a sized NCCL kernel becomes a collective.
  const TraceSpec t = read_kineto_json(R"({"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 50, "tid": 1},
      {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 10, "dur": 20, "tid": 7},
      {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "ts": 40, "dur": 30, "tid": 9,
       "args": {"Collective name": "allreduce", "In msg nelems": 1024, "dtype": "Float"}}]})",
                                       "k.json");
  REQUIRE(t.nodes.size() == 2);
  CHECK(t.nodes[1].collective);
  CHECK(t.nodes[1].comm_bytes == 4096);
  CHECK(t.nodes[1].deps == std::vector<std::uint32_t>{0});  // it started after the GEMM ended
}
