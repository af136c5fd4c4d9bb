#include "ferry/base/status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ferry {
namespace {

using ::testing::HasSubstr;

TEST(StatusTest, DefaultIsOk) {
  const Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
  EXPECT_EQ(status.message(), "");
  EXPECT_EQ(status.ToString(), "OK");
  EXPECT_EQ(status.ToErrno(), 0);
  EXPECT_TRUE(Status::OK().ok());
}

TEST(StatusTest, ConstructingWithOkCodeDropsTheMessage) {
  const Status status(StatusCode::kOk, "ignored");
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.message(), "");
}

TEST(StatusTest, FactoriesSetCodeAndMessage) {
  const std::vector<std::pair<Status, StatusCode>> cases = {
      {Status::Invalid("m"), StatusCode::kInvalid},
      {Status::TypeError("m"), StatusCode::kTypeError},
      {Status::IndexError("m"), StatusCode::kIndexError},
      {Status::OutOfMemory("m"), StatusCode::kOutOfMemory},
      {Status::NotImplemented("m"), StatusCode::kNotImplemented},
      {Status::IOError("m"), StatusCode::kIOError},
      {Status::Cancelled("m"), StatusCode::kCancelled},
      {Status::TimedOut("m"), StatusCode::kTimedOut},
      {Status::UnknownError("m"), StatusCode::kUnknownError},
  };
  for (const auto& [status, code] : cases) {
    EXPECT_FALSE(status.ok());
    EXPECT_EQ(status.code(), code);
    EXPECT_EQ(status.message(), "m");
    EXPECT_EQ(status.ToString(), std::string(StatusCodeName(code)) + ": m");
  }
}

TEST(StatusTest, ToStringNamesTheCode) {
  EXPECT_EQ(Status::Invalid("bad column 'a'").ToString(), "Invalid: bad column 'a'");
  EXPECT_EQ(Status::IOError("disk").ToString(), "IO error: disk");
}

TEST(StatusTest, ErrnoMapping) {
  EXPECT_EQ(Status::Invalid("").ToErrno(), EINVAL);
  EXPECT_EQ(Status::TypeError("").ToErrno(), EINVAL);
  EXPECT_EQ(Status::IndexError("").ToErrno(), EINVAL);
  EXPECT_EQ(Status::OutOfMemory("").ToErrno(), ENOMEM);
  EXPECT_EQ(Status::NotImplemented("").ToErrno(), ENOSYS);
  EXPECT_EQ(Status::IOError("").ToErrno(), EIO);
  EXPECT_EQ(Status::Cancelled("").ToErrno(), ECANCELED);
  EXPECT_EQ(Status::TimedOut("").ToErrno(), ETIMEDOUT);
  EXPECT_EQ(Status::UnknownError("").ToErrno(), EIO);
}

TEST(StatusTest, FromErrnoRoundTripsTheDistinctCodes) {
  EXPECT_TRUE(Status::FromErrno(0, "ignored").ok());
  for (StatusCode code :
       {StatusCode::kInvalid, StatusCode::kOutOfMemory, StatusCode::kNotImplemented,
        StatusCode::kIOError, StatusCode::kCancelled, StatusCode::kTimedOut}) {
    const Status original(code, "why");
    const Status back = Status::FromErrno(original.ToErrno(), "why");
    EXPECT_EQ(back, original) << StatusCodeName(code);
  }
  const Status unknown = Status::FromErrno(EPERM, "permission");
  EXPECT_EQ(unknown.code(), StatusCode::kUnknownError);
  EXPECT_EQ(unknown.message(), "permission");
}

TEST(StatusTest, WithPrefixKeepsTheCode) {
  const Status status = Status::Invalid("offsets decrease").WithPrefix("column 'a.b': ");
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_EQ(status.message(), "column 'a.b': offsets decrease");
  EXPECT_TRUE(Status::OK().WithPrefix("x").ok());
}

TEST(StatusTest, CopiesShareStateAndCompareEqual) {
  const Status original = Status::TimedOut("waited 5s");
  const Status copy = original;  // NOLINT(performance-unnecessary-copy-initialization): the test
  EXPECT_EQ(copy, original);
  EXPECT_EQ(&copy.message(), &original.message());
  EXPECT_FALSE(copy == Status::TimedOut("waited 6s"));
  EXPECT_FALSE(copy == Status::Cancelled("waited 5s"));
  EXPECT_TRUE(Status() == Status::OK());
}

TEST(StatusTest, StatusCodeNames) {
  EXPECT_STREQ(StatusCodeName(StatusCode::kOk), "OK");
  EXPECT_STREQ(StatusCodeName(StatusCode::kTypeError), "Type error");
  EXPECT_STREQ(StatusCodeName(static_cast<StatusCode>(999)), "Unknown error");
}

// ---- Result ----------------------------------------------------------------

TEST(ResultTest, HoldsAValue) {
  Result<int> result(42);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result.status().ok());
  EXPECT_EQ(*result, 42);
  EXPECT_EQ(result.ValueUnsafe(), 42);
  *result = 7;
  EXPECT_EQ(result.MoveValueUnsafe(), 7);
}

TEST(ResultTest, HoldsAnError) {
  Result<int> result(Status::Invalid("nope"));
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalid);
  EXPECT_EQ(result.status().message(), "nope");
  EXPECT_EQ(std::move(result).ValueOr(-1), -1);
}

TEST(ResultTest, OkStatusWithoutValueBecomesAnError) {
  Result<int> result(Status::OK());
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kUnknownError);
  EXPECT_THAT(result.status().message(), HasSubstr("OK Status without a value"));
}

TEST(ResultTest, ConvertsFromCompatibleValues) {
  Result<std::string> from_literal("text");
  ASSERT_TRUE(from_literal.ok());
  EXPECT_EQ(*from_literal, "text");
  EXPECT_EQ(from_literal->size(), 4u);
  Result<std::unique_ptr<int>> move_only(std::make_unique<int>(3));
  ASSERT_TRUE(move_only.ok());
  EXPECT_EQ(**move_only, 3);
  std::unique_ptr<int> taken = move_only.MoveValueUnsafe();
  EXPECT_EQ(*taken, 3);
}

TEST(ResultTest, ValueOrReturnsTheValueWhenPresent) {
  EXPECT_EQ(Result<std::string>("x").ValueOr("fallback"), "x");
}

TEST(ResultTest, RvalueStatusMovesTheError) {
  Result<int> result(Status::IOError("read failed"));
  const Status status = std::move(result).status();
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_TRUE(Result<int>(1).status().ok());
  EXPECT_TRUE(std::move(Result<int>(1)).status().ok());
}

// ---- Macros ----------------------------------------------------------------

Status FailIf(bool fail) { return fail ? Status::Invalid("failed on purpose") : Status::OK(); }

Result<int> HalfOf(int value) {
  if (value % 2 != 0) return Status::Invalid("odd value " + std::to_string(value));
  return value / 2;
}

Status RunSteps(bool fail_first, bool fail_second, int* steps_done) {
  FERRY_RETURN_NOT_OK(FailIf(fail_first));
  ++*steps_done;
  FERRY_RETURN_NOT_OK(FailIf(fail_second));
  ++*steps_done;
  return Status::OK();
}

Result<int> QuarterOf(int value) {
  FERRY_ASSIGN_OR_RAISE(const int half, HalfOf(value));
  FERRY_ASSIGN_OR_RAISE(int quarter, HalfOf(half));
  return quarter;
}

Status QuarterInto(int value, int* out) {
  // Each use declares its own hidden temporary; the second assigns into an existing lvalue.
  FERRY_ASSIGN_OR_RAISE(int half, HalfOf(value));
  FERRY_ASSIGN_OR_RAISE(*out, HalfOf(half));
  return Status::OK();
}

Result<int> ForwardsStatus(bool fail) {
  FERRY_RETURN_NOT_OK(FailIf(fail));
  return 1;
}

Result<std::unique_ptr<int>> MakeBox(int value) { return std::make_unique<int>(value); }

Result<int> UnboxMoveOnly(int value) {
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<int> box, MakeBox(value));
  return *box;
}

TEST(MacroTest, ReturnNotOkStopsAtTheFirstError) {
  int steps_done = 0;
  EXPECT_TRUE(RunSteps(false, false, &steps_done).ok());
  EXPECT_EQ(steps_done, 2);
  steps_done = 0;
  const Status status = RunSteps(false, true, &steps_done);
  EXPECT_EQ(status.message(), "failed on purpose");
  EXPECT_EQ(steps_done, 1);
  steps_done = 0;
  EXPECT_FALSE(RunSteps(true, false, &steps_done).ok());
  EXPECT_EQ(steps_done, 0);
}

TEST(MacroTest, ReturnNotOkWorksInResultFunctions) {
  EXPECT_EQ(*ForwardsStatus(false), 1);
  EXPECT_EQ(ForwardsStatus(true).status().message(), "failed on purpose");
}

TEST(MacroTest, AssignOrRaiseAssignsOrReturns) {
  Result<int> ok = QuarterOf(12);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 3);
  Result<int> first_fails = QuarterOf(7);
  EXPECT_EQ(first_fails.status().message(), "odd value 7");
  Result<int> second_fails = QuarterOf(6);
  EXPECT_EQ(second_fails.status().message(), "odd value 3");
}

TEST(MacroTest, AssignOrRaiseInStatusFunctionsAndExistingLvalues) {
  int out = 0;
  EXPECT_TRUE(QuarterInto(20, &out).ok());
  EXPECT_EQ(out, 5);
  out = -1;
  EXPECT_EQ(QuarterInto(10, &out).message(), "odd value 5");
  EXPECT_EQ(out, -1);
}

TEST(MacroTest, AssignOrRaiseMovesMoveOnlyValues) { EXPECT_EQ(*UnboxMoveOnly(9), 9); }

}  // namespace
}  // namespace ferry
