// Plan-independent checkpoints (docs/architecture.md §10, docs/formats/checkpoint.md). A checkpoint
// is a folder ROOT/step-NNNNNNNN holding, per writing stage s of S:
//   model-{s+1:05}-of-{S:05}.safetensors      parameters under their Hugging Face Llama names
//   optimizer-{s+1:05}-of-{S:05}.safetensors  AdamW moments "optimizer.m.<name>",
//   "optimizer.v.<name>"
// plus model.safetensors.index.json (Hugging Face's index: name -> file, model tensors only, so HF
// tools load the weights), optimizer.safetensors.index.json (the same for the moments),
// config.json (the model in Hugging Face's LlamaConfig form, model_config.h), the marker file
// `motley-checkpoint` (only folders holding it are ever deleted by motley) and the sidecar
// checkpoint.json (step, consumed samples, the config record of the model and of the training
// settings, RNG and data-loader state, the writing plan, and the SHA-256 and size of every other
// file). ROOT/latest names the newest complete checkpoint and never moves to an older step.
//
// Commit protocol: files are written into ROOT/step-N.tmp and fsynced, the folder is fsynced and
// renamed to ROOT/step-N, ROOT is fsynced, then `latest` is replaced atomically (file_util.h), and
// only then are marked checkpoints beyond the last K removed. A save that fails at any point
// removes what it wrote (the temporary folder, or the renamed folder when `latest` could not be
// written) and leaves the previous checkpoint and `latest` untouched.
//
// Tensors are stored whole, so a checkpoint written by any stage layout loads into any other
// (LoadIntoStage looks each tensor of the target set up by name). CheckpointReader also opens
// Hugging Face folders (config.json plus one or more safetensors files, with or without an index;
// F32, BF16 or F16 converted to fp32; tied embeddings untied). Every check on load returns a
// Status naming the file, the tensor or field and the reason; CheckModel refuses a checkpoint
// written for another model (naming each differing field and both values), unknown tensors, and
// LoadIntoStage non-finite values.
//
// Multi-rank use: rank 0 calls BeginCheckpoint; each stage's writer calls WriteStageFiles into the
// returned folder (one file pair per stage; a TP group gathers whole tensors first); after a
// barrier rank 0 calls CommitCheckpoint with every stage's StageFiles (exchange them as JSON with
// StageFilesToJson / StageFilesFromJson), or AbortCheckpoint when a stage failed. SaveCheckpoint
// does all of it in one process. Thread safety: functions touch only their arguments and the file
// system; concurrent saves into one ROOT are not supported.
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
#include "spec/model_spec.h"
#include "tensor/backend.h"
#include "train/checkpoint/safetensors.h"

namespace motley::train {

struct CheckpointMetadata {
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // training sequences consumed so far
  std::string config_hash;       // of the model + train config (informational)
  // The config record: the model the weights are for (written as the sidecar's "model" and as
  // config.json; the training loops always set it), and the training settings that shape the
  // trajectory (seed, batch, sequence length, steps, optimizer; trainer_checkpoint.h). Unset /
  // empty in checkpoints written without them (version 1, or a caller that gives none).
  std::optional<spec::ModelSpec> model;
  nlohmann::json train = nlohmann::json::object();
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

// Ok unless `root` may not hold checkpoints: the file-system root `/` or the home directory
// ($HOME), whatever the spelling (symbolic links resolved), or an existing path that is not a
// folder (kInvalidArgument).
Status CheckCheckpointRoot(const std::string& root);

// The step `ROOT/latest` names, or nullopt when it is absent or names no step-N folder.
std::optional<int64_t> LatestStep(const std::string& root);

// The complete checkpoints under ROOT that motley wrote (step-N folders holding the marker file
// and a sidecar), by step.
std::vector<std::pair<int64_t, std::string>> MarkedCheckpoints(const std::string& root);

// Removes every folder under ROOT carrying the marker (complete, stale .tmp and .old ones) and
// `latest`; other files are left alone. Returns how many folders were removed.
Result<int> RemoveMarkedCheckpoints(const std::string& root);

// Checks the root (CheckCheckpointRoot), refuses a step older than the one `latest` names
// (kFailedPrecondition: `latest` never moves backwards), creates ROOT/step-N.tmp with the marker
// file (removing a stale one only when it carries the marker; an unmarked folder there is an
// error) and returns its path.
Result<std::string> BeginCheckpoint(const std::string& root, int64_t step);
// Removes a temporary folder of BeginCheckpoint after a failed save (best effort; only when it
// carries the marker).
void AbortCheckpoint(const std::string& tmp_dir);
// Writes stage `stage` of `num_stages`: its values into the model file and, when
// save_optimizer, its moments into the optimizer file; both fsynced.
Result<StageFiles> WriteStageFiles(const std::string& tmp_dir, int stage, int num_stages,
                                   const StageToSave& source, bool save_optimizer);
// Writes the indices, config.json (when metadata.model is set) and the sidecar, commits (see
// above) and returns the final folder. Tensor names must be unique across stages. On failure the
// temporary folder (or the renamed one) is removed and the previous state is kept.
Result<std::string> CommitCheckpoint(const std::string& root, const std::string& tmp_dir,
                                     const CheckpointMetadata& metadata,
                                     const std::vector<StageFiles>& stages,
                                     const SaveOptions& options = {});
// All of the above in one process; returns the final folder. A failure removes what it wrote.
Result<std::string> SaveCheckpoint(const std::string& root, const CheckpointMetadata& metadata,
                                   const std::vector<StageToSave>& stages,
                                   const SaveOptions& options = {});

// The newest complete checkpoint folder under ROOT: the one `latest` names, or, when `latest` is
// missing or dangling, the step-N folder with the highest N that has a sidecar.
Result<std::string> FindLatestCheckpoint(const std::string& root);

// An opened, verified checkpoint or Hugging Face folder.
//  - motley checkpoint: Open checks the sidecar, the presence, size and SHA-256 of every file,
//    both indices and every safetensors header, and that indices and files agree;
//  - Hugging Face folder (config.json and safetensors files, no sidecar; checkpoint_read_hf.cc):
//    config.json is parsed (ParseHfConfig refuses what motley's model cannot express), the files
//    are those of model.safetensors.index.json or, without an index, every *.safetensors file of
//    the folder; every header is checked, and the index and the files must agree. Step 0, no
//    optimizer state. With tie_word_embeddings, lm_head.weight is read from
//    model.embed_tokens.weight (untied: the two are separate tensors from then on).
// Thread safety: after Open, the const methods only read the folder's files and may be called
// from several threads at once (every rank of a threads launch loads from one reader).
class CheckpointReader {
 public:
  enum class Kind : uint8_t { kMotley, kHuggingFace };

  // `path`: a checkpoint folder (holding checkpoint.json), a ROOT (its latest checkpoint) or a
  // Hugging Face folder.
  static Result<CheckpointReader> Open(const std::string& path);
  // Open, then CheckModel(model).
  static Result<CheckpointReader> OpenFor(const std::string& path, const spec::ModelSpec& model);

  Kind kind() const { return kind_; }
  const std::string& dir() const { return dir_; }
  const CheckpointMetadata& metadata() const { return metadata_; }
  bool has_optimizer_state() const { return !optimizer_map_.empty(); }
  // The model it was written for (the config record, or config.json); unset when not recorded.
  const std::optional<spec::ModelSpec>& model_config() const { return metadata_.model; }
  bool tied() const { return tied_; }
  // Names of the model tensors it holds, sorted.
  std::vector<std::string> TensorNames() const;
  // What was opened, for load messages: the folder, its kind and step, the dtypes converted and
  // the untying of tied embeddings.
  std::string Describe() const;

  // Checks that it holds `model`: the config record (or config.json) agrees (CompareModelConfigs:
  // each differing field named with both values); every tensor of the whole model is present
  // with its full shape; no model or optimizer tensor is one the model does not have.
  Status CheckModel(const spec::ModelSpec& model) const;

  // Fills every parameter of `params` (any stage layout, any TP degree: a shard gets its slice)
  // from the whole tensors of the same name: values, and the AdamW moments when load_optimizer.
  // Errors: a name missing from the index, a shape that differs, a missing moment, a non-finite
  // value (naming the tensor and the element). Names and shapes are checked before anything is
  // written into `params`; a failure while reading (I/O, a non-finite value) may leave it
  // partly loaded.
  Status LoadIntoStage(tensor::Backend& backend, model::ParameterSet& params,
                       bool load_optimizer = true) const;
  // One tensor (model or optimizer name) into host memory, fp32.
  Result<std::vector<float>> ReadTensor(const std::string& name) const;

 private:
  struct Location {
    std::string file;
    const SafetensorsEntry* entry = nullptr;
  };
  static Result<CheckpointReader> OpenMotley(const std::string& dir);
  static Result<CheckpointReader> OpenHuggingFace(const std::string& dir);  // checkpoint_read_hf.cc
  Result<Location> Locate(const std::map<std::string, std::string>& map, const std::string& name,
                          const char* index_name) const;
  // A model tensor, the tied counterpart standing in for a missing one when tied_.
  Result<Location> LocateModel(const std::string& name) const;
  // Reads the whole tensor at `loc` (checking every value is finite) and copies it, or its shard
  // of `info`, into `dst`.
  Status LoadTensor(tensor::Backend& backend, tensor::Tensor& dst, const model::ParamInfo& info,
                    const std::string& name, const Location& loc) const;
  Result<std::vector<float>> ReadChecked(const std::string& name, const Location& loc) const;

  Kind kind_ = Kind::kMotley;
  std::string dir_;
  CheckpointMetadata metadata_;
  bool tied_ = false;
  std::vector<std::string> notes_;                    // for Describe
  std::map<std::string, std::string> model_map_;      // name -> file
  std::map<std::string, std::string> optimizer_map_;  // name -> file
  std::map<std::string, SafetensorsHeader> headers_;  // file -> header
};

// Opens `path` (folder or ROOT), loads `params` and returns the metadata. Checks only the tensors
// `params` asks for (names, shapes, finite values); use CheckpointReader::OpenFor to also check
// the checkpoint against the model.
Result<CheckpointMetadata> LoadIntoStage(const std::string& path, tensor::Backend& backend,
                                         model::ParameterSet& params, bool load_optimizer = true);

// File names: the sidecar, the indices, the Hugging Face config, the marker and the pointer.
inline constexpr const char* kSidecarFile = "checkpoint.json";
inline constexpr const char* kModelIndexFile = "model.safetensors.index.json";
inline constexpr const char* kOptimizerIndexFile = "optimizer.safetensors.index.json";
inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kMarkerFile = "motley-checkpoint";
inline constexpr const char* kLatestFile = "latest";

}  // namespace motley::train
