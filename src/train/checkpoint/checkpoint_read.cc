// Loading checkpoints: finding the latest, verifying every file of a motley checkpoint, checking
// it against a model, and filling any stage layout (see checkpoint.h). Hugging Face folders are
// opened by checkpoint_read_hf.cc.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "core/file_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/checkpoint/model_config.h"
#include "train/checkpoint/sha256.h"
#include "train/checkpoint/shards.h"

namespace motley::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Result<json> ReadJson(const std::string& path, const char* what) {
  auto text = ReadFile(path);
  if (!text.ok())
    return Err(StatusCode::kNotFound,
               "{}: {} is missing or unreadable: not a complete checkpoint ({})", path, what,
               text.status().message());
  try {
    return json::parse(*text);
  } catch (const json::exception& e) {
    return Err(StatusCode::kInvalidArgument, "{}: {} is not valid JSON: {}", path, what, e.what());
  }
}

// Reads an index's weight_map; every file it names must be listed in the sidecar.
Result<std::map<std::string, std::string>> ReadIndex(const std::string& dir, const char* file,
                                                     const json& files) {
  const std::string path = dir + "/" + file;
  MOTLEY_ASSIGN_OR_RETURN(json index, ReadJson(path, "the index"));
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return Err(StatusCode::kInvalidArgument, "{}: field 'weight_map' is missing or not an object",
               path);
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, target] : index["weight_map"].items()) {
    if (!target.is_string())
      return Err(StatusCode::kInvalidArgument, "{}: weight_map['{}'] is not a file name", path,
                 name);
    const std::string target_file = target.get<std::string>();
    if (!files.contains(target_file) || !EndsWith(target_file, ".safetensors")) {
      return Err(
          "{}: weight_map['{}'] names '{}', which is not a safetensors file of this "
          "checkpoint",
          path, name, target_file);
    }
    map[name] = target_file;
  }
  return map;
}

constexpr std::string_view kMomentPrefixes[] = {"optimizer.m.", "optimizer.v."};

}  // namespace

Result<std::string> FindLatestCheckpoint(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return Err(StatusCode::kNotFound, "{}: not a checkpoint folder (missing)", root);
  }
  if (auto latest = ReadFile(root + "/" + kLatestFile); latest.ok()) {
    std::string name = *latest;
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (internal::ParseCheckpointDirName(name) &&
        fs::exists(fs::path(root) / name / kSidecarFile, ec)) {
      return root + "/" + name;
    }
  }
  // No usable pointer: the complete checkpoint with the highest step.
  std::optional<std::pair<int64_t, std::string>> best;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = internal::ParseCheckpointDirName(name);
    if (step && fs::exists(entry.path() / kSidecarFile, ec) && (!best || *step > best->first)) {
      best.emplace(*step, name);
    }
  }
  if (!best) {
    return Err(StatusCode::kNotFound,
               "{}: no complete checkpoint (no '{}' pointer and no step-N folder with {}; a "
               "Hugging Face folder holds {})",
               root, kLatestFile, kSidecarFile, kHfConfigFile);
  }
  return root + "/" + best->second;
}

Result<CheckpointReader> CheckpointReader::Open(const std::string& path) {
  std::error_code ec;
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!fs::exists(dir, ec)) {
    return Err(StatusCode::kNotFound, "{}: no such checkpoint folder", dir);
  }
  // A motley checkpoint folder (its sidecar, its name or its marker says so), a Hugging Face
  // folder (config.json and no motley marks), or else a ROOT of checkpoints.
  const bool motley = fs::exists(fs::path(dir) / kSidecarFile, ec) ||
                      fs::exists(fs::path(dir) / kMarkerFile, ec) ||
                      internal::ParseCheckpointDirName(fs::path(dir).filename().string());
  if (motley) return OpenMotley(dir);
  if (fs::exists(fs::path(dir) / kHfConfigFile, ec)) return OpenHuggingFace(dir);
  MOTLEY_ASSIGN_OR_RETURN(dir, FindLatestCheckpoint(dir));
  return OpenMotley(dir);
}

Result<CheckpointReader> CheckpointReader::OpenFor(const std::string& path,
                                                   const spec::ModelSpec& model) {
  MOTLEY_ASSIGN_OR_RETURN(CheckpointReader reader, Open(path));
  MOTLEY_RETURN_IF_ERROR(reader.CheckModel(model));
  return reader;
}

Result<CheckpointReader> CheckpointReader::OpenMotley(const std::string& dir) {
  std::error_code ec;
  CheckpointReader reader;
  reader.kind_ = Kind::kMotley;
  reader.dir_ = dir;
  const std::string sidecar_path = dir + "/" + kSidecarFile;
  MOTLEY_ASSIGN_OR_RETURN(json sidecar, ReadJson(sidecar_path, "the sidecar"));
  json files;
  try {
    if (sidecar.at("format").get<std::string>() != "motley-checkpoint") {
      return Err(StatusCode::kInvalidArgument, "{}: field 'format' is not \"motley-checkpoint\"",
                 sidecar_path);
    }
    const int version = sidecar.at("version").get<int>();
    if (version != 1 && version != 2) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: field 'version' {} is not supported (1 and 2 are)", sidecar_path,
                 sidecar["version"].dump());
    }
    CheckpointMetadata& m = reader.metadata_;
    m.step = sidecar.at("step").get<int64_t>();
    m.consumed_samples = sidecar.at("consumed_samples").get<int64_t>();
    m.config_hash = sidecar.at("config_hash").get<std::string>();
    m.rng = sidecar.at("rng");
    m.data_loader = sidecar.at("data_loader");
    m.plan = sidecar.at("plan");
    if (sidecar.contains("model") && !sidecar["model"].is_null()) {
      MOTLEY_ASSIGN_OR_RETURN(m.model, ModelConfigFromJson(sidecar["model"], sidecar_path));
    }
    if (sidecar.contains("train") && sidecar["train"].is_object()) m.train = sidecar["train"];
    files = sidecar.at("files");
    if (!files.is_object())
      return Err(StatusCode::kInvalidArgument, "{}: field 'files' is not an object", sidecar_path);
    for (const auto& [name, rec] : files.items()) {
      (void)rec.at("bytes").get<uint64_t>();
      (void)rec.at("sha256").get<std::string>();
    }
  } catch (const json::exception& e) {
    return Err(StatusCode::kInvalidArgument, "{}: missing or mistyped field: {}", sidecar_path,
               e.what());
  }
  // Counts a resume continues from (issue 17: `step: -5` reached a CHECK of the batch sampler).
  if (reader.metadata_.step < 0 || reader.metadata_.consumed_samples < 0) {
    return Err(StatusCode::kInvalidArgument,
               "{}: fields 'step' ({}) and 'consumed_samples' ({}) must not be negative",
               sidecar_path, reader.metadata_.step, reader.metadata_.consumed_samples);
  }
  if (!files.contains(kModelIndexFile)) {
    return Err(StatusCode::kInvalidArgument, "{}: field 'files' does not list {}", sidecar_path,
               kModelIndexFile);
  }

  // Every file: present, of the recorded size, with the recorded SHA-256.
  for (const auto& [name, rec] : files.items()) {
    const std::string file = dir + "/" + name;
    if (name.find('/') != std::string::npos || name == kSidecarFile) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: files: '{}' is not a plain file name of the checkpoint", sidecar_path, name);
    }
    if (!fs::is_regular_file(file, ec)) {
      return Err(StatusCode::kNotFound,
                 "{}: missing (the sidecar lists it): the checkpoint is incomplete", file);
    }
    const uint64_t size = fs::file_size(file, ec);
    const auto want = rec["bytes"].get<uint64_t>();
    if (ec || size != want) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: {} bytes, the sidecar records {} (truncated or overwritten)", file, size,
                 want);
    }
    MOTLEY_ASSIGN_OR_RETURN(std::string sha, Sha256OfFile(file));
    if (sha != rec["sha256"].get<std::string>()) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: SHA-256 mismatch: file has {}, the sidecar records {} (corrupted)", file, sha,
                 rec["sha256"].get<std::string>());
    }
    if (EndsWith(name, ".safetensors")) {
      MOTLEY_ASSIGN_OR_RETURN(SafetensorsHeader header, ReadSafetensorsHeader(file));
      reader.headers_.emplace(name, std::move(header));
    }
  }
  MOTLEY_ASSIGN_OR_RETURN(reader.model_map_, ReadIndex(dir, kModelIndexFile, files));
  if (files.contains(kOptimizerIndexFile)) {
    MOTLEY_ASSIGN_OR_RETURN(reader.optimizer_map_, ReadIndex(dir, kOptimizerIndexFile, files));
  }

  // Indices and files must agree both ways.
  for (const auto* map : {&reader.model_map_, &reader.optimizer_map_}) {
    for (const auto& [name, file] : *map) {
      if (reader.headers_.at(file).Find(name) == nullptr) {
        return Err(StatusCode::kInvalidArgument,
                   "{}/{}: the index maps tensor '{}' to this file, which does not hold it", dir,
                   file, name);
      }
    }
  }
  for (const auto& [file, header] : reader.headers_) {
    for (const SafetensorsEntry& e : header.tensors) {
      const auto* map =
          e.name.rfind("optimizer.", 0) == 0 ? &reader.optimizer_map_ : &reader.model_map_;
      auto it = map->find(e.name);
      if (it == map->end() || it->second != file) {
        return Err(
            "{}/{}: tensor '{}' has no index entry pointing to this file (missing index "
            "entry)",
            dir, file, e.name);
      }
    }
  }
  if (!reader.metadata_.model) {
    reader.notes_.push_back(
        "no model config record (written by an older motley): tensor names "
        "and shapes checked only");
  }
  return reader;
}

std::vector<std::string> CheckpointReader::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : model_map_) names.push_back(name);
  return names;
}

std::string CheckpointReader::Describe() const {
  std::string text = kind_ == Kind::kMotley
                         ? fmt::format("checkpoint {} (step {})", dir_, metadata_.step)
                         : fmt::format("Hugging Face folder {}", dir_);
  for (const std::string& note : notes_) text += "; " + note;
  return text;
}

Status CheckpointReader::CheckModel(const spec::ModelSpec& model) const {
  if (metadata_.model) {
    MOTLEY_RETURN_IF_ERROR(CompareModelConfigs(
        *metadata_.model, model, kind_ == Kind::kMotley ? dir_ : dir_ + "/" + kHfConfigFile,
        kind_ == Kind::kHuggingFace));
  }
  std::set<std::string> names;
  for (const model::ParamInfo& info :
       model::StageParamInfos(model, model::StageLayout::Full(model))) {
    names.insert(info.name);
    MOTLEY_ASSIGN_OR_RETURN(Location loc, LocateModel(info.name));
    const std::vector<int64_t> want = info.shape.dims();
    if (loc.entry->shape != want) {
      return Err(StatusCode::kInvalidArgument,
                 "{}/{}: tensor '{}' has shape [{}], the run's model '{}' expects [{}] (written "
                 "for another model?)",
                 dir_, loc.file, loc.entry->name, fmt::join(loc.entry->shape, ", "), model.name,
                 fmt::join(want, ", "));
    }
  }
  for (const auto& [name, file] : model_map_) {
    if (names.count(name) == 0) {
      return Err(StatusCode::kInvalidArgument,
                 "{}/{}: tensor '{}' is not a tensor of the run's model '{}' (L={} blocks): "
                 "written for another model, or holding extra weights motley does not use",
                 dir_, file, name, model.name, model.num_blocks);
    }
  }
  for (const auto& [name, file] : optimizer_map_) {
    bool known = false;
    for (std::string_view prefix : kMomentPrefixes) {
      known = known || (name.rfind(prefix, 0) == 0 && names.count(name.substr(prefix.size())) > 0);
    }
    if (!known) {
      return Err(StatusCode::kInvalidArgument,
                 "{}/{}: optimizer tensor '{}' is not a moment of a tensor of the run's model "
                 "'{}': written for another model?",
                 dir_, file, name, model.name);
    }
  }
  return Status::Ok();
}

Result<CheckpointReader::Location> CheckpointReader::Locate(
    const std::map<std::string, std::string>& map, const std::string& name,
    const char* index_name) const {
  auto it = map.find(name);
  if (it == map.end()) {
    const char* hint =
        name == "lm_head.weight" && kind_ == Kind::kMotley
            ? " (motley checkpoints are never tied; a Hugging Face folder whose config.json sets "
              "tie_word_embeddings loads by untying)"
            : "";
    return Err(StatusCode::kInvalidArgument,
               "{}: tensor '{}' is not in {} ({} tensors listed; written for another model or "
               "without it?){}",
               dir_, name, index_name, map.size(), hint);
  }
  return Location{it->second, headers_.at(it->second).Find(name)};
}

Result<CheckpointReader::Location> CheckpointReader::LocateModel(const std::string& name) const {
  static const std::string kEmbed = "model.embed_tokens.weight";
  static const std::string kHead = "lm_head.weight";
  if (tied_ && model_map_.count(name) == 0) {
    if (name == kHead && model_map_.count(kEmbed) > 0) return Locate(model_map_, kEmbed, "");
    if (name == kEmbed && model_map_.count(kHead) > 0) return Locate(model_map_, kHead, "");
  }
  const std::string index = kind_ == Kind::kHuggingFace
                                ? fmt::format("the safetensors files of {}", dir_)
                                : std::string(kModelIndexFile);
  if (kind_ == Kind::kHuggingFace && model_map_.count(name) == 0 && name == kHead) {
    return Err(StatusCode::kInvalidArgument,
               "{}: tensor '{}' is missing and {} does not tie the embeddings "
               "(tie_word_embeddings is false; a tied model omits lm_head.weight)",
               dir_, name, kHfConfigFile);
  }
  return Locate(model_map_, name, index.c_str());
}

Result<std::vector<float>> CheckpointReader::ReadChecked(const std::string& name,
                                                         const Location& loc) const {
  std::vector<float> host(static_cast<size_t>(loc.entry->numel()));
  MOTLEY_RETURN_IF_ERROR(
      ReadSafetensorsTensor(dir_ + "/" + loc.file, headers_.at(loc.file), *loc.entry, host));
  for (size_t i = 0; i < host.size(); ++i) {
    if (!std::isfinite(host[i])) {
      return Err(StatusCode::kInvalidArgument,
                 "{}/{}: tensor '{}' holds a non-finite value ({}) at element {}: refusing to "
                 "load it (the run that wrote it diverged, or the file is damaged)",
                 dir_, loc.file, name, host[i], i);
    }
  }
  return host;
}

Status CheckpointReader::LoadTensor(tensor::Backend& backend, tensor::Tensor& dst,
                                    const model::ParamInfo& info, const std::string& name,
                                    const Location& loc) const {
  MOTLEY_ASSIGN_OR_RETURN(std::vector<float> host, ReadChecked(name, loc));
  if (info.sharded()) {  // this TP rank's slice of the whole tensor
    std::vector<float> part(static_cast<size_t>(info.shape.numel()));
    ExtractSlice(host, info.full_shape, info.shard_dim, info.shard_offset, part, info.shape);
    host = std::move(part);
  }
  backend.CopyFromHost(dst, host.data(), host.size() * sizeof(float));
  return Status::Ok();
}

Result<std::vector<float>> CheckpointReader::ReadTensor(const std::string& name) const {
  const bool opt = name.rfind("optimizer.", 0) == 0;
  MOTLEY_ASSIGN_OR_RETURN(
      Location loc, opt ? Locate(optimizer_map_, name, kOptimizerIndexFile) : LocateModel(name));
  return ReadChecked(name, loc);
}

Status CheckpointReader::LoadIntoStage(tensor::Backend& backend, model::ParameterSet& params,
                                       bool load_optimizer) const {
  // Resolve and check everything first, so that a failing check leaves `params` untouched.
  struct Job {
    tensor::Tensor* dst;
    const model::ParamInfo* info;
    std::string name;
    Location loc;
  };
  std::vector<Job> jobs;
  for (model::Parameter& p : params) {
    const std::vector<int64_t> want = p.info.FullShape().dims();  // whole, even for a shard
    auto add = [&](tensor::Tensor& dst, Result<Location> located,
                   const std::string& name) -> Status {
      MOTLEY_ASSIGN_OR_RETURN(Location loc, std::move(located));
      if (loc.entry->shape != want) {
        return Err(StatusCode::kInvalidArgument,
                   "{}/{}: tensor '{}' has shape [{}], the stage expects [{}] (another model?)",
                   dir_, loc.file, loc.entry->name, fmt::join(loc.entry->shape, ", "),
                   fmt::join(want, ", "));
      }
      jobs.push_back({&dst, &p.info, name, loc});
      return Status::Ok();
    };
    MOTLEY_RETURN_IF_ERROR(add(p.value, LocateModel(p.name()), p.name()));
    if (load_optimizer) {
      if (optimizer_map_.empty()) {
        return Err(StatusCode::kInvalidArgument,
                   "{}: holds no optimizer state ({} missing); load without it or resume from "
                   "another checkpoint",
                   dir_,
                   kind_ == Kind::kHuggingFace ? "a Hugging Face folder" : kOptimizerIndexFile);
      }
      // Moments a ZeRO-1 set keeps sharded are allocated whole here (parallel/zero1.h).
      if (!p.m.defined()) p.m = backend.Empty(p.value.shape(), tensor::DType::kF32);
      if (!p.v.defined()) p.v = backend.Empty(p.value.shape(), tensor::DType::kF32);
      for (std::string_view prefix : kMomentPrefixes) {
        const std::string name = std::string(prefix) + p.name();
        tensor::Tensor& dst = prefix == kMomentPrefixes[0] ? p.m : p.v;
        MOTLEY_RETURN_IF_ERROR(add(dst, Locate(optimizer_map_, name, kOptimizerIndexFile), name));
      }
    }
  }
  for (Job& job : jobs) {
    MOTLEY_RETURN_IF_ERROR(LoadTensor(backend, *job.dst, *job.info, job.name, job.loc));
  }
  return Status::Ok();
}

Result<CheckpointMetadata> LoadIntoStage(const std::string& path, tensor::Backend& backend,
                                         model::ParameterSet& params, bool load_optimizer) {
  MOTLEY_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(path));
  MOTLEY_RETURN_IF_ERROR(reader.LoadIntoStage(backend, params, load_optimizer));
  return reader.metadata();
}

}  // namespace motley::train
