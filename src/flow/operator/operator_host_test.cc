// The operator host in-process, against a ScriptedNode: real operator
// libraries (src/flow/operator/testing) chained, fanned out, failing and
// refused; device batches on OpenCL (PoCL in CI).
#include "flow/operator/operator_host.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "ferry/device/device.h"
#include "flow/operator/scripted_node.h"
#include "testing/test_util.h"

namespace ferry::flow {
namespace {

using telemetry::Counter;
using testing::CounterDelta;
using ::testing::HasSubstr;

struct InputDef {
  std::string id;
  std::string source = kExternalSource;
  uint32_t queue_size = 64;
  std::string overflow = "block";
};

OperatorDefinition Op(const std::string& id, const std::string& path, std::vector<InputDef> inputs,
                      std::vector<std::string> outputs, const std::string& config = "{}") {
  OperatorDefinition op;
  op.id = id;
  op.path = path;
  for (const auto& input : inputs) {
    op.inputs.push_back({input.id, input.source, input.queue_size, input.overflow});
  }
  op.outputs = std::move(outputs);
  op.config_json = config;
  return op;
}

NodeConfig Config(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
  NodeConfig config;
  config.dataflow = "test";
  config.node = "runtime";
  for (const auto& id : inputs) config.inputs.push_back({id, "test/" + id});
  for (const auto& id : outputs) config.outputs.push_back({id, "test/runtime/" + id});
  return config;
}

RecordBatchPtr Int64Batch(std::vector<int64_t> values) {
  const auto rows = static_cast<int64_t>(values.size());
  auto buffer = Buffer::CopyOf(values.data(), rows * 8);
  auto column = std::make_shared<ArrayData>();
  column->type = int64();
  column->length = rows;
  column->buffers = {nullptr, *buffer};
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("values", int64(), false)};
  return *RecordBatch::Make(schema, rows, {column});
}

const void* ValuesAddress(const RecordBatch& batch) { return batch.column(0)->buffers[1]->data(); }

std::string Address(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

std::string Lookup(const Metadata& metadata, const std::string& key) {
  for (const auto& [name, value] : metadata) {
    if (name == key) return value;
  }
  return "<missing " + key + ">";
}

int64_t BytesCopied(const CounterDelta& delta) {
  return delta(Counter::kBytesCopiedH2D) + delta(Counter::kBytesCopiedD2H) +
         delta(Counter::kBytesCopiedD2D) + delta(Counter::kBytesCopiedHost);
}

const OperatorStats& StatsOf(const std::vector<OperatorStats>& all, const std::string& id) {
  for (const auto& stats : all) {
    if (stats.id == id) return stats;
  }
  static OperatorStats none;
  return none;
}

OperatorHostOptions Quiet() {
  OperatorHostOptions options;
  options.log_errors = false;
  return options;
}

// ---- Zero-copy chains -------------------------------------------------------

TEST(OperatorHost, ChainedCOperatorsPassTheVeryStructAlong) {
  OperatorHost host;
  ASSERT_OK(host.Add(Op("a", FERRY_TEST_C_RELAY, {{"in"}}, {"out"})));
  ASSERT_OK(host.Add(Op("b", FERRY_TEST_C_RELAY, {{"in", "a/out"}}, {"out"})));
  ScriptedNode node(Config({"a/in"}, {"b/out"}));
  RecordBatchPtr batch = Int64Batch({1, 2, 3, 4});
  const void* values = ValuesAddress(*batch);
  node.PushInput("a/in", batch, {{"origin", "test"}});

  CounterDelta delta;
  ASSERT_OK(host.Run(&node));
  ASSERT_EQ(node.sent().size(), 1u);
  const auto& sent = node.sent()[0];
  EXPECT_EQ(sent.output, "b/out");
  // The same memory all the way: no operator and no hop copied it.
  EXPECT_EQ(ValuesAddress(*sent.batch), values);
  EXPECT_EQ(Lookup(sent.metadata, "a.values"), Address(values));
  EXPECT_EQ(Lookup(sent.metadata, "b.values"), Address(values));
  // b received the struct a sent (same private_data): moved, not re-exported.
  EXPECT_EQ(Lookup(sent.metadata, "a.private"), Lookup(sent.metadata, "b.private"));
  EXPECT_EQ(Lookup(sent.metadata, "origin"), "test");
  EXPECT_EQ(sent.batch->num_rows(), 4);
  EXPECT_EQ(BytesCopied(delta), 0);
  auto stats = host.stats();
  EXPECT_EQ(StatsOf(stats, "a").inputs_external, 1u);
  EXPECT_EQ(StatsOf(stats, "b").inputs_moved, 1u);
  EXPECT_EQ(StatsOf(stats, "b").outputs_published, 1u);
  EXPECT_TRUE(host.errors().empty());
  // The end of the node's stream stopped both and closed the published output.
  EXPECT_EQ(StatsOf(stats, "a").state, "stopped");
  EXPECT_THAT(node.closed_outputs(), ::testing::ElementsAre("b/out"));
}

TEST(OperatorHost, ChainedCxxOperatorsShareBuffersAndReportTelemetry) {
  OperatorHost host;
  ASSERT_OK(host.Add(Op("x", FERRY_TEST_OPERATOR, {{"in"}}, {"out"}, R"({"mode":"relay"})")));
  ASSERT_OK(
      host.Add(Op("y", FERRY_TEST_OPERATOR, {{"in", "x/out"}}, {"out"}, R"({"mode":"relay"})")));
  ScriptedNode node(Config({"x/in"}, {"y/out"}));
  RecordBatchPtr batch = Int64Batch({5, 6, 7});
  const void* values = ValuesAddress(*batch);
  node.PushInput("x/in", batch);
  node.PushInput("x/in", Int64Batch({8}));

  CounterDelta delta;
  ASSERT_OK(host.Run(&node));
  ASSERT_EQ(node.sent().size(), 2u);
  EXPECT_EQ(ValuesAddress(*node.sent()[0].batch), values);
  EXPECT_EQ(Lookup(node.sent()[0].metadata, "x.values"), Address(values));
  EXPECT_EQ(Lookup(node.sent()[0].metadata, "y.values"), Address(values));
  EXPECT_EQ(node.sent()[1].batch->num_rows(), 1);
  EXPECT_EQ(BytesCopied(delta), 0);
  // Each operator imported each batch without a copy; the library's copy of
  // Ferry forwarded that to this process's counters.
  EXPECT_GE(delta(Counter::kZeroCopyImports), 4);
  EXPECT_GE(delta(Counter::kZeroCopyExports), 4);
}

// The host and the C++ helper cache the imported schema per output and per
// input: a schema that changes between batches must still reach the consumer.
TEST(OperatorHost, SchemaChangesBetweenBatchesReachEveryConsumer) {
  OperatorHost host;
  ASSERT_OK(host.Add(Op("c", FERRY_TEST_C_RELAY, {{"in"}}, {"out"})));
  ASSERT_OK(
      host.Add(Op("x", FERRY_TEST_OPERATOR, {{"in", "c/out"}}, {"out"}, R"({"mode":"relay"})")));
  ASSERT_OK(
      host.Add(Op("y", FERRY_TEST_OPERATOR, {{"in", "x/out"}}, {"out"}, R"({"mode":"relay"})")));
  ScriptedNode node(Config({"c/in"}, {"y/out"}));
  auto renamed = [](const RecordBatchPtr& batch, std::string name, Metadata metadata) {
    auto schema = std::make_shared<Schema>(*batch->schema());
    schema->fields[0].name = std::move(name);
    schema->metadata = std::move(metadata);
    return *RecordBatch::Make(schema, batch->num_rows(), batch->columns());
  };
  std::vector<RecordBatchPtr> sent_in = {
      Int64Batch({1}),
      Int64Batch({2, 3}),                               // the same schema, a new object
      renamed(Int64Batch({4}), "other", {}),            // a field renamed
      renamed(Int64Batch({5}), "other", {{"k", "v"}}),  // schema metadata
      Int64Batch({6}),                                  // back to the first
  };
  for (const auto& batch : sent_in) node.PushInput("c/in", batch);
  ASSERT_OK(host.Run(&node));
  EXPECT_THAT(host.errors(), ::testing::IsEmpty());
  ASSERT_EQ(node.sent().size(), sent_in.size());
  for (size_t i = 0; i < sent_in.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(node.sent()[i].batch->schema()->Equals(*sent_in[i]->schema()))
        << node.sent()[i].batch->schema()->ToString();
    EXPECT_EQ(ValuesAddress(*node.sent()[i].batch), ValuesAddress(*sent_in[i]));
  }
}

// Metadata in the compact form is passed on as it is; any other form (here:
// escapes written by the node side, which the C relay extends by hand) is
// parsed and written again, and nothing is lost either way.
TEST(OperatorHost, MetadataSurvivesEveryHopWhateverItsForm) {
  OperatorHost host;
  ASSERT_OK(host.Add(Op("a", FERRY_TEST_C_RELAY, {{"in"}}, {"out"})));
  ASSERT_OK(
      host.Add(Op("x", FERRY_TEST_OPERATOR, {{"in", "a/out"}}, {"out"}, R"({"mode":"relay"})")));
  ASSERT_OK(host.Add(Op("b", FERRY_TEST_C_RELAY, {{"in", "x/out"}}, {"out"})));
  ScriptedNode node(Config({"a/in"}, {"b/out"}));
  node.PushInput("a/in", Int64Batch({1}), {{"plain", "1"}});
  node.PushInput("a/in", Int64Batch({2}), {{"quote\"", "tab\tline\n"}, {"utf8", "\xE2\x82\xAC"}});
  ASSERT_OK(host.Run(&node));
  EXPECT_THAT(host.errors(), ::testing::IsEmpty());
  ASSERT_EQ(node.sent().size(), 2u);
  EXPECT_EQ(Lookup(node.sent()[0].metadata, "plain"), "1");
  EXPECT_EQ(Lookup(node.sent()[1].metadata, "quote\""), "tab\tline\n");
  EXPECT_EQ(Lookup(node.sent()[1].metadata, "utf8"), "\xE2\x82\xAC");
  for (const auto& sent : node.sent()) {
    EXPECT_EQ(Lookup(sent.metadata, "x.values"), Lookup(sent.metadata, "b.values"));
  }
}

// The C++ helper forwards its per-batch counters in batches; the totals are
// exact once the operators have stopped.
TEST(OperatorHost, TelemetryOfManyBatchesIsCompleteAtTheEnd) {
  OperatorHost host;
  ASSERT_OK(host.Add(Op("x", FERRY_TEST_OPERATOR, {{"in"}}, {"out"}, R"({"mode":"relay"})")));
  ASSERT_OK(
      host.Add(Op("y", FERRY_TEST_OPERATOR, {{"in", "x/out"}}, {"out"}, R"({"mode":"sum"})")));
  ScriptedNode node(Config({"x/in"}, {}));
  constexpr int kBatches = 150;  // not a multiple of the forwarding period
  for (int i = 0; i < kBatches; ++i) node.PushInput("x/in", Int64Batch({i}));
  CounterDelta delta;
  ASSERT_OK(host.Run(&node));
  EXPECT_THAT(host.errors(), ::testing::IsEmpty());
  // x imports every input and exports every output, y imports every input.
  EXPECT_EQ(delta(Counter::kZeroCopyImports), 2 * kBatches);
  EXPECT_EQ(BytesCopied(delta), 0);
}

TEST(OperatorHost, AnOutputWithSeveralConsumersIsSharedNotCopied) {
  OperatorHost host;
  ASSERT_OK(host.Add(Op("a", FERRY_TEST_C_RELAY, {{"in"}}, {"out"})));
  ASSERT_OK(host.Add(Op("b", FERRY_TEST_C_RELAY, {{"in", "a/out"}}, {"out"})));
  ASSERT_OK(host.Add(Op("c", FERRY_TEST_C_RELAY, {{"in", "a/out"}}, {"out"})));
  // a/out is consumed in-process by b and c, and published for other nodes.
  ScriptedNode node(Config({"a/in"}, {"a/out", "b/out", "c/out"}));
  RecordBatchPtr batch = Int64Batch({1, 2});
  const void* values = ValuesAddress(*batch);
  node.PushInput("a/in", batch);

  CounterDelta delta;
  ASSERT_OK(host.Run(&node));
  ASSERT_EQ(node.sent().size(), 3u);
  std::vector<std::string> privates;
  for (const auto& sent : node.sent()) {
    EXPECT_EQ(ValuesAddress(*sent.batch), values) << sent.output;
    if (sent.output != "a/out")
      privates.push_back(Lookup(sent.metadata, sent.output.substr(0, 1) + ".private"));
  }
  ASSERT_EQ(privates.size(), 2u);
  EXPECT_NE(privates[0], privates[1]);  // a struct tree each
  EXPECT_EQ(BytesCopied(delta), 0);
  auto stats = host.stats();
  EXPECT_EQ(StatsOf(stats, "b").inputs_shared, 1u);
  EXPECT_EQ(StatsOf(stats, "c").inputs_shared, 1u);
  EXPECT_EQ(StatsOf(stats, "a").outputs_published, 1u);
}

// ---- Devices ------------------------------------------------------------------

bool HasOpenCL() {
  return device::DeviceRegistry::Global().Get(device::DeviceType::kOpenCL, 0).ok();
}

// fill (a kernel writes device memory, the event is recorded) -> sum (its
// queue waits on that event, a kernel reduces on the device), on `device`.
void DeviceChain(const std::string& device) {
  constexpr int64_t kRows = 1 << 16;
  OperatorHost host;
  // The producer delays its fill, so a consumer that did not wait would sum garbage.
  ASSERT_OK(
      host.Add(Op("fill", FERRY_TEST_OPERATOR, {{"tick"}}, {"out"},
                  R"({"mode":"source","device":")" + device + R"(","rows":65536,"delay_ms":30})")));
  ASSERT_OK(host.Add(
      Op("sum", FERRY_TEST_OPERATOR, {{"values", "fill/out"}}, {"out"}, R"({"mode":"sum"})")));
  ScriptedNode node(Config({"fill/tick"}, {"sum/out"}));
  node.PushInput("fill/tick", nullptr);
  node.PushInput("fill/tick", nullptr);

  CounterDelta delta;
  ASSERT_OK(host.Run(&node));
  ASSERT_TRUE(host.errors().empty()) << host.errors()[0].message;
  ASSERT_EQ(node.sent().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& sent = node.sent()[i];
    const int64_t start = 1000 * static_cast<int64_t>(i + 1);
    EXPECT_EQ(sent.batch->column(0)->GetValues<int64_t>(1)[0], testing::SequenceSum(kRows, start));
    EXPECT_EQ(Lookup(sent.metadata, "device"), device);
    EXPECT_EQ(Lookup(sent.metadata, "had_event"), "yes");
  }
  // The consumer's queue waited on the producer's event: no byte moved.
  EXPECT_GE(delta(Counter::kEventWaits), 2);
  EXPECT_EQ(BytesCopied(delta), 0);
  EXPECT_EQ(StatsOf(host.stats(), "sum").inputs_moved, 2u);
}

TEST(OperatorHost, OpenCLOperatorFeedsAnotherByWaitingOnTheEvent) {
  if (!HasOpenCL()) GTEST_SKIP() << device::DeviceRegistry::Global().Describe();
  DeviceChain("opencl");
}

// On a GPU, and in CI against the emulated driver (operators.cuda_emulated).
TEST(OperatorHost, CudaOperatorFeedsAnotherByWaitingOnTheEvent) {
  auto cuda = device::DeviceRegistry::Global().Get(device::DeviceType::kCuda, 0);
  if (!cuda.ok()) GTEST_SKIP() << cuda.status().message();
  DeviceChain("cuda");
}

TEST(OperatorHost, ADeviceBatchLeavingTheProcessIsCopiedOnceAndCounted) {
  if (!HasOpenCL()) GTEST_SKIP() << device::DeviceRegistry::Global().Describe();
  OperatorHost host;
  ASSERT_OK(host.Add(Op("fill", FERRY_TEST_OPERATOR, {{"tick"}}, {"out"},
                        R"({"mode":"source","device":"opencl","rows":1000})")));
  ScriptedNode node(Config({"fill/tick"}, {"fill/out"}));
  node.PushInput("fill/tick", nullptr);

  CounterDelta delta;
  const int64_t crossings = telemetry::GetFallback(telemetry::FallbackReason::kCrossesProcess);
  ASSERT_OK(host.Run(&node));
  ASSERT_EQ(node.sent().size(), 1u);
  // The library's copy of Ferry used this process's OpenCL device (one
  // context for the runtime), not one of its own.
  EXPECT_EQ(Lookup(node.sent()[0].metadata, "device_object"),
            Address(*device::DeviceRegistry::Global().Get(device::DeviceType::kOpenCL, 0)));
  const RecordBatch& sent = *node.sent()[0].batch;
  const int64_t* values = sent.column(0)->GetValues<int64_t>(1);  // host memory now
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(values[i], 1000 + i);
  EXPECT_EQ(delta(Counter::kBytesCopiedD2H), 8000);
  EXPECT_EQ(telemetry::GetFallback(telemetry::FallbackReason::kCrossesProcess) - crossings, 1);
  EXPECT_EQ(StatsOf(host.stats(), "fill").bytes_copied, 8000);
}

// ---- Errors ---------------------------------------------------------------------

TEST(OperatorHost, AFailingOperatorStopsAloneAndItsConsumersSeeTheInputClose) {
  OperatorHost host(Quiet());
  ASSERT_OK(host.Add(
      Op("bad", FERRY_TEST_OPERATOR, {{"in"}}, {"out"}, R"({"mode":"fail","fail_on":"event"})")));
  ASSERT_OK(host.Add(Op("after_bad", FERRY_TEST_C_RELAY, {{"in", "bad/out"}}, {"out"})));
  ASSERT_OK(host.Add(Op("good", FERRY_TEST_C_RELAY, {{"in"}}, {"out"})));
  ScriptedNode node(Config({"bad/in", "good/in"}, {"after_bad/out", "good/out"}));
  node.PushInput("bad/in", Int64Batch({1}));
  node.PushInput("good/in", Int64Batch({2}));
  node.PushInput("bad/in", Int64Batch({3}));  // not delivered: bad has stopped
  node.PushInput("good/in", Int64Batch({4}));

  ASSERT_OK(host.Run(&node));
  auto errors = host.errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].operator_id, "bad");
  EXPECT_THAT(errors[0].message, HasSubstr("configured to fail on input 'in'"));
  auto stats = host.stats();
  EXPECT_EQ(StatsOf(stats, "bad").state, "failed");
  EXPECT_EQ(StatsOf(stats, "bad").events, 1u);
  EXPECT_EQ(StatsOf(stats, "good").outputs_sent, 2u);
  ASSERT_EQ(node.sent().size(), 2u);
  // after_bad lost its only input: it got INPUT_CLOSED, then STOP, and its
  // output closed long before good's.
  EXPECT_EQ(StatsOf(stats, "after_bad").state, "stopped");
  EXPECT_EQ(StatsOf(stats, "after_bad").events, 2u);
  ASSERT_EQ(node.closed_outputs().size(), 2u);
  EXPECT_EQ(node.closed_outputs()[0], "after_bad/out");
}

TEST(OperatorHost, ExceptionsAndBadOutputsBecomeErrorsNamingThem) {
  OperatorHost host(Quiet());
  ASSERT_OK(host.Add(Op("thrower", FERRY_TEST_OPERATOR, {{"in"}}, {"out"},
                        R"({"mode":"fail","fail_on":"throw"})")));
  ASSERT_OK(host.Add(Op("misnamed", FERRY_TEST_OPERATOR, {{"in"}}, {"out"},
                        R"({"mode":"fail","fail_on":"bad_output"})")));
  ScriptedNode node(Config({"thrower/in", "misnamed/in"}, {}));
  node.PushInput("thrower/in", Int64Batch({1}));
  node.PushInput("misnamed/in", Int64Batch({1}));
  ASSERT_OK(host.Run(&node));
  auto errors = host.errors();
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_THAT(errors[0].message, HasSubstr("C++ exception: thrown on purpose"));
  EXPECT_THAT(errors[1].message,
              HasSubstr("operator 'misnamed' has no output 'no_such_output' (outputs: out)"));
}

TEST(OperatorHost, RefusesBrokenLibrariesWithClearErrors) {
  OperatorHost host;
  Status missing = host.Add(Op("m", FERRY_TEST_MISSING_SYMBOL, {}, {}));
  EXPECT_EQ(missing.code(), StatusCode::kInvalid);
  EXPECT_THAT(missing.message(), HasSubstr("operator 'm': operator library"));
  EXPECT_THAT(missing.message(), HasSubstr("does not export ferry_operator_drop"));

  Status wrong = host.Add(Op("w", FERRY_TEST_WRONG_ABI, {}, {}));
  EXPECT_THAT(wrong.message(), HasSubstr("built for operator ABI version 99, this runtime speaks "
                                         "version 1"));

  Status absent = host.Add(Op("n", "/nonexistent/libnothing.so", {}, {}));
  EXPECT_THAT(absent.message(),
              HasSubstr("cannot open operator library '/nonexistent/libnothing.so'"));

  const std::string text_file = ::testing::TempDir() + "/not_a_library.so";
  std::ofstream(text_file) << "this is not an ELF file\n";
  Status garbage = host.Add(Op("t", text_file, {}, {}));
  EXPECT_THAT(garbage.message(), HasSubstr("cannot open operator library"));
  std::remove(text_file.c_str());

  Status init =
      host.Add(Op("i", FERRY_TEST_OPERATOR, {}, {}, R"({"mode":"fail","fail_on":"init"})"));
  EXPECT_THAT(init.message(), HasSubstr("operator 'i': init failed: configured to fail at init"));

  Status python = host.Add([] {
    auto op = Op("p", "op.py", {}, {});
    op.kind = OperatorSpec::Kind::kPython;
    return op;
  }());
  EXPECT_THAT(python.message(), HasSubstr("python -m ferry.runtime"));

  ASSERT_OK(host.Add(Op("ok", FERRY_TEST_C_RELAY, {}, {})));
  EXPECT_THAT(host.Add(Op("ok", FERRY_TEST_C_RELAY, {}, {})).message(), HasSubstr("twice"));
}

TEST(OperatorHost, ChecksTheGraphBeforeRunning) {
  {
    OperatorHost host;
    ASSERT_OK(host.Add(Op("a", FERRY_TEST_C_RELAY, {{"in", "ghost/out"}}, {"out"})));
    ScriptedNode node(Config({}, {}));
    EXPECT_THAT(host.Run(&node).message(),
                HasSubstr("input 'in' refers to 'ghost/out', which no operator of this runtime "
                          "outputs"));
  }
  {
    OperatorHost host;
    ASSERT_OK(host.Add(Op("a", FERRY_TEST_C_RELAY, {{"in", "b/out"}}, {"out"})));
    ASSERT_OK(host.Add(Op("b", FERRY_TEST_C_RELAY, {{"in", "a/out"}}, {"out"})));
    ScriptedNode node(Config({}, {}));
    EXPECT_THAT(host.Run(&node).message(), HasSubstr("'a', 'b' feed each other in a cycle"));
  }
  {
    OperatorHost host;
    ASSERT_OK(host.Add(Op("a", FERRY_TEST_C_RELAY, {{"in"}}, {"out"})));
    ScriptedNode node(Config({}, {}));
    EXPECT_THAT(host.Run(&node).message(), HasSubstr("node 'runtime' has no input 'a/in'"));
  }
}

// ---- Lifecycle ------------------------------------------------------------------

TEST(OperatorHost, StopReachesEveryOperatorInGraphOrder) {
  OperatorHost host;
  ASSERT_OK(host.Add(Op("a", FERRY_TEST_OPERATOR, {{"in"}}, {"out"}, R"({"mode":"relay"})")));
  ASSERT_OK(
      host.Add(Op("b", FERRY_TEST_OPERATOR, {{"in", "a/out"}}, {"out"}, R"({"mode":"relay"})")));
  ScriptedNode node(Config({"a/in"}, {"a/out", "b/out"}));
  node.PushInput("a/in", Int64Batch({1}));
  node.PushStop("ctrl-c");
  node.PushInput("a/in", Int64Batch({2}));  // after the stop: never read
  ASSERT_OK(host.Run(&node));
  EXPECT_EQ(node.sent().size(), 2u);  // a/out and b/out of the first batch
  EXPECT_THAT(node.closed_outputs(), ::testing::ElementsAre("a/out", "b/out"));
  auto stats = host.stats();
  EXPECT_EQ(StatsOf(stats, "a").state, "stopped");
  EXPECT_EQ(StatsOf(stats, "b").state, "stopped");
}

TEST(OperatorHost, AnOperatorThatStopsClosesItsOutputsDownstream) {
  OperatorHost host;
  ASSERT_OK(host.Add(
      Op("a", FERRY_TEST_OPERATOR, {{"in"}}, {"out"}, R"({"mode":"relay","stop_after":2})")));
  ASSERT_OK(host.Add(Op("b", FERRY_TEST_C_RELAY, {{"in", "a/out"}}, {"out"})));
  ScriptedNode node(Config({"a/in"}, {"b/out"}));
  for (int i = 0; i < 5; ++i) node.PushInput("a/in", Int64Batch({i}));
  ASSERT_OK(host.Run(&node));
  EXPECT_EQ(node.sent().size(), 2u);
  auto stats = host.stats();
  EXPECT_EQ(StatsOf(stats, "a").events, 2u);
  // b: two inputs, INPUT_CLOSED, STOP ("all inputs closed").
  EXPECT_EQ(StatsOf(stats, "b").events, 4u);
  EXPECT_THAT(node.closed_outputs(), ::testing::ElementsAre("b/out"));
}

TEST(OperatorHost, ExternalInputClosedPropagatesAndErrorsReachOperators) {
  OperatorHost host;
  ASSERT_OK(host.Add(Op("a", FERRY_TEST_C_RELAY, {{"in"}}, {"out"})));
  ASSERT_OK(host.Add(Op("b", FERRY_TEST_C_RELAY, {{"in"}}, {"out"})));
  ScriptedNode node(Config({"a/in", "b/in"}, {"a/out", "b/out"}));
  node.PushError("a malformed message");
  node.PushInputClosed("a/in");
  node.PushInput("b/in", Int64Batch({1}));
  node.PushStop("ferry stop");
  ASSERT_OK(host.Run(&node));
  auto stats = host.stats();
  // a: ERROR, INPUT_CLOSED, STOP (all inputs closed) before the node stopped.
  EXPECT_EQ(StatsOf(stats, "a").events, 3u);
  // b: ERROR, INPUT, STOP (ferry stop).
  EXPECT_EQ(StatsOf(stats, "b").events, 3u);
  EXPECT_THAT(node.closed_outputs(), ::testing::ElementsAre("a/out", "b/out"));
}

TEST(OperatorHost, DropNewestKeepsAnInputQueueBounded) {
  OperatorHost host;
  ASSERT_OK(host.Add(
      Op("burst", FERRY_TEST_OPERATOR, {{"in"}}, {"out"}, R"({"mode":"relay","repeat":3})")));
  ASSERT_OK(
      host.Add(Op("slow", FERRY_TEST_C_RELAY, {{"in", "burst/out", 1, "drop_newest"}}, {"out"})));
  ScriptedNode node(Config({"burst/in"}, {"slow/out"}));
  node.PushInput("burst/in", Int64Batch({1}));
  ASSERT_OK(host.Run(&node));
  EXPECT_EQ(node.sent().size(), 1u);
  EXPECT_EQ(StatsOf(host.stats(), "slow").inputs_dropped, 2u);
  EXPECT_THAT(host.StatsJson(), HasSubstr("\"inputs_dropped\":2"));
}

}  // namespace
}  // namespace ferry::flow
