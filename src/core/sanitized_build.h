// Whether this translation unit is compiled with AddressSanitizer (the clang Debug ASan/UBSan build
// of scripts/test.sh), for tests that must behave differently there: ASan reserves terabytes of
// virtual memory (so `ulimit -d` cannot be used) and runs the planner's searches tens of times
// slower than the main build.
#pragma once

namespace motley {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

}  // namespace motley
