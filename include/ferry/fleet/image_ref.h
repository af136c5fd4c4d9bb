// Container image references as a job spec names them
// (docs/fleet-images.md): `host[:port]/path[:tag][@sha256:<hex>]`, always
// with the registry host, so a job never depends on a runtime's default
// registry or search list. Shared by the spec validation, the server's
// registry client (which resolves a tag to a digest) and the agent (which
// runs the image by digest). Plain value types; thread-compatible.
#pragma once

#include <string>
#include <string_view>

#include "ferry/base/status.h"

namespace ferry::fleet {

struct ImageRef {
  static constexpr size_t kMaxChars = 512;  // the whole reference
  static constexpr size_t kMaxTagChars = 128;

  std::string registry;    // "registry.example.com", "localhost:5000", "[::1]:5000"
  std::string repository;  // "team/trainer": lower-case path components
  std::string tag;         // "1.4", or empty when only a digest was given
  std::string digest;      // "sha256:<64 hex>", or empty

  // What the manifest is asked for by: the digest when given, else the tag.
  const std::string& reference() const { return digest.empty() ? tag : digest; }
  // registry/repository@digest (empty digest: registry/repository:tag).
  std::string Pinned(std::string_view with_digest) const;
  // True for localhost, 127.0.0.0/8 and [::1] registries (on any port).
  bool IsLoopback() const;
};

// Parses and checks a reference. A reference without tag or digest gets the
// tag "latest". Errors read as a field detail: "must name its registry
// (host[:port]/path[:tag]), e.g. registry.example.com/team/app:1".
Result<ImageRef> ParseImageRef(std::string_view text);

}  // namespace ferry::fleet
