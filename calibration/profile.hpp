#pragma once
// The calibration profile of one GPU type: measured or spec-derived kernel
// efficiencies and collective figures, each with its provenance. The cost and
// network models read only these; no constant in the engine stands in for them.
#include <array>
#include <span>
#include <string>
#include <vector>

#include "calibration/attention_kernel.hpp"
#include "calibration/memory_kernel.hpp"
#include "topologies/embedded_file.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

// Where a value came from: "spec", "measured", "derived" or "assumed", plus a citation.
struct Provenance {
  std::string kind;
  std::string source;
  bool operator==(const Provenance&) const = default;
};

// Efficiency (fraction of peak) as a function of a size (FLOPs or bytes),
// linear in log(size) between points, clamped outside them.
class EfficiencyCurve {
 public:
  EfficiencyCurve() = default;
  explicit EfficiencyCurve(std::vector<std::pair<double, double>> points);  // (size, efficiency), size ascending
  static EfficiencyCurve constant(double efficiency) { return EfficiencyCurve({{1.0, efficiency}}); }

  double at(double size) const;
  bool empty() const { return points_.empty(); }
  const std::vector<std::pair<double, double>>& points() const { return points_; }
  bool operator==(const EfficiencyCurve&) const = default;

 private:
  std::vector<std::pair<double, double>> points_;
  std::vector<double> log_sizes_;  // log of each point's size, for at()'s interpolation
};

struct CurveEntry {
  EfficiencyCurve curve;
  Provenance provenance;
  bool operator==(const CurveEntry&) const = default;
};

struct ValueEntry {
  double value = 0;
  Provenance provenance;
  bool operator==(const ValueEntry&) const = default;
};

// Collective figures for one link class (scale-up domain or scale-out network).
struct LinkCalibration {
  // Measured bus bandwidth (nccl-tests convention) / link bandwidth vs collective
  // buffer bytes; includes latency, so no hop latency is added where a curve
  // exists. Optional; scale-up only for now.
  CurveEntry busbw_curve;       // ring (all-gather, reduce-scatter, all-reduce without NVLS)
  CurveEntry nvls_busbw_curve;  // NVLS all-reduce
  // Measured NCCL send/recv bandwidth / link bandwidth vs message bytes (what
  // pipeline stages exchange): NCCL drives a peer with few channels, so a
  // send/recv runs well below the ring bus bandwidth. Optional, scale-up only;
  // without it a send/recv runs at busbw_efficiency.
  CurveEntry p2p_curve;
  ValueEntry busbw_efficiency;       // achieved bus bandwidth / link bandwidth (ring, large messages)
  ValueEntry nvls_busbw_efficiency;  // same for NVLS all-reduce (scale-up only; 0 = no NVLS figure)
  ValueEntry latency;                // seconds per algorithm step (per hop)
  ValueEntry base_latency;           // seconds per collective launch
  bool operator==(const LinkCalibration&) const = default;
};

// Forward and backward efficiency curves of one fused-attention kernel family.
struct AttentionKernelCurves {
  CurveEntry forward;
  CurveEntry backward;  // optional: else `forward`
  // Throughput of the family's kernels with attention dropout (p > 0: the kernel draws a
  // Philox random number per score and the backward regenerates the mask) relative to the
  // curves above, which were measured without it. Optional: absent = 1 (no figure).
  ValueEntry dropout_speed = ValueEntry{1.0, {}};
  bool operator==(const AttentionKernelCurves&) const = default;
};

struct CalibrationProfile {
  std::string gpu;          // canonical GPU name the profile describes
  std::string description;  // one line: how the profile was made
  // GEMM efficiency vs FLOPs of one GEMM, per dtype (empty curve = not calibrated).
  std::array<CurveEntry, kNumDtypes> gemm;
  // Skinny-GEMM penalty: efficiency factor vs the smallest GEMM dimension.
  CurveEntry gemm_min_dim;
  // Further factor vs K for a GEMM whose reduction dimension K is its smallest: each
  // output tile runs only K / k-tile main-loop steps around a fixed prologue and
  // epilogue. Optional (empty = 1).
  CurveEntry gemm_small_k;
  // FlashAttention-2 efficiency vs FLOPs of one attention kernel.
  CurveEntry attention;
  // The same for the fused attention backward kernel (optional: else `attention`).
  CurveEntry attention_backward;
  // Throughput of the Triton FlashAttention kernel relative to the curves above
  // (optional; needed by scenarios with attention "flash-triton").
  ValueEntry triton_attention_speed;
  // Curves of the other fused-attention families (cuDNN, FlashAttention-3), indexed by
  // AttentionKernel; an empty forward curve means no figure for this GPU (optional).
  std::array<AttentionKernelCurves, kNumAttentionKernels> attention_kernels;
  // Memory-bound kernels: achieved / spec HBM bandwidth vs bytes moved.
  CurveEntry memory_bound;
  // Achieved bandwidth of a framework's memory-bound kernel implementation as a share of
  // the `memory_bound` curve at the same bytes per kernel, indexed by MemoryKernel
  // (optional; 1 = runs at the curve; Generic is always 1).
  std::array<ValueEntry, kNumMemoryKernels> memory_kernels = [] {
    std::array<ValueEntry, kNumMemoryKernels> a{};
    for (ValueEntry& e : a) e.value = 1.0;
    return a;
  }();
  ValueEntry launch_overhead;  // seconds per kernel
  // Share of the GPU's compute throughput left to kernels while a collective or
  // send/recv kernel runs beside them (NCCL's CTAs occupy SMs): (SMs - channels) / SMs.
  // Optional; 1 = no contention.
  ValueEntry compute_share_during_comm{1.0, {}};
  // The same while only send/recv between nodes run: NCCL drives a network peer with
  // NCCL_NCHANNELS_PER_NET_PEER channels, fewer than a collective's. Optional; without
  // it, compute_share_during_comm.
  ValueEntry compute_share_during_net_p2p{1.0, {}};
  // Throughput of an FP8 GEMM run with the split (periodically promoted) accumulator,
  // as FP8 training runs its backward GEMMs, relative to the `gemm.fp8` curve measured
  // with cuBLASLt's fast accumulation. Optional; 1 = no difference (no such mode).
  ValueEntry fp8_split_accumulator_speed{1.0, {}};
  // Spread of sustained speed between GPUs of this model under their default power
  // management: the standard deviation of a GPU's step time over the median GPU's, as a
  // fraction. A synchronous job waits for its slowest GPU (docs/calibration.md, "Slowest
  // GPU"). Optional; 0 = identical GPUs.
  ValueEntry gpu_speed_spread{0.0, {}};
  ValueEntry memory_reserved;  // bytes of HBM not available to tensors (CUDA context, NCCL, workspaces)
  LinkCalibration scaleup;
  LinkCalibration network;
  bool operator==(const CalibrationProfile&) const = default;  // exact, provenance included
};

// Whether `gemm_small_k` applies to an M x N x K GEMM: K is a smallest dimension and
// the GEMM is not cubic (the size curve was fitted on cubic GEMMs). The cost model and
// `trainsim calibrate fit` both ask this.
inline bool small_k_applies(double m, double n, double k) { return k <= m && k <= n && (k < m || k < n); }

// Profiles compiled into the binary (calibration/profiles/*.json).
std::span<const EmbeddedFile> calibration_profile_files();

}  // namespace trainsim
