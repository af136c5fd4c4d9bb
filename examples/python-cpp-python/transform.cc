// The C++ node of the python-cpp-python example: adds a "fahrenheit" column,
// computed from "celsius", to every batch it receives and sends the result on.
//
// The input batch lives in the source's shared memory (nothing was copied to
// get it here). The new column is built in this node's output memory, so it
// travels without a copy; the passed-through columns live in the source's
// memory and are copied once into ours (the summary's "copied" column shows
// how much).
#include <iostream>
#include <memory>

#include "ferry/exchange/builder.h"
#include "ferry/flow/node.h"

namespace {

using ferry::flow::EventType;

ferry::Result<ferry::RecordBatchPtr> AddFahrenheit(const ferry::RecordBatch& batch,
                                                   ferry::MemoryPool* pool) {
  const int celsius_index = batch.schema()->GetFieldIndex("celsius");
  if (celsius_index < 0) return ferry::Status::Invalid("the batch has no column 'celsius'");
  const ferry::ArrayDataPtr& celsius = batch.column(celsius_index);
  if (celsius->type->id != ferry::TypeId::kDouble) {
    return ferry::Status::TypeError("column 'celsius' is " + celsius->type->ToString() +
                                    ", not double");
  }
  ferry::DoubleBuilder fahrenheit(pool);
  const double* values = celsius->GetValues<double>(1);
  for (int64_t row = 0; row < celsius->length; ++row) {
    if (celsius->IsValid(row)) {
      FERRY_RETURN_NOT_OK(fahrenheit.Append(values[row] * 9.0 / 5.0 + 32.0));
    } else {
      FERRY_RETURN_NOT_OK(fahrenheit.AppendNull());
    }
  }
  FERRY_ASSIGN_OR_RAISE(ferry::ArrayDataPtr column, fahrenheit.Finish());
  auto schema = std::make_shared<ferry::Schema>(*batch.schema());
  schema->fields.push_back(ferry::field("fahrenheit", ferry::float64()));
  std::vector<ferry::ArrayDataPtr> columns = batch.columns();
  columns.push_back(std::move(column));
  return ferry::RecordBatch::Make(std::move(schema), batch.num_rows(), std::move(columns));
}

int Run() {
  auto created = ferry::flow::Node::FromEnvironment();
  if (!created.ok()) {
    std::cerr << "transform: " << created.status().message() << std::endl;
    return 1;
  }
  std::unique_ptr<ferry::flow::Node> node = std::move(created).MoveValueUnsafe();
  int64_t batches = 0, rows = 0;
  for (;;) {
    auto next = node->Next();
    if (!next.ok()) {
      std::cerr << "transform: " << next.status().message() << std::endl;
      return 1;
    }
    if (!next->has_value()) break;
    const ferry::flow::Event& event = **next;
    if (event.type == EventType::kError) {
      std::cerr << "transform: " << event.error << std::endl;
      continue;
    }
    if (event.type != EventType::kInput) continue;
    auto enriched = AddFahrenheit(*event.value, node->OutputPool("enriched"));
    ferry::Status sent = enriched.ok() ? node->SendOutput("enriched", **enriched, event.metadata)
                                       : enriched.status();
    if (!sent.ok()) {
      std::cerr << "transform: batch " << event.sequence << ": " << sent.message() << std::endl;
      return 1;
    }
    ++batches;
    rows += event.value->num_rows();
  }
  std::cout << "transform: added fahrenheit to " << rows << " rows in " << batches << " batches"
            << std::endl;
  return 0;
}

}  // namespace

int main() { return Run(); }
