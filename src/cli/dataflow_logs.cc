// `ferry logs` for dataflows (dataflow_logs.h).
#include "cli/dataflow_logs.h"

#include <poll.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "flow/daemon/daemon.h"
#include "flow/daemon/plan.h"

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;

// The fleet's `logs` options that take a value (fleet_cli.cc's AddConnection).
bool IsFleetValueOption(const std::string& word) {
  return word == "--server" || word == "--token" || word == "--token-file" || word == "--ca-file";
}

bool IsJobId(const std::string& word) {
  if (word.empty() || word.size() > 18) return false;
  if (!std::all_of(word.begin(), word.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    return false;
  }
  return std::stoll(word) > 0;
}

bool IsRunning(const std::string& run_id) {
  if (!flow::daemon::CheckRunName(run_id).ok()) return false;
  auto described = flow::daemon::DescribeDataflow(run_id, std::chrono::seconds(2));
  // A daemon that is too busy to answer still owns the name.
  return described.ok() || described.status().code() == StatusCode::kTimedOut;
}

// One log file being read: what was read so far, and an unfinished line.
struct LogFile {
  std::string node;
  std::string path;
  std::streamoff offset = 0;
  std::string partial;
};

// Prints what was appended to `file` since the last call: whole lines (and,
// with `flush_partial`, an unterminated last line), each after `prefix`.
void PrintNew(LogFile& file, const std::string& prefix, bool flush_partial, std::ostream& out) {
  std::ifstream in(file.path, std::ios::binary);
  if (in) {
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    if (size < file.offset) file.offset = 0;  // truncated: a new run of that name
    if (size > file.offset) {
      in.seekg(file.offset);
      std::string chunk(static_cast<size_t>(size - file.offset), '\0');
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      chunk.resize(static_cast<size_t>(in.gcount()));
      file.offset += static_cast<std::streamoff>(chunk.size());
      file.partial += chunk;
    }
  }
  size_t begin = 0;
  for (size_t end; (end = file.partial.find('\n', begin)) != std::string::npos; begin = end + 1) {
    out << prefix << std::string_view(file.partial).substr(begin, end + 1 - begin);
  }
  file.partial.erase(0, begin);
  if (flush_partial && !file.partial.empty()) {
    out << prefix << file.partial << "\n";
    file.partial.clear();
  }
  out.flush();
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "none" : text;
}

}  // namespace

bool IsDataflowLogsRequest(const std::vector<std::string>& args) {
  std::optional<std::string> first;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--log-dir" || word.rfind("--log-dir=", 0) == 0) return true;
    if (IsFleetValueOption(word)) {
      ++i;  // its value
      continue;
    }
    if (word.empty() || word[0] == '-') continue;
    if (!first) first = word;
  }
  if (!first) return false;  // let the fleet command say what is missing
  return !IsJobId(*first) || IsRunning(*first);
}

int RunDataflowLogs(const DataflowLogsOptions& options, std::ostream& out, std::ostream& err) {
  if (Status name = flow::daemon::CheckRunName(options.run_id); !name.ok()) {
    err << "ferry: " << name.message() << "\n";
    return 1;
  }
  // A running dataflow tells where its logs are and which nodes it has; its
  // connection hangs up when the run ends, which ends --follow.
  std::optional<flow::protocol::Connection> daemon;
  std::vector<std::string> nodes;
  std::string log_dir = options.log_dir;
  auto described = flow::daemon::DescribeDataflow(options.run_id, std::chrono::seconds(2));
  if (described.ok()) {
    if (log_dir.empty()) log_dir = described->description.value("log_dir", std::string());
    for (const auto& node : described->description.value("nodes", nlohmann::json::array())) {
      nodes.push_back(node.value("id", std::string()));
    }
    daemon = std::move(described->connection);
  }
  if (log_dir.empty()) log_dir = ".ferry/logs/" + options.run_id;
  std::error_code error;
  if (!fs::is_directory(log_dir, error)) {
    if (options.log_dir.empty()) {
      err << "ferry: no dataflow '" << options.run_id
          << "' is running here and there is no log directory " << log_dir
          << " (give --log-dir DIR for a run that wrote its logs elsewhere)\n";
    } else {
      err << "ferry: no log directory " << log_dir << "\n";
    }
    return 1;
  }
  if (nodes.empty()) {
    // A finished run: its log directory holds <node>.log per node.
    for (const auto& entry : fs::directory_iterator(log_dir, error)) {
      const fs::path& path = entry.path();
      if (entry.is_regular_file() && path.extension() == ".log") {
        nodes.push_back(path.stem().string());
      }
    }
    std::sort(nodes.begin(), nodes.end());
  }
  std::vector<LogFile> files;
  for (const auto& node : nodes) {
    if (!options.node.empty() && node != options.node) continue;
    LogFile file;
    file.node = node;
    file.path = (fs::path(log_dir) / (node + ".log")).string();
    files.push_back(std::move(file));
  }
  if (files.empty()) {
    err << "ferry: " << (options.node.empty() ? "no node logs" : "no node '" + options.node + "'")
        << " in " << (daemon ? "dataflow '" + options.run_id + "'" : log_dir)
        << " (nodes: " << JoinNames(nodes) << ")\n";
    return 1;
  }
  const bool prefixed = options.node.empty();
  auto print_all = [&](bool flush_partial) {
    for (LogFile& file : files) {
      PrintNew(file, prefixed ? "[" + file.node + "] " : "", flush_partial, out);
    }
  };
  if (!options.follow || !daemon) {
    print_all(/*flush_partial=*/true);
    return 0;
  }
  for (;;) {
    print_all(/*flush_partial=*/false);
    pollfd entry{daemon->fd(), POLLIN, 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(options.poll_interval.count()));
    if (ready > 0) {
      // Only the hang-up at the end of the run is expected here.
      auto message = daemon->Receive(std::chrono::nanoseconds(0));
      if (!message.ok() || !message->has_value()) break;
    }
  }
  print_all(/*flush_partial=*/true);
  return 0;
}

int RunDataflowLogsCommandLine(const std::vector<std::string>& args, std::ostream& out,
                               std::ostream& err) {
  CLI::App app{"Print the logs of a dataflow's nodes", "ferry logs"};
  DataflowLogsOptions options;
  app.add_option("run_id", options.run_id, "The run id (df-...) or --name of the dataflow")
      ->required();
  app.add_option("node", options.node, "Only this node's log (default: every node, prefixed)");
  app.add_flag("-f,--follow", options.follow, "Keep printing new lines until the dataflow ends");
  app.add_option("--log-dir", options.log_dir,
                 "The run's log directory (default: the daemon's, else .ferry/logs/<run id>)");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& error) {
    std::ostringstream usage_out, usage_err;
    const int code = app.exit(error, usage_out, usage_err);
    out << usage_out.str();
    err << usage_err.str();
    return code == 0 ? 0 : 2;
  }
  return RunDataflowLogs(options, out, err);
}

}  // namespace ferry::cli
