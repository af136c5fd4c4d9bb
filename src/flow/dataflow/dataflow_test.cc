#include "ferry/flow/dataflow.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "testing/test_util.h"

namespace ferry::flow {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

ParseOptions NoPathChecks() {
  ParseOptions options;
  options.check_paths = false;
  return options;
}

Result<Dataflow> ParseText(const std::string& text, ParseOptions options = NoPathChecks()) {
  return ParseDataflowString(text, "df.yml", "/flows", options);
}

// The error message of parsing `text`, or "<parsed>".
std::string ErrorOf(const std::string& text, ParseOptions options = NoPathChecks()) {
  auto result = ParseText(text, options);
  if (result.ok()) return "<parsed>";
  EXPECT_EQ(result.status().code(), StatusCode::kInvalid) << result.status().ToString();
  return result.status().message();
}

// The header's example, with every form it shows.
constexpr const char* kExample = R"(nodes:
  - id: camera
    path: camera.py            # an executable or a Python script (.py)
    args: [--fps, "30"]
    env: {MODE: fast}
    inputs:
      tick: ferry/timer/millis/33
    outputs: [image]
    restart: on-failure
    max_restarts: 5
    stop_grace_ms: 2000
    resources: {gpus: 1, device: cuda}
  - id: runtime
    operators:
      - id: detect
        shared-library: build/libdetect.so
        inputs:
          image: {source: camera/image, queue_size: 4, overflow: drop_oldest}
        outputs: [boxes]
  - id: sink
    path: sink
    inputs: {boxes: runtime/detect/boxes}
)";

TEST(DataflowParse, HeaderExample) {
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(kExample));
  EXPECT_EQ(dataflow.path, "/flows/df.yml");
  EXPECT_EQ(dataflow.directory, "/flows");
  ASSERT_EQ(dataflow.nodes.size(), 3u);

  const NodeSpec& camera = dataflow.nodes[0];
  EXPECT_EQ(camera.id, "camera");
  EXPECT_EQ(camera.path, "/flows/camera.py");
  EXPECT_TRUE(camera.python);
  EXPECT_FALSE(camera.is_runtime());
  EXPECT_EQ(camera.args, (std::vector<std::string>{"--fps", "30"}));
  EXPECT_EQ(camera.env, (std::map<std::string, std::string>{{"MODE", "fast"}}));
  ASSERT_EQ(camera.inputs.size(), 1u);
  EXPECT_EQ(camera.inputs[0].id, "tick");
  EXPECT_EQ(camera.inputs[0].source.kind, InputSource::Kind::kTimer);
  EXPECT_EQ(camera.inputs[0].source.interval, std::chrono::milliseconds(33));
  EXPECT_EQ(camera.inputs[0].source.text, "ferry/timer/millis/33");
  EXPECT_EQ(camera.inputs[0].location.line, 7);
  EXPECT_EQ(camera.inputs[0].location.column, 7);
  EXPECT_EQ(camera.outputs, (std::vector<std::string>{"image"}));
  EXPECT_EQ(camera.restart, RestartPolicy::kOnFailure);
  EXPECT_EQ(camera.max_restarts, 5);
  EXPECT_EQ(camera.stop_grace, std::chrono::milliseconds(2000));
  EXPECT_EQ(camera.resources.gpus, 1);
  EXPECT_EQ(camera.resources.device, "cuda");
  EXPECT_EQ(camera.location.line, 2);
  EXPECT_EQ(camera.location.column, 5);

  const NodeSpec& runtime = dataflow.nodes[1];
  EXPECT_TRUE(runtime.is_runtime());
  EXPECT_TRUE(runtime.path.empty());
  ASSERT_EQ(runtime.operators.size(), 1u);
  const OperatorSpec& detect = runtime.operators[0];
  EXPECT_EQ(detect.id, "detect");
  EXPECT_EQ(detect.kind, OperatorSpec::Kind::kSharedLibrary);
  EXPECT_EQ(detect.path, "/flows/build/libdetect.so");
  EXPECT_EQ(detect.config_json, "{}");
  EXPECT_EQ(detect.location.line, 15);
  ASSERT_EQ(detect.inputs.size(), 1u);
  const InputSpec& image = detect.inputs[0];
  EXPECT_EQ(image.id, "image");
  EXPECT_EQ(image.source.kind, InputSource::Kind::kOutput);
  EXPECT_EQ(image.source.node, "camera");
  EXPECT_EQ(image.source.operator_id, "");
  EXPECT_EQ(image.source.output, "image");
  EXPECT_EQ(image.queue_size, 4u);
  EXPECT_EQ(image.overflow, "drop_oldest");
  EXPECT_EQ(detect.outputs, (std::vector<std::string>{"boxes"}));

  const NodeSpec& sink = dataflow.nodes[2];
  EXPECT_FALSE(sink.python);
  EXPECT_EQ(sink.restart, RestartPolicy::kNever);
  EXPECT_EQ(sink.max_restarts, 5);
  EXPECT_EQ(sink.stop_grace, std::chrono::milliseconds(2000));
  EXPECT_EQ(sink.resources.gpus, 0);
  EXPECT_EQ(sink.resources.device, "");
  ASSERT_EQ(sink.inputs.size(), 1u);
  EXPECT_EQ(sink.inputs[0].source.node, "runtime");
  EXPECT_EQ(sink.inputs[0].source.operator_id, "detect");
  EXPECT_EQ(sink.inputs[0].source.output, "boxes");
  EXPECT_EQ(sink.inputs[0].source.text, "runtime/detect/boxes");
  EXPECT_EQ(sink.inputs[0].queue_size, 64u);
  EXPECT_EQ(sink.inputs[0].overflow, "block");

  EXPECT_EQ(dataflow.FindNode("sink"), &dataflow.nodes[2]);
  EXPECT_EQ(dataflow.FindNode("nope"), nullptr);
}

TEST(DataflowParse, RestartPolicyNames) {
  EXPECT_STREQ(RestartPolicyName(RestartPolicy::kNever), "never");
  EXPECT_STREQ(RestartPolicyName(RestartPolicy::kOnFailure), "on-failure");
  EXPECT_STREQ(RestartPolicyName(RestartPolicy::kAlways), "always");
  for (const char* name : {"never", "on-failure", "always"}) {
    ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(std::string("nodes:\n  - id: a\n    path: a\n"
                                                                  "    restart: ") +
                                                      name + "\n    max_restarts: 0\n"));
    EXPECT_STREQ(RestartPolicyName(dataflow.nodes[0].restart), name);
    EXPECT_EQ(dataflow.nodes[0].max_restarts, 0);
  }
}

TEST(DataflowParse, TimersInMillisAndHertz) {
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(R"(nodes:
  - id: a
    path: a
    inputs:
      fast: ferry/timer/millis/1
      slow: ferry/timer/millis/86400000
      third: ferry/timer/hz/3
      half: {source: ferry/timer/hz/2.5}
      top: ferry/timer/hz/1000000
      one: ferry/timer/hz/1
)"));
  const std::vector<InputSpec>& inputs = dataflow.nodes[0].inputs;
  ASSERT_EQ(inputs.size(), 6u);
  EXPECT_EQ(inputs[0].source.interval, std::chrono::milliseconds(1));
  EXPECT_EQ(inputs[1].source.interval, std::chrono::hours(24));
  EXPECT_EQ(inputs[2].source.interval, std::chrono::nanoseconds(333333333));
  EXPECT_EQ(inputs[3].source.interval, std::chrono::milliseconds(400));
  EXPECT_EQ(inputs[4].source.interval, std::chrono::microseconds(1));
  EXPECT_EQ(inputs[5].source.interval, std::chrono::seconds(1));
  for (const InputSpec& input : inputs) {
    EXPECT_EQ(input.source.kind, InputSource::Kind::kTimer);
    EXPECT_TRUE(input.source.node.empty());
  }
  EXPECT_EQ(inputs[3].source.text, "ferry/timer/hz/2.5");
}

TEST(DataflowParse, ShortAndLongInputForms) {
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(R"(nodes:
  - id: src
    path: src
    outputs: [a, b, c]
  - id: dst
    path: dst
    inputs:
      a: src/a
      b: {source: src/b}
      c:
        source: src/c
        queue_size: 1048576
        overflow: drop_newest
      d: {source: src/a, overflow: block, queue_size: 1}
)"));
  const std::vector<InputSpec>& inputs = dataflow.nodes[1].inputs;
  ASSERT_EQ(inputs.size(), 4u);
  EXPECT_EQ(inputs[0].id, "a");
  EXPECT_EQ(inputs[0].queue_size, 64u);
  EXPECT_EQ(inputs[0].overflow, "block");
  EXPECT_EQ(inputs[1].source.output, "b");
  EXPECT_EQ(inputs[1].queue_size, 64u);
  EXPECT_EQ(inputs[2].queue_size, 1048576u);
  EXPECT_EQ(inputs[2].overflow, "drop_newest");
  EXPECT_EQ(inputs[2].location.line, 10);
  EXPECT_EQ(inputs[3].queue_size, 1u);
  EXPECT_EQ(inputs[3].source.output, "a");
}

TEST(DataflowParse, OperatorsWithLibrariesScriptsAndConfig) {
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(R"(nodes:
  - id: rt
    env: {RUST_LOG: info}
    restart: always
    operators:
      - id: first
        python: ops/first.py
        outputs: [out]
        config:
          threshold: 0.5
          count: 3
          big: 18446744073709551615
          name: detector
          quoted: "42"
          flags: [true, false, null, ~, 0x1F, 0o17, 1e3, -2.5, "yes", yes]
          nested: {deep: {list: [1, {k: v}]}}
          tagged: !!str 12
          typed: !!float 3
          empty:
          unicode: "\u00e9"
      - id: second
        shared-library: /opt/lib/libsecond.so
        inputs: {in: rt/first/out}
        outputs: [out]
  - id: sink
    path: sink
    inputs: {x: rt/second/out}
)"));
  const NodeSpec& runtime = dataflow.nodes[0];
  ASSERT_EQ(runtime.operators.size(), 2u);
  EXPECT_EQ(runtime.env.at("RUST_LOG"), "info");
  EXPECT_EQ(runtime.restart, RestartPolicy::kAlways);
  const OperatorSpec& first = runtime.operators[0];
  EXPECT_EQ(first.kind, OperatorSpec::Kind::kPython);
  EXPECT_EQ(first.path, "/flows/ops/first.py");
  // Keys keep the order they were written in.
  EXPECT_EQ(first.config_json,
            R"({"threshold":0.5,"count":3,"big":18446744073709551615,"name":"detector",)"
            R"("quoted":"42","flags":[true,false,null,null,31,15,1000.0,-2.5,"yes","yes"],)"
            R"("nested":{"deep":{"list":[1,{"k":"v"}]}},"tagged":"12","typed":3.0,"empty":null,)"
            "\"unicode\":\"\xC3\xA9\"}");
  const OperatorSpec& second = runtime.operators[1];
  EXPECT_EQ(second.kind, OperatorSpec::Kind::kSharedLibrary);
  EXPECT_EQ(second.path, "/opt/lib/libsecond.so");
  EXPECT_EQ(second.config_json, "{}");
  EXPECT_EQ(second.inputs[0].source.node, "rt");
  EXPECT_EQ(second.inputs[0].source.operator_id, "first");
}

TEST(DataflowParse, ArgsAndEnvForms) {
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(R"(nodes:
  - id: listed
    path: a
    args: [--rate, 30, 1.5, true, "two words", '']
    env: {A: 1, B: "x y", C: '', D: true}
  - id: string
    path: b
    args: "  --rate   30
      --name  x "
    env: [A=1, B=x=y, C=]
  - id: empty
    path: c
    args: ""
    env: {}
    inputs:
    outputs:
)"));
  EXPECT_EQ(dataflow.nodes[0].args,
            (std::vector<std::string>{"--rate", "30", "1.5", "true", "two words", ""}));
  EXPECT_EQ(dataflow.nodes[0].env, (std::map<std::string, std::string>{
                                       {"A", "1"}, {"B", "x y"}, {"C", ""}, {"D", "true"}}));
  EXPECT_EQ(dataflow.nodes[1].args, (std::vector<std::string>{"--rate", "30", "--name", "x"}));
  EXPECT_EQ(dataflow.nodes[1].env,
            (std::map<std::string, std::string>{{"A", "1"}, {"B", "x=y"}, {"C", ""}}));
  EXPECT_TRUE(dataflow.nodes[2].args.empty());
  EXPECT_TRUE(dataflow.nodes[2].env.empty());
  EXPECT_TRUE(dataflow.nodes[2].inputs.empty());
  EXPECT_TRUE(dataflow.nodes[2].outputs.empty());
}

TEST(DataflowParse, ResourcesAndLimits) {
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(R"(nodes:
  - id: a
    path: a
    resources: {gpus: 8, device: opencl}
    stop_grace_ms: 0
    max_restarts: 10000
  - id: b
    path: b
    resources: {device: any}
    stop_grace_ms: 3600000
  - id: c
    path: c
    resources: {gpus: 0, device: cpu}
)"));
  EXPECT_EQ(dataflow.nodes[0].resources.gpus, 8);
  EXPECT_EQ(dataflow.nodes[0].resources.device, "opencl");
  EXPECT_EQ(dataflow.nodes[0].stop_grace, std::chrono::milliseconds(0));
  EXPECT_EQ(dataflow.nodes[0].max_restarts, 10000);
  EXPECT_EQ(dataflow.nodes[1].resources.device, "");
  EXPECT_EQ(dataflow.nodes[1].stop_grace, std::chrono::hours(1));
  EXPECT_EQ(dataflow.nodes[2].resources.device, "cpu");
}

TEST(DataflowParse, AnchorsAndAliasesAreShared) {
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(R"(nodes:
  - id: a
    path: a
    env: &common {LOG: debug, MODE: fast}
    args: &args [--x, "1"]
  - id: b
    path: b
    env: *common
    args: *args
)"));
  EXPECT_EQ(dataflow.nodes[1].env, dataflow.nodes[0].env);
  EXPECT_EQ(dataflow.nodes[1].args, (std::vector<std::string>{"--x", "1"}));
}

TEST(DataflowParse, StringWithoutNameOrDirectory) {
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseDataflowString("nodes: [{id: a, path: /bin/true}]",
                                                              "", "", NoPathChecks()));
  EXPECT_EQ(dataflow.path, "");
  EXPECT_EQ(dataflow.directory, "");
  EXPECT_EQ(dataflow.nodes[0].path, "/bin/true");
  auto bad = ParseDataflowString("nodes: 1", "", "", NoPathChecks());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "<dataflow>:1:8: 'nodes' must be a list of nodes, got '1'");
}

// ---- Errors: each one names the file, line and column.

TEST(DataflowErrors, YamlSyntax) {
  EXPECT_EQ(ErrorOf("nodes: [\n"), "df.yml:2:1: invalid YAML: end of sequence flow not found");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n   path: x\n"),
            "df.yml:3:4: invalid YAML: end of sequence not found");
  EXPECT_EQ(ErrorOf("nodes: *missing\n"),
            "df.yml:1:8: invalid YAML: the referenced anchor is not defined");
  EXPECT_EQ(ErrorOf("nodes:\n\t- id: a\n"), "df.yml:2:2: invalid YAML: illegal block entry");
}

TEST(DataflowErrors, TopLevel) {
  EXPECT_EQ(ErrorOf(""), "df.yml:1:1: the descriptor is empty (expected a mapping with 'nodes')");
  EXPECT_EQ(ErrorOf("# nothing\n"),
            "df.yml:1:1: the descriptor is empty (expected a mapping with 'nodes')");
  EXPECT_EQ(ErrorOf("- a\n"), "df.yml:1:1: the descriptor must be a mapping, got a list");
  EXPECT_EQ(ErrorOf("nodes:\n"), "df.yml:1:1: the descriptor has no 'nodes' (a list of nodes)");
  EXPECT_EQ(ErrorOf("nodes: []\n"), "df.yml:1:8: 'nodes' must list at least one node");
  EXPECT_EQ(ErrorOf("nodes: {a: 1}\n"),
            "df.yml:1:8: 'nodes' must be a list of nodes, got a mapping");
  EXPECT_EQ(ErrorOf("nodes: [1]\n"), "df.yml:1:9: node #1 must be a mapping, got '1'");
  EXPECT_EQ(ErrorOf("nodes: [{id: a, path: a}]\nname: x\n"),
            "df.yml:2:1: unknown key 'name' in the descriptor (allowed: nodes, communication, "
            "_unstable_deploy)");
  EXPECT_EQ(ErrorOf("nodes: [{id: a, path: a}]\n---\nnodes: []\n"),
            "df.yml:2:1: a descriptor holds one YAML document; found a second one here");
}

TEST(DataflowErrors, UnknownKeysListTheAllowedOnes) {
  EXPECT_EQ(ErrorOf("nodes:\n  - id: cam\n    pth: x\n"),
            "df.yml:3:5: unknown key 'pth' in node 'cam' (did you mean 'path'? allowed: id, path, "
            "args, env, inputs, outputs, operators, operator, restart, build, send_stdout_as, "
            "_unstable_deploy, max_restarts, stop_grace_ms, resources, name, description)");
  EXPECT_EQ(ErrorOf("nodes:\n  - path: x\n    colour: red\n"),
            "df.yml:3:5: unknown key 'colour' in node #1 (allowed: id, path, args, env, inputs, "
            "outputs, operators, operator, restart, build, send_stdout_as, _unstable_deploy, "
            "max_restarts, stop_grace_ms, resources, name, description)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators:\n      - id: op\n        library: x\n"),
            "df.yml:5:9: unknown key 'library' in operator 'r/op' (allowed: id, shared-library, "
            "python, inputs, outputs, config, name, description)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators:\n      - id: op\n"
                    "        shared_library: x\n"),
            "df.yml:5:9: unknown key 'shared_library' in operator 'r/op' (did you mean "
            "'shared-library'? allowed: id, shared-library, python, inputs, outputs, config, name, "
            "description)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    inputs: {i: {source: ferry/timer/hz/1, "
                    "queue: 3}}\n"),
            "df.yml:4:44: unknown key 'queue' in input 'i' of node 'a' (allowed: source, "
            "queue_size, overflow)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    resources: {gpu: 1}\n"),
            "df.yml:4:17: unknown key 'gpu' in 'resources' of node 'a' (did you mean 'gpus'? "
            "allowed: gpus, device)");
}

TEST(DataflowErrors, WrongValueTypes) {
  const std::string node = "nodes:\n  - id: a\n    path: a\n";
  EXPECT_EQ(ErrorOf(node + "    outputs: out\n"),
            "df.yml:4:14: 'outputs' of node 'a' must be a list of output ids, got 'out'");
  EXPECT_EQ(ErrorOf(node + "    outputs: [[x]]\n"),
            "df.yml:4:15: each of 'outputs' of node 'a' must be an output id, got a list");
  EXPECT_EQ(
      ErrorOf(node + "    inputs: [a/b]\n"),
      "df.yml:4:13: 'inputs' of node 'a' must be a mapping of input id to source, got a list");
  EXPECT_EQ(ErrorOf(node + "    inputs: {i: [a/b]}\n"),
            "df.yml:4:17: input 'i' of node 'a' must be a source ('node/output') or a mapping "
            "with 'source', got a list");
  EXPECT_EQ(ErrorOf(node + "    inputs: {i: {queue_size: 3}}\n"),
            "df.yml:4:17: input 'i' of node 'a' has no 'source'");
  EXPECT_EQ(ErrorOf(node + "    inputs: {i: {source: {x: 1}}}\n"),
            "df.yml:4:26: the source of input 'i' of node 'a' must be a string, got a mapping");
  EXPECT_EQ(ErrorOf(node + "    args: {a: 1}\n"),
            "df.yml:4:11: 'args' of node 'a' must be a list of strings or one string, got a "
            "mapping");
  EXPECT_EQ(ErrorOf(node + "    args: [a, [b]]\n"),
            "df.yml:4:15: each of 'args' of node 'a' must be a string, got a list");
  EXPECT_EQ(ErrorOf(node + "    args: [a, ~]\n"),
            "df.yml:4:15: each of 'args' of node 'a' must be a string, got an empty value");
  EXPECT_EQ(ErrorOf(node + "    env: A=1\n"),
            "df.yml:4:10: 'env' of node 'a' must be a mapping of NAME: value or a list of "
            "'NAME=value', got 'A=1'");
  EXPECT_EQ(ErrorOf(node + "    env: [A]\n"),
            "df.yml:4:11: each of 'env' of node 'a' must be 'NAME=value', got 'A'");
  EXPECT_EQ(ErrorOf(node + "    env: {A: [1]}\n"),
            "df.yml:4:14: environment variable A of node 'a' must be a string (write '' for an "
            "empty one), got a list");
  EXPECT_EQ(ErrorOf(node + "    env: {A: }\n"),
            "df.yml:4:14: environment variable A of node 'a' must be a string (write '' for an "
            "empty one), got an empty value");
  EXPECT_EQ(ErrorOf(node + "    env: [=x]\n"),
            "df.yml:4:11: environment variable name '' of node 'a' must be non-empty and may not "
            "contain '='");
  EXPECT_EQ(ErrorOf(node + "    env: {FERRY_NODE_CONFIG: x}\n"),
            "df.yml:4:11: environment variable FERRY_NODE_CONFIG of node 'a' is set by Ferry and "
            "may not be overridden");
  EXPECT_EQ(ErrorOf(node + "    max_restarts: -1\n"),
            "df.yml:4:19: 'max_restarts' of node 'a' must be an integer from 0 to 10000, got '-1'");
  EXPECT_EQ(
      ErrorOf(node + "    max_restarts: 2.5\n"),
      "df.yml:4:19: 'max_restarts' of node 'a' must be an integer from 0 to 10000, got '2.5'");
  EXPECT_EQ(ErrorOf(node + "    stop_grace_ms: \"100\"\n"),
            "df.yml:4:20: 'stop_grace_ms' of node 'a' must be an integer from 0 to 3600000, got "
            "the quoted string '100'");
  EXPECT_EQ(ErrorOf(node + "    stop_grace_ms: 99999999999999999999999\n"),
            "df.yml:4:20: 'stop_grace_ms' of node 'a' must be an integer from 0 to 3600000, got "
            "'99999999999999999999999'");
  EXPECT_EQ(ErrorOf(node + "    resources: {gpus: 1025}\n"),
            "df.yml:4:23: 'gpus' of 'resources' of node 'a' must be an integer from 0 to 1024, "
            "got '1025'");
  EXPECT_EQ(ErrorOf(node + "    resources: {device: tpu}\n"),
            "df.yml:4:25: 'device' of 'resources' of node 'a' is 'tpu' (did you mean 'cpu'? "
            "expected one of: any, cpu, cuda, opencl)");
  EXPECT_EQ(ErrorOf(node + "    resources: 2\n"),
            "df.yml:4:16: 'resources' of node 'a' must be a mapping, got '2'");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: [a]\n"),
            "df.yml:3:11: 'path' of node 'a' must be a string, got a list");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: ''\n"),
            "df.yml:3:11: 'path' of node 'a' is empty");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: [a]\n    path: a\n"),
            "df.yml:2:9: 'id' of node #1 must be a string, got a list");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators: {id: x}\n"),
            "df.yml:3:16: 'operators' of node 'r' must be a list of operators, got a mapping");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators: []\n"),
            "df.yml:3:16: 'operators' of node 'r' must list at least one operator");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators: [{id: o, python: o.py, config: [1]}]\n"),
            "df.yml:3:47: 'config' of operator 'r/o' must be a mapping, got a list");
}

TEST(DataflowErrors, QueueSizeAndOverflow) {
  const std::string node = "nodes:\n  - id: a\n    path: a\n    inputs:\n      i: ";
  EXPECT_EQ(ErrorOf(node + "{source: ferry/timer/hz/1, queue_size: 0}\n"),
            "df.yml:5:49: 'queue_size' of input 'i' of node 'a' must be an integer from 1 to "
            "1048576, got '0'");
  EXPECT_EQ(ErrorOf(node + "{source: ferry/timer/hz/1, queue_size: -4}\n"),
            "df.yml:5:49: 'queue_size' of input 'i' of node 'a' must be an integer from 1 to "
            "1048576, got '-4'");
  EXPECT_EQ(ErrorOf(node + "{source: ferry/timer/hz/1, queue_size: 1048577}\n"),
            "df.yml:5:49: 'queue_size' of input 'i' of node 'a' must be an integer from 1 to "
            "1048576, got '1048577'");
  EXPECT_EQ(ErrorOf(node + "{source: ferry/timer/hz/1, overflow: drop-oldest}\n"),
            "df.yml:5:47: 'overflow' of input 'i' of node 'a' is 'drop-oldest' (did you mean "
            "'drop_oldest'? expected one of: block, drop_oldest, drop_newest)");
  EXPECT_EQ(ErrorOf(node + "{source: ferry/timer/hz/1, overflow: [block]}\n"),
            "df.yml:5:47: 'overflow' of input 'i' of node 'a' must be a string, got a list");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    restart: on_failure\n"),
            "df.yml:4:14: 'restart' of node 'a' is 'on_failure' (did you mean 'on-failure'? "
            "expected one of: never, on-failure, always)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    restart: sometimes\n"),
            "df.yml:4:14: 'restart' of node 'a' is 'sometimes' (expected one of: never, "
            "on-failure, always)");
}

TEST(DataflowErrors, DuplicateIds) {
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: a}\n  - {id: b, path: b}\n  - {id: a, path: c}\n"),
            "df.yml:4:10: duplicate node id 'a' (first at 2:10)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators:\n      - {id: o, python: o.py}\n"
                    "      - {id: o, python: p.py}\n"),
            "df.yml:5:14: duplicate operator id 'o' in node 'r' (first at 4:14)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    inputs:\n      t: ferry/timer/hz/1\n"
                    "      t: ferry/timer/hz/2\n"),
            "df.yml:6:7: duplicate input 't' in 'inputs' of node 'a' (first at 5:7)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    outputs: [x, y, x]\n"),
            "df.yml:4:21: duplicate output 'x' in node 'a' (first at 4:15)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators:\n      - {id: o, python: o.py, outputs: "
                    "[x, x]}\n"),
            "df.yml:4:44: duplicate output 'x' in operator 'r/o' (first at 4:41)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    path: b\n"),
            "df.yml:4:5: duplicate key 'path' in node 'a' (first at 3:5)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    env: {A: 1, A: 2}\n"),
            "df.yml:4:17: duplicate variable 'A' in 'env' of node 'a' (first at 4:11)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    env: [A=1, A=2]\n"),
            "df.yml:4:16: duplicate environment variable 'A' in node 'a' (first at 4:11)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators:\n      - id: o\n        python: o.py\n"
                    "        config: {a: {b: 1, b: 2}}\n"),
            "df.yml:6:28: duplicate key 'b' in 'config' of operator 'r/o' (first at 6:22)");
}

TEST(DataflowErrors, IdCharacters) {
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: 'a b', path: a}\n"),
            "df.yml:2:10: node id 'a b' may only use letters, digits, '_' and '-'");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: 'a/b', path: a}\n"),
            "df.yml:2:10: node id 'a/b' may only use letters, digits, '_' and '-'");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: '', path: a}\n"), "df.yml:2:10: node id must not be empty");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: " + std::string(65, 'n') + ", path: a}\n"),
            "df.yml:2:10: node id '" + std::string(60, 'n') + "...' is longer than 64 characters");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: \"caf\xC3\xA9\", path: a}\n"),
            "df.yml:2:10: node id 'caf\xC3\xA9' may only use letters, digits, '_' and '-'");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: ferry, path: a}\n"),
            "df.yml:2:10: node id 'ferry' is reserved for built-in sources (ferry/timer/millis/N, "
            "ferry/timer/secs/N or ferry/timer/hz/N, or dora/timer/... alike)");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: r, operators: [{id: o.p, python: o.py}]}\n"),
            "df.yml:2:30: operator id 'o.p' may only use letters, digits, '_' and '-'");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: a, outputs: [ok, not ok]}\n"),
            "df.yml:2:36: output id 'not ok' may only use letters, digits, '_' and '-'");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: a, inputs: {in.put: ferry/timer/hz/1}}\n"),
            "df.yml:2:31: input id 'in.put' may only use letters, digits, '_' and '-'");
  // The qualified output names a shared-memory channel.
  const std::string long_id(40, 'x');
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: " + long_id + ", path: a, outputs: [" + long_id + "]}\n"),
            "df.yml:2:71: output '" + long_id + "/" + long_id +
                "' is longer than 64 characters (it names a shared-memory channel)");
}

TEST(DataflowErrors, PathOrOperators) {
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    operators: [{id: o, python: o.py}]\n"),
            "df.yml:4:5: node 'a' has both 'path' and 'operators': a node runs either a program "
            "(path) or operators in a runtime (operators, or one operator)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    outputs: [x]\n"),
            "df.yml:2:5: node 'a' needs 'path' (a program or a .py script), 'operators' "
            "(operators in a runtime) or 'operator' (one operator)");
  EXPECT_EQ(ErrorOf("nodes:\n  - path: a\n"), "df.yml:2:5: node #1 has no 'id'");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators: [{id: o, python: o.py}]\n    inputs: "
                    "{i: ferry/timer/hz/1}\n"),
            "df.yml:4:5: 'inputs' of node 'r' does not apply: it has operators (list inputs and "
            "outputs under each operator)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators: [{id: o, python: o.py}]\n    args: [x]\n"),
            "df.yml:4:5: 'args' of node 'r' does not apply: it has operators (list inputs and "
            "outputs under each operator)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators:\n      - id: o\n        python: o.py\n"
                    "        shared-library: o.so\n"),
            "df.yml:5:9: operator 'r/o' has both 'shared-library' and 'python'; give one of them");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators:\n      - id: o\n        outputs: [x]\n"),
            "df.yml:4:9: operator 'r/o' needs 'shared-library' (a .so) or 'python' (a script)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: r\n    operators:\n      - python: o.py\n"),
            "df.yml:4:9: operator #1 of node 'r' has no 'id'");
}

TEST(DataflowErrors, UnknownSourcesListWhatExists) {
  const std::string producers = R"(nodes:
  - id: camera
    path: camera
    outputs: [image, depth]
  - id: rt
    operators:
      - {id: detect, python: d.py, outputs: [boxes]}
      - {id: quiet, python: q.py}
  - id: sink
    path: sink
    inputs:
      x: )";
  EXPECT_EQ(ErrorOf(producers + "camera/img\n"),
            "df.yml:12:10: input 'x' of node 'sink' refers to unknown output 'camera/img' (node "
            "'camera' has outputs: image, depth)");
  EXPECT_EQ(ErrorOf(producers + "cam/image\n"),
            "df.yml:12:10: input 'x' of node 'sink' refers to unknown node 'cam' (nodes: camera, "
            "rt, sink)");
  EXPECT_EQ(ErrorOf(producers + "rt/boxes\n"),
            "df.yml:12:10: input 'x' of node 'sink' refers to 'rt/boxes', but 'rt' is a runtime "
            "node: write 'rt/<operator>/<output>' (operators: detect, quiet)");
  EXPECT_EQ(ErrorOf(producers + "rt/detector/boxes\n"),
            "df.yml:12:10: input 'x' of node 'sink' refers to unknown operator 'rt/detector' "
            "(node 'rt' has operators: detect, quiet)");
  EXPECT_EQ(ErrorOf(producers + "rt/detect/box\n"),
            "df.yml:12:10: input 'x' of node 'sink' refers to unknown output 'rt/detect/box' "
            "(operator 'rt/detect' has outputs: boxes)");
  EXPECT_EQ(ErrorOf(producers + "rt/quiet/x\n"),
            "df.yml:12:10: input 'x' of node 'sink' refers to unknown output 'rt/quiet/x' "
            "(operator 'rt/quiet' has no outputs)");
  EXPECT_EQ(ErrorOf(producers + "camera/x/image\n"),
            "df.yml:12:10: input 'x' of node 'sink' refers to 'camera/x/image', but node 'camera' "
            "has no operators: write 'camera/<output>' (outputs: image, depth)");
  EXPECT_EQ(ErrorOf(producers + "{source: camera/img}\n"),
            "df.yml:12:19: input 'x' of node 'sink' refers to unknown output 'camera/img' (node "
            "'camera' has outputs: image, depth)");
  EXPECT_EQ(ErrorOf(producers + "camera\n"),
            "df.yml:12:10: input 'x' of node 'sink' has a malformed source 'camera' (expected "
            "node/output, node/operator/output, or a timer: ferry/timer/millis/N, "
            "ferry/timer/secs/N or ferry/timer/hz/N, or dora/timer/... alike)");
  EXPECT_EQ(ErrorOf(producers + "camera//image\n"),
            "df.yml:12:10: input 'x' of node 'sink' has a malformed source 'camera//image' "
            "(expected node/output, node/operator/output, or a timer: ferry/timer/millis/N, "
            "ferry/timer/secs/N or ferry/timer/hz/N, or dora/timer/... alike)");
  EXPECT_EQ(ErrorOf(producers + "a/b/c/d\n"),
            "df.yml:12:10: input 'x' of node 'sink' has a malformed source 'a/b/c/d' (expected "
            "node/output, node/operator/output, or a timer: ferry/timer/millis/N, "
            "ferry/timer/secs/N or ferry/timer/hz/N, or dora/timer/... alike)");
  // Operator inputs are named with their node.
  EXPECT_EQ(ErrorOf("nodes:\n  - id: rt\n    operators:\n      - id: o\n        python: o.py\n"
                    "        inputs: {i: nowhere/x}\n"),
            "df.yml:6:21: input 'i' of operator 'rt/o' refers to unknown node 'nowhere' (nodes: "
            "rt)");
}

TEST(DataflowErrors, TimerSyntaxAndRanges) {
  const std::string node = "nodes:\n  - id: a\n    path: a\n    inputs: {t: ";
  const auto error = [&](const std::string& source) { return ErrorOf(node + source + "}\n"); };
  const std::string millis_range =
      "df.yml:4:17: input 't' of node 'a': timer period '%' must be a whole number of "
      "milliseconds from 1 to 86400000 (one day)";
  const auto millis = [&](const std::string& number) {
    std::string text = millis_range;
    return text.replace(text.find('%'), 1, number);
  };
  EXPECT_EQ(error("ferry/timer/millis/0"), millis("0"));
  EXPECT_EQ(error("ferry/timer/millis/86400001"), millis("86400001"));
  EXPECT_EQ(error("ferry/timer/millis/-5"), millis("-5"));
  EXPECT_EQ(error("ferry/timer/millis/1.5"), millis("1.5"));
  EXPECT_EQ(error("ferry/timer/millis/"), millis(""));
  EXPECT_EQ(error("ferry/timer/millis/99999999999999999999999"), millis("99999999999999999999999"));
  const auto hz = [&](const std::string& number) {
    return "df.yml:4:17: input 't' of node 'a': timer frequency '" + number +
           "' must be a number of hertz from 1 to 1000000";
  };
  EXPECT_EQ(error("ferry/timer/hz/0"), hz("0"));
  EXPECT_EQ(error("ferry/timer/hz/0.5"), hz("0.5"));
  EXPECT_EQ(error("ferry/timer/hz/1000001"), hz("1000001"));
  EXPECT_EQ(error("ferry/timer/hz/1e3"), hz("1e3"));
  EXPECT_EQ(error("ferry/timer/hz/inf"), hz("inf"));
  EXPECT_EQ(error("ferry/timer/hz/1."), hz("1."));
  EXPECT_EQ(error("ferry/timer/hz/abc"), hz("abc"));
  const auto unknown = [&](const std::string& source) {
    return "df.yml:4:17: input 't' of node 'a' has an unknown built-in source '" + source +
           "' (built-in sources: ferry/timer/millis/N, ferry/timer/secs/N or ferry/timer/hz/N, or "
           "dora/timer/... alike)";
  };
  EXPECT_EQ(error("ferry/timer/seconds/1"), unknown("ferry/timer/seconds/1"));
  EXPECT_EQ(error("ferry/clock/1"), unknown("ferry/clock/1"));
  EXPECT_EQ(error("ferry/timer/millis/1/2"), unknown("ferry/timer/millis/1/2"));
  EXPECT_EQ(error("ferry/timer"), unknown("ferry/timer"));
}

TEST(DataflowErrors, ConfigValues) {
  const std::string op =
      "nodes:\n  - id: r\n    operators:\n      - id: o\n        python: o.py\n        config:\n"
      "          ";
  EXPECT_EQ(ErrorOf(op + "big: 99999999999999999999\n"),
            "df.yml:7:16: integer '99999999999999999999' is out of range (quote it for a string) "
            "in 'config' of operator 'r/o'");
  EXPECT_EQ(ErrorOf(op + "huge: 1e999\n"),
            "df.yml:7:17: number '1e999' is out of range (quote it for a string) in 'config' of "
            "operator 'r/o'");
  EXPECT_EQ(ErrorOf(op + "inf: .inf\n"),
            "df.yml:7:16: '.inf' has no JSON equivalent (quote it for a string) in 'config' of "
            "operator 'r/o'");
  EXPECT_EQ(ErrorOf(op + "x: !custom 1\n"),
            "df.yml:7:14: unsupported tag '!custom' in 'config' of operator 'r/o'");
  EXPECT_EQ(ErrorOf(op + "x: !!int abc\n"),
            "df.yml:7:14: 'abc' is not a valid !!int in 'config' of operator 'r/o'");
  EXPECT_EQ(ErrorOf(op + "? [a, b]\n          : 1\n"),
            "df.yml:7:13: mapping keys must be plain strings, not a list or mapping");
  EXPECT_EQ(ErrorOf(op + "s: \"a\\0b\"\n"),
            "df.yml:7:14: NUL character is not allowed in a string");
}

TEST(DataflowErrors, CyclesNameTheNodes) {
  const std::string triangle = R"(nodes:
  - id: a
    path: a
    inputs: {i: c/o}
    outputs: [o]
  - id: b
    path: b
    inputs: {i: a/o}
    outputs: [o]
  - id: c
    path: c
    inputs: {i: b/o}
    outputs: [o]
)";
  EXPECT_EQ(ErrorOf(triangle),
            "df.yml:8:17: nodes form a cycle: a -> b -> c -> a (through input 'i' of node 'b'); "
            "feedback loops between nodes must be allowed (allow_cycles)");
  ParseOptions allow = NoPathChecks();
  allow.allow_cycles = true;
  ASSERT_OK(ParseText(triangle, allow));

  const std::string self = "nodes:\n  - {id: loop, path: a, inputs: {i: loop/o}, outputs: [o]}\n";
  EXPECT_EQ(ErrorOf(self),
            "df.yml:2:37: nodes form a cycle: loop -> loop (through input 'i' of node 'loop'); "
            "feedback loops between nodes must be allowed (allow_cycles)");
  ASSERT_OK(ParseText(self, allow));

  // A runtime and a node feeding each other through different operators is
  // a cycle between nodes, not between operators.
  const std::string through_runtime = R"(nodes:
  - id: rt
    operators:
      - {id: first, python: f.py, inputs: {i: ext/o}}
      - {id: second, python: s.py, outputs: [o]}
  - id: ext
    path: ext
    inputs: {i: rt/second/o}
    outputs: [o]
)";
  EXPECT_EQ(ErrorOf(through_runtime),
            "df.yml:8:17: nodes form a cycle: rt -> ext -> rt (through input 'i' of node 'ext'); "
            "feedback loops between nodes must be allowed (allow_cycles)");
  ASSERT_OK(ParseText(through_runtime, allow));

  // Acyclic graphs with diamonds and chains inside one runtime pass.
  ASSERT_OK(ParseText(R"(nodes:
  - id: src
    path: src
    outputs: [o]
  - id: rt
    operators:
      - {id: a, python: a.py, inputs: {i: src/o}, outputs: [o]}
      - {id: b, python: b.py, inputs: {i: rt/a/o}, outputs: [o]}
      - {id: c, python: c.py, inputs: {i: rt/a/o}, outputs: [o]}
      - {id: d, python: d.py, inputs: {x: rt/b/o, y: rt/c/o, z: src/o}, outputs: [o]}
  - id: sink
    path: sink
    inputs: {a: rt/d/o, b: src/o}
)"));
}

TEST(DataflowErrors, OperatorCyclesAreAlwaysRefused) {
  ParseOptions allow = NoPathChecks();
  allow.allow_cycles = true;
  const std::string pair = R"(nodes:
  - id: rt
    operators:
      - {id: p, python: p.py, inputs: {i: rt/q/o}, outputs: [o]}
      - {id: q, python: q.py, inputs: {i: rt/p/o}, outputs: [o]}
)";
  const std::string message =
      "df.yml:5:43: operators of runtime node 'rt' form a cycle: p -> q -> p (through input 'i' "
      "of operator 'rt/q'); operators in one runtime may not feed back";
  EXPECT_EQ(ErrorOf(pair), message);
  EXPECT_EQ(ErrorOf(pair, allow), message);
  EXPECT_EQ(ErrorOf("nodes:\n  - id: rt\n    operators:\n      - {id: p, python: p.py, inputs: "
                    "{i: rt/p/o}, outputs: [o]}\n",
                    allow),
            "df.yml:4:43: operators of runtime node 'rt' form a cycle: p -> p (through input 'i' "
            "of operator 'rt/p'); operators in one runtime may not feed back");
}

// ---- Paths (check_paths): a temporary directory with real files.

class DataflowPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ferry-dataflow-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }

  std::string Write(const std::string& name, const std::string& text, mode_t mode = 0644) {
    const std::string path = dir_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }

  Result<Dataflow> Parse(const std::string& text, ParseOptions options = {}) {
    return ParseDataflowString(text, "df.yml", dir_, options);
  }
  std::string ErrorOf(const std::string& text, ParseOptions options = {}) {
    auto result = Parse(text, options);
    if (result.ok()) return "<parsed>";
    EXPECT_EQ(result.status().code(), StatusCode::kInvalid);
    return result.status().message();
  }

  std::string dir_;
};

TEST_F(DataflowPaths, ExecutablesAndScriptsResolveAgainstTheDescriptor) {
  Write("bin/tool", "#!/bin/sh\n", 0755);
  Write("tool", "#!/bin/sh\n", 0755);
  Write("script.py", "print(1)\n", 0644);
  Write("ops/libop.so", "not really a library", 0644);
  Write("ops/op.py", "x = 1\n", 0644);
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, Parse(R"(nodes:
  - {id: a, path: bin/tool}
  - {id: b, path: ./bin/../tool}
  - {id: c, path: script.py}
  - {id: d, path: tool}
  - id: rt
    operators:
      - {id: x, shared-library: ops/libop.so}
      - {id: y, python: ops/op.py}
)"));
  EXPECT_EQ(dataflow.directory, dir_);
  EXPECT_EQ(dataflow.nodes[0].path, dir_ + "/bin/tool");
  EXPECT_EQ(dataflow.nodes[1].path, dir_ + "/tool");
  EXPECT_EQ(dataflow.nodes[2].path, dir_ + "/script.py");
  EXPECT_TRUE(dataflow.nodes[2].python);
  // A bare name next to the descriptor wins over PATH.
  EXPECT_EQ(dataflow.nodes[3].path, dir_ + "/tool");
  EXPECT_FALSE(dataflow.nodes[3].python);
  EXPECT_EQ(dataflow.nodes[4].operators[0].path, dir_ + "/ops/libop.so");
  EXPECT_EQ(dataflow.nodes[4].operators[1].path, dir_ + "/ops/op.py");
}

TEST_F(DataflowPaths, MissingOrNotExecutable) {
  Write("plain", "data", 0644);
  Write("script.py", "x = 1\n", 0644);
  std::filesystem::create_directories(dir_ + "/folder");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: bin/missing}\n"),
            "df.yml:2:19: node 'a': '" + dir_ + "/bin/missing' does not exist");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: ./plain}\n"),
            "df.yml:2:19: node 'a': '" + dir_ +
                "/plain' is not executable (chmod +x, or give a .py script)");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: folder}\n"),
            "df.yml:2:19: node 'a': '" + dir_ + "/folder' is a directory");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: other.py}\n"),
            "df.yml:2:19: node 'a': '" + dir_ + "/other.py' does not exist");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: ferry-no-such-program-anywhere}\n"),
            "df.yml:2:19: node 'a': program 'ferry-no-such-program-anywhere' is neither in " +
                dir_ + " nor on PATH");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: rt, operators: [{id: o, shared-library: lib/libx.so}]}\n"),
            "df.yml:2:50: operator 'rt/o': '" + dir_ + "/lib/libx.so' does not exist");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: rt, operators: [{id: o, python: folder}]}\n"),
            "df.yml:2:42: operator 'rt/o': '" + dir_ + "/folder' is a directory");
  // A script only needs to be readable.
  ASSERT_OK(Parse("nodes:\n  - {id: a, path: script.py}\n"));
  if (::geteuid() != 0) {  // root reads anything
    Write("secret.py", "x = 1\n", 0200);
    EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: secret.py}\n"),
              "df.yml:2:19: node 'a': '" + dir_ + "/secret.py' is not readable");
  }
  // Without check_paths nothing is looked at, and paths are still absolute.
  ParseOptions unchecked;
  unchecked.check_paths = false;
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow,
                       Parse("nodes:\n  - {id: a, path: bin/missing}\n  - {id: b, path: "
                             "ferry-no-such-program-anywhere}\n",
                             unchecked));
  EXPECT_EQ(dataflow.nodes[0].path, dir_ + "/bin/missing");
  EXPECT_EQ(dataflow.nodes[1].path, dir_ + "/ferry-no-such-program-anywhere");
}

TEST_F(DataflowPaths, BareNamesAreLookedUpOnPath) {
  Write("tools/ferry-test-tool", "#!/bin/sh\n", 0755);
  Write("tools/ferry-not-runnable", "#!/bin/sh\n", 0644);
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path != nullptr ? old_path : "";
  ::setenv("PATH", ("/nonexistent:" + dir_ + "/tools:" + saved).c_str(), 1);
  auto found = Parse("nodes:\n  - {id: a, path: ferry-test-tool}\n");
  auto not_runnable = Parse("nodes:\n  - {id: a, path: ferry-not-runnable}\n");
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_OK(found);
  EXPECT_EQ(found->nodes[0].path, dir_ + "/tools/ferry-test-tool");
  ASSERT_FALSE(not_runnable.ok());
  EXPECT_EQ(
      not_runnable.status().message(),
      "df.yml:2:19: node 'a': program 'ferry-not-runnable' is neither in " + dir_ + " nor on PATH");
  // A system program.
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, Parse("nodes:\n  - {id: a, path: sh}\n"));
  EXPECT_THAT(dataflow.nodes[0].path, StartsWith("/"));
  EXPECT_THAT(dataflow.nodes[0].path, HasSubstr("/sh"));
}

TEST_F(DataflowPaths, ParseDataflowReadsAFile) {
  Write("bin/cam", "#!/bin/sh\n", 0755);
  const std::string file = Write("flow/df.yml", "nodes:\n  - {id: cam, path: ../bin/cam}\n");
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseDataflow(file));
  EXPECT_EQ(dataflow.path, dir_ + "/flow/df.yml");
  EXPECT_EQ(dataflow.directory, dir_ + "/flow");
  EXPECT_EQ(dataflow.nodes[0].path, dir_ + "/bin/cam");

  // Errors name the file as it was given.
  const std::string bad = Write("bad.yml", "nodes:\n  - {id: cam, path: nope}\n");
  auto result = ParseDataflow(bad);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            bad + ":2:21: node 'cam': program 'nope' is neither in " + dir_ + " nor on PATH");

  auto missing = ParseDataflow(dir_ + "/none.yml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIOError);
  EXPECT_EQ(missing.status().message(), dir_ + "/none.yml: cannot open: No such file or directory");

  auto directory = ParseDataflow(dir_);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().message(), dir_ + ": is a directory, not a descriptor");

  // A FIFO would block a plain read; it is refused without waiting.
  const std::string fifo = dir_ + "/fifo.yml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto from_fifo = ParseDataflow(fifo);
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_EQ(from_fifo.status().message(), fifo + ": is not a regular file");

  const std::string big = Write("big.yml", "# " + std::string(2 << 20, 'x') + "\n");
  auto too_big = ParseDataflow(big);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().message(),
            big + ": descriptor is 2097155 bytes; the limit is 1048576");
}

// ---- Hostile input: clear errors, no crash, bounded work.

TEST(DataflowHostile, DeepNesting) {
  EXPECT_EQ(ErrorOf(std::string(100000, '[')),
            "df.yml:1:1: mapping keys must be plain strings, not a list or mapping");
  EXPECT_EQ(ErrorOf("nodes: " + std::string(100, '[') + std::string(100, ']')),
            "df.yml:1:71: values nest deeper than 64 levels");
  std::string block;
  for (int depth = 0; depth < 200; ++depth) block += std::string(depth, ' ') + "- \n";
  EXPECT_EQ(ErrorOf("nodes:\n" + block), "df.yml:65:64: values nest deeper than 64 levels");
  std::string maps;
  for (int depth = 0; depth < 200; ++depth) maps += std::string(depth * 2, ' ') + "k:\n";
  EXPECT_EQ(ErrorOf(maps), "df.yml:65:129: values nest deeper than 64 levels");
}

TEST(DataflowHostile, AliasBombAndRecursiveAlias) {
  // Billion laughs: ten levels of ten aliases each.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 10; ++level) {
    bomb += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i)
      bomb += std::string(i > 0 ? ", " : "") + "*a" + std::to_string(level - 1);
    bomb += "]\n";
  }
  EXPECT_EQ(ErrorOf(bomb),
            "df.yml:6:50: the document holds more than 1048576 values once aliases are expanded");
  // The same inside an operator's config.
  std::string config =
      "nodes:\n  - id: r\n    operators:\n      - id: o\n        python: o.py\n"
      "        config:\n";
  config += "          a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 8; ++level) {
    config += "          a" + std::to_string(level) + ": &a" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i)
      config += std::string(i > 0 ? ", " : "") + "*a" + std::to_string(level - 1);
    config += "]\n";
  }
  EXPECT_THAT(ErrorOf(config), HasSubstr("values once aliases are expanded"));

  EXPECT_EQ(ErrorOf("nodes: &n [*n]\n"), "df.yml:1:12: alias refers to a node that contains it");
  EXPECT_EQ(ErrorOf("a: &a {b: *a}\n"), "df.yml:1:11: alias refers to a node that contains it");
  // Aliases cannot stack nesting past the limit either.
  std::string stacked = "a0: &a0 [[[[[[[[[[x]]]]]]]]]]\n";
  for (int level = 1; level < 10; ++level) {
    stacked += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [[[[[[[[[[*a" +
               std::to_string(level - 1) + "]]]]]]]]]]\n";
  }
  EXPECT_EQ(ErrorOf(stacked), "df.yml:7:19: alias nests values deeper than 64 levels");
}

TEST(DataflowHostile, SizeLimit) {
  const std::string huge =
      "nodes: [{id: a, path: a, args: [\"" + std::string(1 << 20, 'x') + "\"]}]\n";
  EXPECT_EQ(ErrorOf(huge), "df.yml: descriptor is 1048614 bytes; the limit is 1048576");
  // Just under the limit parses.
  const std::string large =
      "nodes: [{id: a, path: a, args: [\"" + std::string((1 << 20) - 100, 'x') + "\"]}]\n";
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(large));
  EXPECT_EQ(dataflow.nodes[0].args[0].size(), size_t{(1 << 20) - 100});
}

TEST(DataflowHostile, ManyNodesInALongChain) {
  // Bounded work for a big graph: a chain, which the cycle check walks without recursion.
  constexpr int kNodes = 3000;
  std::string text =
      "nodes:\n  - {id: n0, path: /bin/true, outputs: [o], inputs: {t: "
      "ferry/timer/hz/1}}\n";
  for (int i = 1; i < kNodes; ++i) {
    text += "  - {id: n" + std::to_string(i) + ", path: /bin/true, outputs: [o], inputs: {i: n" +
            std::to_string(i - 1) + "/o}}\n";
  }
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(text));
  EXPECT_EQ(dataflow.nodes.size(), size_t{kNodes});
  // Closing the chain makes one long cycle.
  text += "  - {id: last, path: /bin/true, inputs: {i: n" + std::to_string(kNodes - 1) +
          "/o}, outputs: [o]}\n";
  text.replace(text.find("t: ferry/timer/hz/1"), 19, "t: last/o");
  // A long cycle is shortened in the message.
  EXPECT_EQ(ErrorOf(text),
            "df.yml:3:57: nodes form a cycle: n0 -> n1 -> n2 -> n3 -> n4 -> n5 -> n6 -> n7 -> ... "
            "(2990 more) -> n2998 -> n2999 -> last -> n0 (through input 'i' of node 'n1'); "
            "feedback loops between nodes must be allowed (allow_cycles)");
}

TEST(DataflowHostile, EncodingAndControlCharacters) {
  EXPECT_EQ(ErrorOf("nodes:\n  - id: \xFF\n"),
            "df.yml:2:9: not valid UTF-8 (byte 0xFF); descriptors must be UTF-8");
  EXPECT_EQ(ErrorOf(std::string("\xFF\xFEn\0o\0", 6)),
            "df.yml:1:1: not valid UTF-8 (byte 0xFF); descriptors must be UTF-8");
  EXPECT_EQ(ErrorOf("nodes: [\xC0\xAF]\n"),
            "df.yml:1:9: not valid UTF-8 (byte 0xC0); descriptors must be UTF-8");
  EXPECT_EQ(ErrorOf("nodes: [\xED\xA0\x80]\n"),
            "df.yml:1:9: not valid UTF-8 (byte 0xED); descriptors must be UTF-8");
  EXPECT_EQ(ErrorOf("nodes: [\xE2\x82]\n"),
            "df.yml:1:9: not valid UTF-8 (byte 0xE2); descriptors must be UTF-8");
  EXPECT_EQ(ErrorOf(std::string("nodes:\n  - id: a\0b\n", 19)),
            "df.yml:2:10: NUL character is not allowed in YAML");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\x1B\n"),
            "df.yml:2:10: control character U+001B is not allowed in YAML");
  // Escapes in quoted strings are checked after they are resolved.
  EXPECT_EQ(ErrorOf("nodes: [{id: a, path: \"a\\0\"}]\n"),
            "df.yml:1:23: NUL character is not allowed in a string");
  EXPECT_EQ(ErrorOf("nodes: [{id: a, path: \"a\\uD800\"}]\n"),
            "df.yml:1:31: invalid YAML: invalid unicode: 55296");
  // A UTF-8 byte order mark is fine.
  ASSERT_OK(ParseText("\xEF\xBB\xBFnodes: [{id: a, path: a}]\n"));
}

TEST(DataflowHostile, RandomMutationsNeverCrash) {
  // Byte flips, deletions and insertions of YAML punctuation: every result
  // is a descriptor or an Invalid error naming the file.
  std::mt19937 random(1234);
  const std::string base = kExample;
  const std::string punctuation = "[]{}:-,&*!|>'\"%@`#?\n \t/\\";
  int parsed = 0;
  for (int round = 0; round < 1500; ++round) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int edit = 0; edit < edits; ++edit) {
      const size_t at = random() % text.size();
      switch (random() % 4) {
        case 0:
          text[at] = punctuation[random() % punctuation.size()];
          break;
        case 1:
          text.erase(at, 1 + random() % 8);
          break;
        case 2:
          text.insert(at, 1, punctuation[random() % punctuation.size()]);
          break;
        default:
          text[at] = static_cast<char>(random() % 256);
          break;
      }
      if (text.empty()) text = "x";
    }
    auto result = ParseText(text);
    if (result.ok()) {
      ++parsed;
      continue;
    }
    EXPECT_EQ(result.status().code(), StatusCode::kInvalid) << result.status().ToString();
    EXPECT_THAT(result.status().message(), StartsWith("df.yml:"));
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
// A dora-rs 1.x descriptor, as dora's documentation writes them.
constexpr const char* kDoraExample = R"(communication:
  _unstable_local: shmem
nodes:
  - id: camera
    name: Camera
    description: sends frames
    build: pip install -e camera
    path: camera/main.py
    args: --fps 30
    env:
      LEVEL: 2
      DEBUG: true
    inputs:
      tick: dora/timer/millis/500
      slow: dora/timer/secs/2
      fast: dora/timer/hz/30
    outputs:
      - image
      - log
    send_stdout_as: log
    _unstable_deploy:
      machine: robot-a
  - id: plot
    operator:
      python: plot.py
      inputs:
        image:
          source: camera/image
          queue_size: 1
      outputs: [shown]
  - id: sink
    path: sink
    inputs:
      shown: plot/shown
      image: {source: camera/image}
)";

TEST(DataflowDora, DescriptorParses) {
  ASSERT_OK_AND_ASSIGN(Dataflow dataflow, ParseText(kDoraExample));
  ASSERT_EQ(dataflow.nodes.size(), 3u);
  const NodeSpec& camera = dataflow.nodes[0];
  EXPECT_EQ(camera.build, "pip install -e camera");
  EXPECT_EQ(camera.path, "/flows/camera/main.py");
  EXPECT_TRUE(camera.python);
  EXPECT_EQ(camera.args, (std::vector<std::string>{"--fps", "30"}));
  EXPECT_EQ(camera.env, (std::map<std::string, std::string>{{"DEBUG", "true"}, {"LEVEL", "2"}}));
  ASSERT_EQ(camera.inputs.size(), 3u);
  EXPECT_EQ(camera.inputs[0].source.kind, InputSource::Kind::kTimer);
  EXPECT_EQ(camera.inputs[0].source.interval, std::chrono::milliseconds(500));
  EXPECT_EQ(camera.inputs[0].source.text, "dora/timer/millis/500");
  EXPECT_EQ(camera.inputs[1].source.interval, std::chrono::seconds(2));
  EXPECT_EQ(camera.inputs[2].source.interval, std::chrono::nanoseconds(33333333));
  EXPECT_EQ(camera.outputs, (std::vector<std::string>{"image", "log"}));
  EXPECT_EQ(camera.send_stdout_as, "log");
  EXPECT_EQ(camera.deploy_machine, "robot-a");

  // A single `operator:` is a runtime node with one operator named "op".
  const NodeSpec& plot = dataflow.nodes[1];
  ASSERT_TRUE(plot.is_runtime());
  ASSERT_EQ(plot.operators.size(), 1u);
  EXPECT_EQ(plot.operators[0].id, "op");
  EXPECT_EQ(plot.operators[0].kind, OperatorSpec::Kind::kPython);
  EXPECT_EQ(plot.operators[0].path, "/flows/plot.py");
  ASSERT_EQ(plot.operators[0].inputs.size(), 1u);
  EXPECT_EQ(plot.operators[0].inputs[0].queue_size, 1u);
  EXPECT_EQ(plot.operators[0].inputs[0].source.node, "camera");

  const NodeSpec& sink = dataflow.nodes[2];
  ASSERT_EQ(sink.inputs.size(), 2u);
  EXPECT_EQ(sink.inputs[0].source.node, "plot");
  EXPECT_EQ(sink.inputs[0].source.operator_id, "op");
  EXPECT_EQ(sink.inputs[0].source.output, "shown");
  EXPECT_EQ(sink.inputs[1].source.output, "image");
  EXPECT_EQ(sink.inputs[1].queue_size, 64u);
}

TEST(DataflowDora, SingleOperatorForms) {
  // An id on the single operator renames it; python: {source: ...} is dora's long form.
  ASSERT_OK_AND_ASSIGN(
      Dataflow dataflow,
      ParseText("nodes:\n  - id: n\n    operator:\n      id: detect\n      python:\n"
                "        source: op.py\n      outputs: [o]\n"
                "  - {id: s, path: s, inputs: {x: n/detect/o, y: n/o}}\n"));
  EXPECT_EQ(dataflow.nodes[1].inputs[1].source.operator_id, "detect");
  EXPECT_EQ(dataflow.nodes[0].operators[0].id, "detect");
  EXPECT_EQ(dataflow.nodes[0].operators[0].path, "/flows/op.py");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: n\n    operator: {python: {conda_env: base}}\n"),
            "df.yml:3:25: dora-rs key 'conda_env' in 'python' of operator 'n/op' is not "
            "supported by Ferry: start the operator's interpreter through FERRY_PYTHON instead "
            "(allowed: source)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: n\n    operator: {python: {}}\n"),
            "df.yml:3:24: 'python' of operator 'n/op' has no 'source'");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: n\n    path: a\n    operator: {python: o.py}\n"),
            "df.yml:4:5: node 'n' has both 'path' and 'operator': a node runs either a program "
            "(path) or operators in a runtime (operators, or one operator)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: n\n    operator: {python: o.py}\n    outputs: [x]\n"),
            "df.yml:4:5: 'outputs' of node 'n' does not apply: it has operators (list inputs and "
            "outputs under each operator)");
  // dora-rs writes a single operator's outputs node/output; node/op/output works too.
  ASSERT_OK_AND_ASSIGN(Dataflow short_form,
                       ParseText("nodes:\n  - id: n\n    operator: {python: o.py, outputs: [x]}\n"
                                 "  - {id: s, path: s, inputs: {x: n/x, y: n/op/x}}\n"));
  EXPECT_EQ(short_form.nodes[1].inputs[0].source.operator_id, "op");
  EXPECT_EQ(short_form.nodes[1].inputs[0].source.output, "x");
  EXPECT_EQ(short_form.nodes[1].inputs[1].source.operator_id, "op");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: n\n    operator: {python: o.py, outputs: [x]}\n"
                    "  - {id: s, path: s, inputs: {x: n/y}}\n"),
            "df.yml:4:34: input 'x' of node 's' refers to unknown output 'n/y' (operator "
            "'n/op' has outputs: x)");
}

TEST(DataflowDora, TimersAndReservedIds) {
  const std::string node = "nodes:\n  - id: a\n    path: a\n    inputs: {t: ";
  const auto parse = [&](const std::string& source) { return ParseText(node + source + "}\n"); };
  ASSERT_OK_AND_ASSIGN(Dataflow millis, parse("dora/timer/millis/20"));
  EXPECT_EQ(millis.nodes[0].inputs[0].source.interval, std::chrono::milliseconds(20));
  ASSERT_OK_AND_ASSIGN(Dataflow hz, parse("dora/timer/hz/2.5"));
  EXPECT_EQ(hz.nodes[0].inputs[0].source.interval, std::chrono::milliseconds(400));
  ASSERT_OK_AND_ASSIGN(Dataflow secs, parse("ferry/timer/secs/3"));
  EXPECT_EQ(secs.nodes[0].inputs[0].source.interval, std::chrono::seconds(3));
  EXPECT_EQ(ErrorOf(node + "dora/timer/millis/0}\n"),
            "df.yml:4:17: input 't' of node 'a': timer period '0' must be a whole number of "
            "milliseconds from 1 to 86400000 (one day)");
  EXPECT_EQ(ErrorOf(node + "dora/timer/secs/86401}\n"),
            "df.yml:4:17: input 't' of node 'a': timer period '86401' must be a whole number of "
            "seconds from 1 to 86400 (one day)");
  EXPECT_EQ(ErrorOf(node + "dora/timer/hz/0}\n"),
            "df.yml:4:17: input 't' of node 'a': timer frequency '0' must be a number of hertz "
            "from 1 to 1000000");
  EXPECT_EQ(ErrorOf(node + "dora/clock/1}\n"),
            "df.yml:4:17: input 't' of node 'a' has an unknown built-in source 'dora/clock/1' "
            "(built-in sources: ferry/timer/millis/N, ferry/timer/secs/N or ferry/timer/hz/N, or "
            "dora/timer/... alike)");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: dora, path: a}\n"),
            "df.yml:2:10: node id 'dora' is reserved for built-in sources (ferry/timer/millis/N, "
            "ferry/timer/secs/N or ferry/timer/hz/N, or dora/timer/... alike)");
}

TEST(DataflowDora, UnsupportedKeysSayWhatToDo) {
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    git: https://example.com/x.git\n    path: a\n"),
            "df.yml:3:5: dora-rs key 'git' in node 'a' is not supported by Ferry: clone the "
            "repository yourself and point path (and build) at it (allowed: id, path, args, env, "
            "inputs, outputs, operators, operator, restart, build, send_stdout_as, "
            "_unstable_deploy, max_restarts, stop_grace_ms, resources, name, description)");
  EXPECT_THAT(ErrorOf("nodes:\n  - id: a\n    custom: {source: a}\n"),
              StartsWith("df.yml:3:5: dora-rs key 'custom' in node 'a' is not supported by "
                         "Ferry: write its source"));
  EXPECT_THAT(ErrorOf("nodes:\n  - id: a\n    path: a\n    inputs:\n      i:\n"
                      "        source: dora/timer/millis/5\n        input_timeout: 1\n"),
              StartsWith("df.yml:7:9: dora-rs key 'input_timeout' in input 'i' of node 'a' is "
                         "not supported by Ferry"));
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    inputs:\n      i:\n"
                    "        source: dora/timer/millis/5\n        queue_sise: 1\n"),
            "df.yml:7:9: unknown key 'queue_sise' in input 'i' of node 'a' (did you mean "
            "'queue_size'? allowed: source, queue_size, overflow)");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: dynamic\n"),
            "df.yml:3:11: node 'a': dora-rs dynamic nodes (path: dynamic) are not supported; give "
            "the program or script to run");
  EXPECT_EQ(ErrorOf("nodes:\n  - id: a\n    path: a\n    _unstable_deploy: {machine: m, "
                    "local: true}\n"),
            "df.yml:4:36: unknown key 'local' in '_unstable_deploy' of node 'a' (allowed: "
            "machine)");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: a}\ncommunication: shmem\n"),
            "df.yml:3:16: 'communication' must be a mapping, got 'shmem'");
}

TEST(DataflowDora, BuildAndStdout) {
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: a, build: ''}\n"),
            "df.yml:2:29: 'build' of node 'a' is empty");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: a, build: [make]}\n"),
            "df.yml:2:29: 'build' of node 'a' must be a string, got a list");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: r, operator: {python: o.py}, build: make}\n"),
            "df.yml:2:39: 'build' of node 'r' is only supported on a node with 'path' (build the "
            "operator first)");
  EXPECT_EQ(ErrorOf("nodes:\n  - {id: a, path: a, outputs: [x], send_stdout_as: y}\n"),
            "df.yml:2:52: 'send_stdout_as' of node 'a' names 'y', which is not one of its "
            "outputs (outputs: x)");
  // A program that the build makes need not exist when the descriptor is read.
  const ferry::testing::ScratchDir scratch("dora-build");
  ASSERT_TRUE(scratch.ok());
  const std::string& directory = scratch.path();
  ParseOptions checked;
  ASSERT_OK_AND_ASSIGN(Dataflow built,
                       ParseDataflowString("nodes:\n  - {id: a, path: bin/a, build: make}\n",
                                           "df.yml", directory, checked));
  EXPECT_EQ(built.nodes[0].path, directory + "/bin/a");
  EXPECT_THAT(ErrorOf("nodes:\n  - {id: a, path: bin/a}\n", checked), HasSubstr("bin/a"));
}

}  // namespace ferry::flow
