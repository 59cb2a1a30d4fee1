// Tests of the human-readable quantities: memory in MiB below 1 GiB (a 64 MiB device is not
// "0.0 GiB"), GiB above; durations in us, ms and s.
#include "core/format_units.h"

#include <gtest/gtest.h>

#include <cmath>

namespace motley {
namespace {

TEST(FormatUnitsTest, BytesUseMiBBelowOneGiB) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(64.0 * 1024 * 1024), "64.0 MiB");
  EXPECT_EQ(FormatBytes(28.1 * 1024 * 1024), "28.1 MiB");
  EXPECT_EQ(FormatBytes(1024.0 * 1024 * 1024), "1.00 GiB");
  EXPECT_EQ(FormatBytes(80.0 * 1024 * 1024 * 1024), "80.00 GiB");
  EXPECT_EQ(FormatBytes(-1), "?");
  EXPECT_EQ(FormatBytes(std::nan("")), "?");
}

TEST(FormatUnitsTest, Seconds) {
  EXPECT_EQ(FormatSeconds(0.00085), "850.0 us");
  EXPECT_EQ(FormatSeconds(0.01234), "12.34 ms");
  EXPECT_EQ(FormatSeconds(1.2344), "1.234 s");
  EXPECT_EQ(FormatSeconds(INFINITY), "?");
}

}  // namespace
}  // namespace motley
