// ProviderParams: a provider kind's table of settings, read from a config's
// text params with one error style for every kind.
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "ferry/fleet/provider.h"

namespace ferry::fleet {

namespace {

Status Bad(const std::string& key, const std::string& expected, const std::string& text) {
  return Status::Invalid("params." + key + ": expected " + expected + ", got '" + text + "'");
}

template <typename Int>
Status ParseWhole(const std::string& key, const std::string& text, Int min, Int max, Int* out) {
  Int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < min ||
      value > max) {
    const std::string range =
        max == std::numeric_limits<Int>::max()
            ? "an integer >= " + std::to_string(min)
            : "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    return Bad(key, range, text);
  }
  *out = value;
  return Status::OK();
}

}  // namespace

ProviderParams::ProviderParams(std::string kind) : kind_(std::move(kind)) {}

ProviderParams& ProviderParams::Add(std::string key,
                                    std::function<Status(const std::string&)> set) {
  entries_.push_back({std::move(key), std::move(set)});
  return *this;
}

ProviderParams& ProviderParams::Text(std::string key, std::string* out) {
  return Add(std::move(key), [out](const std::string& value) {
    *out = value;
    return Status::OK();
  });
}

ProviderParams& ProviderParams::Number(const std::string& key, double* out) {
  return Add(key, [key, out](const std::string& text) {
    double value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
        !std::isfinite(value) || value < 0) {
      return Bad(key, "a number >= 0", text);
    }
    *out = value;
    return Status::OK();
  });
}

ProviderParams& ProviderParams::Integer(const std::string& key, int64_t* out, int64_t min,
                                        int64_t max) {
  return Add(key, [key, out, min, max](const std::string& text) {
    return ParseWhole(key, text, min, max, out);
  });
}

ProviderParams& ProviderParams::Integer(const std::string& key, int* out, int min, int max) {
  return Add(key, [key, out, min, max](const std::string& text) {
    return ParseWhole(key, text, min, max, out);
  });
}

ProviderParams& ProviderParams::Integer(const std::string& key, uint64_t* out) {
  return Add(key, [key, out](const std::string& text) {
    return ParseWhole<uint64_t>(key, text, 0, std::numeric_limits<uint64_t>::max(), out);
  });
}

Status ProviderParams::Read(const sched::ProviderConfig& config) const {
  const std::string prefix = "provider '" + config.name + "': ";
  for (const auto& [key, value] : config.params) {
    const Entry* entry = nullptr;
    for (const Entry& e : entries_) {
      if (e.key == key) entry = &e;
    }
    if (entry == nullptr) {
      std::string known;
      for (size_t i = 0; i < entries_.size(); ++i) {
        if (i > 0) known += i + 1 == entries_.size() ? " or " : ", ";
        known += entries_[i].key;
      }
      return Status::Invalid("params." + key + ": unknown setting of the " + kind_ +
                             " provider (expected " + known + ")")
          .WithPrefix(prefix);
    }
    Status status = entry->set(value);
    if (!status.ok()) return status.WithPrefix(prefix);
  }
  return Status::OK();
}

}  // namespace ferry::fleet
