// Webhooks: registrations, the deliveries made from job events, and the
// attempts the server's dispatcher records (docs/fleet-api.md#webhooks).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "fleet/store/sql_store.h"

namespace ferry::fleet {

std::string_view ToString(WebhookDelivery::Status status) {
  switch (status) {
    case WebhookDelivery::Status::kPending:
      return "pending";
    case WebhookDelivery::Status::kDelivered:
      return "delivered";
    case WebhookDelivery::Status::kFailed:
      return "failed";
  }
  return "pending";
}

}  // namespace ferry::fleet

namespace ferry::fleet::store_internal {

namespace {

constexpr const char* kWebhookSelect =
    "SELECT w.id, w.tenant_id, COALESCE(tn.name, ''), w.url, w.secret, w.states, w.description,"
    " w.created_by, u.name, w.created_at_ms, w.after_event_id, w.job_id FROM webhooks w"
    " LEFT JOIN tenants tn ON tn.id = w.tenant_id JOIN users u ON u.id = w.created_by"
    " WHERE w.deleted_at_ms = 0";

std::string StatesText(const std::vector<JobState>& states) {
  nlohmann::json list = nlohmann::json::array();
  for (JobState s : states) list.push_back(StateText(s));
  return list.dump();
}

Result<Webhook> WebhookFromRow(const Row& row) {
  Webhook w;
  w.id = row.Int(0);
  w.tenant_id = row.OptInt(1);
  w.tenant = row.Text(2);
  w.url = row.Text(3);
  w.secret = row.Text(4);
  const nlohmann::json states = nlohmann::json::parse(row.Text(5), nullptr, false);
  if (!states.is_array()) {
    return Status::UnknownError("store: webhook " + std::to_string(w.id) + " has bad states");
  }
  for (const nlohmann::json& s : states) {
    std::optional<JobState> state =
        s.is_string() ? ParseJobState(s.get<std::string>()) : std::nullopt;
    if (!state) {
      return Status::UnknownError("store: webhook " + std::to_string(w.id) + " has bad states");
    }
    w.states.push_back(*state);
  }
  w.description = row.Text(6);
  w.created_by = row.Int(7);
  w.creator = row.Text(8);
  w.created_at_ms = row.Int(9);
  w.after_event_id = row.Int(10);
  w.job_id = row.OptInt(11);
  return w;
}

// A tenant sees its own webhooks; Scope::All() sees every one.
void AddScope(const Scope& scope, std::string* q, Params* params) {
  if (!scope.tenant_id) return;
  *q += " AND w.tenant_id = ?";
  params->emplace_back(*scope.tenant_id);
}

Result<std::vector<Webhook>> LoadWebhooks(Connection& c, const Scope& scope,
                                          std::optional<int64_t> id) {
  std::string q = kWebhookSelect;
  Params params;
  AddScope(scope, &q, &params);
  if (id) {
    q += " AND w.id = ?";
    params.emplace_back(*id);
  }
  q += " ORDER BY w.id";
  FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(q, params));
  std::vector<Webhook> out;
  out.reserve(rows.size());
  for (const Row& row : rows.rows) {
    FERRY_ASSIGN_OR_RAISE(Webhook w, WebhookFromRow(row));
    out.push_back(std::move(w));
  }
  return out;
}

WebhookDelivery::Status DeliveryStatus(const std::string& text) {
  if (text == "delivered") return WebhookDelivery::Status::kDelivered;
  if (text == "failed") return WebhookDelivery::Status::kFailed;
  return WebhookDelivery::Status::kPending;
}

constexpr const char* kDeliverySelect =
    "SELECT d.id, d.webhook_id, d.event_id, d.job_id, d.body, d.status, d.attempts,"
    " d.next_attempt_at_ms, d.last_status_code, d.last_error, d.created_at_ms,"
    " d.finished_at_ms, w.url, w.secret FROM webhook_deliveries d"
    " JOIN webhooks w ON w.id = d.webhook_id";

WebhookDelivery DeliveryFromRow(const Row& row) {
  WebhookDelivery d;
  d.id = row.Int(0);
  d.webhook_id = row.Int(1);
  d.event_id = row.Int(2);
  d.job_id = row.Int(3);
  d.body = row.Text(4);
  d.status = DeliveryStatus(row.Text(5));
  d.attempts = static_cast<int>(row.Int(6));
  d.next_attempt_at_ms = row.Int(7);
  d.last_status_code = static_cast<int>(row.Int(8));
  d.last_error = row.Text(9);
  d.created_at_ms = row.Int(10);
  d.finished_at_ms = row.Int(11);
  d.url = row.Text(12);
  d.secret = row.Text(13);
  return d;
}

}  // namespace

Result<Webhook> SqlStore::CreateWebhook(const Webhook& hook, int64_t now_ms) {
  if (hook.url.empty()) return Status::Invalid("webhook url must not be empty");
  if (hook.states.empty()) return Status::Invalid("webhook states must not be empty");
  if (hook.secret.empty()) return Status::Invalid("webhook secret must not be empty");
  Webhook created;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(Rows latest, c.Query("SELECT COALESCE(MAX(id), 0) FROM job_events"));
    auto optional = [](const std::optional<int64_t>& v) {
      return v ? sql::Value(*v) : sql::Value(std::monostate{});
    };
    FERRY_ASSIGN_OR_RAISE(
        Rows rows,
        c.Query(
            "INSERT INTO webhooks (tenant_id, url, secret, states, description, created_by,"
            " created_at_ms, after_event_id, job_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " RETURNING id",
            {optional(hook.tenant_id), hook.url, hook.secret, StatesText(hook.states),
             hook.description, hook.created_by, now_ms, latest[0].Int(0), optional(hook.job_id)}));
    FERRY_ASSIGN_OR_RAISE(auto found, LoadWebhooks(c, Scope::All(), rows[0].Int(0)));
    if (found.empty()) return Status::UnknownError("store: the new webhook vanished");
    created = std::move(found[0]);
    return Status::OK();
  }));
  return created;
}

Result<std::vector<Webhook>> SqlStore::ListWebhooks(const Scope& scope) {
  std::vector<Webhook> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(out, LoadWebhooks(c, scope, std::nullopt));
    return Status::OK();
  }));
  return out;
}

Result<std::optional<Webhook>> SqlStore::GetWebhook(const Scope& scope, int64_t id) {
  std::optional<Webhook> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(auto found, LoadWebhooks(c, scope, id));
    out.reset();
    if (!found.empty()) out = std::move(found[0]);
    return Status::OK();
  }));
  return out;
}

Result<bool> SqlStore::DeleteWebhook(const Scope& scope, int64_t id, int64_t now_ms) {
  bool deleted = false;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    std::string q = "UPDATE webhooks SET deleted_at_ms = ? WHERE id = ? AND deleted_at_ms = 0";
    Params params{now_ms, id};
    if (scope.tenant_id) {
      q += " AND tenant_id = ?";
      params.emplace_back(*scope.tenant_id);
    }
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(q, params));
    deleted = rows.affected > 0;
    if (!deleted) return Status::OK();
    return c
        .Query(
            "UPDATE webhook_deliveries SET status = 'failed', last_error = 'webhook deleted',"
            " finished_at_ms = ? WHERE webhook_id = ? AND status = 'pending'",
            {now_ms, id})
        .status();
  }));
  return deleted;
}

Result<int64_t> SqlStore::EnqueueWebhookDeliveries(
    int64_t up_to, int limit, int64_t now_ms,
    const std::function<std::string(const Webhook&, const WatchedEvent&)>& render) {
  limit = std::clamp(limit, 1, 10000);
  int64_t made = 0;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    made = 0;
    // The cursor row serialises dispatchers (two servers on one database).
    FERRY_ASSIGN_OR_RAISE(
        Rows cursor_rows,
        c.Query("SELECT event_id FROM webhook_cursor WHERE id = 1" + ForUpdate()));
    FERRY_ASSIGN_OR_RAISE(std::vector<Webhook> hooks, LoadWebhooks(c, Scope::All(), std::nullopt));
    std::optional<int64_t> cursor;
    if (!cursor_rows.empty()) cursor = cursor_rows[0].Int(0);
    // Nothing before the oldest live webhook's creation is sent: skip it.
    std::optional<int64_t> oldest;
    for (const Webhook& w : hooks)
      oldest = std::min(oldest.value_or(w.after_event_id), w.after_event_id);
    if (!cursor || (oldest && *cursor < *oldest)) cursor = oldest.value_or(up_to);
    int64_t next = std::max(*cursor, up_to);
    if (!hooks.empty() && *cursor < up_to) {
      FERRY_ASSIGN_OR_RAISE(Rows rows,
                            c.Query(std::string(kWatchedEventSelect) +
                                        " WHERE e.id > ? AND e.id <= ? AND e.state IS NOT NULL"
                                        " ORDER BY e.id LIMIT ?",
                                    {*cursor, up_to, int64_t{limit}}));
      if (static_cast<int>(rows.size()) == limit) next = rows.rows.back().Int(0);
      for (const Row& row : rows.rows) {
        const WatchedEvent event = WatchedEventFromRow(row);
        for (const Webhook& w : hooks) {
          if (event.event.id <= w.after_event_id) continue;
          if (w.tenant_id && *w.tenant_id != event.tenant_id) continue;
          if (w.job_id && *w.job_id != event.event.job_id) continue;
          if (!event.event.state ||
              std::find(w.states.begin(), w.states.end(), *event.event.state) == w.states.end()) {
            continue;
          }
          FERRY_ASSIGN_OR_RAISE(
              Rows inserted,
              c.Query(
                  "INSERT INTO webhook_deliveries (webhook_id, event_id, job_id, body, status,"
                  " next_attempt_at_ms, created_at_ms) VALUES (?, ?, ?, ?, 'pending', ?, ?)"
                  " ON CONFLICT (webhook_id, event_id) DO NOTHING",
                  {w.id, event.event.id, event.event.job_id, render(w, event), now_ms, now_ms}));
          made += inserted.affected;
        }
      }
    }
    if (cursor_rows.empty()) {
      return c.Query("INSERT INTO webhook_cursor (id, event_id) VALUES (1, ?)", {next}).status();
    }
    return c.Query("UPDATE webhook_cursor SET event_id = ? WHERE id = 1", {next}).status();
  }));
  return made;
}

Result<std::vector<WebhookDelivery>> SqlStore::DueWebhookDeliveries(int64_t now_ms, int limit) {
  limit = std::clamp(limit, 1, 10000);
  std::vector<WebhookDelivery> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    out.clear();
    FERRY_ASSIGN_OR_RAISE(Rows rows,
                          c.Query(std::string(kDeliverySelect) +
                                      " WHERE d.status = 'pending' AND d.next_attempt_at_ms <= ?"
                                      " ORDER BY d.next_attempt_at_ms, d.id LIMIT ?",
                                  {now_ms, int64_t{limit}}));
    out.reserve(rows.size());
    for (const Row& row : rows.rows) out.push_back(DeliveryFromRow(row));
    return Status::OK();
  }));
  return out;
}

Status SqlStore::RecordWebhookAttempt(const WebhookAttempt& a) {
  const char* status = a.delivered ? "delivered" : a.give_up ? "failed" : "pending";
  const bool finished = a.delivered || a.give_up;
  return Run(true, [&](Connection& c) -> Status {
    return c
        .Query(
            "UPDATE webhook_deliveries SET status = ?, attempts = attempts + 1,"
            " last_status_code = ?, last_error = ?, next_attempt_at_ms = ?, finished_at_ms = ?"
            " WHERE id = ? AND status = 'pending'",
            {std::string(status), int64_t{a.status_code}, a.error,
             finished ? a.at_ms : a.next_attempt_at_ms, finished ? a.at_ms : int64_t{0},
             a.delivery_id})
        .status();
  });
}

Result<std::optional<std::vector<WebhookDelivery>>> SqlStore::ListWebhookDeliveries(
    const Scope& scope, int64_t webhook_id, int limit) {
  limit = std::clamp(limit, 1, 1000);
  std::optional<std::vector<WebhookDelivery>> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    out.reset();
    // A deleted webhook's deliveries stay readable by whoever could see it.
    std::string q = "SELECT id FROM webhooks w WHERE w.id = ?";
    Params params{webhook_id};
    AddScope(scope, &q, &params);
    FERRY_ASSIGN_OR_RAISE(Rows found, c.Query(q, params));
    if (found.empty()) return Status::OK();
    FERRY_ASSIGN_OR_RAISE(
        Rows rows,
        c.Query(std::string(kDeliverySelect) + " WHERE d.webhook_id = ? ORDER BY d.id DESC LIMIT ?",
                {webhook_id, int64_t{limit}}));
    std::vector<WebhookDelivery> list;
    list.reserve(rows.size());
    for (const Row& row : rows.rows) list.push_back(DeliveryFromRow(row));
    out = std::move(list);
    return Status::OK();
  }));
  return out;
}

}  // namespace ferry::fleet::store_internal
