// Job output: chunks appended by agents, read by users.
#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

Status SqlStore::AppendLog(int64_t job_id, int attempt, int task, const std::string& stream,
                           const std::string& data, int64_t now_ms) {
  if (stream != "stdout" && stream != "stderr") {
    return Status::Invalid("log stream must be stdout or stderr, got '" + stream + "'");
  }
  return Run(true, [&](Connection& c) -> Status {
    // The counter on the job row numbers one job's chunks gap-free and in
    // commit order, so a reader following `after_seq` never skips one.
    FERRY_ASSIGN_OR_RAISE(
        Rows rows,
        c.Query("UPDATE jobs SET log_seq = log_seq + 1 WHERE id = ? RETURNING log_seq", {job_id}));
    if (rows.empty()) return Status::Invalid("no job with id " + std::to_string(job_id));
    return c
        .Query(
            "INSERT INTO job_logs (job_id, seq, attempt, task, stream, data, at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            {job_id, rows[0].Int(0), int64_t{attempt}, int64_t{task}, stream, sql::Blob{data},
             now_ms})
        .status();
  });
}

Result<std::optional<std::vector<LogChunk>>> SqlStore::ReadLogs(const Scope& scope, int64_t job_id,
                                                                int64_t after_seq, int limit) {
  limit = std::clamp(limit, 1, 100000);
  return ListOfVisibleJob<LogChunk>(scope, job_id,
                                    "SELECT seq, attempt, task, stream, data, at_ms FROM job_logs"
                                    " WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                                    {job_id, after_seq, int64_t{limit}}, [](const Row& row) {
                                      LogChunk chunk;
                                      chunk.seq = row.Int(0);
                                      chunk.attempt = static_cast<int>(row.Int(1));
                                      chunk.task = static_cast<int>(row.Int(2));
                                      chunk.stream = row.Text(3);
                                      chunk.data = row.Text(4);
                                      chunk.at_ms = row.Int(5);
                                      return chunk;
                                    });
}

}  // namespace ferry::fleet::store_internal
