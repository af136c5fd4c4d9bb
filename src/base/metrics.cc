#include "ferry/base/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ferry::metrics {
namespace {

[[noreturn]] void Misuse(const std::string& what) {
  std::fprintf(stderr, "ferry: metrics: %s\n", what.c_str());
  std::abort();
}

bool NameChar(char c, bool first, bool colon) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (letter || (colon && c == ':')) return true;
  return !first && c >= '0' && c <= '9';
}

void AppendHelp(std::string_view help, std::string* out) {
  for (const char c : help) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, true)) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, false)) return false;
  }
  return true;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Integers up to 2^53 exactly, without an exponent.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char text[64];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  if (error != std::errc()) return "NaN";
  return std::string(text, end);
}

void AppendLabelValue(std::string_view value, std::string* out) {
  out->push_back('"');
  for (const char c : value) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '"') {
      out->append("\\\"");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

void Writer::Family(std::string_view name, std::string_view type, std::string_view help) {
  text_.append("# HELP ").append(name).push_back(' ');
  AppendHelp(help, &text_);
  text_.append("\n# TYPE ").append(name).push_back(' ');
  text_.append(type).push_back('\n');
}

void Writer::Sample(std::string_view name, const LabelPairs& labels, double value) {
  text_.append(name);
  if (!labels.empty()) {
    text_.push_back('{');
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) text_.push_back(',');
      text_.append(labels[i].first).push_back('=');
      AppendLabelValue(labels[i].second, &text_);
    }
    text_.push_back('}');
  }
  text_.push_back(' ');
  text_.append(FormatValue(value)).push_back('\n');
}

Histogram::Histogram(const std::vector<double>* upper_bounds)
    : bounds_(upper_bounds),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(upper_bounds->size() + 1)) {}

void Histogram::Observe(double value) noexcept {
  const auto bucket = static_cast<size_t>(
      std::lower_bound(bounds_->begin(), bounds_->end(), value) - bounds_->begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.cumulative.resize(bounds_->size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative[i] = running;
  }
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  // The buckets' total, not count_: a scrape racing an Observe must not show
  // a +Inf bucket that disagrees with _count.
  snapshot.count = running;
  return snapshot;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (start <= 0 || factor <= 1 || count < 1)
    Misuse("exponential buckets need start > 0, factor > 1");
  std::vector<double> bounds;
  bounds.reserve(static_cast<size_t>(count));
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

namespace internal {

FamilyBase::FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
    : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {
  if (!IsValidMetricName(name_)) Misuse("invalid metric name '" + name_ + "'");
  for (size_t i = 0; i < label_names_.size(); ++i) {
    if (!IsValidLabelName(label_names_[i])) {
      Misuse("invalid label name '" + label_names_[i] + "' in " + name_);
    }
    if (std::find(label_names_.begin(), label_names_.begin() + static_cast<ptrdiff_t>(i),
                  label_names_[i]) != label_names_.begin() + static_cast<ptrdiff_t>(i)) {
      Misuse("label '" + label_names_[i] + "' repeated in " + name_);
    }
  }
}

LabelPairs FamilyBase::Pairs(const std::vector<std::string>& values) const {
  LabelPairs pairs;
  pairs.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) pairs.emplace_back(label_names_[i], values[i]);
  return pairs;
}

void FamilyBase::CheckArity(const std::vector<std::string>& values) const {
  if (values.size() != label_names_.size()) {
    Misuse(name_ + " takes " + std::to_string(label_names_.size()) + " label values, got " +
           std::to_string(values.size()));
  }
}

}  // namespace internal

template <typename M>
void Family<M>::Write(Writer* writer) const {
  writer->Family(name_, std::is_same_v<M, Counter> ? "counter" : "gauge", help_);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [values, metric] : metrics_)
    writer->Sample(name_, Pairs(values), metric->value());
}

template class Family<Counter>;
template class Family<Gauge>;

template <>
void Family<Histogram>::Write(Writer* writer) const {
  writer->Family(name_, "histogram", help_);
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string bucket = name_ + "_bucket";
  for (const auto& [values, metric] : metrics_) {
    const Histogram::Snapshot snapshot = metric->Read();
    LabelPairs labels = Pairs(values);
    labels.emplace_back("le", "");
    for (size_t i = 0; i < snapshot.cumulative.size(); ++i) {
      labels.back().second = i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf";
      writer->Sample(bucket, labels, static_cast<double>(snapshot.cumulative[i]));
    }
    labels.pop_back();
    writer->Sample(name_ + "_sum", labels, snapshot.sum);
    writer->Sample(name_ + "_count", labels, static_cast<double>(snapshot.count));
  }
}

void Registry::Claim(const std::string& name) {
  // A histogram's series names are taken too.
  for (const std::string& taken : names_) {
    if (taken == name) Misuse("metric family '" + name + "' registered twice");
  }
  names_.push_back(name);
}

Family<Counter>& Registry::AddCounter(std::string name, std::string help,
                                      std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mutex_);
  Claim(name);
  auto family =
      std::make_unique<Family<Counter>>(std::move(name), std::move(help), std::move(label_names));
  Family<Counter>& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help,
                                  std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mutex_);
  Claim(name);
  auto family =
      std::make_unique<Family<Gauge>>(std::move(name), std::move(help), std::move(label_names));
  Family<Gauge>& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help,
                                          std::vector<std::string> label_names,
                                          std::vector<double> upper_bounds) {
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i]) || (i > 0 && upper_bounds[i] <= upper_bounds[i - 1])) {
      Misuse("histogram " + name + ": bucket bounds must be finite and increasing");
    }
  }
  for (const std::string& label : label_names) {
    if (label == "le") Misuse("histogram " + name + ": 'le' is the bucket label");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Claim(name);
  auto family = std::make_unique<Family<Histogram>>(
      std::move(name), std::move(help), std::move(label_names), std::move(upper_bounds));
  Family<Histogram>& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

void Registry::AddCollector(std::function<void(Writer*)> collect) {
  std::lock_guard<std::mutex> lock(mutex_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::Render() const {
  Writer writer;
  std::vector<const internal::FamilyBase*> families;
  std::vector<std::function<void(Writer*)>> collectors;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& family : families_) families.push_back(family.get());
    collectors = collectors_;
  }
  for (const internal::FamilyBase* family : families) family->Write(&writer);
  for (const auto& collect : collectors) collect(&writer);
  return writer.Take();
}

}  // namespace ferry::metrics
