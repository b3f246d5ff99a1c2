// Failures over a job's life: the default rates, the Monte Carlo against the
// first-order formula, the Young/Daly optimum, spares and checkpoint modes.
#include <doctest/doctest.h>

#include <cmath>

#include "models/reliability.hpp"

using namespace trainsim;

namespace {

constexpr double kDay = 86400;

// The Llama 3 405B job: 16,384 GPUs in 2,048 nodes, a 5.7 TB checkpoint.
JobShape llama3_job() {
  JobShape j;
  j.gpus = 16384;
  j.nodes = 2048;
  j.iteration_s = 10;
  j.units_per_s = 1.6e6;
  j.checkpoint_bytes = 5.7e12;
  j.peer_bandwidth_gpu = 50e9;
  return j;
}

ReliabilitySpec llama3_spec() {
  ReliabilitySpec s;
  s.duration_s = 54 * kDay;
  s.components = llama3_failure_rates();
  s.planned_per_day = 47.0 / 54;
  s.storage_bandwidth = 2e12;
  s.restart_s = 300;
  return s;
}

// One failure process per node at `per_node_day`, a checkpoint written in `write_s`.
ReliabilitySpec node_failures(double per_node_day, double write_s, const JobShape& job) {
  ReliabilitySpec s;
  s.duration_s = 30 * kDay;
  s.components = {{"node", FailureScope::Node, per_node_day, true, "test"}};
  s.storage_bandwidth = job.checkpoint_bytes / write_s;
  s.restart_s = 0;
  s.trials = 400;
  return s;
}

JobShape job_of(int gpus) {
  JobShape j;
  j.gpus = gpus;
  j.nodes = gpus / 8;
  j.iteration_s = 5;
  j.units_per_s = 1e6;
  j.checkpoint_bytes = 1e12;
  j.peer_bandwidth_gpu = 50e9;
  return j;
}

}  // namespace

TEST_CASE("the default rates give Llama 3's interruptions back on its own job") {
  // The rates are derived from this job's Table 5, so this checks the
  // derivation and the Monte Carlo's counting; the ETTR is the model's own.
  const ReliabilityReport r = analyse_reliability(llama3_spec(), llama3_job());
  CHECK(r.unexpected_expected == doctest::Approx(419).epsilon(1e-9));
  CHECK(r.interruptions_expected == doctest::Approx(466).epsilon(1e-9));
  CHECK(r.interruptions_mean == doctest::Approx(466).epsilon(0.03));
  REQUIRE(!r.by_component.empty());
  CHECK(r.by_component.front().component == "faulty GPU");
  CHECK(r.by_component.front().expected == doctest::Approx(148).epsilon(1e-9));
  // Llama 3 reports "higher than 90% effective training time".
  CHECK(r.ettr_mean > 0.90);
  CHECK(r.ettr_p05 <= r.ettr_mean);
  CHECK(r.ettr_mean <= r.ettr_p95);
  CHECK(r.goodput_units_per_s == doctest::Approx(1.6e6 * r.ettr_mean));
  // Twice the GPUs at the same rates: twice the unexpected interruptions.
  JobShape twice = llama3_job();
  twice.gpus *= 2;
  twice.nodes *= 2;
  CHECK(analyse_reliability(llama3_spec(), twice).unexpected_expected == doctest::Approx(838).epsilon(1e-9));
}

TEST_CASE("the Monte Carlo agrees with the first-order ETTR at the Daly interval") {
  // Kokolis et al. (arXiv:2410.21680): on RSC-1, 6.5 node failures per 1000
  // node-days; with 5-minute checkpoint writes and restarts, jobs of 2,048 to
  // 4,096 GPUs reach an ETTR of about 0.9.
  const JobShape job = job_of(2048);
  const ReliabilityReport r = analyse_reliability(node_failures(6.5e-3, 300, job), job);
  CHECK(r.mtbf_s == doctest::Approx(kDay / (256 * 6.5e-3)));
  CHECK(r.ettr_mean == doctest::Approx(r.ettr_analytic).epsilon(0.01));
  CHECK(r.ettr_analytic > 0.85);
  CHECK(r.ettr_analytic < 0.95);
}

TEST_CASE("the Young/Daly interval beats much shorter and much longer ones") {
  const JobShape job = job_of(4096);
  ReliabilitySpec s = node_failures(6.5e-3, 120, job);
  const ReliabilityReport best = analyse_reliability(s, job);
  CHECK(best.checkpoint_interval_s == best.optimal_interval_s);
  // sqrt(2 delta M) - delta, in whole iterations.
  const double m = best.mtbf_s;
  CHECK(best.optimal_interval_s == doctest::Approx(std::sqrt(2 * 120 * m) - 120).epsilon(0.01));
  s.checkpoint_interval_s = best.optimal_interval_s / 5;
  const double shorter = analyse_reliability(s, job).ettr_mean;
  s.checkpoint_interval_s = best.optimal_interval_s * 5;
  const double longer = analyse_reliability(s, job).ettr_mean;
  CHECK(best.ettr_mean > shorter + 0.02);
  CHECK(best.ettr_mean > longer + 0.02);
}

TEST_CASE("the interval is whole iterations") {
  const JobShape job = job_of(1024);
  ReliabilitySpec s = node_failures(6.5e-3, 60, job);
  s.checkpoint_interval_s = 1001;
  const ReliabilityReport r = analyse_reliability(s, job);
  CHECK(r.checkpoint_interval_s == doctest::Approx(1000));
}

TEST_CASE("spare nodes: too few make restarts wait for repairs; enough change nothing") {
  const JobShape job = job_of(4096);
  ReliabilitySpec s = node_failures(6.5e-3, 120, job);
  const ReliabilityReport unlimited = analyse_reliability(s, job);
  CHECK(unlimited.spare_wait_s == 0);
  s.spare_nodes = 1000;
  s.repair_s = 2 * kDay;
  const ReliabilityReport ample = analyse_reliability(s, job);
  CHECK(ample.ettr_mean == unlimited.ettr_mean);
  // Failures every ~7 h, each node out for 2 days: one spare runs dry.
  s.spare_nodes = 1;
  const ReliabilityReport scarce = analyse_reliability(s, job);
  CHECK(scarce.spare_wait_s > 0);
  CHECK(scarce.ettr_mean < unlimited.ettr_mean - 0.1);
}

TEST_CASE("checkpoint modes: a short stall or a fast reload raises ETTR") {
  const JobShape job = job_of(4096);
  ReliabilitySpec s = node_failures(6.5e-3, 600, job);
  const ReliabilityReport sync = analyse_reliability(s, job);
  s.checkpoint_mode = CheckpointMode::Asynchronous;
  s.snapshot_bandwidth = 25e9;  // 1e12 / 4096 bytes per GPU: 10 ms
  const ReliabilityReport async = analyse_reliability(s, job);
  CHECK(async.checkpoint_stall_s == doctest::Approx(1e12 / 4096 / 25e9));
  CHECK(async.checkpoint_write_s == doctest::Approx(async.checkpoint_stall_s + 600));
  CHECK(async.reload_s == doctest::Approx(600));
  CHECK(async.ettr_mean > sync.ettr_mean);
  s.checkpoint_mode = CheckpointMode::InMemory;
  s.snapshot_bandwidth = 0;  // the job's network bandwidth per GPU
  const ReliabilityReport memory = analyse_reliability(s, job);
  CHECK(memory.reload_s == doctest::Approx(1e12 / 4096 / 50e9));
  CHECK(memory.ettr_mean > async.ettr_mean);
}

TEST_CASE("the same seed gives the same result; another seed another") {
  const JobShape job = job_of(2048);
  ReliabilitySpec s = node_failures(6.5e-3, 300, job);
  s.trials = 20;
  const ReliabilityReport a = analyse_reliability(s, job);
  CHECK(analyse_reliability(s, job).ettr_mean == a.ettr_mean);
  s.seed = 2;
  CHECK(analyse_reliability(s, job).ettr_mean != a.ettr_mean);
}

TEST_CASE("no failures: the job only pays its checkpoints") {
  const JobShape job = job_of(64);
  ReliabilitySpec s = node_failures(0, 60, job);
  s.checkpoint_interval_s = 3600;
  const ReliabilityReport r = analyse_reliability(s, job);
  CHECK(r.interruptions_mean == 0);
  CHECK(r.lost_work_s == 0);
  CHECK(r.ettr_mean == doctest::Approx(3600.0 / 3660).epsilon(1e-3));
}
