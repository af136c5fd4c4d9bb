// The registry client behind image resolution (registry.h).
#include "fleet/server/registry.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ferry/base/hash.h"
#include "ferry/fleet/model.h"
#include "fleet/config/config_reader.h"

namespace ferry::fleet::server_internal {
namespace {

using config::ConfigReader;
using yaml::Ref;

// Every manifest kind a runtime can pull: OCI and Docker, single images and
// multi-platform indexes (the runtime picks its platform from an index).
constexpr const char* kManifestAccept =
    "application/vnd.oci.image.index.v1+json, "
    "application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.docker.distribution.manifest.v2+json";

constexpr size_t kMaxManifestBytes = size_t{4} << 20;

Status ReadEntry(ConfigReader& p, const Ref& ref, const std::string& path, RegistryEntry* e) {
  bool have_user = false;
  bool have_password = false;
  FERRY_RETURN_NOT_OK(p.Mapping(
      ref, path,
      {"host", "insecure", "username_file", "username_env", "password_file", "password_env"},
      [&](const std::string& key, const Ref& value, const std::string& at) -> Status {
        if (key == "host") return p.String(value, at, &e->host);
        if (key == "insecure") return p.Bool(value, at, &e->insecure);
        const bool from_file = key.size() > 5 && key.compare(key.size() - 5, 5, "_file") == 0;
        if (key.rfind("username", 0) == 0) {
          if (have_user) return p.Error(value, at, "give username_file or _env, not both");
          have_user = true;
          return config::ReadSecret(p, value, at, from_file, &e->username);
        }
        if (have_password) return p.Error(value, at, "give password_file or _env, not both");
        have_password = true;
        return config::ReadSecret(p, value, at, from_file, &e->password);
      }));
  // The host must be what a reference names: check it through the reference grammar.
  if (e->host.empty() || !ParseImageRef(e->host + "/x").ok() ||
      ParseImageRef(e->host + "/x")->registry != e->host) {
    return p.Error(ref, path + ".host",
                   "must be a registry host[:port], e.g. registry.example.com");
  }
  if (have_user != have_password) {
    return p.Error(ref, path, "username and password go together (or neither: anonymous)");
  }
  return Status::OK();
}

struct Answer {
  int status = 0;  // 0: no answer
  std::string error;
  httplib::Headers headers;
  std::string body;
};

struct Url {
  std::string scheme_host_port;
  std::string path;
};

bool SplitUrl(const std::string& url, Url* out) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return false;
  const std::string name = url.substr(0, scheme);
  if (name != "http" && name != "https") return false;
  const size_t path = url.find('/', scheme + 3);
  out->scheme_host_port = url.substr(0, path);
  out->path = path == std::string::npos ? "/" : url.substr(path);
  return out->scheme_host_port.size() > scheme + 3;
}

// The parameters of a `WWW-Authenticate: Bearer k="v",...` challenge; empty
// when it is not a Bearer challenge.
std::map<std::string, std::string> BearerChallenge(const std::string& header) {
  std::map<std::string, std::string> out;
  if (header.size() < 7) return out;
  std::string scheme = header.substr(0, 6);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (scheme != "bearer" || header[6] != ' ') return out;
  size_t at = 7;
  while (at < header.size()) {
    while (at < header.size() && (header[at] == ' ' || header[at] == ',')) ++at;
    const size_t equals = header.find('=', at);
    if (equals == std::string::npos) break;
    const std::string key = header.substr(at, equals - at);
    std::string value;
    at = equals + 1;
    if (at < header.size() && header[at] == '"') {
      const size_t close = header.find('"', at + 1);
      if (close == std::string::npos) break;
      value = header.substr(at + 1, close - at - 1);
      at = close + 1;
    } else {
      const size_t comma = header.find(',', at);
      value = header.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      at = comma == std::string::npos ? header.size() : comma;
    }
    out[key] = value;
  }
  return out;
}

}  // namespace

Result<RegistryConfig> LoadRegistryConfig(const std::string& path) {
  FERRY_ASSIGN_OR_RAISE(std::string config_text,
                        config::ReadConfigText(path, "the registry config"));
  ConfigReader p(path);
  yaml::Reporter reporter(path);
  FERRY_ASSIGN_OR_RAISE(yaml::Document document, yaml::Parse(config_text, reporter));
  RegistryConfig out;
  FERRY_RETURN_NOT_OK(p.Mapping(
      document.root(), "", {"registries", "ca_file", "timeout_ms"},
      [&](const std::string& key, const Ref& value, const std::string& at) -> Status {
        if (key == "registries") {
          return config::ReadList<RegistryEntry>(p, value, at, &out.registries, ReadEntry);
        }
        if (key == "ca_file") return p.String(value, at, &out.ca_file);
        return p.Int64(value, at, &out.timeout_ms);
      }));
  if (out.timeout_ms <= 0 || out.timeout_ms > 300'000) {
    return Status::Invalid(path + ": timeout_ms must be between 1 and 300000");
  }
  for (size_t i = 0; i < out.registries.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (out.registries[i].host == out.registries[j].host) {
        return Status::Invalid(path + ": registries: " + out.registries[i].host +
                               " is listed twice");
      }
    }
  }
  return out;
}

const RegistryEntry* ImageResolver::EntryFor(const std::string& host) const {
  for (const RegistryEntry& entry : config_.registries) {
    if (entry.host == host) return &entry;
  }
  return nullptr;
}

std::string ImageResolver::SchemeFor(const ImageRef& image) const {
  const RegistryEntry* entry = EntryFor(image.registry);
  return image.IsLoopback() || (entry != nullptr && entry->insecure) ? "http" : "https";
}

ImageResolution ImageResolver::Resolve(const ImageRef& image) const {
  using Outcome = ImageResolution::Outcome;
  const RegistryEntry* entry = EntryFor(image.registry);
  const std::string base = SchemeFor(image) + "://" + image.registry;
  const std::string shown = image.registry + "/" + image.repository +
                            (image.digest.empty() ? ":" + image.tag : "@" + image.digest);
  const auto timeout = std::chrono::milliseconds(config_.timeout_ms);

  auto request = [&](const std::string& scheme_host_port, const std::string& method,
                     const std::string& path, const httplib::Headers& headers,
                     const std::string& bearer, bool basic) {
    httplib::Client client(scheme_host_port);
    client.set_connection_timeout(timeout);
    client.set_read_timeout(timeout);
    client.set_keep_alive(false);
    client.set_follow_location(true);
    if (!config_.ca_file.empty()) client.set_ca_cert_path(config_.ca_file);
    if (!bearer.empty()) {
      client.set_bearer_token_auth(bearer);
    } else if (basic && entry != nullptr && !entry->username.empty()) {
      client.set_basic_auth(entry->username, entry->password);
    }
    Answer answer;
    httplib::Result result =
        method == "HEAD" ? client.Head(path, headers) : client.Get(path, headers);
    if (!result) {
      answer.error = httplib::to_string(result.error());
      return answer;
    }
    answer.status = result->status;
    answer.headers = result->headers;
    if (result->body.size() <= kMaxManifestBytes) answer.body = result->body;
    return answer;
  };

  const std::string manifest_path = "/v2/" + image.repository + "/manifests/" + image.reference();
  const httplib::Headers accept = {{"Accept", kManifestAccept}, {"User-Agent", "ferry-server"}};
  std::string bearer;
  Answer answer = request(base, "HEAD", manifest_path, accept, bearer, true);
  if (answer.status == 401) {
    // A token realm: ask it for a pull token for this repository (with the
    // configured credentials, if any), then ask the registry again.
    auto it = answer.headers.find("WWW-Authenticate");
    std::map<std::string, std::string> challenge = it == answer.headers.end()
                                                       ? std::map<std::string, std::string>{}
                                                       : BearerChallenge(it->second);
    Url realm;
    if (!challenge.empty() && SplitUrl(challenge["realm"], &realm)) {
      httplib::Params params;
      if (!challenge["service"].empty()) params.emplace("service", challenge["service"]);
      params.emplace("scope", "repository:" + image.repository + ":pull");
      const std::string query = httplib::detail::params_to_query_str(params);
      Answer token =
          request(realm.scheme_host_port, "GET",
                  realm.path + (realm.path.find('?') == std::string::npos ? "?" : "&") + query,
                  {{"User-Agent", "ferry-server"}}, "", true);
      if (token.status == 200) {
        nlohmann::json body = nlohmann::json::parse(token.body, nullptr, false);
        if (body.is_object()) {
          for (const char* key : {"token", "access_token"}) {
            if (body.contains(key) && body[key].is_string()) {
              bearer = body[key].get<std::string>();
              break;
            }
          }
        }
      }
      if (!bearer.empty()) answer = request(base, "HEAD", manifest_path, accept, bearer, false);
    }
  }
  ImageResolution out;
  if (answer.status == 0) {
    out.outcome = Outcome::kUnreachable;
    out.message = "the registry " + base + " cannot be reached (" + answer.error + ")";
    return out;
  }
  if (answer.status == 404) {
    out.outcome = Outcome::kNotFound;
    out.message = "the registry has no image " + shown + " (unknown repository or tag)";
    return out;
  }
  if (answer.status == 401 || answer.status == 403) {
    out.outcome = Outcome::kDenied;
    out.message = "the registry " + image.registry + " refused access to " + shown + " (HTTP " +
                  std::to_string(answer.status) +
                  (entry != nullptr && !entry->username.empty()
                       ? "; check the credentials of the server's registry config)"
                       : "; the server's registry config has no credentials for it)");
    return out;
  }
  if (answer.status != 200) {
    out.outcome = Outcome::kUnreachable;
    out.message = "the registry " + base + " answered HTTP " + std::to_string(answer.status) +
                  " for " + shown;
    return out;
  }
  std::string digest;
  if (auto it = answer.headers.find("Docker-Content-Digest"); it != answer.headers.end()) {
    digest = it->second;
  } else {
    // Some registries only send the header with GET: hash the manifest itself.
    Answer body = request(base, "GET", manifest_path, accept, bearer, bearer.empty());
    if (body.status == 200 && !body.body.empty()) digest = "sha256:" + Sha256Hex(body.body);
  }
  if (digest.rfind("sha256:", 0) != 0 || !CheckSha256(std::string_view(digest).substr(7)).empty()) {
    out.outcome = Outcome::kUnreachable;
    out.message = "the registry " + base + " sent no usable sha256 digest for " + shown;
    return out;
  }
  if (!image.digest.empty() && digest != image.digest) {
    out.outcome = Outcome::kNotFound;
    out.message = "the registry's manifest for " + shown + " has the digest " + digest;
    return out;
  }
  out.outcome = Outcome::kResolved;
  out.digest = digest;
  return out;
}

}  // namespace ferry::fleet::server_internal
