// SHA-256 (NIST FIPS 180-4, "Secure Hash Standard", August 2015, §6.2), for the per-file
// checksums of checkpoints (docs/architecture.md §10). Written here to avoid a crypto dependency;
// checked against the FIPS 180-4 example vectors (sha256_test.cc). Not constant-time: integrity
// only. Thread safety: a Sha256 object is thread-compatible; the free functions are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace motley::train {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // The 32-byte digest as 64 lowercase hex digits. Finishes the object (call once).
  std::string HexDigest();

 private:
  void Block(const unsigned char* block);
  std::array<uint32_t, 8> h_;
  std::array<unsigned char, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

std::string Sha256Hex(std::string_view data);
// Streams the file in chunks; errors name the path.
Result<std::string> Sha256OfFile(const std::string& path);

}  // namespace motley::train
