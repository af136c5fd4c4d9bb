// NodeConfig's JSON form, the array convention and typed metadata.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "ferry/exchange/builder.h"
#include "ferry/flow/node.h"
#include "testing/test_util.h"

namespace ferry::flow {
namespace {

using ::testing::HasSubstr;

NodeConfig SampleConfig() {
  NodeConfig config;
  config.dataflow = "df-1234-ab12";
  config.node = "sink";
  config.daemon_socket = "ferry-daemon/df-1234-ab12";
  NodeConfig::Input boxes;
  boxes.id = "boxes";
  boxes.channel = "df-1234-ab12/runtime/detect/boxes";
  boxes.queue_size = 8;
  boxes.overflow = "drop_oldest";
  boxes.producer_may_restart = true;
  NodeConfig::Input tick;
  tick.id = "tick";
  tick.timer_interval = std::chrono::milliseconds(33);
  config.inputs = {boxes, tick};
  config.outputs = {{"out", "df-1234-ab12/sink/out"}};
  config.restart_count = 2;
  return config;
}

TEST(NodeConfigTest, JsonRoundTrip) {
  const NodeConfig config = SampleConfig();
  ASSERT_OK_AND_ASSIGN(NodeConfig back, NodeConfig::FromJson(config.ToJson()));
  EXPECT_EQ(back.dataflow, config.dataflow);
  EXPECT_EQ(back.node, config.node);
  EXPECT_EQ(back.daemon_socket, config.daemon_socket);
  ASSERT_EQ(back.inputs.size(), 2u);
  EXPECT_EQ(back.inputs[0].id, "boxes");
  EXPECT_EQ(back.inputs[0].channel, config.inputs[0].channel);
  EXPECT_EQ(back.inputs[0].queue_size, 8u);
  EXPECT_EQ(back.inputs[0].overflow, "drop_oldest");
  EXPECT_TRUE(back.inputs[0].producer_may_restart);
  EXPECT_EQ(back.inputs[0].timer_interval.count(), 0);
  EXPECT_EQ(back.inputs[1].id, "tick");
  EXPECT_TRUE(back.inputs[1].channel.empty());
  EXPECT_EQ(back.inputs[1].timer_interval, std::chrono::milliseconds(33));
  ASSERT_EQ(back.outputs.size(), 1u);
  EXPECT_EQ(back.outputs[0].id, "out");
  EXPECT_EQ(back.outputs[0].channel, "df-1234-ab12/sink/out");
  EXPECT_EQ(back.restart_count, 2);
  EXPECT_EQ(back.ToJson(), config.ToJson());
}

TEST(NodeConfigTest, ParsesTheProtocolExampleWithDefaults) {
  ASSERT_OK_AND_ASSIGN(NodeConfig config, NodeConfig::FromJson(R"({
      "dataflow": "df-1", "node": "sink", "daemon": "ferry-daemon/df-1",
      "inputs": [{"id": "boxes", "channel": "df-1/detect/boxes"},
                 {"id": "tick", "timer_ns": 33000000}],
      "outputs": [{"id": "out", "channel": "df-1/sink/out"}],
      "restart_count": 0, "a_future_field": [1, 2]})"));
  EXPECT_EQ(config.inputs[0].queue_size, 64u);
  EXPECT_EQ(config.inputs[0].overflow, "block");
  EXPECT_FALSE(config.inputs[0].producer_may_restart);
  EXPECT_EQ(config.inputs[1].timer_interval, std::chrono::milliseconds(33));
  // Only "node" is required.
  ASSERT_OK_AND_ASSIGN(NodeConfig minimal, NodeConfig::FromJson(R"({"node": "n"})"));
  EXPECT_TRUE(minimal.inputs.empty());
  EXPECT_TRUE(minimal.daemon_socket.empty());
}

TEST(NodeConfigTest, BadJsonNamesTheField) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {"", "not valid JSON"},
      {"{\"node\": ", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {"{}", "node: missing"},
      {R"({"node": 7})", "node: expected a string"},
      {R"({"node": ""})", "node: must not be empty"},
      {R"({"node": "n", "daemon": false})", "daemon: expected a string"},
      {R"({"node": "n", "inputs": {}})", "inputs: expected an array"},
      {R"({"node": "n", "inputs": [3]})", "inputs[0]: expected an object"},
      {R"({"node": "n", "inputs": [{"channel": "a/b"}]})", "inputs[0].id: missing"},
      {R"({"node": "n", "inputs": [{"id": "x"}]})", "inputs[0]: needs exactly one"},
      {R"({"node": "n", "inputs": [{"id": "x", "channel": "a", "timer_ns": 5}]})",
       "inputs[0]: needs exactly one"},
      {R"({"node": "n", "inputs": [{"id": "x", "channel": "a", "queue_size": 0}]})",
       "inputs[0].queue_size: must be in [1, 1048576]"},
      {R"({"node": "n", "inputs": [{"id": "x", "channel": "a", "queue_size": -4}]})",
       "inputs[0].queue_size: expected a non-negative integer"},
      {R"({"node": "n", "inputs": [{"id": "x", "channel": "a", "queue_size": 1.5}]})",
       "inputs[0].queue_size: expected a non-negative integer"},
      {R"({"node": "n", "inputs": [{"id": "x", "channel": "a", "overflow": "spill"}]})",
       "inputs[0].overflow: unknown overflow policy 'spill'"},
      {R"({"node": "n", "inputs": [{"id": "x", "channel": "a b"}]})", "inputs[0].channel:"},
      {R"({"node": "n", "inputs": [{"id": "x", "timer_ns": 0}]})",
       "inputs[0].timer_ns: must be a positive"},
      {R"({"node": "n", "inputs": [{"id": "x", "timer_ns": "1s"}]})",
       "inputs[0].timer_ns: expected a non-negative integer"},
      {R"({"node": "n", "inputs": [{"id": "x", "timer_ns": 5}, {"id": "x", "timer_ns": 6}]})",
       "inputs[1].id: input 'x' is listed twice"},
      {R"({"node": "n", "outputs": [{"id": "o"}]})", "outputs[0].channel: missing"},
      {R"({"node": "n", "outputs": [{"id": "o", "channel": ""}]})", "outputs[0].channel:"},
      {R"({"node": "n", "outputs": [{"id": "o", "channel": "c"}, {"id": "o", "channel": "d"}]})",
       "outputs[1].id: output 'o' is listed twice"},
      {R"({"node": "n", "restart_count": -1})", "restart_count: expected a non-negative"},
  };
  for (const Case& each : cases) {
    Result<NodeConfig> parsed = NodeConfig::FromJson(each.json);
    ASSERT_FALSE(parsed.ok()) << each.json;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalid) << each.json;
    EXPECT_THAT(parsed.status().message(), HasSubstr(each.message)) << each.json;
  }
}

TEST(NodeConfigTest, ValidateChecksConfigsBuiltInCode) {
  NodeConfig config = SampleConfig();
  ASSERT_OK(config.Validate());
  config.inputs[1].channel = "also/a/channel";  // a timer with a channel
  EXPECT_THAT(config.Validate().message(), HasSubstr("both a channel and a timer"));
  config = SampleConfig();
  config.inputs[0].queue_size = 0;
  EXPECT_THAT(config.Validate().message(), HasSubstr("queue_size"));
  config = SampleConfig();
  config.inputs[1].timer_interval = std::chrono::nanoseconds(-5);
  EXPECT_THAT(config.Validate().message(), HasSubstr("neither a channel nor a positive timer"));
}

TEST(NodeConfigTest, FromEnvironmentExplainsAMissingConfig) {
  ::unsetenv("FERRY_NODE_CONFIG");
  Result<std::unique_ptr<Node>> node = Node::FromEnvironment();
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.status().message(), HasSubstr("start it with `ferry run dataflow.yml`"));
  ::setenv("FERRY_NODE_CONFIG", R"({"node": 1})", 1);
  node = Node::FromEnvironment();
  ::unsetenv("FERRY_NODE_CONFIG");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.status().message(), HasSubstr("FERRY_NODE_CONFIG: node config: node:"));
}

TEST(ArrayConventionTest, WrapsAndUnwraps) {
  Int64Builder builder;
  ASSERT_OK(builder.Append(5));
  ASSERT_OK(builder.AppendNull());
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr array, builder.Finish());
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, ArrayAsBatch(array, /*nullable=*/false));
  ASSERT_EQ(batch->num_columns(), 1);
  EXPECT_EQ(batch->schema()->fields[0].name, "value");
  EXPECT_TRUE(batch->schema()->fields[0].nullable);  // it has a null
  EXPECT_EQ(batch->column(0), array);                // the same data, no copy
  const Metadata marked = {{"ferry.array", "1"}};
  EXPECT_TRUE(IsArrayMessage(marked));
  EXPECT_EQ(ArrayOfMessage(*batch, marked), array);
  EXPECT_EQ(ArrayOfMessage(*batch, {}), nullptr);
  EXPECT_FALSE(IsArrayMessage({{"ferry.array", "0"}}));
  EXPECT_FALSE(ArrayAsBatch(nullptr).ok());
}

TEST(TypedMetadataTest, RoundTripsTypes) {
  const TypedMetadata values = {{"name", std::string("left")},
                                {"frame", int64_t{-7}},
                                {"gain", 0.1},
                                {"huge", 1e300},
                                {"odd", std::nan("")},
                                {"ok", true},
                                {"no", false},
                                {"text_number", std::string("42")}};
  ASSERT_OK_AND_ASSIGN(Metadata encoded, EncodeTypedMetadata(values));
  // C++ readers see plain strings.
  EXPECT_EQ(encoded[0], (std::pair<std::string, std::string>("name", "left")));
  EXPECT_EQ(encoded[1].second, "-7");
  EXPECT_EQ(encoded[2].second, "0.1");
  EXPECT_EQ(encoded[5].second, "true");
  EXPECT_EQ(encoded.back().first, "ferry.types");
  const TypedMetadata back = DecodeTypedMetadata(encoded);
  ASSERT_EQ(back.size(), values.size());
  for (size_t index = 0; index < values.size(); ++index) {
    EXPECT_EQ(back[index].first, values[index].first);
    EXPECT_EQ(back[index].second.index(), values[index].second.index()) << values[index].first;
  }
  EXPECT_EQ(std::get<int64_t>(back[1].second), -7);
  EXPECT_EQ(std::get<double>(back[2].second), 0.1);
  EXPECT_EQ(std::get<double>(back[3].second), 1e300);
  EXPECT_TRUE(std::isnan(std::get<double>(back[4].second)));
  EXPECT_EQ(std::get<bool>(back[5].second), true);
  EXPECT_EQ(std::get<std::string>(back[7].second), "42");
}

TEST(TypedMetadataTest, ListsAndMapsRoundTripExactly) {
  const MetadataValue nested(MetadataList{
      MetadataValue(int64_t{1}), MetadataValue(2.0), MetadataValue(std::string("three")),
      MetadataValue(MetadataList{MetadataValue(false), MetadataValue(MetadataMap{})}),
      MetadataValue(MetadataMap{{"x", MetadataValue(0.25)},
                                {"big", MetadataValue(std::numeric_limits<int64_t>::min())},
                                {"nan", MetadataValue(std::nan(""))},
                                {"inf", MetadataValue(std::numeric_limits<double>::infinity())},
                                {"text", MetadataValue(std::string("\xc3\xa9\"\\\n\x01"))}})});
  const TypedMetadata values = {{"l", nested}, {"empty", MetadataValue(MetadataList{})}};
  ASSERT_OK_AND_ASSIGN(Metadata encoded, EncodeTypedMetadata(values));
  // On the wire: JSON text whose floats keep a '.', and its type.
  EXPECT_EQ(encoded[0].second,
            R"([1,2.0,"three",[false,{}],{"x":0.25,"big":-9223372036854775808,"nan":NaN,)"
            R"("inf":Infinity,"text":")"
            "\xc3\xa9"
            R"(\"\\\n\u0001"}])");
  EXPECT_THAT(encoded.back().second, HasSubstr(R"("l":"json")"));
  const TypedMetadata back = DecodeTypedMetadata(encoded);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(back[0].second == nested);
  EXPECT_TRUE(back[1].second == MetadataValue(MetadataList{}));
  const auto& list = std::get<MetadataList>(back[0].second);
  EXPECT_TRUE(std::holds_alternative<double>(list[1]));  // 2.0 stays a float
  EXPECT_TRUE(std::holds_alternative<int64_t>(list[0]));
}

TEST(TypedMetadataTest, JsonOfOneValue) {
  EXPECT_EQ(
      MetadataValueToJson(MetadataValue(MetadataList{MetadataValue(1e300), MetadataValue(-0.5)})),
      "[1e+300,-0.5]");
  ASSERT_OK_AND_ASSIGN(MetadataValue parsed,
                       MetadataValueFromJson(R"( { "a" : [ 1 , -2.5e3 , "\ud83d\ude00" ] } )"));
  const auto& map = std::get<MetadataMap>(parsed);
  ASSERT_EQ(map.size(), 1u);
  const auto& items = std::get<MetadataList>(map[0].second);
  EXPECT_EQ(std::get<int64_t>(items[0]), 1);
  EXPECT_EQ(std::get<double>(items[1]), -2500.0);
  EXPECT_EQ(std::get<std::string>(items[2]), "\xf0\x9f\x98\x80");
  ASSERT_OK_AND_ASSIGN(MetadataValue limit, MetadataValueFromJson("9223372036854775807"));
  EXPECT_EQ(std::get<int64_t>(limit), std::numeric_limits<int64_t>::max());
  // Bad text: a clear error, never a crash.
  for (const char* bad :
       {"", "[1,]", "{\"a\":1,\"a\":2}", "{1:2}", "01", "1.", ".5", "-", "[1] x", "\"open",
        "\"\\ud800\"", "\"\\x\"", "nul", "[1e999]", "9223372036854775808", "\"tab\there\""}) {
    EXPECT_FALSE(MetadataValueFromJson(bad).ok()) << bad;
  }
  EXPECT_THAT(MetadataValueFromJson("18446744073709551616").status().message(),
              HasSubstr("does not fit in 64 bits"));
}

TEST(TypedMetadataTest, DepthAndSizeLimits) {
  MetadataValue deep = MetadataValue(MetadataList{});
  for (int level = 1; level < kMaxMetadataDepth; ++level) deep = MetadataValue(MetadataList{deep});
  ASSERT_OK_AND_ASSIGN(Metadata encoded, EncodeTypedMetadata({{"d", deep}}));  // 16 levels: fine
  EXPECT_TRUE(DecodeTypedMetadata(encoded)[0].second == deep);
  const MetadataValue deeper(MetadataMap{{"in", deep}});
  EXPECT_THAT(EncodeTypedMetadata({{"d", deeper}}).status().message(),
              HasSubstr("nests deeper than 16 levels"));
  // Parsing stops at the same depth: foreign text that nests deeper stays a string.
  const Metadata foreign = {{"d", std::string(17, '[') + std::string(17, ']')},
                            {"ferry.types", R"({"d":"json"})"}};
  EXPECT_TRUE(std::holds_alternative<std::string>(DecodeTypedMetadata(foreign)[0].second));
  EXPECT_THAT(
      EncodeTypedMetadata(
          {{"m", MetadataValue(MetadataMap{{"k", MetadataValue(1)}, {"k", MetadataValue(2)}})}})
          .status()
          .message(),
      HasSubstr("has the key 'k' twice"));
  const std::string huge(kMaxMetadataBytes, 'x');
  EXPECT_THAT(EncodeTypedMetadata({{"s", MetadataValue(huge)}}).status().message(),
              HasSubstr("larger than"));
}

TEST(TypedMetadataTest, RejectsReservedAndRepeatedKeys) {
  EXPECT_THAT(EncodeTypedMetadata({{"ferry.array", std::string("1")}}).status().message(),
              HasSubstr("reserved"));
  EXPECT_THAT(EncodeTypedMetadata({{"a", int64_t{1}}, {"a", int64_t{2}}}).status().message(),
              HasSubstr("appears twice"));
  EXPECT_FALSE(EncodeTypedMetadata({{"", true}}).ok());
}

TEST(TypedMetadataTest, ForeignMetadataNeverFails) {
  // Types that do not match their values, a broken type list, unknown types.
  const Metadata foreign = {
      {"a", "x1"},          {"b", "maybe"},
      {"c", "3"},           {"d", "2.5"},
      {"ferry.array", "1"}, {"ferry.types", R"({"a": "int", "b": "bool", "c": "blob", "d": 5})"}};
  const TypedMetadata decoded = DecodeTypedMetadata(foreign);
  ASSERT_EQ(decoded.size(), 4u);
  for (const auto& [key, value] : decoded) {
    EXPECT_TRUE(std::holds_alternative<std::string>(value)) << key;
  }
  const TypedMetadata broken = DecodeTypedMetadata({{"n", "1"}, {"ferry.types", "{not json"}});
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_EQ(std::get<std::string>(broken[0].second), "1");
}

}  // namespace
}  // namespace ferry::flow
