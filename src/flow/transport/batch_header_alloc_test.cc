// Counts the heap allocations of EncodeHeader and DecodeHeader. This binary
// replaces the global operator new (forwarding to malloc, so ASan still sees
// every block), which is why it is not part of ferry_flow_tests. It documents
// the allocation profile; it does not time anything.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <vector>

#include "ferry/exchange/builder.h"
#include "ferry/exchange/sample.h"
#include "ferry/exchange/validate.h"
#include "flow/transport/batch_header.h"
#include "testing/counting_new.h"

namespace ferry::flow::wire {
namespace {

int64_t Allocations() { return allocation_count.load(std::memory_order_relaxed); }

struct Shape {
  int64_t nodes = 0;
  int64_t present_buffers = 0;
  int64_t nodes_with_buffers = 0;
  int64_t nodes_with_children = 0;
};

void Measure(const ArrayData& data, Shape* shape) {
  ++shape->nodes;
  if (!data.buffers.empty()) ++shape->nodes_with_buffers;
  if (!data.children.empty()) ++shape->nodes_with_children;
  for (const BufferPtr& buffer : data.buffers) shape->present_buffers += buffer != nullptr;
  for (const ArrayDataPtr& child : data.children) Measure(*child, shape);
  if (data.dictionary) Measure(*data.dictionary, shape);
}

// One segment holding every buffer of the batch, located without allocating.
struct OneSegment {
  std::vector<uint8_t> bytes;
  std::vector<const Buffer*> placed;
  std::vector<uint64_t> offsets;

  void Place(const ArrayData& data) {
    for (const BufferPtr& buffer : data.buffers) {
      if (buffer == nullptr) continue;
      bytes.resize(static_cast<size_t>(PaddedSize(static_cast<int64_t>(bytes.size()))));
      offsets.push_back(bytes.size());
      placed.push_back(buffer.get());
      bytes.insert(bytes.end(), buffer->data(), buffer->data() + buffer->size());
    }
    for (const ArrayDataPtr& child : data.children) Place(*child);
    if (data.dictionary) Place(*data.dictionary);
  }

  Result<BufferLocation> Locate(const Buffer& buffer) const {
    for (size_t index = 0; index < placed.size(); ++index) {
      if (placed[index] == &buffer) {
        return BufferLocation{0, offsets[index], static_cast<uint64_t>(buffer.size())};
      }
    }
    return Status::Invalid("buffer was not placed");
  }
};

TEST(BatchHeaderAllocationTest, EncodeAllocatesNothingAndDecodeOnlyBuildsTheBatch) {
  // The message path's typical shape: 4 columns (int64, utf8, float64, list<utf8>).
  auto made = MakeSampleBatch(64);
  ASSERT_TRUE(made.ok());
  const RecordBatchPtr batch = *made;
  OneSegment segment;
  Shape shape;
  for (const ArrayDataPtr& column : batch->columns()) {
    segment.Place(*column);
    Measure(*column, &shape);
  }
  const Metadata metadata = {{"trace", "1"}};
  auto size = EncodedHeaderSize(*batch, metadata);
  ASSERT_TRUE(size.ok());
  std::vector<uint8_t> header(static_cast<size_t>(*size));

  const int64_t before_encode = Allocations();
  auto written = EncodeHeader(
      *batch, metadata, [&](const Buffer& buffer) { return segment.Locate(buffer); }, header.data(),
      *size);
  const int64_t encode_allocations = Allocations() - before_encode;
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(encode_allocations, 0);

  const SegmentView view{segment.bytes.data(), static_cast<int64_t>(segment.bytes.size())};
  auto lookup = [&](uint32_t segment_id) -> Result<SegmentView> {
    if (segment_id != 0) return Status::Invalid("unknown segment");
    return view;
  };
  auto token = std::make_shared<int>(1);
  const int64_t before_decode = Allocations();
  auto decoded = DecodeHeader(header.data(), static_cast<int64_t>(header.size()), batch->schema(),
                              lookup, token, nullptr);
  const int64_t decode_allocations = Allocations() - before_decode;
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_TRUE((*decoded)->Equals(*batch));

  // What assembling and validating a batch costs on its own (RecordBatch::Make
  // and ValidateStructural are not the wire format's to change).
  const int64_t before_assembly = Allocations();
  {
    auto again = RecordBatch::Make(batch->schema(), batch->num_rows(), (*decoded)->columns());
    ASSERT_TRUE(again.ok());
    ASSERT_TRUE(ValidateStructural(**again).ok());
  }
  // Minus the copied column vector and the destroyed batch don't count.
  const int64_t assembly_allocations = Allocations() - before_assembly - 1;

  // Per node: its ArrayData (one block with its control block), its buffer
  // vector and its child vector when it has any; per message: the block of
  // Buffer objects (control block + vector storage) and the column vector.
  const int64_t wire_budget =
      shape.nodes + shape.nodes_with_buffers + shape.nodes_with_children + 2 + 1;
  EXPECT_LE(decode_allocations - assembly_allocations, wire_budget)
      << "decode: " << decode_allocations << ", batch assembly: " << assembly_allocations
      << ", nodes: " << shape.nodes << ", present buffers: " << shape.present_buffers;
  // No message metadata requested: its strings are not even built.
  std::cout << "[ allocations ] encode " << encode_allocations << ", decode " << decode_allocations
            << " (batch assembly " << assembly_allocations << ", wire budget " << wire_budget
            << ")\n";
}

// Decodes a one-column utf8_view batch whose values fill `data_buffers`
// variadic buffers and returns the allocations the decode made.
int64_t DecodeAllocationsForViewBuffers(int data_buffers) {
  BinaryViewBuilder builder(utf8_view(), default_memory_pool(), /*block_size=*/16);
  for (int i = 0; i < data_buffers; ++i) {
    if (!builder.Append("sixteen bytes!!!").ok()) return -1;
  }
  auto values = builder.Finish();
  if (!values.ok() || static_cast<int>((*values)->buffers.size()) != 2 + data_buffers) return -1;
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("text", utf8_view())};
  auto batch = RecordBatch::Make(schema, (*values)->length, {*values});
  if (!batch.ok()) return -1;
  OneSegment segment;
  segment.Place(**values);
  auto size = EncodedHeaderSize(**batch, {});
  if (!size.ok()) return -1;
  std::vector<uint8_t> header(static_cast<size_t>(*size));
  if (!EncodeHeader(
           **batch, {}, [&](const Buffer& buffer) { return segment.Locate(buffer); }, header.data(),
           *size)
           .ok()) {
    return -1;
  }
  const SegmentView view{segment.bytes.data(), static_cast<int64_t>(segment.bytes.size())};
  const int64_t before = Allocations();
  auto decoded = DecodeHeader(
      header.data(), *size, schema, [&](uint32_t) -> Result<SegmentView> { return view; }, nullptr,
      nullptr);
  const int64_t allocations = Allocations() - before;
  return decoded.ok() && (*decoded)->Equals(**batch) ? allocations : -1;
}

TEST(BatchHeaderAllocationTest, DecodeAllocationsDoNotGrowWithTheBufferCount) {
  const int64_t few = DecodeAllocationsForViewBuffers(2);
  const int64_t many = DecodeAllocationsForViewBuffers(40);
  ASSERT_GT(few, 0);
  EXPECT_EQ(few, many);
}

}  // namespace
}  // namespace ferry::flow::wire
