// See file_util.h.
#include "core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace motley {
namespace {

// "a directory", "a FIFO (named pipe)", ... for a file that is not regular.
const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string Described(std::string_view what) {
  return what.empty() ? std::string() : " " + std::string(what);
}

}  // namespace

StatusCode CodeForErrno(int error) {
  switch (error) {
    case ENOENT:
    case ENOTDIR: return StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG: return StatusCode::kInvalidArgument;
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case ENOSPC:
    case EDQUOT: return StatusCode::kResourceExhausted;
    default: return StatusCode::kUnavailable;
  }
}

Result<int> OpenRegularFile(const std::string& path, std::string_view what, uint64_t* size_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return Err(CodeForErrno(error), "{}: cannot open{}: {}", path, Described(what),
               std::strerror(error));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return Err(CodeForErrno(error), "{}: cannot stat{}: {}", path, Described(what),
               std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Err(StatusCode::kInvalidArgument, "{}: is {}, not a regular file{}", path,
               KindOf(st.st_mode), what.empty() ? "" : " (expected a" + Described(what) + ")");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *size_bytes = static_cast<uint64_t>(st.st_size);
  return fd;
}

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  uint64_t size = 0;
  MOTLEY_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, "", &size));
  auto too_large = [&](uint64_t bytes) {
    return Err(StatusCode::kInvalidArgument,
               "{}: {} bytes, larger than the {} MiB limit of this kind of file", path, bytes,
               max_bytes >> 20);
  };
  if (size > max_bytes) {
    ::close(fd);
    return too_large(size);
  }
  // Read up to one byte past the limit: the file may have grown since fstat.
  std::string text(static_cast<size_t>(size), '\0');
  size_t got = 0;
  char extra = 0;
  while (true) {
    char* dst = got < text.size() ? text.data() + got : &extra;
    const size_t want = got < text.size() ? text.size() - got : 1;
    const ssize_t n = ::read(fd, dst, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return Err(CodeForErrno(error), "{}: read error: {}", path, std::strerror(error));
    }
    if (n == 0) break;
    if (got >= text.size()) {  // grew past its size at open: keep reading, within the limit
      text.push_back(extra);
      if (text.size() > max_bytes) {
        ::close(fd);
        return too_large(text.size());
      }
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(std::min(got, text.size()));
  return text;
}

Status WriteFileAtomic(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Err("{}: cannot create: {}", tmp, std::strerror(errno));
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string reason = std::strerror(errno);
      ::close(fd);
      return Err("{}: write failed: {}", tmp, reason);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return Err("{}: fsync/close failed", tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Err("{}: rename to {} failed: {}", tmp, path, std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace motley
