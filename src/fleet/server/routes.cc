// The route table of the REST API (docs/fleet-api.md) and the problem
// answers for what httplib rejects before a route runs.
#include <exception>
#include <string>
#include <string_view>

#include "fleet/server/fleet_server.h"
#include "fleet/server/responses.h"

namespace ferry::fleet::server_internal {

void FleetServer::InstallRoutes() {
  auto bind = [this](void (FleetServer::*fn)(Call&)) {
    return [this, fn](Call& c) { (this->*fn)(c); };
  };
  const std::string id = "{}";
  AddRoute("GET", "/healthz", Access::kPublic, bind(&FleetServer::Health));
  AddRoute("GET", "/readyz", Access::kPublic, bind(&FleetServer::Ready));
  AddRoute("GET", "/v1/whoami", Access::kUser, bind(&FleetServer::WhoAmI));
  AddRoute("POST", "/v1/jobs", Access::kUser, bind(&FleetServer::SubmitJob));
  AddRoute("GET", "/v1/jobs", Access::kUser, bind(&FleetServer::ListJobs));
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
  // httplib answers some errors itself (413 before reading a large body, 400
  // for a broken request line): give those a problem body too.
  http_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                  httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
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
  AddRoute("GET", "/v1/jobs:watch", Access::kUser, bind(&FleetServer::WatchJobs));
