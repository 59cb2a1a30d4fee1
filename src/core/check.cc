// Failure path of MOTLEY_CHECK: print where and why, then abort (so sanitizers and debuggers stop
// at the bug).
#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace motley::internal {

void CheckFailed(const char* file, int line, const char* condition, std::string_view message) {
  std::fprintf(stderr, "motley: check failed at %s:%d: %s%s%.*s\n", file, line, condition,
               message.empty() ? "" : ": ", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace motley::internal
