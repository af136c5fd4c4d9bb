// The run summary: statistics from nodes, edge counters, JSON and text.
#include "flow/daemon/summary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/test_util.h"

namespace ferry::flow::daemon {
namespace {

using ::testing::HasSubstr;

// What Node::StatsJson reports (node.cc), for a producer and a consumer.
nlohmann::json ProducerStats(int64_t sent, int64_t bytes, int64_t copied, int64_t dropped) {
  return nlohmann::json::parse(
      R"({"node":"camera","outputs":{"image":{"sent":)" + std::to_string(sent) +
      R"(,"delivered":)" + std::to_string(sent) + R"(,"dropped_oldest":)" +
      std::to_string(dropped) + R"(,"dropped_newest":0,"bytes_sent":)" + std::to_string(bytes) +
      R"(,"bytes_copied":)" + std::to_string(copied) +
      R"(,"subscribers":1,"closed":true}},"inputs":{"tick":{"received":9,"timer":true}}})");
}

nlohmann::json ConsumerStats(int64_t received) {
  return nlohmann::json::parse(R"({"node":"sink","outputs":{},"inputs":{"in":{"received":)" +
                               std::to_string(received) + R"(,"reconnects":0}}})");
}

Edge CameraToSink() {
  Edge edge;
  edge.producer = "camera";
  edge.producer_output = "image";
  edge.consumer = "sink";
  edge.consumer_input = "in";
  edge.label = "camera/image -> sink/in";
  return edge;
}

TEST(SummaryTest, StatisticsAddUpOverInstances) {
  NodeSummary camera;
  camera.id = "camera";
  ASSERT_OK(AddNodeStats(ProducerStats(10, 800, 0, 1), &camera));
  ASSERT_OK(AddNodeStats(ProducerStats(5, 400, 400, 2), &camera));
  EXPECT_EQ(camera.stats_reports, 2);
  const PortCounters& image = camera.outputs.at("image");
  EXPECT_EQ(image.messages, 15);
  EXPECT_EQ(image.bytes, 1200);
  EXPECT_EQ(image.bytes_copied, 400);
  EXPECT_EQ(image.drops, 3);
  EXPECT_EQ(camera.inputs.at("tick").messages, 18);
}

TEST(SummaryTest, MalformedStatisticsChangeNothing) {
  NodeSummary node;
  EXPECT_FALSE(AddNodeStats(nlohmann::json::array(), &node).ok());
  EXPECT_FALSE(
      AddNodeStats(nlohmann::json::parse(R"({"outputs":{"x":{"sent":1}},"inputs":3})"), &node)
          .ok());
  EXPECT_FALSE(AddNodeStats(nlohmann::json::parse(R"({"outputs":{"x":"many"}})"), &node).ok());
  EXPECT_EQ(node.stats_reports, 0);
  EXPECT_TRUE(node.outputs.empty());
  // Unknown fields and wrong-typed counters are ignored.
  ASSERT_OK(AddNodeStats(
      nlohmann::json::parse(R"({"extra":1,"outputs":{"x":{"sent":"2","bytes_sent":8}}})"), &node));
  EXPECT_EQ(node.outputs.at("x").messages, 0);
  EXPECT_EQ(node.outputs.at("x").bytes, 8);
}

TEST(SummaryTest, EdgesTakeMessagesFromTheConsumerAndCopiesFromTheProducer) {
  RunSummary summary;
  summary.nodes.resize(2);
  summary.nodes[0].id = "camera";
  summary.nodes[1].id = "sink";
  ASSERT_OK(AddNodeStats(ProducerStats(10, 800, 80, 0), &summary.nodes[0]));
  ASSERT_OK(AddNodeStats(ConsumerStats(10), &summary.nodes[1]));
  ComputeEdges({CameraToSink()}, &summary);
  ASSERT_EQ(summary.edges.size(), 1u);
  const PortCounters& counters = summary.edges[0].counters;
  EXPECT_TRUE(summary.edges[0].reported);
  EXPECT_EQ(counters.messages, 10);
  EXPECT_EQ(counters.bytes, 800);
  EXPECT_EQ(counters.bytes_copied, 80);
  EXPECT_EQ(counters.drops, 0);
}

TEST(SummaryTest, DroppedMessagesScaleTheBytes) {
  RunSummary summary;
  summary.nodes.resize(2);
  summary.nodes[0].id = "camera";
  summary.nodes[1].id = "sink";
  ASSERT_OK(AddNodeStats(ProducerStats(10, 800, 0, 4), &summary.nodes[0]));
  ASSERT_OK(AddNodeStats(ConsumerStats(6), &summary.nodes[1]));
  ComputeEdges({CameraToSink()}, &summary);
  EXPECT_EQ(summary.edges[0].counters.messages, 6);
  EXPECT_EQ(summary.edges[0].counters.bytes, 480);
  EXPECT_EQ(summary.edges[0].counters.drops, 4);
}

TEST(SummaryTest, EdgesAddUpSentReceivedDropsAndLost) {
  RunSummary summary;
  summary.nodes.resize(2);
  summary.nodes[0].id = "camera";
  summary.nodes[1].id = "sink";
  summary.nodes[1].instances = 2;  // the first instance died without reporting
  ASSERT_OK(AddNodeStats(ProducerStats(50, 4000, 0, 3), &summary.nodes[0]));
  ASSERT_OK(AddNodeStats(ConsumerStats(40), &summary.nodes[1]));
  ComputeEdges({CameraToSink()}, &summary);
  const EdgeSummary& edge = summary.edges[0];
  EXPECT_EQ(edge.sent, 50);
  EXPECT_EQ(edge.received, 40);
  EXPECT_EQ(edge.counters.drops, 3);
  EXPECT_EQ(edge.lost, 7);
  EXPECT_EQ(edge.sent, edge.received + edge.counters.drops + edge.lost);
  auto json = summary.ToJson();
  EXPECT_EQ(json["edges"][0]["sent"], 50);
  EXPECT_EQ(json["edges"][0]["received"], 40);
  EXPECT_EQ(json["edges"][0]["drops"], 3);
  EXPECT_EQ(json["edges"][0]["lost"], 7);
  const std::string text = summary.ToText();
  EXPECT_THAT(text, HasSubstr("sent  received"));
  EXPECT_THAT(text, HasSubstr("lost"));
}

TEST(SummaryTest, SharedOutputsTakeDropsFromEachConsumer) {
  // camera/image feeds two sinks: the publisher's 5 drops are the two
  // queues' together, so each edge counts the gaps its consumer saw.
  RunSummary summary;
  summary.nodes.resize(3);
  summary.nodes[0].id = "camera";
  summary.nodes[1].id = "sink";
  summary.nodes[2].id = "other";
  ASSERT_OK(AddNodeStats(ProducerStats(10, 800, 0, 5), &summary.nodes[0]));
  ASSERT_OK(AddNodeStats(nlohmann::json::parse(R"({"inputs":{"in":{"received":7,"dropped":3}}})"),
                         &summary.nodes[1]));
  ASSERT_OK(AddNodeStats(nlohmann::json::parse(R"({"inputs":{"in":{"received":8,"dropped":2}}})"),
                         &summary.nodes[2]));
  Edge other = CameraToSink();
  other.consumer = "other";
  other.label = "camera/image -> other/in";
  ComputeEdges({CameraToSink(), other}, &summary);
  EXPECT_EQ(summary.edges[0].counters.drops, 3);
  EXPECT_EQ(summary.edges[0].lost, 0);
  EXPECT_EQ(summary.edges[1].counters.drops, 2);
  EXPECT_EQ(summary.edges[1].lost, 0);
}

TEST(SummaryTest, UnreportedProducerInstanceLeavesSentUnknown) {
  RunSummary summary;
  summary.nodes.resize(2);
  summary.nodes[0].id = "camera";
  summary.nodes[0].instances = 2;  // one of them crashed before reporting
  summary.nodes[1].id = "sink";
  ASSERT_OK(AddNodeStats(ProducerStats(10, 800, 0, 0), &summary.nodes[0]));
  ASSERT_OK(AddNodeStats(ConsumerStats(12), &summary.nodes[1]));
  ComputeEdges({CameraToSink()}, &summary);
  EXPECT_EQ(summary.edges[0].sent, -1);
  EXPECT_EQ(summary.edges[0].received, 12);
  EXPECT_EQ(summary.edges[0].lost, -1);
  auto json = summary.ToJson();
  EXPECT_TRUE(json["edges"][0]["sent"].is_null());
  EXPECT_TRUE(json["edges"][0]["lost"].is_null());
  EXPECT_EQ(json["edges"][0]["received"], 12);
  EXPECT_THAT(summary.ToText(), HasSubstr("(a producer instance did not report)"));
}

TEST(SummaryTest, ProducerOnlyAndNoStatistics) {
  RunSummary summary;
  summary.nodes.resize(2);
  summary.nodes[0].id = "camera";
  summary.nodes[1].id = "sink";
  ComputeEdges({CameraToSink()}, &summary);
  EXPECT_FALSE(summary.edges[0].reported);
  EXPECT_THAT(summary.ToText(), HasSubstr("(no statistics)"));

  ASSERT_OK(AddNodeStats(ProducerStats(3, 24, 0, 0), &summary.nodes[0]));
  ComputeEdges({CameraToSink()}, &summary);
  EXPECT_TRUE(summary.edges[0].reported);
  EXPECT_EQ(summary.edges[0].counters.messages, 3);
  EXPECT_EQ(summary.edges[0].counters.bytes, 24);
}

TEST(SummaryTest, JsonAndText) {
  RunSummary summary;
  summary.run_id = "df-1-abcd";
  summary.stop_reason = "ctrl-c";
  summary.exit_code = 1;
  summary.nodes.resize(2);
  summary.nodes[0].id = "camera";
  summary.nodes[0].started = true;
  summary.nodes[0].exit.signal = 11;
  summary.nodes[0].failed = true;
  summary.nodes[0].restarts = 2;
  summary.nodes[1].id = "sink";
  summary.nodes[1].started = true;
  summary.nodes[1].exit.exited = true;
  ASSERT_OK(AddNodeStats(ProducerStats(10, 800, 0, 0), &summary.nodes[0]));
  ASSERT_OK(AddNodeStats(ConsumerStats(10), &summary.nodes[1]));
  ComputeEdges({CameraToSink()}, &summary);

  auto json = summary.ToJson();
  EXPECT_EQ(json["dataflow"], "df-1-abcd");
  EXPECT_EQ(json["exit_code"], 1);
  EXPECT_EQ(json["nodes"][0]["signal"], 11);
  EXPECT_TRUE(json["nodes"][0]["exit_code"].is_null());
  EXPECT_EQ(json["nodes"][0]["restarts"], 2);
  EXPECT_EQ(json["nodes"][1]["exit_code"], 0);
  EXPECT_EQ(json["edges"][0]["edge"], "camera/image -> sink/in");
  EXPECT_EQ(json["edges"][0]["messages"], 10);

  const std::string text = summary.ToText();
  EXPECT_THAT(text, HasSubstr("dataflow df-1-abcd finished (ctrl-c)"));
  EXPECT_THAT(text, HasSubstr("signal 11"));
  EXPECT_THAT(text, HasSubstr("(failed)"));
  EXPECT_THAT(text, HasSubstr("camera/image -> sink/in"));
  EXPECT_THAT(text, HasSubstr("800 B"));
}

TEST(SummaryTest, StatusTexts) {
  NodeSummary node;
  EXPECT_EQ(node.StatusText(), "not started");
  node.started = true;
  node.exit.exited = true;
  EXPECT_EQ(node.StatusText(), "exit 0");
  node.killed_after_grace = true;
  node.failed = true;
  EXPECT_EQ(node.StatusText(), "killed after stop grace (failed)");
}

}  // namespace
}  // namespace ferry::flow::daemon
