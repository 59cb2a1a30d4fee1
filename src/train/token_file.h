// Reading token ids from files: plain text through the byte tokenizer, or nanoGPT-style flat token
// files (`.bin`: raw little-endian ids, no header) of uint16 ids, plus a uint32 variant for
// vocabularies above 65536. The layout is documented in docs/formats/token-files.md.
//
// Token files are memory-mapped (core/mapped_file.h), never copied into the heap, so a file of
// any size is read through the page cache: a TokenSequence is a view of the mapped ids in their
// file width, converted to int32 as samples are copied out. Opening scans every id once (ids >=
// the vocabulary are errors naming the position).
// Free functions; thread-safe (no shared state). TokenSequence: copyable (copies share the
// mapping), const methods thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley::train {

enum class TokenFormat : uint8_t { kText, kU16, kU32 };

// "text" | "u16" | "u32" (the values of train.data.format in a run file).
Result<TokenFormat> ParseTokenFormat(std::string_view name);
const char* TokenFormatName(TokenFormat format);

// A contiguous run of token ids: a view into a mapped token file, or ids held in memory.
class TokenSequence {
 public:
  TokenSequence() = default;
  // Ids held in memory (tests, converted corpora).
  explicit TokenSequence(std::vector<int32_t> ids);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int32_t operator[](size_t i) const;
  // Ids [begin, end) as a view sharing this sequence's storage (begin <= end <= size()).
  TokenSequence Slice(size_t begin, size_t end) const;
  // Copies ids [begin, begin + out.size()) into `out` (checked to lie inside the sequence).
  void CopyTo(size_t begin, std::span<int32_t> out) const;
  // Ids [begin, begin + count) as a vector (for tests and decoding).
  std::vector<int32_t> ToVector(size_t begin, size_t count) const;

 private:
  std::shared_ptr<const void> owner_;  // keeps the mapping or the vector alive
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  uint8_t width_ = 4;  // bytes per id: 1 (text), 2 (u16) or 4 (u32 and in-memory int32)
  friend Result<TokenSequence> OpenTokenFile(const std::string& path, TokenFormat format,
                                             int64_t vocab_size);
};

// Maps the file and checks it. Errors name the file and the reason: cannot open (missing,
// unreadable: kNotFound / kInvalidArgument), not a regular file (a FIFO, a device, a directory),
// size not a multiple of the id size, an id >= vocab_size (with its position), no ids; all
// input errors but a mapping that does not fit the address space (kResourceExhausted).
Result<TokenSequence> OpenTokenFile(const std::string& path, TokenFormat format,
                                    int64_t vocab_size);

// OpenTokenFile, copied into memory as int32 (for tests and small files).
Result<std::vector<int32_t>> ReadTokenFile(const std::string& path, TokenFormat format,
                                           int64_t vocab_size);

// Writes ids as a flat little-endian u16/u32 file (atomically); an id that does not fit is an
// error. For tests and for converting corpora.
Status WriteTokenFile(const std::string& path, TokenFormat format, const std::vector<int32_t>& ids);

}  // namespace motley::train
