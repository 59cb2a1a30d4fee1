// See token_file.h. The file is mapped read-only; the id scan at open walks it front to back
// (MADV_SEQUENTIAL), sampling later reads scattered rows (MADV_RANDOM).
#include "train/token_file.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/file_util.h"
#include "core/mapped_file.h"

namespace motley::train {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; add byte swapping for big-endian hosts");

size_t IdBytes(TokenFormat format) {
  switch (format) {
    case TokenFormat::kText: return 1;
    case TokenFormat::kU16: return 2;
    case TokenFormat::kU32: return 4;
  }
  MOTLEY_CHECK(false, "unknown TokenFormat");
  return 0;
}

// The id at p of width 1, 2 or 4 bytes (little-endian, as laid out in memory).
uint32_t LoadId(const unsigned char* p, size_t width) {
  switch (width) {
    case 1: return p[0];
    case 2: {
      uint16_t v = 0;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    default: {
      uint32_t v = 0;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
  }
}

// Advises the kernel how the mapping is read next (a hint; failures are harmless).
void Advise(const MappedFile& file, int advice) {
  if (file.size() > 0) {
    (void)::madvise(const_cast<unsigned char*>(file.bytes().data()), file.size(), advice);
  }
}

}  // namespace

Result<TokenFormat> ParseTokenFormat(std::string_view name) {
  if (name == "text") return TokenFormat::kText;
  if (name == "u16") return TokenFormat::kU16;
  if (name == "u32") return TokenFormat::kU32;
  return Err(StatusCode::kInvalidArgument, "unknown token file format '{}' (known: text, u16, u32)",
             name);
}

const char* TokenFormatName(TokenFormat format) {
  switch (format) {
    case TokenFormat::kText: return "text";
    case TokenFormat::kU16: return "u16";
    case TokenFormat::kU32: return "u32";
  }
  return "?";
}

TokenSequence::TokenSequence(std::vector<int32_t> ids) {
  auto held = std::make_shared<const std::vector<int32_t>>(std::move(ids));
  data_ = reinterpret_cast<const unsigned char*>(held->data());
  size_ = held->size();
  width_ = 4;
  owner_ = std::move(held);
}

int32_t TokenSequence::operator[](size_t i) const {
  MOTLEY_CHECK(i < size_, "TokenSequence: index out of range");
  return static_cast<int32_t>(LoadId(data_ + i * width_, width_));
}

TokenSequence TokenSequence::Slice(size_t begin, size_t end) const {
  MOTLEY_CHECK(begin <= end && end <= size_, "TokenSequence::Slice: range out of bounds");
  TokenSequence s = *this;
  s.data_ = data_ == nullptr ? nullptr : data_ + begin * width_;
  s.size_ = end - begin;
  return s;
}

void TokenSequence::CopyTo(size_t begin, std::span<int32_t> out) const {
  MOTLEY_CHECK(begin <= size_ && out.size() <= size_ - begin,
               "TokenSequence::CopyTo: out of range");
  if (out.empty()) return;
  const unsigned char* p = data_ + begin * width_;
  if (width_ == 4) {
    std::memcpy(out.data(), p, out.size_bytes());
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<int32_t>(LoadId(p + i * width_, width_));
  }
}

std::vector<int32_t> TokenSequence::ToVector(size_t begin, size_t count) const {
  std::vector<int32_t> ids(count);
  CopyTo(begin, ids);
  return ids;
}

Result<TokenSequence> OpenTokenFile(const std::string& path, TokenFormat format,
                                    int64_t vocab_size) {
  MOTLEY_CHECK(vocab_size > 0, "vocab_size must be positive");
  Result<MappedFile> mapped = MappedFile::Open(path, "token file");
  if (!mapped.ok()) {
    return AsInputError(mapped.status());
  }
  const size_t id_bytes = IdBytes(format);
  const size_t file_bytes = mapped->size();
  if (file_bytes % id_bytes != 0) {
    return Err(StatusCode::kInvalidArgument,
               "{}: size {} bytes is not a multiple of {} bytes per {} id", path, file_bytes,
               id_bytes, TokenFormatName(format));
  }
  if (file_bytes == 0) {
    return Err(StatusCode::kInvalidArgument, "{}: holds no tokens (empty file)", path);
  }
  const size_t n = file_bytes / id_bytes;
  const unsigned char* data = mapped->bytes().data();
  // Every id must be below the vocabulary: a text byte or a u16 id can only fail for vocabularies
  // below 256 / 65536, a u32 id for any.
  const uint64_t width_limit = uint64_t{1} << (8 * id_bytes);
  if (static_cast<uint64_t>(vocab_size) < width_limit) {
    Advise(*mapped, MADV_SEQUENTIAL);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t id = LoadId(data + i * id_bytes, id_bytes);
      if (static_cast<int64_t>(id) >= vocab_size) {
        return Err(StatusCode::kInvalidArgument,
                   "{}: token {} has id {}, not below the vocabulary size {}", path, i, id,
                   vocab_size);
      }
    }
  }
  Advise(*mapped, MADV_RANDOM);
  TokenSequence tokens;
  tokens.data_ = data;
  tokens.size_ = n;
  tokens.width_ = static_cast<uint8_t>(id_bytes);
  tokens.owner_ = std::make_shared<const MappedFile>(std::move(*mapped));
  return tokens;
}

Result<std::vector<int32_t>> ReadTokenFile(const std::string& path, TokenFormat format,
                                           int64_t vocab_size) {
  MOTLEY_ASSIGN_OR_RETURN(const TokenSequence tokens, OpenTokenFile(path, format, vocab_size));
  return tokens.ToVector(0, tokens.size());
}

Status WriteTokenFile(const std::string& path, TokenFormat format,
                      const std::vector<int32_t>& ids) {
  const size_t id_bytes = IdBytes(format);
  const int64_t limit = format == TokenFormat::kText  ? 256
                        : format == TokenFormat::kU16 ? 65536
                                                      : int64_t{1} << 32;
  std::string bytes(ids.size() * id_bytes, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= limit) {
      return Err("{}: id {} at position {} does not fit a {} token file", path, ids[i], i,
                 TokenFormatName(format));
    }
    const auto v = static_cast<uint32_t>(ids[i]);
    // Little-endian: least significant byte first.
    for (size_t b = 0; b < id_bytes; ++b) {
      bytes[i * id_bytes + b] = static_cast<char>((v >> (8 * b)) & 0xFFU);
    }
  }
  return WriteFileAtomic(path, bytes);
}

}  // namespace motley::train
