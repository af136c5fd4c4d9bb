// Taking a request apart before any handler sees it: the route pattern its
// path matches, its query, and the checks on headers, bodies, names and
// integers that every handler shares.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::fleet::server_internal {

// Matches a request path against a route pattern in which each "{}" stands
// for one or more characters other than '/' and ':'; appends what each "{}"
// matched to `captures`. Linear and non-recursive.
bool MatchPath(std::string_view pattern, std::string_view path, std::vector<std::string>* captures);

// The query of a request target ("/path?a=1&label=k=v"): pairs split at the
// first '=', percent-decoded ('+' is a space). Malformed escapes stay as written.
std::multimap<std::string, std::string> ParseQuery(std::string_view target);

// True when no array/object nests deeper than `max_depth` (strings are
// skipped). Keeps hostile bodies from exhausting the stack in recursive
// JSON code; the scan itself is iterative.
bool JsonNestingWithin(std::string_view body, int max_depth);
// 1..255 printable ASCII characters (0x20..0x7e).
bool ValidIdempotencyKey(std::string_view key);
// "application/json", optionally with parameters ("; charset=utf-8"), any case.
bool IsJsonContentType(std::string_view content_type);
// Names of tenants, teams, users and nodes: 1..128 of [A-Za-z0-9._-], not starting with '.'.
bool ValidName(std::string_view name);
// What ValidName asks for, in the words of an error message.
inline constexpr std::string_view kNameRule =
    "1 to 128 characters of A-Z a-z 0-9 . _ - (not starting with .)";
// A whole decimal integer (optional '-'), nothing else; nullopt otherwise.
std::optional<int64_t> ParseInt(std::string_view text);

}  // namespace ferry::fleet::server_internal
