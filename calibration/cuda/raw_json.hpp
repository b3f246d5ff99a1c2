#pragma once
// Shared by the calibration programs: a checked-call macro for the CUDA
// runtime and the few helpers that write raw-measurement JSON by hand (the
// programs depend on nothing but CUDA, cuBLASLt and NCCL).
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#define CUDA_CHECK(call)                                                                                  \
  do {                                                                                                    \
    const cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) {                                                                              \
      std::fprintf(stderr, "%s:%d: CUDA error %s (%s) in %s\n", __FILE__, __LINE__, cudaGetErrorName(e_), \
                   cudaGetErrorString(e_), #call);                                                        \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

namespace rawjson {

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

inline std::string q(const std::string& s) { return "\"" + json_escape(s) + "\""; }

inline std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

inline std::string integer(double x) {  // exact for byte counts up to 2^53
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

inline std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// CUDA encodes versions as 1000 * major + 10 * minor.
inline std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

}  // namespace rawjson
