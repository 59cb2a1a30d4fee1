// See run_file.h.
#include "spec/run_file.h"

#include <string>

#include <fmt/format.h>

#include "core/file_util.h"
#include "spec/spec_yaml.h"
#include "spec/yaml_reader.h"

namespace motley::spec {
namespace {

// One emulated CPU device. Speeds are below what one core of the development machines measured
// (sgemm ~104 GFLOP/s, triad ~27 GB/s on one thread: the project's reference notes,
// performance-model.md), so the wall-clock emulation can honour them.
constexpr std::string_view kDefaultRunYaml = R"(# motley's embedded default run: `motley train` without arguments.
cluster:
  name: local-cpu
  device_types:
    - name: cpu
      vendor: cpu
      peak_flops: 100 GFLOPS
      memory: 4 GiB
      memory_bandwidth: 25 GB/s
      emulated: {flops: 50 GFLOPS, memory_bandwidth: 10 GB/s}
  nodes:
    - {name: local, device_type: cpu, device_count: 1}
model: small
train:
  global_batch: 8
  seq_len: 128
  steps: 200
  seed: 1234
  optimizer: {lr: 1.0e-3, min_lr: 1.0e-4, warmup_steps: 20}
  data: {format: text}
  val_every: 50
  val_batches: 4
)";

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

Status ValidateRunFile(const RunFile& run, std::string_view name_for_errors) {
  if (run.train.seq_len > run.model.max_seq_len) {
    return Err(StatusCode::kInvalidArgument, "{}: train.seq_len: {} exceeds model.max_seq_len {}",
               name_for_errors, run.train.seq_len, run.model.max_seq_len);
  }
  if (run.train.data.format == "text" && run.model.vocab_size < 256) {
    return Err(StatusCode::kInvalidArgument,
               "{}: model.vocab_size: {} is too small for the byte-level tokenizer of "
               "train.data.format 'text' (needs >= 256)",
               name_for_errors, run.model.vocab_size);
  }
  return Status::Ok();
}

namespace {

Result<RunFile> ParseRunFileImpl(std::string_view yaml_text, std::string_view name_for_errors,
                                 const std::string& base_dir) {
  const std::string file(name_for_errors);
  MOTLEY_ASSIGN_OR_RETURN(const YAML::Node root, internal::LoadYaml(yaml_text, file));
  MOTLEY_ASSIGN_OR_RETURN(const internal::MapReader map, internal::MapReader::Make(root, file, ""));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys({"cluster", "model", "train"}));
  for (const char* key : {"cluster", "model", "train"}) {
    if (!map.Has(key)) return map.MissingError(key);
  }
  RunFile run;
  const YAML::Node cluster = map.Get("cluster");
  if (cluster.IsScalar()) {
    const std::string& rel = cluster.Scalar();
    if (rel.empty()) return map.Error("cluster", "expected a cluster file path or mapping");
    run.cluster_path = (base_dir.empty() || rel.front() == '/') ? rel : base_dir + "/" + rel;
    Result<ClusterSpec> loaded = LoadClusterSpec(run.cluster_path);
    if (!loaded.ok()) return internal::FieldContext(loaded.status(), file, "cluster");
    run.cluster = std::move(loaded).value();
  } else {
    MOTLEY_ASSIGN_OR_RETURN(run.cluster, internal::ParseClusterNode(cluster, file, "cluster"));
  }
  MOTLEY_ASSIGN_OR_RETURN(run.model,
                          internal::ParseModelNode(map.Get("model"), file, "model", base_dir));
  MOTLEY_ASSIGN_OR_RETURN(run.train,
                          internal::ParseTrainNode(map.Get("train"), file, "train", base_dir));
  MOTLEY_RETURN_IF_ERROR(ValidateRunFile(run, file));
  return run;
}

}  // namespace

Result<RunFile> ParseRunFile(std::string_view yaml_text, std::string_view name_for_errors,
                             const std::string& base_dir) {
  return AsInputError(ParseRunFileImpl(yaml_text, name_for_errors, base_dir));
}

Result<RunFile> LoadRunFile(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  MOTLEY_ASSIGN_OR_RETURN(RunFile run, ParseRunFile(text, path, DirName(path)));
  run.path = path;
  return run;
}

std::string_view DefaultRunFileYaml() { return kDefaultRunYaml; }

RunFile DefaultRunFile() {
  Result<RunFile> run = ParseRunFile(kDefaultRunYaml, "<default run>", "");
  MOTLEY_CHECK(run.ok(), "the embedded default run must parse: " + run.status().message());
  return std::move(run).value();
}

}  // namespace motley::spec
