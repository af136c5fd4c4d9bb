// End-to-end tests of the REST API: RunServer in a thread on an ephemeral
// port over a temporary SQLite store, driven by httplib::Client over loopback.
#include "ferry/fleet/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/fleet/model_json.h"
#include "testing/test_util.h"

namespace ferry::fleet {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Reply {
  int status = 0;  // 0: no response (connection error)
  std::string raw;
  json body;
  httplib::Headers headers;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  std::string Type() const { return body.is_object() ? body.value("type", "") : ""; }
};

using ferry::testing::ReadFile;
using ferry::testing::WaitFor;

// A server running in a thread for the duration of one test.
class TestServer {
 public:
  explicit TestServer(const std::function<void(ServerOptions&)>& customize = {},
                      std::string dir = "") {
    if (dir.empty()) {
      scratch_.emplace("ferry-server-test");
      dir_ = scratch_->path();
    } else {
      dir_ = dir;
    }
    options_.store_url = "sqlite:" + dir_ + "/fleet.db";
    options_.host = "127.0.0.1";
    options_.port = 0;
    options_.port_file = dir_ + "/port";
    options_.data_dir = dir_;
    options_.threads = 8;
    options_.schedule_interval_ms = 20;
    options_.rate_per_second = 0;  // most tests send bursts
    if (customize) customize(options_);
    fs::remove(options_.port_file);
    thread_ = std::thread([this] {
      status_ = RunServer(options_, &stop_, /*handle_signals=*/false);
      finished_ = true;
    });
    WaitFor([&] { return finished_.load() || !ReadFile(options_.port_file).empty(); });
    const std::string port_text = ReadFile(options_.port_file);
    port_ = port_text.empty() ? 0 : std::atoi(port_text.c_str());
    admin_token_ = ReadFile(dir_ + "/admin.token");
    agent_token_ = ReadFile(dir_ + "/agent.token");
  }
  ~TestServer() { (void)Stop(); }
  Status Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return status_;
  }

  bool ok() const { return port_ > 0 && !finished_.load(); }
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  const std::string& admin() const { return admin_token_; }
  const std::string& agent() const { return agent_token_; }

  Reply Send(const std::string& method, const std::string& path, const std::string& token,
             const std::string& body = "", const std::string& content_type = "application/json",
             httplib::Headers headers = {}) const {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(5);
    client.set_read_timeout(40);
    client.set_write_timeout(10);
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    auto call = [&]() -> httplib::Result {
      if (method == "POST") return client.Post(path.c_str(), headers, body, content_type.c_str());
      if (method == "PUT") return client.Put(path.c_str(), headers, body, content_type.c_str());
      if (method == "DELETE") return client.Delete(path.c_str(), headers);
      return client.Get(path.c_str(), headers);
    };
    httplib::Result result = call();
    Reply reply;
    if (!result) return reply;
    reply.status = result->status;
    reply.raw = result->body;
    reply.headers = result->headers;
    reply.body = json::parse(reply.raw, nullptr, false);
    return reply;
  }
  Reply Get(const std::string& path, const std::string& token) const {
    return Send("GET", path, token);
  }
  Reply Post(const std::string& path, const std::string& token, const json& body,
             httplib::Headers headers = {}) const {
    return Send("POST", path, token, body.dump(), "application/json", std::move(headers));
  }

  // Creates a user through the admin API and returns its token.
  std::string CreateUser(const std::string& tenant, const std::string& team,
                         const std::string& name, const std::string& role) const {
    Reply reply = Post("/v1/admin/users", admin_token_,
                       {{"tenant", tenant}, {"team", team}, {"name", name}, {"role", role}});
    EXPECT_EQ(reply.status, 201) << reply.raw;
    return reply.body.is_object() ? reply.body.value("token", "") : "";
  }
  // Every job the admin can see.
  size_t CountJobs() const {
    Reply reply = Get("/v1/jobs?page_size=500", admin_token_);
    EXPECT_EQ(reply.status, 200) << reply.raw;
    return reply.body.is_object() ? reply.body["jobs"].size() : 0;
  }

 private:
  ServerOptions options_;
  std::string dir_;
  std::optional<ferry::testing::ScratchDir> scratch_;  // when the test gave no directory
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  Status status_;
  std::thread thread_;
  int port_ = 0;
  std::string admin_token_;
  std::string agent_token_;
};

json SimpleJob(const std::string& name = "hello") {
  return {{"name", name}, {"command", {"echo", "hi"}}};
}

json GpuNode(const std::string& name, const std::string& model, int gpus) {
  json list = json::array();
  for (int i = 0; i < gpus; ++i) list.push_back({{"index", i}, {"model", model}});
  return {{"name", name},
          {"instance", name + "-i1"},
          {"cpus", 1024},
          {"memory_mb", 1 << 20},
          {"gpus", list}};
}

void ExpectProblem(const Reply& reply, int status, const std::string& suffix) {
  EXPECT_EQ(reply.status, status) << reply.raw;
  EXPECT_EQ(reply.Header("Content-Type"), "application/problem+json") << reply.raw;
  EXPECT_EQ(reply.Type(), "urn:ferry:problem:" + suffix) << reply.raw;
  if (reply.body.is_object()) {
    EXPECT_EQ(reply.body.value("status", 0), status);
    EXPECT_TRUE(reply.body.contains("title"));
    EXPECT_TRUE(reply.body.contains("detail"));
    EXPECT_TRUE(reply.body.contains("instance"));
  }
}

TEST(FleetServer, BootstrapHealthAndPortFile) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(server.admin().substr(0, 3), "fy_");
  EXPECT_EQ(server.admin().size(), 46u);
  struct stat info {};
  ASSERT_EQ(stat((server.dir() + "/admin.token").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((server.dir() + "/agent.token").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);

  EXPECT_EQ(server.Get("/healthz", "").status, 200);
  Reply ready = server.Get("/readyz", "");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body["status"], "ok");

  Reply me = server.Get("/v1/whoami", server.admin());
  ASSERT_EQ(me.status, 200) << me.raw;
  EXPECT_EQ(me.body, (json{{"tenant", "default"},
                           {"team", "default"},
                           {"user", "admin"},
                           {"role", "platform_admin"}}));
  // The agent identity may only use /v1/agent.
  ExpectProblem(server.Get("/v1/whoami", server.agent()), 403, "forbidden");
  ExpectProblem(server.Get("/v1/jobs", server.agent()), 403, "forbidden");
}

TEST(FleetServer, RestartKeepsTokensAndJobs) {
  ferry::testing::ScratchDir scratch("ferry-server-test");
  ASSERT_TRUE(scratch.ok());
  const std::string& dir = scratch.path();
  std::string admin;
  {
    TestServer first({}, dir);
    ASSERT_TRUE(first.ok());
    admin = first.admin();
    ASSERT_EQ(first.Post("/v1/jobs", admin, SimpleJob()).status, 201);
  }
  {
    TestServer second({}, dir);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second.admin(), admin);  // the token file was kept
    EXPECT_EQ(second.Get("/v1/whoami", admin).status, 200);
    EXPECT_EQ(second.CountJobs(), 1u);
  }
}

TEST(FleetServer, AuthenticationFailures) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  Reply missing = server.Get("/v1/jobs", "");
  ExpectProblem(missing, 401, "unauthorized");
  EXPECT_EQ(missing.Header("WWW-Authenticate"), "Bearer");
  ExpectProblem(server.Get("/v1/jobs", "fy_not-a-real-token"), 401, "unauthorized");
  ExpectProblem(server.Send("GET", "/v1/jobs", "", "", "", {{"Authorization", "Basic abc"}}), 401,
                "unauthorized");
  ExpectProblem(server.Send("POST", "/v1/jobs", "nope", SimpleJob().dump()), 401, "unauthorized");
  EXPECT_EQ(server.CountJobs(), 0u);
}

TEST(FleetServer, RoutingErrors) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  ExpectProblem(server.Get("/v1/nothing", server.admin()), 404, "not-found");
  ExpectProblem(server.Get("/nowhere", ""), 404, "not-found");
  // "/" is the dashboard's front door.
  EXPECT_EQ(server.Get("/", "").status, 302);
  Reply put = server.Send("PUT", "/v1/jobs", server.admin(), "{}");
  ExpectProblem(put, 405, "method-not-allowed");
  EXPECT_EQ(put.Header("Allow"), "POST, GET");
  Reply post_job = server.Send("POST", "/v1/jobs/1", server.admin(), "{}");
  ExpectProblem(post_job, 405, "method-not-allowed");
  EXPECT_EQ(post_job.Header("Allow"), "GET, DELETE");
  ExpectProblem(server.Get("/v1/jobs/abc", server.admin()), 404, "not-found");
  ExpectProblem(server.Get("/v1/jobs/999", server.admin()), 404, "not-found");
  ExpectProblem(server.Get("/v1/jobs/999/events", server.admin()), 404, "not-found");
  ExpectProblem(server.Get("/v1/jobs/999/logs", server.admin()), 404, "not-found");
  ExpectProblem(server.Get("/v1/nodes/ghost", server.admin()), 404, "not-found");
  ExpectProblem(server.Get("/v1/jobs?bogus=1", server.admin()), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs/" + std::string(6000, '7'), server.admin()), 404, "not-found");
  // Invalid UTF-8 in the path and the query comes back replaced, not as a crash.
  ExpectProblem(server.Get("/v1/%FF%FE", server.admin()), 404, "not-found");
  ExpectProblem(server.Get("/v1/jobs?state=%FF", server.admin()), 400, "bad-request");
  EXPECT_EQ(server.Get("/v1/jobs?user=%FF%C3", server.admin()).status, 200);
  EXPECT_EQ(server.Get("/healthz", "").status, 200);
}

TEST(FleetServer, SubmitGetAndList) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  json spec = SimpleJob("train");
  spec["labels"] = {{"project", "llm"}};
  spec["env"] = {{"SEED", "1"}};
  Reply created = server.Post("/v1/jobs", server.admin(), spec);
  ASSERT_EQ(created.status, 201) << created.raw;
  EXPECT_EQ(created.Header("Content-Type"), "application/json");
  const int64_t id = created.body["id"].get<int64_t>();
  EXPECT_EQ(created.Header("Location"), "/v1/jobs/" + std::to_string(id));
  EXPECT_EQ(created.body["state"], "PENDING");
  EXPECT_EQ(created.body["user"], "admin");

  Reply got = server.Get("/v1/jobs/" + std::to_string(id), server.admin());
  ASSERT_EQ(got.status, 200) << got.raw;
  EXPECT_EQ(got.body["name"], "train");
  EXPECT_EQ(got.body["spec"]["env"]["SEED"], "1");
  EXPECT_TRUE(got.body.contains("attempts"));

  Reply list = server.Get("/v1/jobs", server.admin());
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(list.body["jobs"].size(), 1u);
  EXPECT_FALSE(list.body["jobs"][0].contains("attempts"));
  EXPECT_TRUE(list.body["next_page_token"].is_null());

  Reply events = server.Get("/v1/jobs/" + std::to_string(id) + "/events", server.admin());
  ASSERT_EQ(events.status, 200) << events.raw;
  ASSERT_GE(events.body["events"].size(), 1u);
  EXPECT_EQ(events.body["events"][0]["reason"], "SUBMITTED");
  EXPECT_EQ(events.body["next_after"], events.body["events"].back()["id"]);
}

TEST(FleetServer, BadInputsChangeNothing) {
  TestServer server([](ServerOptions& o) { o.max_body_bytes = 64 * 1024; });
  ASSERT_TRUE(server.ok());
  const std::string& admin = server.admin();
  const size_t before = server.CountJobs();

  ExpectProblem(server.Send("POST", "/v1/jobs", admin, "{\"name\": "), 400, "malformed-json");
  ExpectProblem(server.Send("POST", "/v1/jobs", admin, "[1, 2]"), 400, "malformed-json");
  ExpectProblem(server.Send("POST", "/v1/jobs", admin, ""), 400, "malformed-json");
  ExpectProblem(server.Send("POST", "/v1/jobs", admin, std::string(5000, '[')), 400,
                "malformed-json");
  ExpectProblem(server.Send("POST", "/v1/jobs", admin, SimpleJob().dump(), "text/plain"), 415,
                "unsupported-media-type");

  json wrong_types = SimpleJob();
  wrong_types["tasks"] = "two";
  wrong_types["priority"] = 1.5;
  Reply typed = server.Post("/v1/jobs", admin, wrong_types);
  ExpectProblem(typed, 422, "validation");
  ASSERT_TRUE(typed.body.contains("errors"));
  EXPECT_EQ(typed.body["errors"].size(), 2u) << typed.raw;

  json unknown = SimpleJob();
  unknown["gpus"] = 1;
  Reply unknown_reply = server.Post("/v1/jobs", admin, unknown);
  ExpectProblem(unknown_reply, 422, "validation");
  EXPECT_EQ(unknown_reply.body["errors"][0]["field"], "gpus");

  json negative = SimpleJob();
  negative["gpus_per_task"] = -1;
  Reply negative_reply = server.Post("/v1/jobs", admin, negative);
  ExpectProblem(negative_reply, 422, "validation");
  EXPECT_EQ(negative_reply.body["errors"][0]["field"], "gpus_per_task");

  ExpectProblem(server.Post("/v1/jobs", admin, json{{"name", "x"}}), 422, "validation");

  json huge = SimpleJob();
  huge["env"] = {{"BIG", std::string(100 * 1024, 'x')}};
  ExpectProblem(server.Post("/v1/jobs", admin, huge), 413, "payload-too-large");
  huge["env"] = {{"BIG", std::string(4 << 20, 'x')}};
  ExpectProblem(server.Post("/v1/jobs", admin, huge), 413, "payload-too-large");

  {
    // The same without a Content-Length (chunked transfer encoding).
    httplib::Client client("127.0.0.1", server.port());
    client.set_read_timeout(30);
    size_t sent = 0;
    auto result = client.Post(
        "/v1/jobs", {{"Authorization", "Bearer " + admin}},
        [&](size_t, httplib::DataSink& sink) {
          const std::string piece(64 * 1024, ' ');
          if (sent >= (4u << 20)) {
            sink.done();
            return true;
          }
          sent += piece.size();
          return sink.write(piece.data(), piece.size());
        },
        "application/json");
    // The server may close the connection before the client is done sending;
    // when it answers, the answer is 413.
    if (result) {
      EXPECT_EQ(result->status, 413);
    }
  }
  ExpectProblem(server.Post("/v1/jobs", admin, SimpleJob(), {{"Idempotency-Key", "cl\xc3\xa9"}}),
                400, "bad-request");
  ExpectProblem(
      server.Post("/v1/jobs", admin, SimpleJob(), {{"Idempotency-Key", std::string(300, 'k')}}),
      400, "bad-request");

  EXPECT_EQ(server.CountJobs(), before);
  // The server is still healthy after all of it.
  EXPECT_EQ(server.Post("/v1/jobs", admin, SimpleJob()).status, 201);
  EXPECT_EQ(server.CountJobs(), before + 1);
}

TEST(FleetServer, TenantIsolationAndRoles) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string ana = server.CreateUser("acme", "ml", "ana", "user");
  const std::string carl = server.CreateUser("acme", "ml", "carl", "user");
  const std::string dora = server.CreateUser("acme", "ml", "dora", "team_admin");
  const std::string eve = server.CreateUser("acme", "web", "eve", "team_admin");
  const std::string bob = server.CreateUser("globex", "infra", "bob", "user");
  ASSERT_FALSE(ana.empty());
  ASSERT_FALSE(bob.empty());

  Reply me = server.Get("/v1/whoami", ana);
  EXPECT_EQ(me.body, (json{{"tenant", "acme"}, {"team", "ml"}, {"user", "ana"}, {"role", "user"}}));

  Reply created = server.Post("/v1/jobs", ana, SimpleJob("ana-job"));
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string path = "/v1/jobs/" + std::to_string(created.body["id"].get<int64_t>());
  ASSERT_EQ(server.Post("/v1/jobs", bob, SimpleJob("bob-job")).status, 201);

  // Another tenant: the job does not exist.
  ExpectProblem(server.Get(path, bob), 404, "not-found");
  ExpectProblem(server.Send("DELETE", path, bob), 404, "not-found");
  ExpectProblem(server.Send("POST", path + ":cancel", bob), 404, "not-found");
  ExpectProblem(server.Get(path + "/events", bob), 404, "not-found");
  ExpectProblem(server.Get(path + "/logs", bob), 404, "not-found");
  Reply bob_list = server.Get("/v1/jobs", bob);
  ASSERT_EQ(bob_list.body["jobs"].size(), 1u);
  EXPECT_EQ(bob_list.body["jobs"][0]["name"], "bob-job");

  // Same tenant: visible; cancelling needs ownership or a team admin of the team.
  EXPECT_EQ(server.Get(path, carl).status, 200);
  ExpectProblem(server.Send("DELETE", path, carl), 403, "forbidden");
  ExpectProblem(server.Send("DELETE", path, eve), 403, "forbidden");
  Reply ana_list = server.Get("/v1/jobs", ana);
  ASSERT_EQ(ana_list.body["jobs"].size(), 1u);
  Reply cancelled = server.Send("DELETE", path, dora);
  ASSERT_EQ(cancelled.status, 200) << cancelled.raw;
  EXPECT_EQ(cancelled.body["state"], "CANCELLED");

  // Operations the role does not allow.
  ExpectProblem(server.Post("/v1/nodes/gpu-a:drain", ana, json::object()), 403, "forbidden");
  ExpectProblem(server.Post("/v1/admin/users", ana,
                            {{"tenant", "acme"}, {"team", "ml"}, {"name", "x"}, {"role", "user"}}),
                403, "forbidden");
  ExpectProblem(server.Post("/v1/agent/register", ana, GpuNode("n", "T4", 1)), 403, "forbidden");
  ExpectProblem(server.Post("/v1/agent/sync", dora, json::object()), 403, "forbidden");

  // The platform admin sees every tenant.
  EXPECT_EQ(server.CountJobs(), 2u);
  EXPECT_EQ(server.Get(path, server.admin()).status, 200);

  // User creation refuses duplicates and bad roles, and changes nothing then.
  ExpectProblem(
      server.Post("/v1/admin/users", server.admin(),
                  {{"tenant", "acme"}, {"team", "ml"}, {"name", "ana"}, {"role", "user"}}),
      422, "validation");
  ExpectProblem(
      server.Post("/v1/admin/users", server.admin(),
                  {{"tenant", "acme"}, {"team", "ml"}, {"name", "zed"}, {"role", "root"}}),
      422, "validation");
  EXPECT_EQ(server.Get("/v1/whoami", ana).status, 200);
}

TEST(FleetServer, AdminListsUsersAndRevokesTheirTokensAtOnce) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string& admin = server.admin();
  const std::string ana = server.CreateUser("acme", "ml", "ana", "user");
  const std::string bob = server.CreateUser("acme", "web", "bob", "team_admin");
  const std::string root2 = server.CreateUser("default", "default", "root2", "platform_admin");
  ASSERT_FALSE(ana.empty());

  Reply all = server.Get("/v1/admin/users", admin);
  ASSERT_EQ(all.status, 200) << all.raw;
  ASSERT_EQ(all.body["users"].size(), 5u);  // admin, agent and the three above
  const json first = all.body["users"][0];
  EXPECT_EQ(first["name"], "admin");
  EXPECT_EQ(first["role"], "platform_admin");
  EXPECT_EQ(first["active_tokens"], 1);
  EXPECT_TRUE(first["created_at"].is_string());
  EXPECT_TRUE(first["id"].is_number_integer());
  Reply acme = server.Get("/v1/admin/users?tenant=acme", admin);
  ASSERT_EQ(acme.status, 200) << acme.raw;
  ASSERT_EQ(acme.body["users"].size(), 2u);
  EXPECT_EQ(acme.body["users"][0], (json{{"id", acme.body["users"][0]["id"]},
                                         {"tenant", "acme"},
                                         {"team", "ml"},
                                         {"name", "ana"},
                                         {"role", "user"},
                                         {"created_at", acme.body["users"][0]["created_at"]},
                                         {"active_tokens", 1}}));
  ExpectProblem(server.Get("/v1/admin/users?tenant=nosuch", admin), 404, "not-found");
  ExpectProblem(server.Get("/v1/admin/users?tenant=.bad", admin), 400, "bad-request");
  ExpectProblem(server.Get("/v1/admin/users?tenant=a&tenant=b", admin), 400, "bad-request");
  ExpectProblem(server.Get("/v1/admin/users?team=ml", admin), 400, "bad-request");
  ExpectProblem(server.Get("/v1/admin/users", bob), 403, "forbidden");
  ExpectProblem(server.Post("/v1/admin/users:revoke", bob, {{"tenant", "acme"}, {"name", "ana"}}),
                403, "forbidden");

  // ana's token works (and is cached), then stops working with the revoke.
  ASSERT_EQ(server.Get("/v1/whoami", ana).status, 200);
  Reply revoked =
      server.Post("/v1/admin/users:revoke", admin, {{"tenant", "acme"}, {"name", "ana"}});
  ASSERT_EQ(revoked.status, 200) << revoked.raw;
  EXPECT_EQ(revoked.body["revoked_tokens"], 1);
  EXPECT_EQ(revoked.body["user"]["name"], "ana");
  EXPECT_EQ(revoked.body["user"]["active_tokens"], 0);
  ExpectProblem(server.Get("/v1/whoami", ana), 401, "unauthorized");
  ExpectProblem(server.Post("/v1/jobs", ana, SimpleJob()), 401, "unauthorized");
  EXPECT_EQ(server.Get("/v1/whoami", bob).status, 200);
  // Again: nothing left to revoke; still 200.
  Reply again = server.Post("/v1/admin/users:revoke", admin, {{"tenant", "acme"}, {"name", "ana"}});
  ASSERT_EQ(again.status, 200) << again.raw;
  EXPECT_EQ(again.body["revoked_tokens"], 0);
  Reply listed = server.Get("/v1/admin/users?tenant=acme", admin);
  EXPECT_EQ(listed.body["users"][0]["active_tokens"], 0);

  // Unknown users, bad bodies, and the admin's own user are refused.
  ExpectProblem(server.Post("/v1/admin/users:revoke", admin, {{"tenant", "acme"}, {"name", "zed"}}),
                404, "not-found");
  ExpectProblem(
      server.Post("/v1/admin/users:revoke", admin, {{"tenant", "nosuch"}, {"name", "ana"}}), 404,
      "not-found");
  ExpectProblem(server.Post("/v1/admin/users:revoke", admin, {{"name", "ana"}}), 422, "validation");
  ExpectProblem(server.Post("/v1/admin/users:revoke", admin,
                            {{"tenant", "acme"}, {"name", "ana"}, {"role", "user"}}),
                422, "validation");
  ExpectProblem(server.Send("POST", "/v1/admin/users:revoke", admin, "not json"), 400,
                "malformed-json");
  Reply self =
      server.Post("/v1/admin/users:revoke", admin, {{"tenant", "default"}, {"name", "admin"}});
  ExpectProblem(self, 409, "conflict");
  EXPECT_NE(self.body.value("detail", "").find("your own"), std::string::npos) << self.raw;
  EXPECT_EQ(server.Get("/v1/whoami", admin).status, 200);
  // Another platform admin may revoke the first one.
  Reply other =
      server.Post("/v1/admin/users:revoke", root2, {{"tenant", "default"}, {"name", "admin"}});
  ASSERT_EQ(other.status, 200) << other.raw;
  ExpectProblem(server.Get("/v1/whoami", admin), 401, "unauthorized");
}

TEST(FleetServer, IdempotentSubmission) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string& admin = server.admin();
  httplib::Headers key = {{"Idempotency-Key", "submit-1"}};
  Reply first =
      server.Send("POST", "/v1/jobs", admin, R"({"name": "idem", "command": ["true"], "tasks": 1})",
                  "application/json", key);
  ASSERT_EQ(first.status, 201) << first.raw;
  EXPECT_EQ(first.Header("Idempotent-Replayed"), "");
  // The same body, spelled differently: same canonical JSON, so a replay.
  Reply replay = server.Send("POST", "/v1/jobs", admin,
                             "{ \"tasks\": 1,\n \"command\": [\"true\"], \"name\": \"idem\" }",
                             "application/json", key);
  EXPECT_EQ(replay.status, 201) << replay.raw;
  EXPECT_EQ(replay.raw, first.raw);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay.Header("Location"), first.Header("Location"));

  Reply mismatch =
      server.Send("POST", "/v1/jobs", admin, R"({"name": "idem", "command": ["false"]})",
                  "application/json", key);
  ExpectProblem(mismatch, 422, "idempotency-key-reuse");
  EXPECT_EQ(server.CountJobs(), 1u);

  // Keys are per user: another user's identical key creates its own job.
  const std::string ana = server.CreateUser("default", "default", "ana", "user");
  EXPECT_EQ(server
                .Send("POST", "/v1/jobs", ana, R"({"name": "idem", "command": ["true"]})",
                      "application/json", key)
                .status,
            201);
  EXPECT_EQ(server.CountJobs(), 2u);
}

TEST(FleetServer, PaginationWithFilters) {
  TestServer server([](ServerOptions& o) {
    o.max_page_size = 5;
    o.default_page_size = 2;
  });
  ASSERT_TRUE(server.ok());
  const std::string& admin = server.admin();
  std::vector<int64_t> batch_p;
  for (int i = 0; i < 7; ++i) {
    json spec = SimpleJob("p" + std::to_string(i));
    spec["labels"] = {{"batch", "p"}};
    Reply reply = server.Post("/v1/jobs", admin, spec);
    ASSERT_EQ(reply.status, 201);
    batch_p.push_back(reply.body["id"].get<int64_t>());
    json other = SimpleJob("q" + std::to_string(i));
    other["labels"] = {{"batch", "q"}};
    ASSERT_EQ(server.Post("/v1/jobs", admin, other).status, 201);
  }
  std::vector<int64_t> seen;
  std::string token;
  int pages = 0;
  do {
    std::string path = "/v1/jobs?label=batch=p&page_size=3";
    if (!token.empty()) path += "&page_token=" + token;
    Reply page = server.Get(path, admin);
    ASSERT_EQ(page.status, 200) << page.raw;
    for (const json& job : page.body["jobs"]) {
      EXPECT_EQ(job["spec"]["labels"]["batch"], "p");
      seen.push_back(job["id"].get<int64_t>());
    }
    token = page.body["next_page_token"].is_null()
                ? ""
                : page.body["next_page_token"].get<std::string>();
    ASSERT_LT(++pages, 10);
  } while (!token.empty());
  std::vector<int64_t> expected(batch_p.rbegin(), batch_p.rend());
  EXPECT_EQ(seen, expected);  // newest first, every job once
  EXPECT_EQ(pages, 3);

  // Default page size, and a token used with another filter or mangled.
  Reply first = server.Get("/v1/jobs", admin);
  ASSERT_EQ(first.body["jobs"].size(), 2u);
  const std::string next = first.body["next_page_token"].get<std::string>();
  ExpectProblem(server.Get("/v1/jobs?label=batch=p&page_token=" + next, admin), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs?page_token=garbage!", admin), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs?page_token=" + next.substr(0, next.size() - 4), admin), 400,
                "bad-request");
  EXPECT_EQ(server.Get("/v1/jobs?page_token=" + next, admin).status, 200);
  ExpectProblem(server.Get("/v1/jobs?page_size=6", admin), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs?page_size=0", admin), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs?page_size=x", admin), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs?state=SLEEPING", admin), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs?label=nokey", admin), 400, "bad-request");

  // State filters, repeated or comma-separated.
  ASSERT_EQ(server.Send("DELETE", "/v1/jobs/" + std::to_string(batch_p[0]), admin).status, 200);
  ASSERT_EQ(server.Send("DELETE", "/v1/jobs/" + std::to_string(batch_p[1]), admin).status, 200);
  Reply cancelled = server.Get("/v1/jobs?state=CANCELLED&label=batch=p", admin);
  ASSERT_EQ(cancelled.status, 200);
  EXPECT_EQ(cancelled.body["jobs"].size(), 2u);
  Reply either = server.Get("/v1/jobs?state=CANCELLED,PENDING&page_size=5&label=batch=p", admin);
  EXPECT_EQ(either.body["jobs"].size(), 5u);
  Reply user_filter = server.Get("/v1/jobs?user=nobody", admin);
  EXPECT_EQ(user_filter.body["jobs"].size(), 0u);
}

TEST(FleetServer, RateLimiting) {
  TestServer server([](ServerOptions& o) {
    o.rate_per_second = 0.01;  // one token per 100 s: the bucket does not refill during the test
    o.rate_burst = 2;
  });
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(server.Get("/v1/whoami", server.admin()).status, 200);
  EXPECT_EQ(server.Get("/v1/jobs", server.admin()).status, 200);
  Reply limited = server.Get("/v1/whoami", server.admin());
  ExpectProblem(limited, 429, "rate-limited");
  const std::string retry = limited.Header("Retry-After");
  ASSERT_FALSE(retry.empty());
  EXPECT_EQ(retry.find_first_not_of("0123456789"), std::string::npos);
  EXPECT_GE(std::stoi(retry), 1);
  ExpectProblem(server.Post("/v1/jobs", server.admin(), SimpleJob()), 429, "rate-limited");
  // Health checks and the agent identity are not limited.
  EXPECT_EQ(server.Get("/healthz", "").status, 200);
  EXPECT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("n1", "T4", 1)).status, 200);
}

TEST(FleetServer, CancelIsIdempotent) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string& admin = server.admin();
  Reply created = server.Post("/v1/jobs", admin, SimpleJob());
  ASSERT_EQ(created.status, 201);
  const std::string path = "/v1/jobs/" + std::to_string(created.body["id"].get<int64_t>());
  Reply first = server.Send("DELETE", path, admin);
  ASSERT_EQ(first.status, 200) << first.raw;
  EXPECT_EQ(first.body["state"], "CANCELLED");
  EXPECT_EQ(first.body["reason"], "CANCELLED_BY_USER");
  Reply second = server.Send("POST", path + ":cancel", admin);
  ASSERT_EQ(second.status, 200) << second.raw;
  EXPECT_EQ(second.body["state"], "CANCELLED");
  EXPECT_EQ(server.Send("DELETE", path, admin).status, 200);
  ExpectProblem(server.Send("DELETE", "/v1/jobs/424242", admin), 404, "not-found");
}

// Registers a node, then syncs until the server hands out something to start.
TEST(FleetServer, AgentLongPollGetsAssignmentAfterSubmit) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string& agent = server.agent();
  Reply registered = server.Post("/v1/agent/register", agent, GpuNode("gpu-a", "T4", 2));
  ASSERT_EQ(registered.status, 200) << registered.raw;
  EXPECT_EQ(registered.body["node"]["name"], "gpu-a");
  EXPECT_EQ(registered.body["lease_ms"], 10000);
  EXPECT_EQ(registered.body["node"]["gpus"].size(), 2u);

  // A sync with nothing to do waits; the submission below ends the wait.
  const json sync_body = {{"node", "gpu-a"}, {"instance", "gpu-a-i1"}, {"running", json::array()}};
  std::atomic<bool> done{false};
  Reply sync_reply;
  std::thread poller([&] {
    for (int i = 0; i < 6 && !done; ++i) {
      Reply reply = server.Post("/v1/agent/sync?wait_ms=5000", agent, sync_body);
      if (reply.status != 200 || !reply.body["start"].empty()) {
        sync_reply = reply;
        done = true;
      }
    }
  });
  json spec = SimpleJob("gpu-job");
  spec["gpus_per_task"] = 2;
  spec["gpu_models"] = {"T4"};
  Reply created = server.Post("/v1/jobs", server.admin(), spec);
  poller.join();
  ASSERT_EQ(created.status, 201) << created.raw;
  const int64_t id = created.body["id"].get<int64_t>();
  ASSERT_TRUE(done.load());
  ASSERT_EQ(sync_reply.status, 200) << sync_reply.raw;
  EXPECT_TRUE(sync_reply.body["registered"].get<bool>());
  EXPECT_EQ(sync_reply.body["stop_grace_ms"], 10000);
  ASSERT_EQ(sync_reply.body["start"].size(), 1u) << sync_reply.raw;
  const json& assignment = sync_reply.body["start"][0];
  EXPECT_EQ(assignment["job_id"], id);
  EXPECT_EQ(assignment["task"], 0);
  EXPECT_EQ(assignment["attempt"], 1);
  EXPECT_EQ(assignment["gpu_indices"].size(), 2u);
  EXPECT_EQ(assignment["gang_nodes"], json::array({"gpu-a"}));

  const std::string path = "/v1/jobs/" + std::to_string(id);
  EXPECT_EQ(server.Get(path, server.admin()).body["state"], "ADMITTED");
  Reply gpus = server.Get("/v1/gpus", server.admin());
  ASSERT_EQ(gpus.body["gpus"].size(), 2u);
  EXPECT_EQ(gpus.body["gpus"][0]["job_id"], id);
  EXPECT_EQ(gpus.body["gpus"][0]["allocated"], true);
  // Which job holds a GPU: its own tenant sees it, another tenant sees only
  // that the GPU is taken.
  const std::string insider = server.CreateUser("default", "default", "ivy", "user");
  const std::string outsider = server.CreateUser("globex", "infra", "gil", "user");
  ASSERT_FALSE(insider.empty());
  ASSERT_FALSE(outsider.empty());
  EXPECT_EQ(server.Get("/v1/gpus", insider).body["gpus"][0]["job_id"], id);
  EXPECT_EQ(server.Get("/v1/nodes/gpu-a", insider).body["gpus"][0]["job_id"], id);
  for (const std::string& view : {std::string("/v1/gpus"), std::string("/v1/nodes")}) {
    Reply seen = server.Get(view, outsider);
    ASSERT_EQ(seen.status, 200) << seen.raw;
    const json& list = view == "/v1/gpus" ? seen.body["gpus"] : seen.body["nodes"][0]["gpus"];
    ASSERT_EQ(list.size(), 2u) << seen.raw;
    for (const json& gpu : list) {
      EXPECT_EQ(gpu["allocated"], true) << view;
      EXPECT_TRUE(gpu["job_id"].is_null()) << view << ": " << seen.raw;
    }
  }
  Reply node_seen = server.Get("/v1/nodes/gpu-a", outsider);
  EXPECT_TRUE(node_seen.body["gpus"][0]["job_id"].is_null()) << node_seen.raw;
  EXPECT_EQ(node_seen.body["gpus"][0]["allocated"], true);
  Reply pools = server.Get("/v1/pools", server.admin());
  ASSERT_EQ(pools.body["pools"].size(), 1u);
  EXPECT_EQ(pools.body["pools"][0]["gpus_free"], 0);

  // A log follower waits for output; the agent's upload wakes it.
  std::atomic<bool> followed{false};
  Reply follow_reply;
  std::thread follower([&] {
    follow_reply = server.Get(path + "/logs?follow=1&wait_ms=20000", server.admin());
    followed = true;
  });
  json running = {{"job_id", id}, {"task", 0}, {"attempt", 1}};
  json started = sync_body;
  started["running"] = {running};
  started["reports"] = {{{"job_id", id}, {"task", 0}, {"attempt", 1}, {"kind", "started"}}};
  EXPECT_EQ(server.Post("/v1/agent/sync", agent, started).status, 200);
  EXPECT_EQ(server.Get(path, server.admin()).body["state"], "RUNNING");
  Reply logged = server.Post("/v1/agent/logs", agent,
                             {{"node", "gpu-a"},
                              {"job_id", id},
                              {"attempt", 1},
                              {"task", 0},
                              {"stream", "stdout"},
                              {"data", "epoch 1\n"}});
  follower.join();
  EXPECT_EQ(logged.status, 204) << logged.raw;
  ASSERT_TRUE(followed.load());
  ASSERT_EQ(follow_reply.status, 200) << follow_reply.raw;
  ASSERT_EQ(follow_reply.body["chunks"].size(), 1u) << follow_reply.raw;
  EXPECT_EQ(follow_reply.body["chunks"][0]["data"], "epoch 1\n");
  EXPECT_FALSE(follow_reply.body["finished"].get<bool>());

  json exited = sync_body;
  exited["reports"] = {
      {{"job_id", id}, {"task", 0}, {"attempt", 1}, {"kind", "exited"}, {"exit_code", 0}}};
  ASSERT_EQ(server.Post("/v1/agent/sync", agent, exited).status, 200);
  EXPECT_EQ(server.Get(path, server.admin()).body["state"], "SUCCEEDED");
  Reply logs = server.Get(path + "/logs", server.admin());
  ASSERT_EQ(logs.status, 200);
  EXPECT_TRUE(logs.body["finished"].get<bool>());
  EXPECT_EQ(logs.body["next_after"], logs.body["chunks"][0]["seq"]);

  // Bad agent bodies are refused field by field.
  Reply bad = server.Post("/v1/agent/sync", agent, {{"node", "gpu-a"}, {"reports", 3}});
  ExpectProblem(bad, 422, "validation");
  ExpectProblem(server.Post("/v1/agent/logs", agent, {{"node", "gpu-a"}}), 422, "validation");
  Reply unknown_node = server.Post("/v1/agent/sync", agent, {{"node", "ghost"}, {"instance", "x"}});
  ASSERT_EQ(unknown_node.status, 200) << unknown_node.raw;
  EXPECT_FALSE(unknown_node.body["registered"].get<bool>());
}

TEST(FleetServer, UnsatisfiableGangIsRefused) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  // Without nodes nothing can be judged: accepted.
  json big = SimpleJob("big");
  big["gpus_per_task"] = 8;
  ASSERT_EQ(server.Post("/v1/jobs", server.admin(), big).status, 201);
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-a", "T4", 2)).status,
            200);
  const size_t before = server.CountJobs();
  ExpectProblem(server.Post("/v1/jobs", server.admin(), big), 422, "unsatisfiable");
  json wrong_model = SimpleJob("model");
  wrong_model["gpus_per_task"] = 1;
  wrong_model["gpu_models"] = {"H200"};
  ExpectProblem(server.Post("/v1/jobs", server.admin(), wrong_model), 422, "unsatisfiable");
  EXPECT_EQ(server.CountJobs(), before);
  json fits = SimpleJob("fits");
  fits["gpus_per_task"] = 2;
  EXPECT_EQ(server.Post("/v1/jobs", server.admin(), fits).status, 201);
}

TEST(FleetServer, DrainStopsPlacement) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string& admin = server.admin();
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-d", "A100", 1)).status,
            200);
  Reply drained = server.Post("/v1/nodes/gpu-d:drain", admin, json::object());
  ASSERT_EQ(drained.status, 200) << drained.raw;
  EXPECT_TRUE(drained.body["drain"].get<bool>());
  ExpectProblem(server.Post("/v1/nodes/ghost:drain", admin, json::object()), 404, "not-found");
  ExpectProblem(server.Get("/v1/nodes/gpu-d:drain", admin), 405, "method-not-allowed");

  json spec = SimpleJob("waits");
  spec["gpus_per_task"] = 1;
  Reply created = server.Post("/v1/jobs", admin, spec);
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string path = "/v1/jobs/" + std::to_string(created.body["id"].get<int64_t>());
  // The scheduler looked at it (the reason changed) and left it pending.
  json job;
  ASSERT_TRUE(WaitFor([&] {
    job = server.Get(path, admin).body;
    return job.is_object() && job["reason"] != "SUBMITTED";
  }));
  EXPECT_EQ(job["state"], "PENDING");
  EXPECT_EQ(job["reason"], "NO_CAPACITY");

  Reply undrained = server.Post("/v1/nodes/gpu-d:undrain", admin, json::object());
  ASSERT_EQ(undrained.status, 200);
  EXPECT_FALSE(undrained.body["drain"].get<bool>());
  ASSERT_TRUE(WaitFor([&] {
    job = server.Get(path, admin).body;
    return job.is_object() && job["state"] == "ADMITTED";
  }));
  Reply nodes = server.Get("/v1/nodes", admin);
  ASSERT_EQ(nodes.body["nodes"].size(), 1u);
  EXPECT_EQ(nodes.body["nodes"][0]["state"], "READY");
  EXPECT_EQ(server.Get("/v1/nodes/gpu-d", admin).body["name"], "gpu-d");
}

// Syncs as `node` (running `running`) until the answer says to stop `ref`.
bool SyncUntilStopped(const TestServer& server, const std::string& node, const json& ref) {
  const json body = {{"node", node}, {"instance", node + "-i1"}, {"running", {ref}}};
  for (int i = 0; i < 8; ++i) {
    Reply reply = server.Post("/v1/agent/sync?wait_ms=3000", server.agent(), body);
    if (reply.status != 200) return false;
    for (const json& stop : reply.body["stop"]) {
      if (stop == ref) return true;
    }
  }
  return false;
}

// Places a one-GPU job on `node` and reports it started; returns its task ref.
json StartJob(const TestServer& server, const std::string& node, json spec) {
  spec["gpus_per_task"] = 1;
  Reply created = server.Post("/v1/jobs", server.admin(), spec);
  EXPECT_EQ(created.status, 201) << created.raw;
  if (created.status != 201) return json();
  const int64_t id = created.body["id"].get<int64_t>();
  const json ref = {{"job_id", id}, {"task", 0}, {"attempt", 1}};
  json body = {{"node", node}, {"instance", node + "-i1"}};
  bool assigned = false;
  for (int i = 0; i < 8 && !assigned; ++i) {
    Reply reply = server.Post("/v1/agent/sync?wait_ms=3000", server.agent(), body);
    for (const json& start : reply.body["start"]) assigned = assigned || start["job_id"] == id;
  }
  EXPECT_TRUE(assigned);
  body["running"] = {ref};
  body["reports"] = {{{"job_id", id}, {"task", 0}, {"attempt", 1}, {"kind", "started"}}};
  EXPECT_EQ(server.Post("/v1/agent/sync", server.agent(), body).status, 200);
  return ref;
}

TEST(FleetServer, CancelAndTimeoutTellTheAgentToStop) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-s", "L4", 2)).status,
            200);
  const json cancelled = StartJob(server, "gpu-s", SimpleJob("to-cancel"));
  ASSERT_TRUE(cancelled.is_object());
  const std::string path = "/v1/jobs/" + std::to_string(cancelled["job_id"].get<int64_t>());
  EXPECT_EQ(server.Get(path, server.admin()).body["state"], "RUNNING");
  std::atomic<bool> stopped{false};
  std::thread poller([&] { stopped = SyncUntilStopped(server, "gpu-s", cancelled); });
  Reply cancel = server.Send("DELETE", path, server.admin());
  poller.join();
  EXPECT_EQ(cancel.status, 200) << cancel.raw;
  EXPECT_TRUE(stopped.load());

  json spec = SimpleJob("overruns");
  spec["max_runtime_seconds"] = 1;
  const json timed = StartJob(server, "gpu-s", spec);
  ASSERT_TRUE(timed.is_object());
  EXPECT_TRUE(SyncUntilStopped(server, "gpu-s", timed));
  Reply job =
      server.Get("/v1/jobs/" + std::to_string(timed["job_id"].get<int64_t>()), server.admin());
  EXPECT_EQ(job.body["state"], "TIMEOUT");
  EXPECT_EQ(job.body["reason"], "MAX_RUNTIME_EXCEEDED");
}

TEST(FleetServer, SilentNodeIsLost) {
  TestServer server([](ServerOptions& o) { o.lease_ms = 200; });
  ASSERT_TRUE(server.ok());
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-l", "L4", 1)).status,
            200);
  EXPECT_TRUE(WaitFor([&] {
    return server.Get("/v1/nodes/gpu-l", server.admin()).body.value("state", "") == "LOST";
  }));
  // Its next sync is told to register again.
  Reply sync =
      server.Post("/v1/agent/sync", server.agent(), {{"node", "gpu-l"}, {"instance", "gpu-l-i1"}});
  ASSERT_EQ(sync.status, 200) << sync.raw;
  EXPECT_FALSE(sync.body["registered"].get<bool>());
}

TEST(FleetServer, StopsPromptlyWithLongPollsOpen) {
  auto server = std::make_unique<TestServer>();
  ASSERT_TRUE(server->ok());
  ASSERT_EQ(server->Post("/v1/agent/register", server->agent(), GpuNode("n", "T4", 1)).status, 200);
  Reply reply;
  std::thread poller([&] {
    reply = server->Post("/v1/agent/sync?wait_ms=5000", server->agent(),
                         {{"node", "n"}, {"instance", "n-i1"}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_OK(server->Stop());
  poller.join();
  EXPECT_TRUE(reply.status == 200 || reply.status == 0);
}

// The value of the first sample of `series` (name and labels as written) in a
// Prometheus text scrape, or -1.
double SampleValue(const std::string& text, const std::string& series) {
  size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      return std::stod(text.substr(at + series.size() + 1));
    }
    at += series.size();
  }
  return -1;
}

TEST(FleetServer, PendingJobsExplainWhyFromTheLastCycle) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string ana = server.CreateUser("acme", "ml", "ana", "user");
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-e", "H200", 2)).status,
            200);
  const json holder = StartJob(server, "gpu-e", SimpleJob("holder"));  // 1 of 2 GPUs
  ASSERT_TRUE(holder.is_object());
  json big = SimpleJob("big");
  big["gpus_per_task"] = 2;
  Reply first = server.Post("/v1/jobs", ana, big);
  ASSERT_EQ(first.status, 201);
  Reply second = server.Post("/v1/jobs", ana, big);
  ASSERT_EQ(second.status, 201);
  const std::string path = "/v1/jobs/" + std::to_string(second.body["id"].get<int64_t>());
  json explanation;
  ASSERT_TRUE(WaitFor([&] {
    explanation = server.Get(path, ana).body["explanation"];
    return explanation.is_object() && explanation["reason"] == "NO_CAPACITY";
  })) << explanation;
  EXPECT_NE(explanation["message"].get<std::string>().find(
                "no free capacity for 1 task with 2 GPUs each; the largest free block is 1 GPU "
                "on one node"),
            std::string::npos)
      << explanation;
  EXPECT_EQ(explanation["queue_position"], 1);
  EXPECT_EQ(explanation["jobs_ahead_in_team"], 1);
  EXPECT_NE(explanation["summary"].get<std::string>().find("; 1 job ahead in acme/ml's queue"),
            std::string::npos)
      << explanation;
  EXPECT_TRUE(explanation["as_of"].is_string());
  // The first waits with no one of its team ahead; a running job has no explanation.
  const json ahead = server.Get("/v1/jobs/" + std::to_string(first.body["id"].get<int64_t>()), ana)
                         .body["explanation"];
  EXPECT_EQ(ahead["jobs_ahead_in_team"], 0) << ahead;
  EXPECT_EQ(ahead["summary"], ahead["message"]);
  EXPECT_TRUE(
      server.Get("/v1/jobs/" + std::to_string(holder["job_id"].get<int64_t>()), server.admin())
          .body["explanation"]
          .is_null());
}

TEST(FleetServer, MetricsCountTheStoreInTheBackground) {
  TestServer server([](ServerOptions& o) { o.metrics_refresh_ms = 100; });
  ASSERT_TRUE(server.ok());
  // Counted once at start: the families are there, with no node yet.
  std::string text = server.Get("/metrics", server.admin()).raw;
  EXPECT_NE(text.find("# TYPE ferry_nodes gauge"), std::string::npos) << text;
  EXPECT_EQ(text.find("ferry_nodes{"), std::string::npos) << text;
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-c", "L4", 3)).status,
            200);
  // The next background count shows the node; scrapes in between serve the last count.
  ASSERT_TRUE(WaitFor([&] {
    text = server.Get("/metrics", server.admin()).raw;
    return SampleValue(text, R"(ferry_gpus{pool="default",model="L4"})") == 3;
  })) << text;
  EXPECT_EQ(SampleValue(text, R"(ferry_nodes{pool="default",state="READY"})"), 1);
}

TEST(FleetServer, MetricsShowRequestsJobsNodesAndTheScheduler) {
  TestServer server([](ServerOptions& o) { o.metrics_refresh_ms = 0; });
  const std::string ana = server.CreateUser("acme", "ml", "ana", "user");
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-a", "T4", 2)).status,
            200);
  // One job that runs, one that waits for the GPU it holds, one submitted
  // twice with the same key (a replay), one refused as unsatisfiable.
  json fits = SimpleJob("fits");
  fits["gpus_per_task"] = 1;
  ASSERT_EQ(server.Post("/v1/jobs", ana, fits).status, 201);
  ASSERT_TRUE(WaitFor([&] {
    return server.Get("/v1/jobs?state=RUNNING,ADMITTED", ana).raw.find("\"fits\"") !=
           std::string::npos;
  }));
  json waits = SimpleJob("waits");
  waits["gpus_per_task"] = 2;
  ASSERT_EQ(server.Post("/v1/jobs", ana, waits).status, 201);
  httplib::Headers key = {{"Idempotency-Key", "metrics-1"}};
  ASSERT_EQ(server.Post("/v1/jobs", ana, SimpleJob("again"), key).status, 201);
  ASSERT_EQ(server.Post("/v1/jobs", ana, SimpleJob("again"), key).status, 201);
  json huge = SimpleJob("huge");
  huge["gpus_per_task"] = 8;
  ExpectProblem(server.Post("/v1/jobs", ana, huge), 422, "unsatisfiable");
  EXPECT_EQ(server.Get("/v1/jobs/999999", ana).status, 404);
  EXPECT_EQ(server.Get("/no/such/route", ana).status, 404);

  // Platform admins only: the scrape names every tenant.
  ExpectProblem(server.Get("/metrics", ana), 403, "forbidden");
  EXPECT_EQ(server.Get("/metrics", "").status, 401);

  // The scheduler has placed "fits" and "again" and given "waits" its reason.
  std::string reason;
  ASSERT_TRUE(WaitFor([&] {
    const Reply pending = server.Get("/v1/jobs?state=PENDING", ana);
    if (pending.status != 200 || pending.body["jobs"].size() != 1) return false;
    reason = pending.body["jobs"][0].value("reason", "");
    return reason != "SUBMITTED";
  }));
  std::string text;
  ASSERT_TRUE(WaitFor([&] {
    Reply scrape = server.Get("/metrics", server.admin());
    text = scrape.raw;
    return scrape.status == 200 && SampleValue(text, "ferry_scheduler_placements_total") >= 2;
  })) << text;
  const Reply scrape = server.Get("/metrics", server.admin());
  EXPECT_EQ(scrape.Header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  text = scrape.raw;

  EXPECT_EQ(
      SampleValue(text, R"(ferry_http_requests_total{method="POST",route="/v1/jobs",code="2xx"})"),
      4)
      << text;
  EXPECT_EQ(
      SampleValue(text, R"(ferry_http_requests_total{method="POST",route="/v1/jobs",code="4xx"})"),
      1)
      << text;
  EXPECT_GE(SampleValue(
                text, R"(ferry_http_requests_total{method="GET",route="/v1/jobs/{}",code="4xx"})"),
            1);
  EXPECT_GE(
      SampleValue(text, R"(ferry_http_requests_total{method="GET",route="unmatched",code="4xx"})"),
      1);
  EXPECT_GE(
      SampleValue(text, R"(ferry_http_requests_total{method="GET",route="/metrics",code="4xx"})"),
      2);
  EXPECT_GE(
      SampleValue(
          text,
          R"(ferry_http_request_duration_seconds_count{method="POST",route="/v1/jobs",code="2xx"})"),
      3);
  EXPECT_NE(
      text.find(
          R"(ferry_http_request_duration_seconds_bucket{method="POST",route="/v1/jobs",code="2xx",le="+Inf"})"),
      std::string::npos);
  EXPECT_EQ(SampleValue(text, "ferry_idempotent_replays_total"), 1);
  EXPECT_EQ(SampleValue(text, "ferry_http_requests_in_flight"), 1);  // this scrape
  EXPECT_GE(SampleValue(text, "ferry_scheduler_cycle_duration_seconds_count"), 1);
  EXPECT_GT(SampleValue(text, "ferry_scheduler_last_cycle_timestamp_seconds"), 1.7e9);

  // Store-backed gauges.
  EXPECT_EQ(SampleValue(text, R"(ferry_nodes{pool="default",state="READY"})"), 1) << text;
  EXPECT_EQ(SampleValue(text, R"(ferry_gpus{pool="default",model="T4"})"), 2) << text;
  EXPECT_EQ(SampleValue(text, R"(ferry_gpus_free{pool="default"})"), 1) << text;
  // "fits" holds the one GPU and "again" a CPU slot, both in pool default.
  EXPECT_EQ(SampleValue(text, R"(ferry_gpus_allocated{pool="default",tenant="acme",team="ml"})"), 1)
      << text;
  double pool_jobs = 0;
  for (const char* state : {"ADMITTED", "RUNNING"}) {
    const double n = SampleValue(text, std::string(R"(ferry_pool_jobs{pool="default",state=")") +
                                           state + R"(",tenant="acme",team="ml"})");
    if (n > 0) pool_jobs += n;
  }
  EXPECT_EQ(pool_jobs, 2) << text;
  double acme_jobs = 0;
  for (const char* state : {"PENDING", "ADMITTED", "RUNNING", "SUCCEEDED", "FAILED"}) {
    const double n = SampleValue(
        text, std::string(R"(ferry_jobs{state=")") + state + R"(",tenant="acme",team="ml"})");
    if (n > 0) acme_jobs += n;
  }
  EXPECT_EQ(acme_jobs, 3) << text;
  EXPECT_EQ(SampleValue(text, R"(ferry_jobs{state="PENDING",tenant="acme",team="ml"})"), 1) << text;
  // "waits" is pending with the reason the scheduler gave (GET /v1/jobs shows the same).
  EXPECT_EQ(SampleValue(
                text, R"(ferry_pending_jobs{reason=")" + reason + R"(",tenant="acme",team="ml"})"),
            1)
      << text;
  // The process telemetry rides along.
  EXPECT_NE(text.find("# TYPE ferry_bytes_copied_host_total counter\n"), std::string::npos);
  // Every family has HELP and TYPE, and no name is declared twice.
  std::set<std::string> types;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    EXPECT_TRUE(types.insert(name).second) << "declared twice: " << name;
    EXPECT_NE(text.find("# HELP " + name + " "), std::string::npos) << name;
  }
}

TEST(FleetServer, StopsOnSigterm) {
  ferry::testing::ScratchDir scratch("ferry-server-test");
  ASSERT_TRUE(scratch.ok());
  const std::string& pattern = scratch.path();
  ServerOptions options;
  options.store_url = "sqlite:" + pattern + "/fleet.db";
  options.port = 0;
  options.port_file = pattern + "/port";
  options.data_dir = pattern;
  std::atomic<bool> finished{false};
  Status status = Status::UnknownError("not finished");
  std::thread runner([&] {
    status = RunServer(options, nullptr, /*handle_signals=*/true);
    finished = true;
  });
  const bool listening =
      WaitFor([&] { return finished.load() || !ReadFile(options.port_file).empty(); });
  // The handler is installed before the port file appears.
  if (listening && !finished.load()) ::kill(::getpid(), SIGTERM);
  runner.join();
  EXPECT_TRUE(listening);
  ASSERT_OK(status);
}

// ---- Scheduling with the core.

void WriteText(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
  }
  fs::rename(tmp, path);
}

// Syncs `node` (running `running`) until `accept` likes a reply; returns it.
Reply SyncUntil(const TestServer& server, const std::string& node, const json& running,
                const std::function<bool(const Reply&)>& accept) {
  const json body = {{"node", node}, {"instance", node + "-i1"}, {"running", running}};
  Reply reply;
  for (int i = 0; i < 40; ++i) {
    reply = server.Post("/v1/agent/sync?wait_ms=500", server.agent(), body);
    if (reply.status != 200 || accept(reply)) return reply;
  }
  return reply;
}

bool HasRef(const json& list, int64_t job_id, int attempt) {
  for (const json& ref : list) {
    if (ref["job_id"] == job_id && ref["attempt"] == attempt) return true;
  }
  return false;
}

TEST(FleetServer, PriorityPreemptionWithGraceRequeuesTheVictim) {
  std::string config_path;
  TestServer server([&](ServerOptions& o) {
    config_path = o.data_dir + "/scheduler.yaml";
    WriteText(config_path, "preemption:\n  priority: true\n  grace_s: 2.5\n");
    o.scheduler_config = config_path;
  });
  ASSERT_TRUE(server.ok());
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-p", "H200", 1)).status,
            200);
  json low = SimpleJob("low");
  low["preemptible"] = true;
  low["priority"] = -5;
  const json victim = StartJob(server, "gpu-p", low);
  ASSERT_TRUE(victim.is_object());
  const int64_t victim_id = victim["job_id"].get<int64_t>();

  json high = SimpleJob("high");
  high["gpus_per_task"] = 1;
  high["priority"] = 50;
  Reply created = server.Post("/v1/jobs", server.admin(), high);
  ASSERT_EQ(created.status, 201) << created.raw;
  const int64_t high_id = created.body["id"].get<int64_t>();

  // The victim's agent is told to stop it, with the preemption's grace.
  Reply stop = SyncUntil(server, "gpu-p", json::array({victim}),
                         [&](const Reply& r) { return HasRef(r.body["stop"], victim_id, 1); });
  ASSERT_TRUE(HasRef(stop.body["stop"], victim_id, 1)) << stop.raw;
  EXPECT_EQ(stop.body["stop_grace_ms"], 2500);
  Reply events = server.Get("/v1/jobs/" + std::to_string(victim_id) + "/events", server.admin());
  bool requested = false;
  for (const json& e : events.body["events"]) {
    if (e["type"] == "preempt_requested") {
      requested = true;
      EXPECT_EQ(e["reason"], "PREEMPTED_BY_PRIORITY");
    }
  }
  EXPECT_TRUE(requested) << events.raw;
  EXPECT_EQ(server.Get("/v1/jobs/" + std::to_string(high_id), server.admin()).body["state"],
            "PENDING");
  // While it runs out its grace, the victim's page says who preempts it and by which rule.
  Reply stopping = server.Get("/v1/jobs/" + std::to_string(victim_id), server.admin());
  ASSERT_TRUE(stopping.body["preemption"].is_object()) << stopping.raw;
  EXPECT_EQ(stopping.body["preemption"]["rule"], "PREEMPTED_BY_PRIORITY");
  EXPECT_EQ(stopping.body["preemption"]["for_job"], high_id);

  // It exits after its checkpoint: requeued with attempt 2; the high job starts.
  json exited = {{"node", "gpu-p"}, {"instance", "gpu-p-i1"}, {"running", json::array()}};
  exited["reports"] = {
      {{"job_id", victim_id}, {"task", 0}, {"attempt", 1}, {"kind", "exited"}, {"exit_code", 0}}};
  ASSERT_EQ(server.Post("/v1/agent/sync", server.agent(), exited).status, 200);
  Reply job = server.Get("/v1/jobs/" + std::to_string(victim_id), server.admin());
  EXPECT_EQ(job.body["state"], "PENDING") << job.raw;
  EXPECT_EQ(job.body["attempt"], 2);
  ASSERT_EQ(job.body["attempts"].size(), 2u);
  EXPECT_EQ(job.body["attempts"][0]["state"], "PREEMPTED");
  EXPECT_EQ(job.body["attempts"][0]["reason"], "PREEMPTED_BY_PRIORITY");
  EXPECT_EQ(job.body["attempts"][0]["preempted_for"], high_id) << job.raw;
  EXPECT_TRUE(job.body["attempts"][1]["preempted_for"].is_null());
  EXPECT_TRUE(job.body["preemption"].is_null());  // the new attempt is not being preempted
  Reply start = SyncUntil(server, "gpu-p", json::array(),
                          [&](const Reply& r) { return HasRef(r.body["start"], high_id, 1); });
  EXPECT_TRUE(HasRef(start.body["start"], high_id, 1)) << start.raw;

  Reply status = server.Get("/v1/scheduler", server.admin());
  ASSERT_EQ(status.status, 200) << status.raw;
  EXPECT_GE(status.body["preemptions_total"].get<int64_t>(), 1);
  EXPECT_EQ(status.body["config"]["preemption"]["grace_s"], 2.5);
  EXPECT_EQ(status.body["config_file"], config_path);
}

TEST(FleetServer, MetricsShowJobLifecycleQuotasFairShareAndTheStore) {
  std::string config_path;
  TestServer server([&](ServerOptions& o) {
    config_path = o.data_dir + "/scheduler.yaml";
    WriteText(config_path,
              "ordering: fair_share\n"
              "quotas:\n  - path: default\n    nominal_gpus: 1\n    cohort: pool-a\n"
              "  - path: other\n    nominal_gpus: 3\n    lending_limit: 2\n    cohort: pool-a\n"
              "shares:\n  - path: default\n    shares: 3\n");
    o.scheduler_config = config_path;
    o.metrics_refresh_ms = 0;
  });
  ASSERT_TRUE(server.ok());
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-m", "L4", 2)).status,
            200);
  const json first = StartJob(server, "gpu-m", SimpleJob("first"));
  ASSERT_TRUE(first.is_object());
  const json second = StartJob(server, "gpu-m", SimpleJob("second"));  // borrows 1 from other
  ASSERT_TRUE(second.is_object());
  const json body = {{"node", "gpu-m"},
                     {"instance", "gpu-m-i1"},
                     {"running", {second}},
                     {"reports",
                      {{{"job_id", first["job_id"]},
                        {"task", 0},
                        {"attempt", 1},
                        {"kind", "exited"},
                        {"exit_code", 0}}}}};
  ASSERT_EQ(server.Post("/v1/agent/sync", server.agent(), body).status, 200);

  std::string text;
  ASSERT_TRUE(WaitFor([&] {
    text = server.Get("/metrics", server.admin()).raw;
    return SampleValue(text, R"(ferry_job_completions_total{outcome="SUCCEEDED"})") == 1 &&
           SampleValue(
               text, R"(ferry_quota_used_gpus{quota="default",model="any",cohort="pool-a"})") == 1;
  })) << text;
  EXPECT_EQ(SampleValue(text, "ferry_job_admissions_total"), 2) << text;
  EXPECT_EQ(SampleValue(text, "ferry_job_starts_total"), 2) << text;
  EXPECT_EQ(SampleValue(text, "ferry_job_admission_wait_seconds_count"), 2) << text;
  EXPECT_EQ(SampleValue(text, "ferry_job_start_wait_seconds_count"), 2) << text;
  EXPECT_GT(SampleValue(text, "ferry_job_start_wait_seconds_sum"), 0) << text;
  EXPECT_EQ(SampleValue(text, "ferry_job_requeues_total"), -1) << "no requeue yet: no sample";

  // Quotas after the last cycle: "second" runs on default's 1 nominal GPU.
  const std::string q_default = R"({quota="default",model="any",cohort="pool-a"})";
  const std::string q_other = R"({quota="other",model="any",cohort="pool-a"})";
  EXPECT_EQ(SampleValue(text, "ferry_quota_nominal_gpus" + q_default), 1);
  EXPECT_EQ(SampleValue(text, "ferry_quota_nominal_gpus" + q_other), 3);
  EXPECT_EQ(SampleValue(text, "ferry_quota_borrowed_gpus" + q_default), 0);
  EXPECT_EQ(SampleValue(text, "ferry_quota_lent_gpus" + q_other), 0);
  EXPECT_EQ(SampleValue(text, "ferry_quota_lending_limit_gpus" + q_other), 2);
  EXPECT_EQ(SampleValue(text, "ferry_quota_lending_limit_gpus" + q_default), -1);

  // Fair share: the configured weight and the usage of the one tenant.
  EXPECT_EQ(SampleValue(text, R"(ferry_fair_share_shares{path="default",level="tenant"})"), 3)
      << text;
  EXPECT_GE(SampleValue(text, R"(ferry_fair_share_weighted_share{path="default",level="tenant"})"),
            0);

  // The store's transactions by operation.
  EXPECT_GE(
      SampleValue(text, R"(ferry_store_transaction_duration_seconds_count{operation="CountJobs"})"),
      1)
      << text;
  EXPECT_NE(text.find("# TYPE ferry_node_lease_expiries_total counter"), std::string::npos);
}

TEST(FleetServer, QuotaChangeAtRuntimeNeedsNoRestart) {
  std::string config_path;
  TestServer server([&](ServerOptions& o) {
    config_path = o.data_dir + "/scheduler.yaml";
    WriteText(config_path,
              "quotas:\n  - path: default\n    nominal_gpus: 1\n    borrowing_limit: 0\n");
    o.scheduler_config = config_path;
  });
  ASSERT_TRUE(server.ok());
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-q", "L4", 2)).status,
            200);
  // Soft check at submission: more than the quota could ever give.
  json two = SimpleJob("two");
  two["gpus_per_task"] = 2;
  Reply refused = server.Post("/v1/jobs", server.admin(), two);
  ExpectProblem(refused, 422, "validation");
  ASSERT_TRUE(refused.body["errors"].is_array());
  EXPECT_EQ(refused.body["errors"][0]["field"], "quota") << refused.raw;

  const json first = StartJob(server, "gpu-q", SimpleJob("first"));
  ASSERT_TRUE(first.is_object());
  json second = SimpleJob("second");
  second["gpus_per_task"] = 1;
  Reply created = server.Post("/v1/jobs", server.admin(), second);
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string path = "/v1/jobs/" + std::to_string(created.body["id"].get<int64_t>());
  EXPECT_TRUE(WaitFor(
      [&] { return server.Get(path, server.admin()).body.value("reason", "") == "QUOTA_EXCEEDED"; },
      10));

  // A broken file is reported and ignored.
  WriteText(config_path, "quotas:\n  - path: default\n    nominal_gpus: lots\n");
  EXPECT_TRUE(WaitFor(
      [&] { return server.Get("/v1/scheduler", server.admin()).body["config_error"].is_string(); },
      10));
  EXPECT_EQ(server.Get("/v1/scheduler", server.admin()).body["config"]["quotas"][0]["nominal_gpus"],
            1);
  EXPECT_EQ(server.Get(path, server.admin()).body["state"], "PENDING");

  // Raised: the waiting job starts, no restart.
  WriteText(config_path,
            "quotas:\n  - path: default\n    nominal_gpus: 2\n    borrowing_limit: 0\n");
  EXPECT_TRUE(WaitFor(
      [&] { return server.Get(path, server.admin()).body.value("state", "") == "ADMITTED"; }, 10));
  Reply status = server.Get("/v1/scheduler", server.admin());
  EXPECT_TRUE(status.body["config_error"].is_null()) << status.raw;
  EXPECT_EQ(status.body["config"]["quotas"][0]["nominal_gpus"], 2);
}

TEST(FleetServer, SchedulerStatusIsForPlatformAdmins) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string user = server.CreateUser("default", "default", "ann", "user");
  ExpectProblem(server.Get("/v1/scheduler", user), 403, "forbidden");
  ExpectProblem(server.Get("/v1/scheduler", server.agent()), 403, "forbidden");
  Reply status = server.Get("/v1/scheduler", server.admin());
  ASSERT_EQ(status.status, 200) << status.raw;
  EXPECT_EQ(status.body["config"]["ordering"], "fifo");
  EXPECT_TRUE(status.body["config_file"].is_null());
  EXPECT_TRUE(status.body["providers"].is_array());
  EXPECT_TRUE(status.body["fair_share"].is_array());
  EXPECT_TRUE(status.body["last_cycle"].contains("elapsed_ms"));
  ExpectProblem(server.Get("/v1/scheduler?x=1", server.admin()), 400, "bad-request");
  // Scheduling hints are validated like every field.
  json bad = SimpleJob("bad");
  bad["topology"] = "same_rack";
  ExpectProblem(server.Post("/v1/jobs", server.admin(), bad), 422, "validation");
}

TEST(FleetServer, RefusesABrokenSchedulerConfig) {
  ferry::testing::ScratchDir scratch("ferry-server-test");
  ASSERT_TRUE(scratch.ok());
  const std::string& pattern = scratch.path();
  ServerOptions options;
  options.store_url = "sqlite:" + pattern + "/fleet.db";
  options.port = 0;
  options.data_dir = pattern;
  options.scheduler_config = pattern + "/missing.yaml";
  EXPECT_FALSE(RunServer(options, nullptr, false).ok());
  WriteText(pattern + "/bad.yaml", "ordering: alphabetical\n");
  options.scheduler_config = pattern + "/bad.yaml";
  Status status = RunServer(options, nullptr, false);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("ordering"), std::string::npos) << status.ToString();
}

TEST(FleetServer, RefusesBadOptions) {
  ServerOptions bad;
  bad.threads = 0;
  EXPECT_FALSE(RunServer(bad, nullptr, false).ok());
  bad = ServerOptions();
  bad.default_page_size = 900;
  EXPECT_FALSE(RunServer(bad, nullptr, false).ok());
  bad = ServerOptions();
  bad.store_url = "nosuchscheme:x";
  EXPECT_FALSE(RunServer(bad, nullptr, false).ok());
}

// ---- GET /v1/jobs:watch (watch_hub.h).

// A raw connection that asks for the watch stream as server-sent events and
// collects what arrives.
class SseReader {
 public:
  SseReader(int port, const std::string& token, const std::string& query = "",
            const std::string& last_event_id = "") {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return;
    std::string request = "GET /v1/jobs:watch" + query +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                          "Authorization: Bearer " +
                          token + "\r\n";
    if (!last_event_id.empty()) request += "Last-Event-ID: " + last_event_id + "\r\n";
    request += "\r\n";
    (void)::send(fd_, request.data(), request.size(), MSG_NOSIGNAL);
  }
  ~SseReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Reads until `condition` holds on everything received, or 10 s pass.
  bool ReadUntil(const std::function<bool(const std::string&)>& condition) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!condition(text_)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed_ = true;
        return condition(text_);
      }
      text_.append(buffer, static_cast<size_t>(n));
    }
    return true;
  }
  bool Contains(const std::string& part) {
    return ReadUntil([&](const std::string& t) { return t.find(part) != std::string::npos; });
  }
  // The data of every "state" event so far.
  std::vector<json> StateEvents() const {
    std::vector<json> out;
    size_t at = 0;
    while ((at = text_.find("event: state\ndata: ", at)) != std::string::npos) {
      at += std::strlen("event: state\ndata: ");
      out.push_back(json::parse(text_.substr(at, text_.find('\n', at) - at), nullptr, false));
    }
    return out;
  }
  const std::string& text() const { return text_; }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  std::string text_;
  bool closed_ = false;
};

int64_t SubmitId(const TestServer& server, const std::string& token, const std::string& name) {
  Reply created = server.Post("/v1/jobs", token, SimpleJob(name));
  EXPECT_EQ(created.status, 201) << created.raw;
  return created.body.is_object() ? created.body.value("id", int64_t{0}) : 0;
}

TEST(WatchTest, StreamIsScopedToTheTenantAndResumesFromLastEventId) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string alice = server.CreateUser("tenant-a", "ml", "alice", "user");
  const std::string bob = server.CreateUser("tenant-b", "ml", "bob", "user");
  SseReader a(server.port(), alice);
  SseReader b(server.port(), bob);
  ASSERT_TRUE(a.Contains("event: ready"));
  ASSERT_TRUE(b.Contains("event: ready"));
  EXPECT_NE(a.text().find("text/event-stream"), std::string::npos) << a.text();
  const int64_t mine = SubmitId(server, alice, "mine");
  const int64_t theirs = SubmitId(server, bob, "theirs");
  ASSERT_EQ(
      server.Post("/v1/jobs/" + std::to_string(mine) + ":cancel", alice, json::object()).status,
      200);
  ASSERT_TRUE(a.Contains("\"state\":\"CANCELLED\""));
  ASSERT_TRUE(b.Contains("\"job_id\":" + std::to_string(theirs)));
  for (const json& event : a.StateEvents()) {
    EXPECT_EQ(event.value("job_id", int64_t{0}), mine) << event;
    EXPECT_EQ(event.value("tenant", ""), "tenant-a");
  }
  for (const json& event : b.StateEvents()) EXPECT_EQ(event.value("job_id", int64_t{0}), theirs);
  // The admin sees both; a stream that resumes after the first event gets the rest only.
  std::vector<json> seen = a.StateEvents();
  ASSERT_EQ(seen.size(), 2u) << a.text();
  EXPECT_EQ(seen[0].value("state", ""), "PENDING");
  const std::string first_id = std::to_string(seen[0].value("id", int64_t{0}));
  SseReader resumed(server.port(), alice, "", first_id);
  ASSERT_TRUE(resumed.Contains("\"state\":\"CANCELLED\""));
  ASSERT_EQ(resumed.StateEvents().size(), 1u) << resumed.text();
  EXPECT_NE(resumed.text().find("id: " + first_id + "\nevent: ready"), std::string::npos);
  // A filter on state and team.
  SseReader cancelled(server.port(), server.admin(), "?since=0&state=cancelled&team=ml");
  ASSERT_TRUE(cancelled.Contains("\"state\":\"CANCELLED\""));
  for (const json& event : cancelled.StateEvents())
    EXPECT_EQ(event.value("state", ""), "CANCELLED");
  ExpectProblem(server.Send("GET", "/v1/jobs:watch", alice, "", "application/json",
                            {{"Accept", "text/event-stream"}, {"Last-Event-ID", "x"}}),
                400, "bad-request");
}

TEST(WatchTest, LongPollWaitsTimesOutAndRejectsBadSince) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string alice = server.CreateUser("tenant-a", "ml", "alice", "user");
  const std::string bob = server.CreateUser("tenant-b", "ml", "bob", "user");
  Reply now = server.Get("/v1/jobs:watch", alice);
  ASSERT_EQ(now.status, 200) << now.raw;
  EXPECT_TRUE(now.body["events"].empty());
  const int64_t since = now.body.value("next_since", int64_t{-1});
  ASSERT_GE(since, 0);
  // Nothing happens in tenant B: the poll ends empty at its timeout.
  const std::string path = "/v1/jobs:watch?timeout_s=1&since=" + std::to_string(since);
  SubmitId(server, alice, "a1");
  Reply empty = server.Get(path, bob);
  ASSERT_EQ(empty.status, 200) << empty.raw;
  EXPECT_TRUE(empty.body["events"].empty()) << empty.raw;
  EXPECT_GT(empty.body.value("next_since", int64_t{0}), since);
  // Alice's poll returns her event; one that waits is woken by the next.
  Reply got = server.Get(path, alice);
  ASSERT_EQ(got.status, 200) << got.raw;
  // (the submission, and the scheduler's pending reason when it ran meanwhile)
  ASSERT_GE(got.body["events"].size(), 1u) << got.raw;
  EXPECT_EQ(got.body["events"][0].value("job_name", ""), "a1");
  EXPECT_EQ(got.body["events"][0].value("state", ""), "PENDING");
  const int64_t next = got.body.value("next_since", int64_t{0});
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    SubmitId(server, alice, "a2");
  });
  Reply woken = server.Get("/v1/jobs:watch?timeout_s=20&since=" + std::to_string(next), alice);
  later.join();
  ASSERT_EQ(woken.status, 200) << woken.raw;
  ASSERT_GE(woken.body["events"].size(), 1u) << woken.raw;
  // (a1's pending reason may come first when the scheduler wrote it late)
  EXPECT_NE(woken.raw.find("\"job_name\":\"a2\""), std::string::npos) << woken.raw;
  // Bad input.
  ExpectProblem(server.Get("/v1/jobs:watch?since=-1", alice), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs:watch?since=abc", alice), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs:watch?since=999999", alice), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs:watch?timeout_s=61&since=0", alice), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs:watch?state=NOPE", alice), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs:watch?bogus=1", alice), 400, "bad-request");
  ExpectProblem(server.Get("/v1/jobs:watch", server.agent()), 403, "forbidden");
  ExpectProblem(server.Get("/v1/jobs:watch", ""), 401, "unauthorized");
}

TEST(WatchTest, StreamsBeyondTheCapAreRefusedAndCounted) {
  TestServer server([](ServerOptions& o) { o.max_watch_streams = 2; });
  ASSERT_TRUE(server.ok());
  SseReader one(server.port(), server.admin());
  SseReader two(server.port(), server.admin());
  ASSERT_TRUE(one.Contains("event: ready"));
  ASSERT_TRUE(two.Contains("event: ready"));
  Reply refused = server.Send("GET", "/v1/jobs:watch", server.admin(), "", "application/json",
                              {{"Accept", "text/event-stream"}});
  ExpectProblem(refused, 503, "unavailable");
  EXPECT_EQ(refused.Header("Retry-After"), "5");
  // Two streams hold no worker: ordinary requests go on (8 workers, but
  // also with more streams than workers: see test_watch.py).
  EXPECT_EQ(SubmitId(server, server.admin(), "still-served") > 0, true);
  ASSERT_TRUE(one.Contains("still-served"));
  Reply metrics = server.Get("/metrics", server.admin());
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.raw.find("ferry_watch_streams{kind=\"sse\"} 2"), std::string::npos)
      << metrics.raw;
  EXPECT_NE(metrics.raw.find("ferry_watch_rejected_total{kind=\"sse\"} 1"), std::string::npos);
  EXPECT_NE(metrics.raw.find("ferry_watch_events_sent_total{kind=\"sse\"}"), std::string::npos);
  // The server stops with streams open.
  EXPECT_TRUE(server.Stop().ok());
  one.ReadUntil([](const std::string&) { return false; });
  EXPECT_TRUE(one.closed());
}

// Clients that send requests back to back on kept-alive connections hold
// every worker; a client opening a new connection is still served: while it
// waits, each busy connection gets its next answer with "Connection: close"
// and reconnects behind it.
TEST(FleetServer, BusyKeptAliveClientsDoNotStarveANewConnection) {
  TestServer server([](ServerOptions& o) { o.threads = 2; });
  ASSERT_TRUE(server.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> closes{0};
  std::atomic<int> busy_answers{0};
  std::vector<std::thread> busy;
  for (int i = 0; i < 2; ++i) {
    busy.emplace_back([&] {
      httplib::Client client("127.0.0.1", server.port());
      client.set_keep_alive(true);
      const httplib::Headers auth = {{"Authorization", "Bearer " + server.admin()}};
      while (!stop.load()) {
        httplib::Result r = client.Get("/v1/whoami", auth);
        if (!r) continue;
        ++busy_answers;
        if (r->get_header_value("Connection") == "close") ++closes;
      }
    });
  }
  ASSERT_TRUE(WaitFor([&] { return busy_answers.load() > 50; }));
  // Fresh connections, one request each, while the two keep going. Without
  // the hand-over a fresh one waits until a busy connection reaches its
  // keep-alive limit (100,000 requests); with it, a few answers at most.
  int served = 0;
  int most_answers_while_waiting = 0;
  for (int i = 0; i < 5; ++i) {
    httplib::Client fresh("127.0.0.1", server.port());
    fresh.set_read_timeout(60, 0);
    const int before = busy_answers.load();
    httplib::Result r = fresh.Get("/healthz");
    most_answers_while_waiting = std::max(most_answers_while_waiting, busy_answers.load() - before);
    if (r && r->status == 200) ++served;
  }
  stop = true;
  for (std::thread& t : busy) t.join();
  EXPECT_EQ(served, 5);
  EXPECT_GE(closes.load(), 1) << "no busy connection was asked to close";
  EXPECT_LT(most_answers_while_waiting, 1000);
}

// ---- Datasets and job inputs (docs/fleet-api.md#datasets).

namespace datasets {

const std::string kHexA(64, 'a');
const std::string kHexB(64, 'b');

json Manifest(const std::string& name, int objects, const std::string& hex = kHexA) {
  json list = json::array();
  for (int i = 0; i < objects; ++i) {
    list.push_back(
        {{"path", "shard/" + std::to_string(i) + ".bin"}, {"size", 100}, {"sha256", hex}});
  }
  return {{"name", name}, {"source", "s3://lake/" + name + "/"}, {"objects", std::move(list)}};
}

// The field of the first error naming `field`'s detail, or "".
std::string ErrorDetail(const Reply& reply, const std::string& field) {
  if (!reply.body.is_object() || !reply.body.contains("errors")) return "";
  for (const json& error : reply.body["errors"]) {
    if (error.value("field", "") == field) return error.value("detail", "");
  }
  return "";
}

}  // namespace datasets

TEST(FleetServer, DatasetsRegisterListShowAndStayInTheirTenant) {
  using datasets::Manifest;
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string ana = server.CreateUser("acme", "ml", "ana", "user");
  const std::string gil = server.CreateUser("globex", "infra", "gil", "user");

  Reply created = server.Post("/v1/datasets", ana, Manifest("imagenet", 3));
  ASSERT_EQ(created.status, 201) << created.raw;
  EXPECT_EQ(created.body["name"], "imagenet");
  EXPECT_EQ(created.body["version"], 1);
  EXPECT_EQ(created.body["bytes"], 300);
  EXPECT_EQ(created.body["objects"], 3);
  EXPECT_EQ(created.body["created_by"], "ana");
  EXPECT_EQ(created.body["digest"].get<std::string>().rfind("sha256:", 0), 0u);
  EXPECT_EQ(created.Header("Location"), "/v1/datasets/imagenet/versions/1");
  // The same manifest: 200 with version 1; a changed one: version 2.
  Reply same = server.Post("/v1/datasets", ana, Manifest("imagenet", 3));
  EXPECT_EQ(same.status, 200) << same.raw;
  EXPECT_EQ(same.body["version"], 1);
  EXPECT_EQ(same.body["digest"], created.body["digest"]);
  Reply changed = server.Post("/v1/datasets", ana, Manifest("imagenet", 4));
  EXPECT_EQ(changed.status, 201) << changed.raw;
  EXPECT_EQ(changed.body["version"], 2);

  Reply list = server.Get("/v1/datasets", ana);
  ASSERT_EQ(list.status, 200) << list.raw;
  ASSERT_EQ(list.body["datasets"].size(), 1u);
  EXPECT_EQ(list.body["datasets"][0]["latest_version"], 2);
  EXPECT_EQ(list.body["datasets"][0]["objects"], 4);
  Reply shown = server.Get("/v1/datasets/imagenet", ana);
  ASSERT_EQ(shown.status, 200) << shown.raw;
  EXPECT_EQ(shown.body["version"], 2);
  ASSERT_EQ(shown.body["versions"].size(), 2u);
  EXPECT_EQ(shown.body["versions"][0]["version"], 2);  // newest first
  Reply v1 = server.Get("/v1/datasets/imagenet/versions/1", ana);
  ASSERT_EQ(v1.status, 200) << v1.raw;
  ASSERT_EQ(v1.body["manifest"].size(), 3u);
  EXPECT_EQ(v1.body["manifest"][0]["path"], "shard/0.bin");
  EXPECT_EQ(v1.body["manifest"][0]["sha256"], datasets::kHexA);

  // Another tenant: its own empty list, and 404 (not 403) for ana's dataset.
  Reply theirs = server.Get("/v1/datasets", gil);
  ASSERT_EQ(theirs.status, 200);
  EXPECT_TRUE(theirs.body["datasets"].empty()) << theirs.raw;
  ExpectProblem(server.Get("/v1/datasets/imagenet", gil), 404, "not-found");
  ExpectProblem(server.Get("/v1/datasets/imagenet/versions/1", gil), 404, "not-found");
  // Platform admins list every tenant's, each naming its tenant.
  Reply all = server.Get("/v1/datasets", server.admin());
  ASSERT_EQ(all.body["datasets"].size(), 1u) << all.raw;
  EXPECT_EQ(all.body["datasets"][0]["tenant"], "acme");
  // Paths that name no version.
  for (const char* path :
       {"/v1/datasets/imagenet/versions/3", "/v1/datasets/imagenet/versions/0",
        "/v1/datasets/imagenet/versions/x", "/v1/datasets/c4", "/v1/datasets/a%20b"}) {
    ExpectProblem(server.Get(path, ana), 404, "not-found");
  }

  // Bad manifests: 422 naming the field; nothing is created.
  json bad = Manifest("imagenet", 2);
  bad["objects"][0]["path"] = "../etc/passwd";
  bad["objects"][1]["sha256"] = "ABC";
  Reply refused = server.Post("/v1/datasets", ana, bad);
  ExpectProblem(refused, 422, "validation");
  EXPECT_NE(datasets::ErrorDetail(refused, "objects[0].path").find(".."), std::string::npos)
      << refused.raw;
  EXPECT_EQ(datasets::ErrorDetail(refused, "objects[1].sha256"),
            "must be 64 lower-case hex digits");
  json no_slash = Manifest("imagenet", 1);
  no_slash["source"] = "s3://lake/imagenet";
  ExpectProblem(server.Post("/v1/datasets", ana, no_slash), 422, "validation");
  json duplicate = Manifest("imagenet", 2);
  duplicate["objects"][1]["path"] = duplicate["objects"][0]["path"];
  ExpectProblem(server.Post("/v1/datasets", ana, duplicate), 422, "validation");
  ExpectProblem(server.Post("/v1/datasets", ana, json::object()), 422, "validation");
  ExpectProblem(server.Send("POST", "/v1/datasets", ana, "{\"name\": "), 400, "malformed-json");
  EXPECT_EQ(server.Get("/v1/datasets/imagenet", ana).body["version"], 2);
  // Agents may not register datasets.
  ExpectProblem(server.Post("/v1/datasets", server.agent(), Manifest("x", 1)), 403, "forbidden");
}

TEST(FleetServer, ManifestsMayExceedTheBodyLimitOfOtherRoutes) {
  TestServer server([](ServerOptions& o) {
    o.max_body_bytes = 64 * 1024;
    o.max_manifest_bytes = 8 << 20;
  });
  ASSERT_TRUE(server.ok());
  json big = datasets::Manifest("big", 2000);  // ~200 KB of JSON
  ASSERT_GT(big.dump().size(), 64u * 1024);
  Reply created = server.Post("/v1/datasets", server.admin(), big);
  ASSERT_EQ(created.status, 201) << created.raw.substr(0, 300);
  EXPECT_EQ(created.body["objects"], 2000);
  // The same size elsewhere is refused, and beyond the manifest limit too.
  json job = SimpleJob();
  job["env"] = {{"BIG", std::string(100 * 1024, 'x')}};
  ExpectProblem(server.Post("/v1/jobs", server.admin(), job), 413, "payload-too-large");
  json huge = datasets::Manifest("huge", 90'000);
  Reply too_big = server.Post("/v1/datasets", server.admin(), huge);
  EXPECT_EQ(too_big.status, 413) << too_big.raw.substr(0, 300);
}

TEST(FleetServer, SubmissionResolvesDatasetInputsInTheCallersTenant) {
  using datasets::ErrorDetail;
  using datasets::Manifest;
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string ana = server.CreateUser("acme", "ml", "ana", "user");
  const std::string gil = server.CreateUser("globex", "infra", "gil", "user");
  ASSERT_EQ(server.Post("/v1/datasets", ana, Manifest("imagenet", 3)).status, 201);
  Reply v2 = server.Post("/v1/datasets", ana, Manifest("imagenet", 5));
  ASSERT_EQ(v2.status, 201);

  json spec = SimpleJob("train");
  spec["datasets"] = {"c4"};
  spec["inputs"] = json::parse(R"([{"name": "train", "dataset": "imagenet"},
      {"name": "old", "dataset": "imagenet", "version": 1},
      {"name": "vocab", "uri": "https://h/vocab.txt", "size": 12, "sha256": ")" +
                               datasets::kHexB + R"("}])");
  Reply created = server.Post("/v1/jobs", ana, spec);
  ASSERT_EQ(created.status, 201) << created.raw;
  Reply job = server.Get("/v1/jobs/" + std::to_string(created.body["id"].get<int64_t>()), ana);
  ASSERT_EQ(job.status, 200);
  const json& inputs = job.body["spec"]["inputs"];
  ASSERT_EQ(inputs.size(), 3u) << job.raw;
  EXPECT_EQ(inputs[0]["version"], 2);  // the latest at submission
  EXPECT_EQ(inputs[0]["manifest_digest"], v2.body["digest"]);
  EXPECT_EQ(inputs[0]["bytes"], 500);
  EXPECT_EQ(inputs[0]["objects"], 5);
  EXPECT_EQ(inputs[1]["version"], 1);
  EXPECT_EQ(inputs[1]["objects"], 3);
  EXPECT_EQ(inputs[2]["bytes"], 12);
  EXPECT_EQ(inputs[2]["objects"], 1);
  EXPECT_FALSE(inputs[2].contains("manifest_digest"));
  // The locality hint gains the dataset once.
  EXPECT_EQ(job.body["spec"]["datasets"], json::array({"c4", "imagenet"}));

  // Unknown dataset, unknown version, another tenant's dataset, stream mode.
  json unknown = SimpleJob();
  unknown["inputs"] = {{{"name", "train"}, {"dataset", "c4"}}};
  Reply no_dataset = server.Post("/v1/jobs", ana, unknown);
  ExpectProblem(no_dataset, 422, "validation");
  EXPECT_NE(ErrorDetail(no_dataset, "inputs[0].dataset").find("input \"train\": no dataset c4"),
            std::string::npos)
      << no_dataset.raw;
  unknown["inputs"] = {{{"name", "train"}, {"dataset", "imagenet"}, {"version", 7}}};
  Reply no_version = server.Post("/v1/jobs", ana, unknown);
  ExpectProblem(no_version, 422, "validation");
  EXPECT_NE(ErrorDetail(no_version, "inputs[0].version").find("has no version 7"),
            std::string::npos)
      << no_version.raw;
  unknown["inputs"] = {{{"name", "train"}, {"dataset", "imagenet"}}};
  ExpectProblem(server.Post("/v1/jobs", gil, unknown), 422, "validation");
  unknown["inputs"] = {{{"name", "train"}, {"dataset", "imagenet"}, {"mode", "stream"}}};
  Reply stream = server.Post("/v1/jobs", ana, unknown);
  ExpectProblem(stream, 422, "validation");
  EXPECT_EQ(ErrorDetail(stream, "inputs[0].mode"),
            "mode \"stream\" is not implemented; use \"copy\"");
  EXPECT_EQ(server.Get("/v1/jobs", ana).body["jobs"].size(), 1u);
}

TEST(FleetServer, AssignmentsCarryInputsAndStagingReportsReachTheTimeline) {
  TestServer server;
  ASSERT_TRUE(server.ok());
  ASSERT_EQ(server.Post("/v1/agent/register", server.agent(), GpuNode("gpu-st", "L4", 2)).status,
            200);
  ASSERT_EQ(server.Post("/v1/datasets", server.admin(), datasets::Manifest("imagenet", 2)).status,
            201);
  json spec = SimpleJob("staged");
  spec["gpus_per_task"] = 2;
  spec["inputs"] = json::parse(R"([{"name": "train", "dataset": "imagenet"},
      {"name": "vocab", "uri": "https://h/dir/vocab.txt", "sha256": ")" +
                               datasets::kHexB + R"("}])");
  Reply created = server.Post("/v1/jobs", server.admin(), spec);
  ASSERT_EQ(created.status, 201) << created.raw;
  const int64_t id = created.body["id"].get<int64_t>();
  const std::string path = "/v1/jobs/" + std::to_string(id);
  json body = {{"node", "gpu-st"}, {"instance", "gpu-st-i1"}};
  json assignment;
  for (int i = 0; i < 8 && assignment.is_null(); ++i) {
    Reply reply = server.Post("/v1/agent/sync?wait_ms=3000", server.agent(), body);
    for (const json& start : reply.body["start"]) {
      if (start["job_id"] == id) assignment = start;
    }
  }
  ASSERT_TRUE(assignment.is_object());
  EXPECT_EQ(assignment["tenant"], "default");
  ASSERT_EQ(assignment["inputs"].size(), 2u) << assignment.dump();
  const json& train = assignment["inputs"][0];
  EXPECT_EQ(train["name"], "train");
  ASSERT_EQ(train["objects"].size(), 2u);
  EXPECT_EQ(train["objects"][0], (json{{"path", "shard/0.bin"},
                                       {"uri", "s3://lake/imagenet/shard/0.bin"},
                                       {"size", 100},
                                       {"sha256", datasets::kHexA}}));
  const json& vocab = assignment["inputs"][1];
  EXPECT_EQ(vocab["objects"], json::array({{{"path", "vocab.txt"},
                                            {"uri", "https://h/dir/vocab.txt"},
                                            {"size", -1},
                                            {"sha256", datasets::kHexB}}}));
  // What the agent is sent parses with the shared parser.
  EXPECT_TRUE(ParseStagedInputs(assignment["inputs"]).ok());

  const json ref = {{"job_id", id}, {"task", 0}, {"attempt", 1}};
  auto report = [&](const std::string& kind, const std::string& message) {
    json sync = body;
    sync["running"] = {ref};
    sync["reports"] = {
        {{"job_id", id}, {"task", 0}, {"attempt", 1}, {"kind", kind}, {"message", message}}};
    return server.Post("/v1/agent/sync", server.agent(), sync);
  };
  EXPECT_EQ(report("staging", "2 inputs, 3 objects, 200 B").status, 200);
  EXPECT_EQ(report("staged", "2 inputs, 3 objects: 200 B fetched in 0.1 s").status, 200);
  EXPECT_EQ(server.Get(path, server.admin()).body["state"], "ADMITTED");
  Reply failed = report("staging_failed", "input vocab: vocab.txt: sha256 mismatch");
  EXPECT_EQ(failed.status, 200) << failed.raw;
  Reply job = server.Get(path, server.admin());
  EXPECT_EQ(job.body["state"], "FAILED");
  EXPECT_EQ(job.body["reason"], "STAGING_FAILED");
  EXPECT_EQ(job.body["attempt"], 1);
  Reply gpus = server.Get("/v1/gpus", server.admin());
  for (const json& gpu : gpus.body["gpus"]) EXPECT_EQ(gpu["allocated"], false) << gpus.raw;
  Reply events = server.Get(path + "/events", server.admin());
  std::set<std::string> types;
  for (const json& event : events.body["events"]) {
    types.insert(event["type"].get<std::string>());
    if (event["type"] == "staged") {
      EXPECT_NE(event["message"].get<std::string>().find("0.1 s"), std::string::npos);
    }
  }
  EXPECT_EQ(types.count("staging_started"), 1u) << events.raw;
  EXPECT_EQ(types.count("staged"), 1u);
  EXPECT_EQ(types.count("staging_failed"), 1u);
  // An unknown kind is refused.
  ExpectProblem(report("prefetched", ""), 422, "validation");
}

// ---- Node cache reports (POST /v1/agent/sync "cache", GET /v1/nodes).

namespace caches {

std::string Digest(char hex) { return "sha256:" + std::string(64, hex); }

json CacheReport(json inputs) {
  return {{"quota_bytes", 10000}, {"bytes", 3000},        {"entries", 4},
          {"hit_bytes", 300},     {"fetched_bytes", 100}, {"inputs", std::move(inputs)}};
}

json SyncWithCache(const std::string& node, const json& cache) {
  return {{"node", node}, {"instance", node + "-i1"}, {"cache", cache}};
}

const json* NodeNamed(const Reply& reply, const std::string& name) {
  if (!reply.body.is_object() || !reply.body.contains("nodes")) return nullptr;
  for (const json& node : reply.body["nodes"]) {
    if (node["name"] == name) return &node;
  }
  return nullptr;
}

}  // namespace caches

TEST(FleetServer, NodeCacheReportsAreValidatedAndShownPerTenant) {
  using caches::CacheReport;
  using caches::Digest;
  using caches::SyncWithCache;
  using datasets::ErrorDetail;
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string& agent = server.agent();
  ASSERT_EQ(server.Post("/v1/agent/register", agent, GpuNode("gpu-a", "T4", 1)).status, 200);
  ASSERT_EQ(server.Post("/v1/agent/register", agent, GpuNode("gpu-b", "T4", 1)).status, 200);
  const std::string ana = server.CreateUser("acme", "vision", "ana", "user");
  const std::string gil = server.CreateUser("globex", "nlp", "gil", "user");

  // No report yet: null.
  Reply before = server.Get("/v1/nodes", server.admin());
  ASSERT_NE(caches::NodeNamed(before, "gpu-a"), nullptr) << before.raw;
  EXPECT_TRUE((*caches::NodeNamed(before, "gpu-a"))["cache"].is_null());

  const json inputs = {
      {{"tenant", "acme"}, {"digest", Digest('a')}, {"bytes", 1000}, {"total_bytes", 1000}},
      {{"tenant", "globex"}, {"digest", Digest('b')}, {"bytes", 500}, {"total_bytes", 2000}},
      {{"tenant", "acme"}, {"digest", Digest('c')}, {"bytes", 0}, {"total_bytes", 10}}};
  Reply synced = server.Post("/v1/agent/sync", agent, SyncWithCache("gpu-a", CacheReport(inputs)));
  ASSERT_EQ(synced.status, 200) << synced.raw;

  Reply all = server.Get("/v1/nodes", server.admin());
  const json& cache = (*caches::NodeNamed(all, "gpu-a"))["cache"];
  ASSERT_TRUE(cache.is_object()) << all.raw;
  EXPECT_EQ(cache["quota_bytes"], 10000);
  EXPECT_EQ(cache["bytes"], 3000);
  EXPECT_EQ(cache["entries"], 4);
  EXPECT_EQ(cache["hit_bytes"], 300);
  EXPECT_EQ(cache["fetched_bytes"], 100);
  EXPECT_DOUBLE_EQ(cache["hit_ratio"].get<double>(), 0.75);
  ASSERT_EQ(cache["inputs"].size(), 2u) << cache.dump();  // the 0-byte input is dropped
  EXPECT_EQ(cache["inputs"][0]["tenant"], "acme");
  EXPECT_EQ(cache["inputs"][1]["tenant"], "globex");
  EXPECT_EQ(cache["inputs"][1]["total_bytes"], 2000);
  EXPECT_TRUE((*caches::NodeNamed(all, "gpu-b"))["cache"].is_null());

  // A tenant sees the sizes and only its own inputs.
  const json mine = server.Get("/v1/nodes/gpu-a", ana).body["cache"];
  ASSERT_EQ(mine["inputs"].size(), 1u) << mine.dump();
  EXPECT_EQ(mine["inputs"][0]["digest"], Digest('a'));
  EXPECT_EQ(mine["bytes"], 3000);
  const json theirs = server.Get("/v1/nodes/gpu-a", gil).body["cache"];
  ASSERT_EQ(theirs["inputs"].size(), 1u);
  EXPECT_EQ(theirs["inputs"][0]["digest"], Digest('b'));
  EXPECT_EQ(server.Get("/v1/nodes", ana).raw.find(Digest('b')), std::string::npos);

  // Bad reports: 422 naming the field; the last good report stays.
  auto refused = [&](const json& bad, const std::string& field) {
    Reply reply = server.Post("/v1/agent/sync", agent, SyncWithCache("gpu-a", bad));
    ExpectProblem(reply, 422, "validation");
    EXPECT_NE(ErrorDetail(reply, field), "") << field << ": " << reply.raw;
  };
  refused(json::array(), "cache");
  json negative = CacheReport(json::array());
  negative["bytes"] = -1;
  refused(negative, "cache.bytes");
  json missing = CacheReport(json::array());
  missing.erase("quota_bytes");
  refused(missing, "cache.quota_bytes");
  json fractional = CacheReport(json::array());
  fractional["hit_bytes"] = 1.5;
  refused(fractional, "cache.hit_bytes");
  json unknown = CacheReport(json::array());
  unknown["hits"] = 1;
  refused(unknown, "cache.hits");
  refused(CacheReport(
              {{{"tenant", "acme"}, {"digest", "sha256:ABC"}, {"bytes", 1}, {"total_bytes", 1}}}),
          "cache.inputs[0].digest");
  refused(CacheReport({{{"tenant", "acme"},
                        {"digest", std::string(64, 'a')},
                        {"bytes", 1},
                        {"total_bytes", 1}}}),
          "cache.inputs[0].digest");
  refused(CacheReport({{{"tenant", "no such/tenant"},
                        {"digest", Digest('a')},
                        {"bytes", 1},
                        {"total_bytes", 1}}}),
          "cache.inputs[0].tenant");
  refused(CacheReport(
              {{{"tenant", "acme"}, {"digest", Digest('a')}, {"bytes", 5}, {"total_bytes", 4}}}),
          "cache.inputs[0].bytes");
  refused(CacheReport({{{"tenant", "acme"}, {"digest", Digest('a')}, {"bytes", 1}}}),
          "cache.inputs[0].total_bytes");
  refused(CacheReport({{{"tenant", "acme"},
                        {"digest", Digest('a')},
                        {"bytes", 1},
                        {"total_bytes", 1},
                        {"path", "/x"}}}),
          "cache.inputs[0].path");
  const json one = {{"tenant", "acme"}, {"digest", Digest('a')}, {"bytes", 1}, {"total_bytes", 1}};
  refused(CacheReport({one, one}), "cache.inputs[1].digest");
  refused(CacheReport(json::array({one, 3})), "cache.inputs[1]");
  json many = json::array();
  for (int i = 0; i < 257; ++i) {
    char hex[65];
    std::snprintf(hex, sizeof hex, "%064x", i);
    many.push_back({{"tenant", "acme"},
                    {"digest", std::string("sha256:") + hex},
                    {"bytes", 1},
                    {"total_bytes", 1}});
  }
  refused(CacheReport(many), "cache.inputs");
  many.erase(many.size() - 1);
  // 256 are fine.
  ASSERT_EQ(server.Post("/v1/agent/sync", agent, SyncWithCache("gpu-b", CacheReport(many))).status,
            200);
  EXPECT_EQ(server.Get("/v1/nodes/gpu-b", server.admin()).body["cache"]["inputs"].size(), 256u);
  EXPECT_EQ(server.Get("/v1/nodes/gpu-a", server.admin()).body["cache"]["inputs"].size(), 2u);

  // A sync without "cache" keeps the report; a stale instance's report is not taken.
  ASSERT_EQ(
      server.Post("/v1/agent/sync", agent, {{"node", "gpu-a"}, {"instance", "gpu-a-i1"}}).status,
      200);
  EXPECT_EQ(server.Get("/v1/nodes/gpu-a", server.admin()).body["cache"]["bytes"], 3000);
  json stale = SyncWithCache("gpu-a", CacheReport(json::array()));
  stale["instance"] = "gpu-a-old";
  stale["cache"]["bytes"] = 1;
  server.Post("/v1/agent/sync", agent, stale);
  EXPECT_EQ(server.Get("/v1/nodes/gpu-a", server.admin()).body["cache"]["bytes"], 3000);

  // Re-registration (a new agent instance): the report goes until it sends one.
  json again = GpuNode("gpu-a", "T4", 1);
  again["instance"] = "gpu-a-i2";
  ASSERT_EQ(server.Post("/v1/agent/register", agent, again).status, 200);
  EXPECT_TRUE(server.Get("/v1/nodes/gpu-a", server.admin()).body["cache"].is_null());
}

TEST(FleetServer, JobsGoToTheNodeHoldingTheirInputs) {
  using caches::CacheReport;
  using caches::SyncWithCache;
  TestServer server;
  ASSERT_TRUE(server.ok());
  const std::string& admin = server.admin();
  const std::string& agent = server.agent();
  ASSERT_EQ(server.Post("/v1/agent/register", agent, GpuNode("gpu-a", "T4", 1)).status, 200);
  ASSERT_EQ(server.Post("/v1/agent/register", agent, GpuNode("gpu-b", "T4", 1)).status, 200);
  const std::string hex(64, 'd');
  auto submit = [&](const std::string& name, bool with_input) {
    json spec = SimpleJob(name);
    spec["gpus_per_task"] = 1;
    if (with_input) {
      spec["inputs"] = {
          {{"name", "weights"}, {"uri", "https://h/w.bin"}, {"sha256", hex}, {"size", 4096}}};
    }
    Reply created = server.Post("/v1/jobs", admin, spec);
    EXPECT_EQ(created.status, 201) << created.raw;
    return created.body.value("id", int64_t{0});
  };
  auto node_of = [&](int64_t id) {
    json job;
    EXPECT_TRUE(WaitFor([&] {
      job = server.Get("/v1/jobs/" + std::to_string(id), admin).body;
      return job.is_object() && job["state"] == "ADMITTED";
    })) << job.dump();
    return job["placement"].empty() ? std::string() : job["placement"][0].value("node", "");
  };
  auto cancel = [&](int64_t id) {
    ASSERT_EQ(
        server.Post("/v1/jobs/" + std::to_string(id) + ":cancel", admin, json::object()).status,
        200);
  };

  // Nothing cached: the ordinary rule picks one node; a job with the input
  // goes to the same one.
  const int64_t plain = submit("plain", false);
  const std::string ordinary = node_of(plain);
  ASSERT_FALSE(ordinary.empty());
  cancel(plain);
  const std::string other = ordinary == "gpu-a" ? "gpu-b" : "gpu-a";
  // Wait until both GPUs are free again.
  ASSERT_TRUE(WaitFor([&] {
    Reply gpus = server.Get("/v1/gpus", admin);
    for (const json& gpu : gpus.body["gpus"]) {
      if (gpu["allocated"].get<bool>()) {
        server.Post("/v1/agent/sync", agent,
                    {{"node", gpu["node"]}, {"instance", gpu["node"].get<std::string>() + "-i1"}});
        return false;
      }
    }
    return true;
  }));

  // The other node reports the input (tenant "default", the admin's): the
  // job goes there; a job without it still goes where the rule says.
  const json held = {
      {{"tenant", "default"}, {"digest", "sha256:" + hex}, {"bytes", 4096}, {"total_bytes", 4096}}};
  ASSERT_EQ(server.Post("/v1/agent/sync", agent, SyncWithCache(other, CacheReport(held))).status,
            200);
  const int64_t local = submit("local", true);
  EXPECT_EQ(node_of(local), other);
  const int64_t after = submit("after", false);
  EXPECT_EQ(node_of(after), ordinary);

  // Another tenant's copy of the same bytes does not count.
  cancel(local);
  cancel(after);
  json foreign = held;
  foreign[0]["tenant"] = "globex";
  ASSERT_EQ(server.Post("/v1/agent/sync", agent, SyncWithCache(other, CacheReport(foreign))).status,
            200);
  ASSERT_TRUE(WaitFor([&] {
    Reply gpus = server.Get("/v1/gpus", admin);
    for (const json& gpu : gpus.body["gpus"]) {
      if (gpu["allocated"].get<bool>()) {
        server.Post("/v1/agent/sync", agent,
                    {{"node", gpu["node"]}, {"instance", gpu["node"].get<std::string>() + "-i1"}});
        return false;
      }
    }
    return true;
  }));
  EXPECT_EQ(node_of(submit("foreign", true)), ordinary);
}

}  // namespace
}  // namespace ferry::fleet
