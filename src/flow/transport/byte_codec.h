// Byte-level pieces shared by the batch-header codec (batch_header.h) and the
// schema codec (schema_codec.h): the limits both apply, an appending sink, a
// bounded reader of untrusted bytes, and length-prefixed metadata pairs.
// Everything is written in native byte order, which must be little-endian.
//
// Thread safety: ByteSink and ByteReader are plain values (one thread at a
// time each); the functions keep no state.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "ferry/base/status.h"
#include "ferry/exchange/type.h"

namespace ferry::flow::wire {

static_assert(std::endian::native == std::endian::little,
              "the wire format is written in native order, which must be little-endian");

// Larger headers and schemas are refused on both sides (64 MiB: about a
// million columns).
inline constexpr int64_t kMaxEncodedSize = int64_t{1} << 26;
// Deeper types are refused (ValidateStructural refuses them too).
inline constexpr int kMaxNestingDepth = 128;

constexpr uint64_t PadTo8(uint64_t size) { return (size + 7) & ~uint64_t{7}; }

inline bool FitsU32(size_t size) { return size <= std::numeric_limits<uint32_t>::max(); }

// Appends fixed-width values and length-prefixed strings to a growing string.
class ByteSink {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  // A u32 length, then the bytes (the caller checked the length fits).
  void PutString(std::string_view text) {
    Put(static_cast<uint32_t>(text.size()));
    out_.append(text);
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Reads from bytes that are already in private memory, never past `size`:
// every read says whether the bytes were there.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t remaining() const { return size_ - cursor_; }
  uint64_t position() const { return cursor_; }

  template <typename T>
  bool Read(T* value) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return false;
    std::memcpy(value, data_ + cursor_, sizeof(T));
    cursor_ += sizeof(T);
    return true;
  }
  bool ReadView(uint64_t length, std::string_view* view) {
    if (remaining() < length) return false;
    *view = std::string_view(reinterpret_cast<const char*>(data_ + cursor_), length);
    cursor_ += length;
    return true;
  }
  // A u32 length, then that many bytes.
  bool ReadString(std::string_view* view) {
    uint32_t length = 0;
    return Read(&length) && ReadView(length, view);
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t cursor_ = 0;
};

// Reads `count` pairs of length-prefixed strings into `out` (may be null:
// check only). `what` prefixes errors. A count the remaining bytes cannot
// hold is refused before anything is reserved.
Status ReadMetadataPairs(ByteReader* reader, uint32_t count, std::string_view what, Metadata* out);

}  // namespace ferry::flow::wire
