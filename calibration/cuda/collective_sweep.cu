// collective_sweep: NCCL collective bandwidth on all GPUs of one host (one
// process, ncclCommInitAll, one stream per GPU), written as raw JSON for
// `trainsim calibrate fit`. Measures all-reduce, all-gather, reduce-scatter,
// all-to-all (grouped send/recv) and send/recv (each GPU sends to the next,
// receives from the previous, as nccl-tests' sendrecv) on float data,
// out-of-place, over sizes 1 KiB..8 GiB (--quick: up to 1 GiB, fewer points).
//
// Sizes and bandwidths follow nccl-tests (doc/PERFORMANCE.md): `bytes` is the
// all-reduce buffer, the all-gather output, the reduce-scatter input, the
// all-to-all send buffer and the send/recv message; algbw = bytes / time and
// busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter,
// all-to-all) or 1 (send/recv).
//
// Timing: warm-up, then per repeat CUDA events on every GPU's stream around
// `iters` back-to-back operations; the time of a repeat is the slowest GPU's,
// the reported time the median over repeats divided by iters.
//
//   collective_sweep [--quick | --full] [--out FILE]
//
// Fewer than two GPUs: prints why and exits 0 without writing a file.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "raw_json.hpp"

#define NCCL_CHECK(call)                                                                                  \
  do {                                                                                                    \
    const ncclResult_t r_ = (call);                                                                       \
    if (r_ != ncclSuccess) {                                                                              \
      std::fprintf(stderr, "%s:%d: NCCL error %d (%s) in %s\n", __FILE__, __LINE__, static_cast<int>(r_), \
                   ncclGetErrorString(r_), #call);                                                        \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

namespace {

using rawjson::host_name;
using rawjson::integer;
using rawjson::json_escape;
using rawjson::num;
using rawjson::q;
using rawjson::utc_now;
using rawjson::version_string;

__global__ void init_kernel(float* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ static_cast<std::uint32_t>(i >> 32) ^ seed;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    const float mag = 0.0625f + 0.9375f * static_cast<float>(h >> 9) * (1.0f / 8388608.0f);
    p[i] = (h & 1u) ? -mag : mag;
  }
}

enum class Coll { AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv };

const char* name_of(Coll c) {
  switch (c) {
    case Coll::AllReduce:
      return "all_reduce";
    case Coll::AllGather:
      return "all_gather";
    case Coll::ReduceScatter:
      return "reduce_scatter";
    case Coll::AllToAll:
      return "all_to_all";
    case Coll::SendRecv:
      return "sendrecv";
  }
  return "?";
}

double bus_factor(Coll c, int n) {
  switch (c) {
    case Coll::AllReduce:
      return 2.0 * (n - 1) / n;
    case Coll::AllGather:
    case Coll::ReduceScatter:
    case Coll::AllToAll:
      return static_cast<double>(n - 1) / n;
    case Coll::SendRecv:
      return 1.0;
  }
  return 1.0;
}

struct Rank {
  int device = 0;
  cudaStream_t stream{};
  ncclComm_t comm{};
  float* send = nullptr;
  float* recv = nullptr;
  cudaEvent_t start{}, stop{};
};

// Issues one operation of `elems` floats per rank (the buffer in nccl-tests'
// sense, already rounded to a multiple of the rank count) on every GPU.
void issue(Coll c, std::vector<Rank>& ranks, std::size_t elems) {
  const int n = static_cast<int>(ranks.size());
  NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    Rank& k = ranks[r];
    switch (c) {
      case Coll::AllReduce:
        NCCL_CHECK(ncclAllReduce(k.send, k.recv, elems, ncclFloat, ncclSum, k.comm, k.stream));
        break;
      case Coll::AllGather:
        NCCL_CHECK(ncclAllGather(k.send, k.recv, elems / n, ncclFloat, k.comm, k.stream));
        break;
      case Coll::ReduceScatter:
        NCCL_CHECK(ncclReduceScatter(k.send, k.recv, elems / n, ncclFloat, ncclSum, k.comm, k.stream));
        break;
      case Coll::AllToAll: {
        const std::size_t chunk = elems / n;
        for (int p = 0; p < n; ++p) {
          NCCL_CHECK(ncclSend(k.send + p * chunk, chunk, ncclFloat, p, k.comm, k.stream));
          NCCL_CHECK(ncclRecv(k.recv + p * chunk, chunk, ncclFloat, p, k.comm, k.stream));
        }
        break;
      }
      case Coll::SendRecv:
        NCCL_CHECK(ncclSend(k.send, elems, ncclFloat, (r + 1) % n, k.comm, k.stream));
        NCCL_CHECK(ncclRecv(k.recv, elems, ncclFloat, (r + n - 1) % n, k.comm, k.stream));
        break;
    }
  }
  NCCL_CHECK(ncclGroupEnd());
}

void sync_all(std::vector<Rank>& ranks) {
  for (Rank& k : ranks) {
    CUDA_CHECK(cudaSetDevice(k.device));
    CUDA_CHECK(cudaStreamSynchronize(k.stream));
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(k.comm, &async));
    NCCL_CHECK(async);
  }
}

// Seconds of `iters` operations: the slowest GPU's elapsed time.
double timed(Coll c, std::vector<Rank>& ranks, std::size_t elems, int iters) {
  for (Rank& k : ranks) {
    CUDA_CHECK(cudaSetDevice(k.device));
    CUDA_CHECK(cudaEventRecord(k.start, k.stream));
  }
  for (int i = 0; i < iters; ++i) issue(c, ranks, elems);
  for (Rank& k : ranks) {
    CUDA_CHECK(cudaSetDevice(k.device));
    CUDA_CHECK(cudaEventRecord(k.stop, k.stream));
  }
  sync_all(ranks);
  double worst = 0;
  for (Rank& k : ranks) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, k.start, k.stop));
    worst = std::max(worst, ms * 1e-3);
  }
  return worst;
}

struct Result {
  Coll coll;
  double bytes, seconds, algbw, busbw;
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--quick | --full] [--out FILE]\n"
      "  --quick     1 KiB..1 GiB in steps of 4x (default)\n"
      "  --full      1 KiB..8 GiB in steps of 2x (capped by free GPU memory)\n"
      "  --out FILE  raw JSON output (default collective_sweep.json)\n",
      argv0);
}

}  // namespace

int main(int argc, char** argv) {
  bool full = false;
  std::string out_path = "collective_sweep.json", command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      full = false;
    } else if (a == "--full") {
      full = true;
    } else if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (a == "--help" || a == "-h") {
      usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "collective_sweep: unknown or incomplete argument '%s'\n", a.c_str());
      usage(argv[0]);
      return 2;
    }
  }

  int n = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&n);
  if (count_err != cudaSuccess) n = 0;
  if (n < 2) {
    std::printf("collective_sweep: %d GPU(s) on this host; collectives need at least 2: skipped\n", n);
    return 0;
  }

  std::vector<Rank> ranks(n);
  std::vector<int> devs(n);
  std::vector<std::string> names;
  std::size_t min_free = SIZE_MAX;
  for (int r = 0; r < n; ++r) {
    devs[r] = r;
    ranks[r].device = r;
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, r));
    names.emplace_back(prop.name);
    CUDA_CHECK(cudaSetDevice(r));
    std::size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    min_free = std::min(min_free, free_b);
  }
  std::vector<ncclComm_t> comms(n);
  NCCL_CHECK(ncclCommInitAll(comms.data(), n, devs.data()));

  // Largest buffer: 8 GiB (full) or 1 GiB (quick), halved until send + receive
  // buffers and NCCL's own memory fit on every GPU.
  const std::size_t min_bytes = 1ull << 10;
  std::size_t max_bytes = full ? (8ull << 30) : (1ull << 30);
  while (max_bytes > min_bytes && 2 * max_bytes + (2ull << 30) > min_free) max_bytes /= 2;
  for (int r = 0; r < n; ++r) {
    Rank& k = ranks[r];
    k.comm = comms[r];
    CUDA_CHECK(cudaSetDevice(r));
    CUDA_CHECK(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&k.start));
    CUDA_CHECK(cudaEventCreate(&k.stop));
    CUDA_CHECK(cudaMalloc(&k.send, max_bytes));
    CUDA_CHECK(cudaMalloc(&k.recv, max_bytes));
    init_kernel<<<1024, 256, 0, k.stream>>>(k.send, max_bytes / sizeof(float), 17u + r);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemsetAsync(k.recv, 0, max_bytes, k.stream));
  }
  sync_all(ranks);

  int nccl_version = 0, driver = 0, runtime = 0;
  NCCL_CHECK(ncclGetVersion(&nccl_version));
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::printf("collective_sweep: %d x %s, NCCL %d, %s sweep up to %zu MiB\n", n, names[0].c_str(), nccl_version,
              full ? "full" : "quick", max_bytes >> 20);

  const int repeats = full ? 9 : 5;
  const double target_s = full ? 20e-3 : 5e-3;
  const std::size_t step = full ? 2 : 4;
  std::vector<Result> results;
  for (Coll c : {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::AllToAll, Coll::SendRecv}) {
    for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= step) {
      std::size_t elems = bytes / sizeof(float);
      if (c != Coll::SendRecv && c != Coll::AllReduce) elems -= elems % n;
      if (elems == 0) continue;
      // Warm-up, then an estimate of one operation to size the timed batches.
      for (int i = 0; i < 3; ++i) issue(c, ranks, elems);
      sync_all(ranks);
      const double estimate = std::max(timed(c, ranks, elems, 3) / 3, 1e-6);
      const int iters = static_cast<int>(std::clamp(target_s / estimate, 1.0, 500.0));
      std::vector<double> samples;
      for (int rep = 0; rep < repeats; ++rep) samples.push_back(timed(c, ranks, elems, iters) / iters);
      std::sort(samples.begin(), samples.end());
      const double secs = samples[samples.size() / 2];
      const double b = static_cast<double>(elems) * sizeof(float);
      const double algbw = b / secs / 1e9;
      results.push_back({c, b, secs, algbw, algbw * bus_factor(c, n)});
      std::printf("%-14s %14.0f B  %10.2f us  algbw %8.2f GB/s  busbw %8.2f GB/s\n", name_of(c), b, secs * 1e6, algbw,
                  algbw * bus_factor(c, n));
      std::fflush(stdout);
    }
  }

  for (Rank& k : ranks) {
    CUDA_CHECK(cudaSetDevice(k.device));
    CUDA_CHECK(cudaFree(k.send));
    CUDA_CHECK(cudaFree(k.recv));
    CUDA_CHECK(cudaEventDestroy(k.start));
    CUDA_CHECK(cudaEventDestroy(k.stop));
    CUDA_CHECK(cudaStreamDestroy(k.stream));
    NCCL_CHECK(ncclCommDestroy(k.comm));
  }

  std::string env;
  for (const char* var :
       {"NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_P2P_LEVEL", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"}) {
    if (const char* v = std::getenv(var)) env += std::string(env.empty() ? "" : " ") + var + "=" + v;
  }
  std::string j = "{\n  \"kind\": \"collective_sweep\",\n  \"provenance\": {\n";
  j += "    \"gpu\": " + q(names[0]) + ",\n";
  j += "    \"gpus\": [";
  for (int r = 0; r < n; ++r) j += std::string(r ? ", " : "") + q(names[r]);
  j += "],\n";
  j += "    \"nccl_version\": " +
       q(std::to_string(nccl_version / 10000) + "." + std::to_string((nccl_version / 100) % 100) + "." +
         std::to_string(nccl_version % 100)) +
       ",\n";
  j += "    \"driver_version\": " + q(version_string(driver)) + ",\n";
  j += "    \"runtime_version\": " + q(version_string(runtime)) + ",\n";
  j += "    \"date\": " + q(utc_now()) + ",\n";
  j += "    \"command\": " + q(command) + ",\n";
  j += "    \"hostname\": " + q(host_name()) + ",\n";
  j += "    \"nccl_env\": " + q(env) + ",\n";
  j += "    \"method\": " +
       q("single process, ncclCommInitAll, one stream per GPU, float, out-of-place; CUDA events per GPU, slowest "
         "GPU, median of repeats; algbw/busbw as nccl-tests") +
       "\n  },\n  \"results\": [";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    j += std::string(i ? "," : "") + "\n    {\"collective\": " + q(name_of(r.coll)) +
         ", \"bytes\": " + integer(r.bytes) + ", \"ranks\": " + std::to_string(n) + ", \"seconds\": " + num(r.seconds) +
         ", \"algbw_gbps\": " + num(r.algbw) + ", \"busbw_gbps\": " + num(r.busbw) + "}";
  }
  j += "\n  ]\n}\n";

  FILE* f = std::fopen(out_path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "collective_sweep: --out %s: cannot write the file (%s)\n", out_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const bool ok = std::fputs(j.c_str(), f) >= 0;
  if (std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "collective_sweep: --out %s: write failed\n", out_path.c_str());
    return 1;
  }
  std::printf("collective_sweep: wrote %s (%zu points)\n", out_path.c_str(), results.size());
  return 0;
}
