// Helpers shared by the libFuzzer targets of fuzz/ (docs/fuzzing.md): the fuzz input as text, a
// private scratch folder for targets that parse files, and the source tree's examples.
// Each target is one process run by libFuzzer on one thread; nothing here is thread-safe.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "core/file_util.h"
#include "motley_source_dir.h"

namespace motley::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A folder of this process, in /dev/shm when it exists (the targets write a file per input),
// removed by nobody: the test wrapper (fuzz/run_fuzz.sh) points TMPDIR at its own temporary
// folder and removes it.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/motley_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    return pattern;
  }();
  return dir;
}

// Writes `bytes` to `path` (replacing it), without the fsync of WriteFileAtomic: scratch files
// need no durability, and fsync per input would dominate the run. Aborts on failure (a broken
// machine, not a finding).
inline void WriteBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

// WriteBytes to ScratchDir()/name; returns the path.
inline std::string WriteScratch(const std::string& name, std::string_view bytes) {
  const std::string path = ScratchDir() + "/" + name;
  WriteBytes(path, bytes);
  return path;
}

inline std::string SourcePath(const std::string& relative) {
  return std::string(MOTLEY_SOURCE_DIR) + "/" + relative;
}

}  // namespace motley::fuzz
