// Saving checkpoints: stage files, indices, config.json, sidecar and the atomic commit, the
// marker file and what may be deleted (see checkpoint.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/core.h>

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

Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Err(CodeForErrno(err, FileAccess::kWrite), "{}: cannot open for fsync: {}", path,
               std::strerror(err));
  }
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok)
    return Err(CodeForErrno(err, FileAccess::kWrite), "{}: fsync failed: {}", path,
               std::strerror(err));
  return Status::Ok();
}

// Writes a small text file into the (temporary) checkpoint folder, fsynced; returns its record.
// O_EXCL | O_NOFOLLOW: the folder is ours and fresh, nothing there is written over or through.
Result<FileRecord> WriteTextFile(const std::string& dir, const std::string& name,
                                 const std::string& text) {
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return Err(CodeForErrno(err, FileAccess::kWrite), "{}: cannot create: {}", path,
               std::strerror(err));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Err(CodeForErrno(err, FileAccess::kWrite), "{}: write failed: {}", path,
                 std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return Err(CodeForErrno(err, FileAccess::kWrite), "{}: fsync failed: {}", path,
               std::strerror(err));
  }
  if (::close(fd) != 0) {
    const int err = errno;
    return Err(CodeForErrno(err, FileAccess::kWrite), "{}: close failed: {}", path,
               std::strerror(err));
  }
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
    return Err(StatusCode::kInternal, "stage files: bad file record: {}", e.what());
  }
}

bool HasMarker(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kMarkerFile, ec) && !fs::is_symlink(dir, ec);
}

// Removes a folder motley wrote (it carries the marker); a folder without it is left alone.
void RemoveIfMarked(const fs::path& dir) {
  std::error_code ec;
  if (HasMarker(dir)) fs::remove_all(dir, ec);  // best effort: a leftover is harmless
}

// Removes marked complete checkpoints beyond the newest `keep_last`, never `keep`.
void Prune(const std::string& root, int64_t keep_last, const std::string& keep) {
  const std::vector<std::pair<int64_t, std::string>> complete = MarkedCheckpoints(root);
  const auto excess = static_cast<int64_t>(complete.size()) - std::max<int64_t>(keep_last, 1);
  for (int64_t i = 0; i < excess; ++i) {
    const std::string& name = complete[static_cast<size_t>(i)].second;
    if (name == keep) continue;
    RemoveIfMarked(fs::path(root) / name);
  }
}

// kFailedPrecondition when `latest` names a step newer than `step`.
Status CheckLatestDoesNotMoveBack(const std::string& root, int64_t step) {
  const std::optional<int64_t> latest = LatestStep(root);
  if (latest && *latest > step) {
    return Err(StatusCode::kFailedPrecondition,
               "{}/{} names {}, newer than the step {} being saved: refusing to move it back "
               "(another run writes into this folder? resume from it, or train into another "
               "folder)",
               root, kLatestFile, CheckpointDirName(*latest), step);
  }
  return Status::Ok();
}

constexpr const char* kMarkerText =
    "A motley checkpoint folder (docs/formats/checkpoint.md). motley deletes only folders that "
    "hold this file (keep-last pruning, --overwrite).\n";

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
    return Err(StatusCode::kInternal,
               "stage files: expected {{\"stage\", \"model\", \"optimizer\"}}, got {}", j.dump());
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

namespace {

// `p` absolute, with its existing part's links resolved, lexically normal, no trailing slash.
fs::path Resolved(const fs::path& p, std::error_code& ec) {
  fs::path out = fs::weakly_canonical(fs::absolute(p, ec), ec).lexically_normal();
  if (!out.has_filename() && out != out.root_path()) out = out.parent_path();
  return out;
}

}  // namespace

Status CheckCheckpointRoot(const std::string& root) {
  if (root.empty()) {
    return Err(StatusCode::kInvalidArgument, "checkpoint folder: empty path");
  }
  std::error_code ec;
  const fs::path canonical = Resolved(root, ec);
  if (ec) {
    return Err(StatusCode::kInvalidArgument, "{}: cannot resolve the checkpoint folder: {}", root,
               ec.message());
  }
  if (canonical == canonical.root_path()) {
    return Err(StatusCode::kInvalidArgument,
               "{}: the file-system root cannot be a checkpoint folder (motley creates and "
               "deletes step-N folders there): choose a folder of its own",
               root);
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    const fs::path home_dir = Resolved(home, ec);
    if (!ec && canonical == home_dir) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: the home directory cannot be a checkpoint folder (motley creates and "
                 "deletes step-N folders there): choose a folder of its own, e.g. {}/checkpoints",
                 root, home);
    }
  }
  if (fs::exists(fs::symlink_status(root, ec)) && !fs::is_directory(root, ec)) {
    return Err(StatusCode::kInvalidArgument, "{}: exists and is not a folder", root);
  }
  return Status::Ok();
}

std::optional<int64_t> LatestStep(const std::string& root) {
  std::error_code ec;
  const fs::path latest = fs::path(root) / kLatestFile;
  if (!fs::is_regular_file(fs::symlink_status(latest, ec))) return std::nullopt;
  auto text = ReadFile(latest.string());
  if (!text.ok()) return std::nullopt;
  std::string name = *text;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const std::optional<int64_t> step = internal::ParseCheckpointDirName(name);
  if (!step || !fs::exists(fs::path(root) / name / kSidecarFile, ec)) return std::nullopt;
  return step;
}

std::vector<std::pair<int64_t, std::string>> MarkedCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> complete;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = internal::ParseCheckpointDirName(name);
    if (step && HasMarker(entry.path()) && fs::exists(entry.path() / kSidecarFile, ec)) {
      complete.emplace_back(*step, name);
    }
  }
  std::sort(complete.begin(), complete.end());
  return complete;
}

Result<int> RemoveMarkedCheckpoints(const std::string& root) {
  MOTLEY_RETURN_IF_ERROR(CheckCheckpointRoot(root));
  std::error_code ec;
  if (!fs::exists(root, ec)) return 0;
  std::vector<fs::path> marked;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().filename().string().rfind("step-", 0) == 0 && HasMarker(entry.path())) {
      marked.push_back(entry.path());
    }
  }
  if (ec) {
    return Err(CodeForErrno(ec.value(), FileAccess::kWrite),
               "{}: cannot list the checkpoint folder: {}", root, ec.message());
  }
  for (const fs::path& dir : marked) {
    fs::remove_all(dir, ec);
    if (ec) {
      return Err(CodeForErrno(ec.value(), FileAccess::kWrite), "{}: cannot remove: {}",
                 dir.string(), ec.message());
    }
  }
  const fs::path latest = fs::path(root) / kLatestFile;
  if (fs::is_regular_file(fs::symlink_status(latest, ec))) fs::remove(latest, ec);
  return static_cast<int>(marked.size());
}

Result<std::string> BeginCheckpoint(const std::string& root, int64_t step) {
  MOTLEY_CHECK(step >= 0, "BeginCheckpoint: negative step");
  MOTLEY_RETURN_IF_ERROR(CheckCheckpointRoot(root));
  MOTLEY_RETURN_IF_ERROR(CheckLatestDoesNotMoveBack(root, step));
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    return Err(CodeForErrno(ec.value(), FileAccess::kWrite),
               "{}: cannot create the checkpoint folder: {}", root, ec.message());
  }
  const std::string tmp = root + "/" + CheckpointDirName(step) + ".tmp";
  const fs::file_status st = fs::symlink_status(tmp, ec);
  if (fs::exists(st)) {  // a stale folder of an interrupted save, or something else
    if (fs::is_directory(st) && (HasMarker(tmp) || fs::is_empty(tmp, ec))) {
      fs::remove_all(tmp, ec);
      if (ec) {
        return Err(CodeForErrno(ec.value(), FileAccess::kWrite),
                   "{}: cannot remove a stale temporary folder: {}", tmp, ec.message());
      }
    } else {
      return Err(StatusCode::kFailedPrecondition,
                 "{}: exists and is not a folder motley wrote (no '{}' marker file): move it "
                 "away; motley never deletes what it did not write",
                 tmp, kMarkerFile);
    }
  }
  fs::create_directory(tmp, ec);
  if (ec) {
    return Err(CodeForErrno(ec.value(), FileAccess::kWrite), "{}: cannot create: {}", tmp,
               ec.message());
  }
  Result<FileRecord> marker = WriteTextFile(tmp, kMarkerFile, kMarkerText);
  if (!marker.ok()) {
    fs::remove_all(tmp, ec);  // ours: just created
    return marker.status();
  }
  return tmp;
}

void AbortCheckpoint(const std::string& tmp_dir) {
  RemoveIfMarked(tmp_dir);
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
      return Err(StatusCode::kInternal,
                 "tensor '{}': a TP rank's set lacks it or shards it differently", p.name());
    }
    if (!offsets.insert(q->info.shard_offset).second) {
      return Err(StatusCode::kInternal, "tensor '{}': two TP ranks hold the shard at offset {}",
                 p.name(), q->info.shard_offset);
    }
    const std::vector<float> part = ToHost(*r.backend, q->*member);
    PlaceSlice(full, full_shape, dim, q->info.shard_offset, part, q->info.shape);
    covered += q->info.shape[dim];
  }
  if (covered != full_shape[dim]) {
    return Err(StatusCode::kInternal,
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
        return Err(StatusCode::kInternal,
                   "stage {}: the AdamW moments of '{}' are not allocated (a ZeRO-1 set keeps them "
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

namespace {

// CommitCheckpoint without the clean-up of the temporary folder on failure.
Result<std::string> Commit(const std::string& root, const std::string& tmp_dir,
                           const CheckpointMetadata& metadata,
                           const std::vector<StageFiles>& stages, const SaveOptions& options) {
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
        return Err(StatusCode::kInternal,
                   "{}: tensor '{}' is written by two stages (stage {} repeats it)", tmp_dir, t,
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
  if (metadata.model) {  // the stages together must hold exactly the recorded model
    for (const model::ParamInfo& info :
         model::StageParamInfos(*metadata.model, model::StageLayout::Full(*metadata.model))) {
      if (seen.erase(info.name) == 0) {
        return Err(StatusCode::kInternal,
                   "{}: no stage wrote tensor '{}' of the model '{}' the checkpoint records",
                   tmp_dir, info.name, metadata.model->name);
      }
    }
    if (!seen.empty()) {
      return Err(StatusCode::kInternal,
                 "{}: tensor '{}' is not a tensor of the model '{}' the checkpoint records",
                 tmp_dir, *seen.begin(), metadata.model->name);
    }
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
  if (metadata.model) {
    MOTLEY_ASSIGN_OR_RETURN(
        FileRecord config,
        WriteTextFile(tmp_dir, kHfConfigFile, ModelToHfConfig(*metadata.model).dump(2) + "\n"));
    records.push_back(config);
  }

  MOTLEY_RETURN_IF_ERROR(phase("sidecar"));
  json files = json::object();
  for (const FileRecord& r : records) files[r.name] = {{"bytes", r.bytes}, {"sha256", r.sha256}};
  nlohmann::ordered_json sidecar;
  sidecar["format"] = "motley-checkpoint";
  sidecar["version"] = 2;
  sidecar["step"] = metadata.step;
  sidecar["consumed_samples"] = metadata.consumed_samples;
  sidecar["config_hash"] = metadata.config_hash;
  sidecar["model"] = metadata.model ? ModelConfigToJson(*metadata.model) : nullptr;
  sidecar["train"] = metadata.train;
  sidecar["rng"] = metadata.rng;
  sidecar["data_loader"] = metadata.data_loader;
  sidecar["plan"] = metadata.plan;
  sidecar["stages"] = sidecar_stages;
  sidecar["files"] = files;
  MOTLEY_RETURN_IF_ERROR(WriteTextFile(tmp_dir, kSidecarFile, sidecar.dump(2)).status());

  MOTLEY_RETURN_IF_ERROR(phase("fsync"));
  MOTLEY_RETURN_IF_ERROR(FsyncPath(tmp_dir));

  MOTLEY_RETURN_IF_ERROR(phase("rename"));
  MOTLEY_RETURN_IF_ERROR(CheckLatestDoesNotMoveBack(root, metadata.step));
  const std::string name = CheckpointDirName(metadata.step);
  const std::string final_dir = root + "/" + name;
  const std::string old_dir = final_dir + ".old";
  std::error_code ec;
  RemoveIfMarked(old_dir);
  bool moved_aside = false;
  if (fs::exists(fs::symlink_status(final_dir, ec))) {  // saving the same step again
    if (!HasMarker(final_dir)) {
      return Err(StatusCode::kFailedPrecondition,
                 "{}: exists and is not a folder motley wrote (no '{}' marker file): move it "
                 "away; motley never replaces what it did not write",
                 final_dir, kMarkerFile);
    }
    fs::rename(final_dir, old_dir, ec);
    if (ec) {
      return Err(CodeForErrno(ec.value(), FileAccess::kWrite),
                 "{}: cannot move the previous copy aside: {}", final_dir, ec.message());
    }
    moved_aside = true;
  }
  // From here a failure puts the previous state back.
  auto roll_back = [&](Status s) {
    std::error_code ignored;
    if (fs::exists(final_dir, ignored) && !fs::exists(tmp_dir, ignored)) {
      RemoveIfMarked(final_dir);
    }
    if (moved_aside) fs::rename(old_dir, final_dir, ignored);
    return s;
  };
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) {
    return roll_back(Err(CodeForErrno(ec.value(), FileAccess::kWrite),
                         "{}: rename to {} failed: {}", tmp_dir, final_dir, ec.message()));
  }
  if (Status s = FsyncPath(root); !s.ok()) return roll_back(s);
  if (Status s = phase("latest"); !s.ok()) return roll_back(s);
  // WriteFileAtomic fsyncs ROOT after its rename.
  if (Status s = WriteFileAtomic(root + "/" + kLatestFile, name + "\n"); !s.ok()) {
    return roll_back(s);
  }
  RemoveIfMarked(old_dir);
  Prune(root, options.keep_last, name);
  return final_dir;
}

}  // namespace

Result<std::string> CommitCheckpoint(const std::string& root, const std::string& tmp_dir,
                                     const CheckpointMetadata& metadata,
                                     const std::vector<StageFiles>& stages,
                                     const SaveOptions& options) {
  Result<std::string> committed = Commit(root, tmp_dir, metadata, stages, options);
  if (!committed.ok()) AbortCheckpoint(tmp_dir);  // a no-op once it was renamed
  return committed;
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
    Status ready = phase(fmt::format("stage {}", s));
    Result<StageFiles> files =
        ready.ok()
            ? WriteStageFiles(tmp, s, n, stages[static_cast<size_t>(s)], options.save_optimizer)
            : Result<StageFiles>(ready);
    if (!files.ok()) {
      AbortCheckpoint(tmp);
      return files.status();
    }
    written.push_back(std::move(*files));
  }
  return CommitCheckpoint(root, tmp, metadata, written, options);
}

}  // namespace motley::train
