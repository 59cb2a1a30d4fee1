// See json_read.h.
#include "core/json_read.h"

#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace motley {
namespace {

using nlohmann::json;

// Where the parser is: one frame per open container, for the path of a duplicate key.
struct Frame {
  bool object = false;
  std::set<std::string> keys;  // objects
  std::string key;             // objects: the key being read
  size_t index = 0;            // arrays: the element being read
};

std::string PathOf(const std::vector<Frame>& frames) {
  std::string path;
  // frames[0] is the document; each open container but the innermost names its current child.
  for (size_t i = 1; i + 1 < frames.size(); ++i) {
    const Frame& f = frames[i];
    if (f.object) {
      path += path.empty() ? f.key : "." + f.key;
    } else {
      path += fmt::format("[{}]", f.index);
    }
  }
  return path;
}

}  // namespace

int JsonNestingDepth(std::string_view text, int limit, size_t* offset) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        *offset = i;
        if (deepest > limit) return deepest;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Result<json> ParseJsonStrict(std::string_view text, std::string_view file, size_t max_bytes) {
  if (text.size() > max_bytes) {
    return Err(StatusCode::kInvalidArgument,
               "{}: {} bytes of JSON, larger than the {} MiB limit of this kind of file", file,
               text.size(), max_bytes >> 20);
  }
  size_t at = 0;
  if (JsonNestingDepth(text, kMaxJsonDepth, &at) > kMaxJsonDepth) {
    return Err(StatusCode::kInvalidArgument,
               "{}: arrays and objects nested deeper than {} levels (at byte {})", file,
               kMaxJsonDepth, at);
  }
  std::vector<Frame> frames(1);
  std::string duplicate;  // path of the first key given twice
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames.push_back(Frame{event == json::parse_event_t::object_start, {}, {}, 0});
        break;
      case json::parse_event_t::key: {
        Frame& top = frames.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second && duplicate.empty()) {
          duplicate = PathOf(frames);
          duplicate += duplicate.empty() ? top.key : "." + top.key;
        }
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (frames.size() > 1) frames.pop_back();
        if (!frames.back().object) ++frames.back().index;
        break;
      case json::parse_event_t::value:
        if (!frames.back().object) ++frames.back().index;
        break;
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    return Err(StatusCode::kInvalidArgument, "{}: JSON syntax error: {}", file, e.what());
  }
  if (!duplicate.empty()) {
    return Err(StatusCode::kInvalidArgument, "{}: {}: key given twice", file, duplicate);
  }
  return root;
}

Result<json> ReadJsonFile(const std::string& path, size_t max_bytes) {
  MOTLEY_ASSIGN_OR_RETURN(const std::string text, ReadFile(path, max_bytes));
  return ParseJsonStrict(text, path, max_bytes);
}

}  // namespace motley
