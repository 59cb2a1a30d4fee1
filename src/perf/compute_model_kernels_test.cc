// Tests of the kernel formulas (compute_model_kernels.h) against hand-computed times: tile and
// wave quantization of GEMMs, the library's tile choice, the memory side and its overlap, the
// launch cost, memory-bound and fused-attention kernels, and the rates read from a device type.
#include "perf/compute_model_kernels.h"

#include <gtest/gtest.h>

#include "spec/device_presets.h"

namespace motley::perf {
namespace {

// A made-up device with round numbers: 4 compute units sharing 100 TFLOP/s at efficiency 0.5
// (12.5 TFLOP/s per unit), one 128x128 tile, 1 TB/s, no launch cost, a pure roofline.
KernelRates RoundDevice() {
  KernelRates r;
  r.peak = 100e12;
  r.gemm_efficiency = 0.5;
  r.attention_efficiency = 0.25;
  r.compute_units = 4;
  r.tiles = {{128, 128}};
  r.achievable_bandwidth = 1e12;
  r.launch_s = 0;
  r.element_bytes = 2;
  return r;
}

// One 128x128 tile over K = 1024 on one unit: 2 * 128 * 128 * 1024 / 12.5e12 s.
constexpr double kTileSeconds = 2.0 * 128 * 128 * 1024 / 12.5e12;

TEST(GemmTimeTest, FullWaveRunsAtTheEfficiency) {
  // 256 x 256: 2 x 2 = 4 tiles, one full wave = FLOPs / (peak * efficiency).
  const GemmEstimate e = EstimateGemm(RoundDevice(), {256, 256, 1024, 1});
  EXPECT_DOUBLE_EQ(e.tiles, 4);
  EXPECT_DOUBLE_EQ(e.waves, 1);
  EXPECT_DOUBLE_EQ(e.compute_s, kTileSeconds);
  EXPECT_NEAR(e.compute_s, 2.0 * 256 * 256 * 1024 / 50e12, 1e-18);
  // Memory: (256*1024 + 1024*256 + 256*256) * 2 bytes at 1 TB/s, below the compute time.
  EXPECT_DOUBLE_EQ(e.memory_s, (256.0 * 1024 + 1024 * 256 + 256 * 256) * 2 / 1e12);
  EXPECT_DOUBLE_EQ(e.time_s, kTileSeconds);
}

TEST(GemmTimeTest, TileAndWaveQuantization) {
  const KernelRates r = RoundDevice();
  // One row more: 3 x 2 = 6 tiles (tile quantization), 2 waves on 4 units (wave quantization):
  // twice the time of 256 x 256 for 0.4% more work.
  EXPECT_DOUBLE_EQ(EstimateGemm(r, {257, 256, 1024, 1}).tiles, 6);
  EXPECT_DOUBLE_EQ(GemmTime(r, {257, 256, 1024, 1}), 2 * kTileSeconds);
  // 512 x 256 fills those 2 waves exactly: same time, twice the work.
  EXPECT_DOUBLE_EQ(GemmTime(r, {512, 256, 1024, 1}), 2 * kTileSeconds);
  // 5 x 2 = 10 tiles: 3 waves, the last half full.
  EXPECT_DOUBLE_EQ(GemmTime(r, {640, 256, 1024, 1}), 3 * kTileSeconds);
  // A tiny GEMM still costs a whole tile.
  EXPECT_DOUBLE_EQ(GemmTime(r, {8, 8, 1024, 1}), kTileSeconds);
  // Batched: 5 products of one tile each = 5 tiles, 2 waves.
  const GemmEstimate batched = EstimateGemm(r, {128, 128, 1024, 5});
  EXPECT_DOUBLE_EQ(batched.tiles, 5);
  EXPECT_DOUBLE_EQ(batched.time_s, 2 * kTileSeconds);
}

TEST(GemmTimeTest, LibraryTakesTheFastestTile) {
  KernelRates r = RoundDevice();
  r.tiles = {{128, 128}, {64, 64}};
  // 256 x 128: 128x128 gives 2 tiles in one wave (one tile time); 64x64 gives 8 tiles in 2
  // waves of quarter-size tiles (half a tile time): 64x64 wins.
  const GemmEstimate e = EstimateGemm(r, {256, 128, 1024, 1});
  EXPECT_EQ(e.tile, (spec::GemmTile{64, 64}));
  EXPECT_DOUBLE_EQ(e.waves, 2);
  EXPECT_DOUBLE_EQ(e.time_s, 0.5 * kTileSeconds);
  // 512 x 512: 16 big tiles (4 waves, 4 tile times) vs 64 small ones (16 waves, 4 tile times):
  // a tie keeps the first listed.
  EXPECT_EQ(EstimateGemm(r, {512, 512, 1024, 1}).tile, (spec::GemmTile{128, 128}));
  EXPECT_DOUBLE_EQ(GemmTime(r, {512, 512, 1024, 1}), 4 * kTileSeconds);
}

TEST(GemmTimeTest, WithoutUnitsOrTilesThereIsNoQuantization) {
  KernelRates r = RoundDevice();
  r.compute_units = 0;
  EXPECT_DOUBLE_EQ(GemmTime(r, {257, 256, 1024, 1}), 2.0 * 257 * 256 * 1024 / 50e12);
  r = RoundDevice();
  r.tiles.clear();
  EXPECT_DOUBLE_EQ(GemmTime(r, {257, 256, 1024, 1}), 2.0 * 257 * 256 * 1024 / 50e12);
}

TEST(GemmTimeTest, MemoryBoundShapesAndOverlap) {
  KernelRates r = RoundDevice();
  // 4096 x 4096 x 8: 1024 tiles of K = 8 (256 waves of 2*128*128*8 / 12.5e12) against
  // (4096*8*2 + 4096^2) * 2 bytes at 1 TB/s.
  const double compute = 256 * 2.0 * 128 * 128 * 8 / 12.5e12;
  const double memory = (4096.0 * 8 * 2 + 4096.0 * 4096) * 2 / 1e12;
  ASSERT_GT(memory, compute);
  EXPECT_DOUBLE_EQ(GemmTime(r, {4096, 4096, 8, 1}), memory);
  // Overlap 0.25: three quarters of the shorter side adds up.
  r.gemm_overlap = 0.25;
  EXPECT_DOUBLE_EQ(GemmTime(r, {4096, 4096, 8, 1}), memory + 0.75 * compute);
  // And on a compute-bound shape the memory side is the shorter one.
  const double mem256 = (256.0 * 1024 + 1024 * 256 + 256 * 256) * 2 / 1e12;
  EXPECT_DOUBLE_EQ(GemmTime(r, {256, 256, 1024, 1}), kTileSeconds + 0.75 * mem256);
}

TEST(KernelTimeTest, LaunchCostIsPaidByEveryKernel) {
  KernelRates r = RoundDevice();
  r.launch_s = 5e-6;
  EXPECT_DOUBLE_EQ(GemmTime(r, {256, 256, 1024, 1}), 5e-6 + kTileSeconds);
  EXPECT_DOUBLE_EQ(StreamTime(r, 0), 5e-6);
  EXPECT_DOUBLE_EQ(StreamTime(r, 3e9), 5e-6 + 3e-3);
  // Fused attention: the larger of FLOPs at the attention efficiency and bytes.
  EXPECT_DOUBLE_EQ(FusedAttentionTime(r, 25e12, 1e9), 5e-6 + 1.0);
  EXPECT_DOUBLE_EQ(FusedAttentionTime(r, 1e9, 2e12), 5e-6 + 2.0);
}

TEST(KernelRatesTest, ReadsTheDeviceTypeAtThePrecision) {
  const spec::DeviceType a100 = *spec::PresetDeviceType("a100-80g");
  const KernelRates fp16 = KernelRates::Of(a100, spec::Precision::kFp16);
  EXPECT_DOUBLE_EQ(fp16.peak, a100.peak_fp16_flops);
  EXPECT_DOUBLE_EQ(fp16.element_bytes, 2);
  EXPECT_EQ(fp16.compute_units, a100.compute_units);
  EXPECT_EQ(fp16.tiles, a100.GemmTiles(spec::Precision::kFp16));
  EXPECT_DOUBLE_EQ(fp16.achievable_bandwidth, a100.achievable_memory_bandwidth);
  EXPECT_DOUBLE_EQ(fp16.launch_s, a100.kernel_launch_s);
  const KernelRates fp32 = KernelRates::Of(a100, spec::Precision::kFp32);
  EXPECT_DOUBLE_EQ(fp32.peak, 19.5e12);
  EXPECT_DOUBLE_EQ(fp32.element_bytes, 4);
  // A type written without calibration is an ideal roofline on its own figures.
  spec::DeviceType plain;
  plain.name = "plain";
  plain.peak_fp32_flops = 1e12;
  plain.peak_bf16_flops = 2e12;
  plain.memory_bandwidth = 1e11;
  const KernelRates p = KernelRates::Of(plain, spec::Precision::kBf16);
  EXPECT_DOUBLE_EQ(p.peak, 2e12);
  EXPECT_DOUBLE_EQ(p.gemm_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(p.achievable_bandwidth, 1e11);
  EXPECT_DOUBLE_EQ(p.launch_s, 0);
  EXPECT_DOUBLE_EQ(GemmTime(p, {1000, 1000, 1000, 1}), 2e9 / 2e12);
}

}  // namespace
}  // namespace motley::perf
