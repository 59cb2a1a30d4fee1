// Small file helpers that return Status instead of throwing: read a whole file, write a file
// atomically (temporary file, fsync, rename) so a crash never leaves a half-written file.
#pragma once

#include <string>

#include "core/status.h"

namespace motley {

// Reads the whole file; errors name the path and the OS reason.
Result<std::string> ReadFile(const std::string& path);

// Writes `contents` to `path` via path.tmp + fsync + rename.
Status WriteFileAtomic(const std::string& path, const std::string& contents);

}  // namespace motley
