// Metrics in the Prometheus text exposition format (version 0.0.4): counters,
// gauges and histograms grouped in families with label names, plus
// collectors that write samples computed when a scrape asks (jobs by state
// read from the store, say). Updating a metric is a relaxed atomic; finding
// the metric of a label set takes the family's lock, so hot paths keep the
// reference With() returns.
//
// Names follow Prometheus' conventions: [a-zA-Z_:][a-zA-Z0-9_:]* for metric
// names, [a-zA-Z_][a-zA-Z0-9_]* (not starting with "__") for label names. An
// invalid name or a repeated family is a programming error: registration
// aborts with a message.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::metrics {

bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);

// A sample value as the text format writes it: integers exactly, other
// values in the shortest form that reads back the same; NaN, +Inf, -Inf.
std::string FormatValue(double value);
// A label value between double quotes: backslash, quote and newline escaped.
void AppendLabelValue(std::string_view value, std::string* out);

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

// Writes families and samples in the text format. Collectors get one.
class Writer {
 public:
  // Starts a family: "# HELP" and "# TYPE" lines. `type` is counter, gauge,
  // histogram or untyped.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const LabelPairs& labels, double value);
  // Text already in the exposition format (another registry's Render).
  void Append(std::string_view text) { text_.append(text); }
  const std::string& text() const { return text_; }
  std::string Take() { return std::move(text_); }

 private:
  std::string text_;
};

class Counter {
 public:
  void Add(double amount = 1) noexcept { value_.fetch_add(amount, std::memory_order_relaxed); }
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double value) noexcept { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount) noexcept { value_.fetch_add(amount, std::memory_order_relaxed); }
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `upper_bounds`: increasing, finite; +Inf is implicit.
  explicit Histogram(const std::vector<double>* upper_bounds);
  void Observe(double value) noexcept;

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// Bucket bounds: `count` bounds from `start`, each `factor` times the last.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

namespace internal {
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;
  virtual void Write(Writer* writer) const = 0;
  const std::string& name() const { return name_; }

 protected:
  LabelPairs Pairs(const std::vector<std::string>& values) const;
  void CheckArity(const std::vector<std::string>& values) const;

  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
};
}  // namespace internal

// The metrics of one name, one per label set.
template <typename M>
class Family final : public internal::FamilyBase {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> bounds = {})
      : FamilyBase(std::move(name), std::move(help), std::move(label_names)),
        bounds_(std::move(bounds)) {}

  // The metric of these label values (in label-name order), created at zero
  // on first use. The reference stays valid as long as the family.
  M& With(const std::vector<std::string>& values = {}) {
    CheckArity(values);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = metrics_.find(values);
    if (it == metrics_.end()) it = metrics_.emplace(values, Make()).first;
    return *it->second;
  }

  void Write(Writer* writer) const override;

 private:
  std::unique_ptr<M> Make() const {
    if constexpr (std::is_same_v<M, Histogram>) {
      return std::make_unique<Histogram>(&bounds_);
    } else {
      return std::make_unique<M>();
    }
  }

  std::vector<double> bounds_;  // histograms only
  mutable std::mutex mutex_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> metrics_;
};

// Written in metrics.cc, for these three kinds only.
template <>
void Family<Histogram>::Write(Writer* writer) const;
extern template class Family<Counter>;
extern template class Family<Gauge>;

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter>& AddCounter(std::string name, std::string help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(std::string name, std::string help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(std::string name, std::string help,
                                  std::vector<std::string> label_names,
                                  std::vector<double> upper_bounds);
  // Called on every Render, after the registered families, in the order
  // added. A collector writes whole families (Writer::Family, then samples).
  void AddCollector(std::function<void(Writer*)> collect);

  // Every family and collector in the text format.
  std::string Render() const;

 private:
  void Claim(const std::string& name);

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<internal::FamilyBase>> families_;
  std::vector<std::function<void(Writer*)>> collectors_;
  std::vector<std::string> names_;
};

// The content type of the text format, for an HTTP response.
inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace ferry::metrics
