// See token_file.h. Files are read in fixed-size chunks with read(2), converted to int32 as they
// come, so a large .bin needs only its int32 copy in memory.
#include "train/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "core/file_util.h"

namespace motley::train {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; add byte swapping for big-endian hosts");

constexpr size_t kChunkBytes = size_t{1} << 20;

size_t IdBytes(TokenFormat format) {
  switch (format) {
    case TokenFormat::kText: return 1;
    case TokenFormat::kU16: return 2;
    case TokenFormat::kU32: return 4;
  }
  MOTLEY_CHECK(false, "unknown TokenFormat");
  return 0;
}

// Reads the next id of width IdBytes(format) from p (little-endian, as laid out in memory).
uint32_t LoadId(const unsigned char* p, TokenFormat format) {
  switch (format) {
    case TokenFormat::kText: return p[0];
    case TokenFormat::kU16: {
      uint16_t v = 0;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case TokenFormat::kU32: {
      uint32_t v = 0;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
  }
  return 0;
}

// Closes the descriptor on every path out of ReadTokenFile.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  FdCloser(FdCloser&&) = delete;
  FdCloser& operator=(FdCloser&&) = delete;

 private:
  int fd_;
};

}  // namespace

Result<TokenFormat> ParseTokenFormat(std::string_view name) {
  if (name == "text") return TokenFormat::kText;
  if (name == "u16") return TokenFormat::kU16;
  if (name == "u32") return TokenFormat::kU32;
  return Err("unknown token file format '{}' (known: text, u16, u32)", name);
}

const char* TokenFormatName(TokenFormat format) {
  switch (format) {
    case TokenFormat::kText: return "text";
    case TokenFormat::kU16: return "u16";
    case TokenFormat::kU32: return "u32";
  }
  return "?";
}

Result<std::vector<int32_t>> ReadTokenFile(const std::string& path, TokenFormat format,
                                           int64_t vocab_size) {
  MOTLEY_CHECK(vocab_size > 0, "vocab_size must be positive");
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Err("{}: cannot open token file: {}", path, std::strerror(errno));
  FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Err("{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Err("{}: not a regular file", path);
  const size_t id_bytes = IdBytes(format);
  const auto file_bytes = static_cast<size_t>(st.st_size);
  if (file_bytes % id_bytes != 0) {
    return Err("{}: size {} bytes is not a multiple of {} bytes per {} id", path, file_bytes,
               id_bytes, TokenFormatName(format));
  }
  if (file_bytes == 0) return Err("{}: holds no tokens (empty file)", path);

  std::vector<int32_t> ids;
  ids.reserve(file_bytes / id_bytes);
  std::vector<unsigned char> chunk(kChunkBytes);  // a multiple of every id size
  size_t total = 0;
  while (total < file_bytes) {
    const size_t want = std::min(kChunkBytes, file_bytes - total);
    size_t got = 0;
    while (got < want) {
      const ssize_t n = ::read(fd, chunk.data() + got, want - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Err("{}: read error: {}", path, std::strerror(errno));
      if (n == 0) return Err("{}: file shrank while reading (at byte {})", path, total + got);
      got += static_cast<size_t>(n);
    }
    for (size_t off = 0; off < want; off += id_bytes) {
      const uint32_t id = LoadId(chunk.data() + off, format);
      if (static_cast<int64_t>(id) >= vocab_size) {
        return Err("{}: token {} has id {}, not below the vocabulary size {}", path,
                   (total + off) / id_bytes, id, vocab_size);
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    total += want;
  }
  return ids;
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
