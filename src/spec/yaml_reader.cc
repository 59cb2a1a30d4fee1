// See yaml_reader.h.
#include "spec/yaml_reader.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include "core/file_util.h"

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
  if (path.empty()) return Err(StatusCode::kInvalidArgument, "{}: {}", file, reason);
  return Err(StatusCode::kInvalidArgument, "{}: {}: {}", file, path, reason);
}

Status FieldContext(const Status& status, std::string_view file, std::string_view path) {
  const Status with_path = path.empty() ? status : status.WithContext(std::string(path));
  return with_path.WithContext(std::string(file));
}

namespace {

// Walks the tree once: duplicate keys, depth, node count. Recursion depth is bounded by
// kMaxYamlDepth (checked before descending).
Status CheckTree(const YAML::Node& node, std::string_view file, const std::string& path, int depth,
                 size_t* visited) {
  if (++*visited > kMaxYamlNodes) {
    return FieldError(
        file, "",
        fmt::format("more than {} YAML nodes (aliases counted at each use)", kMaxYamlNodes));
  }
  if (depth > kMaxYamlDepth) {
    return FieldError(
        file, path, fmt::format("mappings and lists nested deeper than {} levels", kMaxYamlDepth));
  }
  if (node.IsMap()) {
    std::set<std::string, std::less<>> keys;
    for (const auto& entry : node) {
      std::string key = entry.first.IsScalar() ? entry.first.Scalar() : std::string();
      const std::string at = JoinPath(path, key);
      if (entry.first.IsScalar() && !keys.insert(key).second) {
        return FieldError(file, at, "key given twice");
      }
      MOTLEY_RETURN_IF_ERROR(CheckTree(entry.second, file, at, depth + 1, visited));
    }
  } else if (node.IsSequence()) {
    size_t i = 0;
    for (const auto& item : node) {
      MOTLEY_RETURN_IF_ERROR(CheckTree(item, file, IndexPath(path, i++), depth + 1, visited));
    }
  }
  return Status::Ok();
}

// Records where each document starts; ignores everything else.
class DocumentStarts final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { last = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  YAML::Mark last;
};

// Whether a quote at text[i] opens a quoted scalar: it follows the start of the line, a blank,
// or a flow indicator.
bool OpensQuote(std::string_view line, size_t i) {
  if (i == 0) return true;
  const char prev = line[i - 1];
  return prev == ' ' || prev == '\t' || prev == '[' || prev == '{' || prev == ',' || prev == ':' ||
         prev == '-' || prev == '?';
}

}  // namespace

int YamlNestingBound(std::string_view text, int limit, int* line_number) {
  std::vector<size_t> indents;  // block indentation stack (outside flow collections)
  int flow = 0;                 // open flow brackets
  int deepest = 0;
  char quote = 0;  // inside a quoted scalar that spans lines
  int number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    size_t i = 0;
    int block = static_cast<int>(indents.size());
    if (flow == 0 && quote == 0) {
      while (i < line.size() && line[i] == ' ') ++i;
      if (i == line.size() || line[i] == '#' || line[i] == '\r') continue;  // blank or comment
      while (!indents.empty() && indents.back() > i) indents.pop_back();
      if (indents.empty() || indents.back() < i) indents.push_back(i);
      block = static_cast<int>(indents.size());
      // Compact entries on one line: "- - x", "? - x".
      while (i + 1 < line.size() && (line[i] == '-' || line[i] == '?') &&
             (line[i + 1] == ' ' || line[i + 1] == '\t')) {
        ++block;
        i += 2;
        while (i < line.size() && line[i] == ' ') ++i;
      }
    }
    for (; i < line.size(); ++i) {
      const char c = line[i];
      if (quote != 0) {
        if (quote == '"' && c == '\\') {
          ++i;
        } else if (c == quote) {
          if (quote == '\'' && i + 1 < line.size() && line[i + 1] == '\'') {
            ++i;  // '' inside a single-quoted scalar
          } else {
            quote = 0;
          }
        }
        continue;
      }
      if ((c == '"' || c == '\'') && OpensQuote(line, i)) {
        quote = c;
      } else if (c == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
        break;  // comment
      } else if (c == '[' || c == '{') {
        ++flow;
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      }
      if (block + flow > deepest) {
        deepest = block + flow;
        *line_number = number;
        if (deepest > limit) return deepest;
      }
    }
    if (block > deepest) {
      deepest = block;
      *line_number = number;
      if (deepest > limit) return deepest;
    }
  }
  return deepest;
}

Result<YAML::Node> LoadYaml(std::string_view text, std::string_view file) {
  if (text.size() > kMaxTextFileBytes) {
    return FieldError(file, "",
                      fmt::format("{} bytes of YAML, larger than the {} MiB limit", text.size(),
                                  kMaxTextFileBytes >> 20));
  }
  int line = 0;
  if (YamlNestingBound(text, kMaxYamlDepth, &line) > kMaxYamlDepth) {
    return Err(StatusCode::kInvalidArgument,
               "{}:{}: mappings and lists nested deeper than {} levels", file, line, kMaxYamlDepth);
  }
  // The document itself (YAML::Load), then whether a second one follows: a parser walks the
  // events of at most two documents. (YAML::LoadAll loops forever on some malformed input: its
  // parser can report a document without consuming anything; found by fuzz/run_file_fuzz.cc,
  // fuzz/regressions/run_file.)
  YAML::Node root;
  bool second = false;
  YAML::Mark second_at;
  try {
    const std::string copy(text);
    root = YAML::Load(copy);
    std::istringstream stream(copy);
    YAML::Parser parser(stream);
    DocumentStarts starts;
    if (parser.HandleNextDocument(starts) && parser.HandleNextDocument(starts)) {
      second = true;
      second_at = starts.last;
    }
  } catch (const YAML::DeepRecursion& e) {
    return Err(StatusCode::kInvalidArgument,
               "{}:{}:{}: mappings and lists nested deeper than {} levels", file, e.mark.line + 1,
               e.mark.column + 1, kMaxYamlDepth);
  } catch (const YAML::Exception& e) {
    return Err(StatusCode::kInvalidArgument, "{}:{}:{}: YAML syntax error: {}", file,
               e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (second) {
    return Err(StatusCode::kInvalidArgument,
               "{}:{}: a second YAML document ('---') or text after the document; a motley file "
               "holds one document",
               file, second_at.line >= 0 ? second_at.line + 1 : 0);
  }
  if (!root.IsDefined() || root.IsNull()) return FieldError(file, "", "empty document");
  size_t visited = 0;
  MOTLEY_RETURN_IF_ERROR(CheckTree(root, file, "", 0, &visited));
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
  if (std::abs(value) > static_cast<double>(std::numeric_limits<float>::max())) {
    return Error(key, fmt::format("{} is out of the range of a 32-bit float", value));
  }
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
