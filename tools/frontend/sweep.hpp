#pragma once
// Parameter sweeps over one base scenario (docs/sweeps.md): a sweep file names
// the base and either axes (cartesian product of "--set"-style overrides) or
// "search": "auto" (every valid parallel layout of the base model on the base
// cluster, with invalid, out-of-memory and dominated layouts pruned before any
// simulation). Points run on a thread pool; results are kept by point index,
// so the output does not depend on the thread count or on sharding.
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/layout_search.hpp"
#include "tools/frontend/catalog.hpp"
#include "tools/frontend/job.hpp"

namespace trainsim {

// One scenario key ("parallel.tp") and the values it takes.
struct SweepAxis {
  std::string key;
  std::vector<nlohmann::json> values;
};

// The lists an auto-search enumerates (models/layout_search.hpp).
using SearchSpace = LayoutSearchSpace;

// "verify": re-simulate the best `top` points of the first pass at another
// fidelity and rank them by that result.
struct SweepVerify {
  Fidelity fidelity = Fidelity::Flow;
  int top = 0;
};

struct SweepSpec {
  std::string file;  // the sweep file (messages)
  std::string name;
  std::string base_text;        // the base scenario's JSON text
  std::string base_file;        // its file name for messages (the sweep file when inline)
  std::string base_dir;         // for relative paths inside the base (calibration profiles)
  std::string base_pointer;     // "/base" when the base is inline in the sweep file, else ""
  std::vector<SweepAxis> axes;  // cartesian mode
  bool derive_dp = true;        // cartesian: dp = GPUs / (tp*pp*cp) unless an axis sets parallel.dp
  bool auto_search = false;
  // "search": "mixed-fleet": the plans of models/mixed_fleet_search.hpp (auto_search is set too).
  bool mixed_fleet = false;
  SearchSpace search_space;
  // "search_space.diloco": the "diloco" sections (null: none) every layout of
  // the auto-search is tried with (docs/cross-datacenter.md); empty: the base's.
  std::vector<nlohmann::json> search_diloco;
  int top_k = 10;
  std::string metric = "tokens_per_s";
  Fidelity fidelity = Fidelity::Analytical;  // every point (the CLI's --fidelity wins over the file)
  std::optional<SweepVerify> verify;
};

// One point: "key=value" overrides applied to the base (values as JSON).
struct SweepPoint {
  std::size_t index = 0;  // position in the full expansion (stable across shards)
  std::vector<std::pair<std::string, nlohmann::json>> overrides;
  std::vector<std::string> set_args() const;  // "parallel.tp=8", ... for load_scenario_text
};

struct SweepPlan {
  std::string id;                    // fingerprint of base + points (merge refuses to mix sweeps)
  std::vector<std::string> columns;  // override keys, one output column each
  std::vector<SweepPoint> points;    // every point of the sweep, by index
  // Auto-search bookkeeping (cartesian: grid = points.size(), invalid = points the loader rejects).
  std::size_t grid = 0;                      // combinations of the search-space lists
  std::size_t invalid = 0;                   // break a divisibility / placement / batch rule
  std::size_t redundant = 0;                 // same run as another point (zero with dp*cp = 1, sp with tp = 1)
  std::size_t pruned_oom = 0;                // the memory model says out of memory on some stage
  std::size_t pruned_dominated = 0;          // a cheaper recompute / ZeRO option of the same layout fits
  Fidelity fidelity = Fidelity::Analytical;  // of every point's first simulation
  std::optional<SweepVerify> verify;         // rows get verify.* columns
};

enum class SweepStatus { Ok, Infeasible, Invalid, Error };
const char* to_string(SweepStatus s);

// A point simulated again at the verify fidelity.
struct SweepVerification {
  Fidelity fidelity = Fidelity::Flow;
  std::size_t first_rank = 0;  // 1-based rank by the metric in the first pass
  SweepStatus status = SweepStatus::Ok;
  JobReport report;
  std::string error;
};

struct SweepRow {
  std::size_t index = 0;
  std::vector<std::pair<std::string, nlohmann::json>> overrides;
  SweepStatus status = SweepStatus::Ok;
  Fidelity fidelity = Fidelity::Analytical;   // of `report`
  JobReport report;                           // valid unless status is Invalid / Error
  std::string error;                          // Invalid / Error: the diagnostics; Infeasible: the problems
  std::optional<SweepVerification> verified;  // set by verify_sweep on the best points
};

// Reads and strictly validates a sweep file (InputError: file + JSON pointer, exit 2).
SweepSpec load_sweep_file(const std::string& path, const Catalog& catalog);
// `keys_read`, when given, collects every key the reader asked for (Diagnostics::log_keys_to).
SweepSpec load_sweep_text(const std::string& text, const std::string& file, const std::string& base_dir,
                          const Catalog& catalog, std::set<std::string>* keys_read = nullptr);
// The CLI's --fidelity: replaces the file's; InputError when verify would then
// re-run the points at the fidelity they already ran at.
void set_sweep_fidelity(SweepSpec& spec, Fidelity fidelity);

// Expands the axes / runs the auto-search enumeration and pruning. Throws
// InputError when the base is unusable or an axis names an unknown key.
SweepPlan expand_sweep(const SweepSpec& spec, const Catalog& catalog);
// One line per count, for the CLI ("auto-search: 4608 combinations, ...").
std::string sweep_summary(const SweepSpec& spec, const SweepPlan& plan);

// --shard K/N (1 <= K <= N): point i belongs to shard K when i % N == K - 1.
struct Shard {
  int k = 1, n = 1;
};
Shard parse_shard(const std::string& text);  // InputError on "0/2", "3/2", "x"
std::vector<SweepPoint> shard_points(const std::vector<SweepPoint>& points, Shard shard);

// Called after every finished point (and once with done = 0), never concurrently.
using SweepProgress = std::function<void(std::size_t done, std::size_t total)>;

// Loads every point (base + overrides) and simulates it on `threads` workers
// (<= 0: hardware concurrency). Rows come back in the order of `points`.
std::vector<SweepRow> run_sweep(const std::vector<SweepPoint>& points, int threads, const SweepSpec& spec,
                                const Catalog& catalog, const SweepProgress& progress = {});

// spec.verify: simulates the best spec.verify->top rows (status ok, by spec.metric,
// ties by index) again at the verify fidelity and stores the outcome in
// row.verified. Deterministic for any thread count. No-op without spec.verify.
void verify_sweep(std::vector<SweepRow>& rows, int threads, const SweepSpec& spec, const Catalog& catalog,
                  const SweepProgress& progress = {});

// Progress text: on a TTY "\r[#####.....]  42/96  44%  12.3 s, ETA 14.1 s" (redraw in
// place, no newline); otherwise a plain line without the trailing newline.
std::string progress_line(std::size_t done, std::size_t total, double elapsed_s, bool tty);

// A ready-made progress callback: redraws at most every 0.1 s on a TTY, prints a
// plain line every 10% otherwise; finish() ends the TTY line.
class SweepProgressPrinter {
 public:
  SweepProgressPrinter(std::ostream& out, bool tty);
  void operator()(std::size_t done, std::size_t total);
  void finish();

 private:
  std::ostream* out_;
  bool tty_;
  double start_ = 0, last_draw_ = -1;
  std::size_t last_decile_ = 0;
  bool drawn_ = false;
};

// Output rows: index, sweep id, point count, status, fidelity, one column per
// override key, the flattened JobReport result fields, error, and with verify the
// verify.* columns (verify.fidelity, verify.status, verify.first_rank, results). No wall-clock time, so the
// output is identical whatever the thread count.
nlohmann::ordered_json sweep_row_json(const SweepRow& row, const SweepPlan& plan);
std::vector<nlohmann::ordered_json> sweep_rows_json(const std::vector<SweepRow>& rows, const SweepPlan& plan);

enum class SweepFormat { Csv, Jsonl };
SweepFormat sweep_format_for_path(const std::string& path);  // .csv | .jsonl/.ndjson, else InputError
std::string format_sweep_rows(const std::vector<nlohmann::ordered_json>& rows, SweepFormat format);
void write_sweep_rows(const std::string& path, const std::vector<nlohmann::ordered_json>& rows);

// Merges shard outputs (JSONL) into one list sorted by index; InputError on
// unreadable lines, rows of different sweeps, or the same index twice.
struct SweepMerge {
  std::vector<nlohmann::ordered_json> rows;
  std::size_t points = 0;   // points in the whole sweep
  std::size_t missing = 0;  // points no file had (a shard not given)
};
SweepMerge merge_sweep_files(const std::vector<std::string>& paths);
SweepMerge merge_sweep_texts(const std::vector<std::pair<std::string, std::string>>& files);  // (name, text)

// Numeric result fields a sweep can rank by; lower is better for the *_s times and memory.
const std::vector<std::string>& sweep_metrics();
bool metric_lower_is_better(const std::string& metric);

// The k best feasible rows by metric, as an aligned text table; the header names the fidelity.
std::string top_k_table(const std::vector<SweepRow>& rows, std::size_t k, const std::string& metric);
std::string top_k_table(const std::vector<nlohmann::ordered_json>& rows, std::size_t k, const std::string& metric);
// The verified rows ranked by the metric at the verify fidelity, with their
// first-pass figure and rank; "" when no row was verified.
std::string verified_table(const std::vector<SweepRow>& rows, const std::string& metric);
std::string verified_table(const std::vector<nlohmann::ordered_json>& rows, const std::string& metric);

}  // namespace trainsim
