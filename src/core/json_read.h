// Strict JSON input for every JSON file motley reads (plans, profiles, checkpoint sidecars,
// indices and safetensors headers): nlohmann::json with the checks its parser does not make.
//   - size: text above the caller's limit (64 MiB by default, core/file_util.h) is refused;
//   - nesting: depth is counted on the raw text before parsing (strings skipped), and text nested
//     deeper than kMaxJsonDepth is refused, so no recursive walk of the document (dump, destroy,
//     our own readers) can exhaust the stack;
//   - duplicate keys: an object that names a key twice is an error naming the key's path (the
//     JSON standard leaves it open and nlohmann keeps the last silently);
//   - syntax errors: the message names the file and nlohmann's line and column.
// Every error is kInvalidArgument. Pure functions; thread-safe. nlohmann exceptions stop here.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/status.h"

namespace motley {

// Deepest nesting of arrays and objects accepted. motley's own formats nest at most 8 levels (a
// plan inside a checkpoint sidecar); 64 leaves room for hand-written files and stays far below
// what a recursive walk of the tree needs of an 8 MiB stack, even under AddressSanitizer.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; `file` names it in errors ("plan.json: ...").
Result<nlohmann::json> ParseJsonStrict(std::string_view text, std::string_view file,
                                       size_t max_bytes = kMaxTextFileBytes);

// ReadFile (refusing special files and files above max_bytes) + ParseJsonStrict.
Result<nlohmann::json> ReadJsonFile(const std::string& path, size_t max_bytes = kMaxTextFileBytes);

// The deepest nesting of `[`/`{` in `text` outside strings, stopping early once it exceeds
// `limit` (returns limit + 1 then); *offset is set to the byte where that depth was reached.
int JsonNestingDepth(std::string_view text, int limit, size_t* offset);

}  // namespace motley
