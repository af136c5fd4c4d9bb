// The route table of the REST API (docs/fleet-api.md) and the problem
// answers for what httplib rejects before a route runs.
#include <algorithm>
#include <cctype>
#include <exception>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/server/fleet_server.h"
#include "fleet/server/raw_headers.h"
#include "fleet/server/request_parsing.h"
#include "fleet/server/responses.h"

namespace ferry::fleet::server_internal {

namespace {

// A method name httplib does not know (it refuses the request line before
// reading the path): an RFC 9110 token other than the methods httplib parses.
bool IsUnknownMethod(std::string_view method) {
  static constexpr std::string_view kKnown[] = {"GET",     "HEAD",    "POST",  "PUT",   "DELETE",
                                                "CONNECT", "OPTIONS", "TRACE", "PATCH", "PRI"};
  if (method.empty() || method.size() > 32) return false;
  if (std::find(std::begin(kKnown), std::end(kKnown), method) != std::end(kKnown)) return false;
  return std::all_of(method.begin(), method.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

// The path of a request target, percent-decoded as httplib decodes paths
// ("/a%20b?x=1" -> "/a b").
std::string TargetPath(std::string_view target) {
  target = target.substr(0, target.find_first_of("?#"));
  std::string path;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < target.size() &&
        std::isxdigit(static_cast<unsigned char>(target[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(target[i + 2]))) {
      path += static_cast<char>(std::stoi(std::string(target.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      path += target[i];
    }
  }
  return path;
}

// Closes the connection once the answer is written (the header alone does
// not end httplib's keep-alive loop), reading what the client sent first so
// that the close does not reset the answer away.
void CloseAfterResponse(httplib::Response& res) {
  res.set_header("Connection", "close");
  TakeConnectionAfterResponse(
      [](std::unique_ptr<TakenConnection> connection) { (void)connection->DrainInput(); });
}

}  // namespace

void FleetServer::AnswerUnroutedMethod(const std::string& method, const std::string& path,
                                       httplib::Response& res) {
  std::vector<std::string> allowed;
  for (const Route& route : routes_) {
    std::vector<std::string> captures;
    if (MatchPath(route.pattern, path, &captures) &&
        std::find(allowed.begin(), allowed.end(), route.method) == allowed.end()) {
      allowed.push_back(route.method);
    }
  }
  // The rest of the request was not read: the connection cannot carry another.
  CloseAfterResponse(res);
  if (allowed.empty()) {
    res.status = 404;
    res.set_content(Dump(Problem(404, "not-found", "no route for " + path, path)),
                    "application/problem+json");
    return;
  }
  std::string list;
  for (const std::string& name : allowed) list += (list.empty() ? "" : ", ") + name;
  res.status = 405;
  res.set_header("Allow", list);
  res.set_content(
      Dump(Problem(405, "method-not-allowed", method + " is not allowed here; use " + list, path)),
      "application/problem+json");
}

void FleetServer::InstallRoutes() {
  auto bind = [this](void (FleetServer::*fn)(Call&)) {
    return [this, fn](Call& c) { (this->*fn)(c); };
  };
  const std::string id = "{}";
  AddRoute("GET", "/healthz", Access::kPublic, bind(&FleetServer::Health));
  AddRoute("GET", "/readyz", Access::kPublic, bind(&FleetServer::Ready));
  // The API's own description (docs/fleet-api.md#api-contract): public, like the probes.
  AddRoute("GET", "/v1/openapi.json", Access::kPublic, bind(&FleetServer::GetOpenApi));
  AddRoute("GET", "/v1/whoami", Access::kUser, bind(&FleetServer::WhoAmI));
  AddRoute("POST", "/v1/jobs", Access::kUser, bind(&FleetServer::SubmitJob));
  AddRoute("GET", "/v1/jobs", Access::kUser, bind(&FleetServer::ListJobs));
  AddRoute("GET", "/v1/jobs:watch", Access::kUser, bind(&FleetServer::WatchJobs));
  AddRoute("GET", "/v1/jobs/" + id, Access::kUser, bind(&FleetServer::GetJob));
  AddRoute("DELETE", "/v1/jobs/" + id, Access::kUser, bind(&FleetServer::CancelJob));
  AddRoute("POST", "/v1/jobs/" + id + ":cancel", Access::kUser, bind(&FleetServer::CancelJob));
  AddRoute("GET", "/v1/jobs/" + id + "/events", Access::kUser, bind(&FleetServer::ListEvents));
  AddRoute("GET", "/v1/jobs/" + id + "/logs", Access::kUser, bind(&FleetServer::ReadLogs));
  AddRoute("GET", "/v1/nodes", Access::kUser, bind(&FleetServer::ListNodes));
  AddRoute("GET", "/v1/nodes/" + id, Access::kUser, bind(&FleetServer::GetNode));
  AddRoute("POST", "/v1/nodes/" + id + ":drain", Access::kAdmin,
           [this](Call& c) { SetDrain(c, true); });
  AddRoute("POST", "/v1/nodes/" + id + ":undrain", Access::kAdmin,
           [this](Call& c) { SetDrain(c, false); });
  AddRoute("GET", "/v1/pools", Access::kUser, bind(&FleetServer::ListPools));
  AddRoute("GET", "/v1/gpus", Access::kUser, bind(&FleetServer::ListGpus));
  AddRoute("POST", "/v1/admin/users", Access::kAdmin, bind(&FleetServer::CreateUser));
  AddRoute("GET", "/v1/admin/users", Access::kAdmin, bind(&FleetServer::ListUsers));
  AddRoute("POST", "/v1/admin/users:revoke", Access::kAdmin, bind(&FleetServer::RevokeUser));
  AddRoute("POST", "/v1/admin/users:token", Access::kAdmin, bind(&FleetServer::IssueToken));
  AddRoute("POST", "/v1/agent/register", Access::kAgent, bind(&FleetServer::AgentRegister));
  AddRoute("POST", "/v1/agent/sync", Access::kAgent, bind(&FleetServer::AgentSync));
  AddRoute("POST", "/v1/agent/logs", Access::kAgent, bind(&FleetServer::AgentLogs));
  AddRoute("POST", "/v1/datasets", Access::kUser, bind(&FleetServer::CreateDataset));
  AddRoute("GET", "/v1/datasets", Access::kUser, bind(&FleetServer::ListDatasets));
  AddRoute("GET", "/v1/datasets/" + id, Access::kUser, bind(&FleetServer::GetDataset));
  AddRoute("GET", "/v1/datasets/" + id + "/versions/" + id, Access::kUser,
           bind(&FleetServer::GetDatasetVersion));
  AddRoute("POST", "/v1/code", Access::kUser, bind(&FleetServer::UploadCode));
  AddRoute("GET", "/v1/code/sha256:" + id, Access::kUser, bind(&FleetServer::GetCode));
  AddRoute("GET", "/v1/agent/code/sha256:" + id, Access::kAgent, bind(&FleetServer::AgentGetCode));
  AddRoute("POST", "/v1/webhooks", Access::kUser, bind(&FleetServer::CreateWebhook));
  AddRoute("GET", "/v1/webhooks", Access::kUser, bind(&FleetServer::ListWebhooks));
  AddRoute("GET", "/v1/webhooks/" + id, Access::kUser, bind(&FleetServer::GetWebhook));
  AddRoute("DELETE", "/v1/webhooks/" + id, Access::kUser, bind(&FleetServer::DeleteWebhook));
  AddRoute("GET", "/v1/webhooks/" + id + "/deliveries", Access::kUser,
           bind(&FleetServer::ListWebhookDeliveries));
  AddRoute("GET", "/v1/scheduler", Access::kAdmin, bind(&FleetServer::GetScheduler));
  // Per-tenant series: platform admins only (docs/fleet-metrics.md).
  AddRoute("GET", "/metrics", Access::kAdmin, bind(&FleetServer::GetMetrics));
  // The dashboard: public static files, not part of /v1; its pages call /v1
  // with the user's token (docs/fleet-dashboard.md).
  AddRoute("GET", "/", Access::kPublic, bind(&FleetServer::RedirectToUi));
  AddRoute("GET", "/ui", Access::kPublic, bind(&FleetServer::RedirectToUi));
  AddRoute("GET", "/ui/", Access::kPublic, bind(&FleetServer::ServeUi));
  AddRoute("GET", "/ui/" + id, Access::kPublic, bind(&FleetServer::ServeUi));
  AddRoute("GET", "/ui/vendor/" + id, Access::kPublic, bind(&FleetServer::ServeUiVendor));

  auto dispatch = [this](const httplib::Request& req, httplib::Response& res) {
    Dispatch(req, res);
  };
  http_.Get(".*", dispatch);
  http_.Post(".*", dispatch);
  http_.Put(".*", dispatch);
  http_.Patch(".*", dispatch);
  http_.Delete(".*", dispatch);
  http_.Options(".*", dispatch);
  // httplib reads a body only for POST, PUT, PATCH and DELETE: the body of
  // another method would be read as the next request on the connection, so
  // such a request is answered as usual and then the connection closes. And
  // httplib routes only the methods above (and HEAD); another one it parses
  // (TRACE, CONNECT) it would answer 400: those go through Dispatch too
  // (405 with Allow on a known path, else 404).
  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    static constexpr std::string_view kReadsBody[] = {"POST", "PUT", "PATCH", "DELETE"};
    static constexpr std::string_view kRouted[] = {"GET", "HEAD", "OPTIONS"};
    if (std::find(std::begin(kReadsBody), std::end(kReadsBody), req.method) !=
        std::end(kReadsBody)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const bool unread_body =
        req.has_header("Transfer-Encoding") ||
        (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
    if (unread_body) CloseAfterResponse(res);
    if (std::find(std::begin(kRouted), std::end(kRouted), req.method) != std::end(kRouted)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    Dispatch(req, res);
    CloseAfterResponse(res);
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib answers some errors itself (413 before reading a large body, 400
  // for a broken request line): give those a problem body too.
  http_.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 400 && req.path.empty() && IsUnknownMethod(req.method) &&
        (req.version == "HTTP/1.1" || req.version == "HTTP/1.0") && !req.target.empty() &&
        req.target.front() == '/') {
      // A method httplib does not know (QUERY, say) on a path: what any
      // other method a route lacks gets.
      AnswerUnroutedMethod(req.method, TargetPath(req.target), res);
      return httplib::Server::HandlerResponse::Handled;
    }
    // A request line or head httplib could not read leaves the connection
    // at an unknown point of the stream.
    if (res.status == 400) CloseAfterResponse(res);
    std::string_view type = "bad-request";
    std::string detail = "the request could not be read";
    if (res.status == 413) {
      type = "payload-too-large";
      detail = "the body is larger than the server accepts";
    } else if (res.status == 404) {
      type = "not-found";
      detail = "no route for " + req.path;
    } else if (res.status >= 500) {
      type = "internal";
      detail = "the request failed inside the server";
    }
    res.set_content(Dump(Problem(res.status, type, detail, req.path)), "application/problem+json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, const std::exception_ptr& ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LogError("request " + req.method + " " + req.path, Status::UnknownError(what));
        res.status = 500;
        res.set_content(
            Dump(Problem(500, "internal", "the request failed inside the server", req.path)),
            "application/problem+json");
      });
}

}  // namespace ferry::fleet::server_internal
