#include "ferry/fleet/model.h"

#include <array>
#include <cctype>
#include <map>
#include <utility>

namespace ferry::fleet {
namespace {

constexpr std::array<std::pair<JobState, std::string_view>, 9> kJobStateNames{{
    {JobState::kPending, "PENDING"},
    {JobState::kAdmitted, "ADMITTED"},
    {JobState::kRunning, "RUNNING"},
    {JobState::kSucceeded, "SUCCEEDED"},
    {JobState::kFailed, "FAILED"},
    {JobState::kCancelled, "CANCELLED"},
    {JobState::kPreempted, "PREEMPTED"},
    {JobState::kTimeout, "TIMEOUT"},
    {JobState::kLost, "LOST"},
}};

constexpr std::array<std::pair<Role, std::string_view>, 4> kRoleNames{{
    {Role::kUser, "user"},
    {Role::kTeamAdmin, "team_admin"},
    {Role::kPlatformAdmin, "platform_admin"},
    {Role::kAgent, "agent"},
}};

template <typename Enum, size_t N>
std::string_view NameOf(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum value) {
  for (const auto& [candidate, name] : names) {
    if (candidate == value) return name;
  }
  return "UNKNOWN";
}

template <typename Enum, size_t N>
std::optional<Enum> ValueOf(const std::array<std::pair<Enum, std::string_view>, N>& names,
                            std::string_view text) {
  for (const auto& [value, name] : names) {
    if (name == text) return value;
  }
  return std::nullopt;
}

}  // namespace

std::string_view ToString(JobState state) { return NameOf(kJobStateNames, state); }

std::optional<JobState> ParseJobState(std::string_view text) {
  return ValueOf(kJobStateNames, text);
}

bool IsTerminal(JobState state) {
  switch (state) {
    case JobState::kSucceeded:
    case JobState::kFailed:
    case JobState::kCancelled:
    case JobState::kTimeout:
      return true;
    default:
      return false;
  }
}

std::string_view ToString(Role role) { return NameOf(kRoleNames, role); }

std::optional<Role> ParseRole(std::string_view text) { return ValueOf(kRoleNames, text); }

std::string CanonicalGpuModel(std::string_view model) {
  std::string out(model);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string_view ToString(NodeState state) { return state == NodeState::kReady ? "READY" : "LOST"; }

std::vector<Pool> SummarisePools(const std::vector<Node>& nodes) {
  std::map<std::string, Pool> pools;
  for (const Node& n : nodes) {
    Pool& p = pools[n.pool];
    p.name = n.pool;
    ++p.nodes;
    const bool usable = n.state == NodeState::kReady && !n.drain && n.unavailable.empty();
    if (n.state == NodeState::kReady) ++p.nodes_ready;
    for (const Gpu& g : n.gpus) {
      ++p.gpus;
      ++p.gpus_by_model[g.model];
      if (usable && !g.job_id && !g.external) ++p.gpus_free;
    }
  }
  std::vector<Pool> out;
  out.reserve(pools.size());
  for (auto& [name, pool] : pools) out.push_back(std::move(pool));
  return out;
}

}  // namespace ferry::fleet
