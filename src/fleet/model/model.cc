#include "ferry/fleet/model.h"

#include <array>
#include <cctype>
#include <map>
#include <utility>

#include "ferry/base/hash.h"

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

std::string ManifestDigest(const std::string& source,
                           const std::vector<DatasetObject>& sorted_objects) {
  std::string canonical = "ferry-manifest-v1\n" + source + "\n";
  size_t length = canonical.size();
  for (const DatasetObject& object : sorted_objects) length += object.path.size() + 88;
  canonical.reserve(length);
  for (const DatasetObject& object : sorted_objects) {
    canonical += object.path;
    canonical += '\t';
    canonical += std::to_string(object.size);
    canonical += '\t';
    canonical += object.sha256;
    canonical += '\n';
  }
  return "sha256:" + Sha256Hex(canonical);
}

namespace {

bool IsControl(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return byte < 0x20 || byte == 0x7f;
}

// A '/'-separated path with no empty, "." or ".." component.
bool CleanComponents(std::string_view path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view component = path.substr(start, end - start);
    if (component.empty() || component == "." || component == "..") return false;
    start = end + 1;
  }
  return true;
}

constexpr size_t kMaxUriBytes = 2048;

// Splits a supported URI into its scheme ("s3", "https", "http", "file"),
// its authority (bucket or host; empty for file) and the path after it
// (without the leading '/'). "" when it is acceptable, else the problem.
std::string SplitUri(std::string_view text, std::string_view* scheme, std::string_view* rest) {
  if (text.size() > kMaxUriBytes) {
    return "must be at most " + std::to_string(kMaxUriBytes) + " bytes";
  }
  for (char c : text) {
    if (IsControl(c) || c == ' ') return "must not contain spaces or control characters";
    if (c == '?' || c == '#') return "must not have a query or fragment";
  }
  static constexpr std::string_view kSchemes[] = {"s3://", "https://", "http://", "file://"};
  for (std::string_view prefix : kSchemes) {
    if (text.substr(0, prefix.size()) != prefix) continue;
    *scheme = prefix.substr(0, prefix.size() - 3);
    std::string_view after = text.substr(prefix.size());
    if (*scheme == "file") {
      if (after.empty() || after.front() != '/') return "a file URI must be file:///absolute/path";
      *rest = after.substr(1);
      return "";
    }
    const size_t slash = after.find('/');
    if (slash == 0 || after.empty()) {
      return *scheme == "s3" ? "an s3 URI must name a bucket (s3://bucket/...)"
                             : "must name a host";
    }
    if (slash == std::string_view::npos) {
      return "must have a path after the " + std::string(*scheme == "s3" ? "bucket" : "host") +
             " ('/')";
    }
    *rest = after.substr(slash + 1);
    return "";
  }
  return "must be an s3://, https://, http:// or file:/// URI";
}

}  // namespace

std::string CheckInputName(std::string_view text, size_t max_chars) {
  if (text.empty() || text.size() > max_chars) {
    return "must have between 1 and " + std::to_string(max_chars) + " characters";
  }
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return "may only contain letters, digits, '.', '_' and '-'";
    }
  }
  if (text == "." || text == "..") return "must not be \".\" or \"..\"";
  return "";
}

std::string CheckObjectPath(std::string_view text) {
  if (text.empty()) return "must not be empty";
  if (text.size() > DatasetVersion::kMaxPathBytes) {
    return "must be at most " + std::to_string(DatasetVersion::kMaxPathBytes) + " bytes";
  }
  if (text.front() == '/') return "must be relative (no leading '/')";
  for (char c : text) {
    if (IsControl(c)) return "must not contain control characters";
  }
  if (!CleanComponents(text)) return "must not have empty, \".\" or \"..\" components";
  return "";
}

std::string InputDigest(const JobInput& input) {
  if (!input.dataset.empty()) return input.manifest_digest;
  return input.sha256.empty() ? std::string() : "sha256:" + input.sha256;
}

double NodeCache::HitRatio() const {
  const int64_t served = hit_bytes + fetched_bytes;
  return served > 0 ? static_cast<double>(hit_bytes) / static_cast<double>(served) : 0.0;
}

std::string CheckSha256(std::string_view text) {
  if (text.size() != 64) return "must be 64 lower-case hex digits";
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return "must be 64 lower-case hex digits";
    }
  }
  return "";
}

std::string CheckDatasetSource(std::string_view text) {
  std::string_view scheme;
  std::string_view rest;
  if (std::string problem = SplitUri(text, &scheme, &rest); !problem.empty()) return problem;
  if (text.back() != '/') return "must end in '/' (objects' URIs are source + path)";
  if (!rest.empty() && !CleanComponents(rest.substr(0, rest.size() - 1))) {
    return "must not have empty, \".\" or \"..\" path components";
  }
  if (scheme == "file" && rest.empty()) return "must not be the file system root";
  return "";
}

std::string CheckObjectUri(std::string_view text) {
  std::string_view scheme;
  std::string_view rest;
  if (std::string problem = SplitUri(text, &scheme, &rest); !problem.empty()) return problem;
  if (rest.empty() || text.back() == '/') return "must name one object (not end in '/')";
  if (!CleanComponents(rest)) return "must not have empty, \".\" or \"..\" path components";
  return "";
}

}  // namespace ferry::fleet
