#include "ferry/base/hash.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

namespace ferry {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    // Only when OpenSSL cannot allocate a digest context: nothing sane to return.
    std::fputs("ferry: SHA-256 failed inside OpenSSL\n", stderr);
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(size_t{length} * 2);
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace ferry
