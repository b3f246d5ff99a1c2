// kernel_profiler: measures what a trainsim calibration profile needs from one
// GPU, and writes it as raw JSON for `trainsim calibrate fit`:
//   - cuBLASLt GEMMs (TN layout, FP32 accumulation) over square sizes and
//     training-like / skinny shapes, per dtype: bf16, fp16, tf32, and fp8 (e4m3
//     inputs, bf16 output) where the compute capability is >= 8.9;
//   - memory-bound kernels (copy, elementwise add, a layernorm-like row
//     reduction) from 64 KiB to 1 GiB per buffer, L2-cold;
//   - kernel launch overhead (empty kernels launched back to back).
// Standalone: links the CUDA runtime and cuBLASLt only, never the simulator.
//
// Timing: CUDA events around a CUDA graph of `iters` back-to-back launches
// (iters chosen so one repeat lasts a few milliseconds), after warm-up; the
// reported time is the median over repeats divided by iters. Graphs remove the
// host's launch cost from kernel times; the launch overhead is measured
// separately with eager launches, as the cost model adds it to every kernel.
//
//   kernel_profiler [--quick | --full] [--out FILE] [--device N]
//
// Every CUDA / cuBLAS call is checked; a failure prints file:line and exits 1.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
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

#define CUBLAS_CHECK(call)                                                                                       \
  do {                                                                                                           \
    const cublasStatus_t s_ = (call);                                                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                           \
      std::fprintf(stderr, "%s:%d: cuBLAS error %s (%s) in %s\n", __FILE__, __LINE__, cublasLtGetStatusName(s_), \
                   cublasLtGetStatusString(s_), #call);                                                          \
      std::exit(1);                                                                                              \
    }                                                                                                            \
  } while (0)

namespace {

// ---------------------------------------------------------------- JSON output

using rawjson::host_name;
using rawjson::integer;
using rawjson::json_escape;
using rawjson::num;
using rawjson::q;
using rawjson::utc_now;
using rawjson::version_string;

// ---------------------------------------------------------------- kernels

__device__ __forceinline__ float hash_value(std::uint64_t i, std::uint32_t seed) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ static_cast<std::uint32_t>(i >> 32) ^ seed;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  // Uniform magnitude in [1/16, 1], random sign: never zero, representable in fp8.
  const float mag = 0.0625f + 0.9375f * static_cast<float>(h >> 9) * (1.0f / 8388608.0f);
  return (h & 1u) ? -mag : mag;
}

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float x) {
  return __nv_fp8_e4m3(x);
}

template <class T>
__global__ void init_kernel(T* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = from_float<T>(hash_value(i, seed));
  }
}

__global__ void copy_kernel(const float4* __restrict__ src, float4* __restrict__ dst, std::size_t n4) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

__global__ void add_kernel(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ c,
                           std::size_t n4) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float4 x = a[i], y = b[i];
    c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

constexpr int kRowLen = 4096;                       // floats per row of the layernorm-like kernel (16 KiB)
constexpr int kRowThreads = 256;                    // one block per row
constexpr int kRowVec = kRowLen / 4 / kRowThreads;  // float4 per thread

// y = (x - mean(x)) * rsqrt(var(x) + eps), one block per row: the access
// pattern of LayerNorm / RMSNorm (one read, one write, a block reduction).
__global__ void rownorm_kernel(const float4* __restrict__ x, float4* __restrict__ y) {
  const std::size_t row = blockIdx.x;
  const float4* in = x + row * (kRowLen / 4);
  float4* out = y + row * (kRowLen / 4);
  float4 v[kRowVec];
  float s = 0, ss = 0;
#pragma unroll
  for (int j = 0; j < kRowVec; ++j) {
    v[j] = in[threadIdx.x + j * kRowThreads];
    s += v[j].x + v[j].y + v[j].z + v[j].w;
    ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  }
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
    ss += __shfl_xor_sync(0xffffffffu, ss, o);
  }
  __shared__ float red[2][kRowThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    red[0][warp] = s;
    red[1][warp] = ss;
  }
  __syncthreads();
  s = 0;
  ss = 0;
  for (int w = 0; w < kRowThreads / 32; ++w) {
    s += red[0][w];
    ss += red[1][w];
  }
  const float mean = s / kRowLen;
  const float rstd = rsqrtf(fmaxf(ss / kRowLen - mean * mean, 0.0f) + 1e-5f);
#pragma unroll
  for (int j = 0; j < kRowVec; ++j) {
    out[threadIdx.x + j * kRowThreads] =
        make_float4((v[j].x - mean) * rstd, (v[j].y - mean) * rstd, (v[j].z - mean) * rstd, (v[j].w - mean) * rstd);
  }
}

__global__ void empty_kernel() {}

template <class T>
void fill_random(T* p, std::size_t n, std::uint32_t seed, cudaStream_t stream) {
  init_kernel<T><<<1024, 256, 0, stream>>>(p, n, seed);
  CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------- timing

struct Options {
  bool full = false;
  std::string out = "kernel_profile.json";
  int device = 0;
  int algos = 8;  // cuBLASLt heuristic candidates timed per GEMM shape; the fastest is kept
  std::string command_line;
};

struct Timer {
  cudaStream_t stream;
  cudaEvent_t start, stop;
  int repeats;
  double target_s;  // length of one timed repeat

  Timer(cudaStream_t s, int reps, double target) : stream(s), repeats(reps), target_s(target) {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }

  // Seconds per call of `launch(i)` (i = 0..iters-1 within one repeat): warm-up,
  // then the median over repeats of a CUDA graph of `iters` launches.
  template <class Launch>
  double seconds_per_call(Launch&& launch) {
    // Warm-up, eager, and a first estimate of one call.
    for (int i = 0; i < 3; ++i) launch(i);
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < 5; ++i) launch(i);
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    const double estimate = std::max(ms * 1e-3 / 5, 1e-7);
    const int iters = static_cast<int>(std::clamp(target_s / estimate, 1.0, 2000.0));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < iters; ++i) launch(i);
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up of the graph itself
    std::vector<double> samples;
    for (int r = 0; r < repeats; ++r) {
      CUDA_CHECK(cudaEventRecord(start, stream));
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      samples.push_back(ms * 1e-3 / iters);
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
  }
};

// ---------------------------------------------------------------- GEMM

struct DtypeInfo {
  const char* name;
  cudaDataType_t ab;  // A and B
  cudaDataType_t cd;  // C and D
  cublasComputeType_t compute;
  std::size_t ab_bytes, cd_bytes;
};

const DtypeInfo kDtypes[] = {
    {"bf16", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 2},
    {"fp16", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 2},
    {"tf32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 4},
    {"fp8", CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 1, 2},
};

struct Shape {
  long m, n, k;
};

struct GemmResult {
  std::string dtype;
  Shape s;
  double seconds, tflops;
};

// The reference GEMM (bf16 8192^3), timed three ways so the profile's figure can
// be set beside what a framework matmul reports: cuBLASLt's first heuristic
// algorithm and the fastest candidate, each sustained (CUDA graph, as every
// profile figure), and the fastest in a short burst of eager calls at the start.
struct GemmReference {
  bool measured = false;
  double first_algo_tflops = 0, best_tflops = 0, burst_tflops = 0;
  int candidates = 0, best_index = 0;
};

std::vector<Shape> gemm_shapes(bool full) {
  std::vector<Shape> v;
  // Square sizes: the efficiency-vs-FLOPs curve.
  const std::vector<long> squares =
      full ? std::vector<long>{512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384}
           : std::vector<long>{512, 1024, 2048, 4096, 8192};
  for (long d : squares) v.push_back({d, d, d});
  // Skinny shapes: one small dimension, the other two large enough that the
  // size curve alone would be near its plateau (the skinny-GEMM penalty).
  const std::vector<long> small =
      full ? std::vector<long>{64, 96, 128, 192, 256, 384, 512, 768} : std::vector<long>{64, 128, 256, 512};
  const long big = 8192;
  for (long d : small) {
    v.push_back({big, big, d});            // small K: e.g. attention-output or LoRA-like projections
    v.push_back({big, d, big});            // small N: a narrow output slice (tensor-parallel shard)
    if (full) v.push_back({d, big, big});  // small M: few tokens
  }
  // Training-like shapes: tokens x (hidden -> hidden / 3.5 hidden), TP shards.
  const std::vector<Shape> training =
      full ? std::vector<Shape>{{16384, 4096, 4096}, {16384, 14336, 4096}, {16384, 4096, 14336}, {16384, 1024, 8192},
                                {16384, 3584, 8192}, {16384, 8192, 3584},  {32768, 6144, 12288}, {8192, 28672, 8192}}
           : std::vector<Shape>{{16384, 4096, 4096}, {16384, 14336, 4096}, {16384, 1024, 8192}};
  v.insert(v.end(), training.begin(), training.end());
  return v;
}

// One cuBLASLt GEMM problem (TN layout, FP32 accumulation) with its buffers and
// up to `max_algos` heuristic candidates.
class GemmProblem {
 public:
  GemmProblem(cublasLtHandle_t lt, const DtypeInfo& dt, const Shape& s, void* workspace, std::size_t workspace_bytes,
              int max_algos, cudaStream_t stream)
      : lt_(lt), s_(s), workspace_(workspace), workspace_bytes_(workspace_bytes), stream_(stream) {
    const std::size_t a_n = static_cast<std::size_t>(s.k) * s.m, b_n = static_cast<std::size_t>(s.k) * s.n,
                      d_n = static_cast<std::size_t>(s.m) * s.n;
    CUDA_CHECK(cudaMalloc(&a_, a_n * dt.ab_bytes));
    CUDA_CHECK(cudaMalloc(&b_, b_n * dt.ab_bytes));
    CUDA_CHECK(cudaMalloc(&d_, d_n * dt.cd_bytes));
    switch (dt.ab) {
      case CUDA_R_16BF:
        fill_random(static_cast<__nv_bfloat16*>(a_), a_n, 1, stream);
        fill_random(static_cast<__nv_bfloat16*>(b_), b_n, 2, stream);
        break;
      case CUDA_R_16F:
        fill_random(static_cast<__half*>(a_), a_n, 1, stream);
        fill_random(static_cast<__half*>(b_), b_n, 2, stream);
        break;
      case CUDA_R_32F:
        fill_random(static_cast<float*>(a_), a_n, 1, stream);
        fill_random(static_cast<float*>(b_), b_n, 2, stream);
        break;
      default:
        fill_random(static_cast<__nv_fp8_e4m3*>(a_), a_n, 1, stream);
        fill_random(static_cast<__nv_fp8_e4m3*>(b_), b_n, 2, stream);
    }
    CUDA_CHECK(cudaMemsetAsync(d_, 0, d_n * dt.cd_bytes, stream));
    // D (m x n, column-major) = A^T B with A stored k x m and B stored k x n
    // ("TN", the layout FP8 tensor-core GEMMs require).
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, dt.compute, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la_, dt.ab, s.k, s.m, s.k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb_, dt.ab, s.k, s.n, s.k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld_, dt.cd, s.m, s.n, s.m));
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes_, sizeof workspace_bytes_));
    heur_.resize(static_cast<std::size_t>(max_algos));
    int found = 0;
    status_ = cublasLtMatmulAlgoGetHeuristic(lt_, op_, la_, lb_, ld_, ld_, pref_, max_algos, heur_.data(), &found);
    heur_.resize(status_ == CUBLAS_STATUS_SUCCESS ? static_cast<std::size_t>(found) : 0);
    // Candidates whose workspace exceeds ours, or that failed the heuristic's own check, are dropped.
    heur_.erase(std::remove_if(heur_.begin(), heur_.end(),
                               [&](const cublasLtMatmulHeuristicResult_t& h) {
                                 return h.state != CUBLAS_STATUS_SUCCESS || h.workspaceSize > workspace_bytes_;
                               }),
                heur_.end());
  }
  ~GemmProblem() {
    cublasLtMatmulPreferenceDestroy(pref_);
    cublasLtMatrixLayoutDestroy(la_);
    cublasLtMatrixLayoutDestroy(lb_);
    cublasLtMatrixLayoutDestroy(ld_);
    cublasLtMatmulDescDestroy(op_);
    cudaStreamSynchronize(stream_);
    cudaFree(a_);
    cudaFree(b_);
    cudaFree(d_);
  }
  GemmProblem(const GemmProblem&) = delete;
  GemmProblem& operator=(const GemmProblem&) = delete;

  cublasStatus_t heuristic_status() const { return status_; }
  int candidates() const { return static_cast<int>(heur_.size()); }
  double flops() const { return 2.0 * s_.m * s_.n * s_.k; }
  void launch(int algo) {
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt_, op_, &alpha, a_, la_, b_, lb_, &beta, d_, ld_, d_, ld_, &heur_[algo].algo,
                                workspace_, workspace_bytes_, stream_));
  }
  // Index of the fastest candidate, each timed with `probe` (a short timer).
  int fastest(Timer& probe) {
    int best = 0;
    double best_s = 1e300;
    for (int i = 0; i < candidates(); ++i) {
      const double t = probe.seconds_per_call([&](int) { launch(i); });
      if (t < best_s) {
        best_s = t;
        best = i;
      }
    }
    return best;
  }

 private:
  cublasLtHandle_t lt_;
  Shape s_;
  void* workspace_;
  std::size_t workspace_bytes_;
  cudaStream_t stream_;
  void *a_ = nullptr, *b_ = nullptr, *d_ = nullptr;
  cublasLtMatmulDesc_t op_{};
  cublasLtMatrixLayout_t la_{}, lb_{}, ld_{};
  cublasLtMatmulPreference_t pref_{};
  cublasStatus_t status_ = CUBLAS_STATUS_SUCCESS;
  std::vector<cublasLtMatmulHeuristicResult_t> heur_;
};

// Seconds per call of `n` eager back-to-back calls after 3 warm-up calls (a framework
// benchmark's view: short, from a GPU that has just been idle).
double burst_seconds(GemmProblem& g, int algo, int n, cudaStream_t stream) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) g.launch(algo);
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < n; ++i) g.launch(algo);
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms * 1e-3 / n;
}

void run_gemms(const Options& opt, const cudaDeviceProp& prop, cudaStream_t stream, std::vector<GemmResult>& out,
               GemmReference& ref) {
  cublasLtHandle_t lt;
  CUBLAS_CHECK(cublasLtCreate(&lt));
  // cuBLAS recommends 32 MiB of workspace on Hopper (cuBLAS docs, cublasSetWorkspace); 64 MiB leaves
  // no candidate out for lack of it.
  const std::size_t workspace_bytes = 64ull << 20;
  void* workspace = nullptr;
  CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  Timer timer(stream, opt.full ? 9 : 5, opt.full ? 20e-3 : 5e-3);
  Timer probe(stream, 3, 2e-3);  // choosing among the candidates
  const int cc = prop.major * 10 + prop.minor;

  // The reference first, from a GPU that has been idle: bf16 8192^3.
  if (cc >= 80) {
    GemmProblem g(lt, kDtypes[0], Shape{8192, 8192, 8192}, workspace, workspace_bytes, opt.algos, stream);
    if (g.candidates() > 0) {
      const int best = g.fastest(probe);
      ref.burst_tflops = g.flops() / burst_seconds(g, best, 10, stream) / 1e12;
      ref.first_algo_tflops = g.flops() / timer.seconds_per_call([&](int) { g.launch(0); }) / 1e12;
      ref.best_tflops = g.flops() / timer.seconds_per_call([&](int) { g.launch(best); }) / 1e12;
      ref.candidates = g.candidates();
      ref.best_index = best;
      ref.measured = true;
      std::printf(
          "reference gemm bf16 8192^3: %.1f TFLOP/s sustained (fastest of %d cuBLASLt candidates, #%d), "
          "%.1f with the first heuristic algorithm, %.1f in a burst of 10 eager calls\n",
          ref.best_tflops, ref.candidates, best, ref.first_algo_tflops, ref.burst_tflops);
      std::fflush(stdout);
    }
  }

  for (const DtypeInfo& dt : kDtypes) {
    const std::string name = dt.name;
    if ((name == "bf16" || name == "tf32") && cc < 80) continue;
    if (name == "fp8" && cc < 89) {
      std::fprintf(stderr, "gemm fp8: skipped (compute capability %d.%d < 8.9)\n", prop.major, prop.minor);
      continue;
    }
    for (const Shape& s : gemm_shapes(opt.full)) {
      const std::size_t need =
          (static_cast<std::size_t>(s.k) * s.m + static_cast<std::size_t>(s.k) * s.n) * dt.ab_bytes +
          static_cast<std::size_t>(s.m) * s.n * dt.cd_bytes;
      std::size_t free_b = 0, total_b = 0;
      CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      if (need + (256ull << 20) > free_b) {
        std::fprintf(stderr, "gemm %s %ldx%ldx%ld: skipped (needs %.1f GiB)\n", dt.name, s.m, s.n, s.k,
                     need / 1073741824.0);
        continue;
      }
      GemmProblem g(lt, dt, s, workspace, workspace_bytes, opt.algos, stream);
      const cublasStatus_t hs = g.heuristic_status();
      if (hs == CUBLAS_STATUS_SUCCESS && g.candidates() > 0) {
        const int best = g.candidates() > 1 ? g.fastest(probe) : 0;
        const double secs = timer.seconds_per_call([&](int) { g.launch(best); });
        out.push_back({name, s, secs, g.flops() / secs / 1e12});
        std::printf("gemm %-4s %6ld x %6ld x %6ld  %10.3f us  %8.1f TFLOP/s  (algorithm %d of %d)\n", dt.name, s.m, s.n,
                    s.k, secs * 1e6, g.flops() / secs / 1e12, best, g.candidates());
        std::fflush(stdout);
      } else if (hs == CUBLAS_STATUS_SUCCESS || hs == CUBLAS_STATUS_NOT_SUPPORTED) {
        std::fprintf(stderr, "gemm %s %ldx%ldx%ld: skipped (cuBLASLt has no algorithm for it)\n", dt.name, s.m, s.n,
                     s.k);
      } else {
        CUBLAS_CHECK(hs);
      }
    }
  }
  CUDA_CHECK(cudaFree(workspace));
  CUBLAS_CHECK(cublasLtDestroy(lt));
}

// ---------------------------------------------------------------- memory-bound

struct MemResult {
  std::string kernel;
  double bytes, seconds, gbps;
};

// Buffers are rotated over a pool of at least 4x the L2 size so every launch
// reads from HBM, as a training step's elementwise kernels mostly do.
void run_memory(const Options& opt, const cudaDeviceProp& prop, cudaStream_t stream, std::vector<MemResult>& out) {
  const std::size_t min_bytes = 64ull << 10, max_bytes_wanted = 1ull << 30;
  std::size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::size_t max_bytes = max_bytes_wanted;
  while (max_bytes > min_bytes && 3 * max_bytes + (512ull << 20) > free_b) max_bytes /= 2;
  int l2 = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, opt.device));
  const std::size_t pool_bytes = std::max<std::size_t>(3 * max_bytes, 4ull * static_cast<std::size_t>(l2));
  char* pool = nullptr;
  CUDA_CHECK(cudaMalloc(&pool, pool_bytes));
  fill_random(reinterpret_cast<float*>(pool), pool_bytes / sizeof(float), 3, stream);
  Timer timer(stream, opt.full ? 9 : 5, opt.full ? 10e-3 : 3e-3);
  const int grid_cap = prop.multiProcessorCount * 16;
  const int threads = 256;

  const std::size_t step = opt.full ? 2 : 4;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= step) {
    const std::size_t n4 = bytes / sizeof(float4);
    const int grid = static_cast<int>(std::min<std::size_t>((n4 + threads - 1) / threads, grid_cap));
    struct Kernel {
      const char* name;
      int buffers;  // arrays of `bytes` each touched by one launch
    };
    for (const Kernel k : {Kernel{"copy", 2}, Kernel{"add", 3}, Kernel{"rownorm", 2}}) {
      const std::size_t set = k.buffers * bytes;
      const std::size_t slots = std::max<std::size_t>(1, std::min<std::size_t>(pool_bytes / set, 4096));
      auto buf = [&](int i, int which) {
        return reinterpret_cast<float4*>(pool + (static_cast<std::size_t>(i) % slots) * set + which * bytes);
      };
      double secs = 0;
      const std::string name = k.name;
      if (name == "copy") {
        secs = timer.seconds_per_call([&](int i) {
          copy_kernel<<<grid, threads, 0, stream>>>(buf(i, 0), buf(i, 1), n4);
          CUDA_CHECK(cudaGetLastError());
        });
      } else if (name == "add") {
        secs = timer.seconds_per_call([&](int i) {
          add_kernel<<<grid, threads, 0, stream>>>(buf(i, 0), buf(i, 1), buf(i, 2), n4);
          CUDA_CHECK(cudaGetLastError());
        });
      } else {
        const unsigned rows = static_cast<unsigned>(bytes / (kRowLen * sizeof(float)));
        secs = timer.seconds_per_call([&](int i) {
          rownorm_kernel<<<rows, kRowThreads, 0, stream>>>(buf(i, 0), buf(i, 1));
          CUDA_CHECK(cudaGetLastError());
        });
      }
      const double moved = static_cast<double>(k.buffers) * bytes;  // bytes read + written
      out.push_back({name, moved, secs, moved / secs / 1e9});
      std::printf("memory %-7s %12.0f B moved  %10.3f us  %8.1f GB/s\n", k.name, moved, secs * 1e6, moved / secs / 1e9);
      std::fflush(stdout);
    }
  }
  CUDA_CHECK(cudaFree(pool));
}

// ---------------------------------------------------------------- launch overhead

// Seconds per launch of an empty kernel launched eagerly back to back: the
// gap the cost model adds to every kernel.
double launch_overhead(cudaStream_t stream, int repeats) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int kLaunches = 2000;
  for (int i = 0; i < 200; ++i) empty_kernel<<<1, 1, 0, stream>>>();
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kLaunches; ++i) empty_kernel<<<1, 1, 0, stream>>>();
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms * 1e-3 / kLaunches);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// ---------------------------------------------------------------- main

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--quick | --full] [--out FILE] [--device N] [--algos N]\n"
      "  --quick     small grid (default; sized for under 2 minutes on an H100)\n"
      "  --full      the full grid (square 512..16384, skinny and training-like shapes, memory sizes x2)\n"
      "  --out FILE  raw JSON output (default kernel_profile.json)\n"
      "  --device N  CUDA device to measure (default 0)\n"
      "  --algos N   cuBLASLt heuristic algorithms timed per GEMM, the fastest kept (default 8; 1 = the first)\n",
      argv0);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 0; i < argc; ++i) opt.command_line += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      opt.full = false;
    } else if (a == "--full") {
      opt.full = true;
    } else if (a == "--out" && i + 1 < argc) {
      opt.out = argv[++i];
    } else if (a == "--device" && i + 1 < argc) {
      opt.device = std::atoi(argv[++i]);
    } else if (a == "--algos" && i + 1 < argc) {
      opt.algos = std::atoi(argv[++i]);
      if (opt.algos < 1 || opt.algos > 64) {
        std::fprintf(stderr, "kernel_profiler: --algos %s: expected 1..64\n", argv[i]);
        return 2;
      }
    } else if (a == "--help" || a == "-h") {
      usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "kernel_profiler: unknown or incomplete argument '%s'\n", a.c_str());
      usage(argv[0]);
      return 2;
    }
  }

  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  if (opt.device < 0 || opt.device >= count) {
    std::fprintf(stderr, "kernel_profiler: --device %d: this host has %d CUDA device(s)\n", opt.device, count);
    return 2;
  }
  CUDA_CHECK(cudaSetDevice(opt.device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, opt.device));
  int driver = 0, runtime = 0, sm_clock_khz = 0, mem_clock_khz = 0, bus_bits = 0, l2 = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_clock_khz, cudaDevAttrClockRate, opt.device));
  CUDA_CHECK(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, opt.device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, opt.device));
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, opt.device));
  const std::size_t cublas_version = cublasLtGetVersion();
  std::printf("kernel_profiler: %s (sm %d.%d, %d SMs), %s grid\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, opt.full ? "full" : "quick");

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double launch_s = launch_overhead(stream, opt.full ? 9 : 5);
  std::printf("launch overhead %.3f us\n", launch_s * 1e6);
  std::vector<GemmResult> gemms;
  GemmReference ref;
  run_gemms(opt, prop, stream, gemms, ref);
  std::vector<MemResult> mems;
  run_memory(opt, prop, stream, mems);
  CUDA_CHECK(cudaStreamDestroy(stream));

  std::string j = "{\n  \"kind\": \"kernel_profile\",\n  \"provenance\": {\n";
  j += "    \"gpu\": " + q(prop.name) + ",\n";
  j += "    \"sm_count\": " + std::to_string(prop.multiProcessorCount) + ",\n";
  j += "    \"compute_capability\": " + q(std::to_string(prop.major) + "." + std::to_string(prop.minor)) + ",\n";
  j += "    \"memory_bytes\": " + integer(static_cast<double>(prop.totalGlobalMem)) + ",\n";
  j += "    \"driver_version\": " + q(version_string(driver)) + ",\n";
  j += "    \"runtime_version\": " + q(version_string(runtime)) + ",\n";
  j += "    \"cublas_version\": " +
       q(std::to_string(cublas_version / 10000) + "." + std::to_string((cublas_version / 100) % 100) + "." +
         std::to_string(cublas_version % 100)) +
       ",\n";
  j += "    \"date\": " + q(utc_now()) + ",\n";
  j += "    \"command\": " + q(opt.command_line) + ",\n";
  j += "    \"hostname\": " + q(host_name()) + ",\n";
  j += "    \"grid\": " + q(opt.full ? "full" : "quick") + ",\n";
  j += "    \"method\": " +
       q("CUDA events around a CUDA graph of back-to-back launches, warm-up, median of repeats; cuBLASLt TN "
         "GEMMs with FP32 accumulation (fp8: e4m3 inputs, bf16 output), the fastest of up to " +
         std::to_string(opt.algos) +
         " heuristic algorithms per shape; memory kernels L2-cold; launch overhead from eager empty-kernel "
         "launches") +
       "\n  },\n";
  j += "  \"gemm\": [";
  for (std::size_t i = 0; i < gemms.size(); ++i) {
    const auto& g = gemms[i];
    j += std::string(i ? "," : "") + "\n    {\"dtype\": " + q(g.dtype) + ", \"m\": " + std::to_string(g.s.m) +
         ", \"n\": " + std::to_string(g.s.n) + ", \"k\": " + std::to_string(g.s.k) +
         ", \"seconds\": " + num(g.seconds) + ", \"tflops\": " + num(g.tflops) + "}";
  }
  j += "\n  ],\n  \"memory\": [";
  for (std::size_t i = 0; i < mems.size(); ++i) {
    const auto& m = mems[i];
    j += std::string(i ? "," : "") + "\n    {\"kernel\": " + q(m.kernel) + ", \"bytes\": " + integer(m.bytes) +
         ", \"seconds\": " + num(m.seconds) + ", \"gbps\": " + num(m.gbps) + "}";
  }
  j += "\n  ],\n";
  j += "  \"launch_overhead_s\": " + num(launch_s) + ",\n";
  if (ref.measured) {
    j += "  \"reference_gemm\": {\"dtype\": \"bf16\", \"m\": 8192, \"n\": 8192, \"k\": 8192, \"tflops\": " +
         num(ref.best_tflops) + ", \"first_algorithm_tflops\": " + num(ref.first_algo_tflops) +
         ", \"burst_tflops\": " + num(ref.burst_tflops) + ", \"candidates\": " + std::to_string(ref.candidates) +
         "},\n";
  }
  j += "  \"peaks\": {\"sm_clock_mhz\": " + num(sm_clock_khz / 1e3) +
       ", \"memory_clock_mhz\": " + num(mem_clock_khz / 1e3) +
       ", \"memory_bus_width_bits\": " + std::to_string(bus_bits) +
       ", \"memory_bandwidth_gbps\": " + num(2.0 * mem_clock_khz * 1e3 * bus_bits / 8 / 1e9) +
       ", \"l2_cache_bytes\": " + std::to_string(l2) + "}\n}\n";

  FILE* f = std::fopen(opt.out.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "kernel_profiler: --out %s: cannot write the file (%s)\n", opt.out.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const bool ok = std::fputs(j.c_str(), f) >= 0;
  if (std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "kernel_profiler: --out %s: write failed\n", opt.out.c_str());
    return 1;
  }
  std::printf("kernel_profiler: wrote %s (%zu GEMMs, %zu memory points)\n", opt.out.c_str(), gemms.size(), mems.size());
  return 0;
}
