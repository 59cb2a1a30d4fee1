// Tests for Status / Result and the propagation macros.
#include "core/status.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

Result<int> ParsePositive(int x) {
  if (x <= 0) return Err("value: must be positive, got {}", x);
  return x;
}

Result<int> Doubled(int x) {
  MOTLEY_ASSIGN_OR_RETURN(int v, ParsePositive(x));
  return 2 * v;
}

Status Check(int x) {
  MOTLEY_RETURN_IF_ERROR(ParsePositive(x).status());
  return Status::Ok();
}

TEST(StatusTest, OkAndError) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Err("f.yaml: {}: bad", "train.steps");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "f.yaml: train.steps: bad");
  EXPECT_EQ(s.WithContext("run").message(), "run: f.yaml: train.steps: bad");
}

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(*Doubled(4), 8);
  Result<int> r = Doubled(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "value: must be positive, got -1");
  EXPECT_TRUE(Check(3).ok());
  EXPECT_FALSE(Check(0).ok());
}

TEST(StatusTest, CodesSurviveContextAndMapToExitCodes) {
  EXPECT_EQ(Status::Ok().code(), StatusCode::kOk);
  EXPECT_EQ(ExitCodeFor(Status::Ok()), 0);
  const Status plain = Err("x: bad");
  EXPECT_EQ(plain.code(), StatusCode::kUnknown);
  EXPECT_EQ(ExitCodeFor(plain), 1);
  const Status missing = Err(StatusCode::kNotFound, "{}: no such file", "run.yaml");
  EXPECT_EQ(missing.message(), "run.yaml: no such file");
  EXPECT_EQ(missing.WithContext("motley").code(), StatusCode::kNotFound);
  EXPECT_EQ(ExitCodeFor(missing), 2);
  EXPECT_EQ(ExitCodeFor(Err(StatusCode::kInvalidArgument, "bad")), 2);
  EXPECT_EQ(ExitCodeFor(Err(StatusCode::kResourceExhausted, "memory")), 1);
  EXPECT_EQ(ExitCodeFor(Err(StatusCode::kInternal, "bug")), 1);
  EXPECT_EQ(plain.WithCode(StatusCode::kFailedPrecondition).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(plain.WithCode(StatusCode::kFailedPrecondition).message(), "x: bad");
  const Result<int> r = Status(missing);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_STREQ(StatusCodeName(StatusCode::kResourceExhausted), "resource exhausted");
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  Result<int> r = ParsePositive(0);
  EXPECT_DEATH((void)r.value(), "check failed");
}

}  // namespace
}  // namespace motley
