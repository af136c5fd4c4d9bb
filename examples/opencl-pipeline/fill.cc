// Operator "fill": on every tick, fills `rows` int64 values (start, start+1,
// ...) in memory of the configured device with a kernel, and sends them on
// "values" with the event recorded after the kernel. Nothing waits here: the
// consumer waits on the event. Stops after `batches` batches.
//
//   config: {device: opencl | cuda | cpu, device_id: 0, rows: 262144, batches: 5}
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "ferry/flow/operator.h"
#include "kernels.h"

namespace {

using ferry::Result;
using ferry::Status;
using ferry::flow::OperatorStatus;

class Fill : public ferry::flow::Operator {
 public:
  Status Init(const std::string& config_json) override {
    auto config = nlohmann::json::parse(config_json, nullptr, false);
    if (!config.is_object()) return Status::Invalid("fill: the config is not a mapping");
    const std::string device = config.value("device", "opencl");
    rows_ = config.value("rows", int64_t{262144});
    batches_ = config.value("batches", int64_t{5});
    if (rows_ < 1 || batches_ < 1) return Status::Invalid("fill: rows and batches must be >= 1");
    FERRY_ASSIGN_OR_RAISE(auto type, ferry::device::DeviceTypeFromName(device));
    FERRY_ASSIGN_OR_RAISE(device_, GetDevice(type, config.value("device_id", int64_t{0})));
    FERRY_ASSIGN_OR_RAISE(queue_, GetQueue(device_));
    FERRY_ASSIGN_OR_RAISE(kernels_, ferry_example::MakeKernels(device_, queue_));
    return Status::OK();
  }

  Result<OperatorStatus> OnInput(const std::string& id, const ferry::device::DeviceBatch&,
                                 const ferry::Metadata&) override {
    const int64_t start = sent_ * rows_;
    FERRY_ASSIGN_OR_RAISE(ferry::BufferPtr values, device_->Allocate(rows_ * 8));
    FERRY_RETURN_NOT_OK(kernels_->Fill(queue_, values->mutable_data(), rows_, start));
    FERRY_ASSIGN_OR_RAISE(ferry::device::EventPtr written, queue_->RecordEvent());

    auto column = std::make_shared<ferry::ArrayData>();
    column->type = ferry::int64();
    column->length = rows_;
    column->buffers = {nullptr, values};
    auto schema = std::make_shared<ferry::Schema>();
    schema->fields = {ferry::field("value", ferry::int64(), false)};
    FERRY_ASSIGN_OR_RAISE(auto batch, ferry::RecordBatch::Make(schema, rows_, {column}));
    FERRY_RETURN_NOT_OK(SendOutput("values", ferry::device::DeviceBatch{batch, device_, written},
                                   {{"start", std::to_string(start)},
                                    {"rows", std::to_string(rows_)},
                                    {"device", device_->name()}}));
    return ++sent_ < batches_ ? OperatorStatus::kContinue : OperatorStatus::kStop;
  }

 private:
  int64_t rows_ = 0;
  int64_t batches_ = 0;
  int64_t sent_ = 0;
  ferry::device::Device* device_ = nullptr;
  ferry::device::Queue* queue_ = nullptr;
  std::unique_ptr<ferry_example::PipelineKernels> kernels_;
};

}  // namespace

FERRY_EXPORT_OPERATOR(Fill)
