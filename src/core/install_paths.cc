// See install_paths.h.
#include "core/install_paths.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace motley {

std::string ExecutableDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return exe.parent_path().string();
}

std::vector<std::string> DataDirCandidates() {
  std::vector<std::string> out;
  const char* env = std::getenv("MOTLEY_DATA_DIR");
  if (env != nullptr && *env != '\0') {
    out.emplace_back(env);
    return out;
  }
  const std::string exe = ExecutableDir();
  if (exe.empty()) return out;
  for (std::filesystem::path dir = exe;; dir = dir.parent_path()) {
    out.push_back((dir / "share" / "motley").string());
    if (dir == dir.root_path() || dir.parent_path() == dir) break;
  }
  return out;
}

Result<std::string> FindDataFile(const std::string& probe) {
  const std::vector<std::string> candidates = DataDirCandidates();
  std::error_code ec;
  for (const std::string& dir : candidates) {
    const std::filesystem::path p = std::filesystem::path(dir) / probe;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return Err(StatusCode::kNotFound,
             "shipped file {} not found (looked in {}; set MOTLEY_DATA_DIR to the folder that "
             "holds it, e.g. PREFIX/share/motley)",
             probe,
             candidates.empty() ? std::string("no folder")
                                : fmt::format("{}", fmt::join(candidates, ", ")));
}

}  // namespace motley
