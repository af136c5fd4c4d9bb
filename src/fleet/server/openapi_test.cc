// The OpenAPI document (openapi.json) against the server it describes: every
// /v1 route is documented and every documented operation is a route, every
// problem type the server sends is documented with its title, the document
// is well formed (references resolve, path parameters are declared,
// responses stay open to new members), and the server serves it unchanged.
#include "fleet/server/openapi.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/fleet/server.h"
#include "ferry/fleet/store.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/responses.h"
#include "testing/test_util.h"

namespace ferry::fleet::server_internal {
namespace {

using nlohmann::json;

const std::set<std::string> kHttpMethods = {"get",     "put",  "post",  "delete",
                                            "options", "head", "patch", "trace"};

json Document() {
  json document = json::parse(OpenApiDocument(), nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(document.is_object()) << "openapi.json is not a JSON object";
  return document;
}

// "/v1/jobs/{id}:cancel" -> "/v1/jobs/{}:cancel": the route table's spelling.
std::string RoutePattern(const std::string& document_path) {
  std::string out;
  for (size_t i = 0; i < document_path.size(); ++i) {
    if (document_path[i] == '{') {
      const size_t close = document_path.find('}', i);
      if (close == std::string::npos) return document_path;  // malformed: compared as is
      out += "{}";
      i = close;
    } else {
      out += document_path[i];
    }
  }
  return out;
}

// The names of a path's template variables, in order.
std::vector<std::string> TemplateNames(const std::string& document_path) {
  std::vector<std::string> names;
  size_t start = 0;
  while ((start = document_path.find('{', start)) != std::string::npos) {
    const size_t close = document_path.find('}', start);
    if (close == std::string::npos) break;
    names.push_back(document_path.substr(start + 1, close - start - 1));
    start = close + 1;
  }
  return names;
}

// Routes that need not be in the document: what is outside /v1 (the
// dashboard's static files, say) unless the document lists it anyway.
bool MustBeDocumented(const std::string& pattern) { return pattern.rfind("/v1/", 0) == 0; }

// The route table of a real FleetServer (it is filled by the constructor;
// nothing listens).
std::set<std::pair<std::string, std::string>> ServerRoutes() {
  Result<std::unique_ptr<Store>> store = OpenStore("sqlite::memory:");
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  Result<std::unique_ptr<sched::Scheduler>> scheduler = sched::Scheduler::Make(sched::Config{});
  EXPECT_TRUE(scheduler.ok()) << scheduler.status().ToString();
  if (!store.ok() || !scheduler.ok()) return {};
  FleetServer server(ServerOptions{}, std::make_unique<httplib::Server>(), std::move(*store),
                     std::move(*scheduler), std::nullopt);
  std::set<std::pair<std::string, std::string>> routes;
  for (const auto& [method, pattern] : server.RouteTable()) routes.emplace(method, pattern);
  return routes;
}

TEST(OpenApi, IsAnOpenApi31DocumentWithBearerAuth) {
  const json document = Document();
  ASSERT_TRUE(document.is_object());
  EXPECT_EQ(document.value("openapi", "").rfind("3.1.", 0), 0u) << document.value("openapi", "");
  EXPECT_TRUE(document["info"].contains("title"));
  EXPECT_TRUE(document["info"].contains("version"));
  const json& bearer = document["components"]["securitySchemes"]["bearer"];
  EXPECT_EQ(bearer.value("type", ""), "http");
  EXPECT_EQ(bearer.value("scheme", ""), "bearer");
  EXPECT_EQ(document["security"], json::parse(R"([{"bearer": []}])"));
}

TEST(OpenApi, DocumentsEveryRouteAndNothingElse) {
  const json document = Document();
  ASSERT_TRUE(document.is_object());
  const std::set<std::pair<std::string, std::string>> routes = ServerRoutes();
  ASSERT_FALSE(routes.empty());
  std::set<std::pair<std::string, std::string>> documented;
  for (const auto& [path, item] : document["paths"].items()) {
    for (const auto& [method, operation] : item.items()) {
      if (kHttpMethods.count(method) == 0) continue;  // "parameters", "summary", ...
      std::string upper = method;
      std::transform(upper.begin(), upper.end(), upper.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
      documented.emplace(upper, RoutePattern(path));
    }
  }
  for (const auto& route : routes) {
    if (!MustBeDocumented(route.second)) continue;
    EXPECT_EQ(documented.count(route), 1u)
        << route.first << " " << route.second
        << " is a route that src/fleet/server/openapi.json does not document "
           "(add the operation, with {name} for each {} of the pattern)";
  }
  for (const auto& operation : documented) {
    EXPECT_EQ(routes.count(operation), 1u)
        << operation.first << " " << operation.second
        << " is documented in src/fleet/server/openapi.json but no route serves it";
  }
}

TEST(OpenApi, DocumentsEveryProblemTypeWithItsTitle) {
  const json document = Document();
  ASSERT_TRUE(document.is_object());
  std::set<std::string> documented;
  for (const json& type : document["components"]["schemas"]["ProblemType"]["oneOf"]) {
    const std::string urn = type.value("const", "");
    const std::string prefix = "urn:ferry:problem:";
    ASSERT_EQ(urn.rfind(prefix, 0), 0u) << urn;
    const std::string suffix = urn.substr(prefix.size());
    documented.insert(suffix);
    EXPECT_EQ(type.value("title", ""), ProblemTitle(suffix)) << suffix;
    EXPECT_FALSE(type.value("description", "").empty()) << suffix;
  }
  std::set<std::string> sent;
  for (std::string_view suffix : ProblemTypeSuffixes()) sent.emplace(suffix);
  EXPECT_EQ(documented, sent);
  // Each status's shared response names only documented types.
  for (const auto& [name, response] : document["components"]["responses"].items()) {
    const json& schema = response["content"]["application/problem+json"]["schema"];
    ASSERT_TRUE(schema.contains("allOf")) << name;
    for (const json& urn : schema["allOf"][1]["properties"]["type"]["enum"]) {
      const std::string text = urn.get<std::string>();
      EXPECT_EQ(documented.count(text.substr(text.rfind(':') + 1)), 1u) << name << ": " << text;
    }
  }
}

// Calls `visit` with every object in `value`, depth first.
void ForEachObject(const json& value, const std::function<void(const json&)>& visit) {
  if (value.is_object()) visit(value);
  if (value.is_structured()) {
    for (const json& child : value) ForEachObject(child, visit);
  }
}

// The schema `ref` ("#/components/schemas/X") points at, or null.
const json* Resolve(const json& document, const std::string& ref) {
  const std::string prefix = "#/";
  if (ref.rfind(prefix, 0) != 0) return nullptr;
  const json::json_pointer pointer(ref.substr(1));
  return document.contains(pointer) ? &document.at(pointer) : nullptr;
}

TEST(OpenApi, ReferencesResolveAndPathParametersAreDeclared) {
  const json document = Document();
  ASSERT_TRUE(document.is_object());
  ForEachObject(document, [&](const json& object) {
    auto ref = object.find("$ref");
    if (ref == object.end() || !ref->is_string()) return;
    EXPECT_NE(Resolve(document, ref->get<std::string>()), nullptr) << *ref;
  });
  for (const auto& [path, item] : document["paths"].items()) {
    for (const std::string& name : TemplateNames(path)) {
      bool declared = false;
      auto declares = [&](const json& parameters) {
        for (const json& parameter : parameters) {
          declared = declared ||
                     (parameter.value("in", "") == "path" && parameter.value("name", "") == name &&
                      parameter.value("required", false));
        }
      };
      if (item.contains("parameters")) declares(item["parameters"]);
      for (const auto& [method, operation] : item.items()) {
        if (kHttpMethods.count(method) != 0 && operation.contains("parameters")) {
          declares(operation["parameters"]);
        }
      }
      EXPECT_TRUE(declared) << path << ": no required path parameter '" << name << "'";
    }
    for (const auto& [method, operation] : item.items()) {
      if (kHttpMethods.count(method) == 0) continue;
      EXPECT_FALSE(operation.value("operationId", "").empty()) << method << " " << path;
      const json& responses = operation["responses"];
      EXPECT_TRUE(responses.is_object() && !responses.empty()) << method << " " << path;
      // An operation behind a token says what a missing one gets.
      const bool is_public = operation.contains("security") && operation["security"].empty();
      EXPECT_TRUE(is_public || responses.contains("401")) << method << " " << path;
    }
  }
}

// Other members may be added to any answer (clients ignore what they do not
// know): no schema reachable from a response closes its object.
TEST(OpenApi, ResponseSchemasStayOpenToNewMembers) {
  const json document = Document();
  ASSERT_TRUE(document.is_object());
  std::set<std::string> seen;
  std::function<void(const json&, const std::string&)> check = [&](const json& schema,
                                                                   const std::string& where) {
    ForEachObject(schema, [&](const json& object) {
      auto closed = object.find("additionalProperties");
      if (closed != object.end() && closed->is_boolean()) {
        EXPECT_TRUE(closed->get<bool>()) << where << " closes an object in a response";
      }
      auto unevaluated = object.find("unevaluatedProperties");
      if (unevaluated != object.end() && unevaluated->is_boolean()) {
        EXPECT_TRUE(unevaluated->get<bool>()) << where << " closes an object in a response";
      }
      auto ref = object.find("$ref");
      if (ref != object.end() && ref->is_string() && seen.insert(ref->get<std::string>()).second) {
        if (const json* target = Resolve(document, ref->get<std::string>())) {
          check(*target, ref->get<std::string>());
        }
      }
    });
  };
  for (const auto& [path, item] : document["paths"].items()) {
    for (const auto& [method, operation] : item.items()) {
      if (kHttpMethods.count(method) == 0) continue;
      check(operation["responses"], method + " " + path);
    }
  }
  EXPECT_GT(seen.size(), 10u);  // the walk reached the shared schemas
}

// A server on an ephemeral port for one test.
class RunningServer {
 public:
  RunningServer() {
    options_.store_url = "sqlite:" + scratch_.path() + "/fleet.db";
    options_.host = "127.0.0.1";
    options_.port = 0;
    options_.port_file = scratch_.path() + "/port";
    options_.data_dir = scratch_.path();
    options_.threads = 4;
    thread_ = std::thread([this] {
      status_ = RunServer(options_, &stop_, /*handle_signals=*/false);
      finished_ = true;
    });
    ferry::testing::WaitFor(
        [&] { return finished_.load() || !ferry::testing::ReadFile(options_.port_file).empty(); });
    port_ = std::atoi(ferry::testing::ReadFile(options_.port_file).c_str());
  }
  ~RunningServer() { (void)Stop(); }
  RunningServer(const RunningServer&) = delete;
  RunningServer& operator=(const RunningServer&) = delete;

  Status Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  int port() const { return port_; }
  const Status& status() const { return status_; }

  // Sends `request` as is on a new connection and returns every byte the
  // server sends until it closes the connection or 5 s pass.
  std::string Raw(const std::string& request) const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return "";
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::string reply;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n = 0;
      while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) reply.append(buffer, n);
    }
    ::close(fd);
    return reply;
  }

 private:
  ferry::testing::ScratchDir scratch_{"ferry-openapi-test"};
  ServerOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  Status status_;
  std::thread thread_;
  int port_ = 0;
};

TEST(OpenApi, ServedWithoutATokenAsWritten) {
  RunningServer server;
  ASSERT_GT(server.port(), 0) << server.status().ToString();
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(10);

  httplib::Result served = client.Get("/v1/openapi.json");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
  EXPECT_EQ(served->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(served->body, std::string(OpenApiDocument()));

  // Its own rules hold for it: an unknown query parameter is a problem.
  httplib::Result unknown = client.Get("/v1/openapi.json?format=yaml");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 400);
  EXPECT_EQ(unknown->get_header_value("Content-Type"), "application/problem+json");
  httplib::Result posted = client.Post("/v1/openapi.json", "{}", "application/json");
  ASSERT_TRUE(posted);
  EXPECT_EQ(posted->status, 405);
  EXPECT_EQ(posted->get_header_value("Allow"), "GET");
  EXPECT_TRUE(server.Stop().ok());
}

// Found by Schemathesis: httplib answered 400 to methods it does not route
// (TRACE, CONNECT) or know (QUERY), and left a TRACE's body unread on a
// kept-alive connection, so the next request on it began with that body.
// Now such a method is 405 with Allow on a path that has routes (404 on one
// that has none), a problem document, and the connection closes.
TEST(OpenApi, MethodsHttplibDoesNotRouteAre405AndCloseTheConnection) {
  RunningServer server;
  ASSERT_GT(server.port(), 0) << server.status().ToString();
  struct Case {
    std::string request;
    std::string status_line;
    std::string allow;  // empty: no Allow header
    std::string type;
  };
  const std::vector<Case> cases = {
      {"TRACE /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
       "HTTP/1.1 405 Method Not Allowed", "Allow: POST, GET", "method-not-allowed"},
      {"QUERY /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
       "HTTP/1.1 405 Method Not Allowed", "Allow: GET", "method-not-allowed"},
      {"BREW /v1/jobs/7%3Acancel?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
       "HTTP/1.1 405 Method Not Allowed", "Allow: POST", "method-not-allowed"},
      {"QUERY /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 404 Not Found", "", "not-found"},
      {"CONNECT /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 404 Not Found", "", "not-found"},
      {"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400 Bad Request", "", "bad-request"},
  };
  for (const Case& test : cases) {
    // A second request follows on the same connection: the server must
    // close it after the first answer instead of reading on.
    const std::string reply = server.Raw(test.request + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    SCOPED_TRACE(test.request);
    EXPECT_EQ(reply.rfind(test.status_line + "\r\n", 0), 0u) << reply;
    if (test.allow.empty()) {
      EXPECT_EQ(reply.find("\r\nAllow:"), std::string::npos) << reply;
    } else {
      EXPECT_NE(reply.find("\r\n" + test.allow + "\r\n"), std::string::npos) << reply;
    }
    EXPECT_NE(reply.find("\r\nConnection: close\r\n"), std::string::npos) << reply;
    EXPECT_NE(reply.find("\r\nContent-Type: application/problem+json\r\n"), std::string::npos)
        << reply;
    EXPECT_NE(reply.find("\"type\":\"urn:ferry:problem:" + test.type + "\""), std::string::npos)
        << reply;
    EXPECT_EQ(reply.find("HTTP/1.1", 1), std::string::npos) << "a second answer: " << reply;
  }
  EXPECT_TRUE(server.Stop().ok());
}

// Found by Schemathesis: httplib leaves the body of a GET (or HEAD, OPTIONS)
// unread, and the next request on the connection began with it. Such a
// request is answered as usual and the connection closes; a DELETE's body is
// read, so its connection carries the next request.
TEST(OpenApi, ABodyHttplibDoesNotReadClosesTheConnection) {
  RunningServer server;
  ASSERT_GT(server.port(), 0) << server.status().ToString();
  const std::string next = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::string reply =
      server.Raw("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + next);
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("\r\nConnection: close\r\n"), std::string::npos) << reply;
  EXPECT_EQ(reply.find("HTTP/1.1", 1), std::string::npos) << "a second answer: " << reply;

  reply = server.Raw("DELETE /v1/jobs/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" + next);
  EXPECT_EQ(reply.rfind("HTTP/1.1 401 Unauthorized\r\n", 0), 0u) << reply;
  const size_t second = reply.find("HTTP/1.1", 1);
  ASSERT_NE(second, std::string::npos) << reply;
  EXPECT_EQ(reply.compare(second, 17, "HTTP/1.1 200 OK\r\n"), 0) << reply;
  EXPECT_TRUE(server.Stop().ok());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
