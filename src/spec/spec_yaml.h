// Internal to spec: parsers of the YAML sections shared by the cluster file and the run file.
// Each takes the node, the file name for messages and the field path of the node ("cluster",
// "" for a whole cluster file), and returns a validated value.
#pragma once

#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "core/status.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"

namespace motley::spec::internal {

// A finalized cluster.
Result<ClusterSpec> ParseClusterNode(const YAML::Node& node, const std::string& file,
                                     const std::string& path);
// A validated model: a preset name, a model file (a string ending in .yaml/.yml, relative to
// `base_dir`), a mapping of fields, or `preset:` plus overrides.
Result<ModelSpec> ParseModelNode(const YAML::Node& node, const std::string& file,
                                 const std::string& path, const std::string& base_dir);
// A validated TrainSpec; relative data paths are resolved against `base_dir`.
Result<TrainSpec> ParseTrainNode(const YAML::Node& node, const std::string& file,
                                 const std::string& path, const std::string& base_dir);

}  // namespace motley::spec::internal
