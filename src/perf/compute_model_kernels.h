// The formulas of the analytical compute model, in one place: the time of one kernel on one
// device type at one precision. The numbers they take (peak, efficiencies, compute units, tiles,
// achievable bandwidth, launch cost) come from spec::DeviceType, which device presets fill from
// their sourced table (spec/device_presets.h); nothing here is a per-device constant.
//
// GEMM C[m, n] = A[m, k] B[k, n], `batch` independent products (a strided batched GEMM):
//   The library tiles C with output tiles tm x tn (the device's list for the precision) and
//   deals the batch * ceil(m / tm) * ceil(n / tn) tiles to its U compute units in waves:
//     waves     = ceil(tiles / U)
//     tile time = 2 * tm * tn * k / (peak * gemm_efficiency / U)    (one unit's share of peak)
//     compute   = min over the tile list of waves * tile time       (it takes the fastest tile)
//   so a partly filled tile (tile quantization) and a partly filled last wave (wave
//   quantization) cost as much as full ones. With no tiles or U = 0: compute = FLOPs / (peak *
//   gemm_efficiency).
//     memory    = batch * (m k + k n + m n) * element bytes / achievable bandwidth
//     time      = launch + max(compute, memory) + (1 - gemm_overlap) * min(compute, memory)
//   (a kernel near the ridge point hides only part of its memory traffic under its math).
// Memory-bound kernel (norms, residual adds, RoPE, SwiGLU, softmax, cross-entropy, AdamW):
//     time      = launch + bytes / achievable bandwidth
// Fused (flash) attention: one kernel over the FLOPs it performs (the causal half of the
// square) at the device's attention efficiency:
//     time      = launch + max(FLOPs / (peak * attention_efficiency), bytes / achievable bw)
//
// Pure functions of value types; thread-safe.
#pragma once

#include <vector>

#include "core/units.h"
#include "spec/cluster_spec.h"

namespace motley::perf {

// What the formulas read of one device type at one precision.
struct KernelRates {
  FlopsPerSecond peak = 0;
  double gemm_efficiency = 1.0;
  double gemm_overlap = 1.0;
  double attention_efficiency = 1.0;
  int compute_units = 0;
  std::vector<spec::GemmTile> tiles;
  BytesPerSecond achievable_bandwidth = 0;
  Seconds launch_s = 0;
  double element_bytes = 4;  // of GEMM operands and activations

  // A type's rates at `precision`; a missing 16-bit peak falls back to fp32's.
  static KernelRates Of(const spec::DeviceType& type, spec::Precision precision);
};

struct GemmShape {
  double m = 0;
  double n = 0;
  double k = 0;
  double batch = 1;
  Flops flops() const { return 2.0 * m * n * k * batch; }
};

// How GemmTime timed a shape (exposed for tests and the GEMM benchmark check).
struct GemmEstimate {
  spec::GemmTile tile;  // the tile chosen ({0, 0} without quantization)
  double tiles = 0;     // output tiles over the whole batch
  double waves = 0;
  Seconds compute_s = 0;
  Seconds memory_s = 0;
  Seconds time_s = 0;  // launch + max(compute, memory) + (1 - overlap) * min(compute, memory)
};
GemmEstimate EstimateGemm(const KernelRates& rates, const GemmShape& shape);
inline Seconds GemmTime(const KernelRates& rates, const GemmShape& shape) {
  return EstimateGemm(rates, shape).time_s;
}

// A memory-bound kernel moving `bytes` (reads plus writes).
Seconds StreamTime(const KernelRates& rates, Bytes bytes);

// A fused attention kernel performing `flops` and moving `bytes`.
Seconds FusedAttentionTime(const KernelRates& rates, Flops flops, Bytes bytes);

}  // namespace motley::perf
