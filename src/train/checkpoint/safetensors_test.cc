// The safetensors reader and writer: a round trip, the exact byte layout, and the reader's
// rejection of malformed files built byte by byte.
#include "train/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "train/checkpoint/checkpoint_test_util.h"

namespace motley::train {
namespace {

// A file made of an explicit header text and `data_bytes` zero bytes.
std::string Craft(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  return out + header + std::string(data_bytes, '\0');
}

Status ParseBytes(const std::string& bytes) {
  return ParseSafetensorsHeader("x.safetensors", bytes, bytes.size()).status();
}

void ExpectError(const std::string& bytes, const char* part) {
  const Status s = ParseBytes(bytes);
  ASSERT_FALSE(s.ok()) << "accepted a bad file, wanted: " << part;
  EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("x.safetensors"), std::string::npos) << s.message();
}

TEST(Safetensors, RoundTripAndLayout) {
  testing::TempDir tmp;
  const std::vector<float> a = {1.5F, -2.0F, 3.25F, 0.0F, 7.0F, -0.5F};
  const std::vector<float> b = {42.0F};
  const std::string path = tmp.path() + "/t.safetensors";
  auto written = WriteSafetensors(path, {{"a", {2, 3}, a}, {"b", {}, b}}, {{"format", "pt"}});
  ASSERT_TRUE(written.ok()) << written.status().message();
  const std::string bytes = testing::ReadBytes(path);
  EXPECT_EQ(written->bytes, bytes.size());
  EXPECT_EQ(written->sha256, Sha256Hex(bytes));
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  EXPECT_EQ(len % 8, 0U);
  EXPECT_EQ(bytes.size(), 8 + len + 7 * sizeof(float));
  const auto header = nlohmann::json::parse(bytes.substr(8, len));
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["a"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({24, 28}));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");

  auto parsed = ReadSafetensorsHeader(path);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_EQ(parsed->tensors.size(), 2U);
  std::vector<float> got(6);
  ASSERT_TRUE(ReadSafetensorsTensor(path, *parsed, *parsed->Find("a"), got).ok());
  EXPECT_EQ(got, a);
  std::vector<float> scalar(1);
  ASSERT_TRUE(ReadSafetensorsTensor(path, *parsed, *parsed->Find("b"), scalar).ok());
  EXPECT_EQ(scalar, b);
}

TEST(Safetensors, AcceptsAWellFormedCraftedFile) {
  EXPECT_TRUE(
      ParseBytes(Craft(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)).ok());
  EXPECT_TRUE(ParseBytes(Craft("{}", 0)).ok());  // no tensors
}

TEST(Safetensors, RejectsMalformedFiles) {
  ExpectError("abc", "shorter than the 8-byte header length");
  ExpectError(Craft("{}", 0).substr(0, 9), "header length 2 does not fit");
  ExpectError(Craft("[1, 2]", 0), "not a JSON object");
  ExpectError(Craft("{\"t\": ", 0), "not valid JSON");
  ExpectError(Craft(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8), "'dtype' is missing");
  ExpectError(Craft(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
              "not a non-negative integer");
  ExpectError(Craft(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "reversed");
  ExpectError(Craft(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
              "two non-negative integers");
  ExpectError(Craft(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), "short data");
  ExpectError(Craft(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "needs 12");
  ExpectError(Craft(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    12),
              "overlap");
  ExpectError(Craft(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "hole");
  ExpectError(Craft(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), "trailing");
  ExpectError(Craft(R"({"__metadata__":{"k":3}})", 0), "not a string");
  // An element count that overflows (found by fuzz/checkpoint_fuzz.cc).
  ExpectError(
      Craft(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
      "holds more elements than a file can");
}

}  // namespace
}  // namespace motley::train
