// Small file helpers that return Status instead of throwing: read a whole file; write outputs
// safely.
//
// Reading (the read side; core/mapped_file.h maps large files): only regular files are read. A
// FIFO, a device, a socket or a directory is refused before any read, so that `/dev/zero` or a
// named pipe never blocks or exhausts memory; a file larger than the caller's limit (64 MiB for
// the YAML and JSON inputs) is refused from its size. Errors name the path and the reason and
// carry a StatusCode from the OS error (CodeForErrno).
//
// Writing (the write side, docs/formats/checkpoint.md "File safety"): an output path is replaced
// only when it is absent or a regular file. A symbolic link, a directory, a device node, a FIFO or
// a socket at the path is refused with kInvalidArgument and left untouched, so that an output
// never writes through a link planted in a folder, into a device, or blocks on a FIFO. Temporary
// files are created exclusively under fresh names (never following a link) and removed on any
// failure. A full disk or an exceeded file-size limit is kResourceExhausted.
// Thread safety: free functions; concurrent writers of one path are not coordinated (the last
// rename wins).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/status.h"

namespace motley {

// The largest YAML or JSON file motley reads whole (run, cluster, model, scenario, plan, profile,
// checkpoint index and sidecar files): 64 MiB (issue 17). Every such file written by motley is a
// few KiB to a few MiB (a plan of 4096 devices is about 0.5 MiB).
inline constexpr size_t kMaxTextFileBytes = size_t{64} << 20;

// What a failed file operation was doing, for CodeForErrno.
enum class FileAccess { kRead, kWrite };

// The StatusCode of a failed file operation with this errno: one table for reads (open, read,
// stat) and writes (create, write, fsync, rename). Both: ENOENT kNotFound; ENOSPC, EDQUOT
// kResourceExhausted. Reads: ENOTDIR kNotFound; EACCES, EPERM, EISDIR, ELOOP, ENAMETOOLONG
// kInvalidArgument (the path given is not readable: a usage error); ENOMEM, EMFILE, ENFILE
// kResourceExhausted; anything else kUnavailable (EIO, ...). Writes: EFBIG kResourceExhausted (a
// file-size limit); EACCES, EPERM, EROFS kFailedPrecondition (the output place is not writable);
// anything else kUnknown.
StatusCode CodeForErrno(int error, FileAccess access = FileAccess::kRead);

// Opens `path` read-only and checks that it is a regular file, without blocking on a FIFO
// (O_NONBLOCK until the check). Returns the descriptor (the caller closes it) and sets *size_bytes.
// `what` describes the file in errors ("token file"; may be empty).
Result<int> OpenRegularFile(const std::string& path, std::string_view what, uint64_t* size_bytes);

// Reads the whole regular file; refuses special files and files above `max_bytes`
// (kInvalidArgument, naming the size and the limit).
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = kMaxTextFileBytes);

// Ok when `path` is absent or a regular file (a symbolic link is not followed: it is refused);
// otherwise a kInvalidArgument error naming the path and what it is ("a symbolic link", "a
// character device", ...).
Status CheckOutputTarget(const std::string& path);

// Writes `contents` to `path` atomically: a new temporary file beside it ("path.tmp-XXXXXX",
// created exclusively), fsync, rename over `path`, fsync of the folder. Refuses the targets that
// CheckOutputTarget refuses. On failure the temporary file is removed and `path` is unchanged.
Status WriteFileAtomic(const std::string& path, const std::string& contents);

// Opens `path` for writing: created when absent, else truncated (append false) or appended to.
// Refuses what CheckOutputTarget refuses, checked again on the opened file (so a swap between the
// check and the open is caught); a FIFO is never waited on. The caller owns the FILE (fclose).
Result<std::FILE*> OpenOutputFile(const std::string& path, bool append);

}  // namespace motley
