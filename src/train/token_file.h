// Reading token ids from files: plain text through the byte tokenizer, or nanoGPT-style flat token
// files (`.bin`: raw little-endian ids, no header) of uint16 ids, plus a uint32 variant for
// vocabularies above 65536. The layout is documented in docs/formats/token-files.md.
// Free functions; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley::train {

enum class TokenFormat : uint8_t { kText, kU16, kU32 };

// "text" | "u16" | "u32" (the values of train.data.format in a run file).
Result<TokenFormat> ParseTokenFormat(std::string_view name);
const char* TokenFormatName(TokenFormat format);

// Reads every id of the file. Errors name the file and the reason: cannot open (missing,
// unreadable), size not a multiple of the id size, an id >= vocab_size (with its position), no ids.
Result<std::vector<int32_t>> ReadTokenFile(const std::string& path, TokenFormat format,
                                           int64_t vocab_size);

// Writes ids as a flat little-endian u16/u32 file (atomically); an id that does not fit is an
// error. For tests and for converting corpora.
Status WriteTokenFile(const std::string& path, TokenFormat format, const std::vector<int32_t>& ids);

}  // namespace motley::train
