// Base64url (RFC 4648 section 5) without padding: the text form of API tokens
// and page tokens.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ferry::fleet::server_internal {

std::string Base64UrlEncode(std::string_view data);  // no padding
// nullopt on any character outside the alphabet, padding or an impossible length.
std::optional<std::string> Base64UrlDecode(std::string_view text);

}  // namespace ferry::fleet::server_internal
