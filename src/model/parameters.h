// Model parameters laid out per block, under their Hugging Face Llama names, so that a pipeline
// stage owns exactly the tensors of its block range (plus the embedding on the first stage and the
// final norm and LM head on the last) and checkpoints/migration can move tensors by name.
//
// Shape letters (llm.c): L blocks, C hidden, NH query heads, NKV key/value heads, HS head size,
// F SwiGLU width, V vocabulary.
//
//   model.embed_tokens.weight                         (V, C)
//   model.layers.{i}.input_layernorm.weight           (C)
//   model.layers.{i}.self_attn.q_proj.weight          (NH*HS, C)
//   model.layers.{i}.self_attn.k_proj.weight          (NKV*HS, C)
//   model.layers.{i}.self_attn.v_proj.weight          (NKV*HS, C)
//   model.layers.{i}.self_attn.o_proj.weight          (C, NH*HS)
//   model.layers.{i}.post_attention_layernorm.weight  (C)
//   model.layers.{i}.mlp.gate_proj.weight             (F, C)
//   model.layers.{i}.mlp.up_proj.weight               (F, C)
//   model.layers.{i}.mlp.down_proj.weight             (C, F)
//   model.norm.weight                                 (C)
//   lm_head.weight                                    (V, C)
//
// Ownership: a ParameterSet owns its tensors (shared with the Backend that allocated them); the
// tensors are allocated once and never replaced, so Tensor handles copied out of it (as Stage does)
// stay valid; loading writes INTO them. Thread safety: thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "spec/model_spec.h"
#include "spec/plan.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace motley::model {

// Which part of the model a stage holds: blocks [first_block, first_block + num_blocks), plus the
// embedding and/or the final norm + LM head. StageLayout::Full is the whole model.
struct StageLayout {
  int64_t first_block = 0;
  int64_t num_blocks = 0;
  bool has_embedding = false;
  bool has_head = false;
  // Tensor parallelism (Megatron): this device holds shard tp_rank of tp_degree of the blocks'
  // q/k/v/gate/up (rows, by heads / columns of F) and o/down (columns) weights; norms, embedding
  // and head are replicated on every TP rank. tp_degree must divide NH, NKV and F.
  int tp_rank = 0;
  int tp_degree = 1;
  // Whether the AdamW moments (Parameter::m, ::v) are allocated with the parameters. false: the
  // caller allocates them for the tensors it updates with Optimizer and shards the rest (ZeRO-1,
  // parallel/zero1.h).
  bool allocate_moments = true;
  // Activation recompute of the blocks (block.h; not a parameter layout: it only decides what the
  // Stage keeps between a micro-batch's forward and backward).
  spec::Recompute recompute = spec::Recompute::kNone;

  static StageLayout Full(const spec::ModelSpec& model) {
    return StageLayout{0, model.num_blocks, true, true};
  }
};

// Checks the model's structure (sizes positive, NH % NKV == 0, C % NH == 0, HS even), that the
// layout's block range lies in [0, L) and holds something, and that its TP degree divides NH, NKV
// and F with 0 <= tp_rank < tp_degree. Errors are prefixed with `where`.
Status ValidateStageLayout(const spec::ModelSpec& model, const StageLayout& layout,
                           std::string_view where);

enum class InitKind : uint8_t { kNormal, kOnes };

// One parameter tensor's static description.
struct ParamInfo {
  std::string name;
  tensor::Shape shape;
  InitKind init = InitKind::kNormal;
  double init_std = 0.0;      // for kNormal
  bool weight_decay = false;  // AdamW decay: 2-D weights only, never norm weights
  // Tensor-parallel shard: this tensor is the slice [shard_offset, shard_offset + shape[shard_dim])
  // along dimension shard_dim of the logical tensor of shape full_shape. shard_dim == -1: the whole
  // tensor (full_shape is then unused; FullShape() returns shape).
  int shard_dim = -1;
  int64_t shard_offset = 0;
  tensor::Shape full_shape{};

  bool sharded() const { return shard_dim >= 0; }
  tensor::Shape FullShape() const { return sharded() ? full_shape : shape; }
};

// "model.layers.{block}.{suffix}"
std::string BlockParamName(int64_t block, std::string_view suffix);

// Suffixes of one block's tensors, in storage order.
inline constexpr std::string_view kBlockParamSuffixes[] = {
    "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight"};
inline constexpr size_t kParamsPerBlock = 9;

// The tensors of a stage, in order: embedding, each block (kBlockParamSuffixes order), final norm,
// LM head. Initialisation follows GPT-2/llm.c: normal(0, 0.02), o_proj and down_proj (the
// projections into the residual stream) scaled by 1/sqrt(2L) (GPT-2 paper, §2.3); norm weights 1.
// With layout.tp_degree > 1 the block weights are the layout's shards (see StageLayout).
std::vector<ParamInfo> StageParamInfos(const spec::ModelSpec& model, const StageLayout& layout);

// One parameter: value, gradient and the two AdamW moments, all f32 of the same shape.
struct Parameter {
  ParamInfo info;
  tensor::Tensor value;
  tensor::Tensor grad;
  tensor::Tensor m;
  tensor::Tensor v;
  const std::string& name() const { return info.name; }
};

class ParameterSet {
 public:
  ParameterSet() = default;
  // Allocates every tensor on `backend` (values, grads and, with `moments`, moments; all zero).
  static ParameterSet Allocate(tensor::Backend& backend, std::vector<ParamInfo> infos,
                               bool moments = true);
  // One set over the parameters of `sets`, in order, sharing their tensors (a rank's model chunks
  // under interleaved 1F1B, parallel/parallel_rank.h): values written through either set are
  // seen by both, but a tensor later assigned to a Parameter of one set is not (the caller keeps
  // to one set from then on).
  static ParameterSet Aliasing(const std::vector<ParameterSet*>& sets);

  // Sets every value from its (seed, name) stream (see init.h); independent of the set's content,
  // so two sets holding the same name get the same tensor. A shard gets its slice of the full
  // tensor's values, so any TP degree starts from the same logical weights.
  void Initialize(tensor::Backend& backend, uint64_t seed);

  size_t size() const { return params_.size(); }
  Parameter& operator[](size_t i) { return params_[i]; }
  const Parameter& operator[](size_t i) const { return params_[i]; }
  std::vector<Parameter>::iterator begin() { return params_.begin(); }
  std::vector<Parameter>::iterator end() { return params_.end(); }
  std::vector<Parameter>::const_iterator begin() const { return params_.begin(); }
  std::vector<Parameter>::const_iterator end() const { return params_.end(); }

  // nullptr when absent.
  Parameter* Find(std::string_view name);
  const Parameter* Find(std::string_view name) const;
  int64_t numel() const;  // parameters held (values only)

 private:
  std::vector<Parameter> params_;
};

// Per-tensor checksums in double, for migration and checkpoint tests: equal model state on two
// plans gives equal checksums per name.
struct ParamChecksum {
  std::string name;
  double value_sum = 0.0;
  double value_sum_squares = 0.0;
  double m_sum = 0.0;
  double v_sum = 0.0;
};
std::vector<ParamChecksum> Checksums(tensor::Backend& backend, const ParameterSet& params);

}  // namespace motley::model
