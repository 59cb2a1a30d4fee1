// PerfSettings: the numeric and kernel choices that the cost models share (precision, sequence
// parallelism, fused attention), and the byte sizes that follow from them. A run file may set
// the first three (train.precision, train.attention, train.sequence_parallel;
// docs/formats/run-file.md); the rest follow from the cluster. Plain value type.
#pragma once

#include "spec/cluster_spec.h"
#include "spec/plan.h"
#include "spec/train_spec.h"

namespace motley::perf {

struct PerfSettings {
  // kBf16 / kFp16: mixed precision (16-bit weights and activations, fp32 master weights and Adam
  // moments; 16 bytes of state per parameter). kFp32: everything fp32 (also 16 bytes: 4 weights,
  // 4 grads, 8 moments), as the CPU backend trains.
  spec::Precision precision = spec::Precision::kBf16;
  bool sequence_parallel = true;  // Megatron SP: norms/dropout activations split across TP ranks
  bool flash_attention = true;    // fused attention: no s x s score tensor stored or streamed
  // Dropout on the attention probabilities (train.attention_dropout): unfused attention adds a
  // kernel masking the s x s probabilities after the softmax and one in the backward; fused
  // attention draws the mask inside its kernel at no counted cost.
  double attention_dropout = 0.0;
  // Transfers that overlap in time share the network's resources (perf/network.h: a node's
  // cards, island fabrics, the inter-island network). Off for emulated clusters: the runtime's
  // link emulation charges each rank pair's link on its own.
  bool nic_contention = true;
  // Collectives run as motley's ring engine runs them (comm/ring_collectives.cc): one ring in rank
  // order, every step bounded by its slowest hop. Off: the best of a ring and a two-level
  // hierarchy (what NCCL's tuner would pick).
  bool ring_collectives = false;
  // Groups of at most this many ranks get the exact step-by-step ring recurrence (per-rank exit
  // times under skewed entries); larger ones the bound max(entry) + steps * slowest hop.
  int exact_ring_max_ranks = 64;
};

// fp32 when any device type of the cluster is a CPU or lacks a bf16 peak, else mixed bf16; SP and
// fused attention on. When every device type is emulated (the cluster runs on motley's runtime
// with link emulation): no NIC contention, ring collectives, no SP and no fused attention (the
// CPU kernels have neither).
PerfSettings DefaultSettings(const spec::ClusterSpec& cluster);
// The cluster's defaults with the run's own choices (train.precision, train.attention,
// train.sequence_parallel) where it makes them.
PerfSettings DefaultSettings(const spec::ClusterSpec& cluster, const spec::TrainSpec& train);

// Bytes of one activation / weight element in the compute precision (2, or 4 for fp32).
double ActivationElementBytes(const PerfSettings& settings);
// Bytes per gradient element as it is all-reduced across data-parallel ranks (2 or 4).
double GradientElementBytes(const PerfSettings& settings);

}  // namespace motley::perf
