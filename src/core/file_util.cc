// See file_util.h.
#include "core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace motley {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Err("{}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Err("{}: read error", path);
  return buffer.str();
}

namespace {

// What a non-regular file is, for messages.
const char* KindOf(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

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
      return Err(WriteErrorCode(err), "{}: write failed: {}", path, std::strerror(err));
    }
    written += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

StatusCode WriteErrorCode(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return StatusCode::kResourceExhausted;
    case ENOENT: return StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS: return StatusCode::kFailedPrecondition;
    default: return StatusCode::kUnknown;
  }
}

Status CheckOutputTarget(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    const int err = errno;
    return Err(WriteErrorCode(err), "{}: cannot inspect the output path: {}", path,
               std::strerror(err));
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
    return Err(WriteErrorCode(err), "{}: cannot create a temporary file beside it: {}", path,
               std::strerror(err));
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
    s = Err(WriteErrorCode(err), "{}: fsync failed: {}", tmp, std::strerror(err));
  }
  if (::close(fd) != 0 && s.ok()) {
    const int err = errno;
    s = Err(WriteErrorCode(err), "{}: close failed: {}", tmp, std::strerror(err));
  }
  if (!s.ok()) return fail(s);
  // Checked again just before the rename, which replaces the directory entry itself (it never
  // follows a link).
  if (Status target = CheckOutputTarget(path); !target.ok()) return fail(target);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    return fail(
        Err(WriteErrorCode(err), "{}: rename to {} failed: {}", tmp, path, std::strerror(err)));
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
    return Err(WriteErrorCode(err), "{}: cannot open for writing: {}", path, std::strerror(err));
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
