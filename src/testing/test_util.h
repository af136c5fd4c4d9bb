// Assertions and small fixtures shared by the GoogleTest suites under src/.
// Header-only: every test target already has src/ on its include path.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/base/telemetry.h"

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

// A fresh directory under the system's temporary directory, named
// "<prefix>-XXXXXX" by mkdtemp, removed with its contents on destruction.
// path() is empty when it could not be created (tests ASSERT_TRUE(dir.ok())).
class ScratchDir {
 public:
  explicit ScratchDir(std::string_view prefix = "ferry-test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }
  // Writes `text` (bytes as given) to path()/name and returns that path.
  std::string Write(std::string_view name, std::string_view text) const {
    const std::string file = *this / name;
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
    return file;
  }

 private:
  std::string path_;
};

// The whole file, or "" when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Polls `condition` every 20 ms for at most `seconds`; its last answer.
inline bool WaitFor(const std::function<bool()>& condition, double seconds = 20) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

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
