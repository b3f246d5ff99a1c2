// The planner stamps a stage program's layer passes from one template per
// step list and filter (models/planner.cpp, "pass templates";
// docs/performance.md). The programs must be those the step-by-step emission
// gives, task for task: every scenario shipped with the project (examples,
// regression and validation sets: 1F1B, interleaved, Zero Bubble B/W splits,
// DeepSpeed, FSDP, offload, MoE, context parallelism, seq1F1B, per-stage
// layouts) is planned both ways and the programs compared field by field; the
// plan as shipped also marks repeated passes for the executor's memo, and the
// marked passes of one key must be the same tasks.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
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

// The executor applies a recorded run of one marked pass to another of the
// same key (sim/executor.hpp, memo_passes): their tasks must agree in every
// field that times them, and in their dependencies among themselves.
void check_marked_passes(const WorkloadPlan& a, std::size_t& marked, std::size_t& repeated) {
  for (const ProgramTemplate& p : a.setup.programs) {
    std::vector<const PassMark*> first_of_key;
    std::uint32_t end = 0;
    for (const PassMark& m : p.passes) {
      ++marked;
      REQUIRE(m.count >= 2);
      REQUIRE(m.first >= end);  // in task order, disjoint
      end = m.first + m.count;
      REQUIRE(end <= p.tasks.size());
      if (m.key >= first_of_key.size()) first_of_key.resize(m.key + 1, nullptr);
      if (first_of_key[m.key] == nullptr) {
        first_of_key[m.key] = &m;
        continue;
      }
      ++repeated;
      const PassMark& r = *first_of_key[m.key];
      REQUIRE(m.count == r.count);
      std::size_t differing = 0;
      for (std::uint32_t i = 0; i < m.count && differing == 0; ++i) {
        const Task &x = p.tasks[m.first + i], &y = p.tasks[r.first + i];
        std::vector<std::uint32_t> inner_x, inner_y;
        for (const std::uint32_t d : p.deps_of(m.first + i))
          if (d >= m.first) inner_x.push_back(d - m.first);
        for (const std::uint32_t d : p.deps_of(r.first + i))
          if (d >= r.first) inner_y.push_back(d - r.first);
        if (x.kind != y.kind || x.stream != y.stream || x.collective != y.collective || x.comm_class != y.comm_class ||
            x.ref != y.ref || x.bytes != y.bytes || x.matrix != y.matrix || inner_x != inner_y) {
          CAPTURE(m.first);
          CAPTURE(i);
          CHECK(x.kind == y.kind);
          CHECK(x.stream == y.stream);
          CHECK(x.ref == y.ref);
          CHECK(x.bytes == y.bytes);
          CHECK(inner_x == inner_y);
          ++differing;
        }
      }
    }
  }
}

struct FolderCounts {
  int planned = 0;
  std::size_t marked = 0, repeated = 0;
};

// Plans every transformer scenario of the folders twice: as shipped (pass
// templates and pass marks on) and step by step without marks. The programs
// must agree task for task, the unmarked plan must carry no marks, and the
// marked passes of one key must be the same tasks. Returns the counts checked.
FolderCounts check_folders(std::initializer_list<const char*> dirs) {
  namespace fs = std::filesystem;
  const Catalog catalog = load_builtin_catalog();
  std::vector<fs::path> files;
  for (const char* dir : dirs) {
    for (const auto& e : fs::directory_iterator(fs::path(TRAINSIM_SOURCE_DIR) / "scenarios" / dir)) {
      if (e.path().extension() == ".json") files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  FolderCounts counts;
  for (const fs::path& file : files) {
    CAPTURE(file.string());
    const Scenario s = load_scenario_file(file.string(), {}, catalog);
    if (s.workload.kind != WorkloadKind::Transformer) continue;
    const Platform platform(s.cluster, s.profiles);
    const Placement placement = Placement::of(s.parallel);
    PlanOptions stepwise;
    stepwise.pass_templates = false;
    stepwise.pass_memo = false;
    const WorkloadPlan a = workload_of(s)->plan(platform, placement, PlanOptions{});
    const WorkloadPlan b = workload_of(s)->plan(platform, placement, stepwise);
    CHECK(a.hardware_flops == b.hardware_flops);
    CHECK(a.model_flops == b.model_flops);
    REQUIRE(a.setup.programs.size() == b.setup.programs.size());
    for (std::size_t p = 0; p < a.setup.programs.size(); ++p) {
      CAPTURE(p);
      check_same_program(a.setup.programs[p], b.setup.programs[p]);
    }
    for (const ProgramTemplate& p : b.setup.programs) CHECK(p.passes.empty());
    check_marked_passes(a, counts.marked, counts.repeated);
    ++counts.planned;
  }
  return counts;
}

}  // namespace

// One test case per group of folders, so that CTest runs them side by side
// (tests/CMakeLists.txt registers each as its own entry).
TEST_CASE("pass templates and pass marks: validation folder") {
  const FolderCounts c = check_folders({"validation"});
  CHECK(c.planned > 40);
  CHECK(c.marked > 100000);
  CHECK(c.repeated > 100000);
}

TEST_CASE("pass templates and pass marks: Zero Bubble and MoE folders") {
  const FolderCounts c = check_folders({"validation-zbv", "validation-moe"});
  CHECK(c.planned > 30);
  CHECK(c.marked > 100000);
  CHECK(c.repeated > 100000);
}

TEST_CASE("pass templates and pass marks: other folders") {
  const FolderCounts c =
      check_folders({"examples", "regression", "validation-schedules", "validation-hetero", "validation-cross-dc"});
  CHECK(c.planned > 50);
  CHECK(c.marked > 100000);
  CHECK(c.repeated > 100000);
}
