// MOTLEY_CHECK: aborts with file:line and a message when a contract is broken (a bug, never bad
// user input; bad input returns a Status, see core/status.h).
#pragma once

#include <string_view>

namespace motley::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              std::string_view message);
inline std::string_view CheckMessage() { return {}; }
inline std::string_view CheckMessage(std::string_view message) { return message; }
}  // namespace motley::internal

#define MOTLEY_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      ::motley::internal::CheckFailed(__FILE__, __LINE__, #cond,                         \
                                      ::motley::internal::CheckMessage(__VA_ARGS__));     \
    }                                                                                    \
  } while (0)
