// The scheduler's configuration file (YAML): pools, pool sets, policies,
// quotas, shares, data sets and providers, as in sched::Config. The format is
// documented in docs/fleet-config.md. `ferry server --scheduler-config FILE`
// and `ferry sim` read it; the server reloads it when the file changes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ferry/base/status.h"
#include "ferry/fleet/sched.h"

namespace ferry::fleet {

// Parses and validates (sched::Config::Validate). Errors read
// "<name>:<line>:<column>: <key path>: message", e.g.
// "fleet.yaml:12:5: quotas[1].nominal_gpus: must be >= 0". Unknown keys are
// errors (a typo must not silently drop a quota).
Result<sched::Config> ParseSchedulerConfig(std::string_view yaml_text, std::string_view name);
Result<sched::Config> LoadSchedulerConfig(const std::string& path);

// Notices changes to a config file (modification time, size and a content
// hash, so a rewrite within one second is seen too).
class ConfigWatcher {
 public:
  explicit ConfigWatcher(std::string path);
  // nullopt when unchanged since the last Poll (the first Poll always reads);
  // the new config when it changed and is valid; an error when it changed and
  // is invalid (the caller keeps its current config; the same broken content
  // is reported once, not on every poll).
  Result<std::optional<sched::Config>> Poll();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string last_hash_;
  bool reported_broken_ = false;
};

}  // namespace ferry::fleet
