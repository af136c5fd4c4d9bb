// Metadata pairs of the transport's encodings (byte_codec.h).
#include "flow/transport/byte_codec.h"

#include <string>

namespace ferry::flow::wire {

Status ReadMetadataPairs(ByteReader* reader, uint32_t count, std::string_view what, Metadata* out) {
  // Each pair takes at least its two lengths, so a count the bytes cannot
  // hold is refused before anything is reserved.
  if (count > reader->remaining() / 8) {
    return Status::Invalid(std::string(what) + ": " + std::to_string(count) +
                           " metadata pairs cannot fit in the " +
                           std::to_string(reader->remaining()) + " bytes left");
  }
  if (out != nullptr) out->reserve(count);
  for (uint32_t pair_index = 0; pair_index < count; ++pair_index) {
    std::string_view key;
    std::string_view value;
    if (!reader->ReadString(&key) || !reader->ReadString(&value)) {
      return Status::Invalid(std::string(what) + ": metadata pair " + std::to_string(pair_index) +
                             " runs past the end of its section");
    }
    if (out != nullptr) out->emplace_back(std::string(key), std::string(value));
  }
  return Status::OK();
}

}  // namespace ferry::flow::wire
