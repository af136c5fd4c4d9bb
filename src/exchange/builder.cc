#include "ferry/exchange/builder.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace ferry {

static_assert(std::endian::native == std::endian::little,
              "Ferry lays out Arrow data in little-endian order");

namespace {

// Keeps size arithmetic (count * width, doubling) far from int64 overflow.
constexpr int64_t kMaxBufferSize = int64_t{1} << 52;

// Owns the memory a BufferBuilder handed over; frees it with the pool that
// allocated it when the last Buffer referring to it is gone.
struct PoolMemory {
  PoolMemory(MemoryPool* pool, uint8_t* data, int64_t capacity)
      : pool(pool), data(data), capacity(capacity) {}
  ~PoolMemory() { pool->Free(data, capacity); }
  PoolMemory(const PoolMemory&) = delete;
  PoolMemory& operator=(const PoolMemory&) = delete;
  MemoryPool* pool;
  uint8_t* data;
  int64_t capacity;
};

Status TooLarge(int64_t size) {
  return Status::OutOfMemory("a buffer of " + std::to_string(size) +
                             " bytes exceeds the builder limit of " +
                             std::to_string(kMaxBufferSize) + " bytes");
}

// Bytes needed for `count` values of `width` bytes, or an error on overflow.
Result<int64_t> BytesFor(int64_t count, int64_t width) {
  if (count < 0) return Status::Invalid("negative count " + std::to_string(count));
  if (width > 0 && count > kMaxBufferSize / width) return TooLarge(count);
  return count * width;
}

void SetBitRange(uint8_t* bits, int64_t start, int64_t end) {
  int64_t i = start;
  for (; i < end && (i & 7) != 0; ++i) SetBit(bits, i);
  const int64_t whole_bytes_end = end & ~int64_t{7};
  if (i < whole_bytes_end) {
    std::memset(bits + (i >> 3), 0xFF, static_cast<size_t>((whole_bytes_end - i) >> 3));
    i = whole_bytes_end;
  }
  for (; i < end; ++i) SetBit(bits, i);
}

std::string TypeName(const TypePtr& type) { return type ? type->ToString() : "<no type>"; }

std::shared_ptr<ArrayData> NewArrayData(const TypePtr& type, int64_t length, int64_t null_count) {
  auto data = std::make_shared<ArrayData>();
  data->type = type;
  data->length = length;
  data->null_count = null_count;
  return data;
}

// Completes `data` with buffers {validity, values}; the values builder is
// finished only once the validity bitmap was.
template <typename ValuesBuilder>
Result<ArrayDataPtr> FinishWithValues(std::shared_ptr<ArrayData> data, Result<BufferPtr> validity,
                                      ValuesBuilder& values) {
  FERRY_ASSIGN_OR_RAISE(BufferPtr validity_buffer, std::move(validity));
  FERRY_ASSIGN_OR_RAISE(BufferPtr values_buffer, values.Finish());
  data->buffers = {std::move(validity_buffer), std::move(values_buffer)};
  return ArrayDataPtr(std::move(data));
}

// Largest value of an integer type that an int64 can hold.
int64_t IntegerMax(TypeId id) {
  switch (id) {
    case TypeId::kInt8:
      return INT8_MAX;
    case TypeId::kUInt8:
      return UINT8_MAX;
    case TypeId::kInt16:
      return INT16_MAX;
    case TypeId::kUInt16:
      return UINT16_MAX;
    case TypeId::kInt32:
      return INT32_MAX;
    case TypeId::kUInt32:
      return UINT32_MAX;
    default:
      return INT64_MAX;
  }
}

int64_t IntegerMin(TypeId id) {
  switch (id) {
    case TypeId::kInt8:
      return INT8_MIN;
    case TypeId::kInt16:
      return INT16_MIN;
    case TypeId::kInt32:
      return INT32_MIN;
    case TypeId::kInt64:
      return INT64_MIN;
    default:
      return 0;
  }
}

bool IsBinaryLike(TypeId id) {
  switch (id) {
    case TypeId::kBinary:
    case TypeId::kUtf8:
    case TypeId::kLargeBinary:
    case TypeId::kLargeUtf8:
    case TypeId::kBinaryView:
    case TypeId::kUtf8View:
    case TypeId::kFixedSizeBinary:
      return true;
    default:
      return false;
  }
}

// Appends a byte string to any builder of a binary-like type.
Status AppendStringValue(ArrayBuilder* builder, std::string_view value) {
  if (auto* binary = dynamic_cast<BaseBinaryBuilder<int32_t>*>(builder)) {
    return binary->Append(value);
  }
  if (auto* large = dynamic_cast<BaseBinaryBuilder<int64_t>*>(builder)) {
    return large->Append(value);
  }
  if (auto* view = dynamic_cast<BinaryViewBuilder*>(builder)) return view->Append(value);
  if (auto* fixed = dynamic_cast<FixedSizeBinaryBuilder*>(builder)) return fixed->Append(value);
  return Status::TypeError("cannot append a byte string to a builder of " +
                           TypeName(builder->type()));
}

template <typename OffsetType>
Status CheckChildFitsOffsets(int64_t child_length, const TypePtr& type) {
  if (child_length > std::numeric_limits<OffsetType>::max()) {
    return Status::Invalid("a child of " + std::to_string(child_length) +
                           " values overflows the offsets of " + TypeName(type));
  }
  return Status::OK();
}

// Writes the low `width` bytes of `value` (little-endian).
void WriteInteger(uint8_t* out, int64_t value, int32_t width) {
  std::memcpy(out, &value, static_cast<size_t>(width));
}

}  // namespace

// ---- BufferBuilder ------------------------------------------------------------

BufferBuilder::BufferBuilder(BufferBuilder&& other) noexcept
    : pool_(other.pool_), data_(other.data_), length_(other.length_), capacity_(other.capacity_) {
  other.data_ = nullptr;
  other.length_ = 0;
  other.capacity_ = 0;
}

BufferBuilder& BufferBuilder::operator=(BufferBuilder&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = other.pool_;
    data_ = std::exchange(other.data_, nullptr);
    length_ = std::exchange(other.length_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

Status BufferBuilder::GrowTo(int64_t min_capacity) {
  if (min_capacity <= capacity_) return Status::OK();
  if (min_capacity > kMaxBufferSize) return TooLarge(min_capacity);
  // Doubling keeps appends amortised O(1); 64-byte multiples keep the padding
  // that Arrow recommends and SIMD readers assume.
  const int64_t new_capacity =
      std::max({PaddedSize(min_capacity), capacity_ * 2, kBufferAlignment});
  uint8_t* fresh = nullptr;
  if (data_ == nullptr) {
    FERRY_ASSIGN_OR_RAISE(fresh, pool_->Allocate(new_capacity));
  } else {
    FERRY_ASSIGN_OR_RAISE(fresh, pool_->Reallocate(data_, capacity_, new_capacity));
  }
  data_ = fresh;
  capacity_ = new_capacity;
  return Status::OK();
}

Status BufferBuilder::Reserve(int64_t additional_bytes) {
  if (additional_bytes < 0) {
    return Status::Invalid("cannot reserve a negative size " + std::to_string(additional_bytes));
  }
  if (additional_bytes > kMaxBufferSize - length_) return TooLarge(additional_bytes);
  return GrowTo(length_ + additional_bytes);
}

Status BufferBuilder::Resize(int64_t new_length) {
  if (new_length < 0)
    return Status::Invalid("negative buffer length " + std::to_string(new_length));
  FERRY_RETURN_NOT_OK(GrowTo(new_length));
  if (new_length > length_) {
    std::memset(data_ + length_, 0, static_cast<size_t>(new_length - length_));
  }
  length_ = new_length;
  return Status::OK();
}

Status BufferBuilder::Append(const void* data, int64_t size) {
  if (size == 0) return Status::OK();
  FERRY_RETURN_NOT_OK(Reserve(size));
  UnsafeAppend(data, size);
  return Status::OK();
}

Status BufferBuilder::AppendZeros(int64_t size) {
  if (size < 0) return Status::Invalid("negative size " + std::to_string(size));
  if (size > kMaxBufferSize - length_) return TooLarge(size);
  return Resize(length_ + size);
}

Result<BufferPtr> BufferBuilder::Finish(bool shrink_to_fit) {
  // Even an empty buffer gets real (padded) memory: consumers may read it.
  if (capacity_ == 0) FERRY_RETURN_NOT_OK(GrowTo(kBufferAlignment));
  const int64_t padded = std::max(PaddedSize(length_), kBufferAlignment);
  if (shrink_to_fit && padded < capacity_) {
    FERRY_ASSIGN_OR_RAISE(data_, pool_->Reallocate(data_, capacity_, padded));
    capacity_ = padded;
  }
  std::memset(data_ + length_, 0, static_cast<size_t>(capacity_ - length_));
  auto owner = std::make_shared<PoolMemory>(pool_, data_, capacity_);
  auto buffer = std::make_shared<Buffer>(data_, length_, std::move(owner));
  data_ = nullptr;
  length_ = 0;
  capacity_ = 0;
  return buffer;
}

void BufferBuilder::Reset() {
  if (data_ != nullptr) pool_->Free(data_, capacity_);
  data_ = nullptr;
  length_ = 0;
  capacity_ = 0;
}

// ---- BitmapBuilder --------------------------------------------------------------

Status BitmapBuilder::Reserve(int64_t additional_bits) {
  if (additional_bits < 0) return Status::Invalid("negative bit count");
  if (additional_bits > kMaxBufferSize - length_) return TooLarge(additional_bits);
  return bytes_.Reserve(BytesForBits(length_ + additional_bits) - bytes_.length());
}

Status BitmapBuilder::AppendRun(bool value, int64_t count) {
  if (count < 0) return Status::Invalid("negative bit count " + std::to_string(count));
  if (count == 0) return Status::OK();
  if (count > kMaxBufferSize - length_) return TooLarge(count);
  const int64_t new_length = length_ + count;
  // Bytes gained are zeroed, so only set bits need writing.
  FERRY_RETURN_NOT_OK(bytes_.Resize(BytesForBits(new_length)));
  if (value) {
    SetBitRange(bytes_.mutable_data(), length_, new_length);
  } else {
    false_count_ += count;
  }
  length_ = new_length;
  return Status::OK();
}

Status BitmapBuilder::AppendBytes(const uint8_t* valid_bytes, int64_t count) {
  if (count < 0) return Status::Invalid("negative bit count " + std::to_string(count));
  if (count > kMaxBufferSize - length_) return TooLarge(count);
  FERRY_RETURN_NOT_OK(bytes_.Resize(BytesForBits(length_ + count)));
  uint8_t* bits = bytes_.mutable_data();
  for (int64_t i = 0; i < count; ++i) {
    if (valid_bytes[i] != 0) {
      SetBit(bits, length_ + i);
    } else {
      ++false_count_;
    }
  }
  length_ += count;
  return Status::OK();
}

Result<BufferPtr> BitmapBuilder::Finish() {
  FERRY_ASSIGN_OR_RAISE(BufferPtr buffer, bytes_.Finish());
  length_ = 0;
  false_count_ = 0;
  return buffer;
}

void BitmapBuilder::Reset() {
  bytes_.Reset();
  length_ = 0;
  false_count_ = 0;
}

// ---- Half floats ------------------------------------------------------------------

uint16_t FloatToHalf(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7FFFFFFFu;
  if (bits >= 0x7F800000u) {  // infinity or NaN (kept quiet)
    return static_cast<uint16_t>(sign | (bits > 0x7F800000u ? 0x7E00u : 0x7C00u));
  }
  if (bits >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 → inf
  if (bits < 0x38800000u) {
    // Below the smallest normal half (2^-14): a multiple of 2^-24. Scaling by
    // a power of two is exact; nearbyint rounds half to even.
    const float scaled = std::bit_cast<float>(bits) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  const uint32_t exponent = (bits >> 23) - 127 + 15;
  const uint32_t mantissa = bits & 0x7FFFFFu;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  const uint32_t dropped = mantissa & 0x1FFFu;
  // Round to nearest even; a carry into the exponent is the correct result.
  if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u) != 0)) ++half;
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t bits) {
  const bool negative = (bits & 0x8000u) != 0;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity()
                              : std::numeric_limits<float>::quiet_NaN();
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }
  return negative ? -magnitude : magnitude;
}

// ---- ArrayBuilder ----------------------------------------------------------------

ArrayBuilder::ArrayBuilder(TypePtr type, MemoryPool* pool)
    : type_(std::move(type)),
      pool_(pool != nullptr ? pool : default_memory_pool()),
      validity_(pool_) {
  if (type_ == nullptr) init_status_ = Status::TypeError("a builder needs a type, got none");
}

Status ArrayBuilder::Reserve(int64_t additional) {
  if (additional < 0) return Status::Invalid("cannot reserve a negative count");
  return ReserveValidity(additional);
}

Result<ArrayDataPtr> ArrayBuilder::Finish() {
  if (!init_status_.ok()) {
    Reset();
    return init_status_;
  }
  Result<ArrayDataPtr> result = FinishInternal();
  Reset();
  return result;
}

void ArrayBuilder::Reset() {
  length_ = 0;
  null_count_ = 0;
  validity_.Reset();
  for (auto& child_builder : children_) child_builder->Reset();
}

Status ArrayBuilder::CheckCount(int64_t count) {
  if (count < 0) return Status::Invalid("cannot append a negative count " + std::to_string(count));
  if (count > kMaxBufferSize) return TooLarge(count);
  return Status::OK();
}

Status ArrayBuilder::AppendValidity(bool valid, int64_t count) {
  if (count == 0) return Status::OK();
  if (null_count_ == 0 && valid) {
    length_ += count;
    return Status::OK();
  }
  if (null_count_ == 0) {
    // The first null: the bitmap so far is all ones.
    FERRY_RETURN_NOT_OK(validity_.Reserve(length_ + count));
    FERRY_RETURN_NOT_OK(validity_.AppendRun(true, length_));
  }
  FERRY_RETURN_NOT_OK(validity_.AppendRun(valid, count));
  length_ += count;
  if (!valid) null_count_ += count;
  return Status::OK();
}

Status ArrayBuilder::AppendValidityBytes(const uint8_t* valid_bytes, int64_t count) {
  if (valid_bytes == nullptr) return AppendValidity(true, count);
  const int64_t nulls = std::count(valid_bytes, valid_bytes + count, uint8_t{0});
  if (nulls == 0) return AppendValidity(true, count);
  if (null_count_ == 0) {
    FERRY_RETURN_NOT_OK(validity_.Reserve(length_ + count));
    FERRY_RETURN_NOT_OK(validity_.AppendRun(true, length_));
  }
  FERRY_RETURN_NOT_OK(validity_.AppendBytes(valid_bytes, count));
  length_ += count;
  null_count_ += nulls;
  return Status::OK();
}

Status ArrayBuilder::ReserveValidity(int64_t additional) {
  return null_count_ > 0 ? validity_.Reserve(additional) : Status::OK();
}

Result<BufferPtr> ArrayBuilder::FinishValidity() {
  if (null_count_ == 0) return BufferPtr();
  return validity_.Finish();
}

void ArrayBuilder::RequireType(bool ok, std::string_view expected) {
  if (!init_status_.ok() || ok) return;
  init_status_ = Status::TypeError("a builder of " + std::string(expected) + " cannot build type " +
                                   TypeName(type_));
}

void ArrayBuilder::MakeChildren(const std::vector<Field>& fields) {
  children_.clear();
  for (const Field& child_field : fields) {
    auto child_builder = MakeBuilder(child_field.type, pool_);
    if (child_builder.ok()) {
      children_.push_back(child_builder.MoveValueUnsafe());
      continue;
    }
    if (init_status_.ok()) {
      init_status_ = child_builder.status().WithPrefix("field '" + child_field.name + "': ");
    }
    // A placeholder keeps child(i) usable; Finish reports init_status_.
    children_.push_back(std::make_unique<NullBuilder>(pool_));
  }
}

Result<std::vector<ArrayDataPtr>> ArrayBuilder::FinishChildren() {
  std::vector<ArrayDataPtr> finished;
  finished.reserve(children_.size());
  for (auto& child_builder : children_) {
    FERRY_ASSIGN_OR_RAISE(ArrayDataPtr child_data, child_builder->Finish());
    finished.push_back(std::move(child_data));
  }
  return finished;
}

void ArrayBuilder::InitSingleChild(TypeId expected) {
  RequireType(type_ != nullptr && type_->id == expected && type_->children.size() == 1,
              TypeIdName(expected));
  if (init_status_.ok()) {
    MakeChildren(type_->children);
  } else {
    children_.push_back(std::make_unique<NullBuilder>(pool_));
  }
}

template <typename OffsetType>
Status ArrayBuilder::AppendEmptyElements(TypedBufferBuilder<OffsetType>& offsets, int64_t end,
                                         bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  FERRY_RETURN_NOT_OK(CheckChildFitsOffsets<OffsetType>(end, type_));
  FERRY_RETURN_NOT_OK(offsets.Reserve(count));
  FERRY_RETURN_NOT_OK(AppendValidity(valid, count));
  return offsets.AppendCopies(static_cast<OffsetType>(end), count);
}

template Status ArrayBuilder::AppendEmptyElements<int32_t>(TypedBufferBuilder<int32_t>&, int64_t,
                                                           bool, int64_t);
template Status ArrayBuilder::AppendEmptyElements<int64_t>(TypedBufferBuilder<int64_t>&, int64_t,
                                                           bool, int64_t);

// ---- NullBuilder / BooleanBuilder ---------------------------------------------------

NullBuilder::NullBuilder(MemoryPool* pool) : ArrayBuilder(null(), pool) {}

Status NullBuilder::AppendNulls(int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  length_ += count;
  null_count_ += count;
  return Status::OK();
}

Result<ArrayDataPtr> NullBuilder::FinishInternal() {
  return ArrayDataPtr(NewArrayData(type_, length_, length_));
}

BooleanBuilder::BooleanBuilder(MemoryPool* pool) : ArrayBuilder(boolean(), pool), values_(pool_) {}

Status BooleanBuilder::Append(bool value) {
  FERRY_RETURN_NOT_OK(values_.Reserve(1));
  FERRY_RETURN_NOT_OK(AppendValidity(true));
  return values_.Append(value);
}

Status BooleanBuilder::AppendValues(const std::vector<bool>& values) {
  const auto count = static_cast<int64_t>(values.size());
  FERRY_RETURN_NOT_OK(values_.Reserve(count));
  FERRY_RETURN_NOT_OK(AppendValidity(true, count));
  for (bool value : values) FERRY_RETURN_NOT_OK(values_.Append(value));
  return Status::OK();
}

Status BooleanBuilder::AppendSlots(bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  FERRY_RETURN_NOT_OK(values_.Reserve(count));
  FERRY_RETURN_NOT_OK(AppendValidity(valid, count));
  return values_.AppendRun(false, count);
}

Status BooleanBuilder::Reserve(int64_t additional) {
  FERRY_RETURN_NOT_OK(ArrayBuilder::Reserve(additional));
  return values_.Reserve(additional);
}

void BooleanBuilder::Reset() {
  ArrayBuilder::Reset();
  values_.Reset();
}

Result<ArrayDataPtr> BooleanBuilder::FinishInternal() {
  return FinishWithValues(NewArrayData(type_, length_, null_count_), FinishValidity(), values_);
}

// ---- Fixed-width values -------------------------------------------------------------

FixedBytesBuilder::FixedBytesBuilder(TypePtr type, MemoryPool* pool)
    : ArrayBuilder(std::move(type), pool), data_(pool_) {
  RequireType(type_ != nullptr && type_->id != TypeId::kNull && type_->id != TypeId::kBool &&
                  type_->fixed_width() >= 0,
              "fixed-width values");
  if (init_status_.ok()) byte_width_ = type_->fixed_width();
}

Status FixedBytesBuilder::AppendBytes(const uint8_t* values, int64_t count,
                                      const uint8_t* valid_bytes) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  FERRY_ASSIGN_OR_RAISE(int64_t bytes, BytesFor(count, byte_width_));
  FERRY_RETURN_NOT_OK(data_.Reserve(bytes));
  FERRY_RETURN_NOT_OK(AppendValidityBytes(valid_bytes, count));
  if (bytes > 0) data_.UnsafeAppend(values, bytes);
  return Status::OK();
}

Status FixedBytesBuilder::AppendSlots(bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  FERRY_ASSIGN_OR_RAISE(int64_t bytes, BytesFor(count, byte_width_));
  FERRY_RETURN_NOT_OK(data_.Reserve(bytes));
  FERRY_RETURN_NOT_OK(AppendValidity(valid, count));
  return data_.AppendZeros(bytes);
}

Status FixedBytesBuilder::Reserve(int64_t additional) {
  FERRY_RETURN_NOT_OK(ArrayBuilder::Reserve(additional));
  FERRY_ASSIGN_OR_RAISE(int64_t bytes, BytesFor(additional, byte_width_));
  return data_.Reserve(bytes);
}

void FixedBytesBuilder::Reset() {
  ArrayBuilder::Reset();
  data_.Reset();
}

Result<ArrayDataPtr> FixedBytesBuilder::FinishInternal() {
  return FinishWithValues(NewArrayData(type_, length_, null_count_), FinishValidity(), data_);
}

FixedSizeBinaryBuilder::FixedSizeBinaryBuilder(TypePtr type, MemoryPool* pool)
    : FixedBytesBuilder(std::move(type), pool) {
  RequireType(type_ != nullptr && type_->id == TypeId::kFixedSizeBinary, "fixed_size_binary");
}

Status FixedSizeBinaryBuilder::Append(std::string_view value) {
  if (static_cast<int64_t>(value.size()) != byte_width()) {
    return Status::Invalid(TypeName(type_) + " values must have " + std::to_string(byte_width()) +
                           " bytes, got " + std::to_string(value.size()));
  }
  return AppendBytes(reinterpret_cast<const uint8_t*>(value.data()));
}

DecimalBuilder::DecimalBuilder(TypePtr type, MemoryPool* pool)
    : FixedBytesBuilder(std::move(type), pool) {
  RequireType(
      type_ != nullptr && (type_->id == TypeId::kDecimal32 || type_->id == TypeId::kDecimal64 ||
                           type_->id == TypeId::kDecimal128 || type_->id == TypeId::kDecimal256),
      "decimal");
}

Status DecimalBuilder::Append(int64_t unscaled_value) {
  const int32_t width = byte_width();
  if (width == 4 && (unscaled_value < INT32_MIN || unscaled_value > INT32_MAX)) {
    return Status::Invalid("unscaled value " + std::to_string(unscaled_value) + " does not fit " +
                           TypeName(type_));
  }
  uint8_t bytes[32];
  std::memset(bytes, unscaled_value < 0 ? 0xFF : 0x00, sizeof(bytes));
  WriteInteger(bytes, unscaled_value, std::min(width, 8));
  return AppendBytes(bytes);
}

// ---- Variable-length binary -------------------------------------------------------------

template <typename OffsetType>
BaseBinaryBuilder<OffsetType>::BaseBinaryBuilder(TypePtr type, MemoryPool* pool)
    : ArrayBuilder(std::move(type), pool), offsets_(pool_), data_(pool_) {
  if constexpr (sizeof(OffsetType) == 4) {
    RequireType(type_ != nullptr && (type_->id == TypeId::kBinary || type_->id == TypeId::kUtf8),
                "binary or utf8");
  } else {
    RequireType(
        type_ != nullptr && (type_->id == TypeId::kLargeBinary || type_->id == TypeId::kLargeUtf8),
        "large_binary or large_utf8");
  }
}

template <typename OffsetType>
Status BaseBinaryBuilder<OffsetType>::Append(std::string_view value) {
  constexpr int64_t kMaxOffset = std::numeric_limits<OffsetType>::max();
  const auto size = static_cast<int64_t>(value.size());
  if (size > kMaxOffset - data_.length()) {
    return Status::Invalid("value data of " + std::to_string(data_.length() + size) +
                           " bytes overflows the offsets of " + TypeName(type_));
  }
  FERRY_RETURN_NOT_OK(offsets_.Reserve(1));
  FERRY_RETURN_NOT_OK(data_.Reserve(size));
  FERRY_RETURN_NOT_OK(AppendValidity(true));
  offsets_.UnsafeAppend(static_cast<OffsetType>(data_.length()));
  if (size > 0) data_.UnsafeAppend(value.data(), size);
  return Status::OK();
}

template <typename OffsetType>
Status BaseBinaryBuilder<OffsetType>::AppendValues(const std::vector<std::string>& values) {
  FERRY_RETURN_NOT_OK(Reserve(static_cast<int64_t>(values.size())));
  for (const std::string& value : values) FERRY_RETURN_NOT_OK(Append(value));
  return Status::OK();
}

template <typename OffsetType>
Status BaseBinaryBuilder<OffsetType>::AppendSlots(bool valid, int64_t count) {
  return AppendEmptyElements(offsets_, data_.length(), valid, count);
}

template <typename OffsetType>
Status BaseBinaryBuilder<OffsetType>::Reserve(int64_t additional) {
  FERRY_RETURN_NOT_OK(ArrayBuilder::Reserve(additional));
  return offsets_.Reserve(additional);
}

template <typename OffsetType>
void BaseBinaryBuilder<OffsetType>::Reset() {
  ArrayBuilder::Reset();
  offsets_.Reset();
  data_.Reset();
}

template <typename OffsetType>
std::string_view BaseBinaryBuilder<OffsetType>::value(int64_t i) const {
  const int64_t start = offsets_.value(i);
  const int64_t end = i + 1 < length_ ? int64_t{offsets_.value(i + 1)} : data_.length();
  return {reinterpret_cast<const char*>(data_.data()) + start, static_cast<size_t>(end - start)};
}

template <typename OffsetType>
Result<ArrayDataPtr> BaseBinaryBuilder<OffsetType>::FinishInternal() {
  FERRY_RETURN_NOT_OK(offsets_.Append(static_cast<OffsetType>(data_.length())));
  auto data = NewArrayData(type_, length_, null_count_);
  FERRY_ASSIGN_OR_RAISE(BufferPtr validity, FinishValidity());
  FERRY_ASSIGN_OR_RAISE(BufferPtr offsets, offsets_.Finish());
  FERRY_ASSIGN_OR_RAISE(BufferPtr values, data_.Finish());
  data->buffers = {std::move(validity), std::move(offsets), std::move(values)};
  return ArrayDataPtr(std::move(data));
}

template class BaseBinaryBuilder<int32_t>;
template class BaseBinaryBuilder<int64_t>;

BinaryBuilder::BinaryBuilder(TypePtr type, MemoryPool* pool)
    : BaseBinaryBuilder<int32_t>(std::move(type), pool) {}

LargeBinaryBuilder::LargeBinaryBuilder(TypePtr type, MemoryPool* pool)
    : BaseBinaryBuilder<int64_t>(std::move(type), pool) {}

// ---- Binary views -----------------------------------------------------------------------

BinaryViewBuilder::BinaryViewBuilder(TypePtr type, MemoryPool* pool, int64_t block_size)
    : ArrayBuilder(std::move(type), pool),
      block_size_(std::clamp<int64_t>(block_size, 1, INT32_MAX)),
      views_(pool_),
      current_block_(pool_) {
  RequireType(
      type_ != nullptr && (type_->id == TypeId::kBinaryView || type_->id == TypeId::kUtf8View),
      "binary_view or utf8_view");
}

Status BinaryViewBuilder::Append(std::string_view value) {
  const auto size = static_cast<int64_t>(value.size());
  if (size > INT32_MAX) {
    return Status::Invalid("a view value holds at most 2147483647 bytes, got " +
                           std::to_string(size));
  }
  uint8_t view[16] = {};
  const auto length32 = static_cast<int32_t>(size);
  std::memcpy(view, &length32, 4);
  FERRY_RETURN_NOT_OK(views_.Reserve(16));
  if (size <= kMaxInlineSize) {
    if (size > 0) std::memcpy(view + 4, value.data(), static_cast<size_t>(size));
    FERRY_RETURN_NOT_OK(AppendValidity(true));
    views_.UnsafeAppend(view, 16);
    return Status::OK();
  }
  if (current_block_.length() > 0 && current_block_.length() + size > block_size_) {
    FERRY_ASSIGN_OR_RAISE(BufferPtr full_block, current_block_.Finish());
    finished_blocks_.push_back(std::move(full_block));
  }
  if (finished_blocks_.size() >= static_cast<size_t>(INT32_MAX)) {
    return Status::Invalid("too many data buffers for a view array");
  }
  FERRY_RETURN_NOT_OK(current_block_.Reserve(size));
  const auto buffer_index = static_cast<int32_t>(finished_blocks_.size());
  const auto offset = static_cast<int32_t>(current_block_.length());
  std::memcpy(view + 4, value.data(), 4);
  std::memcpy(view + 8, &buffer_index, 4);
  std::memcpy(view + 12, &offset, 4);
  FERRY_RETURN_NOT_OK(AppendValidity(true));
  current_block_.UnsafeAppend(value.data(), size);
  views_.UnsafeAppend(view, 16);
  return Status::OK();
}

Status BinaryViewBuilder::AppendSlots(bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  FERRY_ASSIGN_OR_RAISE(int64_t bytes, BytesFor(count, 16));
  FERRY_RETURN_NOT_OK(views_.Reserve(bytes));
  FERRY_RETURN_NOT_OK(AppendValidity(valid, count));
  return views_.AppendZeros(bytes);
}

Status BinaryViewBuilder::Reserve(int64_t additional) {
  FERRY_RETURN_NOT_OK(ArrayBuilder::Reserve(additional));
  FERRY_ASSIGN_OR_RAISE(int64_t bytes, BytesFor(additional, 16));
  return views_.Reserve(bytes);
}

void BinaryViewBuilder::Reset() {
  ArrayBuilder::Reset();
  views_.Reset();
  current_block_.Reset();
  finished_blocks_.clear();
}

int64_t BinaryViewBuilder::num_data_buffers() const {
  return static_cast<int64_t>(finished_blocks_.size()) + (current_block_.length() > 0 ? 1 : 0);
}

Result<ArrayDataPtr> BinaryViewBuilder::FinishInternal() {
  auto data = NewArrayData(type_, length_, null_count_);
  FERRY_ASSIGN_OR_RAISE(BufferPtr validity, FinishValidity());
  FERRY_ASSIGN_OR_RAISE(BufferPtr views, views_.Finish());
  data->buffers = {std::move(validity), std::move(views)};
  for (auto& block : finished_blocks_) data->buffers.push_back(std::move(block));
  finished_blocks_.clear();
  if (current_block_.length() > 0) {
    FERRY_ASSIGN_OR_RAISE(BufferPtr last_block, current_block_.Finish());
    data->buffers.push_back(std::move(last_block));
  }
  return ArrayDataPtr(std::move(data));
}

// ---- Lists ---------------------------------------------------------------------------------

template <typename OffsetType>
BaseListBuilder<OffsetType>::BaseListBuilder(TypePtr type, MemoryPool* pool)
    : ArrayBuilder(std::move(type), pool), offsets_(pool_) {
  InitSingleChild(sizeof(OffsetType) == 4 ? TypeId::kList : TypeId::kLargeList);
}

template <typename OffsetType>
Status BaseListBuilder<OffsetType>::AppendSlots(bool valid, int64_t count) {
  return AppendEmptyElements(offsets_, value_builder()->length(), valid, count);
}

template <typename OffsetType>
Status BaseListBuilder<OffsetType>::Append() {
  return AppendSlots(true, 1);
}

template <typename OffsetType>
Status BaseListBuilder<OffsetType>::Reserve(int64_t additional) {
  FERRY_RETURN_NOT_OK(ArrayBuilder::Reserve(additional));
  return offsets_.Reserve(additional);
}

template <typename OffsetType>
void BaseListBuilder<OffsetType>::Reset() {
  ArrayBuilder::Reset();
  offsets_.Reset();
}

template <typename OffsetType>
Result<BufferPtr> BaseListBuilder<OffsetType>::FinishOffsets() {
  const int64_t child_length = value_builder()->length();
  FERRY_RETURN_NOT_OK(CheckChildFitsOffsets<OffsetType>(child_length, type_));
  FERRY_RETURN_NOT_OK(offsets_.Append(static_cast<OffsetType>(child_length)));
  return offsets_.Finish();
}

template <typename OffsetType>
Result<ArrayDataPtr> BaseListBuilder<OffsetType>::FinishInternal() {
  auto data = NewArrayData(type_, length_, null_count_);
  FERRY_ASSIGN_OR_RAISE(BufferPtr offsets, FinishOffsets());
  FERRY_ASSIGN_OR_RAISE(BufferPtr validity, FinishValidity());
  FERRY_ASSIGN_OR_RAISE(data->children, FinishChildren());
  data->buffers = {std::move(validity), std::move(offsets)};
  return ArrayDataPtr(std::move(data));
}

template class BaseListBuilder<int32_t>;
template class BaseListBuilder<int64_t>;

// ---- List views -------------------------------------------------------------------------

template <typename OffsetType>
BaseListViewBuilder<OffsetType>::BaseListViewBuilder(TypePtr type, MemoryPool* pool)
    : ArrayBuilder(std::move(type), pool), offsets_(pool_), sizes_(pool_) {
  InitSingleChild(sizeof(OffsetType) == 4 ? TypeId::kListView : TypeId::kLargeListView);
}

template <typename OffsetType>
Status BaseListViewBuilder<OffsetType>::CloseOpenElement() {
  if (!element_open_) return Status::OK();
  const int64_t child_length = value_builder()->length();
  FERRY_RETURN_NOT_OK(CheckChildFitsOffsets<OffsetType>(child_length, type_));
  const int64_t start = offsets_.value(offsets_.length() - 1);
  // Room for this size was reserved when the element opened.
  sizes_.UnsafeAppend(static_cast<OffsetType>(child_length - start));
  element_open_ = false;
  return Status::OK();
}

template <typename OffsetType>
Status BaseListViewBuilder<OffsetType>::Append() {
  FERRY_RETURN_NOT_OK(CloseOpenElement());
  const int64_t child_length = value_builder()->length();
  FERRY_RETURN_NOT_OK(CheckChildFitsOffsets<OffsetType>(child_length, type_));
  FERRY_RETURN_NOT_OK(offsets_.Reserve(1));
  FERRY_RETURN_NOT_OK(sizes_.Reserve(1));
  FERRY_RETURN_NOT_OK(AppendValidity(true));
  offsets_.UnsafeAppend(static_cast<OffsetType>(child_length));
  element_open_ = true;
  return Status::OK();
}

template <typename OffsetType>
Status BaseListViewBuilder<OffsetType>::AppendView(int64_t offset, int64_t size) {
  constexpr int64_t kMax = std::numeric_limits<OffsetType>::max();
  if (offset < 0 || size < 0 || size > kMax - offset) {
    return Status::Invalid("list view offset " + std::to_string(offset) + " and size " +
                           std::to_string(size) + " are out of range for " + TypeName(type_));
  }
  FERRY_RETURN_NOT_OK(CloseOpenElement());
  FERRY_RETURN_NOT_OK(offsets_.Reserve(1));
  FERRY_RETURN_NOT_OK(sizes_.Reserve(1));
  FERRY_RETURN_NOT_OK(AppendValidity(true));
  offsets_.UnsafeAppend(static_cast<OffsetType>(offset));
  sizes_.UnsafeAppend(static_cast<OffsetType>(size));
  return Status::OK();
}

template <typename OffsetType>
Status BaseListViewBuilder<OffsetType>::AppendSlots(bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  FERRY_RETURN_NOT_OK(CloseOpenElement());
  FERRY_RETURN_NOT_OK(offsets_.Reserve(count));
  FERRY_RETURN_NOT_OK(sizes_.Reserve(count));
  FERRY_RETURN_NOT_OK(AppendValidity(valid, count));
  FERRY_RETURN_NOT_OK(offsets_.AppendCopies(0, count));
  return sizes_.AppendCopies(0, count);
}

template <typename OffsetType>
Status BaseListViewBuilder<OffsetType>::Reserve(int64_t additional) {
  FERRY_RETURN_NOT_OK(ArrayBuilder::Reserve(additional));
  FERRY_RETURN_NOT_OK(offsets_.Reserve(additional));
  return sizes_.Reserve(additional);
}

template <typename OffsetType>
void BaseListViewBuilder<OffsetType>::Reset() {
  ArrayBuilder::Reset();
  offsets_.Reset();
  sizes_.Reset();
  element_open_ = false;
}

template <typename OffsetType>
Result<ArrayDataPtr> BaseListViewBuilder<OffsetType>::FinishInternal() {
  FERRY_RETURN_NOT_OK(CloseOpenElement());
  const int64_t child_length = value_builder()->length();
  for (int64_t i = 0; i < length_; ++i) {
    const int64_t offset = offsets_.value(i);
    const int64_t size = sizes_.value(i);
    if (offset + size > child_length) {
      return Status::Invalid(TypeName(type_) + " element " + std::to_string(i) + ": offset " +
                             std::to_string(offset) + " + size " + std::to_string(size) +
                             " exceeds the child length " + std::to_string(child_length));
    }
  }
  auto data = NewArrayData(type_, length_, null_count_);
  FERRY_ASSIGN_OR_RAISE(BufferPtr validity, FinishValidity());
  FERRY_ASSIGN_OR_RAISE(BufferPtr offsets, offsets_.Finish());
  FERRY_ASSIGN_OR_RAISE(BufferPtr sizes, sizes_.Finish());
  FERRY_ASSIGN_OR_RAISE(data->children, FinishChildren());
  data->buffers = {std::move(validity), std::move(offsets), std::move(sizes)};
  return ArrayDataPtr(std::move(data));
}

template class BaseListViewBuilder<int32_t>;
template class BaseListViewBuilder<int64_t>;

// ---- Fixed-size lists ---------------------------------------------------------------------

FixedSizeListBuilder::FixedSizeListBuilder(TypePtr type, MemoryPool* pool)
    : ArrayBuilder(std::move(type), pool) {
  RequireType(type_ != nullptr && type_->id == TypeId::kFixedSizeList &&
                  type_->children.size() == 1 && type_->list_size >= 0,
              "fixed_size_list");
  if (init_status_.ok()) {
    list_size_ = type_->list_size;
    MakeChildren(type_->children);
  } else {
    children_.push_back(std::make_unique<NullBuilder>(pool_));
  }
}

Status FixedSizeListBuilder::Append() { return AppendValidity(true); }

Status FixedSizeListBuilder::AppendSlots(bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  FERRY_ASSIGN_OR_RAISE(int64_t child_count, BytesFor(count, list_size()));
  FERRY_RETURN_NOT_OK(value_builder()->AppendEmptyValues(child_count));
  return AppendValidity(valid, count);
}

Result<ArrayDataPtr> FixedSizeListBuilder::FinishInternal() {
  const int64_t expected = length_ * list_size();
  if (value_builder()->length() != expected) {
    return Status::Invalid(TypeName(type_) + " of " + std::to_string(length_) + " lists needs " +
                           std::to_string(expected) + " child values, got " +
                           std::to_string(value_builder()->length()));
  }
  auto data = NewArrayData(type_, length_, null_count_);
  FERRY_ASSIGN_OR_RAISE(BufferPtr validity, FinishValidity());
  FERRY_ASSIGN_OR_RAISE(data->children, FinishChildren());
  data->buffers = {std::move(validity)};
  return ArrayDataPtr(std::move(data));
}

// ---- Structs -------------------------------------------------------------------------------

StructBuilder::StructBuilder(TypePtr type, MemoryPool* pool) : ArrayBuilder(std::move(type), pool) {
  RequireType(type_ != nullptr && type_->id == TypeId::kStruct, "struct");
  if (init_status_.ok()) MakeChildren(type_->children);
}

Status StructBuilder::Append() { return AppendValidity(true); }

Status StructBuilder::AppendSlots(bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  for (auto& field_builder : children_)
    FERRY_RETURN_NOT_OK(field_builder->AppendEmptyValues(count));
  return AppendValidity(valid, count);
}

Result<ArrayDataPtr> StructBuilder::FinishInternal() {
  for (size_t field_index = 0; field_index < children_.size(); ++field_index) {
    const int64_t field_length = children_[field_index]->length();
    if (field_length != length_) {
      return Status::Invalid("struct field '" + type_->children[field_index].name + "' has " +
                             std::to_string(field_length) + " values, the struct " +
                             std::to_string(length_));
    }
  }
  auto data = NewArrayData(type_, length_, null_count_);
  FERRY_ASSIGN_OR_RAISE(BufferPtr validity, FinishValidity());
  FERRY_ASSIGN_OR_RAISE(data->children, FinishChildren());
  data->buffers = {std::move(validity)};
  return ArrayDataPtr(std::move(data));
}

// ---- Maps ----------------------------------------------------------------------------------

MapBuilder::MapBuilder(TypePtr type, MemoryPool* pool)
    : ArrayBuilder(std::move(type), pool), offsets_(pool_) {
  RequireType(type_ != nullptr && type_->id == TypeId::kMap && type_->children.size() == 1 &&
                  type_->children[0].type != nullptr &&
                  type_->children[0].type->id == TypeId::kStruct &&
                  type_->children[0].type->children.size() == 2,
              "map (entries: struct of key and value)");
  if (init_status_.ok()) {
    MakeChildren(type_->children[0].type->children);
  } else {
    children_.push_back(std::make_unique<NullBuilder>(pool_));
    children_.push_back(std::make_unique<NullBuilder>(pool_));
  }
}

Status MapBuilder::Append() { return AppendSlots(true, 1); }

Status MapBuilder::AppendSlots(bool valid, int64_t count) {
  return AppendEmptyElements(offsets_, key_builder()->length(), valid, count);
}

Status MapBuilder::Reserve(int64_t additional) {
  FERRY_RETURN_NOT_OK(ArrayBuilder::Reserve(additional));
  return offsets_.Reserve(additional);
}

void MapBuilder::Reset() {
  ArrayBuilder::Reset();
  offsets_.Reset();
}

Result<ArrayDataPtr> MapBuilder::FinishInternal() {
  const int64_t num_keys = key_builder()->length();
  const int64_t num_items = item_builder()->length();
  if (num_keys != num_items) {
    return Status::Invalid("map has " + std::to_string(num_keys) + " keys but " +
                           std::to_string(num_items) + " items");
  }
  FERRY_RETURN_NOT_OK(CheckChildFitsOffsets<int32_t>(num_keys, type_));
  FERRY_RETURN_NOT_OK(offsets_.Append(static_cast<int32_t>(num_keys)));
  auto data = NewArrayData(type_, length_, null_count_);
  FERRY_ASSIGN_OR_RAISE(BufferPtr validity, FinishValidity());
  FERRY_ASSIGN_OR_RAISE(BufferPtr offsets, offsets_.Finish());
  FERRY_ASSIGN_OR_RAISE(std::vector<ArrayDataPtr> key_and_item, FinishChildren());
  const int64_t null_keys = key_and_item[0]->GetNullCount();
  if (null_keys != 0) {
    return Status::Invalid("map keys must not be null, found " + std::to_string(null_keys) +
                           " null keys");
  }
  auto entries = NewArrayData(type_->children[0].type, num_keys, 0);
  entries->buffers = {nullptr};
  entries->children = std::move(key_and_item);
  data->buffers = {std::move(validity), std::move(offsets)};
  data->children = {ArrayDataPtr(std::move(entries))};
  return ArrayDataPtr(std::move(data));
}

// ---- Unions --------------------------------------------------------------------------------

UnionBuilder::UnionBuilder(TypePtr type, MemoryPool* pool, TypeId expected_id)
    : ArrayBuilder(std::move(type), pool),
      dense_(expected_id == TypeId::kDenseUnion),
      type_ids_(pool_),
      offsets_(pool_) {
  std::fill(std::begin(child_index_for_code_), std::end(child_index_for_code_), -1);
  RequireType(type_ != nullptr && type_->id == expected_id &&
                  type_->type_codes.size() == type_->children.size(),
              TypeIdName(expected_id));
  if (!init_status_.ok()) return;
  for (size_t child_index = 0; child_index < type_->type_codes.size(); ++child_index) {
    const int8_t code = type_->type_codes[child_index];
    if (code < 0 || child_index_for_code_[code] != -1) {
      init_status_ =
          Status::TypeError("union type codes must be distinct and in 0..127, got " +
                            std::to_string(code) + " for child " + std::to_string(child_index));
      // No children were built: every code must read as undeclared.
      std::fill(std::begin(child_index_for_code_), std::end(child_index_for_code_), -1);
      return;
    }
    child_index_for_code_[code] = static_cast<int>(child_index);
  }
  MakeChildren(type_->children);
}

ArrayBuilder* UnionBuilder::child_for_code(int8_t type_code) const {
  if (type_code < 0 || child_index_for_code_[type_code] < 0) return nullptr;
  return child(child_index_for_code_[type_code]);
}

Status UnionBuilder::Append(int8_t type_code) {
  if (type_code < 0 || child_index_for_code_[type_code] < 0) {
    return Status::Invalid(TypeName(type_) + " has no type code " + std::to_string(type_code));
  }
  const int child_index = child_index_for_code_[type_code];
  FERRY_RETURN_NOT_OK(type_ids_.Reserve(1));
  if (dense_) {
    const int64_t child_offset = child(child_index)->length();
    if (child_offset > INT32_MAX) {
      return Status::Invalid("dense union child of " + std::to_string(child_offset) +
                             " values overflows int32 offsets");
    }
    FERRY_RETURN_NOT_OK(offsets_.Append(static_cast<int32_t>(child_offset)));
  } else {
    for (int other = 0; other < num_children(); ++other) {
      if (other != child_index) FERRY_RETURN_NOT_OK(child(other)->AppendEmptyValue());
    }
  }
  type_ids_.UnsafeAppend(type_code);
  ++length_;
  return Status::OK();
}

// Valid slots are empty values of the first child, null slots its nulls.
Status UnionBuilder::AppendSlots(bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  if (count == 0) return Status::OK();
  if (num_children() == 0) {
    return Status::Invalid(std::string("a union without children cannot hold ") +
                           (valid ? "values" : "nulls"));
  }
  ArrayBuilder* first = child(0);
  FERRY_RETURN_NOT_OK(type_ids_.Reserve(count));
  if (dense_) {
    if (first->length() + count > INT32_MAX) {
      return Status::Invalid("dense union child overflows int32 offsets");
    }
    FERRY_RETURN_NOT_OK(offsets_.Reserve(count));
  }
  const int64_t first_offset = first->length();
  FERRY_RETURN_NOT_OK(valid ? first->AppendEmptyValues(count) : first->AppendNulls(count));
  if (dense_) {
    for (int64_t i = 0; i < count; ++i) {
      offsets_.UnsafeAppend(static_cast<int32_t>(first_offset + i));
    }
  } else {
    for (int other = 1; other < num_children(); ++other) {
      FERRY_RETURN_NOT_OK(child(other)->AppendEmptyValues(count));
    }
  }
  FERRY_RETURN_NOT_OK(type_ids_.AppendCopies(type_->type_codes[0], count));
  length_ += count;
  return Status::OK();
}

Status UnionBuilder::Reserve(int64_t additional) {
  if (additional < 0) return Status::Invalid("cannot reserve a negative count");
  FERRY_RETURN_NOT_OK(type_ids_.Reserve(additional));
  return dense_ ? offsets_.Reserve(additional) : Status::OK();
}

void UnionBuilder::Reset() {
  ArrayBuilder::Reset();
  type_ids_.Reset();
  offsets_.Reset();
}

Result<ArrayDataPtr> UnionBuilder::FinishInternal() {
  if (dense_) {
    for (int64_t i = 0; i < length_; ++i) {
      const int child_index = child_index_for_code_[type_ids_.value(i)];
      const int32_t child_offset = offsets_.value(i);
      if (child_offset >= child(child_index)->length()) {
        return Status::Invalid("dense union slot " + std::to_string(i) + " refers to value " +
                               std::to_string(child_offset) + " of child '" +
                               type_->children[child_index].name + "', which has " +
                               std::to_string(child(child_index)->length()) + " values");
      }
    }
  } else {
    for (int child_index = 0; child_index < num_children(); ++child_index) {
      if (child(child_index)->length() != length_) {
        return Status::Invalid("sparse union child '" + type_->children[child_index].name +
                               "' has " + std::to_string(child(child_index)->length()) +
                               " values, the union " + std::to_string(length_));
      }
    }
  }
  auto data = NewArrayData(type_, length_, 0);
  FERRY_ASSIGN_OR_RAISE(BufferPtr type_ids, type_ids_.Finish());
  data->buffers = {std::move(type_ids)};
  if (dense_) {
    FERRY_ASSIGN_OR_RAISE(BufferPtr offsets, offsets_.Finish());
    data->buffers.push_back(std::move(offsets));
  }
  FERRY_ASSIGN_OR_RAISE(data->children, FinishChildren());
  return ArrayDataPtr(std::move(data));
}

// ---- Run-end encoded ---------------------------------------------------------------------

RunEndEncodedBuilder::RunEndEncodedBuilder(TypePtr type, MemoryPool* pool)
    : ArrayBuilder(std::move(type), pool), run_ends_(pool_) {
  const bool shape_ok = type_ != nullptr && type_->id == TypeId::kRunEndEncoded &&
                        type_->children.size() == 2 && type_->children[0].type != nullptr;
  const TypeId run_end_id = shape_ok ? type_->children[0].type->id : TypeId::kNull;
  RequireType(shape_ok && (run_end_id == TypeId::kInt16 || run_end_id == TypeId::kInt32 ||
                           run_end_id == TypeId::kInt64),
              "run_end_encoded (run ends int16, int32 or int64)");
  if (init_status_.ok()) {
    run_end_width_ = type_->children[0].type->fixed_width();
    run_end_max_ = IntegerMax(run_end_id);
    MakeChildren({type_->children[1]});
  } else {
    children_.push_back(std::make_unique<NullBuilder>(pool_));
  }
}

Status RunEndEncodedBuilder::ValueBuilderMismatch() const {
  return Status::TypeError("the values of " + TypeName(type_) +
                           " are not built by a builder of that C type");
}

Status RunEndEncodedBuilder::CheckRunLength(int64_t run_length) const {
  if (run_length < 1) {
    return Status::Invalid("a run length must be at least 1, got " + std::to_string(run_length));
  }
  if (run_length > run_end_max_ - length_) {
    return Status::Invalid("run end " + std::to_string(length_) + " + " +
                           std::to_string(run_length) + " exceeds the range of the run ends of " +
                           TypeName(type_));
  }
  return Status::OK();
}

Status RunEndEncodedBuilder::CheckValuesInStep() const {
  if (value_builder()->length() != num_runs()) {
    return Status::Invalid(
        "run-end encoded values out of step: " + std::to_string(value_builder()->length()) +
        " values for " + std::to_string(num_runs()) + " runs");
  }
  return Status::OK();
}

void RunEndEncodedBuilder::PushRunEnd(int64_t run_length) {
  length_ += run_length;
  uint8_t bytes[8];
  WriteInteger(bytes, length_, run_end_width_);
  run_ends_.UnsafeAppend(bytes, run_end_width_);
}

Status RunEndEncodedBuilder::ExtendLastRun(int64_t run_length) {
  length_ += run_length;
  WriteInteger(run_ends_.mutable_data() + run_ends_.length() - run_end_width_, length_,
               run_end_width_);
  return Status::OK();
}

Status RunEndEncodedBuilder::AppendRun(int64_t run_length) {
  FERRY_RETURN_NOT_OK(CheckRunLength(run_length));
  if (value_builder()->length() != num_runs() + 1) {
    return Status::Invalid(
        "AppendRun needs exactly one value appended to value_builder() since the previous run, "
        "found " +
        std::to_string(value_builder()->length() - num_runs()));
  }
  FERRY_RETURN_NOT_OK(run_ends_.Reserve(run_end_width_));
  PushRunEnd(run_length);
  last_run_null_ = false;
  last_run_key_.reset();
  return Status::OK();
}

Status RunEndEncodedBuilder::AppendStringRun(std::string_view value, int64_t run_length) {
  if (!IsBinaryLike(value_builder()->type()->id)) return ValueBuilderMismatch();
  return AppendRunWithKey(std::string(value), run_length,
                          [&] { return AppendStringValue(value_builder(), value); });
}

// One run of `count` slots; a null run extends a preceding null run when merging.
Status RunEndEncodedBuilder::AppendSlots(bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  if (count == 0) return Status::OK();
  FERRY_RETURN_NOT_OK(CheckRunLength(count));
  if (!valid && merge_equal_runs_ && last_run_null_) return ExtendLastRun(count);
  FERRY_RETURN_NOT_OK(CheckValuesInStep());
  FERRY_RETURN_NOT_OK(run_ends_.Reserve(run_end_width_));
  FERRY_RETURN_NOT_OK(valid ? value_builder()->AppendEmptyValue() : value_builder()->AppendNull());
  PushRunEnd(count);
  last_run_null_ = !valid;
  last_run_key_.reset();
  return Status::OK();
}

void RunEndEncodedBuilder::Reset() {
  ArrayBuilder::Reset();
  run_ends_.Reset();
  last_run_null_ = false;
  last_run_key_.reset();
}

Result<ArrayDataPtr> RunEndEncodedBuilder::FinishInternal() {
  FERRY_RETURN_NOT_OK(CheckValuesInStep());
  auto run_ends = NewArrayData(type_->children[0].type, num_runs(), 0);
  FERRY_ASSIGN_OR_RAISE(BufferPtr run_end_values, run_ends_.Finish());
  run_ends->buffers = {nullptr, std::move(run_end_values)};
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr values, value_builder()->Finish());
  auto data = NewArrayData(type_, length_, 0);
  data->children = {ArrayDataPtr(std::move(run_ends)), std::move(values)};
  return ArrayDataPtr(std::move(data));
}

// ---- Dictionaries --------------------------------------------------------------------------

DictionaryBuilder::DictionaryBuilder(TypePtr type, MemoryPool* pool)
    : ArrayBuilder(std::move(type), pool), indices_(pool_) {
  const bool shape_ok = type_ != nullptr && type_->id == TypeId::kDictionary &&
                        type_->index_type != nullptr && type_->value_type != nullptr &&
                        IsIntegerType(type_->index_type->id);
  const TypeId value_id = shape_ok ? type_->value_type->id : TypeId::kNull;
  RequireType(shape_ok && (IsBinaryLike(value_id) || IsIntegerType(value_id)),
              "dictionary (integer indices; integer or binary-like values)");
  if (!init_status_.ok()) return;
  binary_values_ = IsBinaryLike(value_id);
  index_width_ = type_->index_type->fixed_width();
  max_index_ = IntegerMax(type_->index_type->id);
}

Status DictionaryBuilder::Append(std::string_view value) {
  FERRY_RETURN_NOT_OK(init_status_);
  if (!binary_values_) {
    return Status::TypeError("a dictionary of " + TypeName(type_->value_type) +
                             " takes integer values, not byte strings");
  }
  if (type_->value_type->id == TypeId::kFixedSizeBinary &&
      static_cast<int64_t>(value.size()) != type_->value_type->byte_width) {
    return Status::Invalid(TypeName(type_->value_type) + " values must have " +
                           std::to_string(type_->value_type->byte_width) + " bytes, got " +
                           std::to_string(value.size()));
  }
  return AppendKey(value);
}

Status DictionaryBuilder::Append(int64_t value) {
  FERRY_RETURN_NOT_OK(init_status_);
  if (binary_values_) {
    return Status::TypeError("a dictionary of " + TypeName(type_->value_type) +
                             " takes byte strings, not integers");
  }
  const TypeId value_id = type_->value_type->id;
  if (value < IntegerMin(value_id) || value > IntegerMax(value_id)) {
    return Status::Invalid("value " + std::to_string(value) + " does not fit the dictionary's " +
                           TypeName(type_->value_type) + " values");
  }
  char bytes[8];
  const int32_t width = type_->value_type->fixed_width();
  std::memcpy(bytes, &value, static_cast<size_t>(width));
  return AppendKey(std::string_view(bytes, static_cast<size_t>(width)));
}

Status DictionaryBuilder::AppendKey(std::string_view key) {
  std::string owned_key(key);
  auto found = memo_.find(owned_key);
  if (found != memo_.end()) return AppendIndex(found->second, true, 1);
  const int64_t index = dictionary_length();
  if (index > max_index_) {
    return Status::Invalid("a dictionary of " + std::to_string(index + 1) +
                           " values cannot be indexed by " + TypeName(type_->index_type));
  }
  FERRY_RETURN_NOT_OK(AppendIndex(index, true, 1));
  memo_.emplace(owned_key, index);
  memo_values_.push_back(std::move(owned_key));
  return Status::OK();
}

Status DictionaryBuilder::AppendIndex(int64_t index, bool valid, int64_t count) {
  FERRY_RETURN_NOT_OK(CheckCount(count));
  FERRY_ASSIGN_OR_RAISE(int64_t bytes, BytesFor(count, index_width_));
  FERRY_RETURN_NOT_OK(indices_.Reserve(bytes));
  FERRY_RETURN_NOT_OK(AppendValidity(valid, count));
  uint8_t encoded[8];
  WriteInteger(encoded, index, index_width_);
  for (int64_t i = 0; i < count; ++i) indices_.UnsafeAppend(encoded, index_width_);
  return Status::OK();
}

Status DictionaryBuilder::AppendNulls(int64_t count) { return AppendIndex(0, false, count); }

Status DictionaryBuilder::AppendEmptyValues(int64_t count) {
  FERRY_RETURN_NOT_OK(init_status_);
  FERRY_RETURN_NOT_OK(CheckCount(count));
  if (count == 0) return Status::OK();
  std::string empty_key;
  if (!binary_values_) {
    empty_key.assign(static_cast<size_t>(type_->value_type->fixed_width()), '\0');
  } else if (type_->value_type->id == TypeId::kFixedSizeBinary) {
    empty_key.assign(static_cast<size_t>(type_->value_type->byte_width), '\0');
  }
  FERRY_RETURN_NOT_OK(AppendKey(empty_key));
  return count > 1 ? AppendIndex(memo_.at(empty_key), true, count - 1) : Status::OK();
}

Status DictionaryBuilder::Reserve(int64_t additional) {
  FERRY_RETURN_NOT_OK(ArrayBuilder::Reserve(additional));
  FERRY_ASSIGN_OR_RAISE(int64_t bytes, BytesFor(additional, index_width_));
  return indices_.Reserve(bytes);
}

void DictionaryBuilder::Reset() {
  ArrayBuilder::Reset();
  indices_.Reset();
  memo_.clear();
  memo_values_.clear();
}

Result<ArrayDataPtr> DictionaryBuilder::FinishInternal() {
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<ArrayBuilder> values,
                        MakeBuilder(type_->value_type, pool_));
  FERRY_RETURN_NOT_OK(values->Reserve(dictionary_length()));
  for (const std::string& key : memo_values_) {
    if (binary_values_) {
      FERRY_RETURN_NOT_OK(AppendStringValue(values.get(), key));
    } else {
      auto* fixed = static_cast<FixedBytesBuilder*>(values.get());
      FERRY_RETURN_NOT_OK(fixed->AppendBytes(reinterpret_cast<const uint8_t*>(key.data())));
    }
  }
  auto data = NewArrayData(type_, length_, null_count_);
  FERRY_ASSIGN_OR_RAISE(data->dictionary, values->Finish());
  return FinishWithValues(std::move(data), FinishValidity(), indices_);
}

// ---- MakeBuilder ---------------------------------------------------------------------------

namespace {

std::unique_ptr<ArrayBuilder> NewBuilder(const TypePtr& type, MemoryPool* pool) {
  switch (type->id) {
    case TypeId::kNull:
      return std::make_unique<NullBuilder>(pool);
    case TypeId::kBool:
      return std::make_unique<BooleanBuilder>(pool);
    case TypeId::kInt8:
      return std::make_unique<FixedWidthBuilder<int8_t>>(type, pool);
    case TypeId::kUInt8:
      return std::make_unique<FixedWidthBuilder<uint8_t>>(type, pool);
    case TypeId::kInt16:
      return std::make_unique<FixedWidthBuilder<int16_t>>(type, pool);
    case TypeId::kUInt16:
    case TypeId::kHalfFloat:
      return std::make_unique<FixedWidthBuilder<uint16_t>>(type, pool);
    case TypeId::kInt32:
    case TypeId::kDate32:
    case TypeId::kTime32:
    case TypeId::kIntervalMonths:
      return std::make_unique<FixedWidthBuilder<int32_t>>(type, pool);
    case TypeId::kUInt32:
      return std::make_unique<FixedWidthBuilder<uint32_t>>(type, pool);
    case TypeId::kInt64:
    case TypeId::kDate64:
    case TypeId::kTime64:
    case TypeId::kTimestamp:
    case TypeId::kDuration:
      return std::make_unique<FixedWidthBuilder<int64_t>>(type, pool);
    case TypeId::kUInt64:
      return std::make_unique<FixedWidthBuilder<uint64_t>>(type, pool);
    case TypeId::kFloat:
      return std::make_unique<FixedWidthBuilder<float>>(type, pool);
    case TypeId::kDouble:
      return std::make_unique<FixedWidthBuilder<double>>(type, pool);
    case TypeId::kIntervalDayTime:
      return std::make_unique<FixedWidthBuilder<DayTimeInterval>>(type, pool);
    case TypeId::kIntervalMonthDayNano:
      return std::make_unique<FixedWidthBuilder<MonthDayNanoInterval>>(type, pool);
    case TypeId::kDecimal32:
    case TypeId::kDecimal64:
    case TypeId::kDecimal128:
    case TypeId::kDecimal256:
      return std::make_unique<DecimalBuilder>(type, pool);
    case TypeId::kBinary:
    case TypeId::kUtf8:
      return std::make_unique<BinaryBuilder>(type, pool);
    case TypeId::kLargeBinary:
    case TypeId::kLargeUtf8:
      return std::make_unique<LargeBinaryBuilder>(type, pool);
    case TypeId::kBinaryView:
    case TypeId::kUtf8View:
      return std::make_unique<BinaryViewBuilder>(type, pool);
    case TypeId::kFixedSizeBinary:
      return std::make_unique<FixedSizeBinaryBuilder>(type, pool);
    case TypeId::kList:
      return std::make_unique<ListBuilder>(type, pool);
    case TypeId::kLargeList:
      return std::make_unique<LargeListBuilder>(type, pool);
    case TypeId::kListView:
      return std::make_unique<ListViewBuilder>(type, pool);
    case TypeId::kLargeListView:
      return std::make_unique<LargeListViewBuilder>(type, pool);
    case TypeId::kFixedSizeList:
      return std::make_unique<FixedSizeListBuilder>(type, pool);
    case TypeId::kStruct:
      return std::make_unique<StructBuilder>(type, pool);
    case TypeId::kMap:
      return std::make_unique<MapBuilder>(type, pool);
    case TypeId::kDenseUnion:
      return std::make_unique<DenseUnionBuilder>(type, pool);
    case TypeId::kSparseUnion:
      return std::make_unique<SparseUnionBuilder>(type, pool);
    case TypeId::kRunEndEncoded:
      return std::make_unique<RunEndEncodedBuilder>(type, pool);
    case TypeId::kDictionary:
      return std::make_unique<DictionaryBuilder>(type, pool);
  }
  return nullptr;
}

}  // namespace

Result<std::unique_ptr<ArrayBuilder>> MakeBuilder(const TypePtr& type, MemoryPool* pool) {
  if (type == nullptr) return Status::TypeError("MakeBuilder needs a type, got none");
  if (pool == nullptr) pool = default_memory_pool();
  std::unique_ptr<ArrayBuilder> builder = NewBuilder(type, pool);
  if (builder == nullptr) {
    return Status::TypeError("no builder for type id " +
                             std::to_string(static_cast<int>(type->id)));
  }
  if (!builder->status().ok()) return builder->status();
  return builder;
}

// ---- Convenience ---------------------------------------------------------------------------

Result<ArrayDataPtr> MakeBooleanArray(const std::vector<std::optional<bool>>& values,
                                      MemoryPool* pool) {
  BooleanBuilder builder(pool);
  FERRY_RETURN_NOT_OK(builder.Reserve(static_cast<int64_t>(values.size())));
  for (const auto& value : values) FERRY_RETURN_NOT_OK(builder.AppendOptional(value));
  return builder.Finish();
}

Result<ArrayDataPtr> MakeStringArray(const TypePtr& type,
                                     const std::vector<std::optional<std::string>>& values,
                                     MemoryPool* pool) {
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<ArrayBuilder> builder, MakeBuilder(type, pool));
  if (!IsBinaryLike(type->id)) {
    return Status::TypeError("MakeStringArray needs a binary-like type, got " + TypeName(type));
  }
  FERRY_RETURN_NOT_OK(builder->Reserve(static_cast<int64_t>(values.size())));
  for (const auto& value : values) {
    if (value) {
      FERRY_RETURN_NOT_OK(AppendStringValue(builder.get(), *value));
    } else {
      FERRY_RETURN_NOT_OK(builder->AppendNull());
    }
  }
  return builder->Finish();
}

Result<ArrayDataPtr> MakeStructArray(const std::vector<std::string>& names,
                                     std::vector<ArrayDataPtr> children,
                                     const std::vector<bool>& validity, MemoryPool* pool) {
  if (names.size() != children.size()) {
    return Status::Invalid("MakeStructArray got " + std::to_string(names.size()) + " names for " +
                           std::to_string(children.size()) + " children");
  }
  int64_t length = children.empty() ? static_cast<int64_t>(validity.size()) : -1;
  std::vector<Field> fields;
  for (size_t child_index = 0; child_index < children.size(); ++child_index) {
    const ArrayDataPtr& child_data = children[child_index];
    if (child_data == nullptr || child_data->type == nullptr) {
      return Status::Invalid("struct field '" + names[child_index] + "' has no array");
    }
    if (length < 0) length = child_data->length;
    if (child_data->length != length) {
      return Status::Invalid("struct field '" + names[child_index] + "' has " +
                             std::to_string(child_data->length) + " values, field '" + names[0] +
                             "' " + std::to_string(length));
    }
    fields.push_back(field(names[child_index], child_data->type));
  }
  if (!validity.empty() && static_cast<int64_t>(validity.size()) != length) {
    return Status::Invalid("struct validity has " + std::to_string(validity.size()) +
                           " entries for " + std::to_string(length) + " rows");
  }
  auto data = NewArrayData(struct_(std::move(fields)), length, 0);
  data->buffers = {nullptr};
  const auto nulls = std::count(validity.begin(), validity.end(), false);
  if (nulls > 0) {
    BitmapBuilder bitmap(pool != nullptr ? pool : default_memory_pool());
    FERRY_RETURN_NOT_OK(bitmap.Reserve(length));
    for (bool valid : validity) FERRY_RETURN_NOT_OK(bitmap.Append(valid));
    FERRY_ASSIGN_OR_RAISE(data->buffers[0], bitmap.Finish());
    data->null_count = nulls;
  }
  data->children = std::move(children);
  return ArrayDataPtr(std::move(data));
}

Result<ArrayDataPtr> MakeArrayOfNulls(const TypePtr& type, int64_t length, MemoryPool* pool) {
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<ArrayBuilder> builder, MakeBuilder(type, pool));
  FERRY_RETURN_NOT_OK(builder->AppendNulls(length));
  return builder->Finish();
}

}  // namespace ferry
