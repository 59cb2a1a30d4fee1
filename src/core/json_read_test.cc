// core/json_read.h: duplicate keys named by path, nesting bounded before parsing, size limit,
// syntax errors with the file; every failure is kInvalidArgument (exit code 2).
#include "core/json_read.h"

#include <gtest/gtest.h>

#include <string>

namespace motley {
namespace {

std::string ErrorOf(std::string_view text, size_t max_bytes = kMaxTextFileBytes) {
  Result<nlohmann::json> j = ParseJsonStrict(text, "f.json", max_bytes);
  if (j.ok()) return "";
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  return j.status().message();
}

TEST(JsonReadTest, ParsesValidJson) {
  Result<nlohmann::json> j = ParseJsonStrict(R"({"a": [1, {"b": "x[{"}], "c": {"a": 2}})", "f");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ((*j)["a"][1]["b"], "x[{");
  EXPECT_EQ((*j)["c"]["a"], 2);  // the same key in another object is fine
}

TEST(JsonReadTest, DuplicateKeysAreNamedByPath) {
  EXPECT_EQ(ErrorOf(R"({"a": 1, "a": 2})"), "f.json: a: key given twice");
  EXPECT_EQ(ErrorOf(R"({"p": [{"m": 1}, {"m": 2, "s": [], "m": 3}]})"),
            "f.json: p[1].m: key given twice");
  EXPECT_EQ(ErrorOf(R"([1, [2, {"x": {"y": 1, "y": 1}}]])"), "f.json: [1][1].x.y: key given twice");
}

TEST(JsonReadTest, NestingIsBoundedBeforeParsing) {
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(ErrorOf(ok), "");
  const std::string deep(100000, '[');  // would recurse 100000 levels in a recursive reader
  EXPECT_NE(ErrorOf(deep).find("nested deeper than 64 levels (at byte 64)"), std::string::npos)
      << ErrorOf(deep);
  // Brackets inside strings (with escaped quotes) do not count.
  const std::string in_string =
      "[\"" + std::string(200, '[') + "\\\"" + std::string(200, '{') + "\"]";
  EXPECT_EQ(ErrorOf(in_string), "");
}

TEST(JsonReadTest, SizeAndSyntax) {
  EXPECT_NE(ErrorOf("[1, 2, 3]", 4).find("9 bytes of JSON, larger than"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"a\": }").find("f.json: JSON syntax error"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("f.json: JSON syntax error"), std::string::npos);
  EXPECT_NE(ErrorOf("{} {}").find("f.json: JSON syntax error"), std::string::npos);
  EXPECT_NE(ErrorOf("\"\xff\"").find("f.json: JSON syntax error"), std::string::npos);
}

}  // namespace
}  // namespace motley
