// JSON string literals written by hand where a JSON library's document model
// would reorder keys or cost an allocation per value.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry::json_text {

// Length of the well-formed UTF-8 sequence that starts at p (whose first byte
// is >= 0x80), or 0 when it is not well formed (RFC 3629: no overlong forms,
// no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(const unsigned char* p, const unsigned char* end);

// Appends `text` as a quoted JSON string, escaped the way nlohmann::json's
// dump() escapes (quote, backslash, \b \f \n \r \t, other control characters
// as \u00xx, UTF-8 kept as it is). Returns false when `text` is not valid
// UTF-8; the bytes are then appended unchanged and the caller decides whether
// that is acceptable or it writes the value another way.
bool AppendQuoted(std::string_view text, std::string* out);

}  // namespace ferry::json_text
