// Assertions and small fixtures shared by the GoogleTest suites under src/.
// Header-only: every test target already has src/ on its include path.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ferry/exchange/status.h"
#include "ferry/telemetry/telemetry.h"

namespace ferry::testing {

// Lets one assertion macro accept both a Status and a Result<T>.
inline Status ToStatus(const Status& status) { return status; }
template <typename T>
Status ToStatus(const Result<T>& result) {
  return result.status();
}

// Counter changes since construction; telemetry is process-wide, so tests
// compare differences rather than absolute values.
class CounterDelta {
 public:
  CounterDelta() {
    for (int i = 0; i < static_cast<int>(telemetry::Counter::kCount); ++i) {
      start_.push_back(telemetry::Get(static_cast<telemetry::Counter>(i)));
    }
  }
  int64_t operator()(telemetry::Counter counter) const {
    return telemetry::Get(counter) - start_[static_cast<size_t>(counter)];
  }

 private:
  std::vector<int64_t> start_;
};

// n values start, start+1, ...: their sum.
inline int64_t SequenceSum(int64_t n, int64_t start) { return n * start + n * (n - 1) / 2; }

}  // namespace ferry::testing

// Fails the test (and returns) unless `expr`, a Status or a Result<T>, is OK.
#define ASSERT_OK(expr)                                               \
  do {                                                                \
    const ::ferry::Status _status = ::ferry::testing::ToStatus(expr); \
    ASSERT_TRUE(_status.ok()) << _status.ToString();                  \
  } while (false)

// Evaluates `rexpr`, a Result<T>; fails the test unless it is OK, else moves
// its value into `lhs` (a declaration or an existing variable).
#define FERRY_ASSERT_OK_AND_ASSIGN_IMPL(result_name, lhs, rexpr)    \
  auto result_name = (rexpr);                                       \
  ASSERT_TRUE(result_name.ok()) << result_name.status().ToString(); \
  lhs = std::move(result_name).MoveValueUnsafe()
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  FERRY_ASSERT_OK_AND_ASSIGN_IMPL(FERRY_CONCAT(_test_result_, __COUNTER__), lhs, rexpr)
