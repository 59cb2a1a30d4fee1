// See init.h.
#include "model/init.h"

#include <cmath>
#include <numbers>
#include <random>

#include "core/check.h"

namespace motley::model {
namespace {

// FNV-1a, 64-bit (Fowler, Noll, Vo): offset basis and prime from the published specification.
uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// splitmix64 finaliser (Steele, Lea, Flood 2014), to spread nearby seeds apart.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr double kTwoPow53Inv = 1.0 / 9007199254740992.0;  // 2^-53

}  // namespace

uint64_t ParameterSeed(uint64_t global_seed, std::string_view name) {
  return SplitMix64(global_seed ^ Fnv1a64(name));
}

std::vector<float> NormalInit(uint64_t global_seed, std::string_view name, int64_t count,
                              double std_dev) {
  MOTLEY_CHECK(count >= 0, "negative sample count");
  std::mt19937_64 engine(ParameterSeed(global_seed, name));
  std::vector<float> out(static_cast<size_t>(count));
  for (size_t i = 0; i < out.size(); i += 2) {
    // Box-Muller: u1 in (0, 1] (so log(u1) is finite), u2 in [0, 1), 53 random bits each.
    const double u1 = static_cast<double>((engine() >> 11) + 1) * kTwoPow53Inv;
    const double u2 = static_cast<double>(engine() >> 11) * kTwoPow53Inv;
    const double r = std::sqrt(-2.0 * std::log(u1)) * std_dev;
    const double angle = 2.0 * std::numbers::pi * u2;
    out[i] = static_cast<float>(r * std::cos(angle));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(r * std::sin(angle));
  }
  return out;
}

}  // namespace motley::model
