// libFuzzer harness: the sweep reader and its expansion (first byte even), or
// a shard output through merge and the result tables (first byte odd). Bad
// input must end in InputError; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/frontend/sweep.hpp"

using namespace trainsim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Catalog catalog = load_builtin_catalog();
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      const SweepSpec spec = load_sweep_text(text, "fuzz.json", "", catalog);
      (void)expand_sweep(spec, catalog);
    } else {
      const SweepMerge m = merge_sweep_texts({{"fuzz.jsonl", text}});
      (void)format_sweep_rows(m.rows, SweepFormat::Csv);
      (void)format_sweep_rows(m.rows, SweepFormat::Jsonl);
      (void)top_k_table(m.rows, 10, "tokens_per_s");
      (void)verified_table(m.rows, "tokens_per_s");
    }
  } catch (const InputError&) {
  }
  return 0;
}
