// Content hashes every part uses: token hashes in the fleet store, config
// file digests, content-addressed names. Thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ferry {

// The SHA-256 of `data` as 64 lower-case hex digits.
std::string Sha256Hex(std::string_view data);

// A SHA-256 fed in pieces (files too large to hold in memory). One object
// per thread; after FinishHex it starts over.
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;

  void Update(std::string_view data);
  // The digest of everything since construction (or the last FinishHex).
  std::string FinishHex();

 private:
  void* context_;  // EVP_MD_CTX, kept out of this header
};

}  // namespace ferry
