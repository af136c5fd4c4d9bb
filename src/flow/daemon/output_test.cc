// Line splitting, prefixed forwarding and log files.
#include "flow/daemon/output.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "testing/test_util.h"

namespace ferry::flow::daemon {
namespace {

std::string TempDir() {
  char pattern[] = "/tmp/ferry-output-test-XXXXXX";
  const char* made = ::mkdtemp(pattern);
  return made != nullptr ? std::string(made) : std::string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(LineBufferTest, SplitsAcrossChunks) {
  LineBuffer buffer;
  EXPECT_TRUE(buffer.Append("hel").empty());
  EXPECT_EQ(buffer.Append("lo\nwor"), std::vector<std::string>{"hello"});
  EXPECT_EQ(buffer.Append("ld\r\n\nlast"), (std::vector<std::string>{
                                               "world",
                                               "",
                                           }));
  EXPECT_EQ(buffer.Finish(), std::vector<std::string>{"last"});
  EXPECT_TRUE(buffer.Finish().empty());
}

TEST(LineBufferTest, CutsOverlongLines) {
  LineBuffer buffer;
  std::string huge(LineBuffer::kMaxLine + 10, 'x');
  auto lines = buffer.Append(huge + "\n");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), LineBuffer::kMaxLine);
  EXPECT_EQ(lines[1], std::string(10, 'x'));
}

TEST(NodeOutputTest, PrefixesLinesAndWritesTheLog) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  std::ostringstream out, err;
  {
    NodeOutput output("camera", &out, &err);
    ASSERT_OK(MakeDirectories(dir + "/logs/run"));
    ASSERT_OK(output.OpenLog(dir + "/logs/run/camera.log"));
    output.Line(false, "frame 1");
    output.Line(true, "warning: dark");
    output.Note("exited: exit 0", /*console=*/false);
    output.Note("exited: exit 1", /*console=*/true);
  }
  EXPECT_EQ(out.str(), "[camera] frame 1\n");
  EXPECT_EQ(err.str(), "[camera] (stderr) warning: dark\n[ferry] camera: exited: exit 1\n");
  EXPECT_EQ(ReadFile(dir + "/logs/run/camera.log"),
            "frame 1\nwarning: dark\n[ferry] exited: exit 0\n[ferry] exited: exit 1\n");
  std::remove((dir + "/logs/run/camera.log").c_str());
  ::rmdir((dir + "/logs/run").c_str());
  ::rmdir((dir + "/logs").c_str());
  ::rmdir(dir.c_str());
}

TEST(NodeOutputTest, BadLogPathIsAnError) {
  NodeOutput output("camera", nullptr, nullptr);
  Status opened = output.OpenLog("/proc/no/such/dir/camera.log");
  EXPECT_FALSE(opened.ok());
  EXPECT_NE(opened.message().find("cannot create log file"), std::string::npos);
  EXPECT_FALSE(MakeDirectories("/proc/self/status/sub").ok());
}

}  // namespace
}  // namespace ferry::flow::daemon
