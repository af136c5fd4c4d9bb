#include "ferry/exchange/validate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
const std::string kPath = "col 'c'";

// ---- Buffers ------------------------------------------------------------------

// Exact-size heap memory (no padding), so AddressSanitizer reports any read
// past a buffer's recorded size. Buffer::Allocate pads to 64 bytes, which
// would hide small overreads; it is used only where that does not matter.
BufferPtr ExactBuffer(const void* bytes, int64_t size) {
  std::shared_ptr<uint8_t[]> memory(new uint8_t[static_cast<size_t>(size)]);
  if (size > 0) std::memcpy(memory.get(), bytes, static_cast<size_t>(size));
  const uint8_t* data = memory.get();
  return std::make_shared<Buffer>(data, size, std::static_pointer_cast<const void>(memory));
}

BufferPtr Bytes(std::string_view bytes) {
  return ExactBuffer(bytes.data(), static_cast<int64_t>(bytes.size()));
}

BufferPtr Zeros(int64_t size) {
  std::vector<uint8_t> zeros(static_cast<size_t>(size), 0);
  return ExactBuffer(zeros.data(), size);
}

template <typename T>
BufferPtr Values(const std::vector<T>& values) {
  return ExactBuffer(values.data(), static_cast<int64_t>(values.size() * sizeof(T)));
}

// A validity bitmap from 0/1 flags, via Buffer::Allocate (padding is harmless:
// bitmaps are checked by byte count, which the tests state explicitly).
BufferPtr Bitmap(const std::vector<int>& bits) {
  const int64_t bytes = BytesForBits(static_cast<int64_t>(bits.size()));
  BufferPtr buffer = *Buffer::Allocate(bytes);
  std::memset(buffer->mutable_data(), 0, static_cast<size_t>(bytes));
  for (size_t i = 0; i < bits.size(); ++i) {
    if (bits[i]) SetBit(buffer->mutable_data(), static_cast<int64_t>(i));
  }
  // Re-wrap at exact size so overreads are still caught.
  return ExactBuffer(buffer->data(), bytes);
}

// ---- Arrays --------------------------------------------------------------------

std::shared_ptr<ArrayData> Make(TypePtr type, int64_t length, std::vector<BufferPtr> buffers,
                                std::vector<ArrayDataPtr> children = {}, int64_t null_count = 0) {
  auto data = std::make_shared<ArrayData>();
  data->type = std::move(type);
  data->length = length;
  data->null_count = null_count;
  data->buffers = std::move(buffers);
  data->children = std::move(children);
  return data;
}

template <typename T>
std::shared_ptr<ArrayData> Primitive(TypePtr type, const std::vector<T>& values) {
  return Make(std::move(type), static_cast<int64_t>(values.size()), {nullptr, Values(values)});
}

std::shared_ptr<ArrayData> Int32s(const std::vector<int32_t>& values) {
  return Primitive(int32(), values);
}

std::shared_ptr<ArrayData> Int64s(const std::vector<int64_t>& values) {
  return Primitive(int64(), values);
}

template <typename Offset>
std::shared_ptr<ArrayData> StringsOf(TypePtr type, const std::vector<std::string>& values) {
  std::vector<Offset> offsets = {0};
  std::string bytes;
  for (const std::string& value : values) {
    bytes += value;
    offsets.push_back(static_cast<Offset>(bytes.size()));
  }
  return Make(std::move(type), static_cast<int64_t>(values.size()),
              {nullptr, Values(offsets), Bytes(bytes)});
}

std::shared_ptr<ArrayData> Strings(const std::vector<std::string>& values) {
  return StringsOf<int32_t>(utf8(), values);
}

std::shared_ptr<ArrayData> WithNulls(std::shared_ptr<ArrayData> data,
                                     const std::vector<int>& valid) {
  data->buffers[0] = Bitmap(valid);
  int64_t nulls = 0;
  for (int bit : valid) nulls += bit ? 0 : 1;
  data->null_count = nulls;
  return data;
}

std::shared_ptr<ArrayData> ListOf(TypePtr list_type, const std::vector<int32_t>& offsets,
                                  ArrayDataPtr child) {
  return Make(std::move(list_type), static_cast<int64_t>(offsets.size()) - 1,
              {nullptr, Values(offsets)}, {std::move(child)});
}

// One 16-byte binary view.
using View = std::array<uint8_t, 16>;

View InlineView(std::string_view value) {
  View view{};
  const auto length = static_cast<int32_t>(value.size());
  std::memcpy(view.data(), &length, 4);
  std::memcpy(view.data() + 4, value.data(), value.size());
  return view;
}

View RefView(int32_t length, std::string_view prefix, int32_t buffer_index, int32_t offset) {
  View view{};
  std::memcpy(view.data(), &length, 4);
  std::memcpy(view.data() + 4, prefix.data(), std::min<size_t>(prefix.size(), 4));
  std::memcpy(view.data() + 8, &buffer_index, 4);
  std::memcpy(view.data() + 12, &offset, 4);
  return view;
}

std::shared_ptr<ArrayData> ViewsOf(TypePtr type, const std::vector<View>& views,
                                   std::vector<BufferPtr> data_buffers = {}) {
  std::vector<BufferPtr> buffers = {nullptr, Values(views)};
  for (BufferPtr& buffer : data_buffers) buffers.push_back(std::move(buffer));
  return Make(std::move(type), static_cast<int64_t>(views.size()), std::move(buffers));
}

// ---- Expectations ----------------------------------------------------------------

// The message must start with "<path>: " and name the rule.
::testing::AssertionResult FailsWith(const Status& status, std::string_view path,
                                     std::string_view rule) {
  if (status.ok()) return ::testing::AssertionFailure() << "expected an error, got OK";
  if (status.code() != StatusCode::kInvalid) {
    return ::testing::AssertionFailure() << "expected Invalid, got " << status.ToString();
  }
  const std::string& message = status.message();
  const std::string prefix = std::string(path) + ": ";
  if (message.rfind(prefix, 0) != 0) {
    return ::testing::AssertionFailure()
           << "message does not start with '" << prefix << "': " << message;
  }
  if (message.find(rule) == std::string::npos) {
    return ::testing::AssertionFailure() << "message lacks '" << rule << "': " << message;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult IsOk(const Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status.ToString();
}

// Both levels accept `data`.
::testing::AssertionResult BothOk(const ArrayData& data) {
  Status structural = ValidateStructural(data, kPath);
  if (!structural.ok())
    return ::testing::AssertionFailure() << "structural: " << structural.ToString();
  Status full = ValidateFull(data, kPath);
  if (!full.ok()) return ::testing::AssertionFailure() << "full: " << full.ToString();
  return ::testing::AssertionSuccess();
}

// Structural accepts `data` but Full rejects it with `rule`.
::testing::AssertionResult OnlyFullFails(const ArrayData& data, std::string_view rule,
                                         std::string_view path = kPath) {
  Status structural = ValidateStructural(data, kPath);
  if (!structural.ok()) {
    return ::testing::AssertionFailure() << "structural should pass: " << structural.ToString();
  }
  return FailsWith(ValidateFull(data, kPath), path, rule);
}

// Both levels reject `data` with `rule`.
::testing::AssertionResult BothFail(const ArrayData& data, std::string_view rule,
                                    std::string_view path = kPath) {
  ::testing::AssertionResult structural = FailsWith(ValidateStructural(data, kPath), path, rule);
  if (!structural) return structural << " (structural)";
  ::testing::AssertionResult full = FailsWith(ValidateFull(data, kPath), path, rule);
  if (!full) return full << " (full)";
  return ::testing::AssertionSuccess();
}

// =============================================================================
// Structural: the array node itself
// =============================================================================

TEST(ValidateStructuralTest, TypeMustBePresent) {
  auto data = Int32s({1, 2});
  EXPECT_TRUE(BothOk(*data));
  data->type = nullptr;
  EXPECT_TRUE(BothFail(*data, "array has no type"));
}

TEST(ValidateStructuralTest, TypeParametersMustBeValid) {
  auto good = Make(decimal(128, 10, 2), 1, {nullptr, Zeros(16)});
  EXPECT_TRUE(BothOk(*good));
  auto bad = Make(decimal(128, 0, 2), 1, {nullptr, Zeros(16)});
  EXPECT_TRUE(BothFail(*bad, "precision"));
}

TEST(ValidateStructuralTest, EmptyPathIsShownAsArray) {
  auto data = Int32s({1});
  data->length = -1;
  EXPECT_TRUE(FailsWith(ValidateStructural(*data), "array", "length must be non-negative"));
  EXPECT_TRUE(FailsWith(ValidateFull(*data), "array", "length must be non-negative"));
}

TEST(ValidateStructuralTest, LengthMustBeNonNegative) {
  auto data = Int32s({1, 2, 3});
  data->length = -3;
  EXPECT_TRUE(BothFail(*data, "length must be non-negative, got -3"));
}

TEST(ValidateStructuralTest, OffsetMustBeNonNegative) {
  auto data = Int32s({1, 2, 3});
  data->offset = 1;
  data->length = 2;
  EXPECT_TRUE(BothOk(*data));
  data->offset = -1;
  EXPECT_TRUE(BothFail(*data, "offset must be non-negative, got -1"));
}

TEST(ValidateStructuralTest, OffsetPlusLengthMustNotOverflow) {
  auto data = Int32s({1});
  data->offset = kInt64Max;
  data->length = 1;
  EXPECT_TRUE(BothFail(*data, "offset + length overflows int64"));
}

TEST(ValidateStructuralTest, NullCountRange) {
  auto data = WithNulls(Int32s({1, 2, 3}), {1, 0, 1});
  EXPECT_TRUE(BothOk(*data));
  data->null_count = kUnknownNullCount;
  EXPECT_TRUE(BothOk(*data));
  data->null_count = -2;
  EXPECT_TRUE(BothFail(*data, "null_count must be in [0, length] or unknown (-1)"));
  data->null_count = 4;
  EXPECT_TRUE(BothFail(*data, "null_count must be in [0, length] or unknown (-1): null_count 4"));
}

TEST(ValidateStructuralTest, NullArrayHasNoBuffersAndAllNulls) {
  auto data = Make(null(), 3, {}, {}, 3);
  EXPECT_TRUE(BothOk(*data));
  data->null_count = kUnknownNullCount;
  EXPECT_TRUE(BothOk(*data));
  data->null_count = 0;
  EXPECT_TRUE(BothFail(*data, "a null array's null_count must equal its length"));
  data->null_count = 3;
  data->buffers = {nullptr};
  EXPECT_TRUE(BothFail(*data, "null arrays have exactly 0 buffers"));
}

TEST(ValidateStructuralTest, UnionsAndRunEndEncodedHaveNoNullCount) {
  auto type = sparse_union({field("a", int32())});
  auto data = Make(type, 1, {Values<int8_t>({0})}, {Int32s({7})});
  EXPECT_TRUE(BothOk(*data));
  data->null_count = 1;
  EXPECT_TRUE(BothFail(*data, "arrays have no validity bitmap, so null_count must be 0"));

  auto ree = Make(run_end_encoded(int32(), int64()), 1, {}, {Int32s({1}), Int64s({5})});
  EXPECT_TRUE(BothOk(*ree));
  ree->null_count = 1;
  EXPECT_TRUE(BothFail(*ree, "null_count must be 0"));
}

TEST(ValidateStructuralTest, BufferCountPerType) {
  auto data = Int32s({1});
  data->buffers.pop_back();
  EXPECT_TRUE(BothFail(*data, "int32 arrays have exactly 2 buffers (validity, values), got 1"));

  auto strings = Strings({"a"});
  strings->buffers.pop_back();
  EXPECT_TRUE(BothFail(*strings, "arrays have exactly 3 buffers (validity, offsets, data), got 2"));

  auto structs = Make(struct_({field("a", int32())}), 1, {nullptr, nullptr}, {Int32s({1})});
  EXPECT_TRUE(BothFail(*structs, "exactly 1 buffer (validity), got 2"));

  // Unions lost their validity bitmap in Arrow 1.0: a sparse union has type ids only.
  auto sparse =
      Make(sparse_union({field("a", int32())}), 1, {nullptr, Values<int8_t>({0})}, {Int32s({1})});
  EXPECT_TRUE(BothFail(*sparse, "exactly 1 buffer (type_ids), got 2"));

  auto dense = Make(dense_union({field("a", int32())}), 1, {Values<int8_t>({0})}, {Int32s({1})});
  EXPECT_TRUE(BothFail(*dense, "exactly 2 buffers (type_ids, offsets), got 1"));

  auto ree = Make(run_end_encoded(int32(), int64()), 1, {nullptr}, {Int32s({1}), Int64s({5})});
  EXPECT_TRUE(BothFail(*ree, "exactly 0 buffers"));
}

TEST(ValidateStructuralTest, ViewsNeedAtLeastTwoBuffers) {
  auto two = ViewsOf(binary_view(), {InlineView("abc")});
  EXPECT_TRUE(BothOk(*two));
  auto four = ViewsOf(binary_view(), {InlineView("abc"), RefView(13, "0123", 1, 0)},
                      {Bytes("unused"), Bytes("0123456789abc")});
  EXPECT_TRUE(BothOk(*four));
  auto one = ViewsOf(utf8_view(), {InlineView("abc")});
  one->buffers.pop_back();
  EXPECT_TRUE(
      BothFail(*one, "arrays need at least 2 buffers (validity, views, then data buffers)"));
}

TEST(ValidateStructuralTest, BufferMustNotHaveNegativeSize) {
  auto data = Int32s({1});
  static const uint8_t kBytes[4] = {};
  data->buffers[1] = std::make_shared<Buffer>(kBytes, -4, nullptr);
  EXPECT_TRUE(BothFail(*data, "buffer 1 has a negative size -4"));
}

TEST(ValidateStructuralTest, BufferWithSizeNeedsData) {
  auto data = Int32s({1});
  data->buffers[1] = std::make_shared<Buffer>(nullptr, 4, nullptr);
  EXPECT_TRUE(BothFail(*data, "buffer 1 has a null data pointer but size 4"));
  data->buffers[1] = std::make_shared<Buffer>(nullptr, 0, nullptr);
  data->length = 0;
  EXPECT_TRUE(BothOk(*data));
}

TEST(ValidateStructuralTest, AbsentValidityOnlyWithoutNulls) {
  auto data = Int32s({1, 2});
  EXPECT_TRUE(BothOk(*data));
  data->null_count = kUnknownNullCount;
  EXPECT_TRUE(BothOk(*data));
  data->null_count = 1;
  EXPECT_TRUE(BothFail(*data, "validity bitmap is absent (all valid) but null_count is 1"));
}

TEST(ValidateStructuralTest, ValidityBitmapMustCoverOffsetPlusLength) {
  std::vector<int32_t> nine(9, 1);
  auto data = Int32s(nine);
  data->buffers[0] = Bytes(std::string("\xFF\x01", 2));
  EXPECT_TRUE(BothOk(*data));
  data->buffers[0] = Bytes("\xFF");
  EXPECT_TRUE(BothFail(*data, "validity buffer (buffer 0) is too small: 9 bits need 2 bytes"));
  // offset 8 + length 1 also needs two bytes.
  data->offset = 8;
  data->length = 1;
  EXPECT_TRUE(BothFail(*data, "validity buffer (buffer 0) is too small"));
}

struct FixedWidthCase {
  const char* name;
  TypePtr type;
  int64_t width;
};

// Every fixed-width layout must hold (offset + length) values.
TEST(ValidateStructuralTest, FixedWidthValuesMustCoverOffsetPlusLength) {
  const std::vector<FixedWidthCase> cases = {
      {"int8", int8(), 1},
      {"uint8", uint8(), 1},
      {"int16", int16(), 2},
      {"uint16", uint16(), 2},
      {"int32", int32(), 4},
      {"uint32", uint32(), 4},
      {"int64", int64(), 8},
      {"uint64", uint64(), 8},
      {"half_float", float16(), 2},
      {"float", float32(), 4},
      {"double", float64(), 8},
      {"decimal32", decimal(32, 5, 1), 4},
      {"decimal64", decimal(64, 12, 1), 8},
      {"decimal128", decimal(128, 30, 2), 16},
      {"decimal256", decimal(256, 60, 2), 32},
      {"fixed_size_binary(5)", fixed_size_binary(5), 5},
      {"date32", date32(), 4},
      {"date64", date64(), 8},
      {"time32", time32(TimeUnit::kMilli), 4},
      {"time64", time64(TimeUnit::kNano), 8},
      {"timestamp", timestamp(TimeUnit::kMicro, "UTC"), 8},
      {"duration", duration(TimeUnit::kSecond), 8},
      {"interval_months", interval_months(), 4},
      {"interval_day_time", interval_day_time(), 8},
      {"interval_month_day_nano", interval_month_day_nano(), 16},
  };
  for (const FixedWidthCase& test_case : cases) {
    SCOPED_TRACE(test_case.name);
    // offset 1 + length 3 = 4 values.
    auto data = Make(test_case.type, 3, {nullptr, Zeros(4 * test_case.width)});
    data->offset = 1;
    EXPECT_TRUE(BothOk(*data));
    data->buffers[1] = Zeros(4 * test_case.width - 1);
    EXPECT_TRUE(BothFail(*data, "values buffer (buffer 1) is too small: 4 elements of"));
  }
}

TEST(ValidateStructuralTest, FixedSizeBinaryOfWidthZeroNeedsNoBytes) {
  auto data = Make(fixed_size_binary(0), 5, {nullptr, nullptr});
  EXPECT_TRUE(BothOk(*data));
}

TEST(ValidateStructuralTest, BooleanValuesAreBitPacked) {
  auto data = Make(boolean(), 9, {nullptr, Zeros(2)});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Zeros(1);
  EXPECT_TRUE(BothFail(*data, "values buffer (buffer 1) is too small: 9 bits need 2 bytes"));
}

TEST(ValidateStructuralTest, ZeroLengthArraysMayOmitBuffers) {
  EXPECT_TRUE(BothOk(*Make(int32(), 0, {nullptr, nullptr})));
  EXPECT_TRUE(BothOk(*Make(utf8(), 0, {nullptr, nullptr, nullptr})));
  EXPECT_TRUE(BothOk(*Make(binary_view(), 0, {nullptr, nullptr})));
  EXPECT_TRUE(BothOk(*Make(list(field("item", int32())), 0, {nullptr, nullptr}, {Int32s({})})));
  EXPECT_TRUE(
      BothOk(*Make(dense_union({field("a", int32())}), 0, {nullptr, nullptr}, {Int32s({})})));
  // A zero-length slice keeps its offset but reads nothing.
  auto sliced = Make(int64(), 0, {nullptr, nullptr});
  sliced->offset = 100;
  EXPECT_TRUE(BothOk(*sliced));
}

// ---- Offsets ----------------------------------------------------------------------

TEST(ValidateStructuralTest, OffsetsNeedOffsetPlusLengthPlusOneEntries) {
  auto data = Strings({"ab", "c"});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int32_t>({0, 2});
  EXPECT_TRUE(BothFail(*data, "offsets buffer (buffer 1) is too small: 3 elements of 4 bytes"));

  auto sliced = Strings({"ab", "c", "d"});
  sliced->offset = 1;
  sliced->length = 2;
  EXPECT_TRUE(BothOk(*sliced));
  sliced->buffers[1] = Values<int32_t>({0, 2, 3});
  EXPECT_TRUE(BothFail(*sliced, "offsets buffer (buffer 1) is too small: 4 elements"));
}

TEST(ValidateStructuralTest, FirstOffsetMustBeNonNegative) {
  auto data = Strings({"ab"});
  data->buffers[1] = Values<int32_t>({-1, 2});
  EXPECT_TRUE(BothFail(*data, "offsets must be non-negative: offsets[0]=-1"));
}

TEST(ValidateStructuralTest, LastOffsetMustNotPrecedeFirst) {
  auto data = Strings({"ab", "cd"});
  data->buffers[1] = Values<int32_t>({3, 4, 2});
  EXPECT_TRUE(BothFail(*data, "offsets must be non-decreasing: offsets[0]=3 > offsets[2]=2"));
}

TEST(ValidateStructuralTest, DataBufferMustHoldLastOffset) {
  auto data = Strings({"ab", "cd"});
  data->buffers[2] = Bytes("abcd");
  EXPECT_TRUE(BothOk(*data));
  data->buffers[2] = Bytes("abc");
  EXPECT_TRUE(BothFail(*data, "last offset exceeds the data buffer size: offsets[2]=4 > 3"));
  // An absent data buffer is empty: fine only when every value is empty.
  auto empties = Strings({"", ""});
  empties->buffers[2] = nullptr;
  EXPECT_TRUE(BothOk(*empties));
  data->buffers[2] = nullptr;
  EXPECT_TRUE(BothFail(*data, "last offset exceeds the data buffer size: offsets[2]=4 > 0"));
}

TEST(ValidateStructuralTest, LargeBinaryOffsetsAre64Bit) {
  auto data = StringsOf<int64_t>(large_binary(), {"xyz", ""});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int32_t>({0, 3, 3});
  EXPECT_TRUE(BothFail(*data, "offsets buffer (buffer 1) is too small: 3 elements of 8 bytes"));
  data->buffers[1] = Values<int64_t>({0, 3, int64_t{1} << 40});
  EXPECT_TRUE(BothFail(*data, "last offset exceeds the data buffer size"));
}

TEST(ValidateStructuralTest, ListLastOffsetMustBeWithinChild) {
  auto type = list(field("item", int32()));
  auto data = ListOf(type, {0, 2, 3}, Int32s({1, 2, 3}));
  EXPECT_TRUE(BothOk(*data));
  auto short_child = ListOf(type, {0, 2, 4}, Int32s({1, 2, 3}));
  EXPECT_TRUE(BothFail(*short_child, "last offset exceeds the child length: offsets[2]=4 > 3"));
  auto no_offsets = ListOf(type, {0, 2, 3}, Int32s({1, 2, 3}));
  no_offsets->buffers[1] = nullptr;
  EXPECT_TRUE(BothFail(*no_offsets, "offsets buffer (buffer 1) is too small"));
}

TEST(ValidateStructuralTest, LargeListLastOffsetMustBeWithinChild) {
  auto type = large_list(field("item", int32()));
  auto data = Make(type, 1, {nullptr, Values<int64_t>({0, 2})}, {Int32s({1, 2})});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int64_t>({0, 5});
  EXPECT_TRUE(BothFail(*data, "last offset exceeds the child length: offsets[1]=5 > 2"));
}

TEST(ValidateStructuralTest, ListViewBuffersMustCoverOffsetPlusLength) {
  auto type = list_view(field("item", int32()));
  auto data =
      Make(type, 2, {nullptr, Values<int32_t>({0, 1}), Values<int32_t>({1, 1})}, {Int32s({5, 6})});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int32_t>({0});
  EXPECT_TRUE(BothFail(*data, "offsets buffer (buffer 1) is too small: 2 elements of 4 bytes"));
  data->buffers[1] = Values<int32_t>({0, 1});
  data->buffers[2] = Values<int32_t>({1});
  EXPECT_TRUE(BothFail(*data, "sizes buffer (buffer 2) is too small: 2 elements of 4 bytes"));

  auto large = Make(large_list_view(field("item", int32())), 1,
                    {nullptr, Values<int64_t>({0}), Values<int32_t>({1})}, {Int32s({5})});
  EXPECT_TRUE(BothFail(*large, "sizes buffer (buffer 2) is too small: 1 elements of 8 bytes"));
}

TEST(ValidateStructuralTest, ViewsBufferMustCoverOffsetPlusLength) {
  auto data = ViewsOf(utf8_view(), {InlineView("a"), InlineView("b")});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Zeros(31);
  EXPECT_TRUE(BothFail(*data, "views buffer (buffer 1) is too small: 2 elements of 16 bytes"));
}

TEST(ValidateStructuralTest, UnionBuffersMustCoverOffsetPlusLength) {
  auto sparse =
      Make(sparse_union({field("a", int32())}), 2, {Values<int8_t>({0})}, {Int32s({1, 2})});
  EXPECT_TRUE(BothFail(*sparse, "type_ids buffer (buffer 0) is too small: 2 elements of 1 bytes"));
  auto dense = Make(dense_union({field("a", int32())}), 2,
                    {Values<int8_t>({0, 0}), Values<int32_t>({0})}, {Int32s({1})});
  EXPECT_TRUE(BothFail(*dense, "offsets buffer (buffer 1) is too small: 2 elements of 4 bytes"));
  dense->buffers[1] = Values<int32_t>({0, 0});
  EXPECT_TRUE(BothOk(*dense));
}

// ---- Children -----------------------------------------------------------------------

TEST(ValidateStructuralTest, ChildCountMustMatchType) {
  auto type = struct_({field("a", int32()), field("b", int32())});
  auto data = Make(type, 1, {nullptr}, {Int32s({1}), Int32s({2})});
  EXPECT_TRUE(BothOk(*data));
  data->children.pop_back();
  EXPECT_TRUE(BothFail(*data, "struct type declares 2 children, array has 1"));
  auto leaf = Int32s({1});
  leaf->children.push_back(Int32s({1}));
  EXPECT_TRUE(BothFail(*leaf, "int32 type declares 0 children, array has 1"));
}

TEST(ValidateStructuralTest, ChildMustBePresent) {
  auto data = Make(struct_({field("a", int32())}), 1, {nullptr}, {nullptr});
  EXPECT_TRUE(BothFail(*data, "child 0 ('a') is missing"));
}

TEST(ValidateStructuralTest, ChildTypeMustMatchDeclaredType) {
  auto data = Make(struct_({field("a", int32())}), 1, {nullptr}, {Int64s({1})});
  EXPECT_TRUE(BothFail(*data, "child 0 ('a') has type int64, but the type declares int32"));
}

TEST(ValidateStructuralTest, StructChildrenMustCoverOffsetPlusLength) {
  auto type = struct_({field("a", int32()), field("b", int32())});
  auto data = Make(type, 3, {nullptr}, {Int32s({1, 2, 3, 4}), Int32s({1, 2, 3, 4})});
  data->offset = 1;
  EXPECT_TRUE(BothOk(*data));
  data->children[1] = Int32s({1, 2, 3});
  EXPECT_TRUE(
      BothFail(*data, "child 1 ('b') is too short: offset + length needs length 4, child has 3"));
}

TEST(ValidateStructuralTest, FixedSizeListChildMustCoverOffsetPlusLengthTimesSize) {
  auto type = fixed_size_list(field("item", int32()), 2);
  auto data = Make(type, 2, {nullptr}, {Int32s({1, 2, 3, 4, 5, 6})});
  data->offset = 1;
  EXPECT_TRUE(BothOk(*data));
  data->children[0] = Int32s({1, 2, 3, 4, 5});
  EXPECT_TRUE(
      BothFail(*data, "is too short: (offset + length) * list_size needs length 6, child has 5"));
}

TEST(ValidateStructuralTest, SparseUnionChildrenMustCoverOffsetPlusLength) {
  auto type = sparse_union({field("a", int32()), field("b", utf8())});
  auto data = Make(type, 2, {Values<int8_t>({0, 1})}, {Int32s({1, 2}), Strings({"x", "y"})});
  EXPECT_TRUE(BothOk(*data));
  data->children[1] = Strings({"x"});
  EXPECT_TRUE(BothFail(*data, "child 1 ('b') is too short: offset + length needs length 2"));
}

TEST(ValidateStructuralTest, RunEndsAndValuesMustHaveTheSameLength) {
  auto type = run_end_encoded(int32(), utf8());
  auto data = Make(type, 5, {}, {Int32s({2, 5}), Strings({"a", "b"})});
  EXPECT_TRUE(BothOk(*data));
  data->children[1] = Strings({"a"});
  EXPECT_TRUE(BothFail(*data,
                       "run_ends and values must have the same length: run_ends has 2, "
                       "values has 1"));
}

TEST(ValidateStructuralTest, RunEndEncodedLengthMustFitRunEndType) {
  auto type = run_end_encoded(int16(), int32());
  auto fits = Make(type, 32767, {}, {Primitive<int16_t>(int16(), {32767}), Int32s({1})});
  EXPECT_TRUE(BothOk(*fits));
  auto too_long = Make(type, 32768, {}, {Primitive<int16_t>(int16(), {32767}), Int32s({1})});
  EXPECT_TRUE(BothFail(*too_long, "offset + length = 32768 does not fit the run-end type int16"));
}

// ---- Dictionaries ---------------------------------------------------------------------

TEST(ValidateStructuralTest, DictionaryPresentExactlyForDictionaryTypes) {
  auto type = dictionary(int32(), utf8());
  auto data = Make(type, 2, {nullptr, Values<int32_t>({0, 1})});
  data->dictionary = Strings({"a", "b"});
  EXPECT_TRUE(BothOk(*data));

  auto missing = Make(type, 2, {nullptr, Values<int32_t>({0, 1})});
  EXPECT_TRUE(BothFail(*missing, "dictionary-encoded array has no dictionary"));

  auto plain = Int32s({1});
  plain->dictionary = Strings({"a"});
  EXPECT_TRUE(BothFail(*plain, "a int32 array must not have a dictionary"));
}

TEST(ValidateStructuralTest, DictionaryMustBeOfTheValueType) {
  auto data = Make(dictionary(int8(), utf8()), 1, {nullptr, Values<int8_t>({0})});
  data->dictionary = Int32s({5});
  EXPECT_TRUE(BothFail(*data, "dictionary has type int32, but the value type is"));
}

TEST(ValidateStructuralTest, DictionaryIndicesBufferUsesTheIndexWidth) {
  auto data = Make(dictionary(int16(), utf8()), 2, {nullptr, Values<int16_t>({0, 0})});
  data->dictionary = Strings({"a"});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int8_t>({0, 0});
  EXPECT_TRUE(BothFail(*data, "indices buffer (buffer 1) is too small: 2 elements of 2 bytes"));
}

// ---- Paths -------------------------------------------------------------------------------

// list<struct<x: utf8>> with broken offsets in x.
TEST(ValidateStructuralTest, ErrorsNameTheNestedPath) {
  auto point = struct_({field("x", utf8())});
  auto type = list(field("item", point));
  auto x = Strings({"a", "b"});
  x->buffers[1] = Values<int32_t>({0, 1, 9});
  auto points = Make(point, 2, {nullptr}, {x});
  auto data = ListOf(type, {0, 2}, points);
  EXPECT_TRUE(FailsWith(ValidateStructural(*data, "col 'points'"), "col 'points'.item.'x'",
                        "last offset exceeds the data buffer size: offsets[2]=9 > 2"));
  EXPECT_TRUE(FailsWith(ValidateFull(*data), "array.item.'x'", "last offset exceeds"));
}

TEST(ValidateStructuralTest, PathStepsForEveryNestedKind) {
  auto bad_int = [] {
    auto data = Int32s({1});
    data->length = -1;
    return data;
  };
  auto map_type = map(utf8(), int32());
  TypePtr entries_type = map_type->children[0].type;
  auto entries = Make(entries_type, 1, {nullptr}, {Strings({"k"}), bad_int()});
  auto map_data = ListOf(map_type, {0, 1}, entries);
  EXPECT_TRUE(FailsWith(ValidateStructural(*map_data, kPath), kPath + ".entries.'value'",
                        "length must be non-negative"));

  auto ree = Make(run_end_encoded(int32(), int32()), 1, {}, {Int32s({1}), bad_int()});
  EXPECT_TRUE(FailsWith(ValidateStructural(*ree, kPath), kPath + ".values", "length"));
  auto ree_ends = Make(run_end_encoded(int32(), int32()), 1, {}, {bad_int(), Int32s({1})});
  EXPECT_TRUE(FailsWith(ValidateStructural(*ree_ends, kPath), kPath + ".run_ends", "length"));

  auto dict = Make(dictionary(int8(), int32()), 1, {nullptr, Values<int8_t>({0})});
  dict->dictionary = bad_int();
  EXPECT_TRUE(FailsWith(ValidateStructural(*dict, kPath), kPath + ".dictionary", "length"));

  auto uni = Make(dense_union({field("it's", int32())}), 1,
                  {Values<int8_t>({0}), Values<int32_t>({0})}, {bad_int()});
  EXPECT_TRUE(FailsWith(ValidateStructural(*uni, kPath), kPath + ".'it\\'s'", "length"));

  auto fsl = Make(fixed_size_list(field("element", int32()), 1), 1, {nullptr}, {bad_int()});
  EXPECT_TRUE(FailsWith(ValidateStructural(*fsl, kPath), kPath + ".item", "length"));
}

TEST(ValidateStructuralTest, NestingDepthIsLimited) {
  TypePtr type = int32();
  for (int level = 0; level < 200; ++level) type = list(field("item", type));
  auto data = Make(type, 0, {nullptr, nullptr}, {Make(type->children[0].type, 0, {})});
  EXPECT_TRUE(BothFail(*data, "type nesting is deeper than 128 levels"));

  TypePtr shallow = int32();
  ArrayDataPtr child = Int32s({});
  for (int level = 0; level < 20; ++level) {
    shallow = list(field("item", shallow));
    child = Make(shallow, 0, {nullptr, nullptr}, {child});
  }
  EXPECT_TRUE(BothOk(*child));
}

TEST(ValidateStructuralTest, DoesNotScanValues) {
  // Offsets go down in the middle; only Full notices.
  auto data = Strings({"abc", "de", "f"});
  data->buffers[1] = Values<int32_t>({0, 5, 3, 6});
  data->buffers[2] = Bytes("abcdef");
  EXPECT_TRUE(IsOk(ValidateStructural(*data, kPath)));
  EXPECT_FALSE(ValidateFull(*data, kPath).ok());
}

// =============================================================================
// Full: values
// =============================================================================

TEST(ValidateFullTest, BinaryOffsetsMustBeNonDecreasing) {
  auto data = Strings({"abc", "de", "f"});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int32_t>({0, 5, 3, 6});
  EXPECT_TRUE(OnlyFullFails(*data, "offsets must be non-decreasing: offsets[1]=5 > offsets[2]=3"));
  auto binary_data = StringsOf<int32_t>(binary(), {"a", "b"});
  binary_data->buffers[1] = Values<int32_t>({0, 2, 1});
  binary_data->buffers[2] = Bytes("ab");
  EXPECT_TRUE(OnlyFullFails(*binary_data, "offsets must be non-decreasing"));
}

TEST(ValidateFullTest, OnlyOffsetsInsideTheSliceAreChecked) {
  auto data = Strings({"ab", "c", "d"});
  data->buffers[1] = Values<int32_t>({3, 2, 3, 4});  // offsets[0] is outside the slice
  data->buffers[2] = Bytes("abcd");
  data->offset = 1;
  data->length = 2;
  EXPECT_TRUE(BothOk(*data));
}

TEST(ValidateFullTest, LargeOffsetsMustBeNonDecreasing) {
  auto data = StringsOf<int64_t>(large_utf8(), {"ab", "c"});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int64_t>({0, 3, 2});
  data->buffers[2] = Bytes("abc");
  EXPECT_TRUE(OnlyFullFails(*data, "offsets must be non-decreasing: offsets[1]=3 > offsets[2]=2"));
}

TEST(ValidateFullTest, ListOffsetsMustBeNonDecreasing) {
  auto type = list(field("item", int32()));
  std::vector<int32_t> values(12, 0);
  auto good = ListOf(type, {0, 2, 4, 10, 12}, Int32s(values));
  EXPECT_TRUE(BothOk(*good));
  auto bad = ListOf(type, {0, 2, 4, 10, 7, 12}, Int32s(values));
  EXPECT_TRUE(OnlyFullFails(*bad, "offsets must be non-decreasing: offsets[3]=10 > offsets[4]=7"));
  auto large = Make(large_list(field("item", int32())), 2, {nullptr, Values<int64_t>({0, 5, 3})},
                    {Int32s(values)});
  EXPECT_TRUE(OnlyFullFails(*large, "offsets must be non-decreasing: offsets[1]=5 > offsets[2]=3"));
}

// ---- UTF-8 ----------------------------------------------------------------------------------

TEST(ValidateFullTest, AcceptsWellFormedUtf8) {
  const std::string long_ascii(100, 'a');
  auto data =
      Strings({"", "abc", "h\xC3\xA9llo", "\xE2\x82\xAC", "\xF0\x9D\x84\x9E", "\xF4\x8F\xBF\xBF",
               "\xEF\xBF\xBF", "\xED\x9F\xBF", "\xEE\x80\x80", long_ascii + "\xC3\xA9" + long_ascii,
               std::string("0123456\xE2\x82\xAC") + "89abcdef"});
  EXPECT_TRUE(BothOk(*data));
  auto large = StringsOf<int64_t>(large_utf8(), {"\xC3\xA9", long_ascii});
  EXPECT_TRUE(BothOk(*large));
}

struct Utf8Case {
  const char* name;
  std::string bytes;
  const char* reason;
};

TEST(ValidateFullTest, RejectsMalformedUtf8) {
  const std::vector<Utf8Case> cases = {
      {"two-byte overlong", "\xC0\x80", "overlong encoding at byte 0"},
      {"two-byte overlong C1", "\xC1\xBF", "overlong encoding"},
      {"three-byte overlong", "\xE0\x80\x80", "overlong encoding"},
      {"four-byte overlong", "\xF0\x80\x80\x80", "overlong encoding"},
      {"high surrogate", "\xED\xA0\x80", "surrogate code point"},
      {"low surrogate", "\xED\xBF\xBF", "surrogate code point"},
      {"above U+10FFFF", "\xF4\x90\x80\x80", "code point above U+10FFFF"},
      {"F5 lead", "\xF5\x80\x80\x80", "code point above U+10FFFF"},
      {"FF byte", "\xFF", "invalid byte"},
      {"truncated at end", "\xE2\x82", "truncated multi-byte sequence"},
      {"truncated by ASCII", "\xE2\x28\xA1", "truncated multi-byte sequence"},
      {"truncated four-byte", "\xF0\x9D\x84", "truncated multi-byte sequence"},
      {"lone continuation", "\x80", "unexpected continuation byte"},
      {"after long ASCII", "abcdefghijkl\xC3", "truncated multi-byte sequence at byte 12"},
      {"inside long ASCII", "abcdefgh\xC0\x80ijklmnop", "overlong encoding at byte 8"},
  };
  for (const Utf8Case& test_case : cases) {
    SCOPED_TRACE(test_case.name);
    auto data = Strings({"fine", test_case.bytes});
    EXPECT_TRUE(
        OnlyFullFails(*data, std::string("value 1 is not valid UTF-8: ") + test_case.reason));
    // Long values go out of line; short ones inline.
    std::shared_ptr<ArrayData> views;
    if (test_case.bytes.size() > 12) {
      views = ViewsOf(utf8_view(),
                      {InlineView("ok"), RefView(static_cast<int32_t>(test_case.bytes.size()),
                                                 test_case.bytes.substr(0, 4), 0, 0)},
                      {Bytes(test_case.bytes)});
    } else {
      views = ViewsOf(utf8_view(), {InlineView("ok"), InlineView(test_case.bytes)});
    }
    EXPECT_TRUE(
        OnlyFullFails(*views, std::string("value 1 is not valid UTF-8: ") + test_case.reason));
  }
}

TEST(ValidateFullTest, EachStringMustBeValidOnItsOwn) {
  // The concatenation "\xC3\xA9" is valid, but the first value ends mid-character.
  auto data = Strings({"\xC3", "\xA9"});
  EXPECT_TRUE(OnlyFullFails(*data, "value 0 is not valid UTF-8: truncated multi-byte sequence"));
}

TEST(ValidateFullTest, BytesUnderNullStringsAreNotChecked) {
  auto data = WithNulls(Strings({"ok", "\xFF\xFE", "fine"}), {1, 0, 1});
  EXPECT_TRUE(BothOk(*data));
  auto invalid_valid = WithNulls(Strings({"\xFF", "\xFF\xFE", "fine"}), {1, 0, 1});
  EXPECT_TRUE(OnlyFullFails(*invalid_valid, "value 0 is not valid UTF-8: invalid byte"));
}

TEST(ValidateFullTest, BinaryIsNotUtf8Checked) {
  EXPECT_TRUE(BothOk(*StringsOf<int32_t>(binary(), {"\xFF\xC0", "\x80"})));
  EXPECT_TRUE(BothOk(*StringsOf<int64_t>(large_binary(), {"\xFF\xC0"})));
  EXPECT_TRUE(BothOk(*ViewsOf(binary_view(), {InlineView("\xFF")})));
}

// ---- Unions -----------------------------------------------------------------------------------

TEST(ValidateFullTest, UnionTypeIdsMustBeDeclared) {
  auto type = sparse_union({field("a", int32()), field("b", utf8())}, {3, 7});
  auto data = Make(type, 2, {Values<int8_t>({3, 7})}, {Int32s({1, 2}), Strings({"x", "y"})});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[0] = Values<int8_t>({3, 5});
  EXPECT_TRUE(OnlyFullFails(*data,
                            "type ids must be declared type codes: type_ids[1]=5 is not "
                            "among {3, 7}"));
  data->buffers[0] = Values<int8_t>({-1, 3});
  EXPECT_TRUE(OnlyFullFails(*data, "type_ids[0]=-1 is not among {3, 7}"));
  // Only the slice is checked.
  data->buffers[0] = Values<int8_t>({5, 3});
  data->offset = 1;
  data->length = 1;
  EXPECT_TRUE(BothOk(*data));
}

TEST(ValidateFullTest, DenseUnionOffsetsMustIndexTheirChild) {
  auto type = dense_union({field("a", int32()), field("b", utf8())}, {0, 1});
  auto data = Make(type, 3, {Values<int8_t>({0, 1, 0}), Values<int32_t>({0, 0, 1})},
                   {Int32s({10, 20}), Strings({"x"})});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int32_t>({0, 1, 1});
  EXPECT_TRUE(OnlyFullFails(*data,
                            "dense union offsets must index into their child: offsets[1]=1 "
                            "for type id 1 but child 'b' has length 1"));
  data->buffers[1] = Values<int32_t>({-1, 0, 1});
  EXPECT_TRUE(OnlyFullFails(*data, "offsets[0]=-1"));
  data->buffers[0] = Values<int8_t>({0, 2, 0});
  data->buffers[1] = Values<int32_t>({0, 0, 1});
  EXPECT_TRUE(OnlyFullFails(*data, "type_ids[1]=2 is not among {0, 1}"));
}

// ---- Dictionaries
// --------------------------------------------------------------------------------

TEST(ValidateFullTest, DictionaryIndicesMustBeWithinTheDictionary) {
  auto data = Make(dictionary(int32(), utf8()), 3, {nullptr, Values<int32_t>({0, 2, 1})});
  data->dictionary = Strings({"a", "b", "c"});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int32_t>({0, 3, 1});
  EXPECT_TRUE(OnlyFullFails(*data,
                            "dictionary indices must be in [0, dictionary length): "
                            "indices[1]=3 with dictionary length 3"));
  data->buffers[1] = Values<int32_t>({0, -1, 1});
  EXPECT_TRUE(OnlyFullFails(*data, "indices[1]=-1"));
}

TEST(ValidateFullTest, DictionaryIndicesUnderNullsAreIgnored) {
  auto data = WithNulls(Make(dictionary(int8(), utf8()), 3, {nullptr, Values<int8_t>({0, 99, 1})}),
                        {1, 0, 1});
  data->dictionary = Strings({"a", "b"});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[0] = Bitmap({1, 1, 1});
  data->null_count = 0;
  EXPECT_TRUE(OnlyFullFails(*data, "indices[1]=99"));
}

TEST(ValidateFullTest, UnsignedDictionaryIndices) {
  auto u8 = Make(dictionary(uint8(), utf8()), 1, {nullptr, Values<uint8_t>({255})});
  u8->dictionary = Strings({"a"});
  EXPECT_TRUE(OnlyFullFails(*u8, "indices[0]=255 with dictionary length 1"));
  auto u64 = Make(dictionary(uint64(), utf8()), 2,
                  {nullptr, Values<uint64_t>({0, std::numeric_limits<uint64_t>::max()})});
  u64->dictionary = Strings({"a"});
  EXPECT_TRUE(OnlyFullFails(*u64, "indices[1]=18446744073709551615"));
  u64->buffers[1] = Values<uint64_t>({0, 0});
  EXPECT_TRUE(BothOk(*u64));
  auto i16 = Make(dictionary(int16(), utf8()), 1, {nullptr, Values<int16_t>({1})});
  i16->dictionary = Strings({"a", "b"});
  EXPECT_TRUE(BothOk(*i16));
}

TEST(ValidateFullTest, DictionaryValuesAreValidatedToo) {
  auto data = Make(dictionary(int8(), utf8()), 1, {nullptr, Values<int8_t>({0})});
  data->dictionary = Strings({"\xC0\x80"});
  EXPECT_TRUE(OnlyFullFails(*data, "value 0 is not valid UTF-8", kPath + ".dictionary"));
}

// ---- Run-end encoding
// -------------------------------------------------------------------------------

TEST(ValidateFullTest, RunEndsMustBePositive) {
  auto type = run_end_encoded(int32(), int64());
  auto data = Make(type, 4, {}, {Int32s({0, 4}), Int64s({1, 2})});
  EXPECT_TRUE(OnlyFullFails(*data, "run ends must be positive: run_ends[0]=0"));
  data->children[0] = Int32s({-3, 4});
  EXPECT_TRUE(OnlyFullFails(*data, "run ends must be positive: run_ends[0]=-3"));
  data->children[0] = Int32s({1, 4});
  EXPECT_TRUE(BothOk(*data));
}

TEST(ValidateFullTest, RunEndsMustBeStrictlyIncreasing) {
  auto type = run_end_encoded(int64(), int32());
  auto data = Make(type, 5, {}, {Int64s({2, 2, 5}), Int32s({1, 2, 3})});
  EXPECT_TRUE(
      OnlyFullFails(*data, "run ends must be strictly increasing: run_ends[0]=2 >= run_ends[1]=2"));
  data->children[0] = Int64s({2, 3, 5});
  EXPECT_TRUE(BothOk(*data));
}

TEST(ValidateFullTest, RunEndsMustCoverOffsetPlusLength) {
  auto type = run_end_encoded(int16(), int32());
  auto data = Make(type, 4, {}, {Primitive<int16_t>(int16(), {2, 5}), Int32s({1, 2})});
  data->offset = 1;
  EXPECT_TRUE(BothOk(*data));
  data->offset = 2;
  EXPECT_TRUE(OnlyFullFails(*data, "run ends must cover offset + length: run_ends[1]=5 < 6"));
  auto empty = Make(type, 1, {}, {Primitive<int16_t>(int16(), {}), Int32s({})});
  EXPECT_TRUE(OnlyFullFails(*empty, "run_ends is empty"));
  auto empty_array = Make(type, 0, {}, {Primitive<int16_t>(int16(), {}), Int32s({})});
  EXPECT_TRUE(BothOk(*empty_array));
}

TEST(ValidateFullTest, RunEndsMustNotBeNull) {
  auto type = run_end_encoded(int32(), int32());
  auto run_ends = WithNulls(Int32s({1, 2}), {1, 0});
  auto data = Make(type, 2, {}, {run_ends, Int32s({1, 2})});
  EXPECT_TRUE(OnlyFullFails(*data, "run_ends must not contain nulls, found 1"));
}

TEST(ValidateFullTest, RunEndsOfASlicedChild) {
  auto type = run_end_encoded(int32(), int32());
  auto run_ends = Int32s({0, 3, 5});  // the leading 0 is outside the child's slice
  run_ends->offset = 1;
  run_ends->length = 2;
  auto values = Int32s({9, 1, 2});
  values->offset = 1;
  values->length = 2;
  auto data = Make(type, 5, {}, {run_ends, values});
  EXPECT_TRUE(BothOk(*data));
}

// ---- Views
// ------------------------------------------------------------------------------------------

TEST(ValidateFullTest, ViewsAcceptInlineAndOutOfLineValues) {
  const std::string long_value = "hello, wide world";
  auto data = ViewsOf(utf8_view(),
                      {InlineView(""), InlineView("twelve bytes"),
                       RefView(static_cast<int32_t>(long_value.size()), "hell", 1, 3)},
                      {Bytes("xx"), Bytes("abc" + long_value)});
  EXPECT_TRUE(BothOk(*data));
}

TEST(ValidateFullTest, ViewLengthMustBeNonNegative) {
  auto data = ViewsOf(binary_view(), {InlineView("a"), RefView(-5, "", 0, 0)});
  EXPECT_TRUE(OnlyFullFails(*data, "view lengths must be non-negative: view[1] has length -5"));
}

TEST(ValidateFullTest, InlineViewPaddingMustBeZero) {
  View view = InlineView("abc");
  view[10] = 'z';
  auto data = ViewsOf(binary_view(), {view});
  EXPECT_TRUE(OnlyFullFails(*data,
                            "inline view padding must be zero: view[0] has length 3 but "
                            "byte 10 of the view is 122"));
}

TEST(ValidateFullTest, ViewBufferIndexMustBeInRange) {
  auto data = ViewsOf(binary_view(), {RefView(13, "abcd", 1, 0)}, {Bytes("abcdefghijklm")});
  EXPECT_TRUE(OnlyFullFails(*data,
                            "view buffer index out of range: view[0] refers to data "
                            "buffer 1, the array has 1"));
  auto negative = ViewsOf(binary_view(), {RefView(13, "abcd", -1, 0)}, {Bytes("abcdefghijklm")});
  EXPECT_TRUE(OnlyFullFails(*negative, "refers to data buffer -1"));
}

TEST(ValidateFullTest, ViewDataMustLieWithinItsBuffer) {
  auto data = ViewsOf(binary_view(), {RefView(13, "bcde", 0, 1)}, {Bytes("abcdefghijklm")});
  EXPECT_TRUE(OnlyFullFails(*data,
                            "view data must lie within its data buffer: view[0] covers "
                            "[1, 14) of data buffer 0 of size 13"));
  auto negative = ViewsOf(binary_view(), {RefView(13, "abcd", 0, -1)}, {Bytes("abcdefghijklm")});
  EXPECT_TRUE(OnlyFullFails(*negative, "view offsets must be non-negative: view[0] has offset -1"));
  auto absent = ViewsOf(binary_view(), {RefView(13, "abcd", 0, 0)}, {nullptr});
  EXPECT_TRUE(OnlyFullFails(*absent, "of data buffer 0 of size 0"));
}

TEST(ValidateFullTest, ViewPrefixMustMatchTheData) {
  auto data = ViewsOf(binary_view(), {RefView(13, "abcX", 0, 0)}, {Bytes("abcdefghijklm")});
  EXPECT_TRUE(
      OnlyFullFails(*data, "view prefix must equal the first 4 bytes of the value: view[0]"));
}

TEST(ValidateFullTest, NullViewsAreCheckedForLayoutButNotUtf8) {
  auto bad_layout =
      WithNulls(ViewsOf(utf8_view(), {InlineView("a"), RefView(-1, "", 0, 0)}), {1, 0});
  EXPECT_TRUE(OnlyFullFails(*bad_layout, "view[1] has length -1"));
  auto bad_utf8 = WithNulls(ViewsOf(utf8_view(), {InlineView("a"), InlineView("\xFF")}), {1, 0});
  EXPECT_TRUE(BothOk(*bad_utf8));
}

// ---- List views
// --------------------------------------------------------------------------------------

TEST(ValidateFullTest, ListViewsMayBeOutOfOrder) {
  auto type = list_view(field("item", int32()));
  auto data = Make(type, 3, {nullptr, Values<int32_t>({3, 0, 1}), Values<int32_t>({1, 2, 3})},
                   {Int32s({1, 2, 3, 4})});
  EXPECT_TRUE(BothOk(*data));
}

TEST(ValidateFullTest, ListViewOffsetsAndSizesMustBeNonNegative) {
  auto type = list_view(field("item", int32()));
  auto data =
      Make(type, 2, {nullptr, Values<int32_t>({0, -1}), Values<int32_t>({1, 1})}, {Int32s({1, 2})});
  EXPECT_TRUE(OnlyFullFails(*data, "list-view offsets must be non-negative: offsets[1]=-1"));
  data->buffers[1] = Values<int32_t>({0, 1});
  data->buffers[2] = Values<int32_t>({-2, 1});
  EXPECT_TRUE(OnlyFullFails(*data, "list-view sizes must be non-negative: sizes[0]=-2"));
}

TEST(ValidateFullTest, ListViewRangesMustBeWithinTheChild) {
  auto type = large_list_view(field("item", int32()));
  auto data =
      Make(type, 2, {nullptr, Values<int64_t>({0, 1}), Values<int64_t>({1, 2})}, {Int32s({1, 2})});
  EXPECT_TRUE(OnlyFullFails(*data,
                            "list-view offset + size must be within the child length: "
                            "offsets[1]=1 + sizes[1]=2 > 2"));
  data->buffers[1] = Values<int64_t>({0, kInt64Max});
  data->buffers[2] = Values<int64_t>({1, kInt64Max});
  EXPECT_TRUE(OnlyFullFails(*data, "list-view offset + size must be within the child length"));
}

TEST(ValidateFullTest, NullListViewsMustStillBeInRange) {
  auto type = list_view(field("item", int32()));
  auto data = WithNulls(
      Make(type, 2, {nullptr, Values<int32_t>({0, 9}), Values<int32_t>({1, 1})}, {Int32s({1, 2})}),
      {1, 0});
  EXPECT_TRUE(OnlyFullFails(*data, "offsets[1]=9 + sizes[1]=1 > 2"));
}

// ---- Maps
// --------------------------------------------------------------------------------------------

std::shared_ptr<ArrayData> MapOf(const ArrayDataPtr& keys, const ArrayDataPtr& items,
                                 const std::vector<int32_t>& offsets) {
  auto type = map(utf8(), int32());
  auto entries = Make(type->children[0].type, keys->length, {nullptr}, {keys, items});
  return ListOf(type, offsets, entries);
}

TEST(ValidateFullTest, MapKeysMustNotBeNull) {
  auto good = MapOf(Strings({"a", "b", "c"}), Int32s({1, 2, 3}), {0, 2, 3});
  EXPECT_TRUE(BothOk(*good));
  auto bad = MapOf(WithNulls(Strings({"a", "b", "c"}), {1, 0, 1}), Int32s({1, 2, 3}), {0, 2, 3});
  EXPECT_TRUE(OnlyFullFails(*bad, "map keys must not be null: 1 of the 3 keys are null"));
  // A null key that no map slot refers to counts too: Arrow C++ checks the
  // whole keys child (and pyarrow aborts on importing such a map).
  auto unreferenced =
      MapOf(WithNulls(Strings({"a", "b", "c"}), {1, 1, 0}), Int32s({1, 2, 3}), {0, 2});
  EXPECT_TRUE(OnlyFullFails(*unreferenced, "map keys must not be null: 1 of the 3 keys are null"));
}

TEST(ValidateFullTest, MapEntriesMustNotBeNull) {
  auto data = MapOf(Strings({"a", "b"}), Int32s({1, 2}), {0, 2});
  auto entries = std::const_pointer_cast<ArrayData>(data->children[0]);
  auto with_null = std::make_shared<ArrayData>(*entries);
  with_null->buffers[0] = Bitmap({1, 0});
  with_null->null_count = 1;
  data->children[0] = with_null;
  EXPECT_TRUE(OnlyFullFails(*data, "map entries must not be null: 1 of the 2 entries are null"));
  // Also when no map slot refers to the null entry, and for an empty map.
  auto unreferenced = ListOf(data->type, {0, 1}, with_null);
  EXPECT_TRUE(OnlyFullFails(*unreferenced, "map entries must not be null"));
  auto empty = ListOf(data->type, {0}, with_null);
  EXPECT_TRUE(OnlyFullFails(*empty, "map entries must not be null"));
  // The nulls of the entries' own slots count, not those sliced off.
  auto sliced = std::make_shared<ArrayData>(*with_null);
  sliced->length = 1;
  sliced->null_count = 0;
  EXPECT_TRUE(BothOk(*ListOf(data->type, {0, 1}, sliced)));
}

TEST(ValidateFullTest, MapKeysOfASlicedEntriesStruct) {
  // Entries start at key 1, but key 0 (null) is still part of the keys
  // child, which Arrow C++ holds to no nulls as a whole.
  auto keys = WithNulls(Strings({"x", "a", "b"}), {0, 1, 1});
  auto type = map(utf8(), int32());
  auto entries = Make(type->children[0].type, 2, {nullptr}, {keys, Int32s({0, 1, 2})});
  entries->offset = 1;
  auto data = ListOf(type, {0, 2}, entries);
  EXPECT_TRUE(OnlyFullFails(*data, "map keys must not be null: 1 of the 3 keys are null"));
  // Slicing the keys child itself leaves the null out.
  auto sliced_keys = std::make_shared<ArrayData>(*keys);
  sliced_keys->offset = 1;
  sliced_keys->length = 2;
  sliced_keys->null_count = kUnknownNullCount;
  entries->children[0] = sliced_keys;
  entries->offset = 0;
  EXPECT_TRUE(BothOk(*data));
}

// ---- Values Arrow C++ bounds (decimal precision, times of day, whole days)
// ----------------------------------------------------------------------------

// Little-endian two's complement bytes of `value` (sign-extended) in `width`.
std::string SignedBytes(__int128 value, int width) {
  std::string bytes(static_cast<size_t>(width), value < 0 ? '\xff' : '\0');
  std::memcpy(bytes.data(), &value, static_cast<size_t>(std::min(width, 16)));
  return bytes;
}

std::shared_ptr<ArrayData> DecimalsOf(TypePtr type, const std::vector<__int128>& values) {
  std::string bytes;
  for (__int128 value : values) bytes += SignedBytes(value, type->byte_width);
  return Make(std::move(type), static_cast<int64_t>(values.size()), {nullptr, Bytes(bytes)});
}

__int128 PowerOf10(int digits) {
  __int128 value = 1;
  for (int i = 0; i < digits; ++i) value *= 10;
  return value;
}

TEST(ValidateFullTest, DecimalsMustFitTheirPrecision) {
  for (int bits : {32, 64, 128, 256}) {
    const int precision = bits == 32 ? 5 : 10;
    SCOPED_TRACE(bits);
    const __int128 bound = PowerOf10(precision);
    auto type = decimal(bits, precision, 2);
    EXPECT_TRUE(BothOk(*DecimalsOf(type, {0, bound - 1, -(bound - 1), 42})));
    EXPECT_TRUE(OnlyFullFails(*DecimalsOf(type, {1, bound}),
                              "values must fit the precision (|value| < 10^" +
                                  std::to_string(precision) + "): value 1 is " +
                                  (precision == 5 ? "100000" : "10000000000")));
    EXPECT_TRUE(OnlyFullFails(*DecimalsOf(type, {-bound}), "value 0 is -1"));
    // A null slot's value is unspecified.
    auto null_slot = WithNulls(DecimalsOf(type, {1, bound}), {1, 0});
    EXPECT_TRUE(BothOk(*null_slot));
  }
  // The largest precisions, and values far outside them.
  EXPECT_TRUE(BothOk(*DecimalsOf(decimal(128, 38, 0), {PowerOf10(38) - 1})));
  EXPECT_TRUE(OnlyFullFails(*DecimalsOf(decimal(128, 38, 0), {PowerOf10(38)}),
                            "value 0 is 100000000000000000000000000000000000000"));
  auto most_negative = DecimalsOf(decimal(128, 38, 0), {0});
  std::string bytes(16, '\0');
  bytes[15] = '\x80';
  most_negative->buffers[1] = Bytes(bytes);
  EXPECT_TRUE(OnlyFullFails(*most_negative, "value 0 is -170141183460469231731687303715884105728"));
  // decimal256: a high word set beyond 10^76 (and a negative one within).
  std::string wide(32, '\0');
  wide[31] = '\x7f';
  auto huge = DecimalsOf(decimal(256, 76, 0), {0});
  huge->buffers[1] = Bytes(wide);
  EXPECT_TRUE(OnlyFullFails(*huge, "decimal256(76, 0) values must fit the precision"));
  EXPECT_TRUE(BothOk(*DecimalsOf(decimal(256, 76, 0), {-PowerOf10(37)})));
}

TEST(ValidateFullTest, DecimalPrecisionIsCheckedAtEveryDepth) {
  auto bad = DecimalsOf(decimal(128, 4, 0), {1, 10000});
  const std::string rule = "values must fit the precision";
  auto in_struct = Make(struct_({field("d", bad->type)}), 2, {nullptr}, {bad});
  EXPECT_TRUE(OnlyFullFails(*in_struct, rule, kPath + ".'d'"));
  auto in_list = ListOf(list(field("item", bad->type)), {0, 2}, bad);
  EXPECT_TRUE(OnlyFullFails(*in_list, rule, kPath + ".item"));
  auto in_fixed = Make(fixed_size_list(field("item", bad->type), 2), 1, {nullptr}, {bad});
  EXPECT_TRUE(OnlyFullFails(*in_fixed, rule, kPath + ".item"));
  auto in_dictionary = Make(dictionary(int8(), bad->type), 1, {nullptr, Values<int8_t>({0})});
  in_dictionary->dictionary = bad;
  EXPECT_TRUE(OnlyFullFails(*in_dictionary, rule, kPath + ".dictionary"));
}

TEST(ValidateFullTest, TimesMustBeTimesOfDay) {
  struct Case {
    TypePtr type;
    int64_t per_day;
  };
  const std::vector<Case> cases = {{time32(TimeUnit::kSecond), 86400},
                                   {time32(TimeUnit::kMilli), 86400000},
                                   {time64(TimeUnit::kMicro), 86400000000},
                                   {time64(TimeUnit::kNano), 86400000000000}};
  for (const Case& test : cases) {
    SCOPED_TRACE(test.type->ToString());
    const bool wide = test.type->id == TypeId::kTime64;
    auto of = [&](const std::vector<int64_t>& values) {
      if (wide) return Primitive(test.type, values);
      std::vector<int32_t> narrow(values.begin(), values.end());
      return Primitive(test.type, narrow);
    };
    EXPECT_TRUE(BothOk(*of({0, test.per_day - 1})));
    EXPECT_TRUE(OnlyFullFails(*of({0, test.per_day}), test.type->ToString() +
                                                          " values must be times of day in [0, " +
                                                          std::to_string(test.per_day) + ")"));
    EXPECT_TRUE(OnlyFullFails(*of({-1}), "value 0 is -1"));
    EXPECT_TRUE(BothOk(*WithNulls(of({-1, 5}), {0, 1})));
  }
}

TEST(ValidateFullTest, Date64MustBeWholeDays) {
  auto good = Primitive(date64(), std::vector<int64_t>{0, 86400000, -86400000 * 3});
  EXPECT_TRUE(BothOk(*good));
  auto bad = Primitive(date64(), std::vector<int64_t>{86400000, 201});
  EXPECT_TRUE(OnlyFullFails(*bad,
                            "date64 values must be whole days (multiples of 86400000 ms): "
                            "value 1 is 201"));
  // A slice that leaves the bad value out passes.
  bad->length = 1;
  EXPECT_TRUE(BothOk(*bad));
  bad->length = 2;
  EXPECT_TRUE(BothOk(*WithNulls(bad, {1, 0})));
}

// ---- Zero-length arrays at an offset
// ----------------------------------------------------------------------------

TEST(ValidateStructuralTest, ZeroLengthStructChildrenMustStillCoverTheOffset) {
  auto type = struct_({field("a", int32())});
  auto data = Make(type, 0, {nullptr}, {Int32s({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})});
  data->offset = 10;
  EXPECT_TRUE(BothOk(*data));
  data->offset = 17;
  EXPECT_TRUE(
      BothFail(*data, "child 0 ('a') is too short: offset + length needs length 17, child has 10"));
  auto sparse = Make(sparse_union({field("a", int32())}), 0, {nullptr}, {Int32s({1})});
  sparse->offset = 2;
  EXPECT_TRUE(BothFail(*sparse, "offset + length needs length 2, child has 1"));
}

TEST(ValidateStructuralTest, ZeroLengthViewsAtAnOffsetNeedTheirViews) {
  for (const TypePtr& type : {binary_view(), utf8_view()}) {
    SCOPED_TRACE(type->ToString());
    auto data = Make(type, 0, {nullptr, nullptr});
    EXPECT_TRUE(BothOk(*data));
    data->offset = 6;
    EXPECT_TRUE(BothFail(*data,
                         "views buffer (buffer 1) is too small: even a zero-length view array "
                         "needs offset views, 6 views of 16 bytes need 96 bytes (offset 6 + "
                         "length 0), has 0"));
    data->buffers[1] = Zeros(96);
    EXPECT_TRUE(BothOk(*data));
  }
}

TEST(ValidateStructuralTest, ZeroLengthArraysMustNotStartAtANegativeOffsetValue) {
  // Arrow C++ reads the entry at the offset even when the length is 0.
  auto strings = Make(utf8(), 0, {nullptr, Values<int32_t>({-1, 11, 3, 3}), Bytes("")});
  strings->offset = 3;
  EXPECT_TRUE(BothOk(*strings));
  strings->offset = 0;
  EXPECT_TRUE(BothFail(*strings,
                       "offsets must be non-negative, also in a zero-length array: offsets[0]=-1"));
  auto lists = ListOf(large_list(field("item", int32())), {0}, Int32s({}));
  lists->buffers[1] = Values<int64_t>({std::numeric_limits<int64_t>::min()});
  EXPECT_TRUE(BothFail(*lists, "offsets[0]=-9223372036854775808"));
  // Without the entry (an absent or short buffer) there is nothing to read.
  strings->buffers[1] = nullptr;
  EXPECT_TRUE(BothOk(*strings));
}

TEST(ValidateFullTest, ZeroLengthRunEndEncodedMustBeCoveredAtItsOffset) {
  auto type = run_end_encoded(int32(), int32());
  auto data = Make(type, 0, {}, {Int32s({5}), Int32s({1})});
  data->offset = 5;
  EXPECT_TRUE(BothOk(*data));
  data->offset = 10;
  EXPECT_TRUE(OnlyFullFails(*data, "run ends must cover offset + length: run_ends[0]=5 < 10"));
}

TEST(ValidateFullTest, DenseUnionOffsetsMustNotDecreaseWithinAChild) {
  auto type = dense_union({field("a", int32()), field("b", int32())}, {0, 1});
  // Each child's offsets rise on their own; equal offsets are allowed.
  auto data = Make(type, 4, {Values<int8_t>({0, 1, 0, 0}), Values<int32_t>({1, 0, 1, 2})},
                   {Int32s({1, 2, 3}), Int32s({4})});
  EXPECT_TRUE(BothOk(*data));
  data->buffers[1] = Values<int32_t>({1, 0, 0, 2});
  EXPECT_TRUE(OnlyFullFails(*data,
                            "dense union offsets must not decrease within a child: offsets[2]=0 "
                            "< offsets[0]=1, both for type id 0"));
  // Only the slots of the array count: slot 0 is sliced off.
  data->offset = 1;
  data->length = 3;
  EXPECT_TRUE(BothOk(*data));
}

// ---- Null counts
// ---------------------------------------------------------------------------------------

TEST(ValidateFullTest, KnownNullCountMustMatchTheBitmap) {
  auto data = WithNulls(Int32s({1, 2, 3}), {1, 0, 0});
  EXPECT_TRUE(BothOk(*data));
  data->null_count = 1;
  EXPECT_TRUE(OnlyFullFails(*data,
                            "null_count must match the validity bitmap: null_count is 1 "
                            "but the bitmap has 2 nulls"));
  data->null_count = kUnknownNullCount;
  EXPECT_TRUE(BothOk(*data));
  // Only the slice counts.
  data->null_count = 0;
  data->offset = 0;
  data->length = 1;
  EXPECT_TRUE(BothOk(*data));
}

TEST(ValidateFullTest, NullCountOfNestedChildrenIsChecked) {
  auto child = WithNulls(Int32s({1, 2}), {0, 1});
  child->null_count = 0;
  auto data = Make(struct_({field("a", int32())}), 2, {nullptr}, {child});
  EXPECT_TRUE(OnlyFullFails(*data, "null_count must match the validity bitmap", kPath + ".'a'"));
}

TEST(ValidateFullTest, StructNullCountIsChecked) {
  auto data = Make(struct_({field("a", int32())}), 2, {Bitmap({1, 0})}, {Int32s({1, 2})}, 0);
  EXPECT_TRUE(OnlyFullFails(*data, "but the bitmap has 1 nulls"));
}

TEST(ValidateFullTest, LongUtf8ColumnsPass) {
  std::vector<std::string> strings;
  strings.reserve(1000);
  for (int i = 0; i < 1000; ++i) strings.push_back("value \xE2\x82\xAC " + std::to_string(i));
  EXPECT_TRUE(BothOk(*Strings(strings)));
  EXPECT_TRUE(BothOk(*StringsOf<int64_t>(large_utf8(), strings)));
}

// =============================================================================
// Record batches
// =============================================================================

TEST(ValidateRecordBatchTest, ValidatesEveryColumnWithItsName) {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("id", int32()), field("name", utf8())};
  auto names = Strings({"a", "b"});
  auto batch = RecordBatch::Make(schema, 2, {Int32s({1, 2}), names});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_TRUE(IsOk(ValidateStructural(**batch)));
  EXPECT_TRUE(IsOk(ValidateFull(**batch)));

  auto bad_names = Strings({"a", "\xC3"});
  auto bad_batch = RecordBatch::Make(schema, 2, {Int32s({1, 2}), bad_names});
  ASSERT_TRUE(bad_batch.ok()) << bad_batch.status().ToString();
  EXPECT_TRUE(IsOk(ValidateStructural(**bad_batch)));
  EXPECT_TRUE(FailsWith(ValidateFull(**bad_batch), "col 'name'", "value 1 is not valid UTF-8"));

  auto short_offsets = Strings({"a", "b"});
  short_offsets->buffers[1] = Values<int32_t>({0, 1});
  auto broken = RecordBatch::Make(schema, 2, {Int32s({1, 2}), short_offsets});
  ASSERT_TRUE(broken.ok()) << broken.status().ToString();
  EXPECT_TRUE(FailsWith(ValidateStructural(**broken), "col 'name'", "offsets buffer"));
}

// =============================================================================
// Hostile input: every case must fail cleanly, never read out of bounds.
// =============================================================================

TEST(ValidateHostileTest, HugeLengthWithTinyBuffers) {
  auto data = Int32s({1});
  data->length = kInt64Max;
  EXPECT_TRUE(BothFail(*data, "overflows int64"));
  data->length = kInt64Max / 4;
  EXPECT_TRUE(BothFail(*data, "values buffer (buffer 1) is too small"));
  auto bits = Make(boolean(), kInt64Max, {Zeros(1), Zeros(1)});
  EXPECT_TRUE(BothFail(*bits, "validity buffer (buffer 0) is too small"));
  bits->buffers[0] = nullptr;
  EXPECT_TRUE(BothFail(*bits, "values buffer (buffer 1) is too small"));
  auto strings = Strings({"a"});
  strings->length = kInt64Max;
  EXPECT_TRUE(BothFail(*strings, "overflows int64"));
  strings->length = kInt64Max - 1;
  EXPECT_TRUE(BothFail(*strings, "overflows int64"));
  auto views = ViewsOf(binary_view(), {InlineView("a")});
  views->length = kInt64Max / 8;
  EXPECT_TRUE(BothFail(*views, "overflows int64"));
}

TEST(ValidateHostileTest, HugeOffsetWithTinyBuffers) {
  auto data = Int32s({1});
  data->offset = kInt64Max - 1;
  EXPECT_TRUE(BothFail(*data, "overflows int64"));
  auto strings = Strings({"a"});
  strings->offset = kInt64Max / 8;
  EXPECT_TRUE(BothFail(*strings, "offsets buffer (buffer 1) is too small"));
  auto structs = Make(struct_({field("a", int32())}), 1, {nullptr}, {Int32s({1})});
  structs->offset = kInt64Max - 1;
  EXPECT_TRUE(BothFail(*structs, "is too short"));
  auto fsl =
      Make(fixed_size_list(field("item", int32()), 4), int64_t{1} << 62, {nullptr}, {Int32s({1})});
  EXPECT_TRUE(BothFail(*fsl, "(offset + length) * list_size overflows int64"));
}

TEST(ValidateHostileTest, HugeOffsetValues) {
  auto strings = Strings({"a"});
  strings->buffers[1] = Values<int32_t>({0, std::numeric_limits<int32_t>::max()});
  EXPECT_TRUE(BothFail(*strings, "last offset exceeds the data buffer size"));
  strings->buffers[1] = Values<int32_t>({std::numeric_limits<int32_t>::min(), 1});
  EXPECT_TRUE(BothFail(*strings, "offsets must be non-negative"));
  auto views = ViewsOf(binary_view(),
                       {RefView(std::numeric_limits<int32_t>::max(), "abcd",
                                std::numeric_limits<int32_t>::max(), 0)},
                       {Bytes("abcdefghijklmnop")});
  EXPECT_TRUE(OnlyFullFails(*views, "view buffer index out of range"));
  views = ViewsOf(binary_view(),
                  {RefView(std::numeric_limits<int32_t>::max(), "abcd", 0,
                           std::numeric_limits<int32_t>::max())},
                  {Bytes("abcdefghijklmnop")});
  EXPECT_TRUE(OnlyFullFails(*views, "view data must lie within its data buffer"));
  auto dense = Make(dense_union({field("a", int32())}), 1,
                    {Values<int8_t>({0}), Values<int32_t>({std::numeric_limits<int32_t>::max()})},
                    {Int32s({1})});
  EXPECT_TRUE(OnlyFullFails(*dense, "dense union offsets must index into their child"));
}

// A zero-size buffer (exactly zero bytes of memory) in every slot of every
// leaf layout, with length 1: each must be refused without reading it.
TEST(ValidateHostileTest, ZeroSizeBuffers) {
  const std::vector<TypePtr> types = {boolean(),
                                      int8(),
                                      int64(),
                                      float16(),
                                      decimal(256, 40, 0),
                                      fixed_size_binary(3),
                                      interval_month_day_nano(),
                                      utf8(),
                                      large_binary(),
                                      binary_view(),
                                      utf8_view(),
                                      dictionary(int32(), utf8())};
  for (const TypePtr& type : types) {
    SCOPED_TRACE(type->ToString());
    const bool has_data_buffer = type->id == TypeId::kUtf8 || type->id == TypeId::kLargeBinary;
    std::vector<BufferPtr> buffers = {Zeros(0), Zeros(0)};
    if (has_data_buffer) buffers.push_back(Zeros(0));
    auto data = Make(type, 1, buffers);
    if (type->id == TypeId::kDictionary) data->dictionary = Strings({"a"});
    EXPECT_TRUE(BothFail(*data, "validity buffer (buffer 0) is too small"));
    // Without a validity bitmap the next buffer is the one refused.
    data->buffers[0] = nullptr;
    EXPECT_TRUE(BothFail(*data, "buffer (buffer 1) is too small"));
  }
  auto ree = Make(run_end_encoded(int32(), int32()), 1, {},
                  {Make(int32(), 1, {nullptr, Zeros(0)}), Make(int32(), 1, {nullptr, Zeros(0)})});
  EXPECT_TRUE(FailsWith(ValidateFull(*ree, kPath), kPath + ".run_ends", "too small"));
  auto sparse = Make(sparse_union({field("a", int32())}), 1, {Zeros(0)}, {Int32s({1})});
  EXPECT_TRUE(BothFail(*sparse, "type_ids buffer (buffer 0) is too small"));
  auto list_type = list(field("item", int32()));
  auto lists = Make(list_type, 1, {Zeros(0), Zeros(0)}, {Int32s({1})});
  EXPECT_TRUE(BothFail(*lists, "validity buffer (buffer 0) is too small"));
  lists->buffers[0] = nullptr;
  EXPECT_TRUE(BothFail(*lists, "offsets buffer (buffer 1) is too small"));
}

// Random buffers of random sizes under random nested types. Under ASan any
// out-of-bounds read fails the test; without it, the test still proves that
// no input crashes or hangs the validator.
class RandomArrays {
 public:
  explicit RandomArrays(uint32_t seed) : random_(seed) {}

  int Pick(int count) { return std::uniform_int_distribution<int>(0, count - 1)(random_); }

  // Mostly small bytes, so offsets and lengths often land in range and the
  // deeper checks get exercised.
  BufferPtr RandomBuffer() {
    if (Pick(8) == 0) return nullptr;
    const int64_t size = Pick(48);
    std::vector<uint8_t> bytes(static_cast<size_t>(size));
    for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(Pick(4) == 0 ? Pick(256) : Pick(6));
    return ExactBuffer(bytes.data(), size);
  }

  ArrayDataPtr RandomArray(const TypePtr& type, int depth) {
    auto data = std::make_shared<ArrayData>();
    data->type = type;
    data->length = Pick(6);
    data->offset = Pick(3) == 0 ? Pick(3) : 0;
    const int null_counts[] = {0, 0, 1, 2, -1};
    data->null_count = null_counts[Pick(5)];
    int buffer_count = ExpectedBuffers(type->id);
    if (Pick(20) == 0) buffer_count += Pick(3) - 1;  // sometimes the wrong count
    for (int i = 0; i < std::max(buffer_count, 0); ++i) data->buffers.push_back(RandomBuffer());
    if (depth < 3) {
      for (const Field& child : type->children)
        data->children.push_back(RandomArray(child.type, depth + 1));
      if (type->id == TypeId::kDictionary)
        data->dictionary = RandomArray(type->value_type, depth + 1);
    }
    return data;
  }

 private:
  static int ExpectedBuffers(TypeId id) {
    switch (id) {
      case TypeId::kRunEndEncoded:
      case TypeId::kNull:
        return 0;
      case TypeId::kStruct:
      case TypeId::kFixedSizeList:
      case TypeId::kSparseUnion:
        return 1;
      case TypeId::kUtf8:
      case TypeId::kLargeUtf8:
      case TypeId::kBinary:
      case TypeId::kListView:
        return 3;
      case TypeId::kUtf8View:
        return 4;
      default:
        return 2;
    }
  }

  std::mt19937 random_;
};

TEST(ValidateHostileTest, RandomBuffersNeverCrash) {
  const std::vector<TypePtr> types = {
      int32(),
      boolean(),
      utf8(),
      large_utf8(),
      binary(),
      utf8_view(),
      list(field("item", int16())),
      list_view(field("item", utf8())),
      fixed_size_list(field("item", int8()), 2),
      struct_({field("a", int32()), field("b", utf8())}),
      map(utf8(), int32()),
      sparse_union({field("a", int8()), field("b", utf8())}, {1, 4}),
      dense_union({field("a", int8()), field("b", utf8())}, {0, 1}),
      run_end_encoded(int16(), utf8()),
      dictionary(int8(), utf8()),
      dictionary(uint16(), list(field("item", int8()))),
      null(),
  };
  RandomArrays generator(20240601);
  int accepted = 0;
  for (int iteration = 0; iteration < 6000; ++iteration) {
    const TypePtr& type =
        types[static_cast<size_t>(generator.Pick(static_cast<int>(types.size())))];
    ArrayDataPtr data = generator.RandomArray(type, 0);
    Status structural = ValidateStructural(*data, kPath);
    Status full = ValidateFull(*data, kPath);
    // Full is structural plus more: it may never accept what structural refuses.
    if (!structural.ok()) {
      EXPECT_FALSE(full.ok()) << structural.ToString();
    }
    if (full.ok()) ++accepted;
    if (!full.ok()) {
      EXPECT_EQ(full.code(), StatusCode::kInvalid);
      EXPECT_THAT(full.message(), HasSubstr(kPath));
    }
  }
  // The generator must reach valid arrays too, or the deeper checks go untested.
  RecordProperty("accepted", accepted);
  EXPECT_GT(accepted, 100);
}

// Deep copy into fresh exact-size memory, so that mutations never touch the
// original and every overread is still visible to AddressSanitizer.
std::shared_ptr<ArrayData> DeepCopy(const ArrayData& data, std::vector<ArrayData*>* nodes) {
  auto copy = std::make_shared<ArrayData>(data);
  nodes->push_back(copy.get());
  for (BufferPtr& buffer : copy->buffers) {
    if (buffer) buffer = ExactBuffer(buffer->data(), buffer->size());
  }
  for (ArrayDataPtr& child : copy->children) child = DeepCopy(*child, nodes);
  if (copy->dictionary) copy->dictionary = DeepCopy(*copy->dictionary, nodes);
  return copy;
}

std::vector<ArrayDataPtr> ValidSeeds() {
  const std::string long_value = "a value longer than twelve bytes";
  auto point = struct_({field("x", utf8()), field("y", int64())});
  auto points =
      Make(point, 3, {Bitmap({1, 1, 0})}, {Strings({"a", "\xC3\xA9", "zz"}), Int64s({1, 2, 3})}, 1);
  auto map_type = map(utf8(), int32());
  auto entries = Make(map_type->children[0].type, 3, {nullptr},
                      {Strings({"k1", "k2", "k3"}), Int32s({1, 2, 3})});
  auto dictionary_array = Make(dictionary(int16(), utf8()), 4,
                               {Bitmap({1, 1, 0, 1}), Values<int16_t>({1, 0, 7, 2})}, {}, 1);
  dictionary_array->dictionary = Strings({"x", "y", "\xE2\x82\xAC"});
  std::vector<ArrayDataPtr> seeds = {
      WithNulls(Strings({"ab", "\xF0\x9D\x84\x9E", "", "xyz"}), {1, 1, 0, 1}),
      StringsOf<int64_t>(large_utf8(), {"h\xC3\xA9", long_value}),
      StringsOf<int32_t>(binary(), {"\xFF", "", "bin"}),
      ViewsOf(utf8_view(),
              {InlineView("short"), RefView(static_cast<int32_t>(long_value.size()), "a va", 1, 2),
               InlineView("")},
              {Bytes("unused"), Bytes(".." + long_value)}),
      ListOf(list(field("item", point)), {0, 2, 3}, points),
      Make(large_list(field("item", int32())), 2, {nullptr, Values<int64_t>({0, 1, 3})},
           {Int32s({1, 2, 3})}),
      Make(list_view(field("item", utf8())), 3,
           {Bitmap({1, 0, 1}), Values<int32_t>({2, 0, 0}), Values<int32_t>({1, 0, 2})},
           {Strings({"p", "q", "r"})}, 1),
      Make(fixed_size_list(field("item", int8()), 2), 2, {nullptr},
           {Primitive<int8_t>(int8(), {1, 2, 3, 4})}),
      ListOf(map_type, {0, 2, 3}, entries),
      Make(sparse_union({field("a", int32()), field("b", utf8())}, {2, 5}), 3,
           {Values<int8_t>({2, 5, 5})}, {Int32s({1, 2, 3}), Strings({"s", "t", "u"})}),
      Make(dense_union({field("a", int32()), field("b", utf8())}, {0, 1}), 3,
           {Values<int8_t>({0, 1, 0}), Values<int32_t>({0, 0, 1})},
           {Int32s({10, 20}), Strings({"only"})}),
      Make(run_end_encoded(int16(), utf8()), 5, {},
           {Primitive<int16_t>(int16(), {2, 5}), Strings({"r", "s"})}),
      Make(run_end_encoded(int64(), int32()), 4, {}, {Int64s({1, 4}), Int32s({7, 8})}),
      dictionary_array,
      Make(boolean(), 10, {Bitmap({1, 1, 1, 1, 1, 1, 1, 1, 1, 0}), Zeros(2)}, {}, 1),
      Make(decimal(128, 20, 3), 2, {nullptr, Zeros(32)}),
  };
  return seeds;
}

TEST(ValidateHostileTest, SeedsForMutationAreValid) {
  for (const ArrayDataPtr& seed : ValidSeeds()) {
    SCOPED_TRACE(seed->type->ToString());
    EXPECT_TRUE(BothOk(*seed));
  }
}

// Corrupts valid arrays of every layout a few bytes or fields at a time. Each
// result must be accepted or refused with a located message, never read out
// of bounds; many must get past the structural level, so the value checks are
// exercised on hostile data too.
TEST(ValidateHostileTest, MutatedValidArraysNeverCrash) {
  const std::vector<ArrayDataPtr> seeds = ValidSeeds();
  std::mt19937 random(7);
  auto pick = [&random](int64_t count) {
    return std::uniform_int_distribution<int64_t>(0, count - 1)(random);
  };
  int refused_only_by_full = 0;
  for (int iteration = 0; iteration < 8000; ++iteration) {
    std::vector<ArrayData*> nodes;
    auto root =
        DeepCopy(*seeds[static_cast<size_t>(pick(static_cast<int64_t>(seeds.size())))], &nodes);
    const int64_t mutation_count = 1 + pick(3);
    for (int64_t m = 0; m < mutation_count; ++m) {
      ArrayData& node = *nodes[static_cast<size_t>(pick(static_cast<int64_t>(nodes.size())))];
      const int64_t buffer_index =
          node.buffers.empty() ? -1 : pick(static_cast<int64_t>(node.buffers.size()));
      BufferPtr* buffer =
          buffer_index < 0 ? nullptr : &node.buffers[static_cast<size_t>(buffer_index)];
      switch (pick(7)) {
        case 0:
        case 1:  // overwrite one byte
          if (buffer && *buffer && (*buffer)->size() > 0) {
            const uint8_t values[] = {0, 1, 2, 0x7F, 0x80, 0xC3, 0xFF};
            (*buffer)->mutable_data()[pick((*buffer)->size())] = values[pick(7)];
          }
          break;
        case 2:  // truncate
          if (buffer && *buffer)
            *buffer = ExactBuffer((*buffer)->data(), pick((*buffer)->size() + 1));
          break;
        case 3:  // drop
          if (buffer) *buffer = nullptr;
          break;
        case 4:
          node.length += pick(5) - 2;
          break;
        case 5:
          node.offset += pick(3) - 1;
          break;
        default: {
          const int64_t null_counts[] = {kUnknownNullCount, 0, 1, node.length};
          node.null_count = null_counts[pick(4)];
          break;
        }
      }
    }
    Status structural = ValidateStructural(*root, kPath);
    Status full = ValidateFull(*root, kPath);
    if (!structural.ok()) {
      EXPECT_FALSE(full.ok()) << structural.ToString();
    } else if (!full.ok()) {
      ++refused_only_by_full;
    }
    if (!full.ok()) {
      EXPECT_EQ(full.code(), StatusCode::kInvalid);
      EXPECT_EQ(full.message().rfind(kPath, 0), 0u) << full.message();
    }
  }
  RecordProperty("refused_only_by_full", refused_only_by_full);
  EXPECT_GT(refused_only_by_full, 200);
}

}  // namespace
}  // namespace ferry
