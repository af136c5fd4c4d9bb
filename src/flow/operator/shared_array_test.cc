#include "flow/operator/shared_array.h"

#include <gtest/gtest.h>

#include "ferry/device/device_bridge.h"
#include "ferry/exchange/bridge.h"
#include "testing/test_util.h"

namespace ferry::flow::internal {
namespace {

// A batch of one int64 column and one struct column (nested children), whose
// values buffer reports when it is freed.
RecordBatchPtr MakeBatch(bool* freed) {
  auto storage = std::make_shared<std::vector<int64_t>>(std::vector<int64_t>{1, 2, 3});
  std::shared_ptr<const void> owner(storage.get(),
                                    [storage, freed](const void*) { *freed = true; });
  auto values =
      std::make_shared<Buffer>(reinterpret_cast<const uint8_t*>(storage->data()), 24, owner);
  auto column = std::make_shared<ArrayData>();
  column->type = int64();
  column->length = 3;
  column->buffers = {nullptr, values};
  auto inner = std::make_shared<ArrayData>();
  inner->type = struct_({field("x", int64())});
  inner->length = 3;
  inner->buffers = {nullptr};
  inner->children = {column};
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("a", int64()), field("s", inner->type)};
  return *RecordBatch::Make(schema, 3, {column, inner});
}

TEST(SharedDeviceArray, EveryConsumerGetsItsOwnTreeOverTheSameBuffers) {
  bool freed = false;
  {
    RecordBatchPtr batch = MakeBatch(&freed);
    ArrowDeviceArray exported;
    ASSERT_OK(device::ExportDeviceArray(
        device::DeviceArray{batch->ToStructArray(), device::DeviceRegistry::Global().cpu(),
                            nullptr},
        &exported));
    const void* values = exported.array.children[0]->buffers[1];
    SchemaPtr schema = batch->schema();
    batch.reset();

    auto shared = SharedDeviceArray::Adopt(OwnedDeviceArray(&exported));
    EXPECT_EQ(exported.array.release, nullptr);  // moved in
    ArrowDeviceArray first, second;
    ASSERT_OK(shared->Share(&first));
    ASSERT_OK(shared->Share(&second));
    shared.reset();  // the trees keep the original alive
    EXPECT_NE(first.array.private_data, second.array.private_data);
    EXPECT_EQ(first.array.children[0]->buffers[1], values);
    EXPECT_EQ(second.array.children[1]->children[0]->buffers[1], values);
    EXPECT_EQ(first.device_type, ARROW_DEVICE_CPU);

    // A consumer moves a child out and releases the parent first.
    ArrowArray moved_child = *first.array.children[1];
    first.array.children[1]->release = nullptr;
    first.array.release(&first.array);
    EXPECT_EQ(first.array.release, nullptr);
    EXPECT_FALSE(freed);
    // The second consumer imports its tree: still the same memory.
    ASSERT_OK_AND_ASSIGN(auto imported,
                         device::ImportDeviceArray(&second, struct_(schema->fields)));
    EXPECT_EQ(imported.data->children[0]->buffers[1]->data(), values);
    imported = {};
    EXPECT_FALSE(freed);
    moved_child.release(&moved_child);
  }
  EXPECT_TRUE(freed);  // released once, after the last holder
}

TEST(OwnedDeviceArray, ReleasesWhatItHoldsUnlessMovedOn) {
  bool freed = false;
  RecordBatchPtr batch = MakeBatch(&freed);
  ArrowDeviceArray exported;
  ASSERT_OK(device::ExportDeviceArray(
      device::DeviceArray{batch->ToStructArray(), device::DeviceRegistry::Global().cpu(), nullptr},
      &exported));
  batch.reset();
  OwnedDeviceArray owned(&exported);
  OwnedDeviceArray other = std::move(owned);
  EXPECT_FALSE(owned.valid());
  ArrowDeviceArray out;
  other.MoveTo(&out);
  EXPECT_FALSE(other.valid());
  EXPECT_FALSE(freed);
  { OwnedDeviceArray last(&out); }
  EXPECT_TRUE(freed);
}

}  // namespace
}  // namespace ferry::flow::internal
