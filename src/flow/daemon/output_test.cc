// Line splitting, prefixed forwarding and log files.
#include "flow/daemon/output.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

#include "ferry/flow/node.h"
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

// The one string of a message sent by StdoutPublisher.
std::string LineOf(const Message& message) {
  EXPECT_TRUE(IsArrayMessage(message.metadata));
  ArrayDataPtr array = ArrayOfMessage(*message.batch, message.metadata);
  EXPECT_NE(array, nullptr);
  if (array == nullptr) return "";
  EXPECT_EQ(array->type->id, TypeId::kUtf8);
  EXPECT_EQ(array->length, 1);
  const int32_t* offsets = array->GetValues<int32_t>(1);
  const char* data = reinterpret_cast<const char*>(array->buffers[2]->data());
  return std::string(data + offsets[0], static_cast<size_t>(offsets[1] - offsets[0]));
}

TEST(StdoutPublisherTest, SendsEachLineAsAStringArray) {
  const std::string channel = "stdout-test-" + std::to_string(::getpid());
  ASSERT_OK_AND_ASSIGN(auto publisher, StdoutPublisher::Create(channel));
  Result<std::unique_ptr<Subscriber>> subscriber = Status::UnknownError("not connected");
  std::thread connect([&] { subscriber = Subscriber::Connect(channel); });
  // The publisher accepts its subscriber while it is polled.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (publisher->wait_fd() >= 0 && std::chrono::steady_clock::now() < deadline) {
    publisher->Poll();
    if (subscriber.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  connect.join();
  ASSERT_TRUE(subscriber.ok()) << subscriber.status().ToString();

  ASSERT_OK(publisher->Send("hello"));
  ASSERT_OK(publisher->Send(std::string_view("bad \xFF byte, caf\xC3\xA9")));
  ASSERT_OK_AND_ASSIGN(Message first, (*subscriber)->Receive(std::chrono::seconds(5)));
  EXPECT_EQ(LineOf(first), "hello\n");
  ASSERT_OK_AND_ASSIGN(Message second, (*subscriber)->Receive(std::chrono::seconds(5)));
  // Bytes that are not UTF-8 become U+FFFD; valid sequences stay.
  EXPECT_EQ(LineOf(second), "bad \xEF\xBF\xBD byte, caf\xC3\xA9\n");
}

}  // namespace
}  // namespace ferry::flow::daemon
