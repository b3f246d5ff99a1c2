#pragma once
// Runs a scenario with a "diloco" section: one site's inner step is simulated
// on a datacenter of the cluster (every site is alike), the outer
// synchronisation as concurrent all-reduces across the sites on the whole
// cluster's network model (same fidelity), and the outer step is put together
// by diloco_timing (models/diloco.hpp).
#include "tools/frontend/job.hpp"

namespace trainsim {

JobRun run_diloco_job(const Scenario& scenario, Fidelity fidelity);

}  // namespace trainsim
