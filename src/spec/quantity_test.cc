// Unit parser: each unit family, prefixes, bare numbers and rejections.
#include "spec/quantity.h"

#include <gtest/gtest.h>

namespace motley::spec {
namespace {

double Parse(std::string_view text, QuantityKind kind) {
  Result<double> r = ParseQuantity(text, kind);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().message();
  return r.ok() ? *r : -1;
}

TEST(QuantityTest, ComputeRates) {
  EXPECT_DOUBLE_EQ(Parse("312 TFLOPS", QuantityKind::kFlopsPerSecond), 312e12);
  EXPECT_DOUBLE_EQ(Parse("19.5 TFLOP/s", QuantityKind::kFlopsPerSecond), 19.5e12);
  EXPECT_DOUBLE_EQ(Parse("50GFLOPS", QuantityKind::kFlopsPerSecond), 50e9);
  EXPECT_DOUBLE_EQ(Parse("1e9", QuantityKind::kFlopsPerSecond), 1e9);
}

TEST(QuantityTest, ByteSizesDecimalAndBinary) {
  EXPECT_DOUBLE_EQ(Parse("80 GiB", QuantityKind::kBytes), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(Parse("128 GB", QuantityKind::kBytes), 128e9);
  EXPECT_DOUBLE_EQ(Parse("512 MiB", QuantityKind::kBytes), 512.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(Parse("4096", QuantityKind::kBytes), 4096);
  EXPECT_DOUBLE_EQ(Parse("1 kB", QuantityKind::kBytes), 1000);
}

TEST(QuantityTest, BandwidthsInBytesAndBits) {
  EXPECT_DOUBLE_EQ(Parse("2 TB/s", QuantityKind::kBytesPerSecond), 2e12);
  EXPECT_DOUBLE_EQ(Parse("25 GB/s", QuantityKind::kBytesPerSecond), 25e9);
  EXPECT_DOUBLE_EQ(Parse("200 Gbit/s", QuantityKind::kBytesPerSecond), 25e9);
  EXPECT_DOUBLE_EQ(Parse("100 Gbps", QuantityKind::kBytesPerSecond), 12.5e9);
  EXPECT_DOUBLE_EQ(Parse("8 Gb/s", QuantityKind::kBytesPerSecond), 1e9);
  EXPECT_DOUBLE_EQ(Parse("1 GiB/s", QuantityKind::kBytesPerSecond), 1024.0 * 1024 * 1024);
}

TEST(QuantityTest, Durations) {
  EXPECT_DOUBLE_EQ(Parse("5 us", QuantityKind::kSeconds), 5e-6);
  EXPECT_DOUBLE_EQ(Parse("5 \u00b5s", QuantityKind::kSeconds), 5e-6);
  EXPECT_DOUBLE_EQ(Parse("1.5 ms", QuantityKind::kSeconds), 1.5e-3);
  EXPECT_DOUBLE_EQ(Parse("100 ns", QuantityKind::kSeconds), 100e-9);
  EXPECT_DOUBLE_EQ(Parse("2 s", QuantityKind::kSeconds), 2);
  EXPECT_DOUBLE_EQ(Parse("0.25", QuantityKind::kSeconds), 0.25);
}

TEST(QuantityTest, RejectsWrongKindGarbageAndCase) {
  for (const auto& [text, kind] : {std::pair{"3 GiB", QuantityKind::kBytesPerSecond},
                                   std::pair{"25 GB/s", QuantityKind::kBytes},
                                   std::pair{"fast", QuantityKind::kFlopsPerSecond},
                                   std::pair{"", QuantityKind::kSeconds},
                                   std::pair{"5 parsecs", QuantityKind::kSeconds},
                                   std::pair{"10 gB", QuantityKind::kBytes},
                                   std::pair{"1e999 B", QuantityKind::kBytes},
                                   std::pair{"12 TFLOPS extra", QuantityKind::kFlopsPerSecond}}) {
    Result<double> r = ParseQuantity(text, kind);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(QuantityKindName(kind)), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace motley::spec
