// Plan-independent checkpoints (docs/architecture.md §10, docs/formats/checkpoint.md). A checkpoint
// is a folder ROOT/step-NNNNNNNN holding, per writing stage s of S:
//   model-{s+1:05}-of-{S:05}.safetensors      parameters under their Hugging Face Llama names
//   optimizer-{s+1:05}-of-{S:05}.safetensors  AdamW moments "optimizer.m.<name>",
//   "optimizer.v.<name>"
// plus model.safetensors.index.json (Hugging Face's index: name -> file, model tensors only, so HF
// tools load the weights), optimizer.safetensors.index.json (the same for the moments) and the
// sidecar checkpoint.json (step, consumed samples, RNG and data-loader state, config hash, the
// writing plan, and the SHA-256 and size of every other file). ROOT/latest names the newest
// complete checkpoint.
//
// Commit protocol: files are written into ROOT/step-N.tmp and fsynced, the folder is fsynced and
// renamed to ROOT/step-N, ROOT is fsynced, then `latest` is replaced atomically (file_util.h), and
// only then are checkpoints beyond the last K removed. A save that stops at any point leaves the
// previous checkpoint and `latest` untouched (a stale .tmp is removed by the next save).
//
// Tensors are stored whole, so a checkpoint written by any stage layout loads into any other
// (LoadIntoStage looks each tensor of the target set up by name). Every check on load returns a
// Status naming the file, the tensor and the reason.
//
// Multi-rank use: rank 0 calls BeginCheckpoint; each stage's writer calls WriteStageFiles into the
// returned folder (one file pair per stage; a TP group gathers whole tensors first); after a
// barrier rank 0 calls CommitCheckpoint with every stage's StageFiles (exchange them as JSON with
// StageFilesToJson / StageFilesFromJson). SaveCheckpoint does all of it in one process.
// Thread safety: functions touch only their arguments and the file system; concurrent saves into
// one ROOT are not supported.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/parameters.h"
#include "tensor/backend.h"
#include "train/checkpoint/safetensors.h"

namespace motley::train {

struct CheckpointMetadata {
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // training sequences consumed so far
  std::string config_hash;       // of the model + train config, compared by the caller
  nlohmann::json rng = nlohmann::json::object();          // e.g. {"seed": 1234}
  nlohmann::json data_loader = nlohmann::json::object();  // e.g. {"next_step": 11}
  nlohmann::json plan = nullptr;  // the writing plan (Plan JSON), null when serial
};

// A file written into a checkpoint folder.
struct FileRecord {
  std::string name;  // relative to the checkpoint folder
  uint64_t bytes = 0;
  std::string sha256;
  std::vector<std::string> tensors;  // names it holds
};

// What one stage wrote.
struct StageFiles {
  int stage = 0;
  FileRecord model;
  std::optional<FileRecord> optimizer;  // unset when moments were not saved
};
nlohmann::json StageFilesToJson(const StageFiles& files);
Result<StageFiles> StageFilesFromJson(const nlohmann::json& j);

// One TP rank's parameter set (borrowed for the call).
struct ShardSource {
  tensor::Backend* backend = nullptr;
  const model::ParameterSet* params = nullptr;
};

// One stage's parameters to save (borrowed for the call). Without tensor parallelism only
// backend and params are set. With it, params is one TP rank's set and other_tp_ranks the
// rest of the group's (same names): each sharded tensor (ParamInfo::sharded()) is assembled whole
// from all of them, in host memory, before it is written; a shard set that does not cover a
// tensor exactly is an error naming the tensor. (Under mpiexec, gather the shards onto one rank
// first.)
struct StageToSave {
  StageToSave(tensor::Backend* b, const model::ParameterSet* p,
              std::vector<ShardSource> others = {})
      : backend(b), params(p), other_tp_ranks(std::move(others)) {}
  tensor::Backend* backend = nullptr;
  const model::ParameterSet* params = nullptr;
  std::vector<ShardSource> other_tp_ranks;
};

struct SaveOptions {
  int64_t keep_last = 3;       // complete checkpoints kept (>= 1); older ones are removed
  bool save_optimizer = true;  // write the AdamW moments
  // Test hook: called at each phase of the save ("begin", "stage 0", ..., "index", "sidecar",
  // "fsync", "rename", "latest"); a non-ok Status aborts the save right there, as a crash would.
  std::function<Status(std::string_view phase)> fault_hook;
};

std::string CheckpointDirName(int64_t step);  // "step-00000010"

// Creates (replacing a stale one) ROOT/step-N.tmp and returns its path.
Result<std::string> BeginCheckpoint(const std::string& root, int64_t step);
// Writes stage `stage` of `num_stages`: its values into the model file and, when
// save_optimizer, its moments into the optimizer file; both fsynced.
Result<StageFiles> WriteStageFiles(const std::string& tmp_dir, int stage, int num_stages,
                                   const StageToSave& source, bool save_optimizer);
// Writes the indices and the sidecar, commits (see above) and returns the final folder.
// Tensor names must be unique across stages.
Result<std::string> CommitCheckpoint(const std::string& root, const std::string& tmp_dir,
                                     const CheckpointMetadata& metadata,
                                     const std::vector<StageFiles>& stages,
                                     const SaveOptions& options = {});
// All of the above in one process; returns the final folder.
Result<std::string> SaveCheckpoint(const std::string& root, const CheckpointMetadata& metadata,
                                   const std::vector<StageToSave>& stages,
                                   const SaveOptions& options = {});

// The newest complete checkpoint folder under ROOT: the one `latest` names, or, when `latest` is
// missing or dangling, the step-N folder with the highest N that has a sidecar.
Result<std::string> FindLatestCheckpoint(const std::string& root);

// An opened, verified checkpoint. Open checks the sidecar, the presence, size and SHA-256 of every
// file, both indices and every safetensors header, and that indices and files agree.
class CheckpointReader {
 public:
  // `path`: a checkpoint folder (holding checkpoint.json) or a ROOT (its latest checkpoint).
  static Result<CheckpointReader> Open(const std::string& path);

  const std::string& dir() const { return dir_; }
  const CheckpointMetadata& metadata() const { return metadata_; }
  bool has_optimizer_state() const { return !optimizer_map_.empty(); }
  // Names of the model tensors it holds, sorted.
  std::vector<std::string> TensorNames() const;

  // Fills every parameter of `params` (any stage layout, any TP degree: a shard gets its slice)
  // from the whole tensors of the same name: values, and the AdamW moments when load_optimizer.
  // Errors: a name missing from the index, a shape that differs, a missing moment. On error
  // nothing has been written into `params` unless the failure is an I/O error while reading.
  Status LoadIntoStage(tensor::Backend& backend, model::ParameterSet& params,
                       bool load_optimizer = true) const;
  // One tensor (model or optimizer name) into host memory.
  Result<std::vector<float>> ReadTensor(const std::string& name) const;

 private:
  struct Location {
    std::string file;
    const SafetensorsEntry* entry = nullptr;
  };
  // Reads the whole tensor at `loc` and copies it, or its shard of `info`, into `dst`.
  Result<Location> Locate(const std::map<std::string, std::string>& map, const std::string& name,
                          const char* index_name) const;
  Status LoadTensor(tensor::Backend& backend, tensor::Tensor& dst, const model::ParamInfo& info,
                    const Location& loc) const;

  std::string dir_;
  CheckpointMetadata metadata_;
  std::map<std::string, std::string> model_map_;      // name -> file
  std::map<std::string, std::string> optimizer_map_;  // name -> file
  std::map<std::string, SafetensorsHeader> headers_;  // file -> header
};

// Opens `path` (folder or ROOT), loads `params` and returns the metadata.
Result<CheckpointMetadata> LoadIntoStage(const std::string& path, tensor::Backend& backend,
                                         model::ParameterSet& params, bool load_optimizer = true);

// Sidecar and index file names.
inline constexpr const char* kSidecarFile = "checkpoint.json";
inline constexpr const char* kModelIndexFile = "model.safetensors.index.json";
inline constexpr const char* kOptimizerIndexFile = "optimizer.safetensors.index.json";
inline constexpr const char* kLatestFile = "latest";

}  // namespace motley::train
