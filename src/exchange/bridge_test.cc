#include "ferry/exchange/bridge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <climits>
#include <cstring>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/base/telemetry.h"
#include "ferry/exchange/validate.h"
#include "testing/sample_arrays.h"
#include "testing/test_util.h"

namespace ferry {
namespace {

using telemetry::Counter;
using ::testing::HasSubstr;

// ---- Hand-built arrays -------------------------------------------------------
// Arrays are assembled buffer by buffer so that every layout detail (offsets,
// views, variadic buffers, slices) is under the test's control.

BufferPtr BytesBuffer(const void* data, int64_t size) {
  auto buffer = Buffer::Allocate(size);
  EXPECT_TRUE(buffer.ok());
  if (size > 0) std::memcpy((*buffer)->mutable_data(), data, static_cast<size_t>(size));
  return *buffer;
}

template <typename T>
BufferPtr ValuesBuffer(const std::vector<T>& values) {
  return BytesBuffer(values.data(), static_cast<int64_t>(values.size() * sizeof(T)));
}

// Validity from the positions that hold a value; nullptr when nothing is null.
BufferPtr ValidityBuffer(const std::vector<bool>& valid) {
  bool any_null = false;
  for (bool bit : valid) any_null |= !bit;
  if (!any_null) return nullptr;
  std::vector<uint8_t> bits(static_cast<size_t>(BytesForBits(static_cast<int64_t>(valid.size()))));
  for (size_t i = 0; i < valid.size(); ++i)
    SetBitTo(bits.data(), static_cast<int64_t>(i), valid[i]);
  return ValuesBuffer(bits);
}

int64_t CountNulls(const std::vector<bool>& valid) {
  int64_t nulls = 0;
  for (bool bit : valid) nulls += bit ? 0 : 1;
  return nulls;
}

ArrayDataPtr MakeData(TypePtr type, int64_t length, std::vector<BufferPtr> buffers,
                      int64_t null_count = 0, std::vector<ArrayDataPtr> children = {},
                      ArrayDataPtr dictionary = nullptr) {
  auto data = std::make_shared<ArrayData>();
  data->type = std::move(type);
  data->length = length;
  data->null_count = null_count;
  data->buffers = std::move(buffers);
  data->children = std::move(children);
  data->dictionary = std::move(dictionary);
  return data;
}

ArrayDataPtr Int32s(const std::vector<std::optional<int32_t>>& values) {
  std::vector<int32_t> raw;
  std::vector<bool> valid;
  for (const auto& value : values) {
    raw.push_back(value.value_or(0));
    valid.push_back(value.has_value());
  }
  return MakeData(int32(), static_cast<int64_t>(values.size()),
                  {ValidityBuffer(valid), ValuesBuffer(raw)}, CountNulls(valid));
}

template <typename Offset>
ArrayDataPtr StringsOf(TypePtr type, const std::vector<std::optional<std::string>>& values) {
  std::vector<Offset> offsets{0};
  std::string bytes;
  std::vector<bool> valid;
  for (const auto& value : values) {
    if (value) bytes += *value;
    offsets.push_back(static_cast<Offset>(bytes.size()));
    valid.push_back(value.has_value());
  }
  return MakeData(std::move(type), static_cast<int64_t>(values.size()),
                  {ValidityBuffer(valid), ValuesBuffer(offsets),
                   BytesBuffer(bytes.data(), static_cast<int64_t>(bytes.size()))},
                  CountNulls(valid));
}

ArrayDataPtr Utf8s(const std::vector<std::optional<std::string>>& values) {
  return StringsOf<int32_t>(utf8(), values);
}

// Views: strings of up to 12 bytes are inline; longer ones go, alternately,
// to two variadic data buffers so that buffer indices other than 0 appear.
ArrayDataPtr StringViews(TypePtr type, const std::vector<std::optional<std::string>>& values) {
  std::vector<uint8_t> views(values.size() * 16, 0);
  std::string data_buffers[2];
  std::vector<bool> valid;
  int next_buffer = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    valid.push_back(values[i].has_value());
    if (!values[i]) continue;
    const std::string& value = *values[i];
    uint8_t* view = views.data() + i * 16;
    const int32_t length = static_cast<int32_t>(value.size());
    std::memcpy(view, &length, 4);
    if (value.size() <= 12) {
      std::memcpy(view + 4, value.data(), value.size());
    } else {
      const int32_t buffer_index = next_buffer;
      const int32_t offset = static_cast<int32_t>(data_buffers[next_buffer].size());
      std::memcpy(view + 4, value.data(), 4);
      std::memcpy(view + 8, &buffer_index, 4);
      std::memcpy(view + 12, &offset, 4);
      data_buffers[next_buffer] += value;
      next_buffer = 1 - next_buffer;
    }
  }
  return MakeData(
      std::move(type), static_cast<int64_t>(values.size()),
      {ValidityBuffer(valid), ValuesBuffer(views),
       BytesBuffer(data_buffers[0].data(), static_cast<int64_t>(data_buffers[0].size())),
       BytesBuffer(data_buffers[1].data(), static_cast<int64_t>(data_buffers[1].size()))},
      CountNulls(valid));
}

// `length` values of `type` (fixed width) with nulls at 1 and 4. Byte j of
// value i is (7i + j) & 0x3f: distinct values, and finite when read as floats.
ArrayDataPtr FixedWidthArray(const TypePtr& type, int64_t length) {
  const int32_t width = type->fixed_width();
  std::vector<uint8_t> bytes(static_cast<size_t>(length * width));
  for (int64_t i = 0; i < length; ++i) {
    for (int32_t j = 0; j < width; ++j)
      bytes[static_cast<size_t>(i * width + j)] = (7 * i + j) & 0x3f;
  }
  std::vector<bool> valid;
  for (int64_t i = 0; i < length; ++i) valid.push_back(i != 1 && i != 4);
  return MakeData(type, length, {ValidityBuffer(valid), ValuesBuffer(bytes)}, CountNulls(valid));
}

ArrayDataPtr Bools(const std::vector<std::optional<bool>>& values) {
  std::vector<uint8_t> bits(static_cast<size_t>(BytesForBits(static_cast<int64_t>(values.size()))));
  std::vector<bool> valid;
  for (size_t i = 0; i < values.size(); ++i) {
    SetBitTo(bits.data(), static_cast<int64_t>(i), values[i].value_or(false));
    valid.push_back(values[i].has_value());
  }
  return MakeData(boolean(), static_cast<int64_t>(values.size()),
                  {ValidityBuffer(valid), ValuesBuffer(bits)}, CountNulls(valid));
}

// struct<a: int32, b: utf8> with a null row at 2.
ArrayDataPtr PointStruct() {
  auto a = Int32s({1, 2, 3, std::nullopt, 5});
  auto b = Utf8s({"one", std::nullopt, "three", "four", "five"});
  auto type = struct_({field("a", int32()), field("b", utf8())});
  return MakeData(type, 5, {ValidityBuffer({true, true, false, true, true})}, 1, {a, b});
}

// ---- Round trip ------------------------------------------------------------

int64_t CountNodes(const ArrayData& data) {
  int64_t nodes = 1;
  for (const auto& child : data.children) nodes += CountNodes(*child);
  if (data.dictionary) nodes += CountNodes(*data.dictionary);
  return nodes;
}

// Zero copy: every buffer Ferry had is the very buffer the import sees.
void ExpectSameAddresses(const ArrayData& original, const ArrayData& imported,
                         const std::string& path) {
  ASSERT_EQ(original.buffers.size(), imported.buffers.size()) << path;
  for (size_t i = 0; i < original.buffers.size(); ++i) {
    // Export substitutes a static zero for the offsets of a zero-length array.
    if (original.buffers[i] == nullptr || (original.length == 0 && i == 1)) continue;
    ASSERT_NE(imported.buffers[i], nullptr) << path << " buffer " << i;
    EXPECT_EQ(original.buffers[i]->data(), imported.buffers[i]->data()) << path << " buffer " << i;
  }
  ASSERT_EQ(original.children.size(), imported.children.size()) << path;
  for (size_t i = 0; i < original.children.size(); ++i) {
    ExpectSameAddresses(*original.children[i], *imported.children[i],
                        path + "." + std::to_string(i));
  }
  ASSERT_EQ(original.dictionary == nullptr, imported.dictionary == nullptr) << path;
  if (original.dictionary) {
    ExpectSameAddresses(*original.dictionary, *imported.dictionary, path + ".dictionary");
  }
}

void ExpectRoundTrip(const ArrayDataPtr& original) {
  SCOPED_TRACE(original->type->ToString());
  telemetry::Reset();
  ArrowArray c_array;
  ArrowSchema c_schema;
  ASSERT_OK(ExportArray(original, &c_array, &c_schema));
  EXPECT_EQ(c_array.length, original->length);
  // A zero-length array goes out at offset 0 (nothing of it is read).
  EXPECT_EQ(c_array.offset, original->length == 0 ? 0 : original->offset);
  EXPECT_EQ(c_array.null_count, original->GetNullCount());

  auto imported = ImportArray(&c_array, &c_schema);
  // An array without any buffer holds nothing of the producer's, so its
  // release may already have run here.
  const int64_t array_releases_during_import = telemetry::Get(Counter::kReleases);
  c_schema.release(&c_schema);
  const int64_t releases_before = telemetry::Get(Counter::kReleases);
  ASSERT_OK(imported.status());
  EXPECT_EQ(c_array.release, nullptr) << "import must move the array";
  const ArrayDataPtr& result = *imported;
  EXPECT_TRUE(result->type->Equals(*original->type))
      << result->type->ToString() << " vs " << original->type->ToString();
  EXPECT_TRUE(ArrayEquals(*original, *result)) << ArrayToString(*original) << "\nvs\n"
                                               << ArrayToString(*result);
  ExpectSameAddresses(*original, *result, "root");

  EXPECT_EQ(telemetry::Get(Counter::kZeroCopyExports), 1);
  EXPECT_EQ(telemetry::Get(Counter::kZeroCopyImports), 1);
  EXPECT_EQ(telemetry::Get(Counter::kSchemaExports), 1);
  EXPECT_EQ(telemetry::Get(Counter::kBytesCopiedHost), 0);
  EXPECT_EQ(telemetry::Get(Counter::kValidationErrors), 0);

  imported = Status::Cancelled("dropped");  // drops the last reference
  EXPECT_EQ(telemetry::Get(Counter::kForeignReleases), 1);
  EXPECT_EQ(array_releases_during_import + telemetry::Get(Counter::kReleases) - releases_before,
            CountNodes(*original));
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 0);
}

// A whole array, a slice with an offset, a zero-length slice.
void ExpectRoundTripsWithSlices(const ArrayDataPtr& original) {
  ExpectRoundTrip(original);
  if (original->length >= 3) ExpectRoundTrip(Slice(original, 1, original->length - 2));
  ExpectRoundTrip(Slice(original, original->length, 0));
}

class BridgeTest : public ::testing::Test {
 protected:
  void SetUp() override { telemetry::Reset(); }
};

class FixedWidthRoundTrip : public ::testing::TestWithParam<TypePtr> {};

TEST_P(FixedWidthRoundTrip, KeepsValuesAndAddresses) {
  ExpectRoundTripsWithSlices(FixedWidthArray(GetParam(), 7));
}

INSTANTIATE_TEST_SUITE_P(
    EveryFixedWidthType, FixedWidthRoundTrip,
    ::testing::Values(int8(), uint8(), int16(), uint16(), int32(), uint32(), int64(), uint64(),
                      float16(), float32(), float64(), decimal(32, 7, 2), decimal(64, 15, 3),
                      decimal(128, 30, 4), decimal(256, 60, 5), fixed_size_binary(5), date32(),
                      date64(), time32(TimeUnit::kSecond), time32(TimeUnit::kMilli),
                      time64(TimeUnit::kMicro), time64(TimeUnit::kNano),
                      timestamp(TimeUnit::kMicro, "UTC"), timestamp(TimeUnit::kNano),
                      duration(TimeUnit::kMilli), interval_months(), interval_day_time(),
                      interval_month_day_nano()));

TEST_F(BridgeTest, NullAndBooleanRoundTrip) {
  ExpectRoundTripsWithSlices(MakeData(null(), 4, {}, 4));
  ExpectRoundTripsWithSlices(
      Bools({true, false, std::nullopt, true, true, false, std::nullopt, true, false, true}));
}

TEST_F(BridgeTest, NullArrayExportsNoBuffers) {
  ArrowArray c_array;
  ASSERT_OK(ExportArray(MakeData(null(), 3, {}, 3), &c_array));
  EXPECT_EQ(c_array.n_buffers, 0);
  EXPECT_EQ(c_array.null_count, 3);
  c_array.release(&c_array);
}

TEST_F(BridgeTest, BinaryAndStringRoundTrip) {
  const std::vector<std::optional<std::string>> values{"alpha", "", std::nullopt, "delta",
                                                       "epsilon"};
  ExpectRoundTripsWithSlices(StringsOf<int32_t>(utf8(), values));
  ExpectRoundTripsWithSlices(StringsOf<int32_t>(binary(), values));
  ExpectRoundTripsWithSlices(StringsOf<int64_t>(large_utf8(), values));
  ExpectRoundTripsWithSlices(StringsOf<int64_t>(large_binary(), values));
}

TEST_F(BridgeTest, ViewsWithInlineAndOutOfLineValues) {
  const std::vector<std::optional<std::string>> values{"short",
                                                       "a string longer than twelve",
                                                       std::nullopt,
                                                       "",
                                                       "another long string value",
                                                       "twelve bytes",
                                                       "thirteen byte"};
  for (const TypePtr& type : {utf8_view(), binary_view()}) {
    auto views = StringViews(type, values);
    ExpectRoundTripsWithSlices(views);

    // The extra final buffer holds the sizes of the variadic data buffers.
    ArrowArray c_array;
    ASSERT_OK(ExportArray(views, &c_array));
    ASSERT_EQ(c_array.n_buffers, 5);
    const auto* sizes = static_cast<const int64_t*>(c_array.buffers[4]);
    EXPECT_EQ(sizes[0], views->buffers[2]->size());
    EXPECT_EQ(sizes[1], views->buffers[3]->size());
    EXPECT_GT(sizes[0], 0);
    EXPECT_GT(sizes[1], 0);
    c_array.release(&c_array);
  }
}

TEST_F(BridgeTest, ViewsWithoutVariadicBuffers) {
  auto views = StringViews(utf8_view(), {"tiny", std::nullopt, "inline only"});
  auto only_inline = MakeData(utf8_view(), 3, {views->buffers[0], views->buffers[1]}, 1);
  ExpectRoundTripsWithSlices(only_inline);
  ArrowArray c_array;
  ASSERT_OK(ExportArray(only_inline, &c_array));
  EXPECT_EQ(c_array.n_buffers, 3);
  EXPECT_NE(c_array.buffers[2], nullptr);
  c_array.release(&c_array);
}

TEST_F(BridgeTest, ListsRoundTrip) {
  auto items = Int32s({1, 2, std::nullopt, 4, 5, 6, 7});
  std::vector<bool> valid{true, false, true, true};
  auto list_type = list(field("item", int32()));
  ExpectRoundTripsWithSlices(MakeData(
      list_type, 4, {ValidityBuffer(valid), ValuesBuffer<int32_t>({0, 2, 2, 5, 7})}, 1, {items}));
  auto large_type = large_list(field("item", int32()));
  ExpectRoundTripsWithSlices(MakeData(
      large_type, 4, {ValidityBuffer(valid), ValuesBuffer<int64_t>({0, 2, 2, 5, 7})}, 1, {items}));

  // List views: offsets and sizes, out of order and overlapping.
  auto view_type = list_view(field("item", int32()));
  ExpectRoundTripsWithSlices(MakeData(view_type, 4,
                                      {ValidityBuffer(valid), ValuesBuffer<int32_t>({5, 0, 0, 1}),
                                       ValuesBuffer<int32_t>({2, 0, 3, 4})},
                                      1, {items}));
  auto large_view_type = large_list_view(field("item", int32()));
  ExpectRoundTripsWithSlices(MakeData(large_view_type, 4,
                                      {ValidityBuffer(valid), ValuesBuffer<int64_t>({5, 0, 0, 1}),
                                       ValuesBuffer<int64_t>({2, 0, 3, 4})},
                                      1, {items}));

  auto fixed_type = fixed_size_list(field("item", int32()), 2);
  auto six_items = Int32s({1, 2, 3, std::nullopt, 5, 6, 7, 8});
  ExpectRoundTripsWithSlices(MakeData(fixed_type, 4, {ValidityBuffer(valid)}, 1, {six_items}));
}

TEST_F(BridgeTest, NestedListOfStructRoundTrip) {
  auto points = PointStruct();
  auto type = list(field("points", points->type));
  ExpectRoundTripsWithSlices(
      MakeData(type, 3, {nullptr, ValuesBuffer<int32_t>({0, 1, 3, 5})}, 0, {points}));
}

TEST_F(BridgeTest, StructRoundTripAndSliceAppliesToChildren) {
  auto points = PointStruct();
  ExpectRoundTripsWithSlices(points);
  // The struct's offset is applied to its children by consumers.
  ArrowArray c_array;
  ASSERT_OK(ExportArray(Slice(points, 2, 2), &c_array));
  EXPECT_EQ(c_array.offset, 2);
  EXPECT_EQ(c_array.children[0]->offset, 0);
  EXPECT_EQ(c_array.children[0]->length, 5);
  c_array.release(&c_array);
}

TEST_F(BridgeTest, MapRoundTripAndKeysSortedFlag) {
  auto type = map(utf8(), int32(), /*keys_sorted=*/true);
  auto keys = Utf8s({"a", "b", "c", "d"});
  auto values = Int32s({10, std::nullopt, 30, 40});
  auto entries = MakeData(type->children[0].type, 4, {nullptr}, 0, {keys, values});
  auto maps =
      MakeData(type, 3, {ValidityBuffer({true, false, true}), ValuesBuffer<int32_t>({0, 2, 2, 4})},
               1, {entries});
  ExpectRoundTripsWithSlices(maps);

  ArrowSchema c_schema;
  ASSERT_OK(ExportType(*type, &c_schema));
  EXPECT_STREQ(c_schema.format, "+m");
  EXPECT_TRUE(c_schema.flags & ARROW_FLAG_MAP_KEYS_SORTED);
  ASSERT_EQ(c_schema.n_children, 1);
  EXPECT_STREQ(c_schema.children[0]->format, "+s");
  EXPECT_FALSE(c_schema.children[0]->flags & ARROW_FLAG_NULLABLE);
  c_schema.release(&c_schema);

  ASSERT_OK(ExportType(*map(utf8(), int32()), &c_schema));
  EXPECT_FALSE(c_schema.flags & ARROW_FLAG_MAP_KEYS_SORTED);
  c_schema.release(&c_schema);
}

// Arrow C++ aborts on importing a map with a null entry or key anywhere in
// its children, so export refuses one (naming the rule) and exports nothing.
TEST_F(BridgeTest, MapWithNullEntriesOrKeysIsNotExported) {
  auto type = map(utf8(), int32());
  auto entries_with_null = MakeData(type->children[0].type, 2, {ValidityBuffer({true, false})}, 1,
                                    {Utf8s({"a", "b"}), Int32s({1, 2})});
  ArrowArray c_array;
  c_array.release = nullptr;
  Status status = ExportArray(
      MakeData(type, 1, {nullptr, ValuesBuffer<int32_t>({0, 1})}, 0, {entries_with_null}),
      &c_array);
  EXPECT_THAT(status.message(),
              HasSubstr("array: map entries must not be null: 1 of the 2 entries are null"));
  EXPECT_EQ(c_array.release, nullptr);

  // A null key that no map slot refers to still counts; inside a struct the
  // path names the column.
  auto entries = MakeData(type->children[0].type, 2, {nullptr}, 0,
                          {Utf8s({"a", std::nullopt}), Int32s({1, 2})});
  auto maps = MakeData(type, 1, {nullptr, ValuesBuffer<int32_t>({0, 1})}, 0, {entries});
  auto column = MakeData(struct_({field("m", type)}), 1, {nullptr}, 0, {maps});
  status = ExportArray(column, &c_array);
  EXPECT_THAT(status.message(),
              HasSubstr("array.'m': map keys must not be null: 1 of the 2 keys are null"));
  EXPECT_EQ(c_array.release, nullptr);
}

// Arrow C++'s importer sizes the views buffer of a zero-length array as
// empty and then refuses any offset past it, so a zero-length slice of a
// view array (or of anything else) is exported at offset 0.
TEST_F(BridgeTest, ZeroLengthSlicesAreExportedAtOffsetZero) {
  for (const TypePtr& type : {binary_view(), utf8_view()}) {
    SCOPED_TRACE(type->ToString());
    auto views = StringViews(type, {"short", "a value longer than twelve bytes", std::nullopt});
    ArrowArray c_array;
    ASSERT_OK(ExportArray(Slice(views, 2, 0), &c_array));
    EXPECT_EQ(c_array.length, 0);
    EXPECT_EQ(c_array.offset, 0);
    auto imported = ImportArray(&c_array, type);
    ASSERT_OK(imported.status());
    EXPECT_TRUE(ValidateFull(**imported).ok());
  }
  // A zero-length string slice goes out with a zero offset entry, whatever
  // its own offsets buffer holds at index 0 (Arrow C++ reads it).
  auto strings = Utf8s({"a", "b", "c"});
  auto negative = std::make_shared<ArrayData>(*strings);
  negative->buffers[1] = ValuesBuffer<int32_t>({-1, 1, 2, 3});
  ArrowArray c_strings;
  ASSERT_OK(ExportArray(Slice(negative, 2, 0), &c_strings));
  EXPECT_EQ(c_strings.offset, 0);
  EXPECT_EQ(*static_cast<const int32_t*>(c_strings.buffers[1]), 0);
  c_strings.release(&c_strings);

  auto column = MakeData(struct_({field("a", int32())}), 0, {nullptr}, 0, {Int32s({1, 2})});
  ArrowArray c_array;
  ASSERT_OK(ExportArray(Slice(column, 2, 0), &c_array));
  EXPECT_EQ(c_array.offset, 0);
  EXPECT_EQ(c_array.children[0]->offset, 0);  // the child keeps its length and offset
  EXPECT_EQ(c_array.children[0]->length, 2);
  c_array.release(&c_array);
}

TEST_F(BridgeTest, UnionsRoundTripWithoutValidity) {
  auto ints = Int32s({1, 2, 3, 4, 5});
  auto strings = Utf8s({"a", "b", std::nullopt, "d", "e"});
  auto sparse_type = sparse_union({field("i", int32()), field("s", utf8())}, {5, 7});
  auto sparse =
      MakeData(sparse_type, 5, {ValuesBuffer<int8_t>({5, 7, 7, 5, 5})}, 0, {ints, strings});
  ExpectRoundTripsWithSlices(sparse);

  auto dense_type = dense_union({field("i", int32()), field("s", utf8())}, {0, 3});
  auto dense =
      MakeData(dense_type, 5,
               {ValuesBuffer<int8_t>({0, 3, 3, 0, 3}), ValuesBuffer<int32_t>({0, 0, 1, 1, 2})}, 0,
               {Int32s({10, 20}), Utf8s({"x", std::nullopt, "z"})});
  ExpectRoundTripsWithSlices(dense);

  ArrowArray c_array;
  ASSERT_OK(ExportArray(sparse, &c_array));
  EXPECT_EQ(c_array.n_buffers, 1);
  EXPECT_EQ(c_array.null_count, 0);
  c_array.release(&c_array);
  ASSERT_OK(ExportArray(dense, &c_array));
  EXPECT_EQ(c_array.n_buffers, 2);
  c_array.release(&c_array);
}

TEST_F(BridgeTest, RunEndEncodedRoundTrip) {
  auto type = run_end_encoded(int32(), utf8());
  auto ree = MakeData(type, 6, {}, 0,
                      {MakeData(int32(), 3, {nullptr, ValuesBuffer<int32_t>({2, 5, 6})}),
                       Utf8s({"a", std::nullopt, "c"})});
  ExpectRoundTripsWithSlices(ree);
  ArrowArray c_array;
  ASSERT_OK(ExportArray(ree, &c_array));
  EXPECT_EQ(c_array.n_buffers, 0);
  EXPECT_EQ(c_array.n_children, 2);
  c_array.release(&c_array);
}

TEST_F(BridgeTest, DictionaryRoundTripAndSchema) {
  auto type = dictionary(int16(), utf8(), /*ordered=*/true);
  auto values = Utf8s({"red", "green", std::nullopt});
  std::vector<bool> valid{true, true, false, true, true};
  auto encoded = MakeData(type, 5, {ValidityBuffer(valid), ValuesBuffer<int16_t>({0, 1, 0, 2, 1})},
                          1, {}, values);
  ExpectRoundTripsWithSlices(encoded);

  ArrowSchema c_schema;
  ASSERT_OK(ExportType(*type, &c_schema));
  EXPECT_STREQ(c_schema.format, "s");
  EXPECT_TRUE(c_schema.flags & ARROW_FLAG_DICTIONARY_ORDERED);
  ASSERT_NE(c_schema.dictionary, nullptr);
  EXPECT_STREQ(c_schema.dictionary->format, "u");
  auto imported = ImportType(&c_schema);
  ASSERT_OK(imported.status());
  EXPECT_TRUE((*imported)->Equals(*type));
  EXPECT_TRUE((*imported)->ordered);
  c_schema.release(&c_schema);

  ArrowArray c_array;
  ASSERT_OK(ExportArray(encoded, &c_array));
  ASSERT_NE(c_array.dictionary, nullptr);
  EXPECT_EQ(c_array.dictionary->length, 3);
  c_array.release(&c_array);
}

TEST_F(BridgeTest, ZeroLengthArraysWithAbsentBuffers) {
  ExpectRoundTrip(MakeData(int32(), 0, {nullptr, nullptr}));
  ExpectRoundTrip(MakeData(utf8(), 0, {nullptr, nullptr, nullptr}));
  ExpectRoundTrip(MakeData(large_binary(), 0, {nullptr, nullptr, nullptr}));
  ExpectRoundTrip(MakeData(utf8_view(), 0, {nullptr, nullptr}));
  ExpectRoundTrip(MakeData(list(field("item", int32())), 0, {nullptr, nullptr}, 0,
                           {MakeData(int32(), 0, {nullptr, nullptr})}));
  ExpectRoundTrip(MakeData(struct_({field("a", int32())}), 0, {nullptr}, 0,
                           {MakeData(int32(), 0, {nullptr, nullptr})}));

  // Consumers get a valid offsets buffer even when Ferry has none.
  ArrowArray c_array;
  ASSERT_OK(ExportArray(MakeData(utf8(), 0, {nullptr, nullptr, nullptr}), &c_array));
  ASSERT_NE(c_array.buffers[1], nullptr);
  EXPECT_EQ(static_cast<const int32_t*>(c_array.buffers[1])[0], 0);
  c_array.release(&c_array);
}

TEST_F(BridgeTest, AllNullArrays) {
  ExpectRoundTripsWithSlices(Int32s({std::nullopt, std::nullopt, std::nullopt, std::nullopt}));
  ExpectRoundTripsWithSlices(Utf8s({std::nullopt, std::nullopt, std::nullopt}));
  ExpectRoundTripsWithSlices(MakeData(null(), 0, {}, 0));
}

TEST_F(BridgeTest, NullCountIsExportedAsComputed) {
  auto ints = Int32s({1, std::nullopt, 3, std::nullopt});
  auto unknown = std::make_shared<ArrayData>(*ints);
  unknown->null_count = kUnknownNullCount;
  ArrowArray c_array;
  ASSERT_OK(ExportArray(unknown, &c_array));
  EXPECT_EQ(c_array.null_count, 2);
  c_array.release(&c_array);
}

TEST_F(BridgeTest, ExportedBuffersPointAtFerryMemory) {
  auto ints = Int32s({1, std::nullopt, 3});
  ArrowArray c_array;
  ASSERT_OK(ExportArray(ints, &c_array));
  ASSERT_EQ(c_array.n_buffers, 2);
  EXPECT_EQ(c_array.buffers[0], ints->buffers[0]->data());
  EXPECT_EQ(c_array.buffers[1], ints->buffers[1]->data());
  EXPECT_EQ(telemetry::Get(Counter::kZeroCopyExports), 1);
  c_array.release(&c_array);
  EXPECT_EQ(c_array.release, nullptr);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 1);
}

// ---- Export errors -----------------------------------------------------------

TEST_F(BridgeTest, ExportRejectsMalformedArrayData) {
  ArrowArray c_array;
  c_array.release = nullptr;
  Status status = ExportArray(nullptr, &c_array);
  EXPECT_THAT(status.message(), HasSubstr("ArrayData is null"));

  status = ExportArray(MakeData(int32(), 1, {nullptr}), &c_array);
  EXPECT_THAT(status.message(), HasSubstr("1 buffers"));
  EXPECT_EQ(c_array.release, nullptr);

  auto dict_type = dictionary(int8(), utf8());
  status = ExportArray(MakeData(dict_type, 1, {nullptr, ValuesBuffer<int8_t>({0})}), &c_array);
  EXPECT_THAT(status.message(), HasSubstr("without a dictionary"));

  // A bad child: the already exported siblings are released, nothing leaks.
  auto type = struct_({field("good", int32()), field("bad", int32())});
  status = ExportArray(
      MakeData(type, 1, {nullptr}, 0, {Int32s({1}), MakeData(int32(), 1, {nullptr})}), &c_array);
  EXPECT_THAT(status.message(), HasSubstr("array.'bad': 1 buffers"));
  EXPECT_EQ(telemetry::Get(Counter::kZeroCopyExports), 0);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 1);  // the exported sibling "good"

  ArrowSchema c_schema;
  c_schema.release = nullptr;
  status = ExportArray(MakeData(int32(), 1, {nullptr}), &c_array, &c_schema);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(c_schema.release, nullptr) << "on failure neither struct needs releasing";
}

// ---- Schemas -----------------------------------------------------------------

TEST_F(BridgeTest, SchemaRoundTripWithMetadataFlagsAndExtension) {
  Metadata extension{{std::string(kExtensionNameKey), "ferry.uuid"},
                     {std::string(kExtensionMetadataKey), "v1"}};
  Schema schema;
  schema.fields = {
      field("id", fixed_size_binary(16), /*nullable=*/false, extension),
      field("tags", list(field("tag", utf8(), true, {{"origin", "user"}}))),
      field("when", timestamp(TimeUnit::kNano, "Europe/Paris")),
      field("color", dictionary(int32(), utf8(), /*ordered=*/false)),
      field("attributes", map(utf8(), float64())),
  };
  schema.metadata = {{"producer", "ferry"}, {"producer", "repeated keys are allowed"}};

  ArrowSchema c_schema;
  ASSERT_OK(ExportSchema(schema, &c_schema));
  EXPECT_STREQ(c_schema.format, "+s");
  ASSERT_EQ(c_schema.n_children, 5);
  EXPECT_STREQ(c_schema.children[0]->name, "id");
  EXPECT_FALSE(c_schema.children[0]->flags & ARROW_FLAG_NULLABLE);
  EXPECT_TRUE(c_schema.children[1]->flags & ARROW_FLAG_NULLABLE);
  EXPECT_NE(c_schema.children[0]->metadata, nullptr);
  EXPECT_EQ(c_schema.children[2]->metadata, nullptr);
  EXPECT_STREQ(c_schema.children[2]->format, "tsn:Europe/Paris");

  auto imported = ImportSchema(&c_schema);
  ASSERT_OK(imported.status());
  EXPECT_TRUE((*imported)->Equals(schema)) << (*imported)->ToString() << "\nvs\n"
                                           << schema.ToString();
  EXPECT_EQ((*imported)->fields[0].extension_name(), "ferry.uuid");
  EXPECT_EQ((*imported)->fields[0].extension_metadata(), "v1");
  EXPECT_EQ((*imported)->metadata, schema.metadata);
  EXPECT_EQ(telemetry::Get(Counter::kSchemaExports), 1);
  EXPECT_EQ(telemetry::Get(Counter::kSchemaImports), 1);
  c_schema.release(&c_schema);
  EXPECT_EQ(c_schema.release, nullptr);
  // root, 5 fields, 'tag', the dictionary, map entries and its key and value.
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 1 + 5 + 1 + 1 + 1 + 2);
}

TEST_F(BridgeTest, FieldRoundTrip) {
  Field original = field("nested", struct_({field("x", float32(), false), field("y", float32())}),
                         /*nullable=*/true, {{"unit", "m"}});
  ArrowSchema c_schema;
  ASSERT_OK(ExportField(original, &c_schema));
  EXPECT_STREQ(c_schema.name, "nested");
  auto imported = ImportField(&c_schema);
  ASSERT_OK(imported.status());
  EXPECT_TRUE(imported->Equals(original)) << imported->ToString();
  EXPECT_NE(c_schema.release, nullptr) << "ImportField does not take ownership";
  c_schema.release(&c_schema);
}

TEST_F(BridgeTest, EveryTypeSurvivesTypeRoundTrip) {
  for (const TypePtr& type : ::ferry::testing::EveryType()) {
    ArrowSchema c_schema;
    ASSERT_OK(ExportType(*type, &c_schema));
    auto imported = ImportType(&c_schema);
    ASSERT_OK(imported.status());
    EXPECT_TRUE((*imported)->Equals(*type))
        << (*imported)->ToString() << " vs " << type->ToString();
    c_schema.release(&c_schema);
  }
}

// A caller-owned ArrowSchema for import tests; import never takes ownership.
void ReleaseStackSchema(ArrowSchema* schema) { schema->release = nullptr; }

ArrowSchema StackSchema(const char* format, const char* name = "",
                        int64_t flags = ARROW_FLAG_NULLABLE) {
  ArrowSchema schema{};
  schema.format = format;
  schema.name = name;
  schema.flags = flags;
  schema.release = &ReleaseStackSchema;
  return schema;
}

TEST_F(BridgeTest, ImportRejectsMalformedSchemas) {
  ArrowSchema schema = StackSchema(nullptr, "col");
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("format is NULL"));
  EXPECT_THAT(ImportField(nullptr).status().message(), HasSubstr("NULL"));

  schema = StackSchema("+s", "col");
  schema.n_children = -1;
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("n_children is negative"));

  schema.n_children = 2;
  schema.children = nullptr;
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("children is NULL"));

  schema = StackSchema("i", "col");
  schema.release = nullptr;
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("already released"));

  schema = StackSchema("+l", "col");
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("needs 1 children, got 0"));

  ArrowSchema child = StackSchema("i", "item");
  ArrowSchema* children[] = {&child};
  schema = StackSchema("i", "col");
  schema.n_children = 1;
  schema.children = children;
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("needs 0 children, got 1"));

  schema = StackSchema("+r", "col");
  schema.n_children = 1;
  schema.children = children;
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("needs 2 children"));

  schema = StackSchema("+us:0,1", "col");
  schema.n_children = 1;
  schema.children = children;
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("needs 2 children"));

  ArrowSchema values = StackSchema("u");
  schema = StackSchema("u", "col");
  schema.dictionary = &values;
  EXPECT_THAT(ImportField(&schema).status().message(),
              HasSubstr("dictionary on non-integer format 'u'"));

  schema = StackSchema("+s", "col");
  schema.n_children = 1;
  ArrowSchema* null_child[] = {nullptr};
  schema.children = null_child;
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("NULL"));

  // Errors name the path of the offending node.
  ArrowSchema leaf = StackSchema("Q", "x");
  ArrowSchema* leaf_children[] = {&leaf};
  ArrowSchema point = StackSchema("+s", "point");
  point.n_children = 1;
  point.children = leaf_children;
  ArrowSchema* point_children[] = {&point};
  ArrowSchema root = StackSchema("+s", "");
  root.n_children = 1;
  root.children = point_children;
  Status status = ImportSchema(&root).status();
  EXPECT_THAT(status.message(), HasSubstr("col 'point'.'x': "));
  EXPECT_THAT(status.message(), HasSubstr("'Q'"));

  // A valid tree of the same shape imports.
  leaf.format = "f";
  ASSERT_OK(ImportSchema(&root).status());

  // A schema must be a struct.
  schema = StackSchema("i");
  EXPECT_THAT(ImportSchema(&schema).status().message(), HasSubstr("must be a struct"));

  // Metadata with a negative count.
  const int32_t negative = -1;
  char bad_metadata[4];
  std::memcpy(bad_metadata, &negative, 4);
  schema = StackSchema("i", "col");
  schema.metadata = bad_metadata;
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("metadata"));

  // The stack schemas were never released by import.
  EXPECT_NE(root.release, nullptr);
  EXPECT_EQ(telemetry::Get(Counter::kSchemaImports), 1);
}

TEST_F(BridgeTest, DictionaryOnIntegerFormatImports) {
  ArrowSchema values = StackSchema("u");
  ArrowSchema schema = StackSchema("I", "col", ARROW_FLAG_NULLABLE | ARROW_FLAG_DICTIONARY_ORDERED);
  schema.dictionary = &values;
  auto imported = ImportField(&schema);
  ASSERT_OK(imported.status());
  EXPECT_TRUE(imported->type->Equals(*dictionary(uint32(), utf8(), true)));
}

// ---- Double release ------------------------------------------------------------

TEST_F(BridgeTest, ReleaseTwiceThroughSavedPointerIsCountedNotFatal) {
  ArrowArray c_array;
  ASSERT_OK(ExportArray(PointStruct(), &c_array));
  auto release = c_array.release;
  release(&c_array);
  EXPECT_EQ(c_array.release, nullptr);
  EXPECT_EQ(c_array.private_data, nullptr);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 3);
  // A consumer calling `c_array.release` again would call through NULL; one
  // that saved the pointer reaches Ferry, which detects it.
  release(&c_array);
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 1);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 3);

  ArrowSchema c_schema;
  ASSERT_OK(ExportType(*PointStruct()->type, &c_schema));
  auto schema_release = c_schema.release;
  schema_release(&c_schema);
  schema_release(&c_schema);
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 2);
}

TEST_F(BridgeTest, ConsumerMovesChildOutAndReleasesInAnyOrder) {
  auto points = PointStruct();
  const uint8_t* child_values = points->children[1]->buffers[2]->data();

  // Child released after the parent.
  ArrowArray c_array;
  ASSERT_OK(ExportArray(points, &c_array));
  ArrowArray moved_child;
  MoveArray(c_array.children[1], &moved_child);
  c_array.release(&c_array);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 2);  // parent and child 'a'
  EXPECT_EQ(moved_child.buffers[2], child_values);
  moved_child.release(&moved_child);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 3);

  // Child released before the parent.
  ASSERT_OK(ExportArray(points, &c_array));
  MoveArray(c_array.children[0], &moved_child);
  moved_child.release(&moved_child);
  c_array.release(&c_array);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 6);
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 0);
}

TEST_F(BridgeTest, ExportKeepsDataAliveAfterProducerDropsIt) {
  auto strings = Utf8s({"kept", "alive"});
  ArrowArray c_array;
  ASSERT_OK(ExportArray(strings, &c_array));
  strings.reset();
  const char* data = static_cast<const char*>(c_array.buffers[2]);
  EXPECT_EQ(std::string(data, 9), "keptalive");
  c_array.release(&c_array);
}

// ---- A foreign producer ----------------------------------------------------------
// Owns its buffers in plain heap vectors and frees them in release, so ASan
// catches any read after the foreign release has run.

int g_foreign_node_releases = 0;

struct ForeignNode {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<const void*> pointers;
  std::vector<ArrowArray*> children;
  ArrowArray* dictionary = nullptr;
};

void ReleaseForeign(ArrowArray* array) {
  auto* node = static_cast<ForeignNode*>(array->private_data);
  for (ArrowArray* child : node->children) {
    if (child->release != nullptr) child->release(child);
    delete child;
  }
  if (node->dictionary != nullptr) {
    if (node->dictionary->release != nullptr) node->dictionary->release(node->dictionary);
    delete node->dictionary;
  }
  delete node;
  array->release = nullptr;
  ++g_foreign_node_releases;
}

template <typename T>
std::optional<std::vector<uint8_t>> Bytes(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

ArrowArray Foreign(int64_t length, int64_t null_count,
                   std::vector<std::optional<std::vector<uint8_t>>> buffers,
                   std::vector<ArrowArray> children = {}, int64_t offset = 0) {
  auto* node = new ForeignNode();
  node->storage.reserve(buffers.size());
  for (auto& buffer : buffers) {
    if (buffer) {
      node->storage.push_back(std::move(*buffer));
      node->pointers.push_back(node->storage.back().data());
    } else {
      node->pointers.push_back(nullptr);
    }
  }
  for (ArrowArray& child : children) node->children.push_back(new ArrowArray(child));
  ArrowArray array{};
  array.length = length;
  array.null_count = null_count;
  array.offset = offset;
  array.n_buffers = static_cast<int64_t>(node->pointers.size());
  array.n_children = static_cast<int64_t>(node->children.size());
  array.buffers = node->pointers.empty() ? nullptr : node->pointers.data();
  array.children = node->children.empty() ? nullptr : node->children.data();
  array.release = &ReleaseForeign;
  array.private_data = node;
  return array;
}

ArrowArray ForeignInt32s(std::vector<int32_t> values) {
  return Foreign(static_cast<int64_t>(values.size()), 0, {std::nullopt, Bytes(values)});
}

ArrowArray ForeignUtf8(const std::vector<std::string>& values) {
  std::vector<int32_t> offsets{0};
  std::string bytes;
  for (const auto& value : values) {
    bytes += value;
    offsets.push_back(static_cast<int32_t>(bytes.size()));
  }
  return Foreign(static_cast<int64_t>(values.size()), 0,
                 {std::nullopt, Bytes(offsets), std::vector<uint8_t>(bytes.begin(), bytes.end())});
}

// struct<a: int32, b: utf8>, 3 rows: 3 foreign nodes.
const TypePtr& ForeignStructType() {
  static const TypePtr type = struct_({field("a", int32()), field("b", utf8())});
  return type;
}

ArrowArray ForeignStruct() {
  return Foreign(3, 0, {std::nullopt}, {ForeignInt32s({1, 2, 3}), ForeignUtf8({"x", "yy", "zzz"})});
}

class ForeignImportTest : public BridgeTest {
 protected:
  void SetUp() override {
    BridgeTest::SetUp();
    g_foreign_node_releases = 0;
  }
};

TEST_F(ForeignImportTest, ChildOutlivesParent) {
  ArrowArray c_array = ForeignStruct();
  auto imported = ImportArray(&c_array, ForeignStructType());
  ASSERT_OK(imported.status());
  EXPECT_EQ(c_array.release, nullptr);
  ArrayDataPtr child = (*imported)->children[1];
  imported = Status::Cancelled("parent dropped");
  EXPECT_EQ(g_foreign_node_releases, 0) << "the child still points into the foreign array";
  EXPECT_EQ(child->buffers[2]->view(), "xyyzzz");
  child.reset();
  EXPECT_EQ(g_foreign_node_releases, 3);  // the root release, which releases both children
  EXPECT_EQ(telemetry::Get(Counter::kForeignReleases), 1);
}

TEST_F(ForeignImportTest, ParentDroppedAfterChild) {
  ArrowArray c_array = ForeignStruct();
  auto imported = ImportArray(&c_array, ForeignStructType());
  ASSERT_OK(imported.status());
  ArrayDataPtr parent = *imported;
  imported = Status::Cancelled("moved");
  ArrayDataPtr child = parent->children[0];
  child.reset();
  EXPECT_EQ(g_foreign_node_releases, 0);
  EXPECT_EQ(parent->children[0]->GetValues<int32_t>(1)[2], 3);
  parent.reset();
  EXPECT_EQ(g_foreign_node_releases, 3);
  EXPECT_EQ(telemetry::Get(Counter::kForeignReleases), 1);
}

TEST_F(ForeignImportTest, SliceAndBufferOutliveEverything) {
  ArrowArray c_array = ForeignStruct();
  auto imported = ImportArray(&c_array, ForeignStructType());
  ASSERT_OK(imported.status());
  ArrayDataPtr slice = Slice(*imported, 1, 2);
  BufferPtr offsets = (*imported)->children[1]->buffers[1];
  imported = Status::Cancelled("dropped");
  EXPECT_EQ(g_foreign_node_releases, 0);
  EXPECT_EQ(slice->length, 2);
  EXPECT_EQ(slice->children[0]->GetValues<int32_t>(1)[slice->offset], 2);
  slice.reset();
  EXPECT_EQ(g_foreign_node_releases, 0) << "one buffer is still in use";
  EXPECT_EQ(offsets->data_as<int32_t>()[3], 6);
  offsets.reset();
  EXPECT_EQ(g_foreign_node_releases, 3);
  EXPECT_EQ(telemetry::Get(Counter::kForeignReleases), 1);
}

TEST_F(ForeignImportTest, ForeignSlicesAndNullCountsImport) {
  // A foreign struct sliced by offset, with an unknown null count.
  ArrowArray c_array =
      Foreign(2, -1, {std::nullopt}, {ForeignInt32s({1, 2, 3}), ForeignUtf8({"x", "yy", "zzz"})},
              /*offset=*/1);
  auto imported = ImportArray(&c_array, ForeignStructType());
  ASSERT_OK(imported.status());
  EXPECT_EQ((*imported)->offset, 1);
  EXPECT_EQ((*imported)->GetNullCount(), 0);
  EXPECT_EQ((*imported)->children[1]->buffers[2]->size(), 6) << "data size from the last offset";
  EXPECT_EQ((*imported)->children[1]->buffers[1]->size(), 16);
  imported = Status::Cancelled("dropped");
  EXPECT_EQ(g_foreign_node_releases, 3);
}

TEST_F(ForeignImportTest, RecordBatchFromForeignStruct) {
  ArrowArray c_array = ForeignStruct();
  auto schema = std::make_shared<Schema>();
  schema->fields = ForeignStructType()->children;
  auto batch = ImportRecordBatch(&c_array, SchemaPtr(schema));
  ASSERT_OK(batch.status());
  EXPECT_EQ((*batch)->num_rows(), 3);
  EXPECT_EQ((*batch)->num_columns(), 2);
  EXPECT_EQ((*batch)->column(1)->buffers[2]->view(), "xyyzzz");
  batch = Status::Cancelled("dropped");
  EXPECT_EQ(g_foreign_node_releases, 3);
}

TEST_F(ForeignImportTest, RecordBatchWithOffsetSlicesColumns) {
  ArrowArray c_array =
      Foreign(2, 0, {std::nullopt}, {ForeignInt32s({1, 2, 3}), ForeignUtf8({"x", "yy", "zzz"})},
              /*offset=*/1);
  auto schema = std::make_shared<Schema>();
  schema->fields = ForeignStructType()->children;
  auto batch = ImportRecordBatch(&c_array, SchemaPtr(schema));
  ASSERT_OK(batch.status());
  EXPECT_EQ((*batch)->num_rows(), 2);
  EXPECT_TRUE(ArrayEquals(*(*batch)->column(0), *Int32s({2, 3})));
  EXPECT_TRUE(ArrayEquals(*(*batch)->column(1), *Utf8s({"yy", "zzz"})));
}

TEST_F(ForeignImportTest, RecordBatchRejectsTopLevelNulls) {
  std::vector<uint8_t> validity{0b101};
  ArrowArray c_array =
      Foreign(3, 1, {validity}, {ForeignInt32s({1, 2, 3}), ForeignUtf8({"x", "yy", "zzz"})});
  auto schema = std::make_shared<Schema>();
  schema->fields = ForeignStructType()->children;
  auto batch = ImportRecordBatch(&c_array, SchemaPtr(schema));
  EXPECT_THAT(batch.status().message(), HasSubstr("1 nulls"));
  EXPECT_EQ(g_foreign_node_releases, 3);
  EXPECT_EQ(telemetry::Get(Counter::kValidationErrors), 1);
}

// ---- Rejected foreign arrays ---------------------------------------------------------
// Every rejection releases the input exactly once and counts a validation error.

struct Rejection {
  const char* name;
  TypePtr type;
  std::function<ArrowArray()> make;
  const char* expected_message;
  int nodes;  // foreign nodes the release must free
};

void PrintTo(const Rejection& rejection, std::ostream* out) { *out << rejection.name; }

class ForeignRejectionTest : public ForeignImportTest,
                             public ::testing::WithParamInterface<Rejection> {
 protected:
  void SetUp() override { ForeignImportTest::SetUp(); }
};

TEST_P(ForeignRejectionTest, RejectsAndReleasesOnce) {
  const Rejection& rejection = GetParam();
  ArrowArray c_array = rejection.make();
  auto imported = ImportArray(&c_array, rejection.type);
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(imported.status().message(), HasSubstr(rejection.expected_message));
  EXPECT_EQ(c_array.release, nullptr);
  EXPECT_EQ(g_foreign_node_releases, rejection.nodes);
  EXPECT_EQ(telemetry::Get(Counter::kForeignReleases), 1);
  EXPECT_EQ(telemetry::Get(Counter::kValidationErrors), 1);
  EXPECT_EQ(telemetry::Get(Counter::kZeroCopyImports), 0);
}

ArrowArray WithField(ArrowArray array, const std::function<void(ArrowArray*)>& change) {
  change(&array);
  return array;
}

INSTANTIATE_TEST_SUITE_P(
    BadInput, ForeignRejectionTest,
    ::testing::Values(
        Rejection{
            "NegativeLength", int32(),
            [] { return WithField(ForeignInt32s({1}), [](ArrowArray* a) { a->length = -1; }); },
            "length is negative (-1)", 1},
        Rejection{
            "NegativeOffset", int32(),
            [] { return WithField(ForeignInt32s({1}), [](ArrowArray* a) { a->offset = -3; }); },
            "offset is negative (-3)", 1},
        Rejection{
            "NegativeNullCount", int32(),
            [] { return WithField(ForeignInt32s({1}), [](ArrowArray* a) { a->null_count = -2; }); },
            "null_count is negative (-2)", 1},
        Rejection{"BufferCountMismatch", int32(),
                  [] { return Foreign(1, 0, {Bytes<int32_t>({1})}); }, "n_buffers is 1", 1},
        Rejection{"ChildCountMismatch", ForeignStructType(),
                  [] {
                    return Foreign(3, 0, {std::nullopt}, {ForeignInt32s({1, 2, 3})});
                  },
                  "n_children is 1", 2},
        Rejection{"NullBuffersPointer", int32(),
                  [] {
                    return WithField(ForeignInt32s({1}),
                                     [](ArrowArray* a) { a->buffers = nullptr; });
                  },
                  "buffers is NULL but n_buffers is 2", 1},
        Rejection{
            "NullChildrenPointer", ForeignStructType(),
            [] { return WithField(ForeignStruct(), [](ArrowArray* a) { a->children = nullptr; }); },
            "children is NULL but n_children is 2", 3},
        Rejection{"MissingValues", int32(),
                  [] {
                    return Foreign(2, 0, {std::nullopt, std::nullopt});
                  },
                  "values buffer (buffer 1) is NULL", 1},
        Rejection{"MissingOffsetsIsNotRead", utf8(),
                  [] {
                    return Foreign(2, 0, {std::nullopt, std::nullopt, std::nullopt});
                  },
                  "offsets buffer (buffer 1) is NULL", 1},
        Rejection{"MissingStringData", utf8(),
                  [] {
                    return Foreign(1, 0, {std::nullopt, Bytes<int32_t>({0, 5}), std::nullopt});
                  },
                  "data buffer (buffer 2) is NULL", 1},
        Rejection{"NegativeLastOffset", utf8(),
                  [] {
                    return Foreign(1, 0, {std::nullopt, Bytes<int32_t>({0, -5}), std::nullopt});
                  },
                  "last offset is negative", 1},
        Rejection{
            "NullsWithoutValidity", int32(),
            [] {
              return WithField(ForeignInt32s({1, 2}), [](ArrowArray* a) { a->null_count = 1; });
            },
            "validity buffer is NULL", 1},
        Rejection{"MissingDictionary", dictionary(int32(), utf8()),
                  [] {
                    return ForeignInt32s({0, 0});
                  },
                  "missing dictionary", 1},
        Rejection{"UnexpectedDictionary", int32(),
                  [] {
                    static ArrowArray dummy{};
                    return WithField(ForeignInt32s({0}),
                                     [](ArrowArray* a) { a->dictionary = &dummy; });
                  },
                  "dictionary given for non-dictionary type", 1},
        Rejection{"ChildNamedInPath", ForeignStructType(),
                  [] {
                    return Foreign(3, 0, {std::nullopt},
                                   {ForeignInt32s({1, 2, 3}),
                                    WithField(ForeignUtf8({"x", "yy", "zzz"}),
                                              [](ArrowArray* a) { a->length = -7; })});
                  },
                  "array.'b': length is negative (-7)", 3},
        Rejection{"ReleasedChild", ForeignStructType(),
                  [] {
                    ArrowArray parent = ForeignStruct();
                    // The child was moved out: its release is NULL, the parent must not use it.
                    auto* node = static_cast<ForeignNode*>(parent.private_data);
                    ArrowArray* moved = new ArrowArray(*node->children[0]);
                    node->children[0]->release = nullptr;
                    moved->release(moved);
                    delete moved;
                    --g_foreign_node_releases;  // not part of this rejection
                    return parent;
                  },
                  "array.'a': ArrowArray is already released", 2},
        Rejection{"ViewSizesMissing", utf8_view(),
                  [] {
                    std::vector<uint8_t> views(16, 0);
                    const int32_t length = 20;
                    std::memcpy(views.data(), &length, 4);
                    return Foreign(
                        1, 0, {std::nullopt, views, std::vector<uint8_t>(20, 'x'), std::nullopt});
                  },
                  "variadic buffer sizes (buffer 3) is NULL", 1},
        Rejection{"ViewNegativeSize", utf8_view(),
                  [] {
                    return Foreign(0, 0,
                                   {std::nullopt, std::nullopt, std::vector<uint8_t>(4, 'x'),
                                    Bytes<int64_t>({-4})});
                  },
                  "has negative size -4", 1},
        Rejection{"ViewTooFewBuffers", utf8_view(),
                  [] {
                    return Foreign(0, 0, {std::nullopt, std::nullopt});
                  },
                  "needs 3 or more", 1},
        Rejection{"UnionWithValidityBuffer", sparse_union({field("a", int32())}),
                  [] {
                    return Foreign(1, 0, {std::nullopt, Bytes<int8_t>({0})}, {ForeignInt32s({1})});
                  },
                  "n_buffers is 2", 2},
        Rejection{"StructuralValidationFails", list(field("item", int32())),
                  [] {
                    // Offsets promise 10 items; the child has 3.
                    return Foreign(1, 0, {std::nullopt, Bytes<int32_t>({0, 10})},
                                   {ForeignInt32s({1, 2, 3})});
                  },
                  "array: last offset exceeds the child length", 2},
        Rejection{"HugeLengthOverflowsBufferSize", int64(),
                  [] {
                    return WithField(ForeignInt32s({1, 2}),
                                     [](ArrowArray* a) { a->length = int64_t{1} << 61; });
                  },
                  "buffer size overflows int64", 1},
        Rejection{"OffsetPlusLengthOverflows", int32(),
                  [] {
                    return WithField(ForeignInt32s({1}), [](ArrowArray* a) {
                      a->length = INT64_MAX;
                      a->offset = 2;
                    });
                  },
                  "offset + length overflows", 1}),
    [](const ::testing::TestParamInfo<Rejection>& info) { return std::string(info.param.name); });

TEST_F(ForeignImportTest, CyclicArrayIsRejectedByDepth) {
  // A list node whose child is itself: import must stop, not recurse forever.
  TypePtr nested = int32();
  for (int level = 0; level < 300; ++level) nested = list(field("item", nested));
  ArrowArray loop = Foreign(0, 0, {std::nullopt, std::nullopt});
  ArrowArray* loop_children[] = {&loop};
  loop.n_children = 1;
  loop.children = loop_children;
  ArrowArray c_array = Foreign(0, 0, {std::nullopt, std::nullopt});
  c_array.n_children = 1;
  c_array.children = loop_children;

  auto imported = ImportArray(&c_array, nested);
  EXPECT_THAT(imported.status().message(), HasSubstr("nesting deeper than 200"));
  EXPECT_EQ(g_foreign_node_releases, 1) << "the root was released once";
  loop.release(&loop);
}

TEST_F(BridgeTest, SchemaSharingNodesIsRejected) {
  // 40 levels, each a struct of two children that are the same next level:
  // 2^40 fields described in 40 structs.
  std::vector<ArrowSchema> levels(40);
  std::vector<std::array<ArrowSchema*, 2>> children(40);
  for (size_t level = 0; level < levels.size(); ++level) {
    levels[level] = StackSchema(level + 1 < levels.size() ? "+s" : "i", "n");
    if (level + 1 < levels.size()) {
      children[level] = {&levels[level + 1], &levels[level + 1]};
      levels[level].n_children = 2;
      levels[level].children = children[level].data();
    }
  }
  EXPECT_THAT(ImportField(&levels[0]).status().message(),
              HasSubstr("'n'.'n': ArrowSchema node appears twice"));
}

TEST_F(BridgeTest, DeepSchemaIsRejectedByDepth) {
  std::vector<ArrowSchema> levels(250);
  std::vector<ArrowSchema*> children(250);
  for (size_t level = 0; level < levels.size(); ++level) {
    levels[level] = StackSchema(level + 1 < levels.size() ? "+l" : "i", "item");
    if (level + 1 < levels.size()) {
      children[level] = &levels[level + 1];
      levels[level].n_children = 1;
      levels[level].children = &children[level];
    }
  }
  EXPECT_THAT(ImportField(&levels[0]).status().message(), HasSubstr("nesting deeper than 200"));
  // 200 levels are fine.
  EXPECT_TRUE(ImportField(&levels[50]).ok());
}

TEST_F(BridgeTest, CyclicSchemaIsRejected) {
  ArrowSchema schema = StackSchema("+l", "loop");
  ArrowSchema* self[] = {&schema};
  schema.n_children = 1;
  schema.children = self;
  EXPECT_THAT(ImportField(&schema).status().message(), HasSubstr("appears twice"));
}

TEST_F(ForeignImportTest, AlreadyReleasedArrayIsRejectedUntouched) {
  ArrowArray c_array = ForeignInt32s({1});
  ArrowArray saved = c_array;
  c_array.release = nullptr;
  auto imported = ImportArray(&c_array, int32());
  EXPECT_THAT(imported.status().message(), HasSubstr("already released"));
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 1);
  EXPECT_EQ(g_foreign_node_releases, 0);
  saved.release(&saved);

  EXPECT_THAT(ImportArray(nullptr, int32()).status().message(), HasSubstr("NULL"));
}

TEST_F(ForeignImportTest, InputIsReleasedWhenTheTypeOrSchemaIsBad) {
  ArrowArray c_array = ForeignInt32s({1});
  EXPECT_THAT(ImportArray(&c_array, TypePtr()).status().message(), HasSubstr("type is null"));
  EXPECT_EQ(g_foreign_node_releases, 1);
  EXPECT_EQ(c_array.release, nullptr);

  c_array = ForeignInt32s({1});
  ArrowSchema bad = StackSchema("Q");
  EXPECT_THAT(ImportArray(&c_array, &bad).status().message(), HasSubstr("'Q'"));
  EXPECT_EQ(g_foreign_node_releases, 2);

  c_array = ForeignStruct();
  ArrowSchema not_struct = StackSchema("i");
  EXPECT_THAT(ImportRecordBatch(&c_array, &not_struct).status().message(),
              HasSubstr("must be a struct"));
  EXPECT_EQ(g_foreign_node_releases, 5);

  c_array = ForeignStruct();
  EXPECT_THAT(ImportRecordBatch(&c_array, SchemaPtr()).status().message(),
              HasSubstr("schema is null"));
  EXPECT_EQ(g_foreign_node_releases, 8);
  EXPECT_EQ(telemetry::Get(Counter::kForeignReleases), 4);
}

TEST_F(ForeignImportTest, ZeroLengthForeignArrayMayOmitBuffers) {
  ArrowArray c_array = Foreign(0, 0, {std::nullopt, std::nullopt, std::nullopt});
  auto imported = ImportArray(&c_array, utf8());
  ASSERT_OK(imported.status());
  EXPECT_EQ((*imported)->length, 0);
  EXPECT_EQ((*imported)->buffers[1], nullptr);
}

// ---- Record batches ---------------------------------------------------------------

TEST_F(BridgeTest, RecordBatchRoundTrip) {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("a", int32()), field("b", utf8())};
  schema->metadata = {{"origin", "test"}};
  auto batch = RecordBatch::Make(schema, 3, {Int32s({1, std::nullopt, 3}), Utf8s({"x", "y", "z"})});
  ASSERT_OK(batch.status());

  ArrowArray c_array;
  ArrowSchema c_schema;
  ASSERT_OK(ExportRecordBatch(**batch, &c_array, &c_schema));
  EXPECT_STREQ(c_schema.format, "+s");
  EXPECT_NE(c_schema.metadata, nullptr);
  auto imported = ImportRecordBatch(&c_array, &c_schema);
  c_schema.release(&c_schema);
  ASSERT_OK(imported.status());
  EXPECT_TRUE((*imported)->Equals(**batch)) << (*imported)->ToString();
  EXPECT_EQ((*imported)->schema()->metadata, schema->metadata);
  EXPECT_EQ((*imported)->column(1)->buffers[2]->data(), (*batch)->column(1)->buffers[2]->data());

  // Sliced batches keep their offset through the struct.
  auto slice = (*batch)->Slice(1, 2);
  ASSERT_OK(ExportRecordBatch(*slice, &c_array));
  auto imported_slice = ImportRecordBatch(&c_array, schema);
  ASSERT_OK(imported_slice.status());
  EXPECT_TRUE((*imported_slice)->Equals(*slice)) << (*imported_slice)->ToString();
}

TEST_F(BridgeTest, MoveHelpersMarkTheSourceReleased) {
  ArrowArray c_array;
  ASSERT_OK(ExportArray(Int32s({1}), &c_array));
  ArrowArray moved;
  MoveArray(&c_array, &moved);
  EXPECT_EQ(c_array.release, nullptr);
  ASSERT_NE(moved.release, nullptr);
  moved.release(&moved);

  ArrowSchema c_schema;
  ASSERT_OK(ExportType(*int32(), &c_schema));
  ArrowSchema moved_schema;
  MoveSchema(&c_schema, &moved_schema);
  EXPECT_EQ(c_schema.release, nullptr);
  EXPECT_STREQ(moved_schema.format, "i");
  moved_schema.release(&moved_schema);

  ArrowArrayStream stream{};
  stream.release = [](ArrowArrayStream* s) { s->release = nullptr; };
  ArrowArrayStream moved_stream;
  MoveArrayStream(&stream, &moved_stream);
  EXPECT_EQ(stream.release, nullptr);
  ASSERT_NE(moved_stream.release, nullptr);
  moved_stream.release(&moved_stream);
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 0);
}

// ---- ValidateStructural's rules, checked during import ---------------------------
// Import holds each node to ValidateStructural's rules as it builds it
// instead of walking the finished tree again; the messages are the
// validator's, with the node's path.

struct StructuralRejection {
  const char* name;
  TypePtr type;
  std::function<ArrowArray()> make;
  const char* expected_message;
};

void PrintTo(const StructuralRejection& rejection, std::ostream* out) { *out << rejection.name; }

class StructuralRejectionTest : public ForeignImportTest,
                                public ::testing::WithParamInterface<StructuralRejection> {};

TEST_P(StructuralRejectionTest, RejectsWithTheValidatorsMessage) {
  const StructuralRejection& rejection = GetParam();
  ArrowArray c_array = rejection.make();
  auto imported = ImportArray(&c_array, rejection.type);
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.status().message(), rejection.expected_message);
  EXPECT_EQ(c_array.release, nullptr);
  EXPECT_EQ(telemetry::Get(Counter::kForeignReleases), 1);
  EXPECT_EQ(telemetry::Get(Counter::kValidationErrors), 1);
  EXPECT_EQ(telemetry::Get(Counter::kZeroCopyImports), 0);
}

INSTANTIATE_TEST_SUITE_P(
    BadStructure, StructuralRejectionTest,
    ::testing::Values(
        StructuralRejection{"NegativeFirstOffset", utf8(),
                            [] {
                              return Foreign(
                                  1, 0,
                                  {std::nullopt, Bytes<int32_t>({-1, 2}), Bytes<char>({'x', 'y'})});
                            },
                            "array: offsets must be non-negative: offsets[0]=-1"},
        StructuralRejection{
            "DecreasingOffsets", large_utf8(),
            [] {
              return Foreign(1, 0, {std::nullopt, Bytes<int64_t>({3, 1}), Bytes<char>({'x'})});
            },
            "array: offsets must be non-decreasing: offsets[0]=3 > offsets[1]=1"},
        StructuralRejection{
            "StructChildTooShort", ForeignStructType(),
            [] {
              return Foreign(3, 0, {std::nullopt},
                             {ForeignInt32s({1, 2}), ForeignUtf8({"x", "yy", "zzz"})});
            },
            "array: child 0 ('a') is too short: offset + length needs length 3, child has 2"},
        StructuralRejection{
            "NestedNodeNamedInPath", struct_({field("inner", ForeignStructType())}),
            [] {
              ArrowArray inner = Foreign(3, 0, {std::nullopt},
                                         {ForeignInt32s({1, 2, 3}), ForeignUtf8({"x", "yy"})});
              return Foreign(3, 0, {std::nullopt}, {inner});
            },
            "array.'inner': child 1 ('b') is too short: offset + length needs length 3, child "
            "has 2"},
        StructuralRejection{
            "UnionWithNulls", sparse_union({field("a", int32())}),
            [] { return Foreign(1, 1, {Bytes<int8_t>({0})}, {ForeignInt32s({1})}); },
            "array: sparse_union arrays have no validity bitmap, so null_count must be 0 (or "
            "unknown), got 1"},
        StructuralRejection{
            "RunEndsAndValuesOfDifferentLengths", run_end_encoded(int32(), int32()),
            [] {
              return Foreign(2, 0, {}, {ForeignInt32s({2}), ForeignInt32s({7, 8})});
            },
            "array: run_ends and values must have the same length: run_ends has 1, values has 2"},
        StructuralRejection{
            "RunEndTypeTooNarrow", run_end_encoded(int16(), int32()),
            [] {
              return Foreign(
                  40000, 0, {},
                  {Foreign(1, 0, {std::nullopt, Bytes<int16_t>({32767})}), ForeignInt32s({7})});
            },
            "array: offset + length = 40000 does not fit the run-end type int16 (max 32767)"},
        StructuralRejection{
            "FixedSizeListChildTooShort", fixed_size_list(field("item", int32()), 2),
            [] {
              return Foreign(2, 0, {std::nullopt}, {ForeignInt32s({1, 2, 3})});
            },
            "array: child 0 ('item') is too short: (offset + length) * list_size needs length 4, "
            "child has 3"}),
    [](const ::testing::TestParamInfo<StructuralRejection>& info) {
      return std::string(info.param.name);
    });

TEST_F(ForeignImportTest, WellFormedArraysPassTheFoldedChecks) {
  // The passing side of the rules above: equal offsets, children exactly as
  // long as needed, a union without nulls, run ends within int16.
  ArrowArray strings =
      Foreign(2, 0, {std::nullopt, Bytes<int32_t>({0, 0, 2}), Bytes<char>({'x', 'y'})});
  ASSERT_OK(ImportArray(&strings, utf8()).status());
  ArrowArray sized_struct =
      Foreign(2, 0, {std::nullopt}, {ForeignInt32s({1, 2}), ForeignUtf8({"x", "yy"})},
              /*offset=*/0);
  ASSERT_OK(ImportArray(&sized_struct, ForeignStructType()).status());
  ArrowArray run_ends = Foreign(
      32767, 0, {}, {Foreign(1, 0, {std::nullopt, Bytes<int16_t>({32767})}), ForeignInt32s({7})});
  ASSERT_OK(ImportArray(&run_ends, run_end_encoded(int16(), int32())).status());
  ArrowArray fixed_lists = Foreign(2, 0, {std::nullopt}, {ForeignInt32s({1, 2, 3, 4})});
  ASSERT_OK(ImportArray(&fixed_lists, fixed_size_list(field("item", int32()), 2)).status());
  EXPECT_EQ(telemetry::Get(Counter::kValidationErrors), 0);
  EXPECT_EQ(telemetry::Get(Counter::kZeroCopyImports), 4);
}

TEST_F(ForeignImportTest, CallersTypeIsValidatedAfterTheWalk) {
  // A type the caller built may break ValidateType's rules: reported with
  // the root's path once the walk has found nothing else.
  ArrowArray decimals = Foreign(1, 0, {std::nullopt, std::vector<uint8_t>(16, 0)});
  auto imported = ImportArray(&decimals, decimal(128, 0, 0));
  ASSERT_FALSE(imported.ok());
  EXPECT_THAT(imported.status().message(), HasSubstr("array: decimal128 precision must be in"));
  EXPECT_EQ(g_foreign_node_releases, 1);

  // The walk's own errors come first.
  ArrowArray broken = WithField(Foreign(1, 0, {std::nullopt, std::vector<uint8_t>(16, 0)}),
                                [](ArrowArray* a) { a->length = -1; });
  imported = ImportArray(&broken, decimal(128, 0, 0));
  EXPECT_THAT(imported.status().message(), HasSubstr("array: length is negative (-1)"));

  // And a record batch's schema from the caller is checked the same way.
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("price", decimal(128, 0, 0))};
  ArrowArray batch_array =
      Foreign(1, 0, {std::nullopt}, {Foreign(1, 0, {std::nullopt, std::vector<uint8_t>(16, 0)})});
  auto batch = ImportRecordBatch(&batch_array, SchemaPtr(schema));
  EXPECT_THAT(batch.status().message(), HasSubstr("array: field 'price': decimal128 precision"));
  EXPECT_EQ(telemetry::Get(Counter::kValidationErrors), 3);
  EXPECT_EQ(telemetry::Get(Counter::kForeignReleases), 3);
}

// `levels` lists nested in one another around int32, all empty.
ArrowArray EmptyNestedLists(int levels) {
  ArrowArray array = Foreign(0, 0, {std::nullopt, std::nullopt});
  for (int level = 0; level < levels; ++level) {
    array = Foreign(0, 0, {std::nullopt, std::nullopt}, {array});
  }
  return array;
}

TypePtr NestedListType(int levels) {
  TypePtr type = int32();
  for (int level = 0; level < levels; ++level) type = list(field("item", type));
  return type;
}

TEST_F(ForeignImportTest, TypeNestingDeeperThanTheValidatorAllowsIsRejected) {
  // 129 type levels: import itself goes to 200, ValidateStructural to 128.
  ArrowArray too_deep = EmptyNestedLists(128);
  auto imported = ImportArray(&too_deep, NestedListType(128));
  EXPECT_EQ(imported.status().message(), "array: type nesting is deeper than 128 levels");

  // The same through a schema import, whose type is trusted to be valid.
  ArrowSchema c_schema;
  ASSERT_OK(ExportType(*NestedListType(128), &c_schema));
  too_deep = EmptyNestedLists(128);
  imported = ImportArray(&too_deep, &c_schema);
  EXPECT_EQ(imported.status().message(), "array: type nesting is deeper than 128 levels");

  // 128 levels pass, by either route.
  ArrowArray deep = EmptyNestedLists(127);
  ASSERT_OK(ImportArray(&deep, NestedListType(127)).status());
  c_schema.release(&c_schema);
  ASSERT_OK(ExportType(*NestedListType(127), &c_schema));
  deep = EmptyNestedLists(127);
  ASSERT_OK(ImportArray(&deep, &c_schema).status());
  c_schema.release(&c_schema);
  EXPECT_EQ(telemetry::Get(Counter::kValidationErrors), 2);
  EXPECT_EQ(telemetry::Get(Counter::kZeroCopyImports), 2);
}

// ---- Schemas of many columns ----------------------------------------------------------

TEST_F(BridgeTest, ColumnsOfOneTypeKeepTheirOwnNamesFlagsAndMetadata) {
  Schema schema;
  for (int index = 0; index < 300; ++index) {
    Metadata metadata;
    if (index % 7 == 3) metadata = {{"column", std::to_string(index)}};
    schema.fields.push_back(field("c" + std::to_string(index),
                                  index % 2 == 0 ? int64() : timestamp(TimeUnit::kMicro, "UTC"),
                                  /*nullable=*/index % 3 != 0, metadata));
  }
  ArrowSchema c_schema;
  ASSERT_OK(ExportSchema(schema, &c_schema));
  auto imported = ImportSchema(&c_schema);
  ASSERT_OK(imported.status());
  EXPECT_TRUE((*imported)->Equals(schema));
  EXPECT_EQ((*imported)->fields[10].metadata, schema.fields[10].metadata);
  EXPECT_TRUE((*imported)->fields[11].metadata.empty());
  EXPECT_FALSE((*imported)->fields[9].nullable);

  // A child listed twice, far apart, is still caught.
  ArrowSchema* shared = c_schema.children[10];
  ArrowSchema* replaced = c_schema.children[250];
  c_schema.children[250] = shared;
  EXPECT_THAT(ImportSchema(&c_schema).status().message(),
              HasSubstr("col 'c10': ArrowSchema node appears twice"));
  c_schema.children[250] = replaced;
  c_schema.release(&c_schema);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 301);
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 0);
}

// ---- Record batch export: columns released one by one ------------------------------------

TEST_F(BridgeTest, ColumnsMovedOutOfAnExportedBatchOutliveIt) {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("a", int32()), field("b", utf8()), field("c", utf8_view())};
  auto strings = Utf8s({"x", "yy", "zzz"});
  auto views = StringViews(utf8_view(), {"short", "a value longer than twelve", std::nullopt});
  auto batch = RecordBatch::Make(schema, 3, {Int32s({1, 2, 3}), strings, views});
  ASSERT_OK(batch.status());
  const uint8_t* string_data = strings->buffers[2]->data();

  ArrowArray c_array;
  ArrowSchema c_schema;
  ASSERT_OK(ExportRecordBatch(**batch, &c_array, &c_schema));
  ArrowArray column_b;
  ArrowArray column_c;
  ArrowSchema field_b;
  MoveArray(c_array.children[1], &column_b);
  MoveArray(c_array.children[2], &column_c);
  MoveSchema(c_schema.children[1], &field_b);
  c_array.release(&c_array);
  c_schema.release(&c_schema);
  batch = Status::Cancelled("dropped");
  strings.reset();
  views.reset();
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 2 + 2 + 1);  // roots, 'a' and its field, 'c'

  // What the moved members point at is still theirs.
  EXPECT_STREQ(field_b.name, "b");
  EXPECT_STREQ(field_b.format, "u");
  EXPECT_EQ(column_b.buffers[2], string_data);
  EXPECT_EQ(std::string(static_cast<const char*>(column_b.buffers[2]), 6), "xyyzzz");
  ASSERT_EQ(column_c.n_buffers, 5);
  const auto* sizes = static_cast<const int64_t*>(column_c.buffers[4]);
  EXPECT_EQ(sizes[0] + sizes[1], 26);
  column_c.release(&column_c);
  field_b.release(&field_b);
  column_b.release(&column_b);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 8);
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 0);
}

TEST_F(BridgeTest, FailedBatchExportReleasesWhatItExported) {
  // The third column is malformed: the two before it were exported already
  // and are released; nothing is left in the outputs.
  auto bad = std::make_shared<ArrayData>(*Int32s({1, 2}));
  bad->buffers.pop_back();
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("a", int32()), field("b", utf8()), field("bad", int32())};
  auto batch = RecordBatch::Make(schema, 2, {Int32s({1, 2}), Utf8s({"x", "y"}), bad});
  ASSERT_OK(batch.status());
  ArrowArray c_array{};
  ArrowSchema c_schema{};
  Status status = ExportRecordBatch(**batch, &c_array, &c_schema);
  EXPECT_THAT(status.message(), HasSubstr("ExportArray: array.'bad': 1 buffers"));
  EXPECT_EQ(c_array.release, nullptr);
  EXPECT_EQ(c_schema.release, nullptr);
  // The schema (root and three fields) and the two columns exported.
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 4 + 2);
}

}  // namespace
}  // namespace ferry
