// See mapped_file.h.
#include "core/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/file_util.h"

namespace motley {

Result<MappedFile> MappedFile::Open(const std::string& path, std::string_view what) {
  uint64_t size = 0;
  MOTLEY_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, what, &size));
  MappedFile file;
  file.path_ = path;
  if (size == 0) {
    ::close(fd);
    return file;
  }
  if (size > SIZE_MAX) {
    ::close(fd);
    return Err(StatusCode::kResourceExhausted, "{}: {} bytes do not fit the address space", path,
               size);
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping keeps the file open
  if (p == MAP_FAILED) {
    return Err(CodeForErrno(error) == StatusCode::kUnavailable ? StatusCode::kResourceExhausted
                                                               : CodeForErrno(error),
               "{}: cannot map {} bytes into memory: {}", path, size, std::strerror(error));
  }
  file.data_ = static_cast<const unsigned char*>(p);
  file.size_ = static_cast<size_t>(size);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  Reset();
}

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace motley
