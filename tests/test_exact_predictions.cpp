// Predictions of the regression scenarios at both fidelities, to the
// nanosecond: speed and memory work on the engine, the flow network and
// routing must not move them. The values were recorded with `trainsim run
// --json --fidelity analytical|flow` on scenarios/regression before that work
// (the flow network's max-min rates and routes are deterministic); a change
// that is meant to move predictions updates them and says why (the H200
// entry moved with the measured H200 calibration profile, docs/calibration.md;
// the Llama 3 70B entries with sequence parallelism's re-gather of the LM
// head's input in its backward, the FSDP entry with the ZeRO-3 prefetch order
// and root unit, docs/frameworks.md; the GPT-3 entries with the catalog's
// linear biases, model.bias; the interleaved Llama 3 70B entry with Megatron-LM's
// overlapped interleaved send/recv, each receive posted with the previous send
// of its direction, docs/schedules.md; the H100 and H200 entries with the
// profiles' compute_share_during_net_p2p, docs/calibration.md; the pipelined
// entries with the tied embedding gradients' all-reduce, docs/frameworks.md; the
// two-datacenter GPT-3 1.3B entry with the small-K GEMM factor, its TP 8 output
// projection having K = 256, docs/calibration.md; the FP8 Llama 3 70B entry with
// Transformer Engine's userbuffers GEMM chunks under TP overlap, docs/frameworks.md;
// the two-datacenter GPT-3 1.3B entry again with PyTorch's dense embedding gradient
// added into Megatron's main_grad, docs/frameworks.md; the FP8 context-parallel
// Llama 3 70B entry with Transformer Engine's ring of per-step attention kernels,
// docs/long-context.md, and at flow fidelity with the LM head's own parameter
// all-gather where its stage's last layer closed a bucket, docs/schedules.md;
// the GPT-3 entries again with the learned position table whole on every TP rank,
// docs/validation.md; every entry with the expected slowest GPU of the job, the
// profiles' gpu_speed_spread, docs/calibration.md).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

struct Exact {
  const char* scenario;
  std::int64_t analytical_ns, flow_ns;
};

// gpt3-175b-interleaved-a100 is left out: 62 M events at flow fidelity.
constexpr Exact kExact[] = {
    {"gpt3-1.3b-two-dc-pp-wan-h100", 367496436, 367496453}, {"gpt3-13b-gpipe-h200", 1612448633, 1612449202},
    {"llama3-70b-64xh100-1f1b", 19167063627, 19168145300},  {"llama3-70b-fp8-cp-h100", 11531838439, 11541334539},
    {"llama3-8b-fsdp-a100", 15098214164, 15098214164},
};

}  // namespace

TEST_CASE("regression scenarios predict the same iteration time to the nanosecond at both fidelities") {
  const Catalog catalog = load_builtin_catalog();
  for (const Exact& e : kExact) {
    CAPTURE(e.scenario);
    const Scenario s = load_scenario_file(
        std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/regression/" + e.scenario + ".json", {}, catalog);
    const JobReport analytical = simulate(s, Fidelity::Analytical);
    const JobReport flow = simulate(s, Fidelity::Flow);
    CHECK(Time::seconds(analytical.iteration_time_s).count_ns() == e.analytical_ns);
    CHECK(Time::seconds(flow.iteration_time_s).count_ns() == e.flow_ns);
  }
}
