// Plan <-> versioned JSON (docs/formats/plan.md). nlohmann exceptions stop here. Version 3 adds
// a pipeline's `chunks` (interleaved 1F1B); version 2 sets recompute per stage
// (stages[].recompute); version 1 had one plan-level `recompute`, which is read as every stage's.
// Writing emits version 3 when a pipeline is interleaved and version 2 otherwise, so a reader of
// version 2 keeps reading every plan it can express.
#include <initializer_list>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/json_read.h"
#include "spec/plan.h"

namespace motley::spec {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "motley-plan";
constexpr int64_t kNewestVersion = 3;      // read, and written for interleaved plans
constexpr int64_t kPlainVersion = 2;       // written when no pipeline is interleaved
constexpr int64_t kOldestReadVersion = 1;  // read: 1 (plan-level recompute), 2 and 3

std::string Describe(const json& j) {
  std::string text = j.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return fmt::format("{} {}", j.type_name(), text);
}

// A JSON object with its file and field path, mirroring yaml_reader.h's MapReader.
class Obj {
 public:
  Obj(const json& j, std::string file, std::string path)
      : j_(j), file_(std::move(file)), path_(std::move(path)) {}

  static Result<Obj> Make(const json& j, const std::string& file, const std::string& path) {
    if (!j.is_object()) {
      return Err("{}: {}: expected an object, got {}", file, path.empty() ? "(top level)" : path,
                 Describe(j));
    }
    return Obj(j, file, path);
  }
  std::string PathOf(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }
  Status Error(std::string_view key, std::string_view reason) const {
    return Err("{}: {}: {}", file_, PathOf(key), reason);
  }
  Status CheckKeys(std::initializer_list<std::string_view> allowed) const {
    for (const auto& [key, value] : j_.items()) {
      bool known = false;
      for (std::string_view a : allowed) known = known || a == key;
      if (!known) return Error(key, fmt::format("unknown key (known: {})", fmt::join(allowed, ", ")));
    }
    return Status::Ok();
  }
  bool Has(std::string_view key) const { return j_.contains(key); }
  const json& Get(std::string_view key) const { return j_.at(std::string(key)); }
  Result<int64_t> Int(std::string_view key) const {
    if (!Has(key)) return Error(key, "missing required field");
    const json& v = Get(key);
    if (!v.is_number_integer()) return Error(key, "expected an integer, got " + Describe(v));
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(key, "integer out of range");
    }
    return v.get<int64_t>();
  }
  Result<bool> Bool(std::string_view key, bool fallback) const {
    if (!Has(key)) return fallback;
    const json& v = Get(key);
    if (!v.is_boolean()) return Error(key, "expected true or false, got " + Describe(v));
    return v.get<bool>();
  }
  Result<std::string> String(std::string_view key, bool required) const {
    if (!Has(key)) {
      if (required) return Error(key, "missing required field");
      return std::string();
    }
    const json& v = Get(key);
    if (!v.is_string()) return Error(key, "expected a string, got " + Describe(v));
    return v.get<std::string>();
  }
  Result<const json*> Array(std::string_view key) const {
    if (!Has(key)) return Error(key, "missing required field");
    const json& v = Get(key);
    if (!v.is_array()) return Error(key, "expected an array, got " + Describe(v));
    return &v;
  }
  const std::string& file() const { return file_; }

 private:
  const json& j_;
  std::string file_;
  std::string path_;
};

template <typename Enum>
Result<Enum> ParseEnum(const Obj& obj, std::string_view key, Enum fallback,
                       std::initializer_list<Enum> values, std::string_view (*name)(Enum)) {
  MOTLEY_ASSIGN_OR_RETURN(const std::string text, obj.String(key, false));
  if (text.empty()) return fallback;
  std::vector<std::string_view> names;
  for (Enum v : values) {
    if (name(v) == text) return v;
    names.push_back(name(v));
  }
  return obj.Error(key, fmt::format("unknown value '{}' (known: {})", text, fmt::join(names, ", ")));
}

Result<Recompute> ParseRecompute(const Obj& obj) {
  return ParseEnum(obj, "recompute", Recompute::kNone,
                   {Recompute::kNone, Recompute::kSelective, Recompute::kFull}, &RecomputeName);
}

// `version`: the file's; version 1 stages have no `recompute` of their own.
Result<StagePlan> ParseStage(const json& j, const std::string& file, const std::string& path,
                             int64_t version) {
  MOTLEY_ASSIGN_OR_RETURN(const Obj obj, Obj::Make(j, file, path));
  if (version >= 2) {
    MOTLEY_RETURN_IF_ERROR(obj.CheckKeys({"first_block", "num_blocks", "has_embedding", "has_head",
                                          "devices", "tp_degree", "recompute"}));
  } else {
    MOTLEY_RETURN_IF_ERROR(obj.CheckKeys(
        {"first_block", "num_blocks", "has_embedding", "has_head", "devices", "tp_degree"}));
  }
  StagePlan s;
  if (version >= 2) {
    MOTLEY_ASSIGN_OR_RETURN(s.recompute, ParseRecompute(obj));
  }
  MOTLEY_ASSIGN_OR_RETURN(s.first_block, obj.Int("first_block"));
  MOTLEY_ASSIGN_OR_RETURN(s.num_blocks, obj.Int("num_blocks"));
  MOTLEY_ASSIGN_OR_RETURN(s.has_embedding, obj.Bool("has_embedding", false));
  MOTLEY_ASSIGN_OR_RETURN(s.has_head, obj.Bool("has_head", false));
  MOTLEY_ASSIGN_OR_RETURN(const json* devices, obj.Array("devices"));
  for (size_t k = 0; k < devices->size(); ++k) {
    const json& d = (*devices)[k];
    if (!d.is_number_integer() || d.get<int64_t>() < 0 ||
        d.get<int64_t>() > std::numeric_limits<int>::max()) {
      return Err("{}: {}[{}]: expected a device id (integer >= 0), got {}", file,
                 obj.PathOf("devices"), k, Describe(d));
    }
    s.devices.push_back(static_cast<int>(d.get<int64_t>()));
  }
  s.tp_degree = static_cast<int>(s.devices.size());
  if (obj.Has("tp_degree")) {
    MOTLEY_ASSIGN_OR_RETURN(const int64_t tp, obj.Int("tp_degree"));
    if (tp < 1 || tp > std::numeric_limits<int>::max()) {
      return obj.Error("tp_degree", fmt::format("must be positive, got {}", tp));
    }
    s.tp_degree = static_cast<int>(tp);
  }
  return s;
}

Result<PipelinePlan> ParsePipeline(const json& j, const std::string& file, const std::string& path,
                                   int64_t version) {
  MOTLEY_ASSIGN_OR_RETURN(const Obj obj, Obj::Make(j, file, path));
  if (version >= 3) {
    MOTLEY_RETURN_IF_ERROR(
        obj.CheckKeys({"micro_batches", "micro_batch_size", "chunks", "stages"}));
  } else {
    MOTLEY_RETURN_IF_ERROR(obj.CheckKeys({"micro_batches", "micro_batch_size", "stages"}));
  }
  PipelinePlan p;
  if (obj.Has("chunks")) {
    MOTLEY_ASSIGN_OR_RETURN(const int64_t chunks, obj.Int("chunks"));
    if (chunks < 1 || chunks > std::numeric_limits<int>::max()) {
      return obj.Error("chunks", fmt::format("must be a positive count, got {}", chunks));
    }
    p.chunks = static_cast<int>(chunks);
  }
  MOTLEY_ASSIGN_OR_RETURN(p.micro_batches, obj.Int("micro_batches"));
  if (p.micro_batches < 1) {
    return obj.Error("micro_batches", fmt::format("must be positive, got {}", p.micro_batches));
  }
  MOTLEY_ASSIGN_OR_RETURN(p.micro_batch_size, obj.Int("micro_batch_size"));
  if (p.micro_batch_size < 1) {
    return obj.Error("micro_batch_size",
                     fmt::format("must be positive, got {}", p.micro_batch_size));
  }
  MOTLEY_ASSIGN_OR_RETURN(const json* stages, obj.Array("stages"));
  for (size_t s = 0; s < stages->size(); ++s) {
    MOTLEY_ASSIGN_OR_RETURN(
        StagePlan stage,
        ParseStage((*stages)[s], file, fmt::format("{}[{}]", obj.PathOf("stages"), s), version));
    p.stages.push_back(std::move(stage));
  }
  return p;
}

Result<Plan> ParsePlanImpl(std::string_view json_text, std::string_view name) {
  const std::string file(name);
  // Strict: duplicate keys, nesting depth and size are errors (core/json_read.h).
  MOTLEY_ASSIGN_OR_RETURN(const json root, ParseJsonStrict(json_text, file));
  MOTLEY_ASSIGN_OR_RETURN(const Obj obj, Obj::Make(root, file, ""));
  MOTLEY_RETURN_IF_ERROR(obj.CheckKeys({"format", "version", "schedule", "recompute",
                                        "optimizer_sharding", "comment", "pipelines"}));
  MOTLEY_ASSIGN_OR_RETURN(const std::string format, obj.String("format", true));
  if (format != kFormat) {
    return obj.Error("format", fmt::format("expected '{}', got '{}'", kFormat, format));
  }
  MOTLEY_ASSIGN_OR_RETURN(const int64_t version, obj.Int("version"));
  if (version < kOldestReadVersion || version > kNewestVersion) {
    return obj.Error("version", fmt::format("unsupported version {} (this build reads {} to {})",
                                            version, kOldestReadVersion, kNewestVersion));
  }
  if (version >= 2 && obj.Has("recompute")) {
    return obj.Error("recompute",
                     "versions 2 and 3 set recompute per stage (pipelines[].stages[].recompute); a "
                     "plan-level value is version 1 only");
  }
  Plan plan;
  plan.source = file;
  MOTLEY_ASSIGN_OR_RETURN(
      plan.schedule, ParseEnum(obj, "schedule", PipelineSchedule::k1F1B,
                               {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe},
                               &PipelineScheduleName));
  Recompute plan_recompute = Recompute::kNone;  // version 1: every stage's
  if (version == 1) {
    MOTLEY_ASSIGN_OR_RETURN(plan_recompute, ParseRecompute(obj));
  }
  MOTLEY_ASSIGN_OR_RETURN(
      plan.optimizer_sharding,
      ParseEnum(obj, "optimizer_sharding", OptimizerSharding::kNone,
                {OptimizerSharding::kNone, OptimizerSharding::kZero1}, &OptimizerShardingName));
  MOTLEY_ASSIGN_OR_RETURN(plan.comment, obj.String("comment", false));
  MOTLEY_ASSIGN_OR_RETURN(const json* pipelines, obj.Array("pipelines"));
  for (size_t p = 0; p < pipelines->size(); ++p) {
    MOTLEY_ASSIGN_OR_RETURN(
        PipelinePlan pipe,
        ParsePipeline((*pipelines)[p], file, fmt::format("pipelines[{}]", p), version));
    plan.pipelines.push_back(std::move(pipe));
  }
  if (version == 1) plan.SetRecompute(plan_recompute);
  return plan;
}

}  // namespace

Result<Plan> ParsePlan(std::string_view json_text, std::string_view name) {
  return AsInputError(ParsePlanImpl(json_text, name));
}

Result<Plan> LoadPlan(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParsePlan(text, path);
}

std::string PlanToJson(const Plan& plan) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  root["format"] = kFormat;
  bool interleaved = false;
  for (const PipelinePlan& p : plan.pipelines) interleaved = interleaved || p.chunks > 1;
  root["version"] = interleaved ? kNewestVersion : kPlainVersion;
  root["schedule"] = PipelineScheduleName(plan.schedule);
  root["optimizer_sharding"] = OptimizerShardingName(plan.optimizer_sharding);
  if (!plan.comment.empty()) root["comment"] = plan.comment;
  nlohmann::ordered_json pipelines = nlohmann::ordered_json::array();
  for (const PipelinePlan& p : plan.pipelines) {
    nlohmann::ordered_json pj = nlohmann::ordered_json::object();
    pj["micro_batches"] = p.micro_batches;
    pj["micro_batch_size"] = p.micro_batch_size;
    if (p.chunks > 1) pj["chunks"] = p.chunks;
    nlohmann::ordered_json stages = nlohmann::ordered_json::array();
    for (const StagePlan& s : p.stages) {
      nlohmann::ordered_json sj = nlohmann::ordered_json::object();
      sj["first_block"] = s.first_block;
      sj["num_blocks"] = s.num_blocks;
      sj["has_embedding"] = s.has_embedding;
      sj["has_head"] = s.has_head;
      sj["devices"] = s.devices;
      sj["tp_degree"] = s.tp_degree;
      sj["recompute"] = RecomputeName(s.recompute);
      stages.push_back(std::move(sj));
    }
    pj["stages"] = std::move(stages);
    pipelines.push_back(std::move(pj));
  }
  root["pipelines"] = std::move(pipelines);
  return root.dump(2) + "\n";
}

Status SavePlan(const Plan& plan, const std::string& path) {
  return WriteFileAtomic(path, PlanToJson(plan));
}

}  // namespace motley::spec
