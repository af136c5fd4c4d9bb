#include "flow/operator/operator_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/test_util.h"

namespace ferry::flow {
namespace {

using ::testing::HasSubstr;

TEST(OperatorList, ParsesEveryField) {
  ASSERT_OK_AND_ASSIGN(auto operators, ParseOperatorList(R"([
    {"id": "scale", "kind": "shared-library", "path": "/lib/libscale.so",
     "inputs": [{"id": "tick", "source": "external"}], "outputs": ["values"],
     "config": {"device": "opencl", "rows": 8}},
    {"id": "sum", "kind": "python", "path": "/ops/sum.py",
     "inputs": [{"id": "values", "source": "scale/values", "queue_size": 2,
                 "overflow": "drop_oldest", "comment": "unknown keys are ignored"}],
     "outputs": ["total"]}])"));
  ASSERT_EQ(operators.size(), 2u);
  EXPECT_EQ(operators[0].id, "scale");
  EXPECT_EQ(operators[0].kind, OperatorSpec::Kind::kSharedLibrary);
  EXPECT_TRUE(operators[0].external(operators[0].inputs[0]));
  EXPECT_EQ(operators[0].config_json, R"({"device":"opencl","rows":8})");
  EXPECT_EQ(operators[1].kind, OperatorSpec::Kind::kPython);
  EXPECT_EQ(operators[1].inputs[0].source, "scale/values");
  EXPECT_EQ(operators[1].inputs[0].queue_size, 2u);
  EXPECT_EQ(operators[1].inputs[0].overflow, "drop_oldest");
  EXPECT_EQ(operators[1].config_json, "{}");

  // What ToJson writes parses back to the same list.
  ASSERT_OK_AND_ASSIGN(auto again, ParseOperatorList(OperatorListToJson(operators)));
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[1].inputs[0].source, "scale/values");
  EXPECT_EQ(again[0].config_json, operators[0].config_json);
}

TEST(OperatorList, RejectsBadInputNamingTheOperatorAndField) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {"{", "not valid JSON"},
      {"{}", "must be a JSON list"},
      {"[3]", "operator 1: must be an object"},
      {R"([{"kind": "python", "path": "x"}])", "operator 1: 'id' is missing"},
      {R"([{"id": "a b", "kind": "python", "path": "x"}])", "letters, digits"},
      {R"([{"id": "a", "kind": "wasm", "path": "x"}])", "not 'wasm'"},
      {R"([{"id": "a", "kind": "python", "path": ""}])", "'path' is empty"},
      {R"([{"id": "a", "kind": "python", "path": "x", "inputs": {}}])", "'inputs' must be a list"},
      {R"([{"id": "a", "kind": "python", "path": "x", "inputs": [{"id": "i", "source": "b"}]}])",
       "operator 1 ('a'): input 'i': source must be"},
      {R"([{"id": "a", "kind": "python", "path": "x", "inputs": [{"id": "i", "source": "b/c/d"}]}])",
       "source must be"},
      {R"([{"id": "a", "kind": "python", "path": "x",
            "inputs": [{"id": "i", "source": "external", "queue_size": 0}]}])",
       "queue_size must be"},
      {R"([{"id": "a", "kind": "python", "path": "x",
            "inputs": [{"id": "i", "source": "external", "overflow": "spill"}]}])",
       "not 'spill'"},
      {R"([{"id": "a", "kind": "python", "path": "x",
            "inputs": [{"id": "i", "source": "external"}, {"id": "i", "source": "external"}]}])",
       "input 'i' appears twice"},
      {R"([{"id": "a", "kind": "python", "path": "x", "outputs": ["o", "o"]}])",
       "output 'o' appears twice"},
      {R"([{"id": "a", "kind": "python", "path": "x", "config": [1]}])",
       "'config' must be an object"},
      {R"([{"id": "a", "kind": "python", "path": "x"}, {"id": "a", "kind": "python", "path": "y"}])",
       "operator id 'a' appears twice"},
  };
  for (const Case& test : cases) {
    auto parsed = ParseOperatorList(test.json);
    ASSERT_FALSE(parsed.ok()) << test.json;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalid);
    EXPECT_THAT(parsed.status().message(), HasSubstr(test.message)) << test.json;
  }
}

TEST(OperatorList, DefinitionsOfARuntimeNodeMarkWhichInputsAreInProcess) {
  NodeSpec node;
  node.id = "runtime";
  OperatorSpec scale;
  scale.id = "scale";
  scale.path = "/lib/libscale.so";
  scale.outputs = {"values"};
  InputSpec tick;
  tick.id = "tick";
  tick.source.kind = InputSource::Kind::kTimer;
  scale.inputs.push_back(tick);
  InputSpec camera;
  camera.id = "image";
  camera.source.node = "camera";
  camera.source.output = "image";
  scale.inputs.push_back(camera);
  OperatorSpec sum;
  sum.id = "sum";
  sum.kind = OperatorSpec::Kind::kPython;
  sum.path = "/ops/sum.py";
  sum.config_json = R"({"k":1})";
  InputSpec values;
  values.id = "values";
  values.source.node = "runtime";
  values.source.operator_id = "scale";
  values.source.output = "values";
  values.queue_size = 3;
  sum.inputs.push_back(values);
  node.operators = {scale, sum};

  auto definitions = OperatorDefinitionsOf(node);
  ASSERT_EQ(definitions.size(), 2u);
  EXPECT_EQ(definitions[0].inputs[0].source, "external");
  EXPECT_EQ(definitions[0].inputs[1].source, "external");
  EXPECT_EQ(definitions[1].inputs[0].source, "scale/values");
  EXPECT_EQ(definitions[1].inputs[0].queue_size, 3u);
  ASSERT_OK_AND_ASSIGN(auto parsed, ParseOperatorList(OperatorListToJson(definitions)));
  EXPECT_EQ(parsed[1].kind, OperatorSpec::Kind::kPython);
  EXPECT_EQ(parsed[1].config_json, R"({"k":1})");
}

}  // namespace
}  // namespace ferry::flow
