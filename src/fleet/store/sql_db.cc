// Row accessors and URL redaction shared by both drivers.
#include "fleet/store/sql_db.h"

#include <cstdlib>
#include <type_traits>

namespace ferry::fleet::sql {

bool Row::IsNull(size_t i) const {
  return i >= values_.size() || std::holds_alternative<std::monostate>(values_[i]);
}

int64_t Row::Int(size_t i) const {
  if (i >= values_.size()) return 0;
  return std::visit(
      [](const auto& v) -> int64_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return v;
        } else if constexpr (std::is_same_v<T, double>) {
          return static_cast<int64_t>(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          // PostgreSQL NUMERIC (e.g. SUM of BIGINT) arrives as text.
          return v.find_first_of(".eE") == std::string::npos
                     ? std::strtoll(v.c_str(), nullptr, 10)
                     : static_cast<int64_t>(std::strtod(v.c_str(), nullptr));
        } else {
          return 0;
        }
      },
      values_[i]);
}

double Row::Double(size_t i) const {
  if (i >= values_.size()) return 0;
  return std::visit(
      [](const auto& v) -> double {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return static_cast<double>(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return v;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return std::strtod(v.c_str(), nullptr);
        } else {
          return 0;
        }
      },
      values_[i]);
}

std::string Row::Text(size_t i) const {
  if (i >= values_.size()) return {};
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, Blob>) {
          return v.bytes;
        } else {
          return {};
        }
      },
      values_[i]);
}

std::optional<int64_t> Row::OptInt(size_t i) const {
  if (IsNull(i)) return std::nullopt;
  return Int(i);
}

std::string RedactUrl(std::string_view url) {
  std::string out(url);
  // scheme://user:password@host
  size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    size_t start = scheme + 3;
    size_t at = out.find('@', start);
    size_t slash = out.find('/', start);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
      size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) {
        out.replace(colon + 1, at - colon - 1, "***");
      }
    }
  }
  // password=... as a query parameter or a key=value pair.
  for (size_t pos = out.find("password="); pos != std::string::npos;
       pos = out.find("password=", pos + 1)) {
    size_t value = pos + 9;
    size_t end = out.find_first_of("& ", value);
    if (end == std::string::npos) end = out.size();
    out.replace(value, end - value, "***");
  }
  return out;
}

}  // namespace ferry::fleet::sql
