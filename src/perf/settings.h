// PerfSettings: the numeric and kernel choices that the cost models share (precision, sequence
// parallelism, fused attention), and the byte sizes that follow from them. Plain value type.
#pragma once

#include "spec/cluster_spec.h"
#include "spec/plan.h"

namespace motley::perf {

struct PerfSettings {
  // kBf16: mixed precision (16-bit weights and activations, fp32 master weights and Adam moments;
  // 16 bytes of state per parameter). kFp32: everything fp32 (also 16 bytes: 4 weights, 4 grads,
  // 8 moments), as the CPU backend trains.
  spec::Precision precision = spec::Precision::kBf16;
  bool sequence_parallel = true;  // Megatron SP: norms/dropout activations split across TP ranks
  bool flash_attention = true;    // fused attention: no s x s score tensor stored or streamed
};

// fp32 when any device type of the cluster is a CPU or lacks a bf16 peak, else mixed bf16; SP and
// fused attention on.
PerfSettings DefaultSettings(const spec::ClusterSpec& cluster);

// Bytes of one activation / weight element in the compute precision (2 or 4).
double ActivationElementBytes(const PerfSettings& settings);
// Bytes per gradient element as it is all-reduced across data-parallel ranks (2 or 4).
double GradientElementBytes(const PerfSettings& settings);

}  // namespace motley::perf
