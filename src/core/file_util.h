// Small file helpers that return Status instead of throwing: read a whole file; write outputs
// safely.
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

#include <cstdio>
#include <string>

#include "core/status.h"

namespace motley {

// Reads the whole file; errors name the path and the OS reason.
Result<std::string> ReadFile(const std::string& path);

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

// The StatusCode of a failed write or create with this errno: ENOSPC, EDQUOT and EFBIG (a full
// disk, a quota, a file-size limit) are kResourceExhausted, ENOENT kNotFound, EACCES, EPERM and
// EROFS kFailedPrecondition, anything else kUnknown.
StatusCode WriteErrorCode(int err);

}  // namespace motley
