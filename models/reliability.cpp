#include "models/reliability.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <random>

namespace trainsim {

namespace {

constexpr double kDay = 86400.0;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Llama 3 405B pre-training, 54-day snapshot: 16,384 H100 in 2,048 nodes of 8
// (Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783, §3.3.4, Table 5).
constexpr double kLlama3Days = 54;
constexpr double kLlama3Gpus = 16384;
constexpr double kLlama3Nodes = 2048;

struct Table5Row {
  const char* component;
  FailureScope scope;
  int count;
  bool takes_node_out;
};

// Root causes as printed in Table 5 (counts; the printed percentages do not all
// match the counts). GPU and host hardware take the node out; switch/cable
// failures scale with the fabric (counted per GPU endpoint); software, NCCL
// watchdog and dependency failures scale with the processes (one per GPU).
constexpr Table5Row kTable5[] = {
    {"faulty GPU", FailureScope::Gpu, 148, true},
    {"GPU HBM3 memory", FailureScope::Gpu, 72, true},
    {"software bug", FailureScope::Gpu, 54, false},
    {"network switch/cable", FailureScope::Gpu, 35, false},
    {"host maintenance (unplanned)", FailureScope::Node, 32, true},
    {"GPU SRAM memory", FailureScope::Gpu, 19, true},
    {"GPU system processor", FailureScope::Gpu, 17, true},
    {"NIC", FailureScope::Node, 7, true},
    {"NCCL watchdog timeout", FailureScope::Gpu, 7, false},
    {"silent data corruption", FailureScope::Gpu, 6, true},
    {"GPU thermal interface and sensor", FailureScope::Gpu, 6, true},
    {"SSD", FailureScope::Node, 3, true},
    {"power supply", FailureScope::Node, 3, true},
    {"server chassis", FailureScope::Node, 2, true},
    {"IO expansion board", FailureScope::Node, 2, true},
    {"dependency", FailureScope::Gpu, 2, false},
    {"CPU", FailureScope::Node, 2, true},
    {"system memory", FailureScope::Node, 2, true},
};

double units_of(FailureScope scope, const JobShape& job) {
  switch (scope) {
    case FailureScope::Gpu:
      return job.gpus;
    case FailureScope::Node:
      return job.nodes;
    case FailureScope::Job:
      return 1;
  }
  return 0;
}

// Checkpoint and restart costs of one job, and the interval in whole iterations.
struct Costs {
  double rate_unexpected = 0;  // per second
  double rate_planned = 0;     // per second
  double stall = 0;            // the job stops per checkpoint
  double write = 0;            // durable this long after the checkpoint starts
  double storage_write = 0;    // a full write to storage (before planned maintenance)
  double reload = 0;
  double optimal_interval = 0;
  double interval = 0;
};

double whole_iterations(double t, double iteration, double at_least) {
  if (iteration <= 0) return std::max(t, at_least);
  double k = std::max(1.0, std::round(t / iteration));
  if (k * iteration < at_least) k = std::ceil(at_least / iteration);
  return k * iteration;
}

Costs costs_of(const ReliabilitySpec& spec, const JobShape& job) {
  Costs c;
  for (const ComponentFailureRate& r : spec.components)
    c.rate_unexpected += r.per_unit_per_day * units_of(r.scope, job);
  c.rate_unexpected /= kDay;
  c.rate_planned = spec.planned_per_day / kDay;
  const double per_gpu = job.gpus > 0 ? job.checkpoint_bytes / job.gpus : 0.0;
  c.storage_write = spec.storage_bandwidth > 0 ? job.checkpoint_bytes / spec.storage_bandwidth : 0.0;
  const double snapshot_bw = spec.snapshot_bandwidth > 0 ? spec.snapshot_bandwidth : job.peer_bandwidth_gpu;
  const double snapshot = snapshot_bw > 0 ? per_gpu / snapshot_bw : 0.0;
  switch (spec.checkpoint_mode) {
    case CheckpointMode::Synchronous:
      c.stall = c.write = c.reload = c.storage_write;
      break;
    case CheckpointMode::Asynchronous:
      c.stall = snapshot;
      c.write = snapshot + c.storage_write;
      c.reload = c.storage_write;
      break;
    case CheckpointMode::InMemory:
      c.stall = c.write = c.reload = snapshot;
      break;
  }
  // Young (1974) / Daly (2006): tau = sqrt(2 delta M) - delta for delta < 2M, else M.
  const double mtbf = c.rate_unexpected > 0 ? 1.0 / c.rate_unexpected : kInf;
  double tau = 0;
  if (!std::isfinite(mtbf)) {
    tau = spec.duration_s;
  } else if (c.stall < 2 * mtbf) {
    tau = std::sqrt(2 * c.stall * mtbf) - c.stall;
  } else {
    tau = mtbf;
  }
  // A background write must be durable before the next checkpoint starts.
  const double at_least = c.write - c.stall;
  c.optimal_interval = whole_iterations(tau, job.iteration_s, at_least);
  c.interval = spec.checkpoint_interval_s > 0 ? whole_iterations(spec.checkpoint_interval_s, job.iteration_s, at_least)
                                              : c.optimal_interval;
  // Without iterations or checkpoint costs there is nothing to space out.
  if (!(c.interval > 0)) c.interval = c.optimal_interval = spec.duration_s;
  return c;
}

// Deterministic on every platform: the engine's output is fixed by the standard;
// the conversions to doubles are written out here.
class Random {
 public:
  explicit Random(std::uint64_t seed) : engine_(seed) {}
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double exponential(double rate) { return rate > 0 ? -std::log1p(-uniform()) / rate : kInf; }

 private:
  std::mt19937_64 engine_;
};

struct Trial {
  double useful = 0, lost = 0, restart = 0, checkpoint = 0, spare_wait = 0;
  int interruptions = 0;
};

class JobLife {
 public:
  JobLife(const ReliabilitySpec& spec, const JobShape& job, const Costs& costs, std::uint64_t seed)
      : spec_(spec), c_(costs), rng_(seed) {
    for (const ComponentFailureRate& r : spec.components) {
      total_weight_ += r.per_unit_per_day * units_of(r.scope, job);
      cumulative_.push_back(total_weight_);
    }
  }

  Trial run() {
    const double end = spec_.duration_s;
    next_fail_ = rng_.exponential(c_.rate_unexpected);
    next_planned_ = rng_.exponential(c_.rate_planned);
    while (t_ < end) {
      commit_if_durable();
      const double t_checkpoint = t_ + (c_.interval - pending_);
      const double t_interrupt = std::min(next_fail_, next_planned_);
      const double t_next = std::min({t_checkpoint, t_interrupt, end});
      pending_ += t_next - t_;
      t_ = t_next;
      if (t_ >= end) {
        out_.useful += pending_ + inflight_;  // the job's last state is kept
        pending_ = inflight_ = 0;
        break;
      }
      if (t_interrupt <= t_checkpoint) {
        interrupt();
      } else {
        checkpoint();
      }
    }
    return out_;
  }

 private:
  void commit_if_durable() {
    if (inflight_ > 0 && durable_at_ <= t_) {
      out_.useful += inflight_;
      inflight_ = 0;
    }
  }

  void checkpoint() {
    const double t_interrupt = std::min(next_fail_, next_planned_);
    const double stop = std::min(t_ + c_.stall, spec_.duration_s);
    if (t_interrupt < stop) {  // interrupted while checkpointing: this one is not taken
      out_.checkpoint += t_interrupt - t_;
      t_ = t_interrupt;
      interrupt();
      return;
    }
    out_.checkpoint += stop - t_;
    t_ = stop;
    if (spec_.checkpoint_mode == CheckpointMode::Asynchronous) {
      commit_if_durable();
      inflight_ += pending_;
      durable_at_ = t_ + (c_.write - c_.stall);
    } else {
      out_.useful += pending_;
    }
    pending_ = 0;
  }

  // Which component failed: drawn by its share of the unexpected rate.
  const ComponentFailureRate& failed_component() {
    const double x = rng_.uniform() * total_weight_;
    const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), x);
    const std::size_t i = std::min<std::size_t>(it - cumulative_.begin(), cumulative_.size() - 1);
    return spec_.components[i];
  }

  // How long the restart waits for a healthy node (spare_nodes >= 0).
  double take_node_out() {
    while (!repairs_.empty() && repairs_.top() <= t_) repairs_.pop();
    repairs_.push(t_ + spec_.repair_s);
    const int out = static_cast<int>(repairs_.size());
    if (out <= spec_.spare_nodes) return 0;
    // Wait for the (out - spares)-th earliest repair.
    auto copy = repairs_;
    double ready = t_;
    for (int i = 0; i < out - spec_.spare_nodes; ++i) {
      ready = copy.top();
      copy.pop();
    }
    return ready - t_;
  }

  void interrupt() {
    const double end = spec_.duration_s;
    const bool planned = next_planned_ <= next_fail_;
    ++out_.interruptions;
    commit_if_durable();
    double wait = 0;
    if (planned) {
      // Maintenance is announced: the job writes a checkpoint and stops.
      const double stop = std::min(t_ + c_.storage_write, end);
      out_.checkpoint += stop - t_;
      t_ = stop;
      out_.useful += pending_ + inflight_;
      next_planned_ = t_ + rng_.exponential(c_.rate_planned);
    } else {
      out_.lost += pending_ + inflight_;
      const ComponentFailureRate& failed = failed_component();
      if (failed.takes_node_out && spec_.spare_nodes >= 0) wait = take_node_out();
      next_fail_ = t_ + rng_.exponential(c_.rate_unexpected);
    }
    pending_ = inflight_ = 0;
    // Down: wait for a node, restart, reload. A failure meanwhile starts it over.
    for (;;) {
      const double down = wait + spec_.restart_s + c_.reload;
      const double up = std::min(t_ + down, end);
      if (next_fail_ < up) {
        const double spent = next_fail_ - t_;
        const double waited = std::min(spent, wait);
        out_.spare_wait += waited;
        out_.restart += spent - waited;
        t_ = next_fail_;
        ++out_.interruptions;
        const ComponentFailureRate& failed = failed_component();
        wait = std::max(0.0, wait - spent);
        if (failed.takes_node_out && spec_.spare_nodes >= 0) wait = std::max(wait, take_node_out());
        next_fail_ = t_ + rng_.exponential(c_.rate_unexpected);
        continue;
      }
      const double spent = up - t_;
      const double waited = std::min(spent, wait);
      out_.spare_wait += waited;
      out_.restart += spent - waited;
      t_ = up;
      break;
    }
    // Maintenance that fell while the job was down is absorbed by the downtime.
    while (next_planned_ < t_) next_planned_ = t_ + rng_.exponential(c_.rate_planned);
  }

  const ReliabilitySpec& spec_;
  const Costs& c_;
  Random rng_;
  std::vector<double> cumulative_;
  double total_weight_ = 0;
  std::priority_queue<double, std::vector<double>, std::greater<>> repairs_;
  double t_ = 0;
  double pending_ = 0;   // training time since the last checkpoint
  double inflight_ = 0;  // training time in a checkpoint still being written
  double durable_at_ = 0;
  double next_fail_ = kInf, next_planned_ = kInf;
  Trial out_;
};

}  // namespace

const char* to_string(FailureScope s) {
  switch (s) {
    case FailureScope::Gpu:
      return "gpu";
    case FailureScope::Node:
      return "node";
    case FailureScope::Job:
      return "job";
  }
  return "?";
}

const char* to_string(CheckpointMode m) {
  switch (m) {
    case CheckpointMode::Synchronous:
      return "sync";
    case CheckpointMode::Asynchronous:
      return "async";
    case CheckpointMode::InMemory:
      return "in-memory";
  }
  return "?";
}

std::vector<ComponentFailureRate> llama3_failure_rates() {
  std::vector<ComponentFailureRate> out;
  for (const Table5Row& row : kTable5) {
    const double exposure = row.scope == FailureScope::Gpu    ? kLlama3Days * kLlama3Gpus
                            : row.scope == FailureScope::Node ? kLlama3Days * kLlama3Nodes
                                                              : kLlama3Days;
    out.push_back({row.component, row.scope, row.count / exposure, row.takes_node_out,
                   "derived: " + std::to_string(row.count) +
                       " interruptions over 54 days of 16,384 H100 in 2,048 nodes (Llama 3, arXiv:2407.21783, "
                       "Table 5)"});
  }
  return out;
}

double reliability_segments(const ReliabilitySpec& spec, const JobShape& job) {
  const Costs c = costs_of(spec, job);
  const double checkpoints = c.interval > 0 ? spec.duration_s / (c.interval + c.stall) : 0.0;
  return checkpoints + (c.rate_unexpected + c.rate_planned) * spec.duration_s;
}

ReliabilityReport analyse_reliability(const ReliabilitySpec& spec, const JobShape& job) {
  const Costs c = costs_of(spec, job);
  ReliabilityReport r;
  r.duration_s = spec.duration_s;
  r.checkpoint_bytes = job.checkpoint_bytes;
  r.unexpected_expected = c.rate_unexpected * spec.duration_s;
  r.planned_expected = c.rate_planned * spec.duration_s;
  r.interruptions_expected = r.unexpected_expected + r.planned_expected;
  for (const ComponentFailureRate& comp : spec.components) {
    r.by_component.push_back(
        {comp.component, comp.per_unit_per_day * units_of(comp.scope, job) * spec.duration_s / kDay});
  }
  std::stable_sort(
      r.by_component.begin(), r.by_component.end(),
      [](const ComponentInterruptions& a, const ComponentInterruptions& b) { return a.expected > b.expected; });
  r.mtbf_s = c.rate_unexpected > 0 ? 1.0 / c.rate_unexpected : kInf;
  r.checkpoint_stall_s = c.stall;
  r.checkpoint_write_s = c.write;
  r.reload_s = c.reload;
  r.restart_s = spec.restart_s;
  r.checkpoint_interval_s = c.interval;
  r.optimal_interval_s = c.optimal_interval;
  // First-order expected waste (Daly 2006; the ETTR form of Kokolis et al., arXiv:2410.21680):
  // each failure costs the restart and on average half an interval (plus a background
  // write still in flight); each planned stop costs a write and the restart.
  const double down = spec.restart_s + c.reload;
  const double exposed = c.interval / 2 + (c.write - c.stall);
  const double waste = c.rate_unexpected * (down + exposed) + c.rate_planned * (down + c.storage_write);
  r.ettr_analytic = std::clamp((1 - waste) / (1 + (c.interval > 0 ? c.stall / c.interval : 0.0)), 0.0, 1.0);

  r.trials = spec.trials;
  std::vector<double> ettr;
  ettr.reserve(spec.trials);
  std::vector<std::uint64_t> seeds(spec.trials);
  {
    std::mt19937_64 seeder(spec.seed);
    for (auto& s : seeds) s = seeder();
  }
  double interruptions = 0;
  for (int i = 0; i < spec.trials; ++i) {
    const Trial t = JobLife(spec, job, c, seeds[i]).run();
    ettr.push_back(spec.duration_s > 0 ? t.useful / spec.duration_s : 0.0);
    interruptions += t.interruptions;
    r.lost_work_s += t.lost;
    r.restart_time_s += t.restart;
    r.checkpoint_time_s += t.checkpoint;
    r.spare_wait_s += t.spare_wait;
  }
  const double n = std::max(1, spec.trials);
  r.interruptions_mean = interruptions / n;
  r.lost_work_s /= n;
  r.restart_time_s /= n;
  r.checkpoint_time_s /= n;
  r.spare_wait_s /= n;
  double sum = 0;
  for (double e : ettr) sum += e;
  r.ettr_mean = sum / n;
  std::sort(ettr.begin(), ettr.end());
  if (!ettr.empty()) {
    r.ettr_p05 = ettr[static_cast<std::size_t>(0.05 * static_cast<double>(ettr.size() - 1))];
    r.ettr_p95 = ettr[static_cast<std::size_t>(0.95 * static_cast<double>(ettr.size() - 1))];
  }
  r.goodput_units_per_s = job.units_per_s * r.ettr_mean;
  return r;
}

}  // namespace trainsim
