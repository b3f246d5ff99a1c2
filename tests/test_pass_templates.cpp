// The planner stamps a stage program's layer passes from one template per
// step list and filter (models/planner.cpp, "pass templates";
// docs/performance.md). The programs must be those the step-by-step emission
// gives, task for task: every scenario shipped with the project (examples,
// regression and validation sets: 1F1B, interleaved, Zero Bubble B/W splits,
// DeepSpeed, FSDP, offload, MoE, context parallelism, seq1F1B, per-stage
// layouts) is planned both ways and the programs compared field by field.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "models/placement.hpp"
#include "sim/platform.hpp"
#include "tools/frontend/catalog.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

void check_same_task(const Task& a, const Task& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.stream == b.stream);
  CHECK(a.collective == b.collective);
  CHECK(a.comm_class == b.comm_class);
  CHECK(a.ref == b.ref);
  CHECK(a.label == b.label);
  CHECK(a.microbatch == b.microbatch);
  CHECK(a.bytes == b.bytes);
  CHECK(a.matrix == b.matrix);
}

void check_same_program(const ProgramTemplate& a, const ProgramTemplate& b) {
  CHECK(a.name == b.name);
  CHECK(a.streams == b.streams);
  CHECK(a.comm_slots == b.comm_slots);
  CHECK(a.labels == b.labels);
  REQUIRE(a.ops.size() == b.ops.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    CHECK(a.ops[i].name == b.ops[i].name);
    CHECK(a.ops[i].flops == b.ops[i].flops);
    CHECK(a.ops[i].bytes == b.ops[i].bytes);
  }
  REQUIRE(a.tasks.size() == b.tasks.size());
  std::size_t differing = 0;
  for (std::size_t t = 0; t < a.tasks.size() && differing == 0; ++t) {
    const Task &x = a.tasks[t], &y = b.tasks[t];
    if (x.kind != y.kind || x.stream != y.stream || x.collective != y.collective || x.comm_class != y.comm_class ||
        x.ref != y.ref || x.label != y.label || x.microbatch != y.microbatch || x.bytes != y.bytes ||
        x.matrix != y.matrix) {
      CAPTURE(t);
      check_same_task(x, y);
      ++differing;
    }
  }
  CHECK(a.dep_offsets == b.dep_offsets);
  CHECK(a.deps == b.deps);
  CHECK(a.succ_offsets == b.succ_offsets);
  CHECK(a.succs == b.succs);
  CHECK(a.stream_offsets == b.stream_offsets);
  CHECK(a.stream_tasks == b.stream_tasks);
}

}  // namespace

TEST_CASE("stage programs stamped from pass templates equal the step-by-step emission") {
  namespace fs = std::filesystem;
  const Catalog catalog = load_builtin_catalog();
  std::vector<fs::path> files;
  for (const char* dir : {"examples", "regression", "validation", "validation-schedules", "validation-zbv",
                          "validation-moe", "validation-hetero", "validation-cross-dc"}) {
    for (const auto& e : fs::directory_iterator(fs::path(TRAINSIM_SOURCE_DIR) / "scenarios" / dir)) {
      if (e.path().extension() == ".json") files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  int planned = 0;
  for (const fs::path& file : files) {
    CAPTURE(file.string());
    const Scenario s = load_scenario_file(file.string(), {}, catalog);
    if (s.workload.kind != WorkloadKind::Transformer) continue;
    const Platform platform(s.cluster, s.profiles);
    const Placement placement = Placement::of(s.parallel);
    PlanOptions stamped, stepwise;
    stepwise.pass_templates = false;
    const WorkloadPlan a = workload_of(s)->plan(platform, placement, stamped);
    const WorkloadPlan b = workload_of(s)->plan(platform, placement, stepwise);
    CHECK(a.hardware_flops == b.hardware_flops);
    CHECK(a.model_flops == b.model_flops);
    REQUIRE(a.setup.programs.size() == b.setup.programs.size());
    for (std::size_t p = 0; p < a.setup.programs.size(); ++p) {
      CAPTURE(p);
      check_same_program(a.setup.programs[p], b.setup.programs[p]);
    }
    ++planned;
  }
  CHECK(planned > 100);
}
