// Launch planning: NodeConfigs, command lines, environments and edges.
#include "flow/daemon/plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "testing/test_util.h"

namespace ferry::flow::daemon {
namespace {

InputSpec OutputInput(const std::string& id, const std::string& node, const std::string& op,
                      const std::string& output) {
  InputSpec input;
  input.id = id;
  input.source.kind = InputSource::Kind::kOutput;
  input.source.node = node;
  input.source.operator_id = op;
  input.source.output = output;
  input.source.text = node + "/" + (op.empty() ? "" : op + "/") + output;
  return input;
}

InputSpec TimerInput(const std::string& id, std::chrono::nanoseconds interval) {
  InputSpec input;
  input.id = id;
  input.source.kind = InputSource::Kind::kTimer;
  input.source.interval = interval;
  input.source.text =
      "ferry/timer/millis/" +
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(interval).count());
  return input;
}

// camera (python) -> runtime/detect -> sink, camera ticks on a timer.
Dataflow SampleDataflow() {
  Dataflow dataflow;
  dataflow.path = "/flows/dataflow.yml";
  dataflow.directory = "/flows";

  NodeSpec camera;
  camera.id = "camera";
  camera.path = "/flows/camera.py";
  camera.python = true;
  camera.args = {"--fps", "30"};
  camera.env = {{"MODE", "fast"}};
  camera.inputs.push_back(TimerInput("tick", std::chrono::milliseconds(33)));
  camera.outputs = {"image"};
  dataflow.nodes.push_back(camera);

  NodeSpec runtime;
  runtime.id = "runtime";
  OperatorSpec detect;
  detect.id = "detect";
  detect.kind = OperatorSpec::Kind::kSharedLibrary;
  detect.path = "/flows/libdetect.so";
  InputSpec image = OutputInput("image", "camera", "", "image");
  image.queue_size = 4;
  image.overflow = "drop_oldest";
  detect.inputs.push_back(image);
  detect.outputs = {"boxes"};
  runtime.operators.push_back(detect);
  dataflow.nodes.push_back(runtime);

  NodeSpec sink;
  sink.id = "sink";
  sink.path = "/bin/true";
  sink.inputs.push_back(OutputInput("boxes", "runtime", "detect", "boxes"));
  dataflow.nodes.push_back(sink);
  return dataflow;
}

LaunchSettings Settings() {
  LaunchSettings settings;
  settings.ferry_exe = "/bin/true";  // any executable stands in for `ferry`
  settings.python = "/bin/sh";       // and for the interpreter
  settings.python_path = "/repo/python";
  return settings;
}

TEST(PlanTest, NodeConfigsNameChannelsTimersAndQueues) {
  ASSERT_OK_AND_ASSIGN(Plan plan, PlanDataflow(SampleDataflow(), "df-1-abcd", Settings()));
  ASSERT_EQ(plan.nodes.size(), 3u);

  const NodeConfig& camera = plan.nodes[0].config;
  EXPECT_EQ(camera.dataflow, "df-1-abcd");
  EXPECT_EQ(camera.node, "camera");
  EXPECT_EQ(camera.daemon_socket, "ferry-daemon/df-1-abcd");
  ASSERT_EQ(camera.inputs.size(), 1u);
  EXPECT_EQ(camera.inputs[0].id, "tick");
  EXPECT_TRUE(camera.inputs[0].channel.empty());
  EXPECT_EQ(camera.inputs[0].timer_interval, std::chrono::milliseconds(33));
  ASSERT_EQ(camera.outputs.size(), 1u);
  EXPECT_EQ(camera.outputs[0].channel, "df-1-abcd/camera/image");

  const NodeConfig& runtime = plan.nodes[1].config;
  ASSERT_EQ(runtime.inputs.size(), 1u);
  EXPECT_EQ(runtime.inputs[0].id, "detect/image");
  EXPECT_EQ(runtime.inputs[0].channel, "df-1-abcd/camera/image");
  EXPECT_EQ(runtime.inputs[0].queue_size, 4u);
  EXPECT_EQ(runtime.inputs[0].overflow, "drop_oldest");
  ASSERT_EQ(runtime.outputs.size(), 1u);
  EXPECT_EQ(runtime.outputs[0].id, "detect/boxes");
  EXPECT_EQ(runtime.outputs[0].channel, "df-1-abcd/runtime/detect/boxes");

  const NodeConfig& sink = plan.nodes[2].config;
  ASSERT_EQ(sink.inputs.size(), 1u);
  EXPECT_EQ(sink.inputs[0].channel, "df-1-abcd/runtime/detect/boxes");
  EXPECT_EQ(sink.inputs[0].queue_size, 64u);
  EXPECT_EQ(sink.inputs[0].overflow, "block");
  // The JSON the node parses back gives the same config.
  for (const NodeLaunch& launch : plan.nodes) {
    ASSERT_OK_AND_ASSIGN(NodeConfig parsed, NodeConfig::FromJson(launch.config.ToJson()));
    EXPECT_EQ(parsed.ToJson(), launch.config.ToJson());
  }
}

TEST(PlanTest, CommandLinesAndEnvironments) {
  ASSERT_OK_AND_ASSIGN(Plan plan, PlanDataflow(SampleDataflow(), "df-1-abcd", Settings()));
  const NodeLaunch& camera = plan.nodes[0];
  EXPECT_EQ(camera.program, "/bin/sh");
  EXPECT_EQ(camera.argv,
            (std::vector<std::string>{"/bin/sh", "-u", "/flows/camera.py", "--fps", "30"}));
  EXPECT_EQ(camera.working_directory, "/flows");
  EXPECT_EQ(camera.env.at("MODE"), "fast");
  EXPECT_EQ(camera.env.at("FERRY_NODE_ID"), "camera");
  EXPECT_EQ(camera.env.at("FERRY_DATAFLOW"), "df-1-abcd");
  EXPECT_EQ(camera.env.at("FERRY_DESCRIPTOR"), "/flows/dataflow.yml");
  EXPECT_EQ(camera.env.at("PYTHONPATH").rfind("/repo/python", 0), 0u);

  const NodeLaunch& runtime = plan.nodes[1];
  EXPECT_EQ(runtime.argv, (std::vector<std::string>{"/bin/true", "runtime"}));
  EXPECT_EQ(runtime.env.count("PYTHONPATH"), 0u);
  EXPECT_EQ(runtime.env.count("FERRY_OPERATORS"), 1u);
  EXPECT_EQ(camera.env.count("FERRY_OPERATORS"), 0u);

  const NodeLaunch& sink = plan.nodes[2];
  EXPECT_EQ(sink.program, "/bin/true");
  EXPECT_EQ(sink.argv, (std::vector<std::string>{"/bin/true"}));
}

TEST(PlanTest, RuntimeNodesExposeOnlyTheirBoundary) {
  Dataflow dataflow = SampleDataflow();
  // detect -> track inside the runtime; track's output feeds nobody.
  OperatorSpec track;
  track.id = "track";
  track.path = "/flows/libtrack.so";
  track.inputs.push_back(OutputInput("boxes", "runtime", "detect", "boxes"));
  track.inputs.push_back(TimerInput("tick", std::chrono::milliseconds(10)));
  track.outputs = {"tracks"};
  dataflow.nodes[1].operators.push_back(track);
  ASSERT_OK_AND_ASSIGN(Plan plan, PlanDataflow(dataflow, "run", Settings()));
  const NodeConfig& runtime = plan.nodes[1].config;
  ASSERT_EQ(runtime.inputs.size(), 2u);
  EXPECT_EQ(runtime.inputs[0].id, "detect/image");
  EXPECT_EQ(runtime.inputs[1].id, "track/tick");
  EXPECT_EQ(runtime.inputs[1].timer_interval, std::chrono::milliseconds(10));
  ASSERT_EQ(runtime.outputs.size(), 1u);  // detect/boxes (the sink's); track/tracks is unused
  EXPECT_EQ(runtime.outputs[0].id, "detect/boxes");
  // The operators travel in FERRY_OPERATORS, the in-process input included.
  const std::string operators = plan.nodes[1].env.at("FERRY_OPERATORS");
  EXPECT_NE(operators.find("\"track\""), std::string::npos) << operators;
  EXPECT_NE(operators.find("detect/boxes"), std::string::npos) << operators;
  // No transport edge inside the runtime.
  for (const Edge& edge : plan.edges) EXPECT_NE(edge.consumer_input, "track/boxes");
  EXPECT_EQ(plan.edges.size(), 2u);
}

TEST(PlanTest, PythonOperatorsRunUnderTheInterpreter) {
  Dataflow dataflow = SampleDataflow();
  dataflow.nodes[1].operators[0].kind = OperatorSpec::Kind::kPython;
  dataflow.nodes[1].operators[0].path = "/flows/detect.py";
  ASSERT_OK_AND_ASSIGN(Plan plan, PlanDataflow(dataflow, "run", Settings()));
  EXPECT_EQ(plan.nodes[1].argv, (std::vector<std::string>{"/bin/sh", "-u", "-m", "ferry.runtime"}));
  EXPECT_EQ(plan.nodes[1].env.at("PYTHONPATH").rfind("/repo/python", 0), 0u);
}

TEST(PlanTest, NodePythonPathComesAfterThePackage) {
  Dataflow dataflow = SampleDataflow();
  dataflow.nodes[0].env["PYTHONPATH"] = "/mine";
  ASSERT_OK_AND_ASSIGN(Plan plan, PlanDataflow(dataflow, "run", Settings()));
  EXPECT_EQ(plan.nodes[0].env.at("PYTHONPATH"), "/repo/python/ferry/_dora_shim:/repo/python:/mine");
}

TEST(PlanTest, StdoutOutputBelongsToTheDaemon) {
  Dataflow dataflow = SampleDataflow();
  dataflow.nodes[0].outputs.push_back("log");
  dataflow.nodes[0].send_stdout_as = "log";
  ASSERT_OK_AND_ASSIGN(Plan plan, PlanDataflow(dataflow, "run", Settings()));
  // The node does not create the channel its stdout travels on.
  for (const NodeConfig::Output& output : plan.nodes[0].config.outputs) {
    EXPECT_NE(output.id, "log");
  }
  EXPECT_EQ(plan.nodes[0].config.outputs.size(), dataflow.nodes[0].outputs.size() - 1);
}

TEST(PlanTest, InputsOfRestartingProducersAreMarked) {
  Dataflow dataflow = SampleDataflow();
  dataflow.nodes[1].restart = RestartPolicy::kOnFailure;  // the runtime feeds the sink
  ASSERT_OK_AND_ASSIGN(Plan plan, PlanDataflow(dataflow, "run", Settings()));
  EXPECT_FALSE(plan.nodes[1].config.inputs[0].producer_may_restart);  // camera: never
  EXPECT_TRUE(plan.nodes[2].config.inputs[0].producer_may_restart);
}

TEST(PlanTest, EdgesAndConsumers) {
  ASSERT_OK_AND_ASSIGN(Plan plan, PlanDataflow(SampleDataflow(), "run", Settings()));
  ASSERT_EQ(plan.edges.size(), 2u);
  EXPECT_EQ(plan.edges[0].label, "camera/image -> runtime/detect/image");
  EXPECT_EQ(plan.edges[0].producer_output, "image");
  EXPECT_EQ(plan.edges[0].consumer_input, "detect/image");
  EXPECT_EQ(plan.edges[1].label, "runtime/detect/boxes -> sink/boxes");
  EXPECT_EQ(plan.edges[1].producer, "runtime");
  EXPECT_EQ(plan.edges[1].producer_output, "detect/boxes");
  ASSERT_EQ(plan.nodes[0].consumers.size(), 1u);
  EXPECT_EQ(plan.nodes[0].consumers[0].consumer, "runtime");
  ASSERT_EQ(plan.nodes[1].consumers.size(), 1u);
  EXPECT_EQ(plan.nodes[1].consumers[0].consumer_input, "boxes");
  EXPECT_TRUE(plan.nodes[2].consumers.empty());
}

TEST(PlanTest, MissingInterpreterIsAClearError) {
  LaunchSettings settings = Settings();
  settings.python = "no-such-python-interpreter";
  auto plan = PlanDataflow(SampleDataflow(), "run", settings);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("'no-such-python-interpreter' was not found on PATH"),
            std::string::npos)
      << plan.status().ToString();
}

TEST(PlanTest, TooLongChannelNamesAreRefused) {
  Dataflow dataflow = SampleDataflow();
  dataflow.nodes[0].outputs = {std::string(90, 'x')};
  dataflow.nodes[1].operators[0].inputs[0].source.output = std::string(90, 'x');
  auto plan = PlanDataflow(dataflow, "run", Settings());
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("longer than 100 characters"), std::string::npos);
}

TEST(PlanTest, RunNames) {
  EXPECT_TRUE(std::regex_match(GenerateRunId(), std::regex("df-[0-9]+-[0-9a-f]{4}")));
  ASSERT_OK(CheckRunName("nightly-run_2.b"));
  EXPECT_FALSE(CheckRunName("").ok());
  EXPECT_FALSE(CheckRunName("has space").ok());
  EXPECT_FALSE(CheckRunName("a/b").ok());
  EXPECT_FALSE(CheckRunName(".hidden").ok());
  EXPECT_FALSE(CheckRunName("-flag").ok());
  EXPECT_FALSE(CheckRunName(std::string(49, 'a')).ok());
  auto plan = PlanDataflow(SampleDataflow(), "bad name", Settings());
  EXPECT_FALSE(plan.ok());
}

TEST(PlanTest, InstalledLayoutsFindTheirOwnPythonPackage) {
  testing::ScratchDir dir("ferry-plan");
  namespace fs = std::filesystem;
  const fs::path root(dir.path());
  // cmake --install: <prefix>/bin/ferry, <prefix>/lib/ferry/python/ferry/__init__.py.
  fs::create_directories(root / "prefix/bin");
  fs::create_directories(root / "prefix/lib/ferry/python/ferry");
  std::ofstream(root / "prefix/lib/ferry/python/ferry/__init__.py") << "";
  EXPECT_EQ(InstalledPythonPath((root / "prefix/bin/ferry").string()),
            (root / "prefix/lib/ferry/python").string());
  // A wheel: <site-packages>/ferry/bin/ferry inside the package.
  fs::create_directories(root / "site-packages/ferry/bin");
  std::ofstream(root / "site-packages/ferry/__init__.py") << "";
  EXPECT_EQ(InstalledPythonPath((root / "site-packages/ferry/bin/ferry").string()),
            (root / "site-packages").string());
  // A build tree (or a prefix without the package): nothing installed.
  fs::create_directories(root / "build/bin");
  EXPECT_EQ(InstalledPythonPath((root / "build/bin/ferry").string()), "");
  fs::create_directories(root / "other/bin");
  fs::create_directories(root / "other/lib/ferry/python/ferry");  // no __init__.py
  EXPECT_EQ(InstalledPythonPath((root / "other/bin/ferry").string()), "");
}

}  // namespace
}  // namespace ferry::flow::daemon
