#include "ferry/base/hash.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

namespace ferry {

namespace {

std::string Hex(const unsigned char* digest, unsigned int length) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(size_t{length} * 2);
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xf];
  }
  return out;
}

[[noreturn]] void OpenSslFailed() {
  // Only when OpenSSL cannot allocate a digest context: nothing sane to return.
  std::fputs("ferry: SHA-256 failed inside OpenSSL\n", stderr);
  std::abort();
}

}  // namespace

Sha256Stream::Sha256Stream() : context_(EVP_MD_CTX_new()) {
  if (context_ == nullptr ||
      EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(context_), EVP_sha256(), nullptr) != 1) {
    OpenSslFailed();
  }
}

Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(context_)); }

void Sha256Stream::Update(std::string_view data) {
  if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(context_), data.data(), data.size()) != 1) {
    OpenSslFailed();
  }
}

std::string Sha256Stream::FinishHex() {
  auto* context = static_cast<EVP_MD_CTX*>(context_);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context, digest, &length) != 1 ||
      EVP_DigestInit_ex(context, EVP_sha256(), nullptr) != 1) {
    OpenSslFailed();
  }
  return Hex(digest, length);
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    OpenSslFailed();
  }
  return Hex(digest, length);
}

}  // namespace ferry
