// See file_util.h.
#include "core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace motley {
namespace {

// "a directory", "a FIFO (named pipe)", ... for a file that is not regular (read and write side).
const char* KindOf(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
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

StatusCode CodeForErrno(int error, FileAccess access) {
  switch (error) {
    case ENOENT: return StatusCode::kNotFound;
    case ENOSPC:
    case EDQUOT: return StatusCode::kResourceExhausted;
    default: break;
  }
  if (access == FileAccess::kWrite) {
    switch (error) {
      case EFBIG: return StatusCode::kResourceExhausted;
      case EACCES:
      case EPERM:
      case EROFS: return StatusCode::kFailedPrecondition;
      default: return StatusCode::kUnknown;
    }
  }
  switch (error) {
    case ENOTDIR: return StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG: return StatusCode::kInvalidArgument;
    case ENOMEM:
    case EMFILE:
    case ENFILE: return StatusCode::kResourceExhausted;
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

namespace {

Status RefusedTarget(const std::string& path, mode_t mode) {
  return Err(StatusCode::kInvalidArgument,
             "{}: is {}, not a regular file: refusing to replace or write through it (remove it "
             "or choose another output path)",
             path, KindOf(mode));
}

std::string FolderOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status WriteAllFd(int fd, const std::string& contents, const std::string& path) {
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return Err(CodeForErrno(err, FileAccess::kWrite), "{}: write failed: {}", path,
                 std::strerror(err));
    }
    written += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Status CheckOutputTarget(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    const int err = errno;
    return Err(CodeForErrno(err, FileAccess::kWrite), "{}: cannot inspect the output path: {}",
               path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) return RefusedTarget(path, st.st_mode);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const std::string& contents) {
  MOTLEY_RETURN_IF_ERROR(CheckOutputTarget(path));
  std::string tmp = path + ".tmp-XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);  // O_CREAT | O_EXCL: never an existing file
  if (fd < 0) {
    const int err = errno;
    return Err(CodeForErrno(err, FileAccess::kWrite),
               "{}: cannot create a temporary file beside it: {}", path, std::strerror(err));
  }
  tmp.assign(name.data());
  auto fail = [&](Status s) {
    ::unlink(tmp.c_str());
    return s;
  };
  (void)::fchmod(fd, 0644);  // mkostemp creates 0600; outputs are ordinary files
  Status s = WriteAllFd(fd, contents, tmp);
  if (s.ok() && ::fsync(fd) != 0) {
    const int err = errno;
    s = Err(CodeForErrno(err, FileAccess::kWrite), "{}: fsync failed: {}", tmp, std::strerror(err));
  }
  if (::close(fd) != 0 && s.ok()) {
    const int err = errno;
    s = Err(CodeForErrno(err, FileAccess::kWrite), "{}: close failed: {}", tmp, std::strerror(err));
  }
  if (!s.ok()) return fail(s);
  // Checked again just before the rename, which replaces the directory entry itself (it never
  // follows a link).
  if (Status target = CheckOutputTarget(path); !target.ok()) return fail(target);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    return fail(Err(CodeForErrno(err, FileAccess::kWrite), "{}: rename to {} failed: {}", tmp, path,
                    std::strerror(err)));
  }
  const int dir = ::open(FolderOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {  // best effort: the data is already durable, the entry soon will be
    (void)::fsync(dir);
    ::close(dir);
  }
  return Status::Ok();
}

Result<std::FILE*> OpenOutputFile(const std::string& path, bool append) {
  MOTLEY_RETURN_IF_ERROR(CheckOutputTarget(path));
  // O_NOFOLLOW: a link planted after the check fails the open; O_NONBLOCK: a FIFO planted after
  // the check is not waited on (and is refused below).
  const int flags =
      O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return RefusedTarget(path, S_IFLNK);
    return Err(CodeForErrno(err, FileAccess::kWrite), "{}: cannot open for writing: {}", path,
               std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t mode = st.st_mode;
    ::close(fd);
    return RefusedTarget(path, mode);
  }
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::FILE* f = ::fdopen(fd, append ? "a" : "w");
  if (f == nullptr) {
    const int err = errno;
    ::close(fd);
    return Err("{}: cannot open for writing: {}", path, std::strerror(err));
  }
  return f;
}

}  // namespace motley
