// TrainSpec: what to train on and how (batch, sequence length, steps, optimizer, data, metrics,
// checkpoints). Plain value type; parsed from the `train:` section of a run file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "spec/precision.h"

namespace motley::spec {

struct OptimizerSpec {
  float lr = 3e-4F;           // peak learning rate
  float min_lr = 3e-5F;       // floor of the cosine decay
  int64_t warmup_steps = 0;   // linear warm-up from 0 to lr
  float beta1 = 0.9F;
  float beta2 = 0.95F;
  float eps = 1e-8F;
  float weight_decay = 0.1F;  // decoupled (AdamW); applied to 2-D weights only
  float grad_clip = 1.0F;     // global-norm clipping threshold; 0 disables
};

struct DataSpec {
  // "text": a UTF-8/ASCII file tokenized by the byte-level tokenizer (vocabulary 256 used);
  // "u16" / "u32": nanoGPT-style flat token files (.bin) of uint16 / uint32 ids.
  std::string format = "text";
  std::string train_path;     // empty: the shipped corpus
  std::string val_path;       // empty: split off the end of the training data
  double val_fraction = 0.05; // used when val_path is empty
};

struct CheckpointSpec {
  std::string dir;            // empty: no checkpoints
  int64_t every_steps = 0;    // 0: only at the end and on SIGTERM
  int64_t keep_last = 3;
};

struct TrainSpec {
  int64_t global_batch = 8;   // sequences per step (B_global)
  int64_t seq_len = 64;       // T
  int64_t steps = 100;
  uint64_t seed = 1234;       // initialisation and data sampling
  OptimizerSpec optimizer;
  DataSpec data;
  int64_t val_every = 50;     // 0: no validation
  int64_t val_batches = 4;    // global batches per validation pass
  std::string metrics_path;   // JSONL; empty: no metrics file
  int threads = 0;            // threads per rank; 0: all cores for one rank, 1 when ranks are threads
  CheckpointSpec checkpoint;
  // How the kernels of the training system being modelled run (read by the predictor through
  // perf::DefaultSettings; unset: chosen from the cluster there). motley's own runtime computes
  // in fp32 with unfused attention and no sequence parallelism, and `motley train` refuses other
  // values (CheckRuntimeRunsKernels).
  std::optional<Precision> precision;
  std::optional<Attention> attention;
  std::optional<bool> sequence_parallel;  // Megatron sequence parallelism in TP groups
  // Dropout on the attention probabilities (HF LlamaConfig.attention_dropout, Megatron's
  // --attention-dropout), in [0, 1): the kernels it adds are counted by the compute model. 0
  // (unset) is what motley's runtime trains with.
  double attention_dropout = 0.0;
};

// Ok when motley's runtime computes the way `train` asks (fp32, unfused attention, no sequence
// parallelism, no attention dropout, or those fields unset); else an error naming the field,
// prefixed by `where` (e.g. "run.yaml: train").
Status CheckRuntimeRunsKernels(const TrainSpec& train, std::string_view where);

}  // namespace motley::spec
