// The fleet commands of `ferry`: server, agent and the user commands (submit,
// jobs, status, logs, cancel, nodes, drain, undrain, whoami, admin user
// add/list/revoke, dataset create/list/show) over the REST API
// (docs/fleet-cli.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ferry/base/status.h"

namespace ferry::cli {

// Exit codes of every fleet command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitApiError = 1;  // the server refused, or could not be reached
inline constexpr int kExitUsage = 2;

class FleetCommands {
 public:
  // Adds the fleet subcommands to `app`.
  explicit FleetCommands(CLI::App& app);
  ~FleetCommands();

  // After app.parse(): runs the fleet command that was parsed and returns its
  // exit code, or -1 when none was.
  int Run();

  // `ferry submit [FILE] [options] -- command args`: the arguments after "--"
  // are the command. main() cuts them off before CLI11 sees them.
  void SetSubmitCommand(std::vector<std::string> command);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A job file (YAML with the fields of the submit API) as the JSON body.
// Plain scalars become numbers/booleans/null where they look like one, except
// under `command`, `env`, `labels`, `gpu_models` and `datasets`, and an
// input's `name`, `dataset`, `uri`, `sha256` and `mode`, which hold strings.
Result<nlohmann::json> JobFileToJson(const std::string& yaml_text, const std::string& file_name);

// "k=v" into (k, v); an error names `what` ("--env") when there is no '=' or no key.
Result<std::pair<std::string, std::string>> ParseKeyValue(const std::string& text,
                                                          const std::string& what);

// Columns padded to their widest cell; the last column is not padded.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// "2026-11-29T14:41:08.123Z" -> Unix ms; nullopt when malformed.
std::optional<int64_t> ParseTimestamp(const std::string& text);

// "42s", "5m", "3h", "2d"; "-" when unknown.
std::string FormatAge(std::optional<int64_t> then_ms, int64_t now_ms);

// The name `ferry submit` gives a job without --name or a name in its file.
// For a command: interpreters and launchers (python, python3.11, pypy, bash,
// sh, env with its NAME=value words, uv run, torchrun, accelerate launch,
// deepspeed, mpirun, node, Rscript, julia, ...) and their flags are skipped,
// `-m pkg.module` gives "module", `bash -c "CODE"` is named by CODE's
// command, and otherwise the first script or program gives its base name
// without extension ("python train.py --epochs 3" -> "train"). For a
// dataflow file: its directory when the file is dataflow.yml/dataflow.yaml
// ("examples/sensor/dataflow.yml" -> "sensor"), else its stem. The result is
// a valid job name: 1 to 128 characters ("job" when nothing is left).
std::string DefaultJobName(const std::vector<std::string>& command, const std::string& dataflow);

// What `ferry cancel` says about `job` (a job resource) when it has already
// finished ("job 3 has already finished (SUCCEEDED); nothing to cancel"), or
// "" when the job is pending or running and can be cancelled.
std::string AlreadyFinishedMessage(const nlohmann::json& job);

}  // namespace ferry::cli
