#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "tools/frontend/sweep.hpp"

using namespace trainsim;

namespace {

const Catalog& catalog() {
  static const Catalog c = load_builtin_catalog();
  return c;
}

// A small model on two 8-GPU nodes: every point simulates in milliseconds.
const char* kBase = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 2},
  "parallel": {"tp": 2, "pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 32},
  "training": {"seq_len": 2048}
})";

std::string axes_sweep() {
  return std::string(R"({"base": )") + kBase + R"(,
  "axes": {"parallel.tp": [1, 2, 4, 8],
           "parallel.micro_batch": {"range": [1, 8], "scale": "log2"},
           "parallel.schedule": ["1f1b", "gpipe"]},
  "top_k": 3})";
}

SweepSpec load(const std::string& text) { return load_sweep_text(text, "sweep.json", "", catalog()); }

std::string errors_of(const std::string& text) {
  try {
    expand_sweep(load(text), catalog());
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

std::string jsonl(const std::vector<SweepRow>& rows, const SweepPlan& plan) {
  return format_sweep_rows(sweep_rows_json(rows, plan), SweepFormat::Jsonl);
}

}  // namespace

TEST_CASE("sweep: axes expand to their cartesian product, the last axis fastest") {
  const SweepSpec spec = load(axes_sweep());
  CHECK_FALSE(spec.auto_search);
  REQUIRE(spec.axes.size() == 3);
  CHECK(spec.axes[0].key == "parallel.tp");  // file order, not alphabetical
  CHECK(spec.axes[1].values.size() == 4);    // log2 range 1, 2, 4, 8
  CHECK(spec.top_k == 3);
  const SweepPlan plan = expand_sweep(spec, catalog());
  REQUIRE(plan.points.size() == 4 * 4 * 2);
  CHECK(plan.invalid == 2);  // tp = 1, micro_batch = 8: dp = 8 needs a global batch of 64
  // dp is derived from the GPU count: 16 / (tp * pp).
  CHECK(plan.columns.back() == "parallel.dp");
  const auto args = plan.points[0].set_args();
  CHECK(args == std::vector<std::string>{"parallel.tp=1", "parallel.micro_batch=1", "parallel.schedule=\"1f1b\"",
                                         "parallel.dp=8"});
  CHECK(plan.points[1].set_args()[2] == "parallel.schedule=\"gpipe\"");
  CHECK(plan.points[2].set_args()[1] == "parallel.micro_batch=2");
  CHECK(plan.points.back().set_args()[0] == "parallel.tp=8");
  CHECK(plan.points.back().set_args()[3] == "parallel.dp=1");

  SUBCASE("linear ranges with a step") {
    const std::string text = std::string(R"({"base": )") + kBase +
                             R"(, "axes": {"parallel.global_batch": {"range": [16, 48], "step": 16}}})";
    const SweepPlan p = expand_sweep(load(text), catalog());
    REQUIRE(p.points.size() == 3);
    CHECK(p.points[2].overrides[0].second == 48);
  }
  SUBCASE("points the scenario rules reject are counted, kept and reported as invalid") {
    const std::string text = std::string(R"({"base": )") + kBase + R"(, "axes": {"parallel.tp": [2, 3]}})";
    const SweepSpec s = load(text);
    const SweepPlan p = expand_sweep(s, catalog());
    CHECK(p.points.size() == 2);
    CHECK(p.invalid == 1);
    const auto rows = run_sweep(p.points, 1, s, catalog());
    CHECK(rows[0].status == SweepStatus::Ok);
    CHECK(rows[1].status == SweepStatus::Invalid);
    CHECK(rows[1].error.find("/parallel") != std::string::npos);
  }
}

TEST_CASE("sweep: strict validation names the file and the JSON pointer") {
  const std::string base = std::string(R"({"base": )") + kBase;
  SUBCASE("unknown top-level key with did-you-mean") {
    const std::string e = errors_of(base + R"(, "axes": {"parallel.tp": [1]}, "top_kk": 3})");
    CHECK(e.find("sweep.json: /top_kk: unknown key \"top_kk\" (did you mean \"top_k\"?)") != std::string::npos);
  }
  SUBCASE("a bad range") {
    const std::string e = errors_of(base + R"(, "axes": {"parallel.micro_batch": {"range": [8, 1]}}})");
    CHECK(e.find("sweep.json: /axes/parallel.micro_batch/range: expected first <= last") != std::string::npos);
  }
  SUBCASE("an unknown key inside a range") {
    const std::string e = errors_of(base + R"(, "axes": {"parallel.micro_batch": {"range": [1, 8], "stp": 2}}})");
    CHECK(e.find("/axes/parallel.micro_batch/stp: unknown key \"stp\" (did you mean \"step\"?)") != std::string::npos);
  }
  SUBCASE("an axis naming a key the scenario does not have") {
    const std::string e = errors_of(base + R"(, "axes": {"parallel.tpp": [1, 2]}})");
    CHECK(e.find("sweep.json: /axes/parallel.tpp: not a key the base scenario accepts") != std::string::npos);
    CHECK(e.find("did you mean \"tp\"") != std::string::npos);
  }
  SUBCASE("the search kind") {
    const std::string e = errors_of(base + R"(, "search": "atuo"})");
    CHECK(e.find("sweep.json: /search: expected one of \"auto\", found \"atuo\"") != std::string::npos);
  }
  SUBCASE("a misspelt search-space list") {
    const std::string e = errors_of(base + R"(, "search": "auto", "search_space": {"micro_batches": [1]}})");
    CHECK(e.find("/search_space/micro_batches: unknown key \"micro_batches\" (did you mean \"micro_batch\"?)") !=
          std::string::npos);
  }
  SUBCASE("a bad search-space value") {
    const std::string e = errors_of(base + R"(, "search": "auto", "search_space": {"recompute": ["ful"]}})");
    CHECK(e.find("/search_space/recompute/0: expected \"none\", \"selective\" or \"full\"") != std::string::npos);
  }
  SUBCASE("axes and search together, neither, and a bad metric") {
    CHECK(errors_of(base + R"(, "axes": {"parallel.tp": [1]}, "search": "auto"})").find("/search: give either") !=
          std::string::npos);
    CHECK(errors_of(base + "}").find("sweep.json: (document): expected \"axes\"") != std::string::npos);
    CHECK(errors_of(base + R"(, "search": "auto", "metric": "tokens_per_sec"})").find("/metric: expected one of") !=
          std::string::npos);
  }
  SUBCASE("an error inside an inline base points into /base") {
    std::string text = base + R"(, "search": "auto"})";
    text.replace(text.find("gpt3-1.3b"), 9, "gpt3-1.3");
    CHECK(errors_of(text).find("sweep.json: /base/model: unknown model preset") != std::string::npos);
  }
  SUBCASE("a missing base file") {
    const std::string e = errors_of(R"({"base": "nowhere.json", "axes": {"parallel.tp": [1]}})");
    CHECK(e.find("sweep.json: /base: cannot read the base scenario") != std::string::npos);
  }
  SUBCASE("malformed JSON") { CHECK(errors_of("{\"base\": ").find("malformed JSON at line 1") != std::string::npos); }
}

TEST_CASE("sweep: results do not depend on the thread count, and shards merge back to the full run") {
  const SweepSpec spec = load(axes_sweep());
  const SweepPlan plan = expand_sweep(spec, catalog());
  std::vector<std::size_t> progress;
  const auto rows1 = run_sweep(plan.points, 1, spec, catalog(), [&](std::size_t done, std::size_t total) {
    CHECK(total == plan.points.size());
    progress.push_back(done);
  });
  const auto rows2 = run_sweep(plan.points, 2, spec, catalog());
  REQUIRE(progress.size() == plan.points.size() + 1);
  CHECK(progress.back() == plan.points.size());
  const std::string full = jsonl(rows1, plan);
  CHECK(full == jsonl(rows2, plan));
  CHECK(format_sweep_rows(sweep_rows_json(rows1, plan), SweepFormat::Csv) ==
        format_sweep_rows(sweep_rows_json(rows2, plan), SweepFormat::Csv));
  std::size_t ok = 0;
  for (const auto& r : rows1) ok += r.status == SweepStatus::Ok ? 1 : 0;
  CHECK(ok > 0);

  const Shard s1 = parse_shard("1/2"), s2 = parse_shard("2/2");
  const auto p1 = shard_points(plan.points, s1), p2 = shard_points(plan.points, s2);
  CHECK(p1.size() + p2.size() == plan.points.size());
  CHECK(p1.front().index == 0);
  CHECK(p2.front().index == 1);
  const std::string out1 = jsonl(run_sweep(p1, 2, spec, catalog()), plan);
  const std::string out2 = jsonl(run_sweep(p2, 1, spec, catalog()), plan);
  const SweepMerge merged = merge_sweep_texts({{"b.jsonl", out2}, {"a.jsonl", out1}});
  CHECK(merged.points == plan.points.size());
  CHECK(merged.missing == 0);
  CHECK(format_sweep_rows(merged.rows, SweepFormat::Jsonl) == full);

  SUBCASE("merge rejects overlapping shards, other sweeps and non-rows") {
    auto merge_error = [](const std::vector<std::pair<std::string, std::string>>& files) {
      try {
        merge_sweep_texts(files);
        return std::string();
      } catch (const InputError& e) {
        return std::string(e.what());
      }
    };
    CHECK(merge_error({{"a.jsonl", out1}, {"a2.jsonl", out1}}).find("(overlapping shards)") != std::string::npos);
    const SweepSpec other = load(std::string(R"({"base": )") + kBase + R"(, "axes": {"parallel.tp": [1, 2]}})");
    const SweepPlan other_plan = expand_sweep(other, catalog());
    const std::string out3 = jsonl(run_sweep(other_plan.points, 1, other, catalog()), other_plan);
    CHECK(merge_error({{"a.jsonl", out1}, {"c.jsonl", out3}}).find("outputs of different sweeps") != std::string::npos);
    CHECK(merge_error({{"x.jsonl", "{\"index\": 1}\n"}}).find("x.jsonl: (document): line 1: expected a sweep") !=
          std::string::npos);
    const SweepMerge half = merge_sweep_texts({{"a.jsonl", out1}});
    CHECK(half.missing == p2.size());
  }
  SUBCASE("shard syntax") {
    CHECK_THROWS_AS(parse_shard("0/2"), InputError);
    CHECK_THROWS_AS(parse_shard("3/2"), InputError);
    CHECK_THROWS_AS(parse_shard("1-2"), InputError);
    CHECK(parse_shard("3/3").k == 3);
  }
  SUBCASE("output formats") {
    CHECK(sweep_format_for_path("r.csv") == SweepFormat::Csv);
    CHECK(sweep_format_for_path("r.jsonl") == SweepFormat::Jsonl);
    CHECK_THROWS_AS(sweep_format_for_path("r.txt"), InputError);
    const std::string csv = format_sweep_rows(sweep_rows_json(rows1, plan), SweepFormat::Csv);
    CHECK(csv.rfind("index,sweep,points,status,parallel.tp,parallel.micro_batch,parallel.schedule,parallel.dp,gpus,"
                    "iteration_time_s,tokens_per_s,samples_per_s,tflops_per_gpu,mfu,hfu,peak_memory_gib,"
                    "breakdown.compute_s,",
                    0) == 0);
    CHECK(csv.find("breakdown.exposed_comm_s.tp") != std::string::npos);
    CHECK(csv.find(",feasible,events,simulated_ranks,error\n") != std::string::npos);
  }
  SUBCASE("top-k table") {
    const std::string t = top_k_table(rows1, 3, "tokens_per_s");
    CHECK(t.rfind("top 3 by tokens_per_s (higher is better)", 0) == 0);
    CHECK(t.find("tp=") != std::string::npos);
    CHECK(top_k_table(rows1, 0, "mfu").empty());
    const std::string h = top_k_table(rows1, 2, "hfu");
    CHECK(h.find("hfu\n") != std::string::npos);
    CHECK(top_k_table(rows1, 1, "iteration_time_s").find("(lower is better)") != std::string::npos);
  }
}

TEST_CASE("sweep: progress lines") {
  CHECK(progress_line(0, 10, 0.0, false) == "sweep: 0/10 points (0%), 0.0 s elapsed, ETA ?");
  CHECK(progress_line(5, 10, 10.0, false) == "sweep: 5/10 points (50%), 10.0 s elapsed, ETA 10.0 s");
  const std::string tty = progress_line(3, 10, 90.0, true);
  CHECK(tty.rfind("\r[#########.....................] 3/10  30%  1m30s, ETA 3m30s", 0) == 0);
  std::ostringstream out;
  SweepProgressPrinter plain(out, false);
  for (std::size_t i = 0; i <= 20; ++i) plain(i, 20);
  std::size_t lines = 0;
  for (char c : out.str()) lines += c == '\n' ? 1 : 0;
  CHECK(lines == 10);
}

TEST_CASE("sweep: auto-search prunes invalid, redundant, out-of-memory and dominated layouts") {
  // Llama-3 8B on one 8-GPU node: tp = 1 without recomputation or ZeRO runs out of memory.
  const std::string text = R"({"base": {
      "model": "llama3-8b", "cluster": {"node": "dgx-h100", "nodes": 1},
      "parallel": {"global_batch": 16, "sequence_parallel": true},
      "training": {"seq_len": 4096}},
    "search": "auto",
    "search_space": {"micro_batch": [1, 2], "cp": [1, 2], "vpp": [1, 2]},
    "top_k": 1})";
  const SweepSpec spec = load(text);
  CHECK(spec.auto_search);
  const SweepPlan plan = expand_sweep(spec, catalog());
  CHECK(plan.grid == 8 * 32 * 2 * 2 * 2 * 1 * 3 * 4);
  CHECK(plan.invalid > 0);
  CHECK(plan.redundant > 0);
  CHECK(plan.pruned_oom > 0);
  CHECK(plan.pruned_dominated > 0);
  CHECK(plan.grid == plan.invalid + plan.redundant + plan.pruned_oom + plan.pruned_dominated + plan.points.size());
  REQUIRE(!plan.points.empty());
  CHECK(sweep_summary(spec, plan).find(std::to_string(plan.points.size()) + " to simulate") != std::string::npos);
  for (const auto& p : plan.points) {
    // tp divides 32 heads / 8 KV heads and stays in the node; pp divides 32 layers.
    const int tp = p.overrides[0].second.get<int>();
    CHECK((tp == 1 || tp == 2 || tp == 4 || tp == 8));
  }
  const auto rows = run_sweep(plan.points, 2, spec, catalog());
  for (const auto& r : rows) {
    CAPTURE(r.error);
    CHECK(r.status == SweepStatus::Ok);  // nothing the memory model kept runs out of memory
  }
  const std::string table = top_k_table(rows, 1, spec.metric);
  MESSAGE(sweep_summary(spec, plan) << table);
  CHECK(table.find("   1 ") != std::string::npos);
  CHECK(table.find("tp=") != std::string::npos);
  CHECK(table.find("recompute=") != std::string::npos);
}

#ifdef TRAINSIM_SOURCE_DIR
TEST_CASE("sweep: the shipped sweep files load") {
  for (const char* name : {"llama3-70b-1024xh100-auto.json", "llama3-70b-axes.json"}) {
    CAPTURE(name);
    const SweepSpec spec = load_sweep_file(std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/sweeps/" + name, catalog());
    const SweepPlan plan = expand_sweep(spec, catalog());
    CHECK(!plan.points.empty());
    CHECK(plan.invalid < plan.grid);
  }
}

// The performance target of docs/sweeps.md; run with --no-skip -tc='*1024*'.
TEST_CASE("sweep: auto-search of Llama-3 70B on 1024 H100" * doctest::skip(true)) {
  const auto t0 = std::chrono::steady_clock::now();
  const SweepSpec spec =
      load_sweep_file(std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/sweeps/llama3-70b-1024xh100-auto.json", catalog());
  const SweepPlan plan = expand_sweep(spec, catalog());
  std::ostringstream progress;
  SweepProgressPrinter printer(progress, false);
  const auto rows = run_sweep(plan.points, 2, spec, catalog(), std::ref(printer));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE(sweep_summary(spec, plan) << progress.str() << top_k_table(rows, 5, spec.metric) << "total " << s << " s");
  CHECK(s < 60);
}
#endif
