// The byte-level tokenizer, motley's default: each byte of the text is one token id in 0..255, so
// any file is valid input and decoding is exact. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley::train {

class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;

  // One id per byte, in order (bytes are read as unsigned: 0xFF -> 255).
  static std::vector<int32_t> Encode(std::string_view text);
  // The bytes back; an id outside 0..255 is an error naming its position.
  static Result<std::string> Decode(std::span<const int32_t> ids);
};

}  // namespace motley::train
