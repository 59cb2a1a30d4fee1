// Loading checkpoints: finding the latest, verifying every file, filling any stage layout (see
// checkpoint.h).
#include <algorithm>
#include <filesystem>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "core/file_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_paths.h"
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
    return Err("{}: {} is missing or unreadable: not a complete checkpoint ({})", path, what,
               text.status().message());
  try {
    return json::parse(*text);
  } catch (const json::exception& e) {
    return Err("{}: {} is not valid JSON: {}", path, what, e.what());
  }
}

// Reads an index's weight_map; every file it names must be listed in the sidecar.
Result<std::map<std::string, std::string>> ReadIndex(const std::string& dir, const char* file,
                                                     const json& files) {
  const std::string path = dir + "/" + file;
  MOTLEY_ASSIGN_OR_RETURN(json index, ReadJson(path, "the index"));
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return Err("{}: field 'weight_map' is missing or not an object", path);
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, target] : index["weight_map"].items()) {
    if (!target.is_string()) return Err("{}: weight_map['{}'] is not a file name", path, name);
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

}  // namespace

Result<std::string> FindLatestCheckpoint(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return Err("{}: not a checkpoint folder (missing)", root);
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
    return Err("{}: no complete checkpoint (no '{}' pointer and no step-N folder with {})", root,
               kLatestFile, kSidecarFile);
  }
  return root + "/" + best->second;
}

Result<CheckpointReader> CheckpointReader::Open(const std::string& path) {
  std::error_code ec;
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const bool is_checkpoint = fs::exists(fs::path(dir) / kSidecarFile, ec) ||
                             internal::ParseCheckpointDirName(fs::path(dir).filename().string());
  if (!is_checkpoint) {
    MOTLEY_ASSIGN_OR_RETURN(dir, FindLatestCheckpoint(dir));
  }
  CheckpointReader reader;
  reader.dir_ = dir;
  const std::string sidecar_path = dir + "/" + kSidecarFile;
  MOTLEY_ASSIGN_OR_RETURN(json sidecar, ReadJson(sidecar_path, "the sidecar"));
  json files;
  try {
    if (sidecar.at("format").get<std::string>() != "motley-checkpoint") {
      return Err("{}: field 'format' is not \"motley-checkpoint\"", sidecar_path);
    }
    if (sidecar.at("version").get<int>() != 1) {
      return Err("{}: field 'version' {} is not supported (1 is)", sidecar_path,
                 sidecar["version"].dump());
    }
    CheckpointMetadata& m = reader.metadata_;
    m.step = sidecar.at("step").get<int64_t>();
    m.consumed_samples = sidecar.at("consumed_samples").get<int64_t>();
    m.config_hash = sidecar.at("config_hash").get<std::string>();
    m.rng = sidecar.at("rng");
    m.data_loader = sidecar.at("data_loader");
    m.plan = sidecar.at("plan");
    files = sidecar.at("files");
    if (!files.is_object()) return Err("{}: field 'files' is not an object", sidecar_path);
    for (const auto& [name, rec] : files.items()) {
      (void)rec.at("bytes").get<uint64_t>();
      (void)rec.at("sha256").get<std::string>();
    }
  } catch (const json::exception& e) {
    return Err("{}: missing or mistyped field: {}", sidecar_path, e.what());
  }
  // Counts a resume continues from (issue 17: `step: -5` reached a CHECK of the batch sampler).
  if (reader.metadata_.step < 0 || reader.metadata_.consumed_samples < 0) {
    return Err(StatusCode::kInvalidArgument,
               "{}: fields 'step' ({}) and 'consumed_samples' ({}) must not be negative",
               sidecar_path, reader.metadata_.step, reader.metadata_.consumed_samples);
  }
  if (!files.contains(kModelIndexFile)) {
    return Err("{}: field 'files' does not list {}", sidecar_path, kModelIndexFile);
  }

  // Every file: present, of the recorded size, with the recorded SHA-256.
  for (const auto& [name, rec] : files.items()) {
    const std::string file = dir + "/" + name;
    if (name.find('/') != std::string::npos || name == kSidecarFile) {
      return Err("{}: files: '{}' is not a plain file name of the checkpoint", sidecar_path, name);
    }
    if (!fs::is_regular_file(file, ec)) {
      return Err("{}: missing (the sidecar lists it): the checkpoint is incomplete", file);
    }
    const uint64_t size = fs::file_size(file, ec);
    const auto want = rec["bytes"].get<uint64_t>();
    if (ec || size != want) {
      return Err("{}: {} bytes, the sidecar records {} (truncated or overwritten)", file, size,
                 want);
    }
    MOTLEY_ASSIGN_OR_RETURN(std::string sha, Sha256OfFile(file));
    if (sha != rec["sha256"].get<std::string>()) {
      return Err("{}: SHA-256 mismatch: file has {}, the sidecar records {} (corrupted)", file, sha,
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
        return Err("{}/{}: the index maps tensor '{}' to this file, which does not hold it", dir,
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
  return reader;
}

std::vector<std::string> CheckpointReader::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : model_map_) names.push_back(name);
  return names;
}

Result<CheckpointReader::Location> CheckpointReader::Locate(
    const std::map<std::string, std::string>& map, const std::string& name,
    const char* index_name) const {
  auto it = map.find(name);
  if (it == map.end()) {
    return Err(
        "{}: tensor '{}' is not in {} ({} tensors listed; written for another model or "
        "without it?)",
        dir_, name, index_name, map.size());
  }
  return Location{it->second, headers_.at(it->second).Find(name)};
}

Status CheckpointReader::LoadTensor(tensor::Backend& backend, tensor::Tensor& dst,
                                    const model::ParamInfo& info, const Location& loc) const {
  std::vector<float> host(static_cast<size_t>(loc.entry->numel()));
  MOTLEY_RETURN_IF_ERROR(
      ReadSafetensorsTensor(dir_ + "/" + loc.file, headers_.at(loc.file), *loc.entry, host));
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
  MOTLEY_ASSIGN_OR_RETURN(Location loc, Locate(opt ? optimizer_map_ : model_map_, name,
                                               opt ? kOptimizerIndexFile : kModelIndexFile));
  std::vector<float> host(static_cast<size_t>(loc.entry->numel()));
  MOTLEY_RETURN_IF_ERROR(
      ReadSafetensorsTensor(dir_ + "/" + loc.file, headers_.at(loc.file), *loc.entry, host));
  return host;
}

Status CheckpointReader::LoadIntoStage(tensor::Backend& backend, model::ParameterSet& params,
                                       bool load_optimizer) const {
  // Resolve and check everything first, so that a failing load leaves `params` untouched.
  struct Job {
    tensor::Tensor* dst;
    const model::ParamInfo* info;
    Location loc;
  };
  std::vector<Job> jobs;
  for (model::Parameter& p : params) {
    const std::vector<int64_t> want = p.info.FullShape().dims();  // whole, even for a shard
    auto add = [&](tensor::Tensor& dst, const std::map<std::string, std::string>& map,
                   const std::string& name, const char* index) -> Status {
      MOTLEY_ASSIGN_OR_RETURN(Location loc, Locate(map, name, index));
      if (loc.entry->shape != want) {
        return Err("{}/{}: tensor '{}' has shape [{}], the stage expects [{}] (another model?)",
                   dir_, loc.file, name, fmt::join(loc.entry->shape, ", "), fmt::join(want, ", "));
      }
      jobs.push_back({&dst, &p.info, loc});
      return Status::Ok();
    };
    MOTLEY_RETURN_IF_ERROR(add(p.value, model_map_, p.name(), kModelIndexFile));
    if (load_optimizer) {
      if (optimizer_map_.empty()) {
        return Err(
            "{}: holds no optimizer state ({} missing); load without it or resume from "
            "another checkpoint",
            dir_, kOptimizerIndexFile);
      }
      // Moments a ZeRO-1 set keeps sharded are allocated whole here (parallel/zero1.h).
      if (!p.m.defined()) p.m = backend.Empty(p.value.shape(), tensor::DType::kF32);
      if (!p.v.defined()) p.v = backend.Empty(p.value.shape(), tensor::DType::kF32);
      MOTLEY_RETURN_IF_ERROR(
          add(p.m, optimizer_map_, "optimizer.m." + p.name(), kOptimizerIndexFile));
      MOTLEY_RETURN_IF_ERROR(
          add(p.v, optimizer_map_, "optimizer.v." + p.name(), kOptimizerIndexFile));
    }
  }
  for (Job& job : jobs) {
    MOTLEY_RETURN_IF_ERROR(LoadTensor(backend, *job.dst, *job.info, job.loc));
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
