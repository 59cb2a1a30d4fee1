// TokensPerSecond: tokens over seconds, 0 where the time is not positive.
#include "core/throughput.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(ThroughputTest, DividesTokensBySeconds) {
  EXPECT_DOUBLE_EQ(TokensPerSecond(int64_t{8192}, 2.0), 4096.0);
  EXPECT_DOUBLE_EQ(TokensPerSecond(1.5e6, 0.5), 3e6);
  // Large token counts stay exact in double up to 2^53.
  EXPECT_DOUBLE_EQ(TokensPerSecond(int64_t{1} << 40, 1.0), std::ldexp(1.0, 40));
}

TEST(ThroughputTest, NoRateWithoutPositiveTime) {
  EXPECT_EQ(TokensPerSecond(int64_t{100}, 0.0), 0.0);
  EXPECT_EQ(TokensPerSecond(int64_t{100}, -1.0), 0.0);
  EXPECT_EQ(TokensPerSecond(int64_t{100}, std::numeric_limits<double>::quiet_NaN()), 0.0);
}

}  // namespace
}  // namespace motley
