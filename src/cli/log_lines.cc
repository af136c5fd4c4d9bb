#include "cli/log_lines.h"

namespace ferry::cli {

std::string LogLinePrefixer::Prefix(const Key& key) const {
  const auto& [attempt, task, stream] = key;
  std::string prefix = "[task " + std::to_string(task);
  if (attempt > 1) prefix += " attempt " + std::to_string(attempt);
  return prefix + " " + stream + "] ";
}

std::string LogLinePrefixer::Add(int attempt, int task, std::string_view stream,
                                 std::string_view data) {
  std::string out;
  // A later attempt of the same task means the earlier one has ended.
  for (auto it = partial_.begin(); it != partial_.end();) {
    const auto& [kept_attempt, kept_task, kept_stream] = it->first;
    if (kept_task == task && kept_stream == stream && kept_attempt < attempt) {
      out += Prefix(it->first) + it->second + "\n";
      it = partial_.erase(it);
    } else {
      ++it;
    }
  }
  Key key{attempt, task, std::string(stream)};
  std::string& pending = partial_[key];
  size_t start = 0;
  for (size_t newline = data.find('\n'); newline != std::string_view::npos;
       newline = data.find('\n', start)) {
    out += Prefix(key);
    out += pending;
    pending.clear();
    out.append(data.substr(start, newline + 1 - start));
    start = newline + 1;
  }
  pending.append(data.substr(start));
  if (pending.empty()) partial_.erase(key);
  return out;
}

std::string LogLinePrefixer::Flush(std::string_view stream) {
  std::string out;
  for (auto it = partial_.begin(); it != partial_.end();) {
    if (std::get<2>(it->first) != stream) {
      ++it;
      continue;
    }
    out += Prefix(it->first) + it->second + "\n";
    it = partial_.erase(it);
  }
  return out;
}

}  // namespace ferry::cli
