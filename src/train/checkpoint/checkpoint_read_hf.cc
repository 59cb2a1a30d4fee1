// Opening a Hugging Face folder (what `save_pretrained` writes) as a CheckpointReader (see
// checkpoint.h): config.json, then the safetensors files named by model.safetensors.index.json
// or, without an index, every *.safetensors file of the folder. Weights only (step 0, no
// optimizer state); F32, BF16 and F16 tensors are converted to fp32 when read; with
// tie_word_embeddings the missing one of lm_head.weight / model.embed_tokens.weight is read from
// the other (untied). Buffers that transformers once saved and motley recomputes
// (self_attn.rotary_emb.inv_freq, from rope_theta) are skipped.
#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "core/file_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/model_config.h"

namespace motley::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsRecomputedBuffer(std::string_view name) {
  return EndsWith(name, ".rotary_emb.inv_freq");
}

// The files of the folder's index (plain names of existing files), or nullopt without an index.
Result<std::optional<std::vector<std::string>>> IndexedFiles(
    const std::string& dir, std::map<std::string, std::string>* weight_map) {
  const std::string path = dir + "/" + kModelIndexFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<std::vector<std::string>>();
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    return Err(StatusCode::kInvalidArgument, "{}: not valid JSON: {}", path, e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return Err(StatusCode::kInvalidArgument, "{}: field 'weight_map' is missing or not an object",
               path);
  }
  std::set<std::string> files;
  for (const auto& [name, target] : index["weight_map"].items()) {
    if (!target.is_string() || !EndsWith(target.get<std::string>(), ".safetensors") ||
        target.get<std::string>().find('/') != std::string::npos) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: weight_map['{}'] is {}, not the name of a safetensors file of the folder",
                 path, name, target.dump());
    }
    const std::string file = target.get<std::string>();
    if (!fs::is_regular_file(dir + "/" + file, ec)) {
      return Err(StatusCode::kNotFound, "{}/{}: missing (the index maps '{}' to it)", dir, file,
                 name);
    }
    (*weight_map)[name] = file;
    files.insert(file);
  }
  return std::optional<std::vector<std::string>>(
      std::vector<std::string>(files.begin(), files.end()));
}

}  // namespace

Result<CheckpointReader> CheckpointReader::OpenHuggingFace(const std::string& dir) {
  CheckpointReader reader;
  reader.kind_ = Kind::kHuggingFace;
  reader.dir_ = dir;
  const std::string config_path = dir + "/" + kHfConfigFile;
  MOTLEY_ASSIGN_OR_RETURN(std::string config_text, ReadFile(config_path));
  MOTLEY_ASSIGN_OR_RETURN(HfModelConfig config, ParseHfConfig(config_text, config_path,
                                                              fs::path(dir).filename().string()));
  reader.metadata_.model = config.model;
  reader.tied_ = config.tied;

  std::map<std::string, std::string> weight_map;
  MOTLEY_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> indexed,
                          IndexedFiles(dir, &weight_map));
  std::vector<std::string> files;
  if (indexed) {
    files = std::move(*indexed);
  } else {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (EndsWith(name, ".safetensors") && entry.is_regular_file(ec)) files.push_back(name);
    }
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) {
    return Err(StatusCode::kNotFound,
               "{}: a Hugging Face folder ({} is there) without safetensors weights (no {} and no "
               "*.safetensors file; .bin / PyTorch pickles are not read)",
               dir, kHfConfigFile, kModelIndexFile);
  }
  std::set<std::string> dtypes;
  int skipped = 0;
  for (const std::string& file : files) {
    MOTLEY_ASSIGN_OR_RETURN(SafetensorsHeader header, ReadSafetensorsHeader(dir + "/" + file));
    for (const SafetensorsEntry& e : header.tensors) {
      if (indexed) {
        auto it = weight_map.find(e.name);
        if (it == weight_map.end() || it->second != file) {
          return Err(StatusCode::kInvalidArgument,
                     "{}/{}: tensor '{}' has no entry in {} pointing to this file", dir, file,
                     e.name, kModelIndexFile);
        }
      }
      if (IsRecomputedBuffer(e.name)) {
        ++skipped;
        continue;
      }
      auto [it, fresh] = reader.model_map_.emplace(e.name, file);
      if (!fresh) {
        return Err(StatusCode::kInvalidArgument, "{}: tensor '{}' is in two files: {} and {}", dir,
                   e.name, it->second, file);
      }
      dtypes.insert(e.dtype);
    }
    reader.headers_.emplace(file, std::move(header));
  }
  for (const auto& [name, file] : weight_map) {
    if (reader.headers_.at(file).Find(name) == nullptr) {
      return Err(StatusCode::kInvalidArgument,
                 "{}/{}: {} maps tensor '{}' to this file, which does not hold it", dir, file,
                 kModelIndexFile, name);
    }
  }

  reader.notes_.push_back(fmt::format("{} safetensors file{}{}", files.size(),
                                      files.size() == 1 ? "" : "s", indexed ? " (indexed)" : ""));
  std::vector<std::string> converted;
  for (const std::string& d : dtypes) {
    if (d != "F32") converted.push_back(d);
  }
  reader.notes_.push_back(converted.empty()
                              ? std::string("F32 weights")
                              : fmt::format("{} weights converted to fp32 master weights",
                                            fmt::join(converted, " and ")));
  if (reader.tied_) {
    const bool has_head = reader.model_map_.count("lm_head.weight") > 0;
    const bool has_embed = reader.model_map_.count("model.embed_tokens.weight") > 0;
    if (has_head != has_embed) {
      reader.notes_.push_back(
          has_embed ? "tied embeddings (tie_word_embeddings): lm_head.weight untied, copied from "
                      "model.embed_tokens.weight; the two train as separate tensors from here on"
                    : "tied embeddings (tie_word_embeddings): model.embed_tokens.weight untied, "
                      "copied from lm_head.weight; the two train as separate tensors from here "
                      "on");
    } else {
      reader.notes_.push_back(
          "tie_word_embeddings is set but the folder holds both "
          "lm_head.weight and model.embed_tokens.weight: each is loaded as "
          "stored (untied)");
    }
  }
  if (skipped > 0) {
    reader.notes_.push_back(
        fmt::format("{} rotary_emb.inv_freq buffer{} skipped (recomputed "
                    "from rope_theta)",
                    skipped, skipped == 1 ? "" : "s"));
  }
  return reader;
}

}  // namespace motley::train
