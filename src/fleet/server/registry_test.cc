#include "fleet/server/registry.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace ferry::fleet::server_internal {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'c');

// A registry speaking just enough of the distribution API: one public
// image, one behind basic auth, one behind a token realm.
class FakeRegistry {
 public:
  FakeRegistry() {
    server_.Get("/v2/app/manifests/(1|sha256:c{64})", [](const httplib::Request& req,
                                                         httplib::Response& res) {
      if (req.get_header_value("Accept").find("application/vnd.oci.image.index.v1+json") ==
          std::string::npos) {
        res.status = 400;
        return;
      }
      res.set_header("Docker-Content-Digest", kDigest);
    });
    server_.Get("/v2/private/manifests/1", [](const httplib::Request& req, httplib::Response& res) {
      // "user:secret" in base64.
      if (req.get_header_value("Authorization") != "Basic dXNlcjpzZWNyZXQ=") {
        res.status = 401;
        return;
      }
      res.set_header("Docker-Content-Digest", kDigest);
    });
    server_.Get("/v2/tok/manifests/1", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value("Authorization") != "Bearer pull-token") {
        res.status = 401;
        res.set_header("WWW-Authenticate", "Bearer realm=\"http://127.0.0.1:" +
                                               std::to_string(port_) + "/token\",service=\"fake\"");
        return;
      }
      res.set_header("Docker-Content-Digest", kDigest);
    });
    server_.Get("/token", [](const httplib::Request& req, httplib::Response& res) {
      if (req.get_param_value("scope") != "repository:tok:pull" ||
          req.get_param_value("service") != "fake") {
        res.status = 403;
        return;
      }
      res.set_content(R"({"token": "pull-token"})", "application/json");
    });
    server_.Get("/v2/nodigest/manifests/1", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"schemaVersion\": 2}", "application/vnd.oci.image.manifest.v1+json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~FakeRegistry() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

ImageRef Ref(const std::string& text) {
  Result<ImageRef> ref = ParseImageRef(text);
  EXPECT_TRUE(ref.ok()) << text;
  return ref.ok() ? *ref : ImageRef{};
}

TEST(RegistryTest, ResolvesTagsToDigests) {
  FakeRegistry registry;
  const std::string host = "127.0.0.1:" + std::to_string(registry.port());
  ImageResolver resolver{RegistryConfig{}};
  EXPECT_EQ(resolver.SchemeFor(Ref(host + "/app:1")), "http");  // loopback
  EXPECT_EQ(resolver.SchemeFor(Ref("registry.example.com/app:1")), "https");

  ImageResolution found = resolver.Resolve(Ref(host + "/app:1"));
  EXPECT_EQ(found.outcome, ImageResolution::Outcome::kResolved) << found.message;
  EXPECT_EQ(found.digest, kDigest);

  ImageResolution missing = resolver.Resolve(Ref(host + "/app:2"));
  EXPECT_EQ(missing.outcome, ImageResolution::Outcome::kNotFound);
  EXPECT_NE(missing.message.find("/app:2"), std::string::npos) << missing.message;

  // A digest in the reference must be the registry's.
  ImageResolution pinned = resolver.Resolve(Ref(host + "/app:1@" + kDigest));
  EXPECT_EQ(pinned.outcome, ImageResolution::Outcome::kResolved) << pinned.message;

  // Without the header, the manifest's own bytes give the digest.
  ImageResolution hashed = resolver.Resolve(Ref(host + "/nodigest:1"));
  EXPECT_EQ(hashed.outcome, ImageResolution::Outcome::kResolved) << hashed.message;
  EXPECT_EQ(hashed.digest.rfind("sha256:", 0), 0u);

  ImageResolution token = resolver.Resolve(Ref(host + "/tok:1"));
  EXPECT_EQ(token.outcome, ImageResolution::Outcome::kResolved) << token.message;
}

TEST(RegistryTest, BasicAuthFromTheConfigOnly) {
  FakeRegistry registry;
  const std::string host = "127.0.0.1:" + std::to_string(registry.port());
  ImageResolution denied = ImageResolver{RegistryConfig{}}.Resolve(Ref(host + "/private:1"));
  EXPECT_EQ(denied.outcome, ImageResolution::Outcome::kDenied);
  EXPECT_NE(denied.message.find("no credentials"), std::string::npos) << denied.message;

  RegistryConfig config;
  config.registries.push_back({host, false, "user", "secret"});
  ImageResolution allowed = ImageResolver{config}.Resolve(Ref(host + "/private:1"));
  EXPECT_EQ(allowed.outcome, ImageResolution::Outcome::kResolved) << allowed.message;

  config.registries[0].password = "wrong";
  ImageResolution refused = ImageResolver{config}.Resolve(Ref(host + "/private:1"));
  EXPECT_EQ(refused.outcome, ImageResolution::Outcome::kDenied);
  EXPECT_EQ(refused.message.find("wrong"), std::string::npos);  // no secret in messages
}

TEST(RegistryTest, UnreachableRegistry) {
  int port = 0;
  {
    FakeRegistry gone;
    port = gone.port();
  }
  RegistryConfig config;
  config.timeout_ms = 2'000;
  ImageResolution result =
      ImageResolver{config}.Resolve(Ref("127.0.0.1:" + std::to_string(port) + "/app:1"));
  EXPECT_EQ(result.outcome, ImageResolution::Outcome::kUnreachable);
  EXPECT_NE(result.message.find("cannot be reached"), std::string::npos) << result.message;
}

TEST(RegistryTest, LoadsTheConfig) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ferry-registry-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "password") << "s3cret\n"; }
  auto write = [&](const std::string& text) {
    std::ofstream(dir / "registries.yaml") << text;
    return LoadRegistryConfig((dir / "registries.yaml").string());
  };
  setenv("FERRY_REGISTRY_TEST_USER", "robot", 1);
  Result<RegistryConfig> config = write(
      "registries:\n"
      "  - host: registry.internal:5000\n"
      "    insecure: true\n"
      "    username_env: FERRY_REGISTRY_TEST_USER\n"
      "    password_file: " +
      (dir / "password").string() +
      "\n"
      "timeout_ms: 5000\n");
  ASSERT_TRUE(config.ok()) << config.status().message();
  ASSERT_EQ(config->registries.size(), 1u);
  EXPECT_EQ(config->registries[0].username, "robot");
  EXPECT_EQ(config->registries[0].password, "s3cret");
  EXPECT_EQ(ImageResolver{*config}.SchemeFor(Ref("registry.internal:5000/app:1")), "http");

  EXPECT_FALSE(write("registries:\n  - host: r.example.com\n    password: inline\n").ok());
  EXPECT_FALSE(write("registries:\n  - host: 'not a host'\n").ok());
  EXPECT_FALSE(write("registries:\n  - host: r.example.com\n    username_env: "
                     "FERRY_REGISTRY_TEST_USER\n")
                   .ok());
  EXPECT_FALSE(write("registries:\n  - host: r.example.com\n  - host: r.example.com\n").ok());
  EXPECT_FALSE(write("timeout_ms: 0\n").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::fleet::server_internal
