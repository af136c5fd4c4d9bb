// The version, state and GRES vocabulary of include/ferry/fleet/slurm.h.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

#include "ferry/fleet/slurm.h"

namespace ferry::fleet::slurm {

namespace {

std::string Upper(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

bool ParseCount(std::string_view text, int64_t* value) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size() && *value >= 0;
}

}  // namespace

const std::vector<ApiVersion>& KnownApiVersions() {
  static const std::vector<ApiVersion> kVersions = {{36}, {37}, {38}, {39}, {40}, {41}, {42}};
  return kVersions;
}

Result<ApiVersion> ParseApiVersion(std::string_view text) {
  std::string_view rest = text;
  if (!rest.empty() && rest.front() == 'v') rest.remove_prefix(1);
  int64_t number = 0;
  if (rest.substr(0, 4) != "0.0." || !ParseCount(rest.substr(4), &number) || number > 999) {
    return Status::Invalid("not a slurmrestd API version (want v0.0.N): \"" + std::string(text) +
                           "\"");
  }
  return ApiVersion{static_cast<int>(number)};
}

std::string_view ToString(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSuspended:
      return "SUSPENDED";
    case JobState::kCompleting:
      return "COMPLETING";
    case JobState::kCompleted:
      return "COMPLETED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kTimeout:
      return "TIMEOUT";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kNodeFail:
      return "NODE_FAIL";
    case JobState::kPreempted:
      return "PREEMPTED";
    case JobState::kOutOfMemory:
      return "OUT_OF_MEMORY";
    case JobState::kBootFail:
      return "BOOT_FAIL";
    case JobState::kDeadline:
      return "DEADLINE";
    case JobState::kRequeued:
      return "REQUEUED";
    case JobState::kUnknown:
      break;
  }
  return "UNKNOWN";
}

JobState ParseJobState(std::string_view text) {
  // "CANCELLED by 1000" (scontrol, v0.0.36) keeps only the first word.
  text = Trim(text);
  text = text.substr(0, text.find(' '));
  const std::string word = Upper(text);
  struct Entry {
    const char* long_name;
    const char* short_name;
    JobState state;
  };
  static const Entry kStates[] = {
      {"PENDING", "PD", JobState::kPending},
      {"RUNNING", "R", JobState::kRunning},
      {"SUSPENDED", "S", JobState::kSuspended},
      {"COMPLETING", "CG", JobState::kCompleting},
      {"COMPLETED", "CD", JobState::kCompleted},
      {"FAILED", "F", JobState::kFailed},
      {"TIMEOUT", "TO", JobState::kTimeout},
      {"CANCELLED", "CA", JobState::kCancelled},
      {"NODE_FAIL", "NF", JobState::kNodeFail},
      {"PREEMPTED", "PR", JobState::kPreempted},
      {"OUT_OF_MEMORY", "OOM", JobState::kOutOfMemory},
      {"BOOT_FAIL", "BF", JobState::kBootFail},
      {"DEADLINE", "DL", JobState::kDeadline},
      {"REQUEUED", "RQ", JobState::kRequeued},
      {"REQUEUE_HOLD", "RH", JobState::kRequeued},
      {"REQUEUE_FED", "RF", JobState::kRequeued},
      // Allocated, nodes still booting: nothing of the job runs yet.
      {"CONFIGURING", "CF", JobState::kPending},
      {"RESV_DEL_HOLD", "RD", JobState::kPending},
      // Running, in a phase Ferry does not distinguish.
      {"SIGNALING", "SI", JobState::kRunning},
      {"RESIZING", "RS", JobState::kRunning},
      {"STOPPED", "ST", JobState::kRunning},
      {"STAGE_OUT", "SO", JobState::kCompleting},
      {"SPECIAL_EXIT", "SE", JobState::kFailed},
      {"REVOKED", "RV", JobState::kCancelled},
  };
  for (const Entry& entry : kStates) {
    if (word == entry.long_name || word == entry.short_name) return entry.state;
  }
  return JobState::kUnknown;
}

bool IsFinished(JobState state) {
  switch (state) {
    case JobState::kCompleted:
    case JobState::kFailed:
    case JobState::kTimeout:
    case JobState::kCancelled:
    case JobState::kNodeFail:
    case JobState::kPreempted:
    case JobState::kOutOfMemory:
    case JobState::kBootFail:
    case JobState::kDeadline:
      return true;
    default:
      return false;
  }
}

Result<std::vector<Gres>> ParseGresList(std::string_view text) {
  std::vector<Gres> out;
  text = Trim(text);
  if (text.empty() || text == "(null)" || text == "N/A") return out;
  // Entries are comma separated, but "(IDX:0,2-3)" holds commas too.
  std::vector<std::string_view> entries;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      entries.push_back(Trim(text.substr(start, i - start)));
      start = i + 1;
    } else if (text[i] == '(') {
      ++depth;
    } else if (text[i] == ')') {
      if (--depth < 0) break;
    }
  }
  if (depth != 0)
    return Status::Invalid("unbalanced parentheses in GRES \"" + std::string(text) + "\"");
  for (std::string_view entry : entries) {
    // "gres:" / "gres/" prefixes come from tres_per_node.
    if (entry.substr(0, 5) == "gres:" || entry.substr(0, 5) == "gres/") entry.remove_prefix(5);
    entry = entry.substr(0, entry.find('('));
    if (entry.empty()) return Status::Invalid("empty entry in GRES \"" + std::string(text) + "\"");
    std::vector<std::string_view> parts;
    size_t from = 0;
    while (true) {
      size_t colon = entry.find(':', from);
      parts.push_back(entry.substr(from, colon == std::string_view::npos ? colon : colon - from));
      if (colon == std::string_view::npos) break;
      from = colon + 1;
    }
    Gres gres;
    gres.name = std::string(parts[0]);
    int64_t count = 0;
    // name[:type][:count]; a missing count is 1 ("gpu:h200" in a request).
    if (parts.size() == 1) {
      gres.count = 1;
    } else if (parts.size() == 2) {
      if (ParseCount(parts[1], &count)) {
        gres.count = count;
      } else {
        gres.type = std::string(parts[1]);
        gres.count = 1;
      }
    } else if (parts.size() == 3 && ParseCount(parts[2], &count)) {
      gres.type = std::string(parts[1]);
      gres.count = count;
    } else {
      return Status::Invalid("unreadable GRES entry \"" + std::string(entry) + "\"");
    }
    if (gres.name.empty())
      return Status::Invalid("GRES entry without a name in \"" + std::string(text) + "\"");
    out.push_back(std::move(gres));
  }
  return out;
}

Result<std::vector<std::string>> ExpandHostList(std::string_view list) {
  std::vector<std::string> out;
  auto bad = [&](const std::string& why) {
    return Status::Invalid("slurm host list \"" + std::string(list) + "\": " + why);
  };
  size_t at = 0;
  while (at < list.size()) {
    // One entry: a prefix, then optionally [ranges], then a suffix up to the next top-level comma.
    size_t end = at;
    int depth = 0;
    while (end < list.size() && (depth > 0 || list[end] != ',')) {
      if (list[end] == '[') ++depth;
      if (list[end] == ']' && --depth < 0) return bad("unbalanced ']'");
      ++end;
    }
    if (depth != 0) return bad("unbalanced '['");
    const std::string_view entry = list.substr(at, end - at);
    at = end + 1;
    if (entry.empty()) continue;
    const size_t open = entry.find('[');
    if (open == std::string_view::npos) {
      out.emplace_back(entry);
      continue;
    }
    const size_t close = entry.find(']', open);
    const std::string prefix(entry.substr(0, open));
    const std::string suffix(entry.substr(close + 1));
    if (suffix.find('[') != std::string::npos) return bad("more than one range in one name");
    std::string_view ranges = entry.substr(open + 1, close - open - 1);
    if (ranges.empty()) return bad("an empty range");
    while (!ranges.empty()) {
      const size_t comma = ranges.find(',');
      std::string_view range = ranges.substr(0, comma);
      ranges = comma == std::string_view::npos ? std::string_view() : ranges.substr(comma + 1);
      const size_t dash = range.find('-');
      const std::string_view low = range.substr(0, dash);
      const std::string_view high = dash == std::string_view::npos ? low : range.substr(dash + 1);
      int64_t from = 0, to = 0;
      if (!ParseCount(low, &from) || !ParseCount(high, &to) || to < from) {
        return bad("bad range \"" + std::string(range) + "\"");
      }
      if (to - from > 100'000) return bad("range too large");
      const size_t width = low.size();  // "01-10": zero-padded to two digits
      for (int64_t n = from; n <= to; ++n) {
        std::string number = std::to_string(n);
        if (number.size() < width) number.insert(0, width - number.size(), '0');
        out.push_back(prefix + number + suffix);
      }
    }
  }
  return out;
}

bool JobFilter::Matches(const Job& job) const {
  return job.name.starts_with(name_prefix) && job.comment.starts_with(comment_prefix);
}

}  // namespace ferry::fleet::slurm
