#include "ferry/fleet/client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <thread>

#include "testing/test_util.h"

namespace ferry::fleet {
namespace {

constexpr char kProblem[] = "application/problem+json";

TEST(DescribeErrorResponse, ListsFieldErrorsOfAProblem) {
  const std::string body =
      R"({"type": "urn:ferry:problem:validation", "title": "Invalid job specification",
    "status": 422, "detail": "2 fields are invalid", "instance": "/v1/jobs",
    "errors": [{"field": "gpus_per_task", "detail": "must be an integer between 0 and 64"},
               {"field": "tasks", "detail": "must be at least 1"}]})";
  EXPECT_EQ(DescribeErrorResponse(422, kProblem, body),
            "422 validation: gpus_per_task: must be an integer between 0 and 64; "
            "tasks: must be at least 1");
}

TEST(DescribeErrorResponse, FallsBackToDetailThenTitle) {
  EXPECT_EQ(DescribeErrorResponse(404, kProblem,
                                  R"({"type": "urn:ferry:problem:not-found", "title": "Not found",
                                      "detail": "no job 7"})"),
            "404 not-found: no job 7");
  EXPECT_EQ(
      DescribeErrorResponse(
          401, kProblem, R"({"type": "urn:ferry:problem:unauthorized", "title": "Unknown token"})"),
      "401 unauthorized: Unknown token");
  EXPECT_EQ(DescribeErrorResponse(500, kProblem, R"({"type": "urn:ferry:problem:internal"})"),
            "500 internal");
}

TEST(DescribeErrorResponse, QuotesBodiesThatAreNotProblems) {
  EXPECT_EQ(DescribeErrorResponse(502, "text/html", "<h1>bad\ngateway</h1>"),
            "502 Bad Gateway: <h1>bad gateway</h1>");
  EXPECT_EQ(DescribeErrorResponse(418, "text/plain", ""), "418");
  const std::string long_body(5000, 'x');
  EXPECT_LT(DescribeErrorResponse(400, "text/plain", long_body).size(), 300u);
  // Hostile problem bodies: wrong types are ignored, not trusted.
  EXPECT_EQ(DescribeErrorResponse(422, kProblem,
                                  R"({"type": 5, "errors": [1, {"field": 2}], "title": []})"),
            "422");
  EXPECT_EQ(DescribeErrorResponse(400, kProblem, "{not json"), "400 Bad Request: {not json");
}

TEST(UrlEncode, KeepsUnreservedCharacters) {
  EXPECT_EQ(UrlEncode("a-Z_0.~"), "a-Z_0.~");
  EXPECT_EQ(UrlEncode("k=v w&x/é"), "k%3Dv%20w%26x%2F%C3%A9");
}

// A real HTTP server on a free port, stopped and joined by the destructor.
class TestServer {
 public:
  TestServer() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 2000 && !server_.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~TestServer() {
    server_.stop();
    thread_.join();
  }
  httplib::Server& server() { return server_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(Client, SendsTokenAndJsonAndReadsTheResponse) {
  TestServer test;
  test.server().Post("/v1/jobs", [](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json echo = {{"auth", req.get_header_value("Authorization")},
                           {"type", req.get_header_value("Content-Type")},
                           {"key", req.get_header_value("Idempotency-Key")},
                           {"body", nlohmann::json::parse(req.body)},
                           {"q", req.get_param_value("state")}};
    res.status = 201;
    res.set_header("Location", "/v1/jobs/5");
    res.set_content(echo.dump(), "application/json");
  });
  Client client({.base_url = test.url() + "/", .token = "fy_secret"});
  ASSERT_OK_AND_ASSIGN(Response response, client.Post("/v1/jobs?state=a%20b", {{"name", "x"}},
                                                      {{"Idempotency-Key", "k1"}}));
  EXPECT_EQ(response.status, 201);
  EXPECT_EQ(response.Header("location"), "/v1/jobs/5");
  EXPECT_EQ(response.Header("LOCATION"), "/v1/jobs/5");
  EXPECT_EQ(response.body["auth"], "Bearer fy_secret");
  EXPECT_EQ(response.body["type"], "application/json");
  EXPECT_EQ(response.body["key"], "k1");
  EXPECT_EQ(response.body["body"]["name"], "x");
  EXPECT_EQ(response.body["q"], "a b");
}

TEST(Client, TurnsProblemsIntoErrors) {
  TestServer test;
  test.server().Get("/v1/jobs/9", [](const httplib::Request&, httplib::Response& res) {
    res.status = 404;
    res.set_content(
        R"({"type":"urn:ferry:problem:not-found","title":"Not found","detail":"no job 9"})",
        kProblem);
  });
  test.server().Get("/boom", [](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_content("down", "text/plain");
  });
  Client client({.base_url = test.url()});
  auto missing = client.Get("/v1/jobs/9");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalid);
  EXPECT_EQ(missing.status().message(), "404 not-found: no job 9");

  auto down = client.Get("/boom");
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kIOError);
  EXPECT_EQ(down.status().message(), "503 Service Unavailable: down");

  Request request;
  request.path = "/v1/jobs/9";
  request.allow_error_status = true;
  ASSERT_OK_AND_ASSIGN(Response response, client.Send(request));
  EXPECT_EQ(response.status, 404);
  EXPECT_EQ(response.body["detail"], "no job 9");
}

TEST(Client, ReportsUnreachableServersAndBadUrls) {
  int free_port = 0;
  {
    TestServer test;  // a port that was free a moment ago and is closed now
    free_port = std::stoi(test.url().substr(test.url().rfind(':') + 1));
  }
  Client client({.base_url = "http://127.0.0.1:" + std::to_string(free_port)});
  auto result = client.Get("/healthz");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kIOError);
  EXPECT_NE(result.status().message().find("cannot reach"), std::string::npos);

  Client bad({.base_url = "ftp//nowhere"});
  auto bad_result = bad.Get("/healthz");
  ASSERT_FALSE(bad_result.ok());
  EXPECT_NE(bad_result.status().message().find("bad server URL"), std::string::npos);
}

TEST(CheckClientOptions, ChecksTheUrlAndTheCaFile) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(CheckClientOptions({.base_url = "http://127.0.0.1:8700"}).ok());
  EXPECT_TRUE(CheckClientOptions({.base_url = "https://ctl.example.com"}).ok());
  EXPECT_TRUE(CheckClientOptions({.base_url = "https://[::1]:8700"}).ok());
  EXPECT_TRUE(CheckClientOptions({.base_url = "https://ctl:8700/"}).ok());  // a trailing slash
  for (const char* bad :
       {"ftp://host", "https://", "https://host/v1", "127.0.0.1:8700", "https://[::1"}) {
    Status status = CheckClientOptions({.base_url = bad});
    EXPECT_EQ(status.code(), StatusCode::kInvalid) << bad;
    EXPECT_NE(status.message().find("bad server URL"), std::string::npos) << bad;
  }

  // A CA file matters for https only.
  const std::string missing = dir / "missing.pem";
  EXPECT_TRUE(CheckClientOptions({.base_url = "http://h:1", .ca_file = missing}).ok());
  EXPECT_EQ(CheckClientOptions({.base_url = "https://h:1", .ca_file = missing}).message(),
            "cannot read CA file " + missing + ": No such file or directory");
  const std::string junk = dir.Write("junk.pem", "-----BEGIN NOTHING-----\n");
  EXPECT_NE(CheckClientOptions({.base_url = "https://h:1", .ca_file = junk})
                .message()
                .find("holds no PEM certificate"),
            std::string::npos);

  // Send refuses the same way, before connecting.
  Client client({.base_url = "https://127.0.0.1:1", .ca_file = junk});
  auto result = client.Get("/healthz");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalid);
  EXPECT_NE(result.status().message().find("holds no PEM certificate"), std::string::npos);
}

TEST(Client, HttpsToAPlainServerFailsTheHandshake) {
  TestServer test;
  test.server().Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  const std::string url = test.url();
  Client client({.base_url = "https://" + url.substr(url.find("://") + 3)});
  auto result = client.Get("/healthz");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kIOError);
  EXPECT_NE(result.status().message().find("TLS handshake with https://127.0.0.1:"),
            std::string::npos)
      << result.status().message();
}

TEST(Client, InterruptAbortsALongRequest) {
  TestServer test;
  std::atomic<bool> release{false};
  test.server().Get("/slow", [&](const httplib::Request&, httplib::Response& res) {
    for (int i = 0; i < 1000 && !release; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    res.set_content("{}", "application/json");
  });
  Client client({.base_url = test.url()});
  std::atomic<bool> done{false};
  // Repeats until the request returns: an interrupt before the request is in
  // flight only closes an idle connection.
  std::thread interrupter([&] {
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      client.Interrupt();
    }
  });
  auto result = client.Get("/slow");
  done = true;
  interrupter.join();
  release = true;
  EXPECT_FALSE(result.ok());
}

}  // namespace
}  // namespace ferry::fleet
