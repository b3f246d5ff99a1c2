// libFuzzer harness: a scenario file through the loader and validation, then,
// when it is small enough to finish quickly, an analytical simulation. Bad
// input must end in InputError; any other exception, a crash or a sanitizer
// report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Catalog catalog = load_builtin_catalog();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const Scenario s = load_scenario_text(text, "fuzz.json", "", {}, catalog);
    // The capped simulation: a few GPUs, micro-batches and layers, so an input runs in milliseconds.
    if (s.cluster.total_gpus() <= 64 && s.parallel.micro_batches() <= 64 && s.model.layers <= 128 &&
        (s.model.encoder.empty() || (s.model.encoder.front().layers <= 128 && s.model.encoder_tokens <= 65536))) {
      const JobReport r = simulate(s, Fidelity::Analytical);
      if (r.feasible && !(r.iteration_time_s > 0)) __builtin_trap();  // a feasible run takes time
    }
  } catch (const InputError&) {
  }
  return 0;
}
