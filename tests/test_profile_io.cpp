// The calibration profile format on its own (trainsim_calibration only): the
// shipped profiles read, write and read back unchanged, and a bad value is
// reported with the file and its JSON pointer.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "calibration/profile_io.hpp"

using namespace trainsim;

namespace {

CalibrationProfile read_text(const std::string& text, Diagnostics& d) {
  CalibrationProfile p;
  if (auto doc = parse_json_text(text, d)) {
    ObjectReader r(*doc, "", d);
    if (r.valid()) p = read_profile(r);
    r.finish();
  }
  return p;
}

std::string h100_text() {
  for (const EmbeddedFile& f : calibration_profile_files()) {
    if (f.path.ends_with("h100-sxm-80gb.json")) return std::string(f.text);
  }
  FAIL("no shipped H100 profile");
  return {};
}

std::string first_error(const std::string& text) {
  Diagnostics d("bad.json");
  read_text(text, d);
  return d.ok() ? std::string() : d.items().front().format();
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("every shipped profile reads, writes and reads back unchanged") {
  REQUIRE_FALSE(calibration_profile_files().empty());
  for (const EmbeddedFile& f : calibration_profile_files()) {
    CAPTURE(f.path);
    Diagnostics d{std::string(f.path)};
    const CalibrationProfile p = read_text(std::string(f.text), d);
    REQUIRE(d.ok());
    const nlohmann::ordered_json written = profile_to_json(p);
    Diagnostics d2("written");
    const CalibrationProfile back = read_text(written.dump(2), d2);
    REQUIRE_MESSAGE(d2.ok(), InputError(d2.items()).what());
    CHECK(back == p);
    CHECK(profile_to_json(back) == written);
  }
}

TEST_CASE("a profile file written and loaded again is unchanged") {
  Diagnostics d("h100");
  const CalibrationProfile p = read_text(h100_text(), d);
  REQUIRE(d.ok());
  const auto path = std::filesystem::temp_directory_path() / "trainsim_test_profile_io.json";
  write_profile_file(profile_to_json(p), path.string());
  CHECK(load_profile_file(path.string()) == p);
  std::filesystem::remove(path);
  // Times and sizes keep a unit in the written file.
  const nlohmann::ordered_json j = profile_to_json(p);
  CHECK(j["launch_overhead"]["value"].get<std::string>().ends_with("us"));
  CHECK(j["memory_reserved"]["value"] == "1.5GiB");
}

TEST_CASE("memory kernel speeds are read per implementation, 1 where a profile has none") {
  Diagnostics d("h100");
  const CalibrationProfile p = read_text(h100_text(), d);
  REQUIRE(d.ok());
  CHECK(p.memory_kernels[static_cast<std::size_t>(MemoryKernel::TeCastTranspose)].value == 0.48);
  CHECK(p.memory_kernels[static_cast<std::size_t>(MemoryKernel::TeCastTranspose)].provenance.kind == "derived");
  CHECK(p.memory_kernels[static_cast<std::size_t>(MemoryKernel::Generic)].value == 1.0);
  CHECK(p.memory_kernels[static_cast<std::size_t>(MemoryKernel::ApexLayerNormForward)].value == 1.0);
  CHECK(profile_to_json(p)["memory_kernels"].size() == 1);
}

TEST_CASE("the cuDNN dropout speed is read where a profile has one, 1 elsewhere") {
  Diagnostics d("h100");
  const CalibrationProfile p = read_text(h100_text(), d);
  REQUIRE(d.ok());
  const AttentionKernelCurves& cudnn = p.attention_kernels[static_cast<std::size_t>(AttentionKernel::Cudnn)];
  CHECK(cudnn.dropout_speed.value == 0.967);
  CHECK(cudnn.dropout_speed.provenance.kind == "derived");
  CHECK(profile_to_json(p)["attention_kernels"]["cudnn"]["dropout_speed"]["value"] == 0.967);
  const AttentionKernelCurves& fa3 = p.attention_kernels[static_cast<std::size_t>(AttentionKernel::FlashAttention3)];
  CHECK(fa3.dropout_speed.value == 1.0);
  CHECK_FALSE(profile_to_json(p)["attention_kernels"]["flash-attention-3"].contains("dropout_speed"));
  SUBCASE("a speed above 1 is an error at its pointer") {
    const std::string bad = replaced(h100_text(), "\"dropout_speed\": {\n        \"value\": 0.967",
                                     "\"dropout_speed\": {\n        \"value\": 1.5");
    CHECK(first_error(bad).starts_with(
        "error: bad.json: /attention_kernels/cudnn/dropout_speed/value: expected a number in "));
  }
}

TEST_CASE("a bad profile value names the file and its JSON pointer") {
  const std::string text = h100_text();
  SUBCASE("a time without a unit") {
    const std::string bad = replaced(text, "\"memory_reserved\": {\n    \"value\": \"1.5GiB\"",
                                     "\"memory_reserved\": {\n    \"value\": 1.5");
    CHECK(first_error(bad) ==
          "error: bad.json: /memory_reserved/value: expected a size with a unit such as \"80GiB\", found the "
          "number 1.5; a bare number is only allowed for 0");
  }
  SUBCASE("an unknown key has a did-you-mean") {
    const std::string bad = replaced(text, "\"memory_bound\":", "\"memory_bond\":");
    Diagnostics d("bad.json");
    read_text(bad, d);
    bool named = false;
    for (const Diagnostic& x : d.items()) {
      named |=
          x.pointer == "/memory_bond" && x.message == "unknown key \"memory_bond\" (did you mean \"memory_bound\"?)";
    }
    CHECK(named);
  }
  SUBCASE("an efficiency out of range") {
    const std::string bad = replaced(text, "\"busbw_efficiency\": {\n      \"value\": 0.8",
                                     "\"busbw_efficiency\": {\n      \"value\": 1.8");
    CHECK(first_error(bad).starts_with("error: bad.json: /scaleup/busbw_efficiency/value: expected a number in "));
  }
  SUBCASE("an unknown memory kernel implementation") {
    const std::string bad = replaced(text, "\"te-cast-transpose\":", "\"te-cast-transpos\":");
    Diagnostics d("bad.json");
    read_text(bad, d);
    bool named = false;
    for (const Diagnostic& x : d.items()) {
      named |= x.pointer == "/memory_kernels/te-cast-transpos" &&
               x.message == "unknown key \"te-cast-transpos\" (did you mean \"te-cast-transpose\"?)";
    }
    CHECK(named);
  }
  SUBCASE("a memory kernel speed out of range") {
    const std::string bad = replaced(text, "\"te-cast-transpose\": {\n      \"value\": 0.48",
                                     "\"te-cast-transpose\": {\n      \"value\": 0");
    CHECK(first_error(bad).starts_with(
        "error: bad.json: /memory_kernels/te-cast-transpose/value: expected a number in "));
  }
  SUBCASE("a file that is missing") {
    try {
      load_profile_file("/nonexistent/profile.json");
      FAIL("no InputError");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()) == "error: /nonexistent/profile.json: (document): cannot read the file");
    }
  }
}
