// libFuzzer harness: a calibration profile through the strict reader (first
// byte even), or a raw measurement document through the fitter (first byte
// odd). Bad input must end in InputError or diagnostics; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "calibration/profile_io.hpp"
#include "tools/frontend/calibrate.hpp"

using namespace trainsim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Catalog catalog = load_builtin_catalog();
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  Diagnostics diags("fuzz.json");
  const auto doc = parse_json_text(text, diags);
  if (!doc) return 0;
  try {
    if (data[0] % 2 == 0) {
      ObjectReader r(*doc, "", diags);
      const CalibrationProfile p = read_profile(r);
      r.finish();
      if (diags.ok()) (void)profile_to_json(p);
    } else {
      (void)fit_profile({*doc}, "", catalog, diags);
    }
  } catch (const InputError&) {
  }
  return 0;
}
