// /v1/webhooks: a tenant's webhooks (create, list, get, delete) and their
// deliveries; webhooks.h sends them.
#include <optional>
#include <string>
#include <vector>

#include "fleet/server/api_tokens.h"
#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/request_bodies.h"
#include "fleet/server/request_parsing.h"
#include "fleet/server/responses.h"
#include "fleet/server/watch_hub.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

json WebhookJson(const Webhook& hook) {
  json states = json::array();
  for (JobState s : hook.states) states.push_back(ToString(s));
  return {{"id", hook.id},
          {"url", hook.url},
          {"states", std::move(states)},
          {"description", hook.description},
          {"tenant", hook.tenant_id ? json(hook.tenant) : json(nullptr)},
          {"all_tenants", !hook.tenant_id.has_value()},
          {"job_id", hook.job_id ? json(*hook.job_id) : json(nullptr)},
          {"created_by", hook.creator},
          {"created_at", TimestampJson(hook.created_at_ms)}};
}

json DeliveryJson(const WebhookDelivery& d) {
  const bool pending = d.status == WebhookDelivery::Status::kPending;
  return {{"id", d.id},
          {"event_id", d.event_id},
          {"job_id", d.job_id},
          {"status", ToString(d.status)},
          {"attempts", d.attempts},
          {"last_status_code", d.last_status_code == 0 ? json(nullptr) : json(d.last_status_code)},
          {"last_error", d.last_error},
          {"created_at", TimestampJson(d.created_at_ms)},
          {"next_attempt_at", pending ? TimestampJson(d.next_attempt_at_ms) : json(nullptr)},
          {"finished_at", pending ? json(nullptr) : TimestampJson(d.finished_at_ms)},
          {"body", json::parse(d.body, nullptr, false)}};
}

}  // namespace

std::string FleetServer::WebhookBody(const Webhook& hook, const WatchedEvent& event) {
  return Dump(
      json{{"type", "job.state"}, {"webhook_id", hook.id}, {"event", WatchEventJson(event)}});
}

std::optional<int64_t> FleetServer::WebhookIdFrom(Call& c) {
  std::optional<int64_t> id = ParseInt(c.captures.at(0));
  if (!id || *id <= 0) {
    SendProblem(c, 404, "not-found", "no webhook " + c.captures.at(0));
    return std::nullopt;
  }
  return id;
}

void FleetServer::CreateWebhook(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<CreateWebhookRequest> request = ParseJsonBody(c, ParseCreateWebhookRequest);
  if (!request) return;
  if (request->all_tenants && c.principal.role != Role::kPlatformAdmin) {
    return SendProblem(c, 403, "forbidden", "only platform admins may watch every tenant");
  }
  if (request->job_id) {
    // One job's webhook: the job must be one the caller may see.
    if (request->all_tenants) {
      return SendValidation(c, {{"all_tenants", "cannot be set with job_id"}});
    }
    Result<std::optional<Job>> job = store_->GetJob(ScopeOf(c.principal), *request->job_id);
    if (!job.ok()) return SendStoreError(c, job.status());
    if (!job->has_value()) {
      return SendValidation(c, {{"job_id", "no job " + std::to_string(*request->job_id)}});
    }
  }
  Result<std::string> secret = NewToken();
  if (!secret.ok()) return SendStoreError(c, secret.status());
  Webhook hook;
  if (!request->all_tenants) hook.tenant_id = c.principal.tenant_id;
  hook.url = request->url;
  hook.secret = "whsec_" + secret->substr(3);
  hook.states = request->states;
  hook.job_id = request->job_id;
  hook.description = request->description;
  hook.created_by = c.principal.user_id;
  Result<Webhook> created = store_->CreateWebhook(hook, NowMs());
  if (!created.ok()) return SendStoreError(c, created.status());
  webhooks_->Wake();
  json body = WebhookJson(*created);
  body["secret"] = created->secret;  // shown this once
  c.res.set_header("Location", "/v1/webhooks/" + std::to_string(created->id));
  SendJson(c, 201, body);
}

void FleetServer::ListWebhooks(Call& c) {
  if (!OnlyParams(c, {})) return;
  Result<std::vector<Webhook>> hooks = store_->ListWebhooks(ScopeOf(c.principal));
  if (!hooks.ok()) return SendStoreError(c, hooks.status());
  json list = json::array();
  for (const Webhook& hook : *hooks) list.push_back(WebhookJson(hook));
  SendJson(c, 200, {{"webhooks", std::move(list)}});
}

void FleetServer::GetWebhook(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<int64_t> id = WebhookIdFrom(c);
  if (!id) return;
  Result<std::optional<Webhook>> hook = store_->GetWebhook(ScopeOf(c.principal), *id);
  if (!hook.ok()) return SendStoreError(c, hook.status());
  if (!hook->has_value()) return SendProblem(c, 404, "not-found", "no webhook " + c.captures[0]);
  SendJson(c, 200, WebhookJson(**hook));
}

void FleetServer::DeleteWebhook(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<int64_t> id = WebhookIdFrom(c);
  if (!id) return;
  const Scope scope = ScopeOf(c.principal);
  Result<std::optional<Webhook>> hook = store_->GetWebhook(scope, *id);
  if (!hook.ok()) return SendStoreError(c, hook.status());
  if (!hook->has_value()) return SendProblem(c, 404, "not-found", "no webhook " + c.captures[0]);
  // Its creator, a team admin of its tenant, or a platform admin.
  if (c.principal.role == Role::kUser && (*hook)->created_by != c.principal.user_id) {
    return SendProblem(c, 403, "forbidden",
                       "a user may delete only its own webhooks (team admins: the tenant's)");
  }
  Result<bool> deleted = store_->DeleteWebhook(scope, *id, NowMs());
  if (!deleted.ok()) return SendStoreError(c, deleted.status());
  if (!*deleted) return SendProblem(c, 404, "not-found", "no webhook " + c.captures[0]);
  webhooks_->Wake();
  c.res.status = 204;
}

void FleetServer::ListWebhookDeliveries(Call& c) {
  if (!OnlyParams(c, {"limit"})) return;
  std::optional<int64_t> id = WebhookIdFrom(c);
  if (!id) return;
  std::optional<int64_t> limit = IntParam(c, "limit", 50, 1, 500);
  if (!limit) return;
  Result<std::optional<std::vector<WebhookDelivery>>> deliveries =
      store_->ListWebhookDeliveries(ScopeOf(c.principal), *id, static_cast<int>(*limit));
  if (!deliveries.ok()) return SendStoreError(c, deliveries.status());
  if (!deliveries->has_value()) {
    return SendProblem(c, 404, "not-found", "no webhook " + c.captures[0]);
  }
  json list = json::array();
  for (const WebhookDelivery& d : **deliveries) list.push_back(DeliveryJson(d));
  SendJson(c, 200, {{"deliveries", std::move(list)}});
}

}  // namespace ferry::fleet::server_internal
