#include "tools/frontend/report_html.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "models/memory_model.hpp"
#include "tools/frontend/trace.hpp"

namespace trainsim {

namespace {

constexpr double kGiB = 1073741824.0;
constexpr int kLeft = 150;    // label column of the per-stage charts, px
constexpr int kPlotW = 1000;  // plot width of the per-stage charts, px
constexpr int kRight = 24;
constexpr std::size_t kLanes = 1 + kNumCommClasses;  // compute, then one lane per CommClass

template <class... A>
std::string fmt(const char* f, A... a) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

std::string esc(std::string_view s) { return html_escape(s); }

double finite_or_zero(double v) { return std::isfinite(v) ? v : 0.0; }

// 1234567.8 -> "1,234,568".
std::string grouped(double v) {
  v = finite_or_zero(v);
  std::string digits = fmt("%.0f", std::fabs(v));
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 && digits != "0" ? "-" : "") + out;
}

std::string duration_text(double s) {
  if (s >= 1) return fmt("%.3f s", s);
  if (s >= 1e-3) return fmt("%.3f ms", s * 1e3);
  return fmt("%.1f \xC2\xB5s", s * 1e6);
}

// Shortens to at most `max` characters (UTF-8 aware), marking the cut with an ellipsis.
std::string truncated(const std::string& s, std::size_t max) {
  if (s.size() <= max) return s;
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "\xE2\x80\xA6";
}

// Axis ticks at 1, 2 or 5 times a power of ten, about `target` of them over [0, range].
double nice_step(double range, int target) {
  if (!(range > 0) || !std::isfinite(range)) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * mag >= raw * (1 - 1e-9)) return m * mag;
  }
  return 10 * mag;
}

std::string tick_label(double v, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(-std::floor(std::log10(step) + 1e-9));
  return fmt("%.*f", decimals, v);
}

const char* lane_name(std::size_t lane) { return lane == 0 ? "compute" : to_string(static_cast<CommClass>(lane - 1)); }

// CSS for both reports; category classes k0..k6 follow Interval::category.
constexpr const char* kStyle = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1240px;
color:#222;padding:0 16px;line-height:1.4}
h1{font-size:1.6em;margin:0 0 4px}h2{font-size:1.2em;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#555;margin:0 0 12px}.note{color:#666;font-size:.85em}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:130px}
.card .v{font-size:1.35em;font-weight:600}.card .l{color:#666;font-size:.8em}
.ok{background:#e8f5e9;border:1px solid #a5d6a7;padding:6px 12px;border-radius:6px;margin-top:12px}
.bad{background:#ffebee;border:1px solid #ef9a9a;padding:6px 12px;border-radius:6px;margin-top:12px}
.bad pre{white-space:pre-wrap;margin:4px 0}
table{border-collapse:collapse;font-size:.85em;margin:8px 0}th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f5f5f5}td.t,th.t{text-align:left}tr.oom td{background:#ffebee}tr.front td{background:#fff3e0}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:.85em;margin:4px 0}.sw{display:inline-block;width:12px;height:12px;
vertical-align:-2px;margin-right:4px;border:1px solid #0003}
svg{display:block;max-width:100%;height:auto}svg text{font-size:10px;fill:#333}svg .rl{font-size:11px;font-weight:600}
svg .ax{stroke:#999;stroke-width:1}svg .grid{stroke:#e3e3e3;stroke-width:1}svg .bg{fill:#f3f3f3}
svg .cap{stroke:#000;stroke-width:1.5;stroke-dasharray:4 2}svg .front{fill:none;stroke:#f28e2b;stroke-width:1.5}
.k0{fill:#4e79a7;background:#4e79a7}.k1{fill:#f28e2b;background:#f28e2b}.k2{fill:#edc948;background:#edc948}
.k3{fill:#b07aa1;background:#b07aa1}.k4{fill:#59a14f;background:#59a14f}.k5{fill:#e15759;background:#e15759}
.k6{fill:#bab0ac;background:#bab0ac}.kb{fill:#ececec;background:#ececec}
.m0{fill:#4e79a7;background:#4e79a7}.m1{fill:#f28e2b;background:#f28e2b}.m2{fill:#e15759;background:#e15759}
.m3{fill:#59a14f;background:#59a14f}.m4{fill:#b07aa1;background:#b07aa1}
.pt{fill:#4e79a7}.pf{fill:#f28e2b;stroke:#8a4b00;stroke-width:1}.pi{fill:none;stroke:#999;stroke-width:1.5}
.bar{fill:#4e79a7}.barf{fill:#f28e2b}.bari{fill:#ccc;background:#ccc}
)";

void page_begin(std::string& h, const std::string& title) {
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>" + esc(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
}

void page_end(std::string& h) { h += "<p class=\"note\">Generated by trainsim.</p>\n</body>\n</html>\n"; }

void legend_item(std::string& h, const char* css, const std::string& text) {
  h += "<span><span class=\"sw " + std::string(css) + "\"></span>" + esc(text) + "</span>";
}

void card(std::string& h, const std::string& value, const std::string& label) {
  h += "<div class=\"card\"><div class=\"v\">" + esc(value) + "</div><div class=\"l\">" + esc(label) + "</div></div>";
}

// Vertical grid lines and tick labels for a time axis of `span_s` seconds over the plot.
struct TimeAxis {
  double span_s = 1;  // seconds mapped to kPlotW
  double unit = 1;    // seconds per displayed unit
  const char* unit_name = "s";
  double step = 1;  // in displayed units

  explicit TimeAxis(double span) : span_s(span > 0 ? span : 1) {
    if (span_s < 2) {
      unit = 1e-3;
      unit_name = "ms";
    }
    step = nice_step(span_s / unit, 8);
  }
  double x(double seconds) const { return kLeft + seconds / span_s * kPlotW; }

  void draw(std::string& h, int top, int bottom) const {
    const double end = span_s / unit;
    for (int i = 0;; ++i) {
      const double v = i * step;
      if (v > end * (1 + 1e-9)) break;
      const double px = x(v * unit);
      h += fmt("<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>", px, top, px, bottom);
      h += fmt("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", px, bottom + 13) + tick_label(v, step) + "</text>";
    }
    h += fmt("<line class=\"ax\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", kLeft, bottom, kLeft + kPlotW, bottom);
    h += fmt("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", kLeft + kPlotW, bottom + 26) + "time (" + unit_name +
         ")</text>\n";
  }
};

// ---- run report ------------------------------------------------------------------------------------------------

void summary_section(std::string& h, const JobReport& r) {
  h += "<h2>Summary</h2>\n<div class=\"cards\">";
  if (r.simulated) {
    card(h, duration_text(r.iteration_time_s), "iteration time");
    card(h, grouped(r.tokens_per_s), "tokens/s");
    card(h, fmt("%.2f", r.samples_per_s), "samples/s");
    card(h, fmt("%.1f", r.tflops_per_gpu), "TFLOP/s per GPU");
    card(h, fmt("%.1f%%", 100 * r.mfu), "MFU");
    card(h, fmt("%.1f%%", 100 * r.hfu), "HFU");
  }
  card(h, fmt("%.1f GiB", r.peak_memory_gib), "peak memory per GPU");
  card(h, std::to_string(r.gpus), "GPUs");
  h += "</div>\n";
  if (r.feasible) {
    h += "<div class=\"ok\"><b>Feasible</b>: fits in memory and completes.</div>\n";
  } else {
    h += std::string("<div class=\"bad\"><b>Infeasible</b>") +
         (r.simulated ? "" : " (refused before simulation: no times)") + "\n<pre>";
    for (const std::string& p : r.problems) h += esc(p) + "\n";
    h += "</pre></div>\n";
  }
  h += "<p class=\"note\">" + std::to_string(r.simulated_ranks) + " simulated ranks, " + std::to_string(r.events) +
       " events.</p>\n";
  for (const SlowestGpuReport& g : r.slowest_gpus) {
    h += "<p class=\"note\">Every " + esc(g.gpu) + " waits for the expected slowest of the " + std::to_string(g.gpus) +
         ": its kernels take x" + fmt("%.3f", g.factor) + " the median GPU's time (speed spread " +
         fmt("%.1f%%", 100 * g.spread) + ", docs/calibration.md).</p>\n";
  }
}

void config_section(std::string& h, const Scenario& s) {
  const TransformerSpec& m = s.model;
  const ParallelSpec& p = s.parallel;
  const TrainingSpec& t = s.training;
  auto row = [&h](const std::string& k, const std::string& v) {
    h += "<tr><th class=\"t\">" + esc(k) + "</th><td class=\"t\">" + esc(v) + "</td></tr>\n";
  };
  h += "<h2>Configuration</h2>\n<table>\n";
  if (s.workload.kind != WorkloadKind::Transformer) {
    // GNN, DLRM or trace (docs/workloads.md): its own name; ranks are data-parallel (a trace: TP x DP).
    row("workload", make_workload(s.workload)->name());
    row("parallelism", "TP " + std::to_string(p.tp) + ", DP " + std::to_string(p.dp));
  } else {
    row("model", m.name + (m.family.empty() ? "" : " (" + m.family + ")") + ", " + fmt("%.2f", m.total_params() / 1e9) +
                     " B parameters");
    row("shape", std::to_string(m.layers) + " layers, hidden " + std::to_string(m.hidden) + ", " +
                     std::to_string(m.heads) + " heads (" + std::to_string(m.kv_heads) + " KV), FFN " +
                     std::to_string(m.ffn_hidden) + ", vocab " + std::to_string(m.vocab));
    row("training", "sequence " + std::to_string(t.seq_len) + ", " + to_string(t.precision) + ", " + t.optimizer +
                        ", global batch " + std::to_string(p.global_batch) + ", micro-batch " +
                        std::to_string(p.micro_batch) + " (" +
                        (p.uneven_shares() ? std::string("uneven data-parallel shares")
                                           : std::to_string(p.micro_batches()) + " per iteration") +
                        ")");
    row("parallelism", "TP " + std::to_string(p.tp) + ", PP " + std::to_string(p.pp) + ", DP " + std::to_string(p.dp) +
                           ", CP " + std::to_string(p.cp) + ", EP " + std::to_string(p.ep) + ", VPP " +
                           std::to_string(p.vpp) + "; schedule " + to_string(p.schedule) + ", ZeRO " +
                           std::to_string(p.zero) + ", recompute " + to_string(p.recompute) +
                           (p.sequence_parallel ? ", sequence parallel" : "") + (p.dp_overlap ? ", DP overlap" : "") +
                           (p.tp_comm_overlap ? ", TP comm overlap" : ""));
    if (m.moe.enabled()) {
      const MoeSpec& e = m.moe;
      row("experts", std::to_string(e.experts) + " routed (top-" + std::to_string(e.top_k) + ", FFN " +
                         std::to_string(e.expert_ffn) + "), " + std::to_string(e.shared_experts) + " shared, first " +
                         std::to_string(e.dense_layers) + " layers dense, " +
                         (e.capacity_factor > 0 ? "capacity factor " + fmt("%.2f", e.capacity_factor) : "dropless") +
                         ", routing " + to_string(t.routing.distribution) + "; EP " + std::to_string(p.ep) +
                         ", expert TP " + std::to_string(p.etp > 0 ? p.etp : p.tp));
    }
  }
  std::string cluster = s.cluster.name.empty() ? std::string() : s.cluster.name + ": ";
  for (std::size_t i = 0; i < s.cluster.groups.size(); ++i) {
    const NodeGroup& g = s.cluster.groups[i];
    cluster += (i ? " + " : "") + std::to_string(g.count) + " x " + g.node.name + " (" +
               std::to_string(g.node.gpus_per_node) + " x " + g.node.gpu.name + ")";
  }
  row("cluster", cluster);
  h += "</table>\n";
}

struct Bar {
  std::int64_t start = 0, end = 0;
  std::uint8_t category = 0;
  std::uint32_t task = 0;
  std::uint32_t count = 1;  // intervals it stands for; 0: the dominant category of a time bucket
};
using Lanes = std::array<std::vector<Bar>, kLanes>;

std::size_t count_bars(const std::vector<Lanes>& rows) {
  std::size_t n = 0;
  for (const Lanes& row : rows) {
    for (const auto& lane : row) n += lane.size();
  }
  return n;
}

// Joins consecutive bars of one category that touch or are less than `gap` ns apart.
void merge_lane(std::vector<Bar>& lane, std::int64_t gap) {
  std::vector<Bar> out;
  out.reserve(lane.size());
  for (const Bar& b : lane) {
    if (!out.empty() && out.back().category == b.category && b.start <= out.back().end + gap) {
      out.back().end = std::max(out.back().end, b.end);
      out.back().count += b.count;
      if (b.count == 0) out.back().count = 0;
    } else {
      out.push_back(b);
    }
  }
  lane = std::move(out);
}

// Replaces a lane by `n` equal time buckets, each drawn in the category that
// covers most of it, or left empty where nothing covers more.
void bucket_lane(std::vector<Bar>& lane, std::int64_t span, std::int64_t n) {
  if (lane.empty()) return;
  std::vector<std::array<std::int64_t, kWaitCategory + 1>> cover(static_cast<std::size_t>(n));
  auto edge = [&](std::int64_t k) { return span * k / n; };
  for (const Bar& b : lane) {
    const std::int64_t first = std::clamp<std::int64_t>(b.start * n / span, 0, n - 1);
    const std::int64_t last = std::clamp<std::int64_t>((b.end - 1) * n / span, first, n - 1);
    for (std::int64_t k = first; k <= last; ++k) {
      const std::int64_t part = std::min(b.end, edge(k + 1)) - std::max(b.start, edge(k));
      if (part > 0) cover[static_cast<std::size_t>(k)][b.category] += part;
    }
  }
  std::vector<Bar> out;
  for (std::int64_t k = 0; k < n; ++k) {
    const auto& c = cover[static_cast<std::size_t>(k)];
    const auto best = std::max_element(c.begin(), c.end());
    std::int64_t covered = 0;
    for (std::int64_t v : c) covered += v;
    const std::int64_t empty = std::max<std::int64_t>(edge(k + 1) - edge(k) - covered, 0);
    if (*best <= 0 || *best < empty) continue;
    Bar b;
    b.start = edge(k);
    b.end = edge(k + 1);
    b.category = static_cast<std::uint8_t>(best - c.begin());
    b.count = 0;
    out.push_back(b);
  }
  lane = std::move(out);
  merge_lane(lane, 0);
}

void timeline_section(std::string& h, const JobRun& run, std::size_t max_rects) {
  const TrainingPlan& plan = run.plan;
  const SimulationResult& res = run.result;
  const SimulationSetup& setup = plan.setup;
  const std::size_t stages = plan.recorded_rank_of_stage.size();
  std::int64_t span = res.makespan.count_ns();

  std::vector<Lanes> rows(stages);
  std::vector<int> rank_of_row(stages, -1);
  for (std::size_t st = 0; st < stages; ++st) {
    const int rank = plan.recorded_rank_of_stage[st];
    rank_of_row[st] = rank;
    const ProgramTemplate& prog = setup.programs.at(setup.ranks.at(static_cast<std::size_t>(rank)).program);
    for (const RankTimeline& tl : res.timelines) {
      if (static_cast<int>(tl.rank) != rank) continue;
      for (const Interval& iv : tl.intervals) {
        const Task& task = prog.tasks.at(iv.task);
        std::size_t lane = iv.category;
        if (iv.category == kWaitCategory) lane = 1 + static_cast<std::size_t>(task.comm_class);
        if (lane >= kLanes) continue;
        rows[st][lane].push_back(Bar{iv.start.count_ns(), iv.end.count_ns(), iv.category, iv.task, 1});
        span = std::max(span, iv.end.count_ns());
      }
    }
    for (auto& lane : rows[st]) {
      std::sort(lane.begin(), lane.end(), [](const Bar& a, const Bar& b) {
        if (a.start != b.start) return a.start < b.start;
        if (a.end != b.end) return a.end < b.end;
        if (a.category != b.category) return a.category < b.category;
        return a.task < b.task;
      });
    }
  }
  span = std::max<std::int64_t>(span, 1);

  std::array<bool, kLanes> used{};
  std::size_t used_cells = 0;  // non-empty (row, lane) pairs
  for (const Lanes& row : rows) {
    for (std::size_t l = 0; l < kLanes; ++l) {
      if (!row[l].empty()) {
        used[l] = true;
        ++used_cells;
      }
    }
  }
  used[0] = true;
  const std::size_t intervals = count_bars(rows);
  std::string note;
  std::int64_t buckets = 0;
  max_rects = std::max<std::size_t>(max_rects, 1);
  if (intervals > max_rects) {
    // Gaps under half a pixel do not show; beyond that, merging would hide structure: bucket instead.
    const std::int64_t half_px = span / (2 * kPlotW);
    for (std::int64_t gap : {std::int64_t{0}, half_px}) {
      for (Lanes& row : rows) {
        for (auto& lane : row) merge_lane(lane, gap);
      }
      if (count_bars(rows) <= max_rects) break;
    }
    if (count_bars(rows) > max_rects) {
      const auto n = static_cast<std::int64_t>(
          std::clamp<std::size_t>(max_rects / std::max<std::size_t>(used_cells, 1), 1, kPlotW));
      for (Lanes& row : rows) {
        for (auto& lane : row) bucket_lane(lane, span, n);
      }
      buckets = n;
    }
    note = grouped(static_cast<double>(intervals)) + " intervals drawn as " +
           grouped(static_cast<double>(count_bars(rows))) +
           " rectangles: neighbouring intervals of the same kind are merged";
    note += buckets > 0
                ? ", and each lane shows what fills most of every 1/" + std::to_string(buckets) + " of the iteration."
                : ".";
  }

  std::size_t lanes_shown = 0;
  for (bool u : used) lanes_shown += u ? 1 : 0;
  constexpr int kLaneH = 12, kRowGap = 10, kTop = 8, kAxisH = 34;
  const int row_h = static_cast<int>(lanes_shown) * kLaneH;
  const int bottom = kTop + static_cast<int>(stages) * (row_h + kRowGap);
  const TimeAxis axis(static_cast<double>(span) * 1e-9);

  h += "<h2>Pipeline timeline</h2>\n<p class=\"note\">One recorded rank per pipeline stage; lanes group the "
       "streams by kind (compute, then the communication of each parallelism; waits at a collective are drawn in "
       "grey). Grey background is time with nothing running. Hover a rectangle for details.</p>\n";
  h += "<div class=\"legend\">";
  for (std::uint8_t c = 0; c <= kWaitCategory; ++c) {
    legend_item(h, ("k" + std::to_string(c)).c_str(), interval_category_name(c));
  }
  h += "</div>\n";
  if (!note.empty()) h += "<p class=\"note\">" + esc(note) + "</p>\n";
  h +=
      fmt("<svg class=\"chart timeline\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
          "aria-label=\"pipeline timeline\">\n",
          kLeft + kPlotW + kRight, bottom + kAxisH, kLeft + kPlotW + kRight, bottom + kAxisH);
  axis.draw(h, kTop - 4, bottom);
  const double scale = static_cast<double>(kPlotW) / static_cast<double>(span);
  for (std::size_t st = 0; st < stages; ++st) {
    const int y0 = kTop + static_cast<int>(st) * (row_h + kRowGap);
    const RankProgram& rp = setup.ranks.at(static_cast<std::size_t>(rank_of_row[st]));
    const ProgramTemplate& prog = setup.programs.at(rp.program);
    h += fmt("<g class=\"stage-row\" id=\"timeline-stage-%d\">", static_cast<int>(st));
    h += fmt("<text class=\"rl\" x=\"6\" y=\"%d\">stage %d<title>", y0 + 11, static_cast<int>(st)) + esc(rp.name) +
         "</title></text>";
    h += fmt("<text x=\"6\" y=\"%d\">rank %d</text>", y0 + 23, rank_of_row[st]);
    h += fmt("<rect class=\"bg\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n", kLeft, y0, kPlotW, row_h);
    int ly = y0;
    for (std::size_t l = 0; l < kLanes; ++l) {
      if (!used[l]) continue;
      h += fmt("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>", kLeft - 4, ly + 9, lane_name(l));
      for (const Bar& b : rows[st][l]) {
        const double x = kLeft + static_cast<double>(b.start) * scale;
        const double w = std::max(static_cast<double>(b.end - b.start) * scale, 0.2);
        const double from = static_cast<double>(b.start) * 1e-9 / axis.unit;
        const double to = static_cast<double>(b.end) * 1e-9 / axis.unit;
        std::string title;
        if (b.count == 1) {
          const Task& task = prog.tasks.at(b.task);
          title = std::string(prog.labels.at(task.label)) + " (" + interval_category_name(b.category);
          if (task.microbatch >= 0) title += ", micro-batch " + std::to_string(task.microbatch);
          title += ")";
        } else if (b.count == 0) {
          title = std::string("mostly ") + interval_category_name(b.category);
        } else {
          title = std::string(interval_category_name(b.category)) + ", " + std::to_string(b.count) + " intervals";
        }
        title += fmt(": %.3f", from) + fmt("-%.3f ", to) + axis.unit_name;
        h += fmt("<rect class=\"k%d\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\"><title>",
                 static_cast<int>(b.category), x, ly + 1, w, kLaneH - 2) +
             esc(title) + "</title></rect>\n";
      }
      ly += kLaneH;
    }
    h += "</g>\n";
  }
  h += "</svg>\n";
}

void breakdown_section(std::string& h, const JobReport& r) {
  const double span = r.iteration_time_s > 0 ? r.iteration_time_s : 1;
  const TimeAxis axis(span);
  std::array<bool, kNumCommClasses> comm_used{};
  for (const StageReport& st : r.per_stage) {
    for (std::size_t c = 0; c < kNumCommClasses; ++c) comm_used[c] = comm_used[c] || st.time.exposed_comm_s[c] > 0;
  }
  h += "<h2>Time breakdown per stage</h2>\n<p class=\"note\">Where each stage's iteration goes: compute, "
       "communication not hidden behind compute, waiting at collectives (idle) and pipeline bubble.</p>\n";
  h += "<div class=\"legend\">";
  legend_item(h, "k0", "compute");
  for (std::size_t c = 0; c < kNumCommClasses; ++c) {
    legend_item(h, ("k" + std::to_string(c + 1)).c_str(),
                std::string("exposed ") + to_string(static_cast<CommClass>(c)));
  }
  legend_item(h, "k6", "idle (waiting)");
  legend_item(h, "kb", "pipeline bubble");
  h += "</div>\n";

  constexpr int kBarH = 18, kGap = 8, kTop = 6, kAxisH = 34;
  const int n = static_cast<int>(r.per_stage.size());
  const int bottom = kTop + n * (kBarH + kGap);
  h +=
      fmt("<svg class=\"chart breakdown\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
          "aria-label=\"time breakdown per stage\">\n",
          kLeft + kPlotW + kRight, bottom + kAxisH, kLeft + kPlotW + kRight, bottom + kAxisH);
  axis.draw(h, kTop - 2, bottom);
  for (int i = 0; i < n; ++i) {
    const StageReport& st = r.per_stage[static_cast<std::size_t>(i)];
    const int y = kTop + i * (kBarH + kGap);
    h += fmt("<g class=\"bd-row\"><text class=\"rl\" x=\"6\" y=\"%d\">stage %d</text>", y + 13, st.stage);
    double t = 0;
    auto segment = [&](const char* css, const std::string& name, double seconds) {
      if (!(seconds > 0)) return;
      h += fmt("<rect class=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\"><title>", css, axis.x(t), y,
               seconds / span * kPlotW, kBarH) +
           esc(name + ": " + duration_text(seconds) + fmt(" (%.1f%%)", 100 * seconds / span)) + "</title></rect>";
      t += seconds;
    };
    segment("k0", "compute", st.time.compute_s);
    for (std::size_t c = 0; c < kNumCommClasses; ++c) {
      segment(("k" + std::to_string(c + 1)).c_str(), std::string("exposed ") + to_string(static_cast<CommClass>(c)),
              st.time.exposed_comm_s[c]);
    }
    segment("k6", "idle", st.time.idle_s);
    segment("kb", "pipeline bubble", st.time.bubble_s);
    h += "</g>\n";
  }
  h += "</svg>\n";

  h += "<table>\n<tr><th>stage</th><th>layers</th><th>compute</th>";
  for (std::size_t c = 0; c < kNumCommClasses; ++c) {
    if (comm_used[c]) h += std::string("<th>exposed ") + to_string(static_cast<CommClass>(c)) + "</th>";
  }
  h += "<th>idle</th><th>bubble</th></tr>\n";
  auto cell = [&](double seconds) {
    h += "<td>" + esc(duration_text(seconds)) + fmt(" (%.1f%%)", 100 * seconds / span) + "</td>";
  };
  for (const StageReport& st : r.per_stage) {
    h += fmt("<tr><td>%d</td><td>%d</td>", st.stage, st.layers);
    cell(st.time.compute_s);
    for (std::size_t c = 0; c < kNumCommClasses; ++c) {
      if (comm_used[c]) cell(st.time.exposed_comm_s[c]);
    }
    cell(st.time.idle_s);
    cell(st.time.bubble_s);
    h += "</tr>\n";
  }
  h += "</table>\n";
}

void memory_section(std::string& h, const JobReport& r) {
  static constexpr std::array<const char*, 5> kParts = {"weights", "gradients", "optimizer", "activations", "buffers"};
  auto parts = [](const MemoryBreakdown& m) {
    return std::array<double, 5>{m.weights, m.gradients, m.optimizer, m.activations, m.buffers};
  };
  double top = 0;
  for (const StageReport& st : r.per_stage) top = std::max({top, st.memory.total(), st.memory_capacity});
  top = (top > 0 ? top : kGiB) / kGiB * 1.04;
  const double step = nice_step(top, 8);

  h += "<h2>Memory per stage</h2>\n<p class=\"note\">Peak memory of one GPU of each stage; the dashed line is the "
       "usable capacity.</p>\n<div class=\"legend\">";
  for (std::size_t i = 0; i < kParts.size(); ++i) legend_item(h, ("m" + std::to_string(i)).c_str(), kParts[i]);
  h += "</div>\n";
  constexpr int kBarH = 18, kGap = 10, kTop = 6, kAxisH = 34;
  const int n = static_cast<int>(r.per_stage.size());
  const int bottom = kTop + n * (kBarH + kGap);
  auto xof = [&](double gib) { return kLeft + gib / top * kPlotW; };
  h +=
      fmt("<svg class=\"chart memory\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
          "aria-label=\"memory per stage\">\n",
          kLeft + kPlotW + kRight, bottom + kAxisH, kLeft + kPlotW + kRight, bottom + kAxisH);
  for (int i = 0;; ++i) {
    const double v = i * step;
    if (v > top * (1 + 1e-9)) break;
    h += fmt("<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>", xof(v), kTop - 2, xof(v), bottom);
    h +=
        fmt("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", xof(v), bottom + 13) + tick_label(v, step) + "</text>";
  }
  h += fmt("<line class=\"ax\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", kLeft, bottom, kLeft + kPlotW, bottom);
  h += fmt("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">memory (GiB)</text>\n", kLeft + kPlotW, bottom + 26);
  for (int i = 0; i < n; ++i) {
    const StageReport& st = r.per_stage[static_cast<std::size_t>(i)];
    const int y = kTop + i * (kBarH + kGap);
    h += fmt("<g class=\"mem-row\"><text class=\"rl\" x=\"6\" y=\"%d\">stage %d</text>", y + 13, st.stage);
    double at = 0;
    const auto values = parts(st.memory);
    for (std::size_t p = 0; p < values.size(); ++p) {
      const double gib = values[p] / kGiB;
      if (!(gib > 0)) continue;
      h += fmt("<rect class=\"m%d\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\"><title>", static_cast<int>(p),
               xof(at), y, gib / top * kPlotW, kBarH) +
           kParts[p] + fmt(": %.2f GiB", gib) + "</title></rect>";
      at += gib;
    }
    const double cap = st.memory_capacity / kGiB;
    h += fmt("<line class=\"cap\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"><title>capacity %.1f GiB</title></line>",
             xof(cap), y - 3, xof(cap), y + kBarH + 3, cap);
    h += "</g>\n";
  }
  h += "</svg>\n";

  h += "<table>\n<tr><th>stage</th>";
  for (const char* p : kParts) h += std::string("<th>") + p + "</th>";
  h += "<th>total</th><th>capacity</th><th>headroom</th></tr>\n";
  for (const StageReport& st : r.per_stage) {
    const bool oom = st.memory.total() > st.memory_capacity;
    h += std::string(oom ? "<tr class=\"oom\">" : "<tr>") + fmt("<td>%d</td>", st.stage);
    for (double v : parts(st.memory)) h += fmt("<td>%.2f</td>", v / kGiB);
    h += fmt("<td>%.2f</td><td>%.2f</td><td>%.2f</td></tr>\n", st.memory.total() / kGiB, st.memory_capacity / kGiB,
             (st.memory_capacity - st.memory.total()) / kGiB);
  }
  h += "</table>\n<p class=\"note\">GiB per GPU.</p>\n";
}

// Mixture-of-experts: routed tokens each expert-parallel rank processes per
// micro-batch and MoE layer, one bar per rank; the busiest sets the pace.
void wan_section(std::string& h, const JobReport& r) {
  if (r.wan_links.empty()) return;
  h += "<h2>WAN utilisation</h2>\n<p class=\"note\">What the WAN between each pair of sites carried in one iteration "
       "(all its parallel links, both directions): utilisation is the bytes over the links' capacity for the "
       "iteration; busy is the share of the iteration the busiest link direction carried a flow (flow fidelity "
       "only).</p>\n<table>\n<tr><th class=\"t\">sites</th><th>links</th><th>GB/iteration</th><th>utilisation</th>"
       "<th>busy</th><th class=\"t\">communicators</th></tr>\n";
  for (const WanLinkLoad& w : r.wan_links) {
    std::string kinds;
    for (const std::string& k : w.kinds) kinds += (kinds.empty() ? "" : ", ") + k;
    h += "<tr><td class=\"t\">" + std::to_string(w.site_a) + " - " + std::to_string(w.site_b) + "</td><td>" +
         std::to_string(w.links) + "</td><td>" + fmt("%.3f", w.bytes / 1e9) + "</td><td>" +
         fmt("%.1f%%", 100 * w.utilization) + "</td><td>" +
         (w.busy_fraction >= 0 ? fmt("%.1f%%", 100 * w.busy_fraction) : std::string("-")) + "</td><td class=\"t\">" +
         esc(kinds) + "</td></tr>\n";
  }
  h += "</table>\n";
}

void expert_load_section(std::string& h, const JobReport& r) {
  const std::vector<double>& load = r.expert_rank_tokens;
  if (load.empty()) return;
  const double top = *std::max_element(load.begin(), load.end());
  double mean = 0;
  for (double t : load) mean += t;
  mean /= static_cast<double>(load.size());
  h += "<h2>Expert load per EP rank</h2>\n<p class=\"note\">Routed tokens each expert-parallel rank processes per "
       "micro-batch and MoE layer (after capacity drops). Every all-to-all waits for the busiest rank, so its "
       "count sets the time of every rank's expert GEMMs and transfers.</p>\n";
  constexpr int kH = 160, kTop = 8, kAxisH = 30;
  const double scale = top > 0 ? top * 1.05 : 1.0;
  const double w = static_cast<double>(kPlotW) / static_cast<double>(load.size());
  h +=
      fmt("<svg class=\"chart experts\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
          "aria-label=\"expert load per rank\">\n",
          kLeft + kPlotW + kRight, kTop + kH + kAxisH, kLeft + kPlotW + kRight, kTop + kH + kAxisH);
  h += fmt("<text class=\"rl\" x=\"6\" y=\"%d\">%.0f tokens</text>", kTop + 10, scale);
  for (std::size_t i = 0; i < load.size(); ++i) {
    const double bh = load[i] / scale * kH;
    h +=
        fmt("<rect class=\"%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"><title>EP rank %d: %.0f "
            "tokens</title></rect>",
            load[i] == top ? "m3" : "m0", kLeft + i * w, kTop + kH - bh, std::max(w - 1, 0.5), bh, static_cast<int>(i),
            load[i]);
  }
  h += fmt("<line class=\"ax\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", kLeft, kTop + kH, kLeft + kPlotW, kTop + kH);
  h += fmt("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">EP rank (0 .. %d)</text>\n", kLeft + kPlotW, kTop + kH + 20,
           static_cast<int>(load.size()) - 1);
  h += "</svg>\n<table>\n<tr><th>EP ranks</th><th>mean tokens</th><th>busiest</th><th>busiest / mean</th>"
       "<th>dropped</th></tr>\n";
  h += fmt("<tr><td>%d</td><td>%.0f</td><td>%.0f</td><td>%.3f</td><td>%.1f%%</td></tr>\n</table>\n",
           static_cast<int>(load.size()), mean, top, mean > 0 ? top / mean : 0.0, 100 * r.expert_dropped_fraction);
}

// ---- sweep report ----------------------------------------------------------------------------------------------

// Tokens/s axis in tokens, thousands or millions.
struct Scale {
  double div = 1;
  const char* name = "tokens/s";
};
Scale throughput_scale(double max) {
  if (max >= 1e6) return {1e6, "million tokens/s"};
  if (max >= 1e4) return {1e3, "thousand tokens/s"};
  return {};
}

void sweep_bars(std::string& h, const std::vector<ReportPoint>& pts, const std::vector<std::size_t>& order,
                const std::vector<bool>& on_front) {
  double max_tps = 0;
  std::size_t longest = 1;
  for (const ReportPoint& p : pts) {
    if (p.feasible) max_tps = std::max(max_tps, finite_or_zero(p.tokens_per_s));
    longest = std::max(longest, std::min<std::size_t>(p.label.size(), 48));
  }
  if (!(max_tps > 0)) max_tps = 1;
  const int left = std::clamp(static_cast<int>(longest) * 6 + 16, 90, 320);
  constexpr int kW = 640, kValueW = 170, kBarH = 14, kGap = 4, kTop = 4;
  const int height = kTop + static_cast<int>(order.size()) * (kBarH + kGap) + 4;
  h +=
      fmt("<svg class=\"chart bars\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
          "aria-label=\"throughput per configuration\">\n",
          left + kW + kValueW, height, left + kW + kValueW, height);
  for (std::size_t row = 0; row < order.size(); ++row) {
    const std::size_t i = order[row];
    const ReportPoint& p = pts[i];
    const int y = kTop + static_cast<int>(row) * (kBarH + kGap);
    const double tps = finite_or_zero(p.tokens_per_s);
    const double w = p.feasible ? std::max(tps / max_tps * kW, 0.5) : kW * 0.02;
    const char* css = !p.feasible ? "bari" : on_front[i] ? "barf" : "bar";
    h += fmt("<g class=\"bar-row\"><text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 6, y + 11) +
         esc(truncated(p.label, 48)) + "<title>" + esc(p.label) + "</title></text>";
    h += fmt("<rect class=\"%s\" x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\"><title>", css, left, y, w, kBarH) +
         esc(p.label) + "</title></rect>";
    const std::string value = p.feasible ? grouped(tps) + " tokens/s" : "infeasible";
    h += fmt("<text x=\"%.1f\" y=\"%d\">", left + w + 4, y + 11) + esc(value) + "</text></g>\n";
  }
  h += "</svg>\n";
}

void sweep_scatter(std::string& h, const std::vector<ReportPoint>& pts, const std::vector<std::size_t>& front) {
  double max_mem = 0, max_tps = 0;
  for (const ReportPoint& p : pts) {
    max_mem = std::max(max_mem, finite_or_zero(p.peak_memory_gib));
    max_tps = std::max(max_tps, finite_or_zero(p.tokens_per_s));
  }
  const Scale ys = throughput_scale(max_tps);
  const double xr = (max_mem > 0 ? max_mem : 1) * 1.08;
  const double yr = (max_tps > 0 ? max_tps / ys.div : 1) * 1.08;
  const double xstep = nice_step(xr, 8), ystep = nice_step(yr, 6);
  constexpr int kL = 80, kT = 12, kW = 760, kH = 420, kB = 46, kR = 200;
  auto px = [&](double mem) { return kL + finite_or_zero(mem) / xr * kW; };
  auto py = [&](double tps) { return kT + kH - finite_or_zero(tps) / ys.div / yr * kH; };
  h +=
      fmt("<svg class=\"chart scatter\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
          "aria-label=\"throughput versus peak memory\">\n",
          kL + kW + kR, kT + kH + kB, kL + kW + kR, kT + kH + kB);
  for (int i = 0;; ++i) {
    const double v = i * xstep;
    if (v > xr * (1 + 1e-9)) break;
    const double x = kL + v / xr * kW;
    h += fmt("<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>", x, kT, x, kT + kH);
    h += fmt("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", x, kT + kH + 14) + tick_label(v, xstep) + "</text>";
  }
  for (int i = 0;; ++i) {
    const double v = i * ystep;
    if (v > yr * (1 + 1e-9)) break;
    const double y = kT + kH - v / yr * kH;
    h += fmt("<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>", kL, y, kL + kW, y);
    h += fmt("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", kL - 6, y + 3) + tick_label(v, ystep) + "</text>";
  }
  h += fmt("<line class=\"ax\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", kL, kT + kH, kL + kW, kT + kH);
  h += fmt("<line class=\"ax\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", kL, kT, kL, kT + kH);
  h += fmt("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">peak memory per GPU (GiB)</text>", kL + kW, kT + kH + 34);
  h +=
      fmt("<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">", kT + kH / 2, kT + kH / 2) +
      esc(ys.name) + "</text>\n";
  if (!front.empty()) {
    // The staircase bounding the region the front dominates.
    std::string path = fmt("M%.1f %.1f", px(pts[front[0]].peak_memory_gib), py(pts[front[0]].tokens_per_s));
    for (std::size_t k = 1; k < front.size(); ++k) {
      const ReportPoint& p = pts[front[k]];
      path += fmt(" H%.1f", px(p.peak_memory_gib)) + fmt(" V%.1f", py(p.tokens_per_s));
    }
    h += "<path class=\"front\" d=\"" + path + "\"/>\n";
  }
  std::vector<bool> on_front(pts.size(), false);
  for (std::size_t i : front) on_front[i] = true;
  auto point = [&](std::size_t i) {
    const ReportPoint& p = pts[i];
    const std::string title = p.label + ": " + grouped(p.tokens_per_s) + " tokens/s, " +
                              fmt("%.1f GiB", finite_or_zero(p.peak_memory_gib)) + (p.feasible ? "" : " (infeasible)") +
                              (on_front[i] ? " (Pareto front)" : "");
    const char* css = !p.feasible ? "pi" : on_front[i] ? "pf" : "pt";
    h += fmt("<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"%d\"><title>", css, px(p.peak_memory_gib),
             py(p.tokens_per_s), on_front[i] ? 6 : 4) +
         esc(title) + "</title></circle>\n";
  };
  // Infeasible first, the front last, so the front is drawn on top.
  for (std::size_t i = 0; i < pts.size(); ++i) {
    if (!pts[i].feasible) point(i);
  }
  for (std::size_t i = 0; i < pts.size(); ++i) {
    if (pts[i].feasible && !on_front[i]) point(i);
  }
  for (std::size_t i : front) {
    point(i);
    h += fmt("<text x=\"%.1f\" y=\"%.1f\">", px(pts[i].peak_memory_gib) + 8, py(pts[i].tokens_per_s) - 6) +
         esc(truncated(pts[i].label, 28)) + "</text>\n";
  }
  h += "</svg>\n";
}

void point_row(std::string& h, const ReportPoint& p, bool front, bool with_status) {
  h += std::string(front ? "<tr class=\"front\">" : "<tr>") + "<td class=\"t\">" + esc(p.label) + "</td><td>" +
       grouped(p.tokens_per_s) + "</td>" + fmt("<td>%.1f</td>", finite_or_zero(p.peak_memory_gib)) +
       fmt("<td>%d</td>", p.gpus) + "<td>" + (p.gpus > 0 ? grouped(p.tokens_per_s / p.gpus) : std::string("-")) +
       "</td>";
  if (with_status) {
    h += std::string("<td class=\"t\">") + (p.feasible ? "yes" : "no") + "</td><td class=\"t\">" +
         (front ? "yes" : "") + "</td>";
  }
  h += "</tr>\n";
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string html_report(const Scenario& s, const JobRun& run, const HtmlReportOptions& options) {
  const JobReport& r = run.report;
  const std::string name = !r.scenario.empty() ? r.scenario : !s.name.empty() ? s.name : s.file;
  std::string h;
  page_begin(h, "trainsim: " + name);
  h += "<h1>" + esc(name) + "</h1>\n";
  std::string sub = std::to_string(r.gpus) + " GPUs";
  if (!s.description.empty()) sub = s.description + " (" + sub + ")";
  h += "<p class=\"sub\">" + esc(sub) + "</p>\n";
  summary_section(h, r);
  config_section(h, s);
  if (r.simulated) {
    timeline_section(h, run, options.max_timeline_rects);
    breakdown_section(h, r);
  }
  memory_section(h, r);
  expert_load_section(h, r);
  wan_section(h, r);
  page_end(h);
  return h;
}

std::vector<std::size_t> pareto_front(const std::vector<ReportPoint>& points) {
  std::vector<std::size_t> cand;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const ReportPoint& p = points[i];
    if (p.feasible && std::isfinite(p.tokens_per_s) && std::isfinite(p.peak_memory_gib)) cand.push_back(i);
  }
  std::sort(cand.begin(), cand.end(), [&](std::size_t a, std::size_t b) {
    const ReportPoint &pa = points[a], &pb = points[b];
    if (pa.peak_memory_gib != pb.peak_memory_gib) return pa.peak_memory_gib < pb.peak_memory_gib;
    if (pa.tokens_per_s != pb.tokens_per_s) return pa.tokens_per_s > pb.tokens_per_s;
    return a < b;
  });
  // Walk groups of equal memory; a group's best throughput is on the front iff it beats every smaller memory.
  std::vector<std::size_t> front;
  double best = -std::numeric_limits<double>::infinity();
  for (std::size_t g = 0; g < cand.size();) {
    std::size_t end = g;
    while (end < cand.size() && points[cand[end]].peak_memory_gib == points[cand[g]].peak_memory_gib) ++end;
    const double top = points[cand[g]].tokens_per_s;
    if (top > best) {
      for (std::size_t k = g; k < end && points[cand[k]].tokens_per_s == top; ++k) front.push_back(cand[k]);
      best = top;
    }
    g = end;
  }
  return front;
}

std::string sweep_html_report(const std::string& title, const std::vector<ReportPoint>& points) {
  const std::vector<std::size_t> front = pareto_front(points);
  std::vector<bool> on_front(points.size(), false);
  for (std::size_t i : front) on_front[i] = true;
  std::vector<std::size_t> order(points.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const ReportPoint &pa = points[a], &pb = points[b];
    if (pa.feasible != pb.feasible) return pa.feasible;
    const double ta = finite_or_zero(pa.tokens_per_s), tb = finite_or_zero(pb.tokens_per_s);
    if (ta != tb) return ta > tb;
    if (pa.label != pb.label) return pa.label < pb.label;
    return a < b;
  });
  std::size_t feasible = 0;
  for (const ReportPoint& p : points) feasible += p.feasible ? 1 : 0;

  std::string h;
  page_begin(h, title);
  h += "<h1>" + esc(title) + "</h1>\n";
  h += "<p class=\"sub\">" + std::to_string(points.size()) + " configurations, " + std::to_string(feasible) +
       " feasible, " + std::to_string(front.size()) + " on the Pareto front.</p>\n";
  if (points.empty()) {
    h += "<p>No configurations.</p>\n";
    page_end(h);
    return h;
  }
  if (feasible > 0) {
    const ReportPoint& best = points[order.front()];
    h += "<p>Highest throughput: <b>" + esc(best.label) + "</b>, " + grouped(best.tokens_per_s) + " tokens/s at " +
         fmt("%.1f", finite_or_zero(best.peak_memory_gib)) + " GiB per GPU.</p>\n";
  }

  h += "<h2>Throughput per configuration</h2>\n<div class=\"legend\">";
  legend_item(h, "k0", "feasible");
  legend_item(h, "k1", "on the Pareto front");
  legend_item(h, "bari", "infeasible");
  h += "</div>\n";
  sweep_bars(h, points, order, on_front);

  h += "<h2>Throughput vs peak memory</h2>\n<p class=\"note\">Orange: the Pareto front (no other feasible "
       "configuration has both more throughput and less memory). Hollow grey: infeasible.</p>\n";
  sweep_scatter(h, points, front);

  h += "<h2>Pareto front</h2>\n<table class=\"pareto\">\n<tr><th class=\"t\">configuration</th><th>tokens/s</th>"
       "<th>peak memory GiB</th><th>GPUs</th><th>tokens/s per GPU</th></tr>\n";
  for (std::size_t i : front) point_row(h, points[i], true, false);
  h += "</table>\n";

  h += "<h2>All configurations</h2>\n<table class=\"all\">\n<tr><th class=\"t\">configuration</th><th>tokens/s</th>"
       "<th>peak memory GiB</th><th>GPUs</th><th>tokens/s per GPU</th><th class=\"t\">feasible</th>"
       "<th class=\"t\">front</th></tr>\n";
  for (std::size_t i : order) point_row(h, points[i], on_front[i], true);
  h += "</table>\n";
  page_end(h);
  return h;
}

}  // namespace trainsim
