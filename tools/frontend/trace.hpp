#pragma once
// Chrome trace-event / Perfetto JSON of a simulated iteration: one process per
// recorded rank, one thread per stream, one complete ("X") event per recorded
// interval. Open it in ui.perfetto.dev or chrome://tracing. Deterministic.
#include <cstdint>
#include <iosfwd>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/frontend/job.hpp"

namespace trainsim {

// "compute", "tp" ... "dp" or "wait" for an Interval::category.
const char* interval_category_name(std::uint8_t category);

// The simulated rank indices that have a recorded timeline, ascending.
std::vector<int> recorded_ranks(const JobRun& run);

// `ranks`: simulated rank indices to include (empty = every recorded rank);
// ranks without a recorded timeline are skipped. Times are microseconds,
// converted from integer nanoseconds.
nlohmann::json chrome_trace(const JobRun& run, const std::vector<int>& ranks);

// The bytes of chrome_trace(...).dump() and a newline, streamed to `out`
// without building the whole document (a trace can hold millions of events).
void write_chrome_trace(std::ostream& out, const JobRun& run, const std::vector<int>& ranks);

}  // namespace trainsim
