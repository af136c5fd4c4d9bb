// The operator library of the operator→operator benchmark (flow_bench.cc,
// `operators` command): one class, two roles chosen by the config.
//
//   {"role": "source", "size": N}  builds one uint8 batch of N bytes in Init;
//                                  on every input event it reads
//                                  CLOCK_MONOTONIC, writes it into the
//                                  metadata ("t") and sends that batch on
//                                  output "data" (no copy: the batch is
//                                  exported as it is, read-only).
//   {"role": "sink", "out": PATH}  reads the clock as soon as an input
//                                  arrives, keeps now - t, checks the length,
//                                  and writes one latency per line to PATH
//                                  when it stops.
//
// The difference is one in-process hand-off: the source's send_output, the
// host's routing and the sink's on_event, with the metadata through the C
// ABI (JSON) as every operator pays it.
#include <time.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/buffer.h"
#include "ferry/exchange/type.h"
#include "ferry/flow/operator.h"

namespace {

using ferry::flow::bench::NowNs;
using ferry::flow::bench::ReadNumber;

// The value of "key" in the flat JSON object the benchmark writes as config
// (strings without escapes, integers); empty when absent.
std::string ConfigValue(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\"");
  if (at == std::string::npos) return {};
  size_t start = json.find(':', at);
  if (start == std::string::npos) return {};
  start = json.find_first_not_of(" \t\n", start + 1);
  if (start == std::string::npos) return {};
  if (json[start] == '"') {
    const size_t end = json.find('"', start + 1);
    return end == std::string::npos ? std::string() : json.substr(start + 1, end - start - 1);
  }
  const size_t end = json.find_first_of(",} \t\n", start);
  return json.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

class BenchOperator : public ferry::flow::Operator {
 public:
  ferry::Status Init(const std::string& config_json) override {
    role_ = ConfigValue(config_json, "role");
    if (role_ == "source") {
      const std::string size = ConfigValue(config_json, "size");
      size_ = size.empty() ? 8 : std::stoll(size);
      FERRY_ASSIGN_OR_RAISE(ferry::BufferPtr buffer, ferry::Buffer::Allocate(size_));
      std::memset(buffer->mutable_data(), 0x5a, static_cast<size_t>(size_));
      auto column = std::make_shared<ferry::ArrayData>();
      column->type = ferry::uint8();
      column->length = size_;
      column->buffers = {nullptr, std::move(buffer)};
      auto schema = std::make_shared<ferry::Schema>();
      schema->fields = {ferry::field("value", ferry::uint8(), false)};
      FERRY_ASSIGN_OR_RAISE(batch_, ferry::RecordBatch::Make(schema, size_, {column}));
      metadata_ = {{"seq", std::string()}, {"t", std::string()}};
      return ferry::Status::OK();
    }
    if (role_ == "sink") {
      out_ = ConfigValue(config_json, "out");
      if (out_.empty()) return ferry::Status::Invalid("bench operator: the sink needs \"out\"");
      latencies_.reserve(1 << 14);
      return ferry::Status::OK();
    }
    return ferry::Status::Invalid("bench operator: unknown role '" + role_ + "'");
  }

  ferry::Result<ferry::flow::OperatorStatus> OnInput(const std::string& id,
                                                     const ferry::device::DeviceBatch& batch,
                                                     const ferry::Metadata& metadata) override {
    if (role_ == "source") {
      ++seq_;
      Write(metadata_[0].second, seq_);
      Write(metadata_[1].second, NowNs());
      FERRY_RETURN_NOT_OK(SendOutput("data", *batch_, metadata_));
      return ferry::flow::OperatorStatus::kContinue;
    }
    const int64_t received = NowNs();
    latencies_.push_back(received - ReadNumber(metadata, "t"));
    if (batch.batch->num_rows() != expected_rows(batch)) ++bad_sizes_;
    return ferry::flow::OperatorStatus::kContinue;
  }

  ferry::Status OnStop(const std::string& reason) override {
    if (role_ != "sink") return ferry::Status::OK();
    FILE* file = std::fopen(out_.c_str(), "w");
    if (file == nullptr) return ferry::Status::IOError("bench operator: cannot write " + out_);
    std::fprintf(file, "bad_sizes %lld\n", static_cast<long long>(bad_sizes_));
    for (int64_t latency : latencies_)
      std::fprintf(file, "%lld\n", static_cast<long long>(latency));
    const bool ok = std::fclose(file) == 0;
    return ok ? ferry::Status::OK() : ferry::Status::IOError("bench operator: writing " + out_);
  }

 private:
  static void Write(std::string& out, int64_t value) {
    out.resize(24);
    const char* end = std::to_chars(out.data(), out.data() + out.size(), value).ptr;
    out.resize(static_cast<size_t>(end - out.data()));
  }
  // The sink checks that the batch is one uint8 column as long as its rows.
  static int64_t expected_rows(const ferry::device::DeviceBatch& batch) {
    if (batch.batch->num_columns() != 1) return -1;
    return batch.batch->column(0)->length;
  }

  std::string role_;
  int64_t size_ = 0;
  int64_t seq_ = 0;
  ferry::RecordBatchPtr batch_;
  ferry::Metadata metadata_;
  std::string out_;
  std::vector<int64_t> latencies_;
  int64_t bad_sizes_ = 0;
};

}  // namespace

FERRY_EXPORT_OPERATOR(BenchOperator)
