// Operator "sum": reduces each batch of "values" on the device it lives on
// and sends the total on "total" (one int64 row, on the CPU). The helper
// has already made this operator's queue wait on the producer's event, so
// the kernel runs after the fill without the host waiting or copying.
#include <memory>
#include <string>

#include "ferry/flow/operator.h"
#include "kernels.h"

namespace {

using ferry::Result;
using ferry::Status;
using ferry::flow::OperatorStatus;

class Sum : public ferry::flow::Operator {
 public:
  Result<OperatorStatus> OnInput(const std::string& id, const ferry::device::DeviceBatch& input,
                                 const ferry::Metadata& metadata) override {
    if (input.batch->num_columns() != 1 ||
        input.batch->column(0)->type->id != ferry::TypeId::kInt64) {
      return Status::Invalid("sum: input '" + id + "' must hold one int64 column");
    }
    FERRY_ASSIGN_OR_RAISE(ferry::device::Queue * queue, GetQueue(input.device));
    if (kernels_ == nullptr) {
      FERRY_ASSIGN_OR_RAISE(kernels_, ferry_example::MakeKernels(input.device, queue));
    }
    const auto& column = input.batch->column(0);
    FERRY_ASSIGN_OR_RAISE(int64_t total,
                          kernels_->Sum(queue, column->GetValues<int64_t>(1), column->length));

    FERRY_ASSIGN_OR_RAISE(ferry::BufferPtr buffer, ferry::Buffer::Allocate(8));
    *reinterpret_cast<int64_t*>(buffer->mutable_data()) = total;
    auto sum = std::make_shared<ferry::ArrayData>();
    sum->type = ferry::int64();
    sum->length = 1;
    sum->buffers = {nullptr, buffer};
    auto schema = std::make_shared<ferry::Schema>();
    schema->fields = {ferry::field("sum", ferry::int64(), false)};
    FERRY_ASSIGN_OR_RAISE(auto batch, ferry::RecordBatch::Make(schema, 1, {sum}));
    ferry::Metadata out = metadata;  // start, rows and device of the values
    out.emplace_back("waited_on_device", input.event ? "yes" : "no");
    FERRY_RETURN_NOT_OK(SendOutput("total", *batch, out));
    return OperatorStatus::kContinue;
  }

 private:
  std::unique_ptr<ferry_example::PipelineKernels> kernels_;
};

}  // namespace

FERRY_EXPORT_OPERATOR(Sum)
