#include "tools/frontend/trace.hpp"

#include <algorithm>
#include <ostream>
#include <string>

namespace trainsim {

namespace {

// Microseconds from integer nanoseconds; the shortest round-trip print of the
// double gives the exact decimal (e.g. 1234567 ns -> 1234.567).
double micros(Time t) { return static_cast<double>(t.count_ns()) / 1000.0; }

nlohmann::json metadata_event(const char* name, int pid, int tid, nlohmann::json args) {
  return {{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

}  // namespace

const char* interval_category_name(std::uint8_t category) {
  if (category == kComputeCategory) return "compute";
  if (category == kWaitCategory) return "wait";
  return to_string(static_cast<CommClass>(category - 1));
}

std::vector<int> recorded_ranks(const JobRun& run) {
  std::vector<int> out;
  for (const RankTimeline& tl : run.result.timelines) out.push_back(static_cast<int>(tl.rank));
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The recorded timelines of `ranks` (empty = all), by rank.
std::vector<const RankTimeline*> selected_timelines(const JobRun& run, const std::vector<int>& ranks) {
  std::vector<const RankTimeline*> selected;
  for (const RankTimeline& tl : run.result.timelines) {
    const int r = static_cast<int>(tl.rank);
    if (ranks.empty() || std::find(ranks.begin(), ranks.end(), r) != ranks.end()) selected.push_back(&tl);
  }
  std::sort(selected.begin(), selected.end(),
            [](const RankTimeline* a, const RankTimeline* b) { return a->rank < b->rank; });
  return selected;
}

nlohmann::json trace_metadata(const JobRun& run, const std::vector<const RankTimeline*>& selected) {
  nlohmann::json included = nlohmann::json::array();
  for (const RankTimeline* tl : selected) included.push_back(static_cast<int>(tl->rank));
  return {{"generator", "trainsim"},           {"scenario", run.report.scenario},
          {"gpus", run.report.gpus},           {"simulated_ranks", static_cast<int>(run.plan.setup.ranks.size())},
          {"ranks", std::move(included)},      {"iteration_time_us", micros(run.result.makespan)},
          {"completed", run.result.completed}, {"time_unit", "microseconds from the start of the iteration"}};
}

// Calls `emit` with every event of the selected timelines, in output order.
template <class Emit>
void trace_events(const JobRun& run, const std::vector<const RankTimeline*>& selected, Emit&& emit) {
  const SimulationSetup& setup = run.plan.setup;
  for (const RankTimeline* tl : selected) {
    const int pid = static_cast<int>(tl->rank);
    const RankProgram& rp = setup.ranks.at(tl->rank);
    const ProgramTemplate& prog = setup.programs.at(rp.program);
    const int stage = tl->rank < run.plan.stage_of_rank.size() ? run.plan.stage_of_rank[tl->rank] : -1;

    emit(metadata_event("process_name", pid, 0, {{"name", rp.name}}));
    emit(metadata_event("process_sort_index", pid, 0, {{"sort_index", pid}}));
    emit(metadata_event("process_labels", pid, 0, {{"labels", prog.name + ", gpu " + std::to_string(rp.gpu)}}));
    for (std::size_t s = 0; s < prog.streams.size(); ++s) {
      const int tid = static_cast<int>(s);
      emit(metadata_event("thread_name", pid, tid, {{"name", prog.streams[s]}}));
      emit(metadata_event("thread_sort_index", pid, tid, {{"sort_index", tid}}));
    }

    // Intervals are recorded in completion order; emit them by (stream, start)
    // so every thread's events are in time order.
    std::vector<const Interval*> order;
    order.reserve(tl->intervals.size());
    for (const Interval& iv : tl->intervals) order.push_back(&iv);
    std::sort(order.begin(), order.end(), [](const Interval* a, const Interval* b) {
      if (a->stream != b->stream) return a->stream < b->stream;
      if (a->start != b->start) return a->start < b->start;
      if (a->end != b->end) return a->end < b->end;
      return a->task < b->task;
    });
    for (const Interval* iv : order) {
      const Task& task = prog.tasks.at(iv->task);
      nlohmann::json args = {{"microbatch", task.microbatch}, {"stage", stage}};
      if (task.kind == TaskKind::Compute) {
        const ComputeOp& op = prog.ops.at(task.ref);
        args["flops"] = op.flops;
        args["op"] = op.name;
      } else {
        args["bytes"] = task.bytes;
        args["kind"] = task.kind == TaskKind::Collective ? to_string(task.collective) : to_string(task.kind);
        args["group"] = prog.comm_slots.at(task.ref);
      }
      emit(nlohmann::json{{"name", std::string(prog.labels.at(task.label))},
                          {"cat", interval_category_name(iv->category)},
                          {"ph", "X"},
                          {"pid", pid},
                          {"tid", static_cast<int>(iv->stream)},
                          {"ts", micros(iv->start)},
                          {"dur", micros(iv->end - iv->start)},
                          {"args", std::move(args)}});
    }
  }
}

}  // namespace

nlohmann::json chrome_trace(const JobRun& run, const std::vector<int>& ranks) {
  const std::vector<const RankTimeline*> selected = selected_timelines(run, ranks);
  nlohmann::json events = nlohmann::json::array();
  trace_events(run, selected, [&events](nlohmann::json&& e) { events.push_back(std::move(e)); });
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"metadata", trace_metadata(run, selected)}};
}

void write_chrome_trace(std::ostream& out, const JobRun& run, const std::vector<int>& ranks) {
  // Streams the events (a trace can hold millions) with the bytes of chrome_trace(...).dump():
  // object keys sorted, so displayTimeUnit, metadata, then traceEvents.
  const std::vector<const RankTimeline*> selected = selected_timelines(run, ranks);
  out << R"({"displayTimeUnit":"ms","metadata":)" << trace_metadata(run, selected).dump() << R"(,"traceEvents":[)";
  std::string chunk;
  bool first = true;
  trace_events(run, selected, [&](nlohmann::json&& e) {
    if (!first) chunk += ',';
    first = false;
    chunk += e.dump();
    if (chunk.size() >= (std::size_t{1} << 20)) {
      out << chunk;
      chunk.clear();
    }
  });
  out << chunk << "]}\n";
}

}  // namespace trainsim
