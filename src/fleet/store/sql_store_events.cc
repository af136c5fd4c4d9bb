// Events across jobs: what the watch stream (GET /v1/jobs:watch) reads
// after a resource version, and the newest event id.
#include <algorithm>

#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

Result<std::vector<WatchedEvent>> SqlStore::ListEventsSince(const Scope& scope, int64_t after_id,
                                                            const EventFilter& filter, int limit) {
  limit = std::clamp(limit, 1, 10000);
  std::string q = std::string(kWatchedEventSelect) + " WHERE e.id > ?";
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
    for (const Row& row : rows.rows) out.push_back(WatchedEventFromRow(row));
    return Status::OK();
  }));
  return out;
}

Result<std::optional<Store::WriteHorizon>> SqlStore::EventWriteHorizon() {
  // SQLite has one writer at a time: ids become visible in order.
  if (!pg()) return std::optional<WriteHorizon>();
  std::optional<WriteHorizon> horizon;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(
        Rows rows,
        c.Query("SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint"
                " FROM pg_current_snapshot() AS s"));
    if (rows.empty()) return Status::UnknownError("store: no snapshot from PostgreSQL");
    horizon = WriteHorizon{rows[0].Int(0), rows[0].Int(1)};
    return Status::OK();
  }));
  return horizon;
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
