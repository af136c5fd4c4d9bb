// Idempotency keys: a retried submission replays the first answer; old keys
// are purged.
#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

Result<bool> SqlStore::ReplaySubmission(Connection& c, const SubmitRequest& request,
                                        SubmitResult* result) {
  if (request.idempotency_key.empty()) return false;
  const Principal& who = request.principal;
  FERRY_ASSIGN_OR_RAISE(
      Rows keys,
      c.Query("SELECT id, request_hash, job_id, status_code, response_body, created_at_ms"
              " FROM idempotency_keys WHERE user_id = ? AND key = ?",
              {who.user_id, request.idempotency_key}));
  if (keys.empty()) return false;
  const Row& k = keys[0];
  if (k.Int(5) < request.now_ms - request.key_ttl_ms) {
    FERRY_RETURN_NOT_OK(c.Query("DELETE FROM idempotency_keys WHERE id = ?", {k.Int(0)}).status());
    return false;
  }
  if (k.Text(1) != request.request_hash) {
    result->outcome = SubmitResult::Outcome::kKeyMismatch;
    result->status_code = 422;
    return true;
  }
  result->outcome = SubmitResult::Outcome::kReplayed;
  result->status_code = static_cast<int>(k.Int(3));
  result->response_body = k.Text(4);
  if (auto job_id = k.OptInt(2)) {
    FERRY_ASSIGN_OR_RAISE(auto job, LoadJob(c, Scope::All(), *job_id, true));
    if (job) result->job = std::move(*job);
  }
  return true;
}

Status SqlStore::RecordSubmission(Connection& c, const SubmitRequest& request, int64_t job_id,
                                  const std::string& response_body) {
  if (request.idempotency_key.empty()) return Status::OK();
  return c
      .Query(
          "INSERT INTO idempotency_keys (user_id, key, request_hash, job_id,"
          " status_code, response_body, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
          {request.principal.user_id, request.idempotency_key, request.request_hash, job_id,
           int64_t{201}, response_body, request.now_ms})
      .status();
}

Result<int64_t> SqlStore::PurgeIdempotencyKeys(int64_t now_ms, int64_t ttl_ms) {
  int64_t n = 0;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query("DELETE FROM idempotency_keys WHERE created_at_ms < ?",
                                             {now_ms - ttl_ms}));
    n = rows.affected;
    return Status::OK();
  }));
  return n;
}

}  // namespace ferry::fleet::store_internal
