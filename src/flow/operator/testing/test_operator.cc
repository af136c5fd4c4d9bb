// A test operator built with the C++ helper (ferry/flow/operator.h). Its
// config picks what it does:
//   {"mode": "relay", "repeat": 1}   sends each input on "out" as it is (repeat times),
//                                    adding "<id>.values" (first column's address)
//   {"mode": "source", "device": "cpu"|"opencl"|"cuda", "rows": N, "delay_ms": 0}
//                                    on each input, fills N int64 values start+i
//                                    (start = 1000 * sequence) on the device with a
//                                    kernel and sends them on "out" with the event
//   {"mode": "sum"}                  sums the int64 column of each input where it
//                                    lives (a kernel on a device) and sends {"sum"}
//                                    with the input's metadata, "device" and "had_event"
//   {"mode": "fail", "fail_on": "init"|"event"|"throw"|"bad_output"}
//   "stop_after": N                  (any mode) returns STOP after N inputs
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>

#include "exchange/device/testing/kernels.h"
#include "ferry/flow/operator.h"

namespace {

using ferry::Metadata;
using ferry::RecordBatch;
using ferry::RecordBatchPtr;
using ferry::Result;
using ferry::Status;
using ferry::device::DeviceBatch;
using ferry::device::DeviceType;
using ferry::flow::OperatorStatus;

std::string Address(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

Result<RecordBatchPtr> Int64Batch(const std::string& name, ferry::BufferPtr values, int64_t rows) {
  auto column = std::make_shared<ferry::ArrayData>();
  column->type = ferry::int64();
  column->length = rows;
  column->buffers = {nullptr, std::move(values)};
  auto schema = std::make_shared<ferry::Schema>();
  schema->fields.push_back(ferry::field(name, ferry::int64(), false));
  return RecordBatch::Make(schema, rows, {column});
}

class TestOperator : public ferry::flow::Operator {
 public:
  Status Init(const std::string& config_json) override {
    auto config = nlohmann::json::parse(config_json, nullptr, false);
    if (!config.is_object()) return Status::Invalid("the config is not a JSON object");
    mode_ = config.value("mode", "relay");
    fail_on_ = config.value("fail_on", "");
    device_name_ = config.value("device", "cpu");
    rows_ = config.value("rows", int64_t{1024});
    repeat_ = config.value("repeat", 1);
    delay_ms_ = config.value("delay_ms", 0);
    stop_after_ = config.value("stop_after", int64_t{0});
    if (mode_ == "fail" && fail_on_ == "init") return Status::Invalid("configured to fail at init");
    if (mode_ == "source") {
      FERRY_ASSIGN_OR_RAISE(DeviceType type, ferry::device::DeviceTypeFromName(device_name_));
      FERRY_ASSIGN_OR_RAISE(device_, GetDevice(type, 0));
    }
    return Status::OK();
  }

  Result<OperatorStatus> OnInput(const std::string& id, const DeviceBatch& input,
                                 const Metadata& metadata) override {
    ++inputs_;
    if (mode_ == "relay") {
      Metadata out = metadata;
      const auto& values =
          input.batch->num_columns() > 0 ? input.batch->column(0)->buffers[1] : ferry::BufferPtr();
      out.emplace_back(this->id() + ".values", Address(values ? values->data() : nullptr));
      for (int i = 0; i < repeat_; ++i) FERRY_RETURN_NOT_OK(SendOutput("out", input, out));
    } else if (mode_ == "source") {
      FERRY_RETURN_NOT_OK(Produce());
    } else if (mode_ == "sum") {
      FERRY_RETURN_NOT_OK(Sum(input, metadata));
    } else if (mode_ == "fail") {
      if (fail_on_ == "throw") throw std::runtime_error("thrown on purpose");
      if (fail_on_ == "bad_output") {
        FERRY_RETURN_NOT_OK(SendOutput("no_such_output", input, {}));
      }
      return Status::Invalid("configured to fail on input '" + id + "'");
    }
    if (stop_after_ > 0 && inputs_ >= stop_after_) return OperatorStatus::kStop;
    return OperatorStatus::kContinue;
  }

 private:
  Result<ferry::device::testing::Kernels*> KernelsFor(ferry::device::Device* device) {
    if (!kernels_) {
      FERRY_ASSIGN_OR_RAISE(kernels_, ferry::device::testing::KernelsFor(device));
    }
    return kernels_.get();
  }

  Status Produce() {
    const int64_t start = 1000 * static_cast<int64_t>(sequence());
    FERRY_ASSIGN_OR_RAISE(ferry::BufferPtr values, device_->Allocate(rows_ * 8));
    ferry::device::EventPtr event;
    if (device_->host_accessible()) {
      auto* data = reinterpret_cast<int64_t*>(values->mutable_data());
      for (int64_t i = 0; i < rows_; ++i) data[i] = start + i;
    } else {
      FERRY_ASSIGN_OR_RAISE(ferry::device::Queue * queue, GetQueue(device_));
      FERRY_ASSIGN_OR_RAISE(auto* kernels, KernelsFor(device_));
      if (delay_ms_ > 0) {
        FERRY_RETURN_NOT_OK(kernels->Delay(queue, std::chrono::milliseconds(delay_ms_)));
      }
      FERRY_RETURN_NOT_OK(kernels->FillSequence(queue, values->mutable_data(), rows_, start));
      FERRY_ASSIGN_OR_RAISE(event, queue->RecordEvent());
    }
    FERRY_ASSIGN_OR_RAISE(RecordBatchPtr batch, Int64Batch("values", values, rows_));
    return SendOutput("out", DeviceBatch{batch, device_, event},
                      {{"start", std::to_string(start)},
                       {"rows", std::to_string(rows_)},
                       {"device_object", Address(device_)}});
  }

  Status Sum(const DeviceBatch& input, const Metadata& metadata) {
    if (input.batch->num_columns() != 1) return Status::Invalid("sum wants one int64 column");
    const auto& column = input.batch->column(0);
    int64_t total = 0;
    if (input.device->host_accessible()) {
      const int64_t* values = column->GetValues<int64_t>(1);
      for (int64_t i = 0; i < column->length; ++i) total += values[i];
    } else {
      // The helper already enqueued the wait on this queue: the kernel runs
      // after the producer's.
      FERRY_ASSIGN_OR_RAISE(ferry::device::Queue * queue, GetQueue(input.device));
      FERRY_ASSIGN_OR_RAISE(auto* kernels, KernelsFor(input.device));
      FERRY_ASSIGN_OR_RAISE(total,
                            kernels->Sum(queue, column->GetValues<int64_t>(1), column->length));
    }
    FERRY_ASSIGN_OR_RAISE(ferry::BufferPtr buffer, ferry::Buffer::Allocate(8));
    *reinterpret_cast<int64_t*>(buffer->mutable_data()) = total;
    FERRY_ASSIGN_OR_RAISE(RecordBatchPtr batch, Int64Batch("sum", buffer, 1));
    Metadata out = metadata;
    out.emplace_back("device", ferry::device::DeviceTypeName(input.device->type()));
    out.emplace_back("had_event", input.event ? "yes" : "no");
    return SendOutput("out", *batch, out);
  }

  std::string mode_;
  std::string fail_on_;
  std::string device_name_;
  int64_t rows_ = 0;
  int repeat_ = 1;
  int delay_ms_ = 0;
  int64_t stop_after_ = 0;
  int64_t inputs_ = 0;
  ferry::device::Device* device_ = nullptr;
  std::unique_ptr<ferry::device::testing::Kernels> kernels_;
};

}  // namespace

FERRY_EXPORT_OPERATOR(TestOperator)
