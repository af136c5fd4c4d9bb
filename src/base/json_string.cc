#include "ferry/base/json_string.h"

namespace ferry::json_text {

size_t Utf8SequenceLength(const unsigned char* p, const unsigned char* end) {
  const unsigned char lead = p[0];
  size_t length = 0;
  unsigned char low = 0x80;  // bounds of the second byte
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (static_cast<size_t>(end - p) < length) return 0;
  if (p[1] < low || p[1] > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  }
  return length;
}

bool AppendQuoted(std::string_view text, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  bool valid = true;
  out->push_back('"');
  const auto* run = p;  // start of the bytes copied as they are
  while (p < end) {
    const unsigned char c = *p;
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++p;
      continue;
    }
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(p, end);
      if (length == 0) valid = false;
      p += length == 0 ? 1 : length;
      continue;
    }
    out->append(reinterpret_cast<const char*>(run), static_cast<size_t>(p - run));
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\r':
        out->append("\\r");
        break;
      default: {
        const char escaped[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
        out->append(escaped, sizeof(escaped));
      }
    }
    run = ++p;
  }
  out->append(reinterpret_cast<const char*>(run), static_cast<size_t>(p - run));
  out->push_back('"');
  return valid;
}

}  // namespace ferry::json_text
