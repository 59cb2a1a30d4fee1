// Saving checkpoints: stage files, indices, sidecar and the atomic commit (see checkpoint.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/core.h>

#include "core/file_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/checkpoint/sha256.h"
#include "train/checkpoint/shards.h"

namespace motley::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Err("{}: cannot open for fsync: {}", path, std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  const std::string reason = ok ? "" : std::strerror(errno);
  ::close(fd);
  if (!ok) return Err("{}: fsync failed: {}", path, reason);
  return Status::Ok();
}

// Writes a small text file into the (temporary) checkpoint folder, fsynced; returns its record.
Result<FileRecord> WriteTextFile(const std::string& dir, const std::string& name,
                                 const std::string& text) {
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Err("{}: cannot create: {}", path, std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      return Err("{}: write failed: {}", path, reason);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return Err("{}: fsync/close failed", path);
  return FileRecord{name, text.size(), Sha256Hex(text), {}};
}

Result<FileRecord> WriteTensors(const std::string& dir, const std::string& name,
                                const std::vector<HostTensorView>& views,
                                const std::map<std::string, std::string>& metadata) {
  MOTLEY_ASSIGN_OR_RETURN(WrittenFile written, WriteSafetensors(dir + "/" + name, views, metadata));
  FileRecord record{name, written.bytes, written.sha256, {}};
  for (const HostTensorView& v : views) record.tensors.push_back(v.name);
  return record;
}

json RecordToJson(const FileRecord& r) {
  return {{"name", r.name}, {"bytes", r.bytes}, {"sha256", r.sha256}, {"tensors", r.tensors}};
}

Result<FileRecord> RecordFromJson(const json& j) {
  try {
    return FileRecord{j.at("name").get<std::string>(), j.at("bytes").get<uint64_t>(),
                      j.at("sha256").get<std::string>(),
                      j.at("tensors").get<std::vector<std::string>>()};
  } catch (const json::exception& e) {
    return Err("stage files: bad file record: {}", e.what());
  }
}

// Removes complete checkpoints beyond the newest `keep_last`, never `keep`.
void Prune(const std::string& root, int64_t keep_last, const std::string& keep) {
  std::vector<std::pair<int64_t, std::string>> complete;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = internal::ParseCheckpointDirName(name);
    if (step && fs::exists(entry.path() / kSidecarFile, ec)) complete.emplace_back(*step, name);
  }
  std::sort(complete.begin(), complete.end());
  const auto excess = static_cast<int64_t>(complete.size()) - std::max<int64_t>(keep_last, 1);
  for (int64_t i = 0; i < excess; ++i) {
    const std::string& name = complete[static_cast<size_t>(i)].second;
    if (name == keep) continue;
    fs::remove_all(fs::path(root) / name, ec);  // best effort: a leftover is harmless
  }
}

}  // namespace

std::string CheckpointDirName(int64_t step) {
  return fmt::format("step-{:08d}", step);
}

json StageFilesToJson(const StageFiles& files) {
  json j = {{"stage", files.stage}, {"model", RecordToJson(files.model)}};
  j["optimizer"] = files.optimizer ? RecordToJson(*files.optimizer) : json(nullptr);
  return j;
}

Result<StageFiles> StageFilesFromJson(const json& j) {
  if (!j.is_object() || !j.contains("stage") || !j["stage"].is_number_integer() ||
      !j.contains("model")) {
    return Err("stage files: expected {{\"stage\", \"model\", \"optimizer\"}}, got {}", j.dump());
  }
  StageFiles files;
  files.stage = j["stage"].get<int>();
  MOTLEY_ASSIGN_OR_RETURN(files.model, RecordFromJson(j["model"]));
  if (j.contains("optimizer") && !j["optimizer"].is_null()) {
    MOTLEY_ASSIGN_OR_RETURN(FileRecord opt, RecordFromJson(j["optimizer"]));
    files.optimizer = std::move(opt);
  }
  return files;
}

Result<std::string> BeginCheckpoint(const std::string& root, int64_t step) {
  MOTLEY_CHECK(step >= 0, "BeginCheckpoint: negative step");
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Err("{}: cannot create the checkpoint folder: {}", root, ec.message());
  const std::string tmp = root + "/" + CheckpointDirName(step) + ".tmp";
  fs::remove_all(tmp, ec);  // a stale folder of an interrupted save
  if (ec) return Err("{}: cannot remove a stale temporary folder: {}", tmp, ec.message());
  fs::create_directory(tmp, ec);
  if (ec) return Err("{}: cannot create: {}", tmp, ec.message());
  return tmp;
}

namespace {

std::vector<float> ToHost(tensor::Backend& backend, const tensor::Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  backend.CopyToHost(host.data(), t, t.bytes());
  return host;
}

// The whole tensor `member` (value, m or v) of parameter `p`: a host copy, or, for a TP shard,
// the full tensor assembled from every rank's shard.
Result<std::vector<float>> WholeTensor(const StageToSave& source, const model::Parameter& p,
                                       tensor::Tensor model::Parameter::*member) {
  if (!p.info.sharded()) return ToHost(*source.backend, p.*member);
  const tensor::Shape full_shape = p.info.full_shape;
  const int dim = p.info.shard_dim;
  std::vector<float> full(static_cast<size_t>(full_shape.numel()));
  std::vector<ShardSource> ranks = {{source.backend, source.params}};
  ranks.insert(ranks.end(), source.other_tp_ranks.begin(), source.other_tp_ranks.end());
  std::set<int64_t> offsets;
  int64_t covered = 0;
  for (const ShardSource& r : ranks) {
    MOTLEY_CHECK(r.backend != nullptr && r.params != nullptr, "StageToSave: null TP rank");
    const model::Parameter* q = r.params->Find(p.name());
    if (q == nullptr || q->info.shard_dim != dim || !(q->info.full_shape == full_shape)) {
      return Err("tensor '{}': a TP rank's set lacks it or shards it differently", p.name());
    }
    if (!offsets.insert(q->info.shard_offset).second) {
      return Err("tensor '{}': two TP ranks hold the shard at offset {}", p.name(),
                 q->info.shard_offset);
    }
    const std::vector<float> part = ToHost(*r.backend, q->*member);
    PlaceSlice(full, full_shape, dim, q->info.shard_offset, part, q->info.shape);
    covered += q->info.shape[dim];
  }
  if (covered != full_shape[dim]) {
    return Err(
        "tensor '{}': the TP shards cover {} of {} along dimension {}: pass every TP "
        "rank's set",
        p.name(), covered, full_shape[dim], dim);
  }
  return full;
}

}  // namespace

Result<StageFiles> WriteStageFiles(const std::string& tmp_dir, int stage, int num_stages,
                                   const StageToSave& source, bool save_optimizer) {
  MOTLEY_CHECK(stage >= 0 && stage < num_stages, "WriteStageFiles: stage out of range");
  MOTLEY_CHECK(source.backend != nullptr && source.params != nullptr, "WriteStageFiles: null");
  // Whole host copies of every tensor (values, then moments), in the set's order.
  std::vector<std::vector<float>> values, moments;
  std::vector<HostTensorView> model_views, opt_views;
  values.reserve(source.params->size());
  moments.reserve(2 * source.params->size());
  for (const model::Parameter& p : *source.params) {
    const std::vector<int64_t> dims = p.info.FullShape().dims();
    MOTLEY_ASSIGN_OR_RETURN(std::vector<float> value,
                            WholeTensor(source, p, &model::Parameter::value));
    values.push_back(std::move(value));
    model_views.push_back({p.name(), dims, values.back()});
    if (save_optimizer) {
      if (!p.m.defined() || !p.v.defined()) {
        return Err("stage {}: the AdamW moments of '{}' are not allocated (a ZeRO-1 set keeps them "
                   "sharded: gather them first, parallel/zero1.h)",
                   stage, p.name());
      }
      MOTLEY_ASSIGN_OR_RETURN(std::vector<float> m, WholeTensor(source, p, &model::Parameter::m));
      moments.push_back(std::move(m));
      opt_views.push_back({"optimizer.m." + p.name(), dims, moments.back()});
      MOTLEY_ASSIGN_OR_RETURN(std::vector<float> v, WholeTensor(source, p, &model::Parameter::v));
      moments.push_back(std::move(v));
      opt_views.push_back({"optimizer.v." + p.name(), dims, moments.back()});
    }
  }
  const std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"motley.stage", std::to_string(stage)},
      {"motley.num_stages", std::to_string(num_stages)}};
  StageFiles files;
  files.stage = stage;
  const std::string suffix = fmt::format("{:05d}-of-{:05d}.safetensors", stage + 1, num_stages);
  MOTLEY_ASSIGN_OR_RETURN(files.model, WriteTensors(tmp_dir, "model-" + suffix, model_views, meta));
  if (save_optimizer) {
    MOTLEY_ASSIGN_OR_RETURN(FileRecord opt,
                            WriteTensors(tmp_dir, "optimizer-" + suffix, opt_views, meta));
    files.optimizer = std::move(opt);
  }
  return files;
}

Result<std::string> CommitCheckpoint(const std::string& root, const std::string& tmp_dir,
                                     const CheckpointMetadata& metadata,
                                     const std::vector<StageFiles>& stages,
                                     const SaveOptions& options) {
  auto phase = [&](std::string_view name) {
    return options.fault_hook ? options.fault_hook(name) : Status::Ok();
  };
  // Indices: Hugging Face's layout {"metadata": {"total_size"}, "weight_map": {name: file}}.
  json model_map = json::object(), opt_map = json::object();
  uint64_t model_bytes = 0, opt_bytes = 0;
  std::set<std::string> seen;
  json sidecar_stages = json::array();
  std::vector<FileRecord> records;
  for (const StageFiles& s : stages) {
    for (const std::string& t : s.model.tensors) {
      if (!seen.insert(t).second) {
        return Err("{}: tensor '{}' is written by two stages (stage {} repeats it)", tmp_dir, t,
                   s.stage);
      }
      model_map[t] = s.model.name;
    }
    model_bytes += s.model.bytes;
    records.push_back(s.model);
    json st = {
        {"stage", s.stage}, {"model_file", s.model.name}, {"tensors", s.model.tensors.size()}};
    st["optimizer_file"] = s.optimizer ? json(s.optimizer->name) : json(nullptr);
    if (s.optimizer) {
      for (const std::string& t : s.optimizer->tensors) opt_map[t] = s.optimizer->name;
      opt_bytes += s.optimizer->bytes;
      records.push_back(*s.optimizer);
    }
    sidecar_stages.push_back(st);
  }
  MOTLEY_RETURN_IF_ERROR(phase("index"));
  MOTLEY_ASSIGN_OR_RETURN(
      FileRecord model_index,
      WriteTextFile(
          tmp_dir, kModelIndexFile,
          json{{"metadata", {{"total_size", model_bytes}}}, {"weight_map", model_map}}.dump(2)));
  records.push_back(model_index);
  if (!opt_map.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(
        FileRecord opt_index,
        WriteTextFile(
            tmp_dir, kOptimizerIndexFile,
            json{{"metadata", {{"total_size", opt_bytes}}}, {"weight_map", opt_map}}.dump(2)));
    records.push_back(opt_index);
  }

  MOTLEY_RETURN_IF_ERROR(phase("sidecar"));
  json files = json::object();
  for (const FileRecord& r : records) files[r.name] = {{"bytes", r.bytes}, {"sha256", r.sha256}};
  const json sidecar = {{"format", "motley-checkpoint"},
                        {"version", 1},
                        {"step", metadata.step},
                        {"consumed_samples", metadata.consumed_samples},
                        {"config_hash", metadata.config_hash},
                        {"rng", metadata.rng},
                        {"data_loader", metadata.data_loader},
                        {"plan", metadata.plan},
                        {"stages", sidecar_stages},
                        {"files", files}};
  MOTLEY_RETURN_IF_ERROR(WriteTextFile(tmp_dir, kSidecarFile, sidecar.dump(2)).status());

  MOTLEY_RETURN_IF_ERROR(phase("fsync"));
  MOTLEY_RETURN_IF_ERROR(FsyncPath(tmp_dir));

  MOTLEY_RETURN_IF_ERROR(phase("rename"));
  const std::string name = CheckpointDirName(metadata.step);
  const std::string final_dir = root + "/" + name;
  const std::string old_dir = final_dir + ".old";
  std::error_code ec;
  fs::remove_all(old_dir, ec);
  if (fs::exists(final_dir, ec)) {  // saving the same step again (e.g. after a resume)
    fs::rename(final_dir, old_dir, ec);
    if (ec) return Err("{}: cannot move the previous copy aside: {}", final_dir, ec.message());
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return Err("{}: rename to {} failed: {}", tmp_dir, final_dir, ec.message());
  MOTLEY_RETURN_IF_ERROR(FsyncPath(root));
  fs::remove_all(old_dir, ec);

  MOTLEY_RETURN_IF_ERROR(phase("latest"));
  MOTLEY_RETURN_IF_ERROR(WriteFileAtomic(root + "/" + kLatestFile, name + "\n"));
  MOTLEY_RETURN_IF_ERROR(FsyncPath(root));
  Prune(root, options.keep_last, name);
  return final_dir;
}

Result<std::string> SaveCheckpoint(const std::string& root, const CheckpointMetadata& metadata,
                                   const std::vector<StageToSave>& stages,
                                   const SaveOptions& options) {
  MOTLEY_CHECK(!stages.empty(), "SaveCheckpoint: no stages");
  auto phase = [&](std::string_view name) {
    return options.fault_hook ? options.fault_hook(name) : Status::Ok();
  };
  MOTLEY_RETURN_IF_ERROR(phase("begin"));
  MOTLEY_ASSIGN_OR_RETURN(std::string tmp, BeginCheckpoint(root, metadata.step));
  std::vector<StageFiles> written;
  const int n = static_cast<int>(stages.size());
  for (int s = 0; s < n; ++s) {
    MOTLEY_RETURN_IF_ERROR(phase(fmt::format("stage {}", s)));
    MOTLEY_ASSIGN_OR_RETURN(
        StageFiles files,
        WriteStageFiles(tmp, s, n, stages[static_cast<size_t>(s)], options.save_optimizer));
    written.push_back(std::move(files));
  }
  return CommitCheckpoint(root, tmp, metadata, written, options);
}

}  // namespace motley::train
