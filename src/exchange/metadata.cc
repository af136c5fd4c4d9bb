// Key/value metadata in the C Data Interface binary encoding.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "ferry/exchange/type.h"

namespace ferry {

namespace {

void AppendInt32(std::string& out, int32_t value) {
  char bytes[sizeof(int32_t)];
  std::memcpy(bytes, &value, sizeof(value));
  out.append(bytes, sizeof(bytes));
}

void AppendLengthPrefixed(std::string& out, const std::string& text) {
  AppendInt32(out, static_cast<int32_t>(text.size()));
  out.append(text);
}

// Reads the encoding front to back. The encoding carries no total size, so every read is
// bounded by `max_bytes` instead: a corrupt length fails here rather than reading past the
// producer's allocation.
class MetadataReader {
 public:
  MetadataReader(const char* data, int64_t max_bytes) : data_(data), max_bytes_(max_bytes) {}

  Result<int32_t> ReadInt32(std::string_view what) {
    FERRY_RETURN_NOT_OK(Reserve(sizeof(int32_t), what));
    int32_t value = 0;
    std::memcpy(&value, data_ + offset_, sizeof(value));
    offset_ += sizeof(value);
    if (value < 0) {
      return Status::Invalid("metadata " + std::string(what) + " is negative (" +
                             std::to_string(value) + ")");
    }
    return value;
  }

  Result<std::string> ReadString(std::string_view what) {
    FERRY_ASSIGN_OR_RAISE(const int32_t length, ReadInt32(std::string(what) + " length"));
    FERRY_RETURN_NOT_OK(Reserve(length, what));
    std::string text(data_ + offset_, static_cast<size_t>(length));
    offset_ += length;
    return text;
  }

 private:
  Status Reserve(int64_t size, std::string_view what) const {
    if (size > max_bytes_ - offset_) {
      return Status::Invalid("metadata " + std::string(what) + " at byte " +
                             std::to_string(offset_) + " runs past the limit of " +
                             std::to_string(max_bytes_) + " bytes");
    }
    return Status::OK();
  }

  const char* data_;
  int64_t max_bytes_;
  int64_t offset_ = 0;
};

}  // namespace

std::string EncodeMetadata(const Metadata& metadata) {
  std::string encoded;
  if (metadata.empty()) {
    return encoded;
  }
  AppendInt32(encoded, static_cast<int32_t>(metadata.size()));
  for (const auto& [key, value] : metadata) {
    AppendLengthPrefixed(encoded, key);
    AppendLengthPrefixed(encoded, value);
  }
  return encoded;
}

Result<Metadata> DecodeMetadata(const char* encoded, int64_t max_bytes) {
  Metadata metadata;
  if (encoded == nullptr) {
    return metadata;
  }
  if (max_bytes < 0) {
    return Status::Invalid("metadata size limit must not be negative, got " +
                           std::to_string(max_bytes));
  }
  MetadataReader reader(encoded, max_bytes);
  FERRY_ASSIGN_OR_RAISE(const int32_t count, reader.ReadInt32("pair count"));
  // Each pair takes at least 8 bytes, so a count beyond that is corrupt; checking up front
  // keeps a huge count from reserving memory before the reads fail.
  if (static_cast<int64_t>(count) * 8 > max_bytes - 4) {
    return Status::Invalid("metadata pair count " + std::to_string(count) +
                           " cannot fit in the limit of " + std::to_string(max_bytes) + " bytes");
  }
  metadata.reserve(static_cast<size_t>(count));
  for (int32_t pair_index = 0; pair_index < count; ++pair_index) {
    FERRY_ASSIGN_OR_RAISE(std::string key, reader.ReadString("key " + std::to_string(pair_index)));
    FERRY_ASSIGN_OR_RAISE(std::string value,
                          reader.ReadString("value " + std::to_string(pair_index)));
    metadata.emplace_back(std::move(key), std::move(value));
  }
  return metadata;
}

}  // namespace ferry
