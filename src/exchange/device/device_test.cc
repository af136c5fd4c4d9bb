#include "ferry/device/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "ferry/base/telemetry.h"

namespace ferry::device {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTypes, SpecValuesAndNames) {
  EXPECT_EQ(static_cast<int>(DeviceType::kCpu), 1);
  EXPECT_EQ(static_cast<int>(DeviceType::kOpenCL), 4);
  EXPECT_EQ(static_cast<int>(DeviceType::kHexagon), 16);
  EXPECT_EQ(AllDeviceTypes().size(), 14u);
  for (DeviceType type : AllDeviceTypes()) {
    auto by_name = DeviceTypeFromName(DeviceTypeName(type));
    ASSERT_TRUE(by_name.ok());
    EXPECT_EQ(*by_name, type);
    auto by_code = DeviceTypeFromCode(static_cast<int32_t>(type));
    ASSERT_TRUE(by_code.ok());
    EXPECT_EQ(*by_code, type);
  }
}

TEST(DeviceTypes, UnknownCodesAndNamesAreErrors) {
  for (int32_t code : {0, 5, 6, 17, -1, 1000}) {
    auto type = DeviceTypeFromCode(code);
    ASSERT_FALSE(type.ok()) << code;
    EXPECT_THAT(type.status().message(), HasSubstr(std::to_string(code)));
  }
  EXPECT_THAT(DeviceTypeFromName("tpu").status().message(), HasSubstr("'tpu'"));
}

TEST(DeviceTypes, HostAccessibility) {
  EXPECT_TRUE(IsHostAccessible(DeviceType::kCpu));
  EXPECT_TRUE(IsHostAccessible(DeviceType::kCudaHost));
  EXPECT_TRUE(IsHostAccessible(DeviceType::kCudaManaged));
  EXPECT_FALSE(IsHostAccessible(DeviceType::kCuda));
  EXPECT_FALSE(IsHostAccessible(DeviceType::kOpenCL));
}

TEST(Registry, CpuIsAlwaysPresent) {
  auto& registry = DeviceRegistry::Global();
  Device* cpu = registry.cpu();
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->type(), DeviceType::kCpu);
  EXPECT_EQ(cpu->id(), -1);
  auto found = registry.Get(DeviceType::kCpu, -1);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, cpu);
}

TEST(Registry, EveryTypeIsDescribedAndAbsentOnesSayWhy) {
  auto& registry = DeviceRegistry::Global();
  std::string text = registry.Describe();
  for (DeviceType type : AllDeviceTypes()) {
    EXPECT_THAT(text, HasSubstr(std::string(DeviceTypeName(type)) + ": "));
  }
  auto metal = registry.Get(DeviceType::kMetal, 0);
  ASSERT_FALSE(metal.ok());
  EXPECT_EQ(metal.status().code(), StatusCode::kNotImplemented);
  EXPECT_THAT(metal.status().message(), HasSubstr("metal"));
}

TEST(Registry, RegisterReplacesAndUnregisterRestores) {
  auto& registry = DeviceRegistry::Global();
  auto extra = registry.Unregister(DeviceType::kCpu, -1);
  ASSERT_NE(extra, nullptr);
  EXPECT_FALSE(registry.Get(DeviceType::kCpu, -1).ok());
  EXPECT_EQ(registry.Register(extra), nullptr);
  EXPECT_TRUE(registry.Get(DeviceType::kCpu, -1).ok());
}

TEST(CpuDevice, AllocatesAlignedMemoryAndCopiesCounted) {
  Device* cpu = DeviceRegistry::Global().cpu();
  auto buffer = cpu->Allocate(1000);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*buffer)->data()) % 64, 0u);
  std::vector<uint8_t> source(1000);
  std::iota(source.begin(), source.end(), 0);
  int64_t before = telemetry::Get(telemetry::Counter::kBytesCopiedHost);
  ASSERT_TRUE(CopyBetween(cpu, source.data(), cpu, (*buffer)->mutable_data(), 1000).ok());
  EXPECT_EQ(telemetry::Get(telemetry::Counter::kBytesCopiedHost) - before, 1000);
  EXPECT_EQ(std::memcmp(source.data(), (*buffer)->data(), 1000), 0);
  EXPECT_FALSE(CopyBetween(cpu, source.data(), cpu, (*buffer)->mutable_data(), -1).ok());
  EXPECT_FALSE(CopyBetween(nullptr, source.data(), cpu, (*buffer)->mutable_data(), 1).ok());
}

TEST(CpuDevice, EventsAreAlwaysReadyAndForeignEventsRefused) {
  Device* cpu = DeviceRegistry::Global().cpu();
  auto event = cpu->default_queue()->RecordEvent();
  ASSERT_TRUE(event.ok());
  EXPECT_EQ((*event)->kind(), EventKind::kNone);
  EXPECT_EQ((*event)->sync_event(), nullptr);
  EXPECT_TRUE((*event)->Wait(std::chrono::milliseconds(1)).ok());
  int fake_event = 0;
  EXPECT_FALSE(cpu->HostWait(&fake_event, std::chrono::milliseconds(1)).ok());
  EXPECT_FALSE(cpu->default_queue()->WaitEvent(&fake_event).ok());
  EXPECT_TRUE(cpu->HostWait(nullptr, std::chrono::milliseconds(1)).ok());
}

TEST(CopyArrayTo, CopiesEveryBufferAndCountsBytes) {
  Device* cpu = DeviceRegistry::Global().cpu();
  auto values = Buffer::Allocate(4 * sizeof(int32_t));
  ASSERT_TRUE(values.ok());
  auto* out = reinterpret_cast<int32_t*>((*values)->mutable_data());
  for (int i = 0; i < 4; ++i) out[i] = i * 3;
  auto data = std::make_shared<ArrayData>();
  data->type = int32();
  data->length = 4;
  data->buffers = {nullptr, *values};
  int64_t before = telemetry::Get(telemetry::Counter::kBytesCopiedHost);
  auto copied = CopyArrayTo(DeviceArray{data, cpu, nullptr}, cpu);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(telemetry::Get(telemetry::Counter::kBytesCopiedHost) - before, 16);
  EXPECT_NE(copied->data->buffers[1]->data(), (*values)->data());
  EXPECT_TRUE(ArrayEquals(*copied->data, *data));
  EXPECT_FALSE(CopyArrayTo(DeviceArray{nullptr, cpu, nullptr}, cpu).ok());
}

}  // namespace
}  // namespace ferry::device
