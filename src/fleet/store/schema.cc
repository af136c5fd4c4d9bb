#include "fleet/store/schema.h"

namespace ferry::fleet::sql {

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration> kMigrations = {
      {1,
       {
           // ---- Identity.
           "CREATE TABLE tenants (id {id}, name TEXT NOT NULL UNIQUE,"
           " created_at_ms BIGINT NOT NULL DEFAULT 0)",
           "CREATE TABLE teams (id {id}, tenant_id BIGINT NOT NULL REFERENCES tenants(id),"
           " name TEXT NOT NULL, UNIQUE (tenant_id, name))",
           "CREATE TABLE users (id {id}, tenant_id BIGINT NOT NULL REFERENCES tenants(id),"
           " team_id BIGINT NOT NULL REFERENCES teams(id), name TEXT NOT NULL,"
           " role TEXT NOT NULL CHECK (role IN ('user', 'team_admin', 'platform_admin', 'agent')),"
           " created_at_ms BIGINT NOT NULL DEFAULT 0, UNIQUE (tenant_id, name))",
           "CREATE TABLE api_tokens (id {id}, user_id BIGINT NOT NULL REFERENCES users(id),"
           " token_sha256 TEXT NOT NULL UNIQUE, label TEXT NOT NULL DEFAULT '',"
           " created_at_ms BIGINT NOT NULL DEFAULT 0, revoked_at_ms BIGINT)",
           // ---- Nodes and GPUs.
           "CREATE TABLE nodes (id {id}, name TEXT NOT NULL UNIQUE, pool TEXT NOT NULL,"
           " labels TEXT NOT NULL DEFAULT '{}', cpus {real} NOT NULL DEFAULT 0,"
           " memory_mb BIGINT NOT NULL DEFAULT 0,"
           " state TEXT NOT NULL CHECK (state IN ('READY', 'LOST')),"
           " drain BIGINT NOT NULL DEFAULT 0, instance TEXT NOT NULL DEFAULT '',"
           " registered_at_ms BIGINT NOT NULL DEFAULT 0,"
           " last_heartbeat_ms BIGINT NOT NULL DEFAULT 0,"
           " lease_expires_at_ms BIGINT NOT NULL DEFAULT 0)",
           "CREATE TABLE gpus (id {id}, node_id BIGINT NOT NULL REFERENCES nodes(id),"
           " idx BIGINT NOT NULL, model TEXT NOT NULL DEFAULT '',"
           " memory_mb BIGINT NOT NULL DEFAULT 0, uuid TEXT NOT NULL DEFAULT '',"
           " UNIQUE (node_id, idx))",
           // ---- Jobs. `spec` is the JobSpec as JSON; the columns after it
           // copy the fields that queries filter or sort on.
           "CREATE TABLE jobs (id {id}, tenant_id BIGINT NOT NULL REFERENCES tenants(id),"
           " team_id BIGINT NOT NULL REFERENCES teams(id),"
           " user_id BIGINT NOT NULL REFERENCES users(id), name TEXT NOT NULL,"
           " spec TEXT NOT NULL,"
           " state TEXT NOT NULL CHECK (state IN ('PENDING', 'ADMITTED', 'RUNNING', 'SUCCEEDED',"
           " 'FAILED', 'CANCELLED', 'PREEMPTED', 'TIMEOUT', 'LOST')),"
           " reason TEXT NOT NULL, attempt BIGINT NOT NULL DEFAULT 1,"
           " priority BIGINT NOT NULL DEFAULT 0, task_count BIGINT NOT NULL DEFAULT 1,"
           " max_retries BIGINT NOT NULL DEFAULT 0, max_runtime_ms BIGINT NOT NULL DEFAULT 0,"
           " log_seq BIGINT NOT NULL DEFAULT 0, created_at_ms BIGINT NOT NULL,"
           " admitted_at_ms BIGINT NOT NULL DEFAULT 0, started_at_ms BIGINT NOT NULL DEFAULT 0,"
           " finished_at_ms BIGINT NOT NULL DEFAULT 0, exit_code BIGINT)",
           "CREATE INDEX jobs_tenant ON jobs (tenant_id, id)",
           "CREATE INDEX jobs_state ON jobs (state, priority, id)",
           "CREATE INDEX jobs_user ON jobs (user_id, id)",
           "CREATE INDEX jobs_team ON jobs (team_id, id)",
           "CREATE TABLE job_labels (job_id BIGINT NOT NULL REFERENCES jobs(id),"
           " key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (job_id, key))",
           "CREATE INDEX job_labels_pair ON job_labels (key, value, job_id)",
           "CREATE TABLE attempts (job_id BIGINT NOT NULL REFERENCES jobs(id),"
           " attempt BIGINT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL,"
           " admitted_at_ms BIGINT NOT NULL DEFAULT 0, started_at_ms BIGINT NOT NULL DEFAULT 0,"
           " ended_at_ms BIGINT NOT NULL DEFAULT 0, exit_code BIGINT,"
           " PRIMARY KEY (job_id, attempt))",
           "CREATE TABLE tasks (job_id BIGINT NOT NULL REFERENCES jobs(id),"
           " attempt BIGINT NOT NULL, task BIGINT NOT NULL,"
           " node_id BIGINT NOT NULL REFERENCES nodes(id),"
           " state TEXT NOT NULL CHECK (state IN ('assigned', 'running', 'exited')),"
           " exit_code BIGINT, signal BIGINT, message TEXT NOT NULL DEFAULT '',"
           " started_at_ms BIGINT NOT NULL DEFAULT 0, ended_at_ms BIGINT NOT NULL DEFAULT 0,"
           " PRIMARY KEY (job_id, attempt, task))",
           "CREATE INDEX tasks_node ON tasks (node_id, state)",
           // One row per GPU of a task (the first carries the task's CPUs and
           // memory), or one row without a GPU for a task that has none.
           "CREATE TABLE allocations (id {id}, job_id BIGINT NOT NULL REFERENCES jobs(id),"
           " attempt BIGINT NOT NULL, task BIGINT NOT NULL, gpu_id BIGINT REFERENCES gpus(id),"
           " node_id BIGINT NOT NULL REFERENCES nodes(id), cpus {real} NOT NULL DEFAULT 0,"
           " memory_mb BIGINT NOT NULL DEFAULT 0, started_at_ms BIGINT NOT NULL,"
           " released_at_ms BIGINT)",
           // The invariant: no GPU carries two open allocations.
           "CREATE UNIQUE INDEX allocations_one_open_per_gpu ON allocations (gpu_id)"
           " WHERE released_at_ms IS NULL",
           "CREATE INDEX allocations_job ON allocations (job_id, attempt, task)",
           "CREATE INDEX allocations_node_open ON allocations (node_id)"
           " WHERE released_at_ms IS NULL",
           "CREATE TABLE job_events (id {id}, job_id BIGINT NOT NULL REFERENCES jobs(id),"
           " at_ms BIGINT NOT NULL, type TEXT NOT NULL, state TEXT,"
           " reason TEXT NOT NULL DEFAULT '', message TEXT NOT NULL DEFAULT '',"
           " actor TEXT NOT NULL DEFAULT '')",
           "CREATE INDEX job_events_job ON job_events (job_id, id)",
           "CREATE TABLE idempotency_keys (id {id}, user_id BIGINT NOT NULL REFERENCES users(id),"
           " key TEXT NOT NULL, request_hash TEXT NOT NULL, job_id BIGINT REFERENCES jobs(id),"
           " status_code BIGINT NOT NULL, response_body TEXT NOT NULL,"
           " created_at_ms BIGINT NOT NULL, UNIQUE (user_id, key))",
           "CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at_ms)",
           "CREATE TABLE job_logs (job_id BIGINT NOT NULL REFERENCES jobs(id),"
           " seq BIGINT NOT NULL, attempt BIGINT NOT NULL, task BIGINT NOT NULL,"
           " stream TEXT NOT NULL, data {blob} NOT NULL, at_ms BIGINT NOT NULL,"
           " PRIMARY KEY (job_id, seq))",
       }},
      {2,
       {
           // ---- Scheduling. A preempted attempt keeps running until
           // its tasks end; these say why it must stop and how long it gets.
           "ALTER TABLE jobs ADD COLUMN preempt_reason TEXT NOT NULL DEFAULT ''",
           "ALTER TABLE jobs ADD COLUMN preempted_for BIGINT NOT NULL DEFAULT 0",
           "ALTER TABLE jobs ADD COLUMN preempt_grace_ms BIGINT NOT NULL DEFAULT 0",
           // Scaled-down nodes stay for the history of the tasks that ran there.
           "ALTER TABLE nodes ADD COLUMN removed_at_ms BIGINT NOT NULL DEFAULT 0",
           // One statement written over two lines, not two statements.
           "CREATE INDEX allocations_open ON allocations (job_id, attempt)"  // NOLINT(bugprone-suspicious-missing-comma)
           " WHERE released_at_ms IS NULL",
       }},
      {3,
       {
           // The job a preempted attempt made room for ("who preempted me").
           "ALTER TABLE attempts ADD COLUMN preempted_for BIGINT NOT NULL DEFAULT 0",
       }},
      {4,
       {
           // ---- Webhooks: job events signed and POSTed to a tenant's URL.
           // A tenant_id of NULL watches every tenant (platform admins); a
           // job_id, one job only.
           "CREATE TABLE webhooks (id {id}, tenant_id BIGINT REFERENCES tenants(id),"
           " job_id BIGINT REFERENCES jobs(id), url TEXT NOT NULL, secret TEXT NOT NULL,"
           " states TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',"
           " created_by BIGINT NOT NULL REFERENCES users(id), created_at_ms BIGINT NOT NULL,"
           " after_event_id BIGINT NOT NULL DEFAULT 0, deleted_at_ms BIGINT NOT NULL DEFAULT 0)",
           "CREATE TABLE webhook_deliveries (id {id},"
           " webhook_id BIGINT NOT NULL REFERENCES webhooks(id), event_id BIGINT NOT NULL,"
           " job_id BIGINT NOT NULL, body TEXT NOT NULL,"
           " status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),"
           " attempts BIGINT NOT NULL DEFAULT 0, next_attempt_at_ms BIGINT NOT NULL,"
           " last_status_code BIGINT NOT NULL DEFAULT 0, last_error TEXT NOT NULL DEFAULT '',"
           " created_at_ms BIGINT NOT NULL, finished_at_ms BIGINT NOT NULL DEFAULT 0,"
           " UNIQUE (webhook_id, event_id))",
           "CREATE INDEX webhook_deliveries_due ON webhook_deliveries"  // NOLINT(bugprone-suspicious-missing-comma)
           " (next_attempt_at_ms) WHERE status = 'pending'",
           // The newest job event turned into deliveries (one row, id 1).
           "CREATE TABLE webhook_cursor (id BIGINT PRIMARY KEY, event_id BIGINT NOT NULL)",
       }},
      {5,
       {
           // ---- Resource managers (Slurm pools): what the node's own
           // manager says about it. `unavailable` says why it takes no new
           // work (empty: it may); the external columns are what it gave to
           // work Ferry does not own.
           "ALTER TABLE nodes ADD COLUMN unavailable TEXT NOT NULL DEFAULT ''",
           "ALTER TABLE nodes ADD COLUMN external_cpus {real} NOT NULL DEFAULT 0",
           "ALTER TABLE nodes ADD COLUMN external_memory_mb BIGINT NOT NULL DEFAULT 0",
           "ALTER TABLE gpus ADD COLUMN external BIGINT NOT NULL DEFAULT 0",
       }},
      {6,
       {
           // ---- Datasets: immutable, numbered versions of a tenant's
           // manifests (objects under one source URI), read by job inputs.
           "CREATE TABLE dataset_versions (id {id},"
           " tenant_id BIGINT NOT NULL REFERENCES tenants(id), name TEXT NOT NULL,"
           " version BIGINT NOT NULL, source TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',"
           " bytes BIGINT NOT NULL, object_count BIGINT NOT NULL, digest TEXT NOT NULL,"
           " created_at_ms BIGINT NOT NULL, created_by BIGINT NOT NULL REFERENCES users(id),"
           " UNIQUE (tenant_id, name, version))",
           "CREATE TABLE dataset_objects ("
           " version_id BIGINT NOT NULL REFERENCES dataset_versions(id), path TEXT NOT NULL,"
           " size BIGINT NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY (version_id, path))",
       }},
  };
  return kMigrations;
}

std::string ForDialect(Dialect dialect, const char* statement) {
  const bool pg = dialect == Dialect::kPostgres;
  const std::pair<std::string_view, std::string_view> replacements[] = {
      {"{id}", pg ? "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY" : "INTEGER PRIMARY KEY"},
      {"{real}", pg ? "DOUBLE PRECISION" : "REAL"},
      {"{blob}", pg ? "BYTEA" : "BLOB"},
  };
  std::string out(statement);
  for (const auto& [from, to] : replacements) {
    for (size_t pos = out.find(from); pos != std::string::npos; pos = out.find(from, pos)) {
      out.replace(pos, from.size(), to);
      pos += to.size();
    }
  }
  return out;
}

}  // namespace ferry::fleet::sql
