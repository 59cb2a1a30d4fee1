// Profiler (issue 5, `motley profile`): measures the forward and backward wall time of one
// transformer block, the token embedding and the head (final norm + LM head + cross-entropy) of a
// model on this machine's CPU backend, for a grid of micro-batch sizes at one TP degree and
// sequence length. Each part runs as a model::Stage of its own (the code the runtime runs), with
// warm-up passes first and the median of the timed repeats reported; blocks are timed as a stage
// of up to 4 of them back to back (as training runs them) and divided by their count; a pass runs
// the embedding, the blocks and the head in turn, and each size's passes run in a row (as the
// runtime runs one size; interleaving sizes made blocks 4-8% slow). With
// tp > 1 one TP rank's shard is timed and its all-reduces are skipped (a no-op TpGroup): the
// profile format wants the compute alone; the predictor adds TP communication from the cluster's
// links. The results are plain numbers; cli/profile_command.cc writes them in the profile format
// (docs/formats/profile.md).
//
// Measured as a rank runs: OpenBLAS runs with `threads` threads (OpenBLAS's own default, every
// core, made blocks profile 12-16% faster than the runtime ran them), and `companions` threads
// run the same work untimed on backends of their own, as a plan's other ranks load the other
// cores.
//
// Thread safety: ProfileModel and ProfileStepPerParam own everything they create (companion
// threads are joined before they return), but they set OpenBLAS's PROCESS-WIDE thread count for
// their duration (and restore it): do not run them while other threads of the process use BLAS.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "spec/model_spec.h"

namespace motley::train {

struct PartTimes {
  double forward_s = 0;
  double backward_s = 0;
};

struct ProfilePoint {
  int tp = 1;
  int64_t micro_batch_size = 1;
  int64_t seq_len = 1;
  PartTimes block;      // one block on one TP rank, TP communication excluded
  PartTimes embedding;  // token lookup and its scatter-add backward
  PartTimes head;       // final RMSNorm + LM head + cross-entropy (and its backward)
};

struct ProfileOptions {
  std::vector<int64_t> micro_batch_sizes = {1, 2, 4};
  int64_t seq_len = 0;  // tokens per sequence (> 0)
  int tp = 1;           // must divide num_heads, num_kv_heads and ffn_hidden
  int threads = 1;      // CPU threads per rank: the backend's OpenMP threads AND OpenBLAS's
                        // (set process-wide for the call, restored after; the runtime runs each
                        // rank with 1 BLAS thread, so profiles for plans use 1)
  // Other threads that run the same work, untimed, on backends of their own while this one is
  // timed: the other devices of a node busy as a plan's ranks keep them (shared caches and memory
  // bandwidth). On this 2-core VM one companion changed the small model's block times by under
  // 2% (b=2, T=128, 2026-11-29); machines with more cores per memory channel may differ.
  int companions = 0;
  int warmup = 2;       // untimed passes per part and point
  int repeats = 7;      // timed passes; the median is kept
  uint64_t seed = 1;
  // Called with one line per measured point (progress); may be empty.
  std::function<void(const std::string&)> progress;
};

// Per-step work per parameter on this CPU: zeroing the gradients, the gradient-norm pass and one
// AdamW update (model::Optimizer) of a stage holding the whole model, median seconds / parameters.
Result<double> ProfileStepPerParam(const spec::ModelSpec& model, const ProfileOptions& options);

// Errors: an empty grid, a non-positive size, a TP degree that does not divide the model, or a
// sequence longer than the model's max_seq_len.
Result<std::vector<ProfilePoint>> ProfileModel(const spec::ModelSpec& model,
                                               const ProfileOptions& options);

}  // namespace motley::train
