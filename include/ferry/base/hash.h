// Content hashes every part uses: token hashes in the fleet store, config
// file digests, content-addressed names. Thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ferry {

// The SHA-256 of `data` as 64 lower-case hex digits.
std::string Sha256Hex(std::string_view data);

}  // namespace ferry
