// See parameters.h.
#include "model/parameters.h"

#include <cmath>

#include <fmt/core.h>

#include "core/check.h"
#include "model/init.h"

namespace motley::model {

using tensor::Backend;
using tensor::DType;
using tensor::Shape;

namespace {
constexpr double kInitStd = 0.02;  // GPT-2 / llm.c initialisation
}  // namespace

Status ValidateStageLayout(const spec::ModelSpec& model, const StageLayout& layout,
                           std::string_view where) {
  if (model.num_blocks <= 0 || model.hidden <= 0 || model.num_heads <= 0 ||
      model.num_kv_heads <= 0 || model.ffn_hidden <= 0 || model.vocab_size <= 0) {
    return Err(
        "{}: model '{}': num_blocks, hidden, num_heads, num_kv_heads, ffn_hidden and "
        "vocab_size must be positive",
        where, model.name);
  }
  if (model.hidden % model.num_heads != 0) {
    return Err("{}: model '{}': hidden {} is not a multiple of num_heads {}", where, model.name,
               model.hidden, model.num_heads);
  }
  if (model.num_heads % model.num_kv_heads != 0) {
    return Err("{}: model '{}': num_heads {} is not a multiple of num_kv_heads {}", where,
               model.name, model.num_heads, model.num_kv_heads);
  }
  if (model.head_size() % 2 != 0) {
    return Err("{}: model '{}': head size {} must be even for RoPE", where, model.name,
               model.head_size());
  }
  if (layout.first_block < 0 || layout.num_blocks < 0 ||
      layout.first_block + layout.num_blocks > model.num_blocks) {
    return Err("{}: blocks [{}, {}) are outside the model's {} blocks", where, layout.first_block,
               layout.first_block + layout.num_blocks, model.num_blocks);
  }
  if (layout.num_blocks == 0 && !layout.has_embedding && !layout.has_head) {
    return Err("{}: a stage must hold at least one block, the embedding or the head", where);
  }
  const int d = layout.tp_degree;
  if (d < 1 || layout.tp_rank < 0 || layout.tp_rank >= d) {
    return Err("{}: tp_rank {} is outside [0, tp_degree {})", where, layout.tp_rank, d);
  }
  if (model.num_heads % d != 0 || model.num_kv_heads % d != 0 || model.ffn_hidden % d != 0) {
    return Err("{}: tp_degree {} must divide num_heads {}, num_kv_heads {} and ffn_hidden {}",
               where, d, model.num_heads, model.num_kv_heads, model.ffn_hidden);
  }
  return Status::Ok();
}

std::string BlockParamName(int64_t block, std::string_view suffix) {
  return fmt::format("model.layers.{}.{}", block, suffix);
}

std::vector<ParamInfo> StageParamInfos(const spec::ModelSpec& model, const StageLayout& layout) {
  const int64_t c = model.hidden;
  const int64_t hs = model.head_size();
  const int64_t q_out = model.num_heads * hs;
  const int64_t kv_out = model.num_kv_heads * hs;
  const int64_t f = model.ffn_hidden;
  const int64_t v = model.vocab_size;
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(model.num_blocks));

  const int64_t d = layout.tp_degree;
  const int64_t r = layout.tp_rank;

  std::vector<ParamInfo> infos;
  auto weight = [&](std::string name, Shape shape, double init_std) {
    infos.push_back(ParamInfo{std::move(name), shape, InitKind::kNormal, init_std, true});
  };
  // Shard r of d of a (rows, cols) weight along `dim` (0: column-parallel, 1: row-parallel).
  auto shard = [&](std::string name, int64_t rows, int64_t cols, int dim, double init_std) {
    if (d == 1) return weight(std::move(name), Shape{rows, cols}, init_std);
    ParamInfo info{std::move(name), dim == 0 ? Shape{rows / d, cols} : Shape{rows, cols / d},
                   InitKind::kNormal, init_std, true};
    info.shard_dim = dim;
    info.shard_offset = r * (dim == 0 ? rows / d : cols / d);
    info.full_shape = Shape{rows, cols};
    infos.push_back(std::move(info));
  };
  auto norm = [&](std::string name) {
    infos.push_back(ParamInfo{std::move(name), Shape{c}, InitKind::kOnes, 0.0, false});
  };

  if (layout.has_embedding) weight("model.embed_tokens.weight", Shape{v, c}, kInitStd);
  for (int64_t b = layout.first_block; b < layout.first_block + layout.num_blocks; ++b) {
    const auto& s = kBlockParamSuffixes;
    norm(BlockParamName(b, s[0]));
    shard(BlockParamName(b, s[1]), q_out, c, 0, kInitStd);
    shard(BlockParamName(b, s[2]), kv_out, c, 0, kInitStd);
    shard(BlockParamName(b, s[3]), kv_out, c, 0, kInitStd);
    shard(BlockParamName(b, s[4]), c, q_out, 1, residual_std);
    norm(BlockParamName(b, s[5]));
    shard(BlockParamName(b, s[6]), f, c, 0, kInitStd);
    shard(BlockParamName(b, s[7]), f, c, 0, kInitStd);
    shard(BlockParamName(b, s[8]), c, f, 1, residual_std);
  }
  if (layout.has_head) {
    norm("model.norm.weight");
    weight("lm_head.weight", Shape{v, c}, kInitStd);
  }
  return infos;
}

ParameterSet ParameterSet::Allocate(Backend& backend, std::vector<ParamInfo> infos,
                                    bool moments) {
  ParameterSet set;
  set.params_.reserve(infos.size());
  for (ParamInfo& info : infos) {
    Parameter p;
    p.value = backend.Zeros(info.shape, DType::kF32);
    p.grad = backend.Zeros(info.shape, DType::kF32);
    if (moments) {
      p.m = backend.Zeros(info.shape, DType::kF32);
      p.v = backend.Zeros(info.shape, DType::kF32);
    }
    p.info = std::move(info);
    set.params_.push_back(std::move(p));
  }
  return set;
}

ParameterSet ParameterSet::Aliasing(const std::vector<ParameterSet*>& sets) {
  ParameterSet joined;
  for (const ParameterSet* set : sets) {
    joined.params_.insert(joined.params_.end(), set->params_.begin(), set->params_.end());
  }
  return joined;
}

void ParameterSet::Initialize(Backend& backend, uint64_t seed) {
  for (Parameter& p : params_) {
    if (p.info.init == InitKind::kOnes) {
      backend.Fill(p.value, 1.0F);
    } else if (!p.info.sharded()) {
      const std::vector<float> values =
          NormalInit(seed, p.name(), p.value.numel(), p.info.init_std);
      backend.CopyFromHost(p.value, values.data(), values.size() * sizeof(float));
    } else {
      // Draw the full tensor's stream and keep this shard's slice (2-D weights only).
      const Shape full = p.info.full_shape;
      MOTLEY_CHECK(full.rank() == 2 && p.value.shape().rank() == 2, "shards are 2-D weights");
      const std::vector<float> values =
          NormalInit(seed, p.name(), full.numel(), p.info.init_std);
      const int64_t rows = p.value.shape()[0];
      const int64_t cols = p.value.shape()[1];
      const int64_t row0 = p.info.shard_dim == 0 ? p.info.shard_offset : 0;
      const int64_t col0 = p.info.shard_dim == 1 ? p.info.shard_offset : 0;
      std::vector<float> slice(static_cast<size_t>(rows * cols));
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          slice[static_cast<size_t>(i * cols + j)] =
              values[static_cast<size_t>((row0 + i) * full[1] + col0 + j)];
        }
      }
      backend.CopyFromHost(p.value, slice.data(), slice.size() * sizeof(float));
    }
  }
}

Parameter* ParameterSet::Find(std::string_view name) {
  for (Parameter& p : params_)
    if (p.name() == name) return &p;
  return nullptr;
}

const Parameter* ParameterSet::Find(std::string_view name) const {
  for (const Parameter& p : params_)
    if (p.name() == name) return &p;
  return nullptr;
}

int64_t ParameterSet::numel() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += p.value.numel();
  return n;
}

std::vector<ParamChecksum> Checksums(Backend& backend, const ParameterSet& params) {
  std::vector<ParamChecksum> out;
  out.reserve(params.size());
  for (const Parameter& p : params) {
    out.push_back(ParamChecksum{p.name(), backend.Sum(p.value), backend.SumSquares(p.value),
                                backend.Sum(p.m), backend.Sum(p.v)});
  }
  return out;
}

}  // namespace motley::model
