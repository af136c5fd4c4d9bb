#include "cli/log_lines.h"

#include <gtest/gtest.h>

namespace ferry::cli {
namespace {

TEST(LogLinePrefixer, PrefixesLinesNotChunks) {
  LogLinePrefixer lines;
  // The chunks the issue showed: a line split after "GPUs 0,1,2,3".
  EXPECT_EQ(lines.Add(1, 0, "stdout", "task 0 step 0 GPUs 0,1,2,3"), "");
  EXPECT_EQ(lines.Add(1, 0, "stdout", "\ntask 0 step 1 GPUs 0,1,2,3\ntask 0 "),
            "[task 0 stdout] task 0 step 0 GPUs 0,1,2,3\n"
            "[task 0 stdout] task 0 step 1 GPUs 0,1,2,3\n");
  EXPECT_EQ(lines.Add(1, 0, "stdout", "step 2\n"), "[task 0 stdout] task 0 step 2\n");
  EXPECT_EQ(lines.Flush("stdout"), "");
}

TEST(LogLinePrefixer, KeepsTasksAndStreamsApart) {
  LogLinePrefixer lines;
  EXPECT_EQ(lines.Add(1, 0, "stdout", "zero "), "");
  EXPECT_EQ(lines.Add(1, 1, "stdout", "one "), "");
  EXPECT_EQ(lines.Add(1, 0, "stderr", "warn"), "");
  EXPECT_EQ(lines.Add(1, 1, "stdout", "done\n"), "[task 1 stdout] one done\n");
  EXPECT_EQ(lines.Add(1, 0, "stdout", "done\n"), "[task 0 stdout] zero done\n");
  EXPECT_EQ(lines.Add(1, 0, "stderr", "ing\n"), "[task 0 stderr] warning\n");
}

TEST(LogLinePrefixer, EmptyLinesAndChunksEndingInNewlines) {
  LogLinePrefixer lines;
  EXPECT_EQ(lines.Add(1, 2, "stdout", "\n\na\n"),
            "[task 2 stdout] \n[task 2 stdout] \n[task 2 stdout] a\n");
  EXPECT_EQ(lines.Add(1, 2, "stdout", ""), "");
  EXPECT_EQ(lines.Flush("stdout"), "");
}

TEST(LogLinePrefixer, FlushEndsPartialLinesOfOneStream) {
  LogLinePrefixer lines;
  EXPECT_EQ(lines.Add(1, 1, "stdout", "no newline at the end"), "");
  EXPECT_EQ(lines.Add(1, 0, "stdout", "nor here"), "");
  EXPECT_EQ(lines.Add(1, 0, "stderr", "oops"), "");
  EXPECT_EQ(lines.Flush("stdout"),
            "[task 0 stdout] nor here\n[task 1 stdout] no newline at the end\n");
  EXPECT_EQ(lines.Flush("stdout"), "");
  EXPECT_EQ(lines.Flush("stderr"), "[task 0 stderr] oops\n");
}

TEST(LogLinePrefixer, ALaterAttemptEndsTheEarlierOnesLine) {
  LogLinePrefixer lines;
  EXPECT_EQ(lines.Add(1, 0, "stdout", "killed mid-li"), "");
  EXPECT_EQ(lines.Add(2, 0, "stdout", "resumed\n"),
            "[task 0 stdout] killed mid-li\n[task 0 attempt 2 stdout] resumed\n");
}

}  // namespace
}  // namespace ferry::cli
