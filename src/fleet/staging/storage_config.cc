// The agent's storage configuration (staging.h): which S3 endpoints serve
// which buckets for which tenants, with credentials read from files or the
// environment; which directories file:// sources may come from.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ferry/fleet/staging.h"
#include "fleet/config/config_reader.h"

namespace ferry::fleet {
namespace {

using config::ConfigReader;
using config::ReadSecret;
using yaml::Ref;

Status ReadEndpoint(ConfigReader& p, const Ref& ref, const std::string& path, S3Endpoint* e) {
  bool have_key = false;
  bool have_secret = false;
  FERRY_RETURN_NOT_OK(p.Mapping(
      ref, path,
      {"name", "endpoint", "region", "buckets", "tenants", "access_key_id_file",
       "access_key_id_env", "secret_access_key_file", "secret_access_key_env"},
      [&](const std::string& key, const Ref& value, const std::string& at) -> Status {
        if (key == "name") return p.String(value, at, &e->name);
        if (key == "endpoint") return p.String(value, at, &e->endpoint);
        if (key == "region") return p.String(value, at, &e->region);
        if (key == "buckets") return p.StringList(value, at, &e->buckets);
        if (key == "tenants") return p.StringList(value, at, &e->tenants);
        const bool from_file = key.size() > 5 && key.compare(key.size() - 5, 5, "_file") == 0;
        if (key.rfind("access_key_id", 0) == 0) {
          if (have_key) return p.Error(value, at, "give access_key_id_file or _env, not both");
          have_key = true;
          return ReadSecret(p, value, at, from_file, &e->access_key_id);
        }
        if (have_secret) return p.Error(value, at, "give secret_access_key_file or _env, not both");
        have_secret = true;
        return ReadSecret(p, value, at, from_file, &e->secret_access_key);
      }));
  if (e->endpoint.rfind("http://", 0) != 0 && e->endpoint.rfind("https://", 0) != 0) {
    return p.Error(ref, path + ".endpoint", "must be an http:// or https:// URL");
  }
  while (!e->endpoint.empty() && e->endpoint.back() == '/') e->endpoint.pop_back();
  if (have_key != have_secret) {
    return p.Error(ref, path,
                   "access key and secret key go together (or neither, for anonymous access)");
  }
  if (e->region.empty()) return p.Error(ref, path + ".region", "must not be empty");
  if (e->name.empty()) e->name = e->endpoint;
  return Status::OK();
}

}  // namespace

bool ParseS3Uri(const std::string& uri, std::string* bucket, std::string* key) {
  constexpr std::string_view kScheme = "s3://";
  if (uri.compare(0, kScheme.size(), kScheme) != 0) return false;
  const size_t slash = uri.find('/', kScheme.size());
  if (slash == std::string::npos || slash == kScheme.size()) return false;
  *bucket = uri.substr(kScheme.size(), slash - kScheme.size());
  *key = uri.substr(slash + 1);
  return true;
}

Result<StorageConfig> LoadStorageConfig(const std::string& path) {
  FERRY_ASSIGN_OR_RAISE(std::string config_text,
                        config::ReadConfigText(path, "the storage config"));
  ConfigReader p(path);
  yaml::Reporter reporter(path);
  FERRY_ASSIGN_OR_RAISE(yaml::Document document, yaml::Parse(config_text, reporter));
  StorageConfig out;
  FERRY_RETURN_NOT_OK(
      p.Mapping(document.root(), "",
                {"s3", "file_roots", "allow_http", "ca_file", "connect_timeout_ms",
                 "stall_timeout_ms", "max_bytes_per_second"},
                [&](const std::string& key, const Ref& value, const std::string& at) -> Status {
                  if (key == "s3") return ReadList<S3Endpoint>(p, value, at, &out.s3, ReadEndpoint);
                  if (key == "file_roots") return p.StringList(value, at, &out.file_roots);
                  if (key == "allow_http") return p.Bool(value, at, &out.allow_http);
                  if (key == "ca_file") return p.String(value, at, &out.ca_file);
                  if (key == "connect_timeout_ms")
                    return p.Int64(value, at, &out.connect_timeout_ms);
                  if (key == "max_bytes_per_second") {
                    std::string text;
                    FERRY_RETURN_NOT_OK(p.String(value, at, &text));
                    FERRY_ASSIGN_OR_RAISE(out.max_bytes_per_second, ParseByteSize(text));
                    return Status::OK();
                  }
                  return p.Int64(value, at, &out.stall_timeout_ms);
                }));
  for (std::string& root : out.file_roots) {
    if (root.empty() || root.front() != '/') {
      return Status::Invalid(path + ": file_roots: '" + root + "' is not an absolute path");
    }
    while (root.size() > 1 && root.back() == '/') root.pop_back();
  }
  if (out.connect_timeout_ms <= 0 || out.stall_timeout_ms <= 0) {
    return Status::Invalid(path + ": timeouts must be above 0");
  }
  return out;
}

}  // namespace ferry::fleet
