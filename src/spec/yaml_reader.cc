// See yaml_reader.h.
#include "spec/yaml_reader.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace motley::spec::internal {
namespace {

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    case YAML::NodeType::Undefined: return "nothing";
  }
  return "nothing";
}

}  // namespace

std::string JoinPath(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return fmt::format("{}.{}", path, key);
}

std::string IndexPath(std::string_view path, size_t index) {
  return fmt::format("{}[{}]", path, index);
}

Status FieldError(std::string_view file, std::string_view path, std::string_view reason) {
  if (path.empty()) return Err("{}: {}", file, reason);
  return Err("{}: {}: {}", file, path, reason);
}

Result<YAML::Node> LoadYaml(std::string_view text, std::string_view file) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Err("{}:{}:{}: YAML syntax error: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) return Err("{}: empty document", file);
  return root;
}

Result<int64_t> ReadInt(const YAML::Node& node, std::string_view file, std::string_view path) {
  if (!node.IsScalar()) {
    return FieldError(file, path, "expected an integer, got " + Describe(node));
  }
  const std::string& text = node.Scalar();
  int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range) {
    return FieldError(file, path, fmt::format("integer out of range: '{}'", text));
  }
  if (ec != std::errc() || ptr != end || begin == end) {
    return FieldError(file, path, fmt::format("expected an integer, got '{}'", text));
  }
  return value;
}

Result<double> ReadDouble(const YAML::Node& node, std::string_view file, std::string_view path) {
  if (!node.IsScalar()) {
    return FieldError(file, path, "expected a number, got " + Describe(node));
  }
  const std::string& text = node.Scalar();
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end || !std::isfinite(value)) {
    return FieldError(file, path, fmt::format("expected a number, got '{}'", text));
  }
  return value;
}

Result<bool> ReadBool(const YAML::Node& node, std::string_view file, std::string_view path) {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (text == "true" || text == "True" || text == "yes") return true;
    if (text == "false" || text == "False" || text == "no") return false;
  }
  return FieldError(file, path, "expected true or false, got " + Describe(node));
}

Result<std::string> ReadString(const YAML::Node& node, std::string_view file,
                               std::string_view path) {
  if (!node.IsScalar()) return FieldError(file, path, "expected a string, got " + Describe(node));
  return node.Scalar();
}

Result<double> ReadQuantity(const YAML::Node& node, QuantityKind kind, std::string_view file,
                            std::string_view path) {
  if (!node.IsScalar()) {
    return FieldError(file, path,
                      fmt::format("expected {}, got {}", QuantityKindName(kind), Describe(node)));
  }
  Result<double> value = ParseQuantity(node.Scalar(), kind);
  if (!value.ok()) return FieldError(file, path, value.status().message());
  return value;
}

Result<MapReader> MapReader::Make(const YAML::Node& node, std::string file, std::string path) {
  if (!node.IsMap()) {
    return FieldError(file, path, "expected a mapping (key: value lines), got " + Describe(node));
  }
  return MapReader(node, std::move(file), std::move(path));
}

Status MapReader::CheckKeys(std::initializer_list<std::string_view> allowed) const {
  std::set<std::string> seen;
  for (const auto& entry : node_) {
    if (!entry.first.IsScalar()) return FieldError(file_, path_, "keys must be plain strings");
    const std::string& key = entry.first.Scalar();
    bool known = false;
    for (std::string_view a : allowed) known = known || a == key;
    if (!known) {
      return FieldError(file_, PathOf(key),
                        fmt::format("unknown key (known: {})", fmt::join(allowed, ", ")));
    }
    if (!seen.insert(key).second) return FieldError(file_, PathOf(key), "key given twice");
  }
  return Status::Ok();
}

bool MapReader::Has(std::string_view key) const {
  for (const auto& entry : node_) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) return true;
  }
  return false;
}

YAML::Node MapReader::Get(std::string_view key) const {
  for (const auto& entry : node_) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) return entry.second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

Status MapReader::MissingError(std::string_view key) const {
  return FieldError(file_, PathOf(key), "missing required field");
}

Result<int64_t> MapReader::Int(std::string_view key) const {
  if (!Has(key)) return MissingError(key);
  return ReadInt(Get(key), file_, PathOf(key));
}

Result<double> MapReader::Double(std::string_view key) const {
  if (!Has(key)) return MissingError(key);
  return ReadDouble(Get(key), file_, PathOf(key));
}

Result<std::string> MapReader::String(std::string_view key) const {
  if (!Has(key)) return MissingError(key);
  return ReadString(Get(key), file_, PathOf(key));
}

Result<double> MapReader::Quantity(std::string_view key, QuantityKind kind) const {
  if (!Has(key)) return MissingError(key);
  return ReadQuantity(Get(key), kind, file_, PathOf(key));
}

Status MapReader::OptInt(std::string_view key, int64_t* out) const {
  if (!Has(key)) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(*out, ReadInt(Get(key), file_, PathOf(key)));
  return Status::Ok();
}

Status MapReader::OptInt(std::string_view key, int* out) const {
  if (!Has(key)) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(const int64_t value, ReadInt(Get(key), file_, PathOf(key)));
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return Error(key, fmt::format("integer out of range: {}", value));
  }
  *out = static_cast<int>(value);
  return Status::Ok();
}

Status MapReader::OptUint(std::string_view key, uint64_t* out) const {
  if (!Has(key)) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(const int64_t value, ReadInt(Get(key), file_, PathOf(key)));
  if (value < 0) return Error(key, fmt::format("must not be negative, got {}", value));
  *out = static_cast<uint64_t>(value);
  return Status::Ok();
}

Status MapReader::OptDouble(std::string_view key, double* out) const {
  if (!Has(key)) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(*out, ReadDouble(Get(key), file_, PathOf(key)));
  return Status::Ok();
}

Status MapReader::OptFloat(std::string_view key, float* out) const {
  if (!Has(key)) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(const double value, ReadDouble(Get(key), file_, PathOf(key)));
  *out = static_cast<float>(value);
  return Status::Ok();
}

Status MapReader::OptBool(std::string_view key, bool* out) const {
  if (!Has(key)) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(*out, ReadBool(Get(key), file_, PathOf(key)));
  return Status::Ok();
}

Status MapReader::OptString(std::string_view key, std::string* out) const {
  if (!Has(key)) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(*out, ReadString(Get(key), file_, PathOf(key)));
  return Status::Ok();
}

}  // namespace motley::spec::internal
