// Small file helpers that return Status instead of throwing: read a whole file, write a file
// atomically (temporary file, fsync, rename) so a crash never leaves a half-written file.
//
// Reading (the read side; core/mapped_file.h maps large files): only regular files are read. A
// FIFO, a device, a socket or a directory is refused before any read, so that `/dev/zero` or a
// named pipe never blocks or exhausts memory; a file larger than the caller's limit (64 MiB for
// the YAML and JSON inputs) is refused from its size. Errors name the path and the reason and
// carry a StatusCode from the OS error (CodeForErrno).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace motley {

// The largest YAML or JSON file motley reads whole (run, cluster, model, scenario, plan, profile,
// checkpoint index and sidecar files): 64 MiB (issue 17). Every such file written by motley is a
// few KiB to a few MiB (a plan of 4096 devices is about 0.5 MiB).
inline constexpr size_t kMaxTextFileBytes = size_t{64} << 20;

// The StatusCode of a failed open/read/stat: kNotFound (ENOENT, ENOTDIR), kInvalidArgument
// (EACCES, EPERM, EISDIR, ELOOP, ENAMETOOLONG: the path given is not readable),
// kResourceExhausted (ENOMEM, EMFILE, ENFILE, ENOSPC, EDQUOT), kUnavailable otherwise (EIO, ...).
StatusCode CodeForErrno(int error);

// Opens `path` read-only and checks that it is a regular file, without blocking on a FIFO
// (O_NONBLOCK until the check). Returns the descriptor (the caller closes it) and sets *size_bytes.
// `what` describes the file in errors ("token file"; may be empty).
Result<int> OpenRegularFile(const std::string& path, std::string_view what, uint64_t* size_bytes);

// Reads the whole regular file; refuses special files and files above `max_bytes`
// (kInvalidArgument, naming the size and the limit).
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = kMaxTextFileBytes);

// Writes `contents` to `path` via path.tmp + fsync + rename.
Status WriteFileAtomic(const std::string& path, const std::string& contents);

}  // namespace motley
