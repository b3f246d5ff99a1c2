#include "topologies/units.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace trainsim {

const char* to_string(Quantity q) {
  switch (q) {
    case Quantity::Bytes:
      return "a size (e.g. \"80GiB\", \"40MB\")";
    case Quantity::Bandwidth:
      return "a bandwidth (e.g. \"400Gbps\", \"450GB/s\")";
    case Quantity::Time:
      return "a time (e.g. \"1.5us\", \"20ms\")";
    case Quantity::Flops:
      return "a compute rate (e.g. \"989TFLOPS\")";
  }
  return "?";
}

std::string expected_with_unit(Quantity q) {
  switch (q) {
    case Quantity::Bytes:
      return "a size with a unit such as \"80GiB\"";
    case Quantity::Bandwidth:
      return "a bandwidth with a unit such as \"400Gbps\"";
    case Quantity::Time:
      return "a duration with a unit such as \"0.5us\"";
    case Quantity::Flops:
      return "a compute rate with a unit such as \"989TFLOPS\"";
  }
  return "?";
}

namespace {

struct UnitEntry {
  Quantity kind;
  const char* suffix;
  double factor;
};

// Sizes in bytes (SI and binary prefixes), bandwidths in bytes/s (bits where
// the suffix says "bps"), times in seconds, compute in FLOP/s.
constexpr UnitEntry kUnits[] = {
    {Quantity::Bytes, "B", 1},
    {Quantity::Bytes, "KB", 1e3},
    {Quantity::Bytes, "MB", 1e6},
    {Quantity::Bytes, "GB", 1e9},
    {Quantity::Bytes, "TB", 1e12},
    {Quantity::Bytes, "KiB", 1024.0},
    {Quantity::Bytes, "MiB", 1048576.0},
    {Quantity::Bytes, "GiB", 1073741824.0},
    {Quantity::Bytes, "TiB", 1099511627776.0},
    {Quantity::Bandwidth, "B/s", 1},
    {Quantity::Bandwidth, "KB/s", 1e3},
    {Quantity::Bandwidth, "MB/s", 1e6},
    {Quantity::Bandwidth, "GB/s", 1e9},
    {Quantity::Bandwidth, "TB/s", 1e12},
    {Quantity::Bandwidth, "bps", 0.125},
    {Quantity::Bandwidth, "Kbps", 125.0},
    {Quantity::Bandwidth, "Mbps", 1.25e5},
    {Quantity::Bandwidth, "Gbps", 1.25e8},
    {Quantity::Bandwidth, "Tbps", 1.25e11},
    {Quantity::Time, "ns", 1e-9},
    {Quantity::Time, "us", 1e-6},
    {Quantity::Time, "ms", 1e-3},
    {Quantity::Time, "s", 1},
    {Quantity::Time, "min", 60},
    {Quantity::Time, "h", 3600},
    {Quantity::Time, "d", 86400},
    {Quantity::Flops, "FLOPS", 1},
    {Quantity::Flops, "GFLOPS", 1e9},
    {Quantity::Flops, "TFLOPS", 1e12},
    {Quantity::Flops, "PFLOPS", 1e15},
};

}  // namespace

ParsedQuantity parse_quantity(std::string_view text, Quantity kind) {
  ParsedQuantity out;
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' || text[i] == 'e' ||
                             text[i] == 'E' || text[i] == '+' || text[i] == '-')) {
    // Stop at an 'e'/'E' that starts a unit rather than an exponent.
    if ((text[i] == 'e' || text[i] == 'E') &&
        (i + 1 >= text.size() ||
         !(std::isdigit(static_cast<unsigned char>(text[i + 1])) || text[i + 1] == '-' || text[i + 1] == '+'))) {
      break;
    }
    ++i;
  }
  double number = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, number);
  if (i == 0 || ec != std::errc() || ptr != text.data() + i || !std::isfinite(number)) {
    out.error = "\"" + std::string(text) + "\" does not start with a number";
    return out;
  }
  std::string_view unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (unit.empty()) {
    if (number == 0) {
      out.value = 0.0;
    } else {
      out.error = "\"" + std::string(text) + "\" has no unit; a bare number is only allowed for 0";
    }
    return out;
  }
  for (const UnitEntry& u : kUnits) {
    if (u.kind == kind && unit == u.suffix) {
      const double value = number * u.factor;
      if (!std::isfinite(value)) {
        out.error = "\"" + std::string(text) + "\" is beyond the range of a double (about 1.8e308 " +
                    (kind == Quantity::Bytes       ? "bytes"
                     : kind == Quantity::Bandwidth ? "bytes/s"
                     : kind == Quantity::Time      ? "seconds"
                                                   : "FLOP/s") +
                    ")";
        return out;
      }
      out.value = value;
      return out;
    }
  }
  std::string known;
  for (const UnitEntry& u : kUnits) {
    if (u.kind == kind) known += std::string(known.empty() ? "" : ", ") + u.suffix;
  }
  out.error = "unknown unit \"" + std::string(unit) + "\" for " + to_string(kind) + "; known units: " + known;
  return out;
}

}  // namespace trainsim
