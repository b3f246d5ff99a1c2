#include "tools/frontend/outer_loop.hpp"

#include "tools/frontend/diloco_job.hpp"

namespace trainsim {

namespace {
// DiLoCo and Streaming DiLoCo (the "diloco" section): tools/frontend/diloco_job.cpp.
class DilocoOuterLoop final : public OuterLoop {
 public:
  const char* name() const override { return "diloco"; }
  JobRun run(const Scenario& scenario, Fidelity fidelity) const override { return run_diloco_job(scenario, fidelity); }
};
}  // namespace

std::unique_ptr<OuterLoop> outer_loop_of(const Scenario& scenario) {
  if (scenario.diloco) return std::make_unique<DilocoOuterLoop>();
  return nullptr;
}

}  // namespace trainsim
