// The `ferry` command:
//   ferry run FILE [--name N] [--log-dir D] [--summary-json F] [--allow-cycles] [--no-build]
//   ferry check FILE [--allow-cycles]
//   ferry stop RUN_ID [--timeout S]
//   ferry ps [--json]        (alias: ferry list; the dataflows running here)
//   ferry graph FILE [--format mermaid|html] [-o OUT]   (docs/dataflow-tools.md)
//   ferry logs RUN_ID [NODE] [-f] [--log-dir D]   (`ferry logs JOB_ID`: the fleet's)
//   ferry top [RUN_ID] [--once] [--json] [--interval S]
//   ferry topic echo|hz RUN_ID/NODE/OUTPUT [--count N]
//   ferry record RUN_ID -o DIR [NODE/OUTPUT ...] [--duration S] [--count N]
//   ferry replay DIR [--speed max|recorded] [--source NODE]   (a node of a dataflow)
//   ferry runtime            (started by `ferry run` for runtime nodes)
//   ferry version | ferry --version
//   ferry server | agent | submit | jobs | status | logs | cancel | nodes | whoami | admin
//                            (the fleet: docs/fleet-cli.md)
//   ferry sim --config F --trace F|--synthetic F ... (the fleet simulator: docs/fleet-sim.md)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli/dataflow_graph.h"
#include "cli/dataflow_logs.h"
#include "cli/dataflow_record.h"
#include "cli/dataflow_replay.h"
#include "cli/dataflow_top.h"
#include "cli/dataflow_topic.h"
#include "cli/fleet_cli.h"
#include "cli/sim_cli.h"
#include "ferry/flow/dataflow.h"
#include "flow/daemon/daemon.h"
#include "flow/operator/runtime_main.h"

namespace {

using ferry::flow::Dataflow;
using ferry::flow::InputSource;
using ferry::flow::InputSpec;
using ferry::flow::NodeSpec;

int Fail(const std::string& message) {
  std::cerr << "ferry: " << message << "\n";
  return 1;
}

std::string DescribeInput(const InputSpec& input) {
  std::string text = input.id + " <- " + input.source.text;
  if (input.source.kind == InputSource::Kind::kOutput &&
      (input.queue_size != 64 || input.overflow != "block")) {
    text += " (queue " + std::to_string(input.queue_size) + ", " + input.overflow + ")";
  }
  return text;
}

std::string Join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ", ") + item;
  return text.empty() ? "-" : text;
}

void PrintGraph(const std::string& file, const Dataflow& dataflow) {
  size_t edges = 0;
  for (const NodeSpec& node : dataflow.nodes) {
    for (const auto& input : node.inputs) edges += input.source.kind == InputSource::Kind::kOutput;
    for (const auto& op : node.operators) {
      for (const auto& input : op.inputs) edges += input.source.kind == InputSource::Kind::kOutput;
    }
  }
  std::cout << file << ": ok, " << dataflow.nodes.size() << " node"
            << (dataflow.nodes.size() == 1 ? "" : "s") << ", " << edges << " edge"
            << (edges == 1 ? "" : "s") << "\n";
  for (const NodeSpec& node : dataflow.nodes) {
    std::cout << "  node " << node.id;
    if (node.is_runtime()) {
      std::cout << " (runtime, " << node.operators.size() << " operator"
                << (node.operators.size() == 1 ? "" : "s") << ")";
    } else {
      std::cout << " (" << (node.python ? "python " : "") << node.path;
      for (const auto& arg : node.args) std::cout << " " << arg;
      std::cout << ")";
    }
    std::cout << "  restart: " << ferry::flow::RestartPolicyName(node.restart);
    if (node.restart != ferry::flow::RestartPolicy::kNever) {
      std::cout << " (max " << node.max_restarts << ")";
    }
    std::cout << "\n";
    if (!node.build.empty()) std::cout << "    build  " << node.build << "\n";
    if (!node.send_stdout_as.empty())
      std::cout << "    stdout as output " << node.send_stdout_as << "\n";
    if (!node.deploy_machine.empty()) {
      std::cout << "    machine " << node.deploy_machine << " (recorded; runs on this machine)\n";
    }
    auto print_ports = [](const std::string& indent, const std::vector<InputSpec>& inputs,
                          const std::vector<std::string>& outputs) {
      for (const auto& input : inputs)
        std::cout << indent << "input  " << DescribeInput(input) << "\n";
      if (!outputs.empty()) std::cout << indent << "outputs " << Join(outputs) << "\n";
    };
    print_ports("    ", node.inputs, node.outputs);
    for (const auto& op : node.operators) {
      std::cout << "    operator " << op.id << " ("
                << (op.kind == ferry::flow::OperatorSpec::Kind::kPython ? "python " : "library ")
                << op.path << ")\n";
      print_ports("      ", op.inputs, op.outputs);
    }
  }
}

ferry::Result<Dataflow> Load(const std::string& file, bool allow_cycles) {
  ferry::flow::ParseOptions options;
  options.allow_cycles = allow_cycles;
  return ferry::flow::ParseDataflow(file, options);
}

// `ferry ps`: one row per running dataflow.
int ListRuns(bool as_json) {
  auto runs = ferry::flow::daemon::ListDataflows(std::chrono::seconds(2));
  if (!runs.ok()) return Fail(runs.status().message());
  if (as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& run : *runs) {
      out.push_back(run.description.is_null()
                        ? nlohmann::json{{"dataflow", run.run_id}, {"phase", "unknown"}}
                        : run.description);
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (runs->empty()) {
    std::cout << "no dataflows running\n";
    return 0;
  }
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::vector<std::vector<std::string>> rows = {{"RUN", "PHASE", "AGE", "NODES", "FILE"}};
  for (const auto& run : *runs) {
    const nlohmann::json& d = run.description;
    if (d.is_null()) {
      rows.push_back({run.run_id, "unknown (no answer)", "-", "-", "-"});
      continue;
    }
    int running = 0, total = 0, restarts = 0;
    for (const auto& node : d.value("nodes", nlohmann::json::array())) {
      ++total;
      running += node.value("state", "") == "running";
      restarts += node.value("restarts", 0);
    }
    std::string nodes = std::to_string(running) + "/" + std::to_string(total) + " running";
    if (restarts > 0) nodes += ", " + std::to_string(restarts) + " restarts";
    rows.push_back({run.run_id, d.value("phase", "?"),
                    ferry::cli::FormatAge(d.value("started_unix_ms", int64_t{0}), now_ms), nodes,
                    d.value("file", "")});
  }
  std::cout << ferry::cli::FormatTable(rows);
  return 0;
}

int Main(int argc, char** argv) {
  // `ferry runtime` hands its arguments over untouched.
  if (argc >= 2 && std::string(argv[1]) == "runtime") {
    return ferry::flow::RunOperatorRuntime(argc - 1, argv + 1);
  }

  // `ferry logs` serves dataflows and fleet jobs; dataflow_logs.h has the rule.
  if (argc >= 2 && std::string(argv[1]) == "logs") {
    std::vector<std::string> rest(argv + 2, argv + argc);
    if (ferry::cli::IsDataflowLogsRequest(rest)) {
      return ferry::cli::RunDataflowLogsCommandLine(rest, std::cout, std::cerr);
    }
  }

  CLI::App app{
      "Ferry: zero-copy Arrow dataflows (run, check, ps, stop, graph, logs, top, topic, "
      "record, replay) and a GPU job platform (server, agent, submit, jobs, ...)",
      "ferry"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  app.set_version_flag("--version", std::string("ferry ") + FERRY_VERSION);

  std::string file;
  bool allow_cycles = false;
  ferry::flow::daemon::DaemonOptions run_options;
  double start_timeout_s = 60;

  CLI::App* run = app.add_subcommand("run", "Run a dataflow until it ends or is stopped");
  run->add_option("file", file, "The dataflow descriptor (dataflow.yml)")->required();
  run->add_option("--name", run_options.run_name,
                  "Run id (default df-<pid>-<hex>); `ferry stop` uses it");
  run->add_option("--log-dir", run_options.log_dir,
                  "Directory for the nodes' log files (default .ferry/logs/<run id>)");
  run->add_option("--summary-json", run_options.summary_json,
                  "Also write the summary as JSON to this file");
  run->add_flag("--allow-cycles", allow_cycles, "Accept feedback loops between nodes");
  bool no_build = false;
  run->add_flag("--no-build", no_build, "Skip the nodes' build: commands");
  run->add_option("--start-timeout", start_timeout_s,
                  "Seconds the nodes may take to become ready (default 60)")
      ->check(CLI::Range(0.001, 86400.0));

  CLI::App* check = app.add_subcommand("check", "Validate a dataflow and print its graph");
  check->add_option("file", file, "The dataflow descriptor (dataflow.yml)")->required();
  check->add_flag("--allow-cycles", allow_cycles, "Accept feedback loops between nodes");

  std::string run_id;
  double stop_timeout_s = 60;
  CLI::App* stop = app.add_subcommand("stop", "Stop a running dataflow and wait for it to end");
  stop->add_option("run_id", run_id, "The run id `ferry run` printed (or its --name)")->required();
  stop->add_option("--timeout", stop_timeout_s,
                   "Seconds to wait for the dataflow to end (0: do not wait; default 60)")
      ->check(CLI::Range(0.0, 86400.0));

  bool ps_json = false;
  CLI::App* ps = app.add_subcommand("ps", "List the dataflows running on this machine");
  ps->alias("list");
  ps->add_flag("--json", ps_json, "Print the daemons' descriptions as JSON");

  ferry::cli::GraphCommandOptions graph_options;
  CLI::App* graph =
      app.add_subcommand("graph", "Draw a dataflow's graph as Mermaid text or an HTML page");
  graph->add_option("file", graph_options.file, "The dataflow descriptor (dataflow.yml)")
      ->required();
  graph
      ->add_option("--format", graph_options.format,
                   "mermaid (default) or html (the default when -o ends in .html)")
      ->check(CLI::IsMember({"mermaid", "html"}));
  graph->add_option("-o,--output", graph_options.output, "Write to this file (default stdout)");
  graph->add_flag("--allow-cycles", graph_options.allow_cycles,
                  "Accept feedback loops between nodes");

  ferry::cli::TopOptions top_options;
  double top_interval_s = 1;
  CLI::App* top = app.add_subcommand(
      "top", "Per node CPU, memory, messages/s, drops and restarts of the running dataflows");
  top->add_option("run_id", top_options.run_id, "Only this dataflow (default: every one here)");
  top->add_flag("--once", top_options.once, "One sample (over up to 1 s) instead of a live view");
  top->add_flag("--json", top_options.json,
                "Print JSON (with --once one document, else one line per refresh)");
  bool top_no_taps = false;
  top->add_flag("--no-taps", top_no_taps,
                "Do not tap the outputs (no live messages/s and bytes/s then)");
  top->add_option("--interval", top_interval_s, "Seconds between refreshes (default 1)")
      ->check(CLI::Range(0.05, 3600.0));

  ferry::cli::TopicOptions topic_options;
  double topic_window_s = 1;
  CLI::App* topic = app.add_subcommand("topic", "Read a live output of a running dataflow");
  topic->require_subcommand(1);
  CLI::App* topic_echo = topic->add_subcommand("echo", "Print the messages of an output");
  CLI::App* topic_hz = topic->add_subcommand("hz", "Print the message rate of an output");
  for (CLI::App* command : {topic_echo, topic_hz}) {
    command
        ->add_option("topic", topic_options.topic,
                     "RUN_ID/NODE/OUTPUT (RUN_ID/NODE/OPERATOR/OUTPUT for an operator's)")
        ->required();
    command
        ->add_option("-n,--count", topic_options.count,
                     command == topic_echo
                         ? "Stop after this many messages (default: until the output ends)"
                         : "Stop after this many reports (default: until the output ends)")
        ->check(CLI::NonNegativeNumber);
  }
  topic_echo
      ->add_option("--max-values", topic_options.max_values, "Values shown per column (default 20)")
      ->check(CLI::PositiveNumber);
  topic_hz->add_option("--window", topic_window_s, "Seconds per report (default 1)")
      ->check(CLI::Range(0.05, 3600.0));

  ferry::cli::RecordOptions record_options;
  double record_duration_s = 0;
  CLI::App* record = app.add_subcommand(
      "record", "Record outputs of a running dataflow into Arrow IPC files (one per output)");
  record->add_option("run_id", record_options.run_id, "The run id (or --name) of the dataflow")
      ->required();
  record->add_option("outputs", record_options.outputs,
                     "NODE/OUTPUT (or NODE/OPERATOR/OUTPUT) to record (default: every output)");
  record->add_option("-o,--output-dir", record_options.directory, "Directory for the files")
      ->required();
  record->add_option("--duration", record_duration_s, "Stop after this many seconds")
      ->check(CLI::Range(0.001, 86400.0 * 365));
  record
      ->add_option("-n,--count", record_options.count,
                   "Stop once every output recorded this many messages")
      ->check(CLI::PositiveNumber);

  ferry::cli::ReplayOptions replay_options;
  std::string replay_speed = "max";
  CLI::App* replay = app.add_subcommand(
      "replay", "Send a recording on this node's outputs (as a node of a dataflow: path: ferry)");
  replay->add_option("directory", replay_options.directory, "The directory `ferry record` wrote")
      ->required();
  replay
      ->add_option("--speed", replay_speed,
                   "max (as fast as the consumers take it; default) or recorded")
      ->check(CLI::IsMember({"max", "recorded"}));
  replay->add_option("--source", replay_options.source,
                     "Replay the recorded outputs of this node (default: this node's id)");

  app.add_subcommand("runtime", "Host the operators of a runtime node (started by `ferry run`)");
  CLI::App* version = app.add_subcommand("version", "Print the version");
  ferry::cli::FleetCommands fleet(app);
  ferry::cli::SimCommand sim(app);

  // `ferry submit [options] -- command args`: the command is everything after "--".
  std::vector<char*> args(argv, argv + argc);
  if (argc >= 2 && std::string(argv[1]) == "submit") {
    auto dashes = std::find_if(args.begin() + 2, args.end(),
                               [](const char* arg) { return std::string(arg) == "--"; });
    if (dashes != args.end()) {
      std::vector<std::string> command(dashes + 1, args.end());
      if (command.empty()) {
        std::cerr << "ferry: nothing after \"--\" (expected a command)\n";
        return 2;
      }
      fleet.SetSubmitCommand(std::move(command));
      args.erase(dashes, args.end());
    }
  }

  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }

  if (const int code = fleet.Run(); code >= 0) return code;
  if (const int code = sim.Run(std::cout, std::cerr); code >= 0) return code;
  if (version->parsed()) {
    std::cout << "ferry " << FERRY_VERSION << "\n";
    return 0;
  }
  if (check->parsed()) {
    auto dataflow = Load(file, allow_cycles);
    if (!dataflow.ok()) {
      std::cerr << dataflow.status().message() << "\n";
      return 1;
    }
    PrintGraph(file, *dataflow);
    return 0;
  }
  if (ps->parsed()) return ListRuns(ps_json);
  if (replay->parsed()) {
    replay_options.recorded_speed = replay_speed == "recorded";
    return ferry::cli::RunReplay(replay_options, std::cout, std::cerr);
  }
  if (record->parsed()) {
    record_options.duration =
        std::chrono::milliseconds(static_cast<int64_t>(record_duration_s * 1000));
    return ferry::cli::RunRecord(record_options, std::cout, std::cerr);
  }
  if (topic->parsed()) {
    topic_options.hz = topic_hz->parsed();
    topic_options.window = std::chrono::milliseconds(static_cast<int64_t>(topic_window_s * 1000));
    return ferry::cli::RunTopic(topic_options, std::cout, std::cerr);
  }
  if (top->parsed()) {
    top_options.interval = std::chrono::milliseconds(static_cast<int64_t>(top_interval_s * 1000));
    top_options.taps = !top_no_taps;
    return ferry::cli::RunTop(top_options, std::cout, std::cerr);
  }
  if (graph->parsed()) return ferry::cli::RunGraphCommand(graph_options, std::cout, std::cerr);
  if (stop->parsed()) {
    auto status = ferry::flow::daemon::StopDataflow(
        run_id, std::chrono::milliseconds(static_cast<int64_t>(stop_timeout_s * 1000)));
    if (!status.ok()) return Fail(status.message());
    std::cout << "dataflow " << run_id << (stop_timeout_s > 0 ? " stopped" : " is stopping")
              << "\n";
    return 0;
  }
  if (run->parsed()) {
    auto dataflow = Load(file, allow_cycles);
    if (!dataflow.ok()) {
      std::cerr << dataflow.status().message() << "\n";
      return 1;
    }
    run_options.start_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(start_timeout_s * 1000));
    run_options.run_builds = !no_build;
    run_options.out = &std::cout;
    run_options.err = &std::cerr;
    auto summary = ferry::flow::daemon::RunDataflow(*dataflow, run_options);
    if (!summary.ok()) return Fail(summary.status().message());
    return summary->exit_code;
  }
  return Fail("no command given (try `ferry --help`)");
}

}  // namespace

int main(int argc, char** argv) {
  // Errors travel as Status; an exception reaching this far (an allocation
  // failure, a bug) still ends with a message and the exit code of an
  // internal error instead of std::terminate's abort.
  try {
    return Main(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ferry: internal error: %s\n", error.what());
  } catch (...) {
    std::fprintf(stderr, "ferry: internal error: an unknown exception\n");
  }
  return 70;  // EX_SOFTWARE
}
