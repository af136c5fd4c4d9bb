#include "ferry/exchange/validate.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "exchange/validate_internal.h"

namespace ferry {

namespace {

// Deeper trees are refused before any recursion, so a hostile schema cannot
// exhaust the stack of the validator (or of ValidateType).
constexpr int kMaxNestingDepth = 128;
constexpr int64_t kViewBytes = 16;
constexpr int32_t kMaxInlineViewLength = 12;
constexpr int64_t kViewPrefixBytes = 4;

template <typename... Parts>
std::string Concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// The root of ValidateStructural's paths when the caller names none.
ColumnPath RootPath(const std::string& path) {
  return ColumnPath::Root(path.empty() ? std::string_view("array") : std::string_view(path));
}

// Unaligned-safe read of element `index` of a buffer of T: imported buffers
// carry no alignment promise, and a misaligned typed load is undefined.
template <typename T>
T LoadAt(const uint8_t* base, int64_t index) {
  T value;
  std::memcpy(&value, base + index * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return value;
}

// Printable form of an integer of any width (int8_t would stream as a char).
template <typename T>
auto Printable(T value) {
  if constexpr (std::is_signed_v<T>) {
    return static_cast<int64_t>(value);
  } else {
    return static_cast<uint64_t>(value);
  }
}

bool TypesEqual(const TypePtr& left, const TypePtr& right) {
  if (left == right) return true;
  if (left == nullptr || right == nullptr) return false;
  return left->Equals(*right, /*check_metadata=*/false);
}

std::string TypeText(const TypePtr& type) { return type ? type->ToString() : "<no type>"; }

// Deepest chain of nested types (children, dictionary index and value types),
// measured without recursion.
int TypeNestingDepth(const DataType& root) {
  int deepest = 0;
  std::vector<std::pair<const DataType*, int>> pending = {{&root, 1}};
  while (!pending.empty()) {
    auto [type, depth] = pending.back();
    pending.pop_back();
    if (depth > deepest) deepest = depth;
    if (depth > kMaxNestingDepth) break;
    for (const Field& child : type->children) {
      if (child.type) pending.emplace_back(child.type.get(), depth + 1);
    }
    if (type->index_type) pending.emplace_back(type->index_type.get(), depth + 1);
    if (type->value_type) pending.emplace_back(type->value_type.get(), depth + 1);
  }
  return deepest;
}

// ---- UTF-8 ------------------------------------------------------------------

enum class Utf8Error {
  kNone,
  kInvalidLeadByte,
  kUnexpectedContinuation,
  kTruncated,
  kOverlong,
  kSurrogate,
  kAboveMaxCodePoint,
};

const char* Utf8ErrorText(Utf8Error error) {
  switch (error) {
    case Utf8Error::kNone:
      return "valid";
    case Utf8Error::kInvalidLeadByte:
      return "invalid byte (0xF8..0xFF never occur in UTF-8)";
    case Utf8Error::kUnexpectedContinuation:
      return "unexpected continuation byte";
    case Utf8Error::kTruncated:
      return "truncated multi-byte sequence";
    case Utf8Error::kOverlong:
      return "overlong encoding";
    case Utf8Error::kSurrogate:
      return "surrogate code point (U+D800..U+DFFF)";
    case Utf8Error::kAboveMaxCodePoint:
      return "code point above U+10FFFF";
  }
  return "invalid";
}

struct Utf8Result {
  Utf8Error error = Utf8Error::kNone;
  int64_t position = 0;  // byte offset of the offending sequence
};

bool IsContinuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

// Checks well-formed UTF-8 (RFC 3629): ASCII runs are skipped eight bytes at a
// time; each multi-byte sequence is checked against the tightest range of its
// second byte, which rules out overlongs, surrogates and code points past
// U+10FFFF without decoding.
Utf8Result CheckUtf8(const uint8_t* bytes, int64_t size) {
  constexpr uint64_t kHighBits = 0x8080808080808080ULL;
  int64_t i = 0;
  while (i < size) {
    if (size - i >= 8) {
      uint64_t word;
      std::memcpy(&word, bytes + i, sizeof(word));
      if ((word & kHighBits) == 0) {
        i += 8;
        continue;
      }
    }
    const uint8_t lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    int continuation_count = 0;
    uint8_t second_min = 0x80;
    uint8_t second_max = 0xBF;
    Utf8Error below_min = Utf8Error::kOverlong;
    Utf8Error above_max = Utf8Error::kSurrogate;
    if (lead < 0xC0) return {Utf8Error::kUnexpectedContinuation, i};
    if (lead < 0xC2) return {Utf8Error::kOverlong, i};
    if (lead < 0xE0) {
      continuation_count = 1;
    } else if (lead < 0xF0) {
      continuation_count = 2;
      if (lead == 0xE0) second_min = 0xA0;
      if (lead == 0xED) second_max = 0x9F;
    } else if (lead < 0xF5) {
      continuation_count = 3;
      if (lead == 0xF0) second_min = 0x90;
      if (lead == 0xF4) second_max = 0x8F;
      above_max = Utf8Error::kAboveMaxCodePoint;
    } else if (lead < 0xF8) {
      return {Utf8Error::kAboveMaxCodePoint, i};
    } else {
      return {Utf8Error::kInvalidLeadByte, i};
    }
    for (int k = 1; k <= continuation_count; ++k) {
      if (i + k >= size || !IsContinuation(bytes[i + k])) return {Utf8Error::kTruncated, i};
    }
    const uint8_t second = bytes[i + 1];
    if (second < second_min) return {below_min, i};
    if (second > second_max) return {above_max, i};
    i += continuation_count + 1;
  }
  return {};
}

// ---- Decimals -------------------------------------------------------------------

// decimal256 holds up to 76 digits; 10^76 < 2^255.
constexpr int32_t kMaxDecimalDigits = 76;

using Words256 = std::array<uint64_t, 4>;  // little-endian 64-bit words

// `value` * 10 + `add` on four words (no overflow below 10^77).
Words256 TimesTenPlus(const Words256& value, uint64_t add) {
  Words256 out{};
  unsigned __int128 carry = add;
  for (size_t limb = 0; limb < value.size(); ++limb) {
    const unsigned __int128 product = static_cast<unsigned __int128>(value[limb]) * 10 + carry;
    out[limb] = static_cast<uint64_t>(product);
    carry = product >> 64;
  }
  return out;
}

// 10^digits for digits in [0, 76].
const Words256& PowerOfTen(int32_t digits) {
  static const std::array<Words256, kMaxDecimalDigits + 1> kPowers = [] {
    std::array<Words256, kMaxDecimalDigits + 1> powers{};
    powers[0] = {1, 0, 0, 0};
    for (size_t index = 1; index < powers.size(); ++index) {
      powers[index] = TimesTenPlus(powers[index - 1], 0);
    }
    return powers;
  }();
  return kPowers[static_cast<size_t>(digits)];
}

// |value| of the signed integer in `width` little-endian bytes (4, 8, 16
// or 32, in `Limbs` 64-bit words: decimal32 and decimal64 are read as one
// sign-extended word), and whether it is negative. The most negative value
// stays itself, 2^(64 * Limbs - 1), above every power of ten that bounds it.
template <int Limbs>
Words256 DecimalMagnitude(const uint8_t* bytes, int32_t width, bool* negative) {
  Words256 words{};
  if constexpr (Limbs == 1) {
    const int64_t word =
        width == 4 ? int64_t{LoadAt<int32_t>(bytes, 0)} : LoadAt<int64_t>(bytes, 0);
    *negative = word < 0;
    words[0] = *negative ? 0 - static_cast<uint64_t>(word) : static_cast<uint64_t>(word);
  } else {
    for (size_t limb = 0; limb < Limbs; ++limb) {
      words[limb] = LoadAt<uint64_t>(bytes, static_cast<int64_t>(limb));
    }
    *negative = static_cast<int64_t>(words[Limbs - 1]) < 0;
    if (*negative) {
      uint64_t carry = 1;
      for (size_t limb = 0; limb < Limbs; ++limb) {
        words[limb] = ~words[limb] + carry;
        carry = carry != 0 && words[limb] == 0 ? 1 : 0;
      }
    }
  }
  return words;
}

// The decimal digits of a DecimalMagnitude, for error messages.
template <int Limbs>
std::string DecimalText(const uint8_t* bytes, int32_t width) {
  bool negative = false;
  Words256 words = DecimalMagnitude<Limbs>(bytes, width, &negative);
  std::string digits;
  auto is_zero = [&] {
    return std::all_of(words.begin(), words.end(), [](uint64_t w) { return w == 0; });
  };
  do {
    unsigned __int128 remainder = 0;
    for (size_t limb = words.size(); limb-- > 0;) {
      const unsigned __int128 current = (remainder << 64) | words[limb];
      words[limb] = static_cast<uint64_t>(current / 10);
      remainder = current % 10;
    }
    digits.push_back(static_cast<char>('0' + static_cast<int>(remainder)));
  } while (!is_zero());
  if (negative) digits.push_back('-');
  std::reverse(digits.begin(), digits.end());
  return digits;
}

// ---- Per-type layout ----------------------------------------------------------

// Bytes per value of a fixed-width value buffer; 0 for anything else (bool is
// bit-packed and handled on its own).
int64_t FixedValueBytes(const DataType& type) { return std::max(type.fixed_width(), 0); }

// The buffers of each layout, in order; views list only the fixed part.
const char* BufferLayoutText(TypeId id) {
  switch (id) {
    case TypeId::kNull:
    case TypeId::kRunEndEncoded:
      return "none";
    case TypeId::kBinary:
    case TypeId::kLargeBinary:
    case TypeId::kUtf8:
    case TypeId::kLargeUtf8:
      return "validity, offsets, data";
    case TypeId::kBinaryView:
    case TypeId::kUtf8View:
      return "validity, views, then data buffers";
    case TypeId::kList:
    case TypeId::kLargeList:
    case TypeId::kMap:
      return "validity, offsets";
    case TypeId::kListView:
    case TypeId::kLargeListView:
      return "validity, offsets, sizes";
    case TypeId::kFixedSizeList:
    case TypeId::kStruct:
      return "validity";
    case TypeId::kSparseUnion:
      return "type_ids";
    case TypeId::kDenseUnion:
      return "type_ids, offsets";
    case TypeId::kDictionary:
      return "validity, indices";
    default:
      return "validity, values";
  }
}

const uint8_t* BufferData(const ArrayData& data, size_t index) {
  const BufferPtr& buffer = data.buffers[index];
  return buffer ? buffer->data() : nullptr;
}

// An absent buffer counts as empty (the spec allows absent buffers exactly
// where nothing needs to be read).
int64_t BufferSize(const ArrayData& data, size_t index) {
  const BufferPtr& buffer = data.buffers[index];
  return buffer ? buffer->size() : 0;
}

// Number of null slots among logical slots [begin, begin + count) of a
// structurally valid array. Unions and run-end encoded arrays have no nulls of
// their own (their children carry them); a null array is all nulls.
int64_t CountNullsIn(const ArrayData& data, int64_t begin, int64_t count) {
  if (count <= 0) return 0;
  if (data.type->id == TypeId::kNull) return count;
  if (!HasValidityBitmap(data.type->id) || data.buffers.empty() || !data.buffers[0]) return 0;
  return count - CountSetBits(data.buffers[0]->data(), data.offset + begin, count);
}

// ---- The validator --------------------------------------------------------------

// Validates one array node, then recurses into its children and dictionary.
// Path syntax is documented in validate.h.
// How much is checked: kLayout reads no buffer byte (device memory);
// kStructural reads first and last offsets; kFull reads every value.
enum class Level : uint8_t { kLayout, kStructural, kFull };

class ArrayValidator {
 public:
  ArrayValidator(const ArrayData& data, const ColumnPath& path, int depth, Level level)
      : data_(data), path_(path), depth_(depth), level_(level) {}

  Status Run() {
    if (depth_ > kMaxNestingDepth) {
      return Invalid("nesting is deeper than ", kMaxNestingDepth, " levels");
    }
    if (data_.type == nullptr) return Invalid("array has no type");
    if (depth_ == 0) {
      FERRY_RETURN_NOT_OK(internal::ValidateRootType(*data_.type, path_));
    } else {
      Status type_status = ValidateType(*data_.type);
      if (!type_status.ok()) return type_status.WithPrefix(path_.Render() + ": ");
    }
    type_ = data_.type.get();

    FERRY_RETURN_NOT_OK(CheckNodeItself());
    FERRY_RETURN_NOT_OK(ValidateChildrenAndDictionary());
    FERRY_RETURN_NOT_OK(CheckChildLengths());
    if (level_ != Level::kFull) return Status::OK();
    FERRY_RETURN_NOT_OK(CheckValues());
    return CheckNullCountMatchesBitmap();
  }

  // The structural rules of this node alone, for a node whose children and
  // dictionary the caller checks (internal::ValidateNodeStructure).
  Status RunNodeOnly() {
    type_ = data_.type.get();
    FERRY_RETURN_NOT_OK(CheckNodeItself());
    return CheckChildLengths();
  }

 private:
  template <typename... Parts>
  Status Invalid(const Parts&... parts) const {
    return Status::Invalid(Concat(path_.Render(), ": ", parts...));
  }

  Status CheckNodeItself() {
    FERRY_RETURN_NOT_OK(CheckLengthAndOffset());
    FERRY_RETURN_NOT_OK(CheckNullCount());
    FERRY_RETURN_NOT_OK(CheckBufferCount());
    FERRY_RETURN_NOT_OK(CheckBufferIntegrity());
    FERRY_RETURN_NOT_OK(CheckValidityBuffer());
    FERRY_RETURN_NOT_OK(CheckOwnBuffers());
    FERRY_RETURN_NOT_OK(CheckChildrenMatchType());
    return CheckDictionaryPresence();
  }

  // ---- structural: this node alone ----

  Status CheckLengthAndOffset() {
    if (data_.length < 0) return Invalid("length must be non-negative, got ", data_.length);
    if (data_.offset < 0) return Invalid("offset must be non-negative, got ", data_.offset);
    if (__builtin_add_overflow(data_.offset, data_.length, &end_)) {
      return Invalid("offset + length overflows int64: offset ", data_.offset, " + length ",
                     data_.length);
    }
    return Status::OK();
  }

  Status CheckNullCount() const {
    const int64_t null_count = data_.null_count;
    if (null_count == kUnknownNullCount) return Status::OK();
    if (null_count < 0 || null_count > data_.length) {
      return Invalid("null_count must be in [0, length] or unknown (-1): null_count ", null_count,
                     ", length ", data_.length);
    }
    if (type_->id == TypeId::kNull && null_count != data_.length) {
      return Invalid("a null array's null_count must equal its length: null_count ", null_count,
                     ", length ", data_.length);
    }
    if (!HasValidityBitmap(type_->id) && type_->id != TypeId::kNull && null_count != 0) {
      return Invalid(TypeIdName(type_->id),
                     " arrays have no validity bitmap, so null_count must be 0 (or unknown), got ",
                     null_count);
    }
    return Status::OK();
  }

  Status CheckBufferCount() const {
    const size_t count = data_.buffers.size();
    if (IsViewType(type_->id)) {
      if (count < 2) {
        return Invalid(TypeIdName(type_->id), " arrays need at least 2 buffers (",
                       BufferLayoutText(type_->id), "), got ", count);
      }
      return Status::OK();
    }
    const int expected = LayoutBufferCount(type_->id);
    if (count != static_cast<size_t>(expected)) {
      return Invalid(TypeIdName(type_->id), " arrays have exactly ", expected,
                     expected == 1 ? " buffer (" : " buffers (", BufferLayoutText(type_->id),
                     "), got ", count);
    }
    return Status::OK();
  }

  // A Buffer is a plain struct that a hostile importer could fill with
  // anything; these are the two states no read can survive.
  Status CheckBufferIntegrity() const {
    for (size_t index = 0; index < data_.buffers.size(); ++index) {
      const BufferPtr& buffer = data_.buffers[index];
      if (!buffer) continue;
      if (buffer->size() < 0) {
        return Invalid("buffer ", index, " has a negative size ", buffer->size());
      }
      if (buffer->data() == nullptr && buffer->size() > 0) {
        return Invalid("buffer ", index, " has a null data pointer but size ", buffer->size());
      }
    }
    return Status::OK();
  }

  // Buffer `index` must hold `elements` values of `width` bytes. Nothing is
  // read from a zero-length array, so any of its buffers may be empty.
  Status CheckElementsFit(size_t index, const char* name, int64_t elements, int64_t width) const {
    if (data_.length == 0) return Status::OK();
    int64_t required = 0;
    if (__builtin_mul_overflow(elements, width, &required)) {
      return Invalid(name, " buffer (buffer ", index, ") would need ", elements, " elements of ",
                     width, " bytes, which overflows int64 (offset ", data_.offset, " + length ",
                     data_.length, ")");
    }
    const int64_t size = BufferSize(data_, index);
    if (size < required) {
      return Invalid(name, " buffer (buffer ", index, ") is too small: ", elements, " elements of ",
                     width, " bytes need ", required, " bytes (offset ", data_.offset, " + length ",
                     data_.length, "), has ", size);
    }
    return Status::OK();
  }

  // Arrow C++ sizes the views buffer by offset + length even when the
  // length is 0 (its consumers index views from the offset), so unlike the
  // other buffers of a zero-length array it may not be empty at an offset.
  Status CheckViewsFit() const {
    if (data_.length > 0) return CheckElementsFit(1, "views", end_, kViewBytes);
    int64_t required = 0;
    if (__builtin_mul_overflow(end_, kViewBytes, &required)) {
      return Invalid("views buffer (buffer 1) would need ", end_, " views of ", kViewBytes,
                     " bytes, which overflows int64 (offset ", data_.offset, " + length 0)");
    }
    const int64_t size = BufferSize(data_, 1);
    if (size < required) {
      return Invalid(
          "views buffer (buffer 1) is too small: even a zero-length view array needs "
          "offset views, ",
          end_, " views of ", kViewBytes, " bytes need ", required, " bytes (offset ", data_.offset,
          " + length 0), has ", size);
    }
    return Status::OK();
  }

  Status CheckBitsFit(size_t index, const char* name, int64_t bits) const {
    if (data_.length == 0) return Status::OK();
    const int64_t required = bits / 8 + (bits % 8 != 0 ? 1 : 0);
    const int64_t size = BufferSize(data_, index);
    if (size < required) {
      return Invalid(name, " buffer (buffer ", index, ") is too small: ", bits, " bits need ",
                     required, " bytes (offset ", data_.offset, " + length ", data_.length,
                     "), has ", size);
    }
    return Status::OK();
  }

  Status CheckValidityBuffer() const {
    if (!HasValidityBitmap(type_->id)) return Status::OK();
    if (!data_.buffers[0]) {
      if (data_.null_count > 0) {
        return Invalid("validity bitmap is absent (all valid) but null_count is ",
                       data_.null_count);
      }
      return Status::OK();
    }
    return CheckBitsFit(0, "validity", end_);
  }

  // The offsets buffer must hold offset + length + 1 entries whenever there
  // is a value; then its first and last entries bound every other read.
  template <typename Offset>
  Status CheckOffsetEndpoints(size_t index, int64_t limit, const char* limit_text) const {
    if (data_.length == 0) return CheckEmptyArrayOffset<Offset>(index);
    if (end_ == std::numeric_limits<int64_t>::max()) {
      return Invalid(
          "offsets buffer would need offset + length + 1 entries, which overflows "
          "int64");
    }
    FERRY_RETURN_NOT_OK(CheckElementsFit(index, "offsets", end_ + 1, sizeof(Offset)));
    if (level_ == Level::kLayout) return Status::OK();
    const uint8_t* offsets = BufferData(data_, index);
    const auto first = LoadAt<Offset>(offsets, data_.offset);
    const auto last = LoadAt<Offset>(offsets, end_);
    if (first < 0) {
      return Invalid("offsets must be non-negative: offsets[", data_.offset, "]=", first);
    }
    if (last < first) {
      return Invalid("offsets must be non-decreasing: offsets[", data_.offset, "]=", first,
                     " > offsets[", end_, "]=", last);
    }
    if (last > limit) {
      return Invalid("last offset exceeds the ", limit_text, ": offsets[", end_, "]=", last, " > ",
                     limit);
    }
    return Status::OK();
  }

  // A zero-length array needs no offsets, but where its offsets buffer
  // holds the entry at its offset, Arrow C++ reads that entry and holds it
  // to be non-negative.
  template <typename Offset>
  Status CheckEmptyArrayOffset(size_t index) const {
    if (level_ == Level::kLayout || end_ == std::numeric_limits<int64_t>::max()) {
      return Status::OK();
    }
    int64_t required = 0;
    if (__builtin_mul_overflow(end_ + 1, static_cast<int64_t>(sizeof(Offset)), &required) ||
        BufferSize(data_, index) < required) {
      return Status::OK();
    }
    const auto first = LoadAt<Offset>(BufferData(data_, index), data_.offset);
    if (first < 0) {
      return Invalid("offsets must be non-negative, also in a zero-length array: offsets[",
                     data_.offset, "]=", first);
    }
    return Status::OK();
  }

  Status CheckRunEndRange() const {
    const TypePtr& run_end_type = type_->children[0].type;
    int64_t max_run_end = std::numeric_limits<int64_t>::max();
    if (run_end_type->id == TypeId::kInt16) max_run_end = std::numeric_limits<int16_t>::max();
    if (run_end_type->id == TypeId::kInt32) max_run_end = std::numeric_limits<int32_t>::max();
    if (end_ > max_run_end) {
      return Invalid("offset + length = ", end_, " does not fit the run-end type ",
                     TypeIdName(run_end_type->id), " (max ", max_run_end, ")");
    }
    return Status::OK();
  }

  // Sizes of the buffers this node owns (children are checked later).
  Status CheckOwnBuffers() const {
    switch (type_->id) {
      case TypeId::kNull:
      case TypeId::kStruct:
      case TypeId::kFixedSizeList:
        return Status::OK();
      case TypeId::kBool:
        return CheckBitsFit(1, "values", end_);
      case TypeId::kBinary:
      case TypeId::kUtf8:
        return CheckOffsetEndpoints<int32_t>(1, BufferSize(data_, 2), "data buffer size");
      case TypeId::kLargeBinary:
      case TypeId::kLargeUtf8:
        return CheckOffsetEndpoints<int64_t>(1, BufferSize(data_, 2), "data buffer size");
      case TypeId::kBinaryView:
      case TypeId::kUtf8View:
        return CheckViewsFit();
      case TypeId::kList:
      case TypeId::kMap:
      case TypeId::kLargeList:
        return Status::OK();  // offsets are bounded by the child: see CheckChildLengths
      case TypeId::kListView:
        FERRY_RETURN_NOT_OK(CheckElementsFit(1, "offsets", end_, sizeof(int32_t)));
        return CheckElementsFit(2, "sizes", end_, sizeof(int32_t));
      case TypeId::kLargeListView:
        FERRY_RETURN_NOT_OK(CheckElementsFit(1, "offsets", end_, sizeof(int64_t)));
        return CheckElementsFit(2, "sizes", end_, sizeof(int64_t));
      case TypeId::kSparseUnion:
        return CheckElementsFit(0, "type_ids", end_, sizeof(int8_t));
      case TypeId::kDenseUnion:
        FERRY_RETURN_NOT_OK(CheckElementsFit(0, "type_ids", end_, sizeof(int8_t)));
        return CheckElementsFit(1, "offsets", end_, sizeof(int32_t));
      case TypeId::kRunEndEncoded:
        return CheckRunEndRange();
      case TypeId::kDictionary:
        return CheckElementsFit(1, "indices", end_, FixedValueBytes(*type_->index_type));
      default:
        return CheckElementsFit(1, "values", end_, FixedValueBytes(*type_));
    }
  }

  Status CheckChildrenMatchType() const {
    const size_t expected = type_->children.size();
    if (data_.children.size() != expected) {
      return Invalid(TypeIdName(type_->id), " type declares ", expected, " children, array has ",
                     data_.children.size());
    }
    for (size_t index = 0; index < expected; ++index) {
      const ArrayDataPtr& child = data_.children[index];
      const Field& field = type_->children[index];
      if (!child) return Invalid("child ", index, " (", QuoteName(field.name), ") is missing");
      if (!TypesEqual(child->type, field.type)) {
        return Invalid("child ", index, " (", QuoteName(field.name), ") has type ",
                       TypeText(child->type), ", but the type declares ", TypeText(field.type));
      }
    }
    return Status::OK();
  }

  Status CheckDictionaryPresence() const {
    if (type_->id != TypeId::kDictionary) {
      if (data_.dictionary) {
        return Invalid("a ", TypeIdName(type_->id), " array must not have a dictionary");
      }
      return Status::OK();
    }
    if (!data_.dictionary) return Invalid("dictionary-encoded array has no dictionary");
    if (!TypesEqual(data_.dictionary->type, type_->value_type)) {
      return Invalid("dictionary has type ", TypeText(data_.dictionary->type),
                     ", but the value type is ", TypeText(type_->value_type));
    }
    return Status::OK();
  }

  Status ValidateChildrenAndDictionary() const {
    for (size_t index = 0; index < data_.children.size(); ++index) {
      const ColumnPath child_path =
          path_.Child(type_->id, static_cast<int64_t>(index), type_->children[index].name);
      FERRY_RETURN_NOT_OK(
          ArrayValidator(*data_.children[index], child_path, depth_ + 1, level_).Run());
    }
    if (data_.dictionary) {
      const ColumnPath dictionary_path = path_.Dictionary();
      FERRY_RETURN_NOT_OK(
          ArrayValidator(*data_.dictionary, dictionary_path, depth_ + 1, level_).Run());
    }
    return Status::OK();
  }

  // ---- structural: parent against children ----

  Status CheckEveryChildCovers(int64_t required, const char* reason) const {
    for (size_t index = 0; index < data_.children.size(); ++index) {
      const ArrayData& child = *data_.children[index];
      if (child.length < required) {
        return Invalid("child ", index, " (", QuoteName(type_->children[index].name),
                       ") is too short: ", reason, " needs length ", required, ", child has ",
                       child.length);
      }
    }
    return Status::OK();
  }

  Status CheckChildLengths() const {
    switch (type_->id) {
      case TypeId::kStruct:
      case TypeId::kSparseUnion:
        // Also at length 0: Arrow C++ holds every child to offset + length.
        return CheckEveryChildCovers(end_, "offset + length");
      case TypeId::kFixedSizeList: {
        if (data_.length == 0) return Status::OK();
        int64_t required = 0;
        if (__builtin_mul_overflow(end_, static_cast<int64_t>(type_->list_size), &required)) {
          return Invalid("(offset + length) * list_size overflows int64: ", end_, " * ",
                         type_->list_size);
        }
        return CheckEveryChildCovers(required, "(offset + length) * list_size");
      }
      case TypeId::kList:
      case TypeId::kMap:
        return CheckOffsetEndpoints<int32_t>(1, data_.children[0]->length, "child length");
      case TypeId::kLargeList:
        return CheckOffsetEndpoints<int64_t>(1, data_.children[0]->length, "child length");
      case TypeId::kRunEndEncoded:
        if (data_.children[0]->length != data_.children[1]->length) {
          return Invalid("run_ends and values must have the same length: run_ends has ",
                         data_.children[0]->length, ", values has ", data_.children[1]->length);
        }
        return Status::OK();
      default:
        return Status::OK();
    }
  }

  // ---- full: values ----

  bool SlotIsValid(int64_t position) const {
    const uint8_t* validity = HasValidityBitmap(type_->id) ? BufferData(data_, 0) : nullptr;
    return validity == nullptr || GetBit(validity, position);
  }

  Status CheckValues() const {
    switch (type_->id) {
      case TypeId::kBinary:
        return CheckOffsetsMonotonic<int32_t>();
      case TypeId::kLargeBinary:
        return CheckOffsetsMonotonic<int64_t>();
      case TypeId::kUtf8:
        FERRY_RETURN_NOT_OK(CheckOffsetsMonotonic<int32_t>());
        return CheckUtf8Values<int32_t>();
      case TypeId::kLargeUtf8:
        FERRY_RETURN_NOT_OK(CheckOffsetsMonotonic<int64_t>());
        return CheckUtf8Values<int64_t>();
      case TypeId::kList:
        return CheckOffsetsMonotonic<int32_t>();
      case TypeId::kLargeList:
        return CheckOffsetsMonotonic<int64_t>();
      case TypeId::kMap:
        FERRY_RETURN_NOT_OK(CheckOffsetsMonotonic<int32_t>());
        return CheckMapEntriesAndKeys();
      case TypeId::kListView:
        return CheckListViews<int32_t>();
      case TypeId::kLargeListView:
        return CheckListViews<int64_t>();
      case TypeId::kBinaryView:
      case TypeId::kUtf8View:
        return CheckViews();
      case TypeId::kSparseUnion:
      case TypeId::kDenseUnion:
        return CheckUnionSlots();
      case TypeId::kRunEndEncoded:
        return CheckRunEnds();
      case TypeId::kDictionary:
        return CheckDictionaryIndices();
      case TypeId::kDecimal32:
      case TypeId::kDecimal64:
        return CheckDecimals<1>();
      case TypeId::kDecimal128:
        return CheckDecimals<2>();
      case TypeId::kDecimal256:
        return CheckDecimals<4>();
      case TypeId::kTime32:
        return CheckTimesOfDay<int32_t>();
      case TypeId::kTime64:
        return CheckTimesOfDay<int64_t>();
      case TypeId::kDate64:
        return CheckWholeDays();
      default:
        return Status::OK();
    }
  }

  // Runs `is_good(position)` over every slot first, a loop without branches
  // on validity; only when some slot fails are the slots walked again to
  // find the first valid one that fails (a null slot's value is
  // unspecified). `describe(position)` words the error.
  template <typename IsGood, typename Describe>
  Status CheckValidSlots(IsGood is_good, Describe describe) const {
    if (data_.length == 0) return Status::OK();
    bool all_good = true;
    for (int64_t position = data_.offset; position < end_; ++position) {
      all_good &= is_good(position);
    }
    if (all_good) return Status::OK();
    for (int64_t position = data_.offset; position < end_; ++position) {
      if (SlotIsValid(position) && !is_good(position)) return describe(position);
    }
    return Status::OK();
  }

  // time32[s] and [ms], time64[us] and [ns] count since midnight: [0, one day).
  template <typename Value>
  Status CheckTimesOfDay() const {
    constexpr int64_t kSecondsPerDay = 86400;
    int64_t per_day = kSecondsPerDay;
    if (type_->unit == TimeUnit::kMilli) per_day = kSecondsPerDay * 1000;
    if (type_->unit == TimeUnit::kMicro) per_day = kSecondsPerDay * 1000 * 1000;
    if (type_->unit == TimeUnit::kNano) per_day = kSecondsPerDay * 1000 * 1000 * 1000;
    const uint8_t* values = BufferData(data_, 1);
    // One unsigned comparison covers both bounds.
    const auto limit = static_cast<uint64_t>(per_day);
    return CheckValidSlots(
        [&](int64_t position) {
          return static_cast<uint64_t>(static_cast<int64_t>(LoadAt<Value>(values, position))) <
                 limit;
        },
        [&](int64_t position) {
          return Invalid(type_->ToString(), " values must be times of day in [0, ", per_day, ") ",
                         TimeUnitName(type_->unit), ": value ", position, " is ",
                         static_cast<int64_t>(LoadAt<Value>(values, position)));
        });
  }

  // date64 counts milliseconds of whole days.
  Status CheckWholeDays() const {
    constexpr int64_t kMillisPerDay = int64_t{86400} * 1000;
    const uint8_t* values = BufferData(data_, 1);
    return CheckValidSlots(
        [&](int64_t position) { return LoadAt<int64_t>(values, position) % kMillisPerDay == 0; },
        [&](int64_t position) {
          return Invalid("date64 values must be whole days (multiples of ", kMillisPerDay,
                         " ms): value ", position, " is ", LoadAt<int64_t>(values, position));
        });
  }

  // Decimal values, `Limbs` little-endian 64-bit words each (decimal32 and
  // decimal64 are read as one sign-extended word), must satisfy |value| <
  // 10^precision, as Arrow C++'s FitsInPrecision.
  template <int Limbs>
  Status CheckDecimals() const {
    const int32_t precision = type_->precision;
    const int32_t width = type_->byte_width;
    if (precision < 1 || precision > kMaxDecimalDigits) return Status::OK();  // ValidateType's
    const Words256& bound = PowerOfTen(precision);
    const uint8_t* values = BufferData(data_, 1);
    auto fits = [&](int64_t position) {
      bool negative = false;
      const Words256 words = DecimalMagnitude<Limbs>(values + position * width, width, &negative);
      for (size_t limb = Limbs; limb-- > 0;) {
        if (words[limb] != bound[limb]) return words[limb] < bound[limb];
      }
      return false;  // equal to 10^precision
    };
    return CheckValidSlots(fits, [&](int64_t position) {
      return Invalid(type_->ToString(), " values must fit the precision (|value| < 10^", precision,
                     "): value ", position, " is ",
                     DecimalText<Limbs>(values + position * width, width));
    });
  }

  template <typename Offset>
  Status CheckOffsetsMonotonic() const {
    if (data_.length == 0) return Status::OK();
    const uint8_t* offsets = BufferData(data_, 1);
    Offset previous = LoadAt<Offset>(offsets, data_.offset);
    for (int64_t position = data_.offset + 1; position <= end_; ++position) {
      const Offset current = LoadAt<Offset>(offsets, position);
      if (current < previous) {
        return Invalid("offsets must be non-decreasing: offsets[", position - 1, "]=", previous,
                       " > offsets[", position, "]=", current);
      }
      previous = current;
    }
    return Status::OK();
  }

  Status Utf8Failure(int64_t position, const Utf8Result& result) const {
    return Invalid("value ", position, " is not valid UTF-8: ", Utf8ErrorText(result.error),
                   " at byte ", result.position, " of the value");
  }

  // Runs after CheckOffsetsMonotonic, so every value range lies in the data
  // buffer. The whole range is checked in one pass, plus a check that no
  // value (null or not) starts inside a character; the slots partition the
  // range, so that holds exactly when every value is valid on its own. Only
  // when it fails (an error to locate, or bad bytes under a null, whose
  // bytes are unspecified) are values checked one by one.
  template <typename Offset>
  Status CheckUtf8Values() const {
    if (data_.length == 0) return Status::OK();
    const uint8_t* offsets = BufferData(data_, 1);
    const uint8_t* bytes = BufferData(data_, 2);
    const int64_t first = LoadAt<Offset>(offsets, data_.offset);
    const int64_t last = LoadAt<Offset>(offsets, end_);
    if (CheckUtf8(bytes + first, last - first).error == Utf8Error::kNone) {
      bool boundaries_ok = true;
      for (int64_t position = data_.offset; position < end_; ++position) {
        const int64_t start = LoadAt<Offset>(offsets, position);
        if (start < last && IsContinuation(bytes[start])) {
          boundaries_ok = false;
          break;
        }
      }
      if (boundaries_ok) return Status::OK();
    }
    for (int64_t position = data_.offset; position < end_; ++position) {
      if (!SlotIsValid(position)) continue;
      const int64_t start = LoadAt<Offset>(offsets, position);
      const int64_t stop = LoadAt<Offset>(offsets, position + 1);
      const Utf8Result result = CheckUtf8(bytes + start, stop - start);
      if (result.error != Utf8Error::kNone) return Utf8Failure(position, result);
    }
    return Status::OK();
  }

  // Every slot, null or not, must satisfy the list-view invariants (spec).
  template <typename Offset>
  Status CheckListViews() const {
    const uint8_t* offsets = BufferData(data_, 1);
    const uint8_t* sizes = BufferData(data_, 2);
    const int64_t child_length = data_.children[0]->length;
    for (int64_t position = data_.offset; position < end_ && data_.length > 0; ++position) {
      const int64_t offset = LoadAt<Offset>(offsets, position);
      const int64_t size = LoadAt<Offset>(sizes, position);
      if (offset < 0) {
        return Invalid("list-view offsets must be non-negative: offsets[", position, "]=", offset);
      }
      if (size < 0) {
        return Invalid("list-view sizes must be non-negative: sizes[", position, "]=", size);
      }
      if (offset > child_length || size > child_length - offset) {
        return Invalid("list-view offset + size must be within the child length: offsets[",
                       position, "]=", offset, " + sizes[", position, "]=", size, " > ",
                       child_length);
      }
    }
    return Status::OK();
  }

  // Views are checked in every slot (a null slot's view is still read by
  // consumers that copy views wholesale); UTF-8 only in valid slots.
  Status CheckViews() const {
    if (data_.length == 0) return Status::OK();
    const uint8_t* views = BufferData(data_, 1);
    const int64_t data_buffer_count = static_cast<int64_t>(data_.buffers.size()) - 2;
    const bool check_utf8 = type_->id == TypeId::kUtf8View;
    for (int64_t position = data_.offset; position < end_; ++position) {
      const uint8_t* view = views + position * kViewBytes;
      const int32_t length = LoadAt<int32_t>(view, 0);
      if (length < 0) {
        return Invalid("view lengths must be non-negative: view[", position, "] has length ",
                       length);
      }
      const uint8_t* value = nullptr;
      if (length <= kMaxInlineViewLength) {
        value = view + kViewPrefixBytes;
        for (int64_t pad = kViewPrefixBytes + length; pad < kViewBytes; ++pad) {
          if (view[pad] != 0) {
            return Invalid("inline view padding must be zero: view[", position, "] has length ",
                           length, " but byte ", pad, " of the view is ",
                           static_cast<int>(view[pad]));
          }
        }
      } else {
        const int32_t buffer_index = LoadAt<int32_t>(view, 2);
        const int32_t offset = LoadAt<int32_t>(view, 3);
        if (buffer_index < 0 || buffer_index >= data_buffer_count) {
          return Invalid("view buffer index out of range: view[", position,
                         "] refers to data buffer ", buffer_index, ", the array has ",
                         data_buffer_count);
        }
        if (offset < 0) {
          return Invalid("view offsets must be non-negative: view[", position, "] has offset ",
                         offset);
        }
        const size_t buffer_slot = static_cast<size_t>(buffer_index) + 2;
        const int64_t buffer_size = BufferSize(data_, buffer_slot);
        if (static_cast<int64_t>(offset) + length > buffer_size) {
          return Invalid("view data must lie within its data buffer: view[", position, "] covers [",
                         offset, ", ", static_cast<int64_t>(offset) + length, ") of data buffer ",
                         buffer_index, " of size ", buffer_size);
        }
        value = BufferData(data_, buffer_slot) + offset;
        if (std::memcmp(view + kViewPrefixBytes, value, kViewPrefixBytes) != 0) {
          return Invalid("view prefix must equal the first 4 bytes of the value: view[", position,
                         "] prefix differs from data buffer ", buffer_index, " at offset ", offset);
        }
      }
      if (check_utf8 && SlotIsValid(position)) {
        const Utf8Result result = CheckUtf8(value, length);
        if (result.error != Utf8Error::kNone) return Utf8Failure(position, result);
      }
    }
    return Status::OK();
  }

  Status CheckUnionSlots() const {
    if (data_.length == 0) return Status::OK();
    // ValidateType has checked that the codes are distinct and in 0..127.
    std::array<int, 128> child_of_code{};
    child_of_code.fill(-1);
    std::string declared;
    for (size_t index = 0; index < type_->type_codes.size(); ++index) {
      child_of_code[static_cast<uint8_t>(type_->type_codes[index])] = static_cast<int>(index);
      declared += (index == 0 ? "" : ", ") + std::to_string(type_->type_codes[index]);
    }
    const uint8_t* type_ids = BufferData(data_, 0);
    const bool dense = type_->id == TypeId::kDenseUnion;
    const uint8_t* offsets = dense ? BufferData(data_, 1) : nullptr;
    // Per type code, the last dense offset and the slot that held it.
    std::array<int32_t, 128> last_offset{};
    std::array<int64_t, 128> last_position{};
    last_position.fill(-1);
    for (int64_t position = data_.offset; position < end_; ++position) {
      const int8_t code = LoadAt<int8_t>(type_ids, position);
      if (code < 0 || child_of_code[static_cast<uint8_t>(code)] < 0) {
        return Invalid("type ids must be declared type codes: type_ids[", position,
                       "]=", static_cast<int>(code), " is not among {", declared, "}");
      }
      if (!dense) continue;
      const int child_index = child_of_code[static_cast<uint8_t>(code)];
      const int64_t child_length = data_.children[static_cast<size_t>(child_index)]->length;
      const int32_t child_offset = LoadAt<int32_t>(offsets, position);
      if (child_offset < 0 || child_offset >= child_length) {
        return Invalid("dense union offsets must index into their child: offsets[", position,
                       "]=", child_offset, " for type id ", static_cast<int>(code), " but child ",
                       QuoteName(type_->children[static_cast<size_t>(child_index)].name),
                       " has length ", child_length);
      }
      const auto slot = static_cast<uint8_t>(code);
      if (child_offset < last_offset[slot]) {
        return Invalid("dense union offsets must not decrease within a child: offsets[", position,
                       "]=", child_offset, " < offsets[", last_position[slot],
                       "]=", last_offset[slot], ", both for type id ", static_cast<int>(code));
      }
      last_offset[slot] = child_offset;
      last_position[slot] = position;
    }
    return Status::OK();
  }

  Status CheckRunEnds() const {
    const ArrayData& run_ends = *data_.children[0];
    const int64_t nulls = CountNullsIn(run_ends, 0, run_ends.length);
    if (nulls > 0) return Invalid("run_ends must not contain nulls, found ", nulls);
    switch (run_ends.type->id) {
      case TypeId::kInt16:
        return CheckRunEndValues<int16_t>(run_ends);
      case TypeId::kInt32:
        return CheckRunEndValues<int32_t>(run_ends);
      default:
        return CheckRunEndValues<int64_t>(run_ends);
    }
  }

  template <typename RunEnd>
  Status CheckRunEndValues(const ArrayData& run_ends) const {
    const uint8_t* values = BufferData(run_ends, 1);
    int64_t previous = 0;
    for (int64_t index = 0; index < run_ends.length; ++index) {
      const int64_t position = run_ends.offset + index;
      const int64_t current = LoadAt<RunEnd>(values, position);
      if (index == 0 && current <= 0) {
        return Invalid("run ends must be positive: run_ends[", position, "]=", current);
      }
      if (index > 0 && current <= previous) {
        return Invalid("run ends must be strictly increasing: run_ends[", position - 1,
                       "]=", previous, " >= run_ends[", position, "]=", current);
      }
      previous = current;
    }
    // As Arrow C++: no runs suit only an empty array, but any runs must
    // reach offset + length, even for a zero-length array.
    if (run_ends.length == 0) {
      if (data_.length == 0) return Status::OK();
      return Invalid("run ends must cover offset + length = ", end_, ", but run_ends is empty");
    }
    if (previous < end_) {
      return Invalid("run ends must cover offset + length: run_ends[",
                     run_ends.offset + run_ends.length - 1, "]=", previous, " < ", end_);
    }
    return Status::OK();
  }

  Status CheckDictionaryIndices() const {
    switch (type_->index_type->id) {
      case TypeId::kInt8:
        return CheckIndices<int8_t>();
      case TypeId::kUInt8:
        return CheckIndices<uint8_t>();
      case TypeId::kInt16:
        return CheckIndices<int16_t>();
      case TypeId::kUInt16:
        return CheckIndices<uint16_t>();
      case TypeId::kInt32:
        return CheckIndices<int32_t>();
      case TypeId::kUInt32:
        return CheckIndices<uint32_t>();
      case TypeId::kInt64:
        return CheckIndices<int64_t>();
      case TypeId::kUInt64:
        return CheckIndices<uint64_t>();
      default:
        return Invalid("dictionary index type ", TypeText(type_->index_type), " is not an integer");
    }
  }

  // Only valid slots are checked: the index under a null is unspecified.
  template <typename Index>
  Status CheckIndices() const {
    const uint8_t* indices = BufferData(data_, 1);
    const uint64_t dictionary_length = static_cast<uint64_t>(data_.dictionary->length);
    // A negative index read as unsigned is out of range as well.
    return CheckValidSlots(
        [&](int64_t position) {
          return static_cast<uint64_t>(LoadAt<Index>(indices, position)) < dictionary_length;
        },
        [&](int64_t position) {
          return Invalid("dictionary indices must be in [0, dictionary length): indices[", position,
                         "]=", Printable(LoadAt<Index>(indices, position)),
                         " with dictionary length ", dictionary_length);
        });
  }

  // As Arrow C++ (which refuses such a map even on import): the entries
  // struct has no null slot and its keys child none either, over their
  // whole lengths, whatever the map's offsets refer to.
  Status CheckMapEntriesAndKeys() const {
    const ArrayData& entries = *data_.children[0];
    const int64_t null_entries = CountNullsIn(entries, 0, entries.length);
    if (null_entries > 0) {
      return Invalid("map entries must not be null: ", null_entries, " of the ", entries.length,
                     " entries are null");
    }
    const ArrayData& keys = *entries.children[0];
    const int64_t null_keys = CountNullsIn(keys, 0, keys.length);
    if (null_keys > 0) {
      return Invalid("map keys must not be null: ", null_keys, " of the ", keys.length,
                     " keys are null");
    }
    return Status::OK();
  }

  Status CheckNullCountMatchesBitmap() const {
    if (data_.null_count == kUnknownNullCount || !HasValidityBitmap(type_->id)) {
      return Status::OK();
    }
    const int64_t counted = CountNullsIn(data_, 0, data_.length);
    if (counted != data_.null_count) {
      return Invalid("null_count must match the validity bitmap: null_count is ", data_.null_count,
                     " but the bitmap has ", counted, " nulls");
    }
    return Status::OK();
  }

  const ArrayData& data_;
  const ColumnPath& path_;
  const int depth_;
  const Level level_;
  const DataType* type_ = nullptr;
  int64_t end_ = 0;  // offset + length, once checked not to overflow
};

Status ValidateBatch(const RecordBatch& batch, Level level) {
  if (!batch.schema()) return Status::Invalid("record batch: schema is missing");
  if (batch.num_rows() < 0) {
    return Status::Invalid(
        Concat("record batch: num_rows must be non-negative, got ", batch.num_rows()));
  }
  const std::vector<Field>& fields = batch.schema()->fields;
  if (static_cast<size_t>(batch.num_columns()) != fields.size()) {
    return Status::Invalid(Concat("record batch: has ", batch.num_columns(),
                                  " columns but the schema has ", fields.size(), " fields"));
  }
  for (size_t index = 0; index < fields.size(); ++index) {
    const ColumnPath path = ColumnPath::QuotedRoot("col", fields[index].name);
    const ArrayDataPtr& column = batch.columns()[index];
    if (!column) return Status::Invalid(path.Render() + ": column is missing");
    if (!TypesEqual(column->type, fields[index].type)) {
      return Status::Invalid(Concat(path.Render(), ": column has type ", TypeText(column->type),
                                    ", but the schema declares ", TypeText(fields[index].type)));
    }
    if (column->length != batch.num_rows()) {
      return Status::Invalid(Concat(path.Render(), ": column length ", column->length,
                                    " must equal the batch's num_rows ", batch.num_rows()));
    }
    FERRY_RETURN_NOT_OK(ArrayValidator(*column, path, 0, level).Run());
  }
  return Status::OK();
}

}  // namespace

namespace internal {

Status CheckTypeNesting(int nesting_depth, const ColumnPath& path) {
  if (nesting_depth > kMaxNestingDepth) {
    return Status::Invalid(
        Concat(path.Render(), ": type nesting is deeper than ", kMaxNestingDepth, " levels"));
  }
  return Status::OK();
}

Status ValidateRootType(const DataType& type, const ColumnPath& path) {
  FERRY_RETURN_NOT_OK(CheckTypeNesting(TypeNestingDepth(type), path));
  Status type_status = ValidateType(type);
  if (!type_status.ok()) return type_status.WithPrefix(path.Render() + ": ");
  return Status::OK();
}

Status ValidateNodeStructure(const ArrayData& node, const ColumnPath& path) {
  return ArrayValidator(node, path, 0, Level::kStructural).RunNodeOnly();
}

}  // namespace internal

Status ValidateStructural(const ArrayData& data, const std::string& path) {
  const ColumnPath root = RootPath(path);
  return ArrayValidator(data, root, 0, Level::kStructural).Run();
}

Status ValidateFull(const ArrayData& data, const std::string& path) {
  const ColumnPath root = RootPath(path);
  return ArrayValidator(data, root, 0, Level::kFull).Run();
}

Status ValidateStructural(const RecordBatch& batch) {
  return ValidateBatch(batch, Level::kStructural);
}

Status ValidateFull(const RecordBatch& batch) { return ValidateBatch(batch, Level::kFull); }

Status ValidateLayout(const RecordBatch& batch) { return ValidateBatch(batch, Level::kLayout); }

}  // namespace ferry
