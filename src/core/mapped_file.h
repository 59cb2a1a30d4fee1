// MappedFile: a read-only memory mapping of a whole regular file, so that a file of any size (a
// token file of many GiB) is read through the page cache without being copied into the heap.
// Special files are refused as by core/file_util.h's OpenRegularFile; an empty file maps to an
// empty span. The mapping is private and read-only; a file truncated by another process while
// mapped makes reads past its new end fault (SIGBUS), as with any mmap reader.
//
// Ownership: move-only; the mapping lives until the last owner is destroyed. Thread safety:
// const access is safe from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace motley {

class MappedFile {
 public:
  // Maps `path`; `what` describes it in errors ("token file").
  static Result<MappedFile> Open(const std::string& path, std::string_view what = "");

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const unsigned char> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Reset();
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace motley
