// RunFile: what a user writes to start any motley command (docs/formats/run-file.md): a cluster
// (a path relative to the run file, or inline), a model (preset name, mapping, or preset plus
// overrides) and the training settings. Plain value type.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"

namespace motley::spec {

struct RunFile {
  std::string path;          // the run file as given ("" for text parsed in memory)
  std::string cluster_path;  // resolved path of the cluster file; "" when inline
  ClusterSpec cluster;       // finalized
  ModelSpec model;           // validated
  TrainSpec train;           // validated; data paths resolved against the run file's folder
};

// Reads and validates a run file. Errors: "<path>: <field path>: <reason>", e.g.
// "runs/x.yaml: train.global_batch: must be positive, got 0".
Result<RunFile> LoadRunFile(const std::string& path);

// Parses run-file YAML. `name_for_errors` stands for the file name in messages; `base_dir` is the
// folder that relative paths (cluster file, data files) are resolved against ("" = current dir).
Result<RunFile> ParseRunFile(std::string_view yaml_text, std::string_view name_for_errors,
                             const std::string& base_dir);

// The embedded default run for `motley train` without arguments: the "small" preset on the shipped
// corpus (train.data.train_path empty), one emulated CPU device on one node. Never fails.
RunFile DefaultRunFile();
// Its YAML text (also a complete example of the format).
std::string_view DefaultRunFileYaml();

// Cross-checks between sections (train.seq_len <= model.max_seq_len, ...); run by the parsers.
Status ValidateRunFile(const RunFile& run, std::string_view name_for_errors);

// Checks a TrainSpec on its own (positive sizes, probabilities in range, known data format).
// Errors are prefixed with `where` (e.g. "run.yaml: train").
Status ValidateTrainSpec(const TrainSpec& train, std::string_view where);

}  // namespace motley::spec
