// The ranges every size, count and physical quantity of a spec file (and of the command line) is
// checked against at validation (issue 17), in one place so that the parsers, the CLI and the docs
// (docs/formats/*.md, "Ranges") agree. The bounds are not tuned to any case: each is far beyond
// any real system (the source of the comparison is given) and small enough that every product the
// predictor, the simulator and the runtime form from validated values stays exact in int64 and
// finite in double. Counts are int64; products of counts are checked with core/checked_math.h.
// Error messages and docs spell some bounds out ("[1 MiB, 1 PiB]"); keep them in step.
#pragma once

#include <cstdint>

namespace motley::spec {

// Model (ModelSpec). Llama 3.1 405B: 126 blocks, hidden 16384, F 53248, 128 heads, vocabulary
// 128256, context 128Ki (Meta, "The Llama 3 Herd of Models", 2024, Table 3).
inline constexpr int64_t kMaxBlocks = int64_t{1} << 16;
inline constexpr int64_t kMaxHidden = int64_t{1} << 20;
inline constexpr int64_t kMaxFfnHidden = int64_t{1} << 22;
inline constexpr int64_t kMaxHeads = int64_t{1} << 16;
// Token ids are int32 (train/token_file.h): ids 0 .. 2^31 - 1.
inline constexpr int64_t kMaxVocab = int64_t{1} << 31;
// Sequence length: 2^24 = 16Mi tokens, 128x Llama 3's 128Ki context; T * T (the attention
// probabilities per head) then stays below 2^48.
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;
// Total parameters: 2^48 = 2.8e14, 700x the 405B model; 16 bytes of training state per parameter
// (value, gradient, two AdamW moments in f32) then stay below 2^52 bytes.
inline constexpr int64_t kMaxParams = int64_t{1} << 48;

// Training (TrainSpec). Tokens per step (global_batch * seq_len): 2^40 = 1.1e12; Llama 3 trained
// with 16Mi = 2^24.
inline constexpr int64_t kMaxTokensPerStep = int64_t{1} << 40;
// Steps and the tokens of the whole run (steps * tokens per step): 2^40 steps, 2^60 tokens
// (Llama 3 405B: about 1e6 steps, 15.6e12 ~ 2^44 tokens), so consumed-sample counts fit int64.
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;
inline constexpr int64_t kMaxRunTokens = int64_t{1} << 60;
// CPU threads per rank: libgomp cannot create 100000 threads and hangs (issue 17); 1024 is 4x the
// largest CPU sockets sold today (256 hardware threads).
inline constexpr int64_t kMaxThreads = 1024;

// Cluster (ClusterSpec). Devices and nodes of one cluster: xAI Colossus has 100k-200k GPUs (2024)
// -> 2^20 devices, 2^17 nodes.
inline constexpr int64_t kMaxDevices = int64_t{1} << 20;
inline constexpr int64_t kMaxNodes = int64_t{1} << 17;
// Device memory: [1 MiB, 1 PiB]; the largest accelerator has 288 GB (AMD MI355X, 2025).
inline constexpr double kMinMemoryBytes = 1024.0 * 1024.0;
inline constexpr double kMaxMemoryBytes = 1125899906842624.0;  // 2^50
// Compute rates: [1 MFLOP/s, 1 EFLOP/s] per device; NVIDIA B200 is 2.25e15 dense bf16 FLOP/s.
inline constexpr double kMinFlopsPerSecond = 1e6;
inline constexpr double kMaxFlopsPerSecond = 1e18;
// Bandwidths (device memory and links): [1 kB/s, 1 PB/s]; HBM3e is 8e12 B/s (B200), NVLink 5
// 1.8e12 B/s.
inline constexpr double kMinBandwidth = 1e3;
inline constexpr double kMaxBandwidth = 1e15;
// Link latency: [0, 60 s]; a geostationary satellite hop is 0.6 s.
inline constexpr double kMaxLatencySeconds = 60.0;

// Measured times (profiles). One block's forward or backward pass: at most a day (the passes
// motley profile measures on this project's machines take milliseconds).
inline constexpr double kMaxPassSeconds = 86400.0;
// Per-step work per parameter: at most 1 s (measured: ~1e-9 s, docs/formats/profile.md).
inline constexpr double kMaxSecondsPerParam = 1.0;

// Stragglers. A straggler is at most 1000x slower than its profile: scenario rates (fractions of
// nominal speed) lie in [1/1000, 1] and --straggler slowdowns in [1, 1000]. Beyond that the
// emulated times of a step leave the range a clock can pace (a 1 s step at rate 1e-300 would last
// 1e300 s, and the wall clock reported an MFU of 434%); a rate above 1 would claim more than the
// device's peak, which the MFU is measured against.
inline constexpr double kMaxSlowdown = 1e3;

}  // namespace motley::spec
