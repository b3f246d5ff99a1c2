#pragma once
// Self-contained HTML reports (inline CSS and SVG; no scripts, no external
// assets) that open offline in any browser: one run (summary, pipeline
// timeline, time breakdown and memory per stage) or a sweep of configurations.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

namespace trainsim {

struct HtmlReportOptions {
  // Rectangles the pipeline timeline draws at most: above it, neighbouring
  // intervals of one kind are merged, then lanes are drawn per time bucket.
  std::size_t max_timeline_rects = 20000;
};

std::string html_report(const Scenario& s, const JobRun& run, const HtmlReportOptions& options = {});

// One configuration of a sweep.
struct ReportPoint {
  std::string label;
  double tokens_per_s = 0;
  double peak_memory_gib = 0;
  int gpus = 0;
  bool feasible = true;
};

// Throughput per configuration (sorted), throughput vs peak memory with the
// Pareto front highlighted, and the front as a table.
std::string sweep_html_report(const std::string& title, const std::vector<ReportPoint>& points);

// Indices of the feasible points that no other feasible point dominates (as
// much throughput or more at as little peak memory or less, and better in one),
// by peak memory ascending; equal points are all kept.
std::vector<std::size_t> pareto_front(const std::vector<ReportPoint>& points);

// Text and attribute values escaped for HTML (& < > " ').
std::string html_escape(std::string_view text);

}  // namespace trainsim
