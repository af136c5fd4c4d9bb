// Resolving a job's container image to a manifest digest at submission
// (docs/fleet-images.md): the OCI distribution API (Docker Registry HTTP API
// v2), `HEAD /v2/<repository>/manifests/<tag>` and its Docker-Content-Digest
// header, anonymously, with basic auth, or with a bearer token fetched from
// the realm a 401 names. Registry credentials come from the server's
// registry config only; they are never logged nor put in a message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/image_ref.h"

namespace ferry::fleet::server_internal {

struct RegistryEntry {
  std::string host;       // host[:port] as image references name it
  bool insecure = false;  // plain http (loopback registries always are)
  std::string username;   // with password: basic auth (and for token realms)
  std::string password;
};

struct RegistryConfig {
  std::vector<RegistryEntry> registries;
  std::string ca_file;          // PEM CAs for https registries; empty: the system's
  int64_t timeout_ms = 10'000;  // connect and read, per request
  // Registries not listed are reached anonymously over https (loopback: http).
};

// Reads the YAML registry config (--registry-config). Secrets are given as
// `username_file`/`password_file` or `_env`, never inline.
Result<RegistryConfig> LoadRegistryConfig(const std::string& path);

struct ImageResolution {
  enum class Outcome {
    kResolved,     // digest is set
    kNotFound,     // the registry has no such repository or tag
    kDenied,       // the registry refused the (configured or missing) credentials
    kUnreachable,  // no answer, TLS failure, 5xx, or an answer that is not a registry's
  };
  Outcome outcome = Outcome::kUnreachable;
  std::string digest;   // "sha256:<hex>"
  std::string message;  // for the user; never holds a credential
};

// Thread-safe: each call makes its own connections.
class ImageResolver {
 public:
  explicit ImageResolver(RegistryConfig config) : config_(std::move(config)) {}

  ImageResolution Resolve(const ImageRef& image) const;

  // "http" for loopback registries and those marked insecure, else "https".
  std::string SchemeFor(const ImageRef& image) const;

 private:
  const RegistryEntry* EntryFor(const std::string& host) const;
  RegistryConfig config_;
};

}  // namespace ferry::fleet::server_internal
