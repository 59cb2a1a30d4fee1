// Internal to spec: typed, located access to yaml-cpp nodes, so that every parse error names the
// file, the field path and the reason ("run.yaml: train.steps: expected an integer, got 'ten'").
// yaml-cpp exceptions stop here. Not thread-safe across one node (yaml-cpp nodes share state).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "core/status.h"
#include "spec/quantity.h"

namespace motley::spec::internal {

// "a.b" / "b" when `path` is empty.
std::string JoinPath(std::string_view path, std::string_view key);
// "a[3]".
std::string IndexPath(std::string_view path, size_t index);

// Error "<file>: <path>: <reason>" (or "<file>: <reason>" when path is empty); kInvalidArgument.
Status FieldError(std::string_view file, std::string_view path, std::string_view reason);
// `status` (e.g. of a file the field names) behind "<file>: <path>: ", its code kept.
Status FieldContext(const Status& status, std::string_view file, std::string_view path);

// Deepest nesting of mappings and sequences LoadYaml accepts (motley's formats nest at most 6).
inline constexpr int kMaxYamlDepth = 64;
// Most nodes LoadYaml walks, aliases counted each time they are used (a "billion laughs" document
// of nested aliases is refused instead of expanded): 4Mi, ~100x the 768-device example cluster.
inline constexpr size_t kMaxYamlNodes = size_t{1} << 22;

// Parses one YAML document strictly. Errors (all kInvalidArgument):
//   text above 64 MiB (core/file_util.h kMaxTextFileBytes);
//   nesting deeper than kMaxYamlDepth, found by a scan of the text before parsing (indentation,
//     "- " entries and flow brackets; yaml-cpp also stops at 500 levels) and again in the tree;
//   syntax errors: "<file>:<line>:<col>: YAML syntax error: <what>";
//   a second document or text after the first ("<file>:<line>: a second YAML document ...");
//   a key given twice in any mapping ("<file>: <path>: key given twice");
//   more than kMaxYamlNodes nodes; an empty document ("<file>: empty document").
Result<YAML::Node> LoadYaml(std::string_view text, std::string_view file);

// An upper estimate of the nesting depth of YAML `text` (block indentation levels plus "- " and
// "? " entries on a line plus open flow brackets outside quotes), stopping once it exceeds `limit`
// (returns limit + 1 then); *line is set to the 1-based line where the deepest level was reached.
int YamlNestingBound(std::string_view text, int limit, int* line);

// Typed scalar readers for a node at `path`.
Result<int64_t> ReadInt(const YAML::Node& node, std::string_view file, std::string_view path);
Result<double> ReadDouble(const YAML::Node& node, std::string_view file, std::string_view path);
Result<bool> ReadBool(const YAML::Node& node, std::string_view file, std::string_view path);
Result<std::string> ReadString(const YAML::Node& node, std::string_view file,
                               std::string_view path);
Result<double> ReadQuantity(const YAML::Node& node, QuantityKind kind, std::string_view file,
                            std::string_view path);

// A YAML mapping with its location. Make() fails when the node is not a mapping.
class MapReader {
 public:
  static Result<MapReader> Make(const YAML::Node& node, std::string file, std::string path);

  // Fails on a key outside `allowed` ("unknown key 'stpes' (known: ...)") or a repeated key.
  Status CheckKeys(std::initializer_list<std::string_view> allowed) const;

  bool Has(std::string_view key) const;
  YAML::Node Get(std::string_view key) const;
  std::string PathOf(std::string_view key) const { return JoinPath(path_, key); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  Status Error(std::string_view key, std::string_view reason) const {
    return FieldError(file_, PathOf(key), reason);
  }
  Status MissingError(std::string_view key) const;

  // Required fields: missing -> "missing required field". Optional ones leave *out unchanged.
  Result<int64_t> Int(std::string_view key) const;
  Result<double> Double(std::string_view key) const;
  Result<std::string> String(std::string_view key) const;
  Result<double> Quantity(std::string_view key, QuantityKind kind) const;
  Status OptInt(std::string_view key, int64_t* out) const;
  Status OptInt(std::string_view key, int* out) const;
  Status OptUint(std::string_view key, uint64_t* out) const;
  Status OptDouble(std::string_view key, double* out) const;
  Status OptFloat(std::string_view key, float* out) const;
  Status OptBool(std::string_view key, bool* out) const;
  Status OptString(std::string_view key, std::string* out) const;

 private:
  MapReader(YAML::Node node, std::string file, std::string path)
      : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)) {}
  YAML::Node node_;
  std::string file_;
  std::string path_;
};

}  // namespace motley::spec::internal
