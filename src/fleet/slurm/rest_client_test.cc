// The REST client's HTTP side: version probing, the JWT headers and error
// mapping, against a local HTTP server that answers like slurmrestd. Debian
// 12's Slurm has no auth/jwt plugin, so the real-daemon tests
// (slurm_cluster_test.cc) cover the UNIX socket only; this covers
// http:// with a token and the data_parser versions no local daemon serves.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "ferry/fleet/slurm.h"

namespace ferry::fleet::slurm {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(FERRY_SLURM_TESTDATA) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// An HTTP server on 127.0.0.1 serving the given versions' paths.
class FakeRestd {
 public:
  FakeRestd(std::vector<int> versions, bool openapi_document) {
    if (openapi_document) {
      server_.Get("/openapi/v3", [versions](const httplib::Request&, httplib::Response& res) {
        nlohmann::json paths = nlohmann::json::object();
        for (int version : versions) {
          paths["/slurm/v0.0." + std::to_string(version) + "/ping"] = nlohmann::json::object();
          paths["/slurm/v0.0." + std::to_string(version) + "/jobs"] = nlohmann::json::object();
        }
        res.set_content(nlohmann::json{{"paths", paths}}.dump(), "application/json");
      });
    }
    for (int version : versions) {
      const std::string prefix = "/slurm/v0.0." + std::to_string(version);
      server_.Get(prefix + "/ping", [this](const httplib::Request& req, httplib::Response& res) {
        if (!Authorized(req, res)) return;
        res.set_content(
            R"js({"meta": {"slurm": {"release": "24.05.1"}}, "errors": [],
                  "pings": [{"hostname": "ctl", "pinged": "UP", "responding": true}]})js",
            "application/json");
      });
      server_.Get(prefix + "/nodes", [this](const httplib::Request& req, httplib::Response& res) {
        if (!Authorized(req, res)) return;
        std::lock_guard<std::mutex> lock(mutex_);
        res.set_content(nodes_body_, "application/json");
      });
      server_.Post(prefix + "/job/submit", [this](const httplib::Request& req,
                                                  httplib::Response& res) {
        if (!Authorized(req, res)) return;
        std::lock_guard<std::mutex> lock(mutex_);
        submitted_.push_back(req.body);
        res.set_content(R"js({"job_id": 77, "errors": [], "warnings": []})js", "application/json");
      });
    }
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // bind_to_any_port listens already: early connections wait in the backlog.
  }
  ~FakeRestd() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void set_nodes_body(std::string body) {
    std::lock_guard<std::mutex> lock(mutex_);
    nodes_body_ = std::move(body);
  }
  std::vector<std::string> submitted() {
    std::lock_guard<std::mutex> lock(mutex_);
    return submitted_;
  }

 private:
  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("X-SLURM-USER-NAME") == "ferry" &&
        req.get_header_value("X-SLURM-USER-TOKEN") == "secret-jwt") {
      return true;
    }
    res.status = 401;
    res.set_content("Authentication failure", "text/plain");
    return false;
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  std::string nodes_body_ = Fixture("nodes_v0.0.40.json");  // guarded by mutex_
  std::vector<std::string> submitted_;                      // guarded by mutex_
};

RestOptions Jwt(const std::string& url, const std::string& token = "secret-jwt") {
  RestOptions options;
  options.endpoint = url;
  options.user_name = "ferry";
  options.token = token;
  options.timeout_s = 5;
  return options;
}

TEST(SlurmRestHttp, ProbesTheNewestKnownVersionAndSendsTheJwt) {
  FakeRestd restd({38, 41, 99}, /*openapi_document=*/true);
  auto client = MakeRestClient(Jwt(restd.url()));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto probe = (*client)->Probe();
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_EQ(probe->version, ApiVersion{41});  // v0.0.99 is served but unknown here
  EXPECT_EQ(probe->served, (std::vector<ApiVersion>{{38}, {41}, {99}}));
  EXPECT_EQ(probe->slurm_release, "24.05.1");
  EXPECT_TRUE(probe->controller_up);

  auto nodes = (*client)->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ(nodes->size(), 2u);

  SubmitRequest request;
  request.name = "ferry:1:0";
  request.nodes = 2;
  request.gpus_per_node = 2;
  request.working_dir = "/srv/job";
  request.environment = {{"FERRY_JOB_ID", "1"}};
  request.script = "#!/bin/sh\ntrue\n";
  auto id = (*client)->Submit(request);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, 77);
  ASSERT_EQ(restd.submitted().size(), 1u);
  auto body = nlohmann::json::parse(restd.submitted()[0]);
  EXPECT_EQ(body["job"]["tres_per_node"], "gres/gpu:2");  // the data_parser body
  EXPECT_EQ(body["job"]["environment"], nlohmann::json::array({"FERRY_JOB_ID=1"}));
}

TEST(SlurmRestHttp, WithoutTheDocumentPingsEachVersion) {
  FakeRestd restd({37, 38}, /*openapi_document=*/false);
  auto client = MakeRestClient(Jwt(restd.url()));
  ASSERT_TRUE(client.ok());
  auto probe = (*client)->Probe();
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_EQ(probe->version, ApiVersion{38});
  EXPECT_EQ(probe->served, (std::vector<ApiVersion>{{37}, {38}}));
}

TEST(SlurmRestHttp, PinnedVersionMustBeServed) {
  FakeRestd restd({38}, /*openapi_document=*/true);
  RestOptions options = Jwt(restd.url());
  options.version = ApiVersion{40};
  auto client = MakeRestClient(options);
  ASSERT_TRUE(client.ok());
  auto probe = (*client)->Probe();
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), StatusCode::kNotImplemented);
  EXPECT_NE(probe.status().message().find("serves v0.0.38"), std::string::npos)
      << probe.status().message();
}

TEST(SlurmRestHttp, NoKnownVersion) {
  FakeRestd restd({20, 99}, /*openapi_document=*/true);
  auto client = MakeRestClient(Jwt(restd.url()));
  ASSERT_TRUE(client.ok());
  auto nodes = (*client)->ListNodes();  // probes first
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.status().code(), StatusCode::kNotImplemented);
}

TEST(SlurmRestHttp, BadTokenAndBadBodies) {
  FakeRestd restd({38}, /*openapi_document=*/true);
  auto refused = MakeRestClient(Jwt(restd.url(), "wrong"));
  ASSERT_TRUE(refused.ok());
  auto probe = (*refused)->Probe();
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), StatusCode::kIOError);
  EXPECT_NE(probe.status().message().find("refused the credentials"), std::string::npos)
      << probe.status().message();

  auto client = MakeRestClient(Jwt(restd.url()));
  ASSERT_TRUE(client.ok());
  for (const char* body : {"", "<html>oops</html>", R"js({"nodes": 3})js", "{\"nodes\": [{"}) {
    restd.set_nodes_body(body);
    auto nodes = (*client)->ListNodes();
    EXPECT_FALSE(nodes.ok()) << body;
    EXPECT_NE(nodes.status().message().find("/slurm/v0.0.38/nodes"), std::string::npos)
        << nodes.status().message();
  }
}

}  // namespace
}  // namespace ferry::fleet::slurm
