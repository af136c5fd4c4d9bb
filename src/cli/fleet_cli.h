// The fleet commands of `ferry`: server, agent and the user commands (submit,
// jobs, status, logs, cancel, nodes, whoami, admin user add) over the REST API
// (docs/fleet-cli.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ferry/exchange/status.h"

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
// under `command`, `env`, `labels` and `gpu_models`, which hold strings.
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

}  // namespace ferry::cli
