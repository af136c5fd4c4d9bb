// Events across jobs: what the watch stream (GET /v1/jobs:watch) reads
// after a resource version, and the newest event id.
#include <algorithm>

#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

Result<std::vector<WatchedEvent>> SqlStore::ListEventsSince(const Scope& scope, int64_t after_id,
                                                            const EventFilter& filter, int limit) {
  limit = std::clamp(limit, 1, 10000);
  // The primary key orders the scan; the joins only name the owner.
  std::string q =
      "SELECT e.id, e.job_id, e.at_ms, e.type, e.state, e.reason, e.message, e.actor,"
      " j.tenant_id, tn.name, tm.name, u.name, j.name, j.created_at_ms FROM job_events e"
      " JOIN jobs j ON j.id = e.job_id JOIN tenants tn ON tn.id = j.tenant_id"
      " JOIN teams tm ON tm.id = j.team_id JOIN users u ON u.id = j.user_id"
      " WHERE e.id > ?";
  Params params{after_id};
  if (scope.tenant_id) {
    q += " AND j.tenant_id = ?";
    params.emplace_back(*scope.tenant_id);
  }
  if (!filter.states.empty()) {
    q += " AND e.state IN (" + Placeholders(filter.states.size()) + ")";
    for (JobState s : filter.states) params.emplace_back(StateText(s));
  }
  if (!filter.team.empty()) {
    q += " AND tm.name = ?";
    params.emplace_back(filter.team);
  }
  q += " ORDER BY e.id LIMIT ?";
  params.emplace_back(int64_t{limit});
  std::vector<WatchedEvent> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    out.clear();
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(q, params));
    out.reserve(rows.size());
    for (const Row& row : rows.rows) {
      WatchedEvent w;
      w.event.id = row.Int(0);
      w.event.job_id = row.Int(1);
      w.event.at_ms = row.Int(2);
      w.event.type = row.Text(3);
      if (!row.IsNull(4)) w.event.state = ParseJobState(row.Text(4));
      w.event.reason = row.Text(5);
      w.event.message = row.Text(6);
      w.event.actor = row.Text(7);
      w.tenant_id = row.Int(8);
      w.tenant = row.Text(9);
      w.team = row.Text(10);
      w.user = row.Text(11);
      w.job_name = row.Text(12);
      w.job_created_ms = row.Int(13);
      out.push_back(std::move(w));
    }
    return Status::OK();
  }));
  return out;
}

Result<int64_t> SqlStore::LatestEventId() {
  int64_t latest = 0;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query("SELECT MAX(id) FROM job_events"));
    latest = rows.empty() || rows[0].IsNull(0) ? 0 : rows[0].Int(0);
    return Status::OK();
  }));
  return latest;
}

}  // namespace ferry::fleet::store_internal
