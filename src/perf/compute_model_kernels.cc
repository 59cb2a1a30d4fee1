// See compute_model_kernels.h.
#include "perf/compute_model_kernels.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace motley::perf {

KernelRates KernelRates::Of(const spec::DeviceType& type, spec::Precision precision) {
  KernelRates r;
  r.peak = type.PeakFlops(precision);
  r.gemm_efficiency = type.GemmEfficiency(precision);
  r.gemm_overlap = type.gemm_overlap;
  r.attention_efficiency = type.AttentionEfficiency(precision);
  if (r.peak <= 0) {  // a type built in code without a 16-bit peak
    r.peak = type.peak_fp32_flops;
    r.gemm_efficiency = type.GemmEfficiency(spec::Precision::kFp32);
  }
  r.compute_units = type.compute_units;
  r.tiles = type.GemmTiles(precision);
  r.achievable_bandwidth = type.AchievableMemoryBandwidth();
  r.launch_s = type.kernel_launch_s;
  r.element_bytes = precision == spec::Precision::kFp32 ? 4.0 : 2.0;
  MOTLEY_CHECK(r.peak > 0 && r.gemm_efficiency > 0 && r.attention_efficiency > 0 &&
                   r.achievable_bandwidth > 0,
               "device type '" + type.name + "' needs a positive peak, efficiencies and bandwidth");
  return r;
}

GemmEstimate EstimateGemm(const KernelRates& rates, const GemmShape& shape) {
  MOTLEY_CHECK(shape.m > 0 && shape.n > 0 && shape.k > 0 && shape.batch > 0,
               "GEMM dimensions must be positive");
  GemmEstimate e;
  const FlopsPerSecond rate = rates.peak * rates.gemm_efficiency;
  if (rates.compute_units <= 0 || rates.tiles.empty()) {
    e.compute_s = shape.flops() / rate;
  } else {
    const double units = rates.compute_units;
    const FlopsPerSecond unit_rate = rate / units;
    e.compute_s = -1;
    for (const spec::GemmTile& tile : rates.tiles) {
      const double tiles = shape.batch * std::ceil(shape.m / tile.m) * std::ceil(shape.n / tile.n);
      const double waves = std::ceil(tiles / units);
      const Seconds t = waves * 2.0 * tile.m * tile.n * shape.k / unit_rate;
      if (e.compute_s < 0 || t < e.compute_s) {
        e.compute_s = t;
        e.tile = tile;
        e.tiles = tiles;
        e.waves = waves;
      }
    }
  }
  const Bytes bytes = shape.batch * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) *
                      rates.element_bytes;
  e.memory_s = bytes / rates.achievable_bandwidth;
  e.time_s = rates.launch_s + std::max(e.compute_s, e.memory_s) +
             (1.0 - rates.gemm_overlap) * std::min(e.compute_s, e.memory_s);
  return e;
}

Seconds StreamTime(const KernelRates& rates, Bytes bytes) {
  return rates.launch_s + bytes / rates.achievable_bandwidth;
}

Seconds FusedAttentionTime(const KernelRates& rates, Flops flops, Bytes bytes) {
  return rates.launch_s + std::max(flops / (rates.peak * rates.attention_efficiency),
                                   bytes / rates.achievable_bandwidth);
}

}  // namespace motley::perf
