// See model_spec.h: parameter counts, structural checks, presets and the `model:` YAML section.
#include "spec/model_spec.h"

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/file_util.h"
#include "spec/limits.h"
#include "spec/spec_yaml.h"
#include "spec/yaml_reader.h"

namespace motley::spec {
namespace {

struct Preset {
  const char* name;
  int64_t num_blocks, hidden, num_heads, num_kv_heads, ffn_hidden, vocab_size, max_seq_len;
};

// Shapes. tiny*/small are ours (tests and the byte-corpus demo, vocabulary 256 = byte tokenizer).
// gpt2-124m: GPT-2 small's depth, width and heads (Radford et al. 2019) in Llama form (SwiGLU of
// width 2048 ~ 8/3 * 768, untied head), vocabulary 50257 padded to 50304 as in llm.c.
// llama2-*: the official Llama-2 configurations (Touvron et al. 2023, Table 1 and the released
// config.json files): 7B/13B multi-head, 70B grouped-query with 8 kv heads.
// llama-140b: HETHUB (Xu et al. 2024) trains a "Llama-140B" whose exact shape the paper does not
// state in the sources we could reach. Derived here: Llama-2-70B's depth (80 blocks), GQA with 8 kv
// heads and vocabulary 32000, GPT-3-175B's width (12288, 96 heads of 128); the SwiGLU width 38400
// (= 150 * 256) makes the total 140.2e9 parameters.
constexpr Preset kPresets[] = {
    {"tiny", 2, 64, 4, 2, 128, 256, 64},
    {"tiny-gqa", 2, 64, 8, 2, 128, 256, 64},
    {"small", 4, 128, 4, 4, 384, 256, 128},
    {"gpt2-124m", 12, 768, 12, 12, 2048, 50304, 1024},
    {"llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096},
    {"llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096},
    {"llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096},
    {"llama-140b", 80, 12288, 96, 8, 38400, 32000, 4096},
};

}  // namespace

int64_t ModelSpec::BlockParams() const {
  const int64_t kv_width = num_kv_heads * head_size();
  const int64_t attention = 2 * hidden * hidden + 2 * hidden * kv_width;  // q, o; k, v
  const int64_t mlp = 3 * hidden * ffn_hidden;                             // gate, up, down
  const int64_t norms = 2 * hidden;
  return attention + mlp + norms;
}

int64_t ModelSpec::TotalParams() const {
  return num_blocks * BlockParams() + EmbeddingParams() + HeadParams();
}

Status ValidateModelSpec(const ModelSpec& model, std::string_view where) {
  auto error = [&](std::string_view field, const std::string& reason) {
    return Err(StatusCode::kInvalidArgument, "{}.{}: {}", where, field, reason);
  };
  auto in_range = [&](const char* field, int64_t value, int64_t hi) -> Status {
    if (value <= 0) return error(field, fmt::format("must be positive, got {}", value));
    if (value > hi) return error(field, fmt::format("must be at most {}, got {}", hi, value));
    return Status::Ok();
  };
  MOTLEY_RETURN_IF_ERROR(in_range("num_blocks", model.num_blocks, kMaxBlocks));
  MOTLEY_RETURN_IF_ERROR(in_range("hidden", model.hidden, kMaxHidden));
  MOTLEY_RETURN_IF_ERROR(in_range("num_heads", model.num_heads, kMaxHeads));
  MOTLEY_RETURN_IF_ERROR(in_range("num_kv_heads", model.num_kv_heads, kMaxHeads));
  MOTLEY_RETURN_IF_ERROR(in_range("ffn_hidden", model.ffn_hidden, kMaxFfnHidden));
  MOTLEY_RETURN_IF_ERROR(in_range("vocab_size", model.vocab_size, kMaxVocab));
  MOTLEY_RETURN_IF_ERROR(in_range("max_seq_len", model.max_seq_len, kMaxSeqLen));
  if (model.hidden % model.num_heads != 0) {
    return error("num_heads",
                 fmt::format("{} heads do not divide hidden {}", model.num_heads, model.hidden));
  }
  if (model.num_heads % model.num_kv_heads != 0) {
    return error("num_kv_heads", fmt::format("{} kv heads do not divide {} heads",
                                             model.num_kv_heads, model.num_heads));
  }
  if (model.head_size() % 2 != 0) {
    return error("num_heads", fmt::format("head size {} (hidden / heads) must be even for RoPE",
                                          model.head_size()));
  }
  if (!(model.rope_theta > 0.0F) || !std::isfinite(model.rope_theta)) {
    return error("rope_theta", fmt::format("must be positive, got {}", model.rope_theta));
  }
  if (!(model.norm_eps > 0.0F) || !std::isfinite(model.norm_eps)) {
    return error("norm_eps", fmt::format("must be positive, got {}", model.norm_eps));
  }
  // The dimensions are bounded above, so BlockParams() and TotalParams() cannot overflow int64
  // (at most 2^16 blocks of about 2^44 parameters, plus 2 * 2^51 for embedding and head); the
  // total is bounded by kMaxParams.
  if (model.TotalParams() > kMaxParams) {
    return error("num_blocks", fmt::format("the model has {} parameters, more than {}",
                                           model.TotalParams(), kMaxParams));
  }
  return Status::Ok();
}

Result<ModelSpec> ModelPreset(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    ModelSpec m;
    m.name = p.name;
    m.num_blocks = p.num_blocks;
    m.hidden = p.hidden;
    m.num_heads = p.num_heads;
    m.num_kv_heads = p.num_kv_heads;
    m.ffn_hidden = p.ffn_hidden;
    m.vocab_size = p.vocab_size;
    m.max_seq_len = p.max_seq_len;
    return m;
  }
  return Err(StatusCode::kNotFound, "unknown model preset '{}' (known: {})", name,
             fmt::join(ModelPresetNames(), ", "));
}

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

namespace internal {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Result<ModelSpec> ParseModelMapping(const YAML::Node& node, const std::string& file,
                                    const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys({"preset", "name", "num_blocks", "hidden", "num_heads",
                                        "num_kv_heads", "ffn_hidden", "vocab_size",
                                        "max_seq_len", "rope_theta", "norm_eps"}));
  ModelSpec m;
  if (map.Has("preset")) {
    MOTLEY_ASSIGN_OR_RETURN(const std::string preset, map.String("preset"));
    Result<ModelSpec> base = ModelPreset(preset);
    if (!base.ok()) return FieldContext(base.status(), file, map.PathOf("preset"));
    m = std::move(base).value();
  } else {
    for (const char* key : {"num_blocks", "hidden", "num_heads", "ffn_hidden", "vocab_size",
                            "max_seq_len"}) {
      if (!map.Has(key)) return map.Error(key, "missing required field (or give `preset:`)");
    }
    m.name = "custom";
  }
  MOTLEY_RETURN_IF_ERROR(map.OptString("name", &m.name));
  MOTLEY_RETURN_IF_ERROR(map.OptInt("num_blocks", &m.num_blocks));
  MOTLEY_RETURN_IF_ERROR(map.OptInt("hidden", &m.hidden));
  MOTLEY_RETURN_IF_ERROR(map.OptInt("num_heads", &m.num_heads));
  if (!map.Has("preset")) m.num_kv_heads = m.num_heads;
  MOTLEY_RETURN_IF_ERROR(map.OptInt("num_kv_heads", &m.num_kv_heads));
  MOTLEY_RETURN_IF_ERROR(map.OptInt("ffn_hidden", &m.ffn_hidden));
  MOTLEY_RETURN_IF_ERROR(map.OptInt("vocab_size", &m.vocab_size));
  MOTLEY_RETURN_IF_ERROR(map.OptInt("max_seq_len", &m.max_seq_len));
  MOTLEY_RETURN_IF_ERROR(map.OptFloat("rope_theta", &m.rope_theta));
  MOTLEY_RETURN_IF_ERROR(map.OptFloat("norm_eps", &m.norm_eps));
  const std::string where = path.empty() ? file + ": model" : file + ": " + path;
  MOTLEY_RETURN_IF_ERROR(ValidateModelSpec(m, where));
  return m;
}

}  // namespace

Result<ModelSpec> ParseModelNode(const YAML::Node& node, const std::string& file,
                                 const std::string& path, const std::string& base_dir) {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (EndsWith(text, ".yaml") || EndsWith(text, ".yml")) {
      const std::string model_path =
          (!base_dir.empty() && text.front() != '/') ? base_dir + "/" + text : text;
      Result<std::string> contents = ReadFile(model_path);
      if (!contents.ok()) return FieldContext(contents.status(), file, path);
      MOTLEY_ASSIGN_OR_RETURN(const YAML::Node root, LoadYaml(*contents, model_path));
      return ParseModelMapping(root, model_path, "");
    }
    Result<ModelSpec> preset = ModelPreset(text);
    if (!preset.ok()) return FieldContext(preset.status(), file, path);
    return preset;
  }
  return ParseModelMapping(node, file, path);
}

}  // namespace internal
}  // namespace motley::spec
