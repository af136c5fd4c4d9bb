// `ferry top` (dataflow_top.h).
#include "cli/dataflow_top.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cli/dataflow_topic.h"
#include "ferry/flow/transport.h"
#include "flow/daemon/daemon.h"

namespace ferry::cli {

std::string FormatBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[unit]);
  return text;
}

namespace {

using nlohmann::json;

std::string FormatRate(const json& value, bool bytes) {
  if (!value.is_number()) return "-";
  const double rate = value.get<double>();
  if (bytes) return FormatBytes(rate) + "/s";
  char text[32];
  std::snprintf(text, sizeof(text), rate < 10 ? "%.1f" : "%.0f", rate);
  return text;
}

std::string Cell(const json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

// Columns padded to their widest cell (the last one is not padded).
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string text;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 2, ' ');
    }
    text += line + "\n";
  }
  return text;
}

int64_t SumOf(const json& ports, const char* field) {
  int64_t total = 0;
  if (!ports.is_object()) return 0;
  for (const auto& [id, port] : ports.items()) total += port.value(field, int64_t{0});
  return total;
}

}  // namespace

std::map<int64_t, GroupUsage> ReadGroupUsage(const std::vector<int64_t>& groups) {
  std::map<int64_t, GroupUsage> usage;
  const std::set<int64_t> wanted(groups.begin(), groups.end());
  if (wanted.empty()) return usage;
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return usage;
  while (dirent* entry = ::readdir(proc)) {
    const std::string name = entry->d_name;
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      continue;
    }
    std::ifstream file("/proc/" + name + "/stat");
    std::string text;
    if (!std::getline(file, text)) continue;  // gone meanwhile
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 1));
    std::vector<std::string> values;
    for (std::string value; fields >> value && values.size() < 22;) values.push_back(value);
    if (values.size() < 22) continue;
    const int64_t group = std::strtoll(values[2].c_str(), nullptr, 10);
    if (wanted.count(group) == 0) continue;
    GroupUsage& total = usage[group];
    total.cpu_ticks += std::strtoll(values[11].c_str(), nullptr, 10) +
                       std::strtoll(values[12].c_str(), nullptr, 10);
    total.rss_bytes += std::strtoll(values[21].c_str(), nullptr, 10) * page;
    total.processes += 1;
  }
  ::closedir(proc);
  return usage;
}

json TopRows(const TopSample* before, const TopSample& after, int64_t ticks_per_second) {
  const double seconds =
      before == nullptr ? 0 : std::chrono::duration<double>(after.at - before->at).count();
  const json edges = after.stats.value("edges", json::array());
  std::map<std::string, json> earlier;
  if (before != nullptr) {
    for (const auto& node : before->stats.value("nodes", json::array())) {
      earlier[node.value("id", "")] = node;
    }
  }
  json rows = json::array();
  for (const auto& node : after.stats.value("nodes", json::array())) {
    const std::string id = node.value("id", "");
    const int64_t pid = node.value("pid", int64_t{-1});
    json row = {{"id", id},
                {"state", node.value("state", "")},
                {"pid", pid},
                {"restarts", node.value("restarts", 0)}};
    row["cpu_percent"] = nullptr;
    row["rss_bytes"] = nullptr;
    row["processes"] = 0;
    if (auto now = after.usage.find(pid); pid > 0 && now != after.usage.end()) {
      row["rss_bytes"] = now->second.rss_bytes;
      row["processes"] = now->second.processes;
      if (before != nullptr && seconds > 0) {
        if (auto then = before->usage.find(pid); then != before->usage.end()) {
          const double ticks = static_cast<double>(now->second.cpu_ticks - then->second.cpu_ticks);
          row["cpu_percent"] =
              std::max(0.0, ticks / static_cast<double>(ticks_per_second) / seconds * 100);
        }
      }
    }
    const json outputs = node.value("outputs", json::object());
    const int64_t messages = SumOf(outputs, "messages");
    const int64_t bytes = SumOf(outputs, "bytes");
    row["messages"] = messages;
    row["bytes"] = bytes;
    row["bytes_copied"] = SumOf(outputs, "bytes_copied");
    row["messages_per_s"] = nullptr;
    row["bytes_per_s"] = nullptr;
    // Live rates from the taps; else only for an instance whose own traffic
    // is in the counters (a running one that has not reported would show a
    // misleading zero).
    const bool live = node.value("running_instance_reported", false);
    auto tapped_now = after.tapped.find(id);
    const bool tapped = before != nullptr && seconds > 0 && tapped_now != after.tapped.end() &&
                        before->tapped.count(id) > 0;
    if (tapped) {
      const TappedCount& then = before->tapped.at(id);
      row["messages_per_s"] =
          static_cast<double>(tapped_now->second.messages - then.messages) / seconds;
      row["bytes_per_s"] = static_cast<double>(tapped_now->second.bytes - then.bytes) / seconds;
    } else if (auto then = earlier.find(id); live && then != earlier.end() && seconds > 0) {
      const json old_outputs = then->second.value("outputs", json::object());
      row["messages_per_s"] =
          static_cast<double>(messages - SumOf(old_outputs, "messages")) / seconds;
      row["bytes_per_s"] = static_cast<double>(bytes - SumOf(old_outputs, "bytes")) / seconds;
    }
    int64_t drops = 0, queued = 0;
    bool queued_known = true;
    for (const auto& edge : edges) {
      if (edge.value("consumer", "") != id) continue;
      drops += edge.value("drops", int64_t{0});
      const json waiting = edge.value("queued", json());
      if (waiting.is_number_integer()) {
        queued += waiting.get<int64_t>();
      } else {
        queued_known = false;
      }
    }
    row["drops"] = drops;
    row["queued"] = queued_known ? json(queued) : json();
    rows.push_back(std::move(row));
  }
  return {{"dataflow", after.stats.value("dataflow", "")},
          {"phase", after.stats.value("phase", "")},
          {"seconds", seconds},
          {"nodes", std::move(rows)},
          {"edges", edges}};
}

std::string FormatTop(const json& dataflow) {
  std::vector<std::vector<std::string>> rows = {{"NODE", "STATE", "PID", "CPU%", "MEM", "MSG/S",
                                                 "BYTES/S", "SENT", "COPIED", "DROPS", "QUEUED",
                                                 "RESTARTS"}};
  for (const auto& node : dataflow.value("nodes", json::array())) {
    const json cpu = node.value("cpu_percent", json());
    char cpu_text[32] = "-";
    if (cpu.is_number()) std::snprintf(cpu_text, sizeof(cpu_text), "%.1f", cpu.get<double>());
    const json rss = node.value("rss_bytes", json());
    const int64_t pid = node.value("pid", int64_t{-1});
    rows.push_back(
        {node.value("id", ""), node.value("state", ""), pid > 0 ? std::to_string(pid) : "-",
         cpu_text, rss.is_number() ? FormatBytes(rss.get<double>()) : "-",
         FormatRate(node.value("messages_per_s", json()), false),
         FormatRate(node.value("bytes_per_s", json()), true), Cell(node.value("messages", json())),
         FormatBytes(node.value("bytes_copied", 0.0)), Cell(node.value("drops", json())),
         Cell(node.value("queued", json())), Cell(node.value("restarts", json()))});
  }
  return "dataflow " + dataflow.value("dataflow", std::string()) + " (" +
         dataflow.value("phase", std::string()) + ")\n" + Table(rows);
}

namespace {

// Taps on every output of one run, drained on a thread of their own so that
// their queues never fill between two samples. An output whose producer is
// gone (or not accepting yet) is tried again every second.
class OutputTaps {
 public:
  explicit OutputTaps(const std::string& run_id) {
    auto described = flow::daemon::DescribeDataflow(run_id, std::chrono::seconds(2));
    if (!described.ok()) return;
    for (const auto& node : described->description.value("nodes", json::array())) {
      for (const auto& output : node.value("outputs", json::array())) {
        auto tap = std::make_unique<Tap>();
        tap->node = node.value("id", "");
        tap->channel = output.value("channel", "");
        taps_.push_back(std::move(tap));
        counts_[taps_.back()->node];  // a tapped node counts from zero
      }
    }
    if (taps_.empty()) return;
    thread_ = std::thread([this] { Drain(); });
    // Counting starts once the taps had their first chance to connect, so a
    // first sample taken now is not followed by a connection that makes the
    // first interval look slow.
    std::unique_lock<std::mutex> lock(mutex_);
    started_.wait_for(lock, std::chrono::seconds(2), [this] { return first_round_done_; });
  }
  ~OutputTaps() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  OutputTaps(const OutputTaps&) = delete;
  OutputTaps& operator=(const OutputTaps&) = delete;

  std::map<std::string, TappedCount> Counts() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return counts_;
  }

 private:
  struct Tap {
    std::string node;
    std::string channel;
    std::unique_ptr<flow::Subscriber> subscriber;
    uint64_t last_sequence = 0;
    std::chrono::steady_clock::time_point retry_at{};
  };

  void Drain() {
    flow::SubscriberOptions options;
    options.queue_capacity = 1024;
    options.overflow = flow::OverflowPolicy::kDropOldest;
    options.connect_timeout = std::chrono::milliseconds(200);
    flow::WaitSet waitset;
    int connected = 0;
    while (!stop_.load()) {
      const auto now = std::chrono::steady_clock::now();
      for (auto& tap : taps_) {
        if (tap->subscriber != nullptr || now < tap->retry_at) continue;
        auto subscriber = flow::Subscriber::Connect(tap->channel, options);
        if (subscriber.ok()) {
          tap->subscriber = std::move(subscriber).MoveValueUnsafe();
          tap->last_sequence = 0;
          waitset.Add(tap->subscriber.get());
          ++connected;
        } else {
          tap->retry_at = now + std::chrono::seconds(1);
        }
      }
      if (!first_round_done_) {
        std::lock_guard<std::mutex> lock(mutex_);
        first_round_done_ = true;
        started_.notify_all();
      }
      if (connected == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      auto ready = waitset.Wait(std::chrono::milliseconds(100));
      if (!ready.ok()) break;
      for (auto& tap : taps_) {
        if (tap->subscriber == nullptr) continue;
        int64_t messages = 0, bytes = 0;
        for (int taken = 0; taken < 4096; ++taken) {
          auto message = tap->subscriber->TryReceive();
          if (!message.ok() || (!message->has_value() && tap->subscriber->publisher_gone())) {
            waitset.Remove(tap->subscriber.get());
            --connected;
            tap->subscriber.reset();  // a restarted producer is a new publisher
            tap->retry_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
            break;
          }
          if (!message->has_value()) break;
          const flow::Message& received = **message;
          messages += tap->last_sequence != 0 && received.sequence > tap->last_sequence
                          ? static_cast<int64_t>(received.sequence - tap->last_sequence)
                          : 1;
          tap->last_sequence = received.sequence;
          if (received.batch != nullptr) bytes += BatchBytes(*received.batch);
        }
        if (messages > 0) {
          std::lock_guard<std::mutex> lock(mutex_);
          counts_[tap->node].messages += messages;
          counts_[tap->node].bytes += bytes;
        }
      }
    }
  }

  std::vector<std::unique_ptr<Tap>> taps_;
  mutable std::mutex mutex_;
  std::map<std::string, TappedCount> counts_;  // GUARDED_BY(mutex_)
  std::condition_variable started_;
  bool first_round_done_ = false;  // GUARDED_BY(mutex_) once the thread runs
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One sample of each run; a run that is gone is left out (and named in `gone`).
std::vector<TopSample> SampleRuns(const std::vector<std::string>& runs,
                                  std::map<std::string, std::unique_ptr<OutputTaps>>* taps,
                                  std::vector<std::string>* gone) {
  std::vector<TopSample> samples;
  for (const auto& run : runs) {
    auto stats = flow::daemon::DataflowStats(run, std::chrono::seconds(2));
    if (!stats.ok()) {
      if (gone != nullptr) gone->push_back(run + ": " + stats.status().message());
      continue;
    }
    TopSample sample;
    sample.stats = std::move(stats).MoveValueUnsafe();
    std::vector<int64_t> groups;
    for (const auto& node : sample.stats.value("nodes", json::array())) {
      if (node.value("pid", int64_t{-1}) > 0) groups.push_back(node["pid"].get<int64_t>());
    }
    sample.usage = ReadGroupUsage(groups);
    if (taps != nullptr) {
      auto& run_taps = (*taps)[run];
      if (run_taps == nullptr) run_taps = std::make_unique<OutputTaps>(run);
      sample.tapped = run_taps->Counts();
    }
    sample.at = std::chrono::steady_clock::now();
    samples.push_back(std::move(sample));
  }
  return samples;
}

const TopSample* Find(const std::vector<TopSample>& samples, const std::string& run) {
  for (const auto& sample : samples) {
    if (sample.stats.value("dataflow", "") == run) return &sample;
  }
  return nullptr;
}

}  // namespace

int RunTop(const TopOptions& options, std::ostream& out, std::ostream& err) {
  const int64_t ticks = ::sysconf(_SC_CLK_TCK);
  auto targets = [&]() -> std::vector<std::string> {
    if (!options.run_id.empty()) return {options.run_id};
    std::vector<std::string> runs;
    auto listed = flow::daemon::ListDataflows(std::chrono::seconds(2));
    if (listed.ok()) {
      for (const auto& run : *listed) runs.push_back(run.run_id);
    }
    return runs;
  };
  if (!options.run_id.empty()) {
    if (Status name = flow::daemon::CheckRunName(options.run_id); !name.ok()) {
      err << "ferry: " << name.message() << "\n";
      return 1;
    }
  }
  std::vector<std::string> gone;
  std::map<std::string, std::unique_ptr<OutputTaps>> taps;
  auto* use_taps = options.taps ? &taps : nullptr;
  std::vector<TopSample> previous = SampleRuns(targets(), use_taps, &gone);
  if (!options.run_id.empty() && previous.empty()) {
    err << "ferry: " << (gone.empty() ? options.run_id : gone.front()) << "\n";
    return 1;
  }
  for (bool first = true;; first = false) {
    std::this_thread::sleep_for(options.once
                                    ? std::min(options.interval, std::chrono::milliseconds(1000))
                                    : (first ? std::chrono::milliseconds(300) : options.interval));
    std::vector<TopSample> current = SampleRuns(targets(), use_taps, nullptr);
    json document = {{"dataflows", json::array()}};
    std::string screen;
    for (const auto& sample : current) {
      const json rows = TopRows(Find(previous, sample.stats.value("dataflow", "")), sample, ticks);
      screen += FormatTop(rows) + "\n";
      document["dataflows"].push_back(rows);
    }
    if (options.json) {
      out << (options.once ? document.dump(2) : document.dump()) << "\n";
    } else {
      if (!options.once) out << "\x1b[H\x1b[2J";  // home, clear
      out << (current.empty() ? "no dataflows running\n" : screen);
    }
    out.flush();
    if (options.once) return 0;
    if (!options.run_id.empty() && current.empty()) {
      if (!options.json) out << "dataflow " << options.run_id << " has ended\n";
      return 0;
    }
    previous = std::move(current);
  }
}

}  // namespace ferry::cli
