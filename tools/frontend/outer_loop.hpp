#pragma once
// Outer-loop strategies around the training step: a job whose sites train
// their own replicas and synchronise every few steps (DiLoCo and its
// variants, docs/cross-datacenter.md) is run by its strategy instead of as
// one step of the whole cluster. run_job asks outer_loop_of first.
#include <memory>

#include "tools/frontend/job.hpp"

namespace trainsim {

class OuterLoop {
 public:
  virtual ~OuterLoop() = default;
  virtual const char* name() const = 0;
  // The job's run, its headline figures per inner step.
  virtual JobRun run(const Scenario& scenario, Fidelity fidelity) const = 0;
};

// The outer loop the scenario asks for; null for a plain training step.
std::unique_ptr<OuterLoop> outer_loop_of(const Scenario& scenario);

}  // namespace trainsim
