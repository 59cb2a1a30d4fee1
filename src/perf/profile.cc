// See profile.h. nlohmann::json exceptions are caught here, at the boundary.
#include "perf/profile.h"

#include <limits>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/json_read.h"
#include "spec/limits.h"

namespace motley::perf {
namespace {

using nlohmann::json;

// A number in [0, max].
Status ReadNumber(const json& obj, const char* key, std::string_view where, double* out,
                  bool required, double max = spec::kMaxPassSeconds) {
  if (!obj.contains(key)) {
    if (required) return Err("{}.{}: missing", where, key);
    return Status::Ok();
  }
  const json& v = obj.at(key);
  if (!v.is_number()) return Err("{}.{}: expected a number", where, key);
  *out = v.get<double>();
  if (!(*out >= 0)) return Err("{}.{}: must not be negative, got {}", where, key, *out);
  if (*out > max) return Err("{}.{}: must be at most {:g}, got {:g}", where, key, max, *out);
  return Status::Ok();
}

// An integer in [1, max].
Status ReadInt(const json& obj, const char* key, std::string_view where, int64_t* out,
               int64_t max = std::numeric_limits<int>::max()) {
  if (!obj.contains(key)) return Err("{}.{}: missing", where, key);
  const json& v = obj.at(key);
  if (!v.is_number_integer()) return Err("{}.{}: expected an integer", where, key);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
    return Err("{}.{}: must be at most {}, got {}", where, key, max, v.dump());
  }
  *out = v.get<int64_t>();
  if (*out <= 0) return Err("{}.{}: must be positive, got {}", where, key, *out);
  if (*out > max) return Err("{}.{}: must be at most {}, got {}", where, key, max, *out);
  return Status::Ok();
}

// An optional string field; `fallback` when absent.
Result<std::string> ReadString(const json& obj, const char* key, std::string_view where,
                               const char* fallback) {
  auto it = obj.find(key);
  if (it == obj.end()) return std::string(fallback);
  if (!it->is_string())
    return Err("{}: {}: expected a string, got {}", where, key, it->type_name());
  return it->get_ref<const std::string&>();
}

Result<Profile> ParseJson(const json& root, std::string_view name) {
  Profile profile;
  profile.source = std::string(name);
  if (!root.is_object()) return Err("{}: expected a JSON object", name);
  MOTLEY_ASSIGN_OR_RETURN(const std::string format, ReadString(root, "format", name, ""));
  if (format != "motley-profile") {
    return Err("{}: format: expected \"motley-profile\"", name);
  }
  if (!root.contains("version") || root.at("version") != 1) {
    return Err("{}: version: expected 1", name);
  }
  if (!root.contains("model") || !root.at("model").is_object()) {
    return Err("{}: model: missing or not an object", name);
  }
  const json& model = root.at("model");
  const std::string where_model = fmt::format("{}: model", name);
  MOTLEY_RETURN_IF_ERROR(ReadInt(model, "hidden", where_model, &profile.hidden));
  MOTLEY_RETURN_IF_ERROR(ReadInt(model, "num_heads", where_model, &profile.num_heads));
  MOTLEY_RETURN_IF_ERROR(ReadInt(model, "num_kv_heads", where_model, &profile.num_kv_heads));
  MOTLEY_RETURN_IF_ERROR(ReadInt(model, "ffn_hidden", where_model, &profile.ffn_hidden));
  MOTLEY_RETURN_IF_ERROR(ReadInt(model, "vocab_size", where_model, &profile.vocab_size));
  MOTLEY_ASSIGN_OR_RETURN(profile.precision, ReadString(root, "precision", name, "fp32"));
  if (profile.precision != "fp32" && profile.precision != "bf16") {
    return Err("{}: precision: expected \"fp32\" or \"bf16\", got \"{}\"", name, profile.precision);
  }
  MOTLEY_ASSIGN_OR_RETURN(profile.comment, ReadString(root, "comment", name, ""));
  if (!root.contains("devices") || !root.at("devices").is_array()) {
    return Err("{}: devices: missing or not an array", name);
  }
  size_t di = 0;
  for (const json& dev : root.at("devices")) {
    const std::string where = fmt::format("{}: devices[{}]", name, di++);
    if (!dev.is_object()) return Err("{}: expected an object", where);
    DeviceProfile dp;
    if (!dev.contains("device_type") || !dev.at("device_type").is_string()) {
      return Err("{}.device_type: missing or not a string", where);
    }
    dp.device_type = dev.at("device_type").get<std::string>();
    if (!dev.contains("entries") || !dev.at("entries").is_array()) {
      return Err("{}.entries: missing or not an array", where);
    }
    size_t ei = 0;
    for (const json& e : dev.at("entries")) {
      const std::string ew = fmt::format("{}.entries[{}]", where, ei++);
      if (!e.is_object()) return Err("{}: expected an object", ew);
      ProfileEntry entry;
      int64_t tp = 0;
      MOTLEY_RETURN_IF_ERROR(ReadInt(e, "tp", ew, &tp));
      entry.tp = static_cast<int>(tp);
      MOTLEY_RETURN_IF_ERROR(
          ReadInt(e, "micro_batch_size", ew, &entry.micro_batch_size, spec::kMaxTokensPerStep));
      MOTLEY_RETURN_IF_ERROR(ReadInt(e, "seq_len", ew, &entry.seq_len, spec::kMaxSeqLen));
      MOTLEY_RETURN_IF_ERROR(ReadNumber(e, "block_forward_s", ew, &entry.block_forward_s, true));
      MOTLEY_RETURN_IF_ERROR(ReadNumber(e, "block_backward_s", ew, &entry.block_backward_s, true));
      MOTLEY_RETURN_IF_ERROR(
          ReadNumber(e, "embedding_forward_s", ew, &entry.embedding_forward_s, false));
      MOTLEY_RETURN_IF_ERROR(
          ReadNumber(e, "embedding_backward_s", ew, &entry.embedding_backward_s, false));
      MOTLEY_RETURN_IF_ERROR(ReadNumber(e, "head_forward_s", ew, &entry.head_forward_s, false));
      MOTLEY_RETURN_IF_ERROR(ReadNumber(e, "head_backward_s", ew, &entry.head_backward_s, false));
      if (entry.block_forward_s <= 0 || entry.block_backward_s <= 0) {
        return Err("{}: block_forward_s and block_backward_s must be positive", ew);
      }
      dp.entries.push_back(entry);
    }
    MOTLEY_RETURN_IF_ERROR(ReadNumber(dev, "step_s_per_param", where, &dp.step_s_per_param, false,
                                      spec::kMaxSecondsPerParam));
    profile.devices.push_back(std::move(dp));
  }
  return profile;
}

}  // namespace

Result<Profile> ParseProfile(std::string_view json_text, std::string_view name) {
  // Strict: duplicate keys, nesting depth and size are errors (core/json_read.h).
  MOTLEY_ASSIGN_OR_RETURN(const json root, ParseJsonStrict(json_text, name));
  try {
    return AsInputError(ParseJson(root, name));
  } catch (const json::exception& e) {  // a mistyped field the checks above did not foresee
    return Err(StatusCode::kInvalidArgument, "{}: invalid profile: {}", name, e.what());
  }
}

Result<Profile> LoadProfile(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseProfile(text, path);
}

std::string ProfileToJson(const Profile& profile) {
  json root;
  root["format"] = "motley-profile";
  root["version"] = 1;
  root["model"] = {{"hidden", profile.hidden},         {"num_heads", profile.num_heads},
                   {"num_kv_heads", profile.num_kv_heads}, {"ffn_hidden", profile.ffn_hidden},
                   {"vocab_size", profile.vocab_size}};
  root["precision"] = profile.precision;
  if (!profile.comment.empty()) root["comment"] = profile.comment;
  json devices = json::array();
  for (const DeviceProfile& dp : profile.devices) {
    json entries = json::array();
    for (const ProfileEntry& e : dp.entries) {
      entries.push_back({{"tp", e.tp},
                         {"micro_batch_size", e.micro_batch_size},
                         {"seq_len", e.seq_len},
                         {"block_forward_s", e.block_forward_s},
                         {"block_backward_s", e.block_backward_s},
                         {"embedding_forward_s", e.embedding_forward_s},
                         {"embedding_backward_s", e.embedding_backward_s},
                         {"head_forward_s", e.head_forward_s},
                         {"head_backward_s", e.head_backward_s}});
    }
    json device = {{"device_type", dp.device_type}, {"entries", entries}};
    if (dp.step_s_per_param > 0) device["step_s_per_param"] = dp.step_s_per_param;
    devices.push_back(std::move(device));
  }
  root["devices"] = devices;
  return root.dump(2) + "\n";
}

Status SaveProfile(const Profile& profile, const std::string& path) {
  return WriteFileAtomic(path, ProfileToJson(profile));
}

Status CheckProfileMatchesModel(const Profile& profile, const spec::ModelSpec& model) {
  const std::string name = profile.source.empty() ? "profile" : profile.source;
  auto check = [&](const char* field, int64_t have, int64_t want) -> Status {
    if (have != want) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: model.{}: the profile was measured with {} but the model has {}", name, field,
                 have, want);
    }
    return Status::Ok();
  };
  MOTLEY_RETURN_IF_ERROR(check("hidden", profile.hidden, model.hidden));
  MOTLEY_RETURN_IF_ERROR(check("num_heads", profile.num_heads, model.num_heads));
  MOTLEY_RETURN_IF_ERROR(check("num_kv_heads", profile.num_kv_heads, model.num_kv_heads));
  MOTLEY_RETURN_IF_ERROR(check("ffn_hidden", profile.ffn_hidden, model.ffn_hidden));
  MOTLEY_RETURN_IF_ERROR(check("vocab_size", profile.vocab_size, model.vocab_size));
  return Status::Ok();
}

}  // namespace motley::perf
