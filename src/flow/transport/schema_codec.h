// The schema encoding of Ferry's cross-process transport: a channel's schema
// travels once, self-describing, and message headers (batch_header.h) refer
// to it. Not installed.
//
// Trust. DecodeSchema reads bytes from another process, so it copies them
// into private memory first, checks every count against the bytes that
// remain, refuses nesting deeper than kMaxNestingDepth and runs ValidateType
// on every field. Bad input gives Invalid naming the field path and the rule,
// never a crash.
//
// Schema layout (native byte order):
//   u32 magic (kSchemaMagic)  u16 version (kSchemaVersion)  u16 flags (0)
//   metadata: u32 count, then per pair u32 length + bytes, twice
//   u32 field count, then the fields
//   field: u32 name length, name; u32 format length, format (the C Data
//     Interface format string of the node; for a dictionary-encoded field the
//     index type's); u8 flags (kFieldNullable, kFieldHasDictionary,
//     kFieldDictionaryOrdered, kFieldMapKeysSorted; other bits 0); metadata;
//     u32 child count, the children; then, with kFieldHasDictionary, the
//     dictionary's value type as one more field (name "", nullable).
//
//
// Thread safety: every function here is thread-safe; none keeps state.
#pragma once

#include <cstdint>
#include <string>

#include "ferry/base/status.h"
#include "ferry/exchange/type.h"
#include "flow/transport/byte_codec.h"

namespace ferry::flow::wire {

inline constexpr uint32_t kSchemaMagic = 0x53595246;  // "FRYS" in memory
inline constexpr uint16_t kSchemaVersion = 1;

// Field flags of the schema encoding.
inline constexpr uint8_t kFieldNullable = 1u << 0;
inline constexpr uint8_t kFieldHasDictionary = 1u << 1;
inline constexpr uint8_t kFieldDictionaryOrdered = 1u << 2;
inline constexpr uint8_t kFieldMapKeysSorted = 1u << 3;

// The self-describing encoding of `schema` (layout above). Invalid for a type
// that cannot be written (a null type pointer, a dictionary whose index is not
// an integer, nesting deeper than kMaxNestingDepth).
Result<std::string> EncodeSchema(const Schema& schema);
// Decodes an encoded schema from untrusted bytes: all `size` bytes must be
// consumed, every type must pass ValidateType, and field paths name the error.
Result<SchemaPtr> DecodeSchema(const uint8_t* data, int64_t size);

}  // namespace ferry::flow::wire
