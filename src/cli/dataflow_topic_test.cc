// `ferry topic`: topic names, message text, bytes, and errors before any
// subscription.
#include "cli/dataflow_topic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>

#include "ferry/flow/node.h"
#include "testing/sample_arrays.h"
#include "testing/test_util.h"

namespace ferry::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(DataflowTopic, Names) {
  ASSERT_OK_AND_ASSIGN(TopicName plain, ParseTopicName("df-1-abcd/camera/image"));
  EXPECT_EQ(plain.run_id, "df-1-abcd");
  EXPECT_EQ(plain.node, "camera");
  EXPECT_EQ(plain.output, "image");
  ASSERT_OK_AND_ASSIGN(TopicName op, ParseTopicName("run/runtime/detect/boxes"));
  EXPECT_EQ(op.node, "runtime");
  EXPECT_EQ(op.output, "detect/boxes");
  for (const char* bad : {"", "run", "run/node", "run//out", "a/b/c/d/e", "/node/out"}) {
    auto parsed = ParseTopicName(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("RUN/NODE/OUTPUT")) << bad;
  }
  EXPECT_FALSE(ParseTopicName(".hidden/node/out").ok());  // not a run name
}

TEST(DataflowTopic, MessagesAsText) {
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, testing::BuildSamples(int64(), 3));
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, flow::ArrayAsBatch(values));
  const Metadata array_metadata = {{"ferry.array", "1"}, {"frame", "7"}};
  const std::string text = FormatMessage(*batch, array_metadata, 12, 20);
  EXPECT_EQ(text.rfind("--- seq 12, 3 rows, ", 0), 0u) << text;
  EXPECT_THAT(text, HasSubstr(", frame=7\n"));
  EXPECT_THAT(text, Not(HasSubstr("ferry.array")));
  EXPECT_THAT(text, HasSubstr(ArrayToString(*values, 20)));
  EXPECT_THAT(text, Not(HasSubstr("value: ")));
  // The same batch without the array mark is a record batch: by column.
  EXPECT_THAT(FormatMessage(*batch, {}, 1, 20), HasSubstr("value: "));
  EXPECT_GE(BatchBytes(*batch), 3 * 8);
}

TEST(DataflowTopic, ErrorsBeforeSubscribing) {
  std::ostringstream out, err;
  TopicOptions options;
  options.topic = "not-a-topic";
  EXPECT_EQ(RunTopic(options, out, err), 1);
  EXPECT_THAT(err.str(), HasSubstr("is not RUN/NODE/OUTPUT"));
  err.str("");
  options.topic = "no-such-run-here/node/out";
  EXPECT_EQ(RunTopic(options, out, err), 1);
  EXPECT_THAT(err.str(), HasSubstr("no dataflow 'no-such-run-here' is running here"));
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace ferry::cli
