#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tools/frontend/job.hpp"
#include "tools/frontend/report_html.hpp"
#include "tools/frontend/scenario.hpp"
#include "tools/frontend/trace.hpp"

using namespace trainsim;

namespace {

const Scenario& default_scenario() {
  static const Scenario s = [] {
    const Catalog catalog = load_builtin_catalog();
    const EmbeddedFile& f = default_scenario_file();
    return load_scenario_text(std::string(f.text), std::string(f.path), "", {}, catalog);
  }();
  return s;
}

const JobRun& default_run() {
  static const JobRun run = run_job(default_scenario());
  return run;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("chrome trace of the default scenario: one process per recorded rank, one thread per stream") {
  const JobRun& run = default_run();
  REQUIRE(run.report.feasible);
  const nlohmann::json trace = chrome_trace(run, {});
  REQUIRE(trace.contains("traceEvents"));
  CHECK(trace["displayTimeUnit"] == "ms");
  REQUIRE(trace["metadata"].is_object());
  const double iteration_us = static_cast<double>(run.result.makespan.count_ns()) / 1000.0;
  CHECK(trace["metadata"]["iteration_time_us"].get<double>() == iteration_us);

  const std::vector<int> recorded = recorded_ranks(run);
  REQUIRE(recorded.size() == run.result.timelines.size());
  REQUIRE(!recorded.empty());

  // Counted in the loop and checked once: the trace has a few hundred thousand events.
  std::set<int> processes, x_pids;
  std::set<std::pair<int, int>> threads;
  std::size_t x_events = 0, intervals = 0, missing_keys = 0, bad_times = 0, bad_cat = 0, bad_args = 0,
              unnamed_thread = 0, out_of_order = 0, not_complete = 0;
  const std::set<std::string> categories = {"compute", "tp", "cp", "ep", "pp", "dp", "wait"};
  std::map<std::pair<int, int>, double> last_ts;  // per (pid, tid)
  for (const auto& e : trace["traceEvents"]) {
    if (!e.contains("name") || !e.contains("ph") || !e.contains("pid") || !e.contains("tid")) {
      ++missing_keys;
      continue;
    }
    const int pid = e["pid"].get<int>(), tid = e["tid"].get<int>();
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") {
        processes.insert(pid);
        CHECK(e["args"]["name"] == run.plan.setup.ranks.at(static_cast<std::size_t>(pid)).name);
      }
      if (e["name"] == "thread_name") {
        threads.insert({pid, tid});
        CHECK(!e["args"]["name"].get<std::string>().empty());
      }
      continue;
    }
    if (e["ph"] != "X") {
      ++not_complete;
      continue;
    }
    ++x_events;
    x_pids.insert(pid);
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    if (!(ts >= 0 && dur >= 0 && ts + dur <= iteration_us * (1 + 1e-12))) ++bad_times;
    if (!e.contains("cat") || categories.count(e["cat"].get<std::string>()) != 1) ++bad_cat;
    const auto& args = e["args"];
    if (!args.contains("microbatch") || !args.contains("stage") ||
        !(e["cat"] == "compute" ? args.contains("flops") : args.contains("bytes"))) {
      ++bad_args;
    }
    if (threads.count({pid, tid}) != 1) ++unnamed_thread;  // thread metadata precedes its events
    auto [it, fresh] = last_ts.try_emplace({pid, tid}, ts);
    if (!fresh) {
      if (ts < it->second) ++out_of_order;
      it->second = ts;
    }
  }
  CHECK(missing_keys == 0);
  CHECK(not_complete == 0);
  CHECK(bad_times == 0);
  CHECK(bad_cat == 0);
  CHECK(bad_args == 0);
  CHECK(unnamed_thread == 0);
  CHECK(out_of_order == 0);
  for (const auto& tl : run.result.timelines) intervals += tl.intervals.size();
  CHECK(x_events == intervals);
  CHECK(processes == std::set<int>(recorded.begin(), recorded.end()));
  CHECK(x_pids == processes);
  // Every stream of every recorded rank is a named thread.
  std::size_t streams = 0;
  for (int r : recorded) {
    streams += run.plan.setup.programs[run.plan.setup.ranks[static_cast<std::size_t>(r)].program].streams.size();
  }
  CHECK(threads.size() == streams);
}

TEST_CASE("chrome trace: rank selection and deterministic output") {
  const JobRun& run = default_run();
  const std::vector<int> recorded = recorded_ranks(run);
  REQUIRE(recorded.size() >= 2);
  const nlohmann::json one = chrome_trace(run, {recorded[1]});
  std::set<int> pids;
  for (const auto& e : one["traceEvents"]) pids.insert(e["pid"].get<int>());
  CHECK(pids == std::set<int>{recorded[1]});
  CHECK(one["metadata"]["ranks"] == nlohmann::json::array({recorded[1]}));
  // A rank that has no recorded timeline contributes nothing.
  CHECK(chrome_trace(run, {-5})["traceEvents"].empty());

  // The streamed writer gives the bytes of dump(); a second simulation gives the same trace.
  std::ostringstream streamed, again;
  write_chrome_trace(streamed, run, {recorded[0]});
  CHECK(streamed.str() == chrome_trace(run, {recorded[0]}).dump() + "\n");
  write_chrome_trace(again, run_job(default_scenario()), {recorded[0]});
  CHECK(streamed.str() == again.str());
}

TEST_CASE("html report of the default scenario is self-contained and well formed") {
  const Scenario& s = default_scenario();
  const JobRun& run = default_run();
  const std::string html = html_report(s, run);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("</html>") != std::string::npos);
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(count(html, "<svg") == count(html, "</svg>"));
  CHECK(count(html, "<g ") + count(html, "<g>") == count(html, "</g>"));
  CHECK(count(html, "<title>") == count(html, "</title>"));
  CHECK(count(html, "<table") == count(html, "</table>"));
  // No network, no scripts.
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("<link") == std::string::npos);
  // One timeline row, one breakdown bar and one memory bar per pipeline stage.
  const auto stages = static_cast<std::size_t>(s.parallel.pp);
  CHECK(count(html, "class=\"stage-row\"") == stages);
  CHECK(count(html, "class=\"bd-row\"") == stages);
  CHECK(count(html, "class=\"mem-row\"") == stages);
  for (std::size_t st = 0; st < stages; ++st) {
    CHECK(html.find("id=\"timeline-stage-" + std::to_string(st) + "\"") != std::string::npos);
  }
  CHECK(html.find("Feasible") != std::string::npos);
  CHECK(html.find("MFU") != std::string::npos);
  CHECK(html.find("tokens/s") != std::string::npos);
  CHECK(html.find(html_escape(run.report.scenario)) != std::string::npos);
  // The expected slowest of the 64 H100 every GPU waits for (docs/calibration.md).
  REQUIRE(run.report.slowest_gpus.size() == 1);
  char factor[32];
  std::snprintf(factor, sizeof factor, "x%.3f", run.report.slowest_gpus[0].factor);
  CHECK(html.find(std::string("expected slowest of the 64: its kernels take ") + factor) != std::string::npos);
  CHECK(count(html, "<rect") <= 20000 + 64);
  CHECK(html == html_report(s, run));
}

TEST_CASE("html report bounds the rectangles of the timeline") {
  const Scenario& s = default_scenario();
  const JobRun& run = default_run();
  std::size_t intervals = 0;
  for (const auto& tl : run.result.timelines) intervals += tl.intervals.size();
  auto timeline_rects = [](const std::string& html) {
    const std::size_t begin = html.find("class=\"chart timeline\"");
    return count(html.substr(begin, html.find("</svg>", begin) - begin), "<rect class=\"k");
  };
  for (const std::size_t budget : {std::size_t{300}, std::size_t{4000}, intervals}) {
    CAPTURE(budget);
    HtmlReportOptions options;
    options.max_timeline_rects = budget;
    const std::string html = html_report(s, run, options);
    const std::size_t rects = timeline_rects(html);
    CHECK(rects > 0);
    CHECK(rects <= budget);
    CHECK(count(html, "<svg") == count(html, "</svg>"));
    CHECK((html.find("neighbouring intervals of the same kind are merged") != std::string::npos) ==
          (budget < intervals));
  }
}

TEST_CASE("html escaping") {
  CHECK(html_escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
  CHECK(html_escape("plain") == "plain");
}

TEST_CASE("sweep report: Pareto front of throughput vs memory") {
  const std::vector<ReportPoint> points = {
      {"tp=8 pp=1", 100000, 50, 8, true},
      {"tp=4 pp=2", 150000, 70, 8, true},
      {"tp=2 pp=4 <dominated>", 90000, 60, 8, true},
  };
  CHECK(pareto_front(points) == std::vector<std::size_t>{0, 1});

  const std::string html = sweep_html_report("sweep <demo>", points);
  CHECK(html.find("<title>sweep &lt;demo&gt;</title>") != std::string::npos);
  CHECK(html.find("<demo>") == std::string::npos);
  CHECK(count(html, "<svg") == 2);
  CHECK(count(html, "</svg>") == 2);
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  const std::size_t begin = html.find("<table class=\"pareto\">");
  REQUIRE(begin != std::string::npos);
  const std::string front = html.substr(begin, html.find("</table>", begin) - begin);
  CHECK(front.find("tp=8 pp=1") != std::string::npos);
  CHECK(front.find("tp=4 pp=2") != std::string::npos);
  CHECK(front.find("dominated") == std::string::npos);
  CHECK(count(front, "<tr class=\"front\">") == 2);
  // Bars sorted by throughput, highest first.
  const std::size_t b = html.find("class=\"chart bars\"");
  CHECK(html.find("tp=4 pp=2", b) < html.find("tp=8 pp=1", b));
  CHECK(html.find("tp=8 pp=1", b) < html.find("tp=2 pp=4 &lt;dominated&gt;", b));
}

TEST_CASE("Pareto front: infeasible points never count, ties stay together") {
  const std::vector<ReportPoint> points = {
      {"oom", 500000, 90, 8, false},                              // the fastest, but it does not fit
      {"a", 100000, 40, 8, true},    {"b", 100000, 40, 8, true},  // the same as a: neither dominates
      {"c", 100000, 45, 8, true},                                 // as fast as a with more memory
      {"d", 120000, 45, 8, true},
  };
  CHECK(pareto_front(points) == std::vector<std::size_t>{1, 2, 4});
  CHECK(pareto_front({}).empty());
  const std::string html = sweep_html_report("empty", {});
  CHECK(html.find("No configurations") != std::string::npos);
}

TEST_CASE("a report without a trace merges touching intervals and reports the same to the bit") {
  // simulate() keeps no interval per task (Executor::merge_intervals); run_job() keeps them
  // for traces. Every figure of the report is the same either way, at both fidelities,
  // on the default scenario and on an interleaved, a Zero Bubble and a ZeRO-3 layout.
  const Catalog catalog = load_builtin_catalog();
  const std::vector<std::vector<std::string>> layouts{
      {},
      {"parallel.vpp=2", "parallel.schedule=\"interleaved-1f1b\""},
      {"parallel.schedule=\"zb-h1\""},
      {"parallel.pp=1", "parallel.dp=8", "parallel.zero=3", "parallel.global_batch=64"}};
  for (const std::vector<std::string>& sets : layouts) {
    const EmbeddedFile& f = default_scenario_file();
    const Scenario s = load_scenario_text(std::string(f.text), std::string(f.path), "", sets, catalog);
    for (const Fidelity fidelity : {Fidelity::Analytical, Fidelity::Flow}) {
      const JobRun full = run_job(s, fidelity);
      const JobReport merged = simulate(s, fidelity);
      std::size_t intervals = 0;
      for (const RankTimeline& tl : full.result.timelines) intervals += tl.intervals.size();
      CHECK(intervals > 0);
      CHECK(merged.iteration_time_s == full.report.iteration_time_s);
      JobReport same_wall = full.report;
      same_wall.wall_time_s = merged.wall_time_s;
      CHECK(to_json(merged).dump() == to_json(same_wall).dump());
    }
  }
}
