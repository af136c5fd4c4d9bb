// The store's behaviour, run once per back end: SQLite in a temporary file,
// and PostgreSQL in a throwaway cluster (scripts/pg-test-server) started on
// first use by this process and stopped when the tests end; every test gets
// a fresh schema.
#include "ferry/fleet/store.h"

#include <libpq-fe.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "fleet/store/schema.h"
#include "fleet/store/sql_db.h"
#include "testing/test_util.h"

namespace ferry::fleet {
namespace {

enum class Backend { kSqlite, kPostgres };

// ---- The PostgreSQL server shared by the tests of this process.
class PgServer {
 public:
  static PgServer& Get() {
    static PgServer server;
    return server;
  }

  // The base URL, or an empty string with `why` set when PostgreSQL is
  // unavailable (binaries missing: skip) or failed to start (error).
  std::string Url(std::string* why, bool* missing) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!tried_) {
      tried_ = true;
      Start();
    }
    *why = why_;
    *missing = missing_;
    return url_;
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (dir_.empty()) return;
    std::string command = std::string(FERRY_PG_TEST_SERVER) + " stop " + dir_ + " >&2";
    int rc = std::system(command.c_str());
    if (rc != 0) std::fprintf(stderr, "pg-test-server stop %s failed\n", dir_.c_str());
    dir_.clear();
  }

  // A fresh, empty schema on the server; returns a URL that uses it.
  Result<std::string> NewSchema() {
    std::string why;
    bool missing = false;
    std::string base = Url(&why, &missing);
    if (base.empty()) return Status::IOError(why);
    std::string name = "t" + std::to_string(::getpid()) + "_" + std::to_string(++databases_);
    PGconn* conn = PQconnectdb(base.c_str());
    if (PQstatus(conn) != CONNECTION_OK) {
      std::string message = PQerrorMessage(conn);
      PQfinish(conn);
      return Status::IOError("cannot connect to the test server: " + message);
    }
    // A schema is as isolated as a database for the store (it names no
    // schema, so it creates and finds its tables in the first one of the
    // search path) and much cheaper to create.
    PGresult* res = PQexec(conn, ("CREATE SCHEMA " + name).c_str());
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    std::string message = PQresultErrorMessage(res);
    PQclear(res);
    PQfinish(conn);
    if (!ok) return Status::IOError("CREATE SCHEMA failed: " + message);
    return base + "?options=-csearch_path%3D" + name;
  }

 private:
  void Start() {
    char tmpl[] = "/tmp/ferry-pg-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      why_ = "mkdtemp failed";
      return;
    }
    std::string dir = tmpl;
    // The owner pid lets the script stop the server if this process dies
    // before the environment's TearDown runs.
    std::string command = "PG_TEST_OWNER_PID=" + std::to_string(::getpid()) + " " +
                          FERRY_PG_TEST_SERVER + " start " + dir;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) {
      why_ = "cannot run " + command;
      return;
    }
    char line[512] = {0};
    bool got = std::fgets(line, sizeof(line), pipe) != nullptr;
    int status = ::pclose(pipe);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (rc == 3) {
      missing_ = true;
      why_ =
          "PostgreSQL binaries not found (scripts/pg-test-server exited 3); skipping the "
          "PostgreSQL half";
      std::filesystem::remove_all(dir);
      return;
    }
    dir_ = dir;  // stop (and remove) it at the end whatever happened
    if (rc != 0 || !got) {
      why_ = "scripts/pg-test-server start failed (exit " + std::to_string(rc) + ")";
      return;
    }
    url_ = line;
    while (!url_.empty() && (url_.back() == '\n' || url_.back() == '\r')) url_.pop_back();
  }

  std::mutex mutex_;
  bool tried_ = false;
  bool missing_ = false;
  std::string why_;
  std::string url_;
  std::string dir_;
  std::atomic<int> databases_{0};
};

class StopPgAtExit : public ::testing::Environment {
 public:
  void TearDown() override { PgServer::Get().Stop(); }
};
const auto* const kStopPg = ::testing::AddGlobalTestEnvironment(new StopPgAtExit);

std::string Render(const Job& job) { return "{\"id\":" + std::to_string(job.id) + "}"; }

JobSpec Spec(const std::string& name, int tasks = 1, int gpus = 0) {
  JobSpec spec;
  spec.name = name;
  spec.command = {"/bin/true"};
  spec.tasks = tasks;
  spec.gpus_per_task = gpus;
  spec.cpus_per_task = 2;
  spec.memory_mb_per_task = 1024;
  return spec;
}

TaskReport Started(const Job& job, int task, int attempt = 0) {
  TaskReport r;
  r.ref = {job.id, task, attempt == 0 ? job.attempt : attempt};
  r.kind = TaskReport::Kind::kStarted;
  return r;
}

TaskReport Exited(const Job& job, int task, std::optional<int> code,
                  std::optional<int> signal = std::nullopt, int attempt = 0) {
  TaskReport r;
  r.ref = {job.id, task, attempt == 0 ? job.attempt : attempt};
  r.kind = TaskReport::Kind::kExited;
  r.exit_code = code;
  r.signal = signal;
  return r;
}

JobFilter States(std::vector<JobState> states) {
  JobFilter f;
  f.states = std::move(states);
  return f;
}
JobFilter ByUser(const std::string& user) {
  JobFilter f;
  f.user = user;
  return f;
}
JobFilter ByTeam(const std::string& team) {
  JobFilter f;
  f.team = team;
  return f;
}
JobFilter ByLabels(std::map<std::string, std::string> labels) {
  JobFilter f;
  f.labels = std::move(labels);
  return f;
}

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kSqlite) {
      char tmpl[] = "/tmp/ferry-store-XXXXXX";
      ASSERT_NE(::mkdtemp(tmpl), nullptr);
      dir_ = tmpl;
      url_ = "sqlite:" + dir_ + "/fleet.db";
    } else {
      std::string why;
      bool missing = false;
      PgServer::Get().Url(&why, &missing);
      if (missing) GTEST_SKIP() << why;
      ASSERT_TRUE(why.empty()) << why;
      ASSERT_OK_AND_ASSIGN(url_, PgServer::Get().NewSchema());
    }
    ASSERT_OK_AND_ASSIGN(store_, OpenStore(url_));
  }

  void TearDown() override {
    store_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  Principal User(const std::string& tenant, const std::string& team, const std::string& name,
                 Role role = Role::kUser) {
    auto tenant_id = store_->EnsureTenant(tenant);
    EXPECT_TRUE(tenant_id.ok()) << tenant_id.status().ToString();
    auto team_id = store_->EnsureTeam(*tenant_id, team);
    EXPECT_TRUE(team_id.ok()) << team_id.status().ToString();
    auto user_id = store_->CreateUser(*team_id, name, role);
    EXPECT_TRUE(user_id.ok()) << user_id.status().ToString();
    auto p = store_->FindUser(tenant, name);
    EXPECT_TRUE(p.ok() && p->has_value());
    return p.ok() && p->has_value() ? **p : Principal{};
  }

  Job Submit(const Principal& who, const JobSpec& spec, int64_t now = 1000) {
    SubmitRequest req;
    req.principal = who;
    req.spec = spec;
    req.now_ms = now;
    auto r = store_->Submit(req, Render);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->job : Job{};
  }

  Node Register(const std::string& name, int gpus, const std::string& instance = "i1",
                int64_t now = 1000) {
    NodeRegistration reg;
    reg.name = name;
    reg.pool = "onprem";
    reg.labels = {{"rack", "r1"}};
    reg.cpus = 64;
    reg.memory_mb = 512 * 1024;
    reg.instance = instance;
    for (int i = 0; i < gpus; ++i) reg.gpus.push_back({i, "H200", 141000, ""});
    auto node = store_->RegisterNode(reg, now, 10'000);
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    return node.ok() ? *node : Node{};
  }

  // Places every task of `job` on the given nodes (task i on nodes[i]), on
  // the first GPUs of each node that are free.
  CommitResult Place(const Job& job, const std::vector<std::string>& nodes, int64_t now = 2000) {
    auto snap = store_->LoadSchedulingSnapshot();
    EXPECT_TRUE(snap.ok());
    Placement p{job.id, job.attempt, {}};
    std::map<std::string, int> used;
    for (int t = 0; t < job.spec.tasks; ++t) {
      const std::string& name = nodes[t % nodes.size()];
      for (const sched::NodeInfo& n : snap->nodes) {
        if (n.name != name) continue;
        TaskPlacement tp{t, n.id, n.name, {}, {}};
        int skip = used[name];
        for (const sched::GpuSlot& g : n.gpus) {
          if (static_cast<int>(tp.gpu_ids.size()) == job.spec.gpus_per_task) break;
          if (!g.free) continue;
          if (skip > 0) {
            --skip;
            continue;
          }
          tp.gpu_ids.push_back(g.id);
          tp.gpu_indices.push_back(g.index);
        }
        used[name] += static_cast<int>(tp.gpu_ids.size());
        p.tasks.push_back(tp);
      }
    }
    auto r = store_->CommitPlacements({p}, {}, now);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : CommitResult{};
  }

  Job Get(int64_t id) {
    auto job = store_->GetJob(Scope::All(), id);
    EXPECT_TRUE(job.ok() && job->has_value());
    return job.ok() && job->has_value() ? **job : Job{};
  }

  SyncResult Sync(const std::string& node, std::vector<TaskRef> running,
                  std::vector<TaskReport> reports, int64_t now = 3000,
                  const std::string& instance = "i1") {
    SyncRequest req;
    req.node = node;
    req.instance = instance;
    req.running = std::move(running);
    req.reports = std::move(reports);
    req.now_ms = now;
    auto r = store_->SyncNode(req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : SyncResult{};
  }

  int FreeGpus(const std::string& node) {
    auto n = store_->GetNode(node);
    EXPECT_TRUE(n.ok() && n->has_value());
    int free = 0;
    for (const Gpu& g : (*n)->gpus) free += g.job_id ? 0 : 1;
    return free;
  }

  std::vector<std::string> Reasons(int64_t job_id) {
    auto events = store_->ListEvents(Scope::All(), job_id, 0, 1000);
    EXPECT_TRUE(events.ok() && events->has_value());
    std::vector<std::string> out;
    for (const JobEvent& e : **events) {
      if (e.type == "state") out.push_back(std::string(ToString(*e.state)) + "/" + e.reason);
    }
    return out;
  }

  std::string dir_;
  std::string url_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, MigrationsAreIdempotent) {
  EXPECT_EQ(store_->backend(), GetParam() == Backend::kSqlite ? "sqlite" : "postgresql");
  EXPECT_GE(store_->schema_version(), 1);
  ASSERT_OK_AND_ASSIGN(int64_t tenant, store_->EnsureTenant("acme"));
  // Opening again (a second process, a restart) finds the schema current
  // and the data intact.
  ASSERT_OK_AND_ASSIGN(auto again, OpenStore(url_));
  EXPECT_EQ(again->schema_version(), store_->schema_version());
  ASSERT_OK_AND_ASSIGN(int64_t same, again->EnsureTenant("acme"));
  EXPECT_EQ(same, tenant);
  again.reset();
  store_.reset();
  ASSERT_OK_AND_ASSIGN(store_, OpenStore(url_));
  ASSERT_OK_AND_ASSIGN(same, store_->EnsureTenant("acme"));
  EXPECT_EQ(same, tenant);
}

TEST_P(StoreTest, IdentityAndTokens) {
  ASSERT_OK_AND_ASSIGN(int64_t acme, store_->EnsureTenant("acme"));
  ASSERT_OK_AND_ASSIGN(int64_t acme2, store_->EnsureTenant("acme"));
  EXPECT_EQ(acme, acme2);
  ASSERT_OK_AND_ASSIGN(int64_t ml, store_->EnsureTeam(acme, "ml"));
  ASSERT_OK_AND_ASSIGN(int64_t ml2, store_->EnsureTeam(acme, "ml"));
  EXPECT_EQ(ml, ml2);
  ASSERT_OK_AND_ASSIGN(int64_t ops, store_->EnsureTeam(acme, "ops"));
  ASSERT_OK_AND_ASSIGN(int64_t ana, store_->CreateUser(ml, "ana", Role::kTeamAdmin));
  // Names are unique per tenant, not per team.
  auto dup = store_->CreateUser(ops, "ana", Role::kUser);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalid);
  EXPECT_NE(dup.status().message().find("already exists"), std::string::npos);
  ASSERT_OK_AND_ASSIGN(int64_t other, store_->EnsureTenant("other"));
  ASSERT_OK_AND_ASSIGN(int64_t other_team, store_->EnsureTeam(other, "ml"));
  ASSERT_OK(store_->CreateUser(other_team, "ana", Role::kUser));
  EXPECT_FALSE(store_->CreateUser(999999, "bob", Role::kUser).ok());
  EXPECT_FALSE(store_->EnsureTeam(999999, "x").ok());
  EXPECT_FALSE(store_->EnsureTenant("").ok());

  const std::string hash = Sha256Hex("fy_secret");
  ASSERT_OK(store_->AddToken(ana, hash, "laptop", 5));
  EXPECT_FALSE(store_->AddToken(ana, hash, "again", 6).ok());  // one user per token
  EXPECT_FALSE(store_->AddToken(ana, "short", "bad", 6).ok());
  EXPECT_FALSE(store_->AddToken(424242, Sha256Hex("x"), "nobody", 6).ok());
  ASSERT_OK_AND_ASSIGN(auto who, store_->LookupToken(hash));
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->tenant, "acme");
  EXPECT_EQ(who->tenant_id, acme);
  EXPECT_EQ(who->team, "ml");
  EXPECT_EQ(who->user, "ana");
  EXPECT_EQ(who->user_id, ana);
  EXPECT_EQ(who->role, Role::kTeamAdmin);
  ASSERT_OK_AND_ASSIGN(auto nobody, store_->LookupToken(Sha256Hex("fy_other")));
  EXPECT_FALSE(nobody.has_value());
  ASSERT_OK_AND_ASSIGN(auto found, store_->FindUser("other", "ana"));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->tenant, "other");
  ASSERT_OK_AND_ASSIGN(auto missing, store_->FindUser("acme", "zed"));
  EXPECT_FALSE(missing.has_value());
  ASSERT_OK_AND_ASSIGN(int64_t users, store_->CountUsers());
  EXPECT_EQ(users, 2);
}

TEST_P(StoreTest, ListUsersAndRevokeTheirTokens) {
  ASSERT_OK_AND_ASSIGN(int64_t acme, store_->EnsureTenant("acme"));
  ASSERT_OK_AND_ASSIGN(int64_t ml, store_->EnsureTeam(acme, "ml"));
  ASSERT_OK_AND_ASSIGN(int64_t other, store_->EnsureTenant("other"));
  ASSERT_OK_AND_ASSIGN(int64_t ops, store_->EnsureTeam(other, "ops"));
  ASSERT_OK_AND_ASSIGN(int64_t ana, store_->CreateUser(ml, "ana", Role::kUser));
  ASSERT_OK_AND_ASSIGN(int64_t bob, store_->CreateUser(ml, "bob", Role::kTeamAdmin));
  ASSERT_OK_AND_ASSIGN(int64_t ana_other, store_->CreateUser(ops, "ana", Role::kUser));
  const std::string laptop = Sha256Hex("fy_ana_laptop");
  const std::string ci = Sha256Hex("fy_ana_ci");
  const std::string bobs = Sha256Hex("fy_bob");
  const std::string other_ana = Sha256Hex("fy_other_ana");
  ASSERT_OK(store_->AddToken(ana, laptop, "laptop", 5));
  ASSERT_OK(store_->AddToken(ana, ci, "ci", 6));
  ASSERT_OK(store_->AddToken(bob, bobs, "bob", 7));
  ASSERT_OK(store_->AddToken(ana_other, other_ana, "other", 8));

  ASSERT_OK_AND_ASSIGN(auto all, store_->ListUsers(std::nullopt));
  ASSERT_TRUE(all.has_value());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].id, ana);  // oldest first
  EXPECT_EQ((*all)[0].tenant, "acme");
  EXPECT_EQ((*all)[0].team, "ml");
  EXPECT_EQ((*all)[0].name, "ana");
  EXPECT_EQ((*all)[0].role, Role::kUser);
  EXPECT_EQ((*all)[0].active_tokens, 2);
  EXPECT_GT((*all)[0].created_at_ms, 0);
  EXPECT_EQ((*all)[1].name, "bob");
  EXPECT_EQ((*all)[1].role, Role::kTeamAdmin);
  EXPECT_EQ((*all)[1].active_tokens, 1);
  EXPECT_EQ((*all)[2].tenant, "other");
  EXPECT_EQ((*all)[2].team, "ops");
  ASSERT_OK_AND_ASSIGN(auto in_other, store_->ListUsers(std::string("other")));
  ASSERT_TRUE(in_other.has_value());
  ASSERT_EQ(in_other->size(), 1u);
  EXPECT_EQ((*in_other)[0].id, ana_other);
  ASSERT_OK_AND_ASSIGN(auto no_tenant, store_->ListUsers(std::string("nosuch")));
  EXPECT_FALSE(no_tenant.has_value());
  ASSERT_OK_AND_ASSIGN(int64_t empty_tenant, store_->EnsureTenant("empty"));
  (void)empty_tenant;
  ASSERT_OK_AND_ASSIGN(auto none, store_->ListUsers(std::string("empty")));
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());

  // Revoking ana of acme ends both her tokens and nobody else's.
  ASSERT_OK_AND_ASSIGN(auto revoked, store_->RevokeUserTokens("acme", "ana", 100));
  ASSERT_TRUE(revoked.has_value());
  EXPECT_EQ(revoked->revoked_tokens, 2);
  EXPECT_EQ(revoked->user.id, ana);
  EXPECT_EQ(revoked->user.active_tokens, 0);
  for (const std::string& hash : {laptop, ci}) {
    ASSERT_OK_AND_ASSIGN(auto who, store_->LookupToken(hash));
    EXPECT_FALSE(who.has_value());
  }
  for (const std::string& hash : {bobs, other_ana}) {
    ASSERT_OK_AND_ASSIGN(auto who, store_->LookupToken(hash));
    EXPECT_TRUE(who.has_value());
  }
  // Again: nothing left to revoke, still found.
  ASSERT_OK_AND_ASSIGN(auto again, store_->RevokeUserTokens("acme", "ana", 200));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->revoked_tokens, 0);
  ASSERT_OK_AND_ASSIGN(auto missing, store_->RevokeUserTokens("acme", "zed", 200));
  EXPECT_FALSE(missing.has_value());
  ASSERT_OK_AND_ASSIGN(auto wrong_tenant, store_->RevokeUserTokens("nosuch", "ana", 200));
  EXPECT_FALSE(wrong_tenant.has_value());
  // The user stays and a new token works.
  ASSERT_OK(store_->AddToken(ana, Sha256Hex("fy_ana_new"), "new", 300));
  ASSERT_OK_AND_ASSIGN(auto fresh, store_->LookupToken(Sha256Hex("fy_ana_new")));
  EXPECT_TRUE(fresh.has_value());
  ASSERT_OK_AND_ASSIGN(auto after, store_->ListUsers(std::string("acme")));
  ASSERT_TRUE(after.has_value());
  ASSERT_EQ(after->size(), 2u);
  EXPECT_EQ((*after)[0].active_tokens, 1);
}

TEST_P(StoreTest, SubmitReplayMismatchAndExpiry) {
  Principal ana = User("acme", "ml", "ana");
  SubmitRequest req;
  req.principal = ana;
  req.spec = Spec("train", 2, 4);
  req.spec.labels = {{"project", "llm"}};
  req.spec.env = {{"SEED", "1"}};
  req.idempotency_key = "key-1";
  req.request_hash = Sha256Hex("body-1");
  req.now_ms = 10'000;
  req.key_ttl_ms = 60'000;
  ASSERT_OK_AND_ASSIGN(SubmitResult first, store_->Submit(req, Render));
  EXPECT_EQ(first.outcome, SubmitResult::Outcome::kCreated);
  EXPECT_EQ(first.status_code, 201);
  EXPECT_EQ(first.response_body, Render(first.job));
  const Job& job = first.job;
  EXPECT_GT(job.id, 0);
  EXPECT_EQ(job.state, JobState::kPending);
  EXPECT_EQ(job.reason, reason::kSubmitted);
  EXPECT_EQ(job.attempt, 1);
  EXPECT_EQ(job.user, "ana");
  EXPECT_EQ(job.team, "ml");
  EXPECT_EQ(job.tenant, "acme");
  EXPECT_EQ(job.created_at_ms, 10'000);
  EXPECT_EQ(job.spec.tasks, 2);
  EXPECT_EQ(job.spec.gpus_per_task, 4);
  EXPECT_EQ(job.spec.labels.at("project"), "llm");
  EXPECT_EQ(job.spec.env.at("SEED"), "1");
  EXPECT_TRUE(job.placement.empty());
  ASSERT_EQ(job.attempts.size(), 1u);
  EXPECT_EQ(job.attempts[0].state, JobState::kPending);
  EXPECT_EQ(Reasons(job.id), std::vector<std::string>{"PENDING/SUBMITTED"});

  // Same key, same body: the original answer, no new job.
  req.now_ms = 20'000;
  ASSERT_OK_AND_ASSIGN(SubmitResult replay, store_->Submit(req, Render));
  EXPECT_EQ(replay.outcome, SubmitResult::Outcome::kReplayed);
  EXPECT_EQ(replay.status_code, 201);
  EXPECT_EQ(replay.response_body, first.response_body);
  EXPECT_EQ(replay.job.id, job.id);

  // Same key, another body: refused, nothing created.
  req.request_hash = Sha256Hex("body-2");
  ASSERT_OK_AND_ASSIGN(SubmitResult mismatch, store_->Submit(req, Render));
  EXPECT_EQ(mismatch.outcome, SubmitResult::Outcome::kKeyMismatch);
  ASSERT_OK_AND_ASSIGN(JobPage page, store_->ListJobs(Scope::All(), {}, std::nullopt, 50));
  EXPECT_EQ(page.jobs.size(), 1u);

  // The key is per user: another user may use it.
  Principal bob = User("acme", "ml", "bob");
  SubmitRequest bobs = req;
  bobs.principal = bob;
  ASSERT_OK_AND_ASSIGN(SubmitResult other, store_->Submit(bobs, Render));
  EXPECT_EQ(other.outcome, SubmitResult::Outcome::kCreated);
  EXPECT_EQ(other.job.user, "bob");

  // Past the TTL the key is forgotten: the same key creates a new job.
  req.now_ms = 10'000 + 60'001;
  ASSERT_OK_AND_ASSIGN(SubmitResult later, store_->Submit(req, Render));
  EXPECT_EQ(later.outcome, SubmitResult::Outcome::kCreated);
  EXPECT_NE(later.job.id, job.id);

  // A spec that would not read back is refused before anything is stored.
  SubmitRequest invalid = req;
  invalid.idempotency_key.clear();
  invalid.spec.command.clear();
  auto refused = store_->Submit(invalid, Render);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalid);
  ASSERT_OK_AND_ASSIGN(page, store_->ListJobs(Scope::All(), {}, std::nullopt, 50));
  EXPECT_EQ(page.jobs.size(), 3u);

  // Purging drops keys older than the TTL (bob's, created at 20 000).
  ASSERT_OK_AND_ASSIGN(int64_t purged, store_->PurgeIdempotencyKeys(20'000 + 60'001, 60'000));
  EXPECT_EQ(purged, 1);
  ASSERT_OK_AND_ASSIGN(purged, store_->PurgeIdempotencyKeys(20'000 + 60'001, 60'000));
  EXPECT_EQ(purged, 0);
}

TEST_P(StoreTest, ListJobsPagesFiltersAndScopes) {
  Principal ana = User("acme", "ml", "ana");
  Principal bob = User("acme", "ops", "bob");
  Principal eve = User("evil", "red", "eve");
  std::vector<int64_t> ids;
  for (int i = 0; i < 7; ++i) {
    JobSpec spec = Spec("job" + std::to_string(i));
    spec.labels = {{"project", i % 2 == 0 ? "llm" : "vision"}, {"tier", i < 3 ? "a" : "b"}};
    ids.push_back(Submit(i < 4 ? ana : bob, spec, 1000 + i).id);
  }
  const int64_t eves = Submit(eve, Spec("secret")).id;
  ASSERT_OK_AND_ASSIGN(auto cancelled, store_->CancelJob(Scope::All(), ids[1], "ana", 5000));
  EXPECT_EQ(cancelled, CancelOutcome::kCancelled);

  // Newest first, three at a time, following the cursor.
  const Scope acme = Scope::Tenant(ana.tenant_id);
  std::vector<int64_t> seen;
  std::optional<int64_t> before;
  for (int pages = 0; pages < 10; ++pages) {
    ASSERT_OK_AND_ASSIGN(JobPage page, store_->ListJobs(acme, {}, before, 3));
    EXPECT_LE(page.jobs.size(), 3u);
    for (const Job& j : page.jobs) seen.push_back(j.id);
    if (!page.next_before_id) break;
    before = page.next_before_id;
  }
  std::vector<int64_t> expected(ids.rbegin(), ids.rend());
  EXPECT_EQ(seen, expected);

  auto list = [&](const Scope& scope, const JobFilter& filter) {
    std::vector<int64_t> out;
    auto page = store_->ListJobs(scope, filter, std::nullopt, 100);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (page.ok()) {
      for (const Job& j : page->jobs) out.push_back(j.id);
      EXPECT_FALSE(page->next_before_id.has_value());
    }
    return out;
  };
  EXPECT_EQ(list(acme, States({JobState::kCancelled})), std::vector<int64_t>{ids[1]});
  EXPECT_EQ(list(acme, States({JobState::kPending, JobState::kCancelled})).size(), 7u);
  EXPECT_EQ(list(acme, ByUser("bob")), (std::vector<int64_t>{ids[6], ids[5], ids[4]}));
  EXPECT_EQ(list(acme, ByTeam("ml")), (std::vector<int64_t>{ids[3], ids[2], ids[1], ids[0]}));
  EXPECT_EQ(list(acme, ByLabels({{"project", "llm"}})),
            (std::vector<int64_t>{ids[6], ids[4], ids[2], ids[0]}));
  EXPECT_EQ(list(acme, ByLabels({{"project", "llm"}, {"tier", "a"}})),
            (std::vector<int64_t>{ids[2], ids[0]}));
  EXPECT_TRUE(list(acme, ByLabels({{"project", "nope"}})).empty());
  EXPECT_TRUE(list(acme, ByUser("eve")).empty());
  // Tenant scope: eve's job is invisible to acme, and acme's to eve.
  EXPECT_EQ(list(Scope::Tenant(eve.tenant_id), {}), std::vector<int64_t>{eves});
  EXPECT_EQ(list(Scope::All(), {}).size(), 8u);
  ASSERT_OK_AND_ASSIGN(auto hidden, store_->GetJob(acme, eves));
  EXPECT_FALSE(hidden.has_value());
  ASSERT_OK_AND_ASSIGN(auto hidden_events, store_->ListEvents(acme, eves, 0, 10));
  EXPECT_FALSE(hidden_events.has_value());
  ASSERT_OK_AND_ASSIGN(auto not_cancelled, store_->CancelJob(acme, eves, "ana", 6000));
  EXPECT_EQ(not_cancelled, CancelOutcome::kNotFound);
  ASSERT_OK_AND_ASSIGN(auto visible, store_->GetJob(Scope::Tenant(eve.tenant_id), eves));
  ASSERT_TRUE(visible.has_value());
  EXPECT_EQ(visible->state, JobState::kPending);
}

TEST_P(StoreTest, CountJobsGroupsByStateReasonTenantAndTeam) {
  ASSERT_OK_AND_ASSIGN(std::vector<JobCount> none, store_->CountJobs());
  EXPECT_TRUE(none.empty());
  Principal ana = User("acme", "ml", "ana");
  Principal bob = User("acme", "ops", "bob");
  Principal eve = User("evil", "red", "eve");
  Submit(ana, Spec("a1"));
  const int64_t a2 = Submit(ana, Spec("a2")).id;
  Submit(ana, Spec("a3"));
  Submit(bob, Spec("b1"));
  Submit(eve, Spec("e1"));
  ASSERT_OK_AND_ASSIGN(auto cancelled, store_->CancelJob(Scope::All(), a2, "ana", 5000));
  ASSERT_EQ(cancelled, CancelOutcome::kCancelled);

  ASSERT_OK_AND_ASSIGN(std::vector<JobCount> counts, store_->CountJobs());
  std::vector<std::tuple<std::string, std::string, std::string, std::string, int64_t>> got;
  for (const JobCount& c : counts) got.emplace_back(c.state, c.reason, c.tenant, c.team, c.jobs);
  const std::string cancelled_reason(reason::kCancelledByUser);
  const std::string submitted(reason::kSubmitted);
  EXPECT_EQ(got, (decltype(got){{"CANCELLED", cancelled_reason, "acme", "ml", 1},
                                {"PENDING", submitted, "acme", "ml", 2},
                                {"PENDING", submitted, "acme", "ops", 1},
                                {"PENDING", submitted, "evil", "red", 1}}));
}

TEST_P(StoreTest, MetricsNameEachOperationAndTimeIt) {
  Principal ana = User("acme", "ml", "ana");
  Submit(ana, Spec("a1"));
  ASSERT_OK(store_->CountJobs().status());
  ASSERT_OK(store_->CountJobs().status());
  const std::string text = store_->RenderMetrics();
  EXPECT_NE(text.find("# TYPE ferry_store_transaction_duration_seconds histogram"),
            std::string::npos);
  EXPECT_NE(text.find("ferry_store_transaction_duration_seconds_count{operation=\"CountJobs\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ferry_store_transaction_duration_seconds_count{operation=\"Submit\"}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE ferry_store_errors_total counter"), std::string::npos);
  // Operation names are method names: no return types, namespaces or arguments.
  EXPECT_EQ(text.find("operation=\"ferry"), std::string::npos) << text;
  EXPECT_EQ(text.find("::"), std::string::npos);
}

TEST_P(StoreTest, EventsSinceAcrossJobsScopedAndFiltered) {
  ASSERT_OK_AND_ASSIGN(int64_t empty_head, store_->LatestEventId());
  EXPECT_EQ(empty_head, 0);
  Principal ana = User("acme", "ml", "ana");
  Principal bob = User("acme", "ops", "bob");
  Principal eve = User("evil", "red", "eve");
  const int64_t a1 = Submit(ana, Spec("a1")).id;
  const int64_t b1 = Submit(bob, Spec("b1")).id;
  const int64_t e1 = Submit(eve, Spec("e1")).id;
  ASSERT_OK_AND_ASSIGN(auto cancelled, store_->CancelJob(Scope::All(), a1, "ana", 5000));
  ASSERT_EQ(cancelled, CancelOutcome::kCancelled);

  auto since = [&](const Scope& scope, int64_t after, const EventFilter& filter, int limit) {
    auto events = store_->ListEventsSince(scope, after, filter, limit);
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    return events.ok() ? *events : std::vector<WatchedEvent>{};
  };
  std::vector<WatchedEvent> all = since(Scope::All(), 0, {}, 100);
  ASSERT_GE(all.size(), 4u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1].event.id, all[i].event.id);
  ASSERT_OK_AND_ASSIGN(int64_t head, store_->LatestEventId());
  EXPECT_EQ(head, all.back().event.id);
  EXPECT_EQ(all.front().event.job_id, a1);
  EXPECT_EQ(all.front().tenant, "acme");
  EXPECT_EQ(all.front().team, "ml");
  EXPECT_EQ(all.front().user, "ana");
  EXPECT_EQ(all.front().job_name, "a1");
  EXPECT_EQ(all.front().tenant_id, ana.tenant_id);
  EXPECT_EQ(all.front().job_created_ms, 1000);  // Submit's default time

  // One tenant sees none of another's events.
  for (const WatchedEvent& w : since(Scope::Tenant(eve.tenant_id), 0, {}, 100)) {
    EXPECT_EQ(w.event.job_id, e1);
  }
  std::set<int64_t> acme_jobs;
  for (const WatchedEvent& w : since(Scope::Tenant(ana.tenant_id), 0, {}, 100)) {
    acme_jobs.insert(w.event.job_id);
  }
  EXPECT_EQ(acme_jobs, (std::set<int64_t>{a1, b1}));

  // Resuming after an id, the limit, and the filters.
  std::vector<WatchedEvent> first_two = since(Scope::All(), 0, {}, 2);
  ASSERT_EQ(first_two.size(), 2u);
  std::vector<WatchedEvent> rest = since(Scope::All(), first_two.back().event.id, {}, 100);
  EXPECT_EQ(rest.size() + 2, all.size());
  EXPECT_TRUE(since(Scope::All(), head, {}, 100).empty());
  std::vector<WatchedEvent> cancels = since(Scope::All(), 0, {{JobState::kCancelled}, ""}, 100);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].event.job_id, a1);
  EXPECT_EQ(cancels[0].event.type, "state");
  for (const WatchedEvent& w : since(Scope::All(), 0, {{}, "ops"}, 100)) {
    EXPECT_EQ(w.event.job_id, b1);
  }
  EXPECT_TRUE(since(Scope::Tenant(eve.tenant_id), 0, {{}, "ml"}, 100).empty());
}

TEST_P(StoreTest, CancelInEachState) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 4);
  const Scope all = Scope::All();

  // Pending: cancelled at once.
  Job pending = Submit(ana, Spec("pending", 1, 1));
  ASSERT_OK_AND_ASSIGN(auto outcome, store_->CancelJob(all, pending.id, "ana", 1500));
  EXPECT_EQ(outcome, CancelOutcome::kCancelled);
  Job got = Get(pending.id);
  EXPECT_EQ(got.state, JobState::kCancelled);
  EXPECT_EQ(got.reason, reason::kCancelledByUser);
  EXPECT_EQ(got.finished_at_ms, 1500);
  ASSERT_OK_AND_ASSIGN(outcome, store_->CancelJob(all, pending.id, "ana", 1600));
  EXPECT_EQ(outcome, CancelOutcome::kAlreadyFinished);
  ASSERT_OK_AND_ASSIGN(outcome, store_->CancelJob(all, 987654, "ana", 1600));
  EXPECT_EQ(outcome, CancelOutcome::kNotFound);

  // Admitted, never started: the agent does not run it, so its GPU frees at
  // the agent's next sync and nothing is started.
  Job admitted = Submit(ana, Spec("admitted", 1, 1));
  ASSERT_EQ(Place(admitted, {"gpu-a"}).admitted, std::vector<int64_t>{admitted.id});
  EXPECT_EQ(FreeGpus("gpu-a"), 3);
  ASSERT_OK_AND_ASSIGN(outcome, store_->CancelJob(all, admitted.id, "ana", 2500));
  EXPECT_EQ(outcome, CancelOutcome::kCancelled);
  EXPECT_EQ(Get(admitted.id).state, JobState::kCancelled);
  SyncResult sync = Sync("gpu-a", {}, {});
  EXPECT_TRUE(sync.start.empty());
  EXPECT_TRUE(sync.stop.empty());
  EXPECT_EQ(FreeGpus("gpu-a"), 4);

  // Running: cancelled, told to stop, GPU held until the exit is reported.
  Job running = Submit(ana, Spec("running", 1, 2));
  ASSERT_EQ(Place(running, {"gpu-a"}).admitted.size(), 1u);
  sync = Sync("gpu-a", {}, {});
  ASSERT_EQ(sync.start.size(), 1u);
  TaskRef ref = sync.start[0].ref;
  sync = Sync("gpu-a", {ref}, {Started(running, 0)});
  EXPECT_EQ(Get(running.id).state, JobState::kRunning);
  ASSERT_OK_AND_ASSIGN(outcome, store_->CancelJob(all, running.id, "ana", 3500));
  EXPECT_EQ(outcome, CancelOutcome::kCancelled);
  sync = Sync("gpu-a", {ref}, {}, 3600);
  EXPECT_EQ(sync.stop, std::vector<TaskRef>{ref});
  EXPECT_EQ(FreeGpus("gpu-a"), 2);
  // The exit (by SIGTERM) releases the GPUs and keeps the CANCELLED state.
  sync = Sync("gpu-a", {}, {Exited(running, 0, std::nullopt, 15)}, 3700);
  EXPECT_TRUE(sync.stop.empty());
  EXPECT_EQ(FreeGpus("gpu-a"), 4);
  got = Get(running.id);
  EXPECT_EQ(got.state, JobState::kCancelled);
  EXPECT_EQ(got.reason, reason::kCancelledByUser);
  EXPECT_EQ(Reasons(running.id),
            (std::vector<std::string>{"PENDING/SUBMITTED", "ADMITTED/PLACED",
                                      "RUNNING/TASKS_STARTED", "CANCELLED/CANCELLED_BY_USER"}));
}

TEST_P(StoreTest, ScheduleCommitConflictsAndPendingReasons) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 2);
  Register("gpu-b", 2);
  ASSERT_OK(store_->SetDrain("gpu-b", true));
  ASSERT_OK_AND_ASSIGN(bool found, store_->SetDrain("nope", true));
  EXPECT_FALSE(found);
  JobSpec low = Spec("low", 1, 2);
  JobSpec high = Spec("high", 1, 2);
  high.priority = 10;
  Job a = Submit(ana, low, 1000);
  Job b = Submit(ana, high, 1001);
  Job c = Submit(ana, low, 1002);

  ASSERT_OK_AND_ASSIGN(sched::Snapshot snap, store_->LoadSchedulingSnapshot());
  ASSERT_EQ(snap.pending.size(), 3u);
  EXPECT_EQ(snap.pending[0].job_id, b.id);  // highest priority, then oldest
  EXPECT_EQ(snap.pending[1].job_id, a.id);
  EXPECT_EQ(snap.pending[2].job_id, c.id);
  EXPECT_EQ(snap.pending[0].priority, 10);
  ASSERT_EQ(snap.nodes.size(), 2u);
  EXPECT_EQ(snap.nodes[0].name, "gpu-a");
  EXPECT_TRUE(snap.nodes[0].schedulable);
  EXPECT_EQ(snap.nodes[1].name, "gpu-b");
  EXPECT_FALSE(snap.nodes[1].schedulable);  // gpu-b is drained
  for (const sched::NodeInfo& n : snap.nodes) {
    EXPECT_EQ(n.cpus_used, 0) << n.name;  // no open allocation yet
    EXPECT_EQ(n.memory_mb_used, 0) << n.name;
  }
  EXPECT_TRUE(snap.running.empty());

  // b takes both GPUs of gpu-a; a wants the same GPUs: conflict.
  const sched::NodeInfo node = snap.nodes[0];
  Placement pb{b.id, 1, {{0, node.id, node.name, {node.gpus[0].id, node.gpus[1].id}, {0, 1}}}};
  Placement pa{a.id, 1, {{0, node.id, node.name, {node.gpus[0].id, node.gpus[1].id}, {0, 1}}}};
  ASSERT_OK_AND_ASSIGN(
      CommitResult commit,
      store_->CommitPlacements({pb, pa}, {{c.id, std::string(reason::kNoCapacity), "no free GPU"}},
                               2000));
  EXPECT_EQ(commit.admitted, std::vector<int64_t>{b.id});
  EXPECT_EQ(commit.conflicted, std::vector<int64_t>{a.id});
  Job gb = Get(b.id);
  EXPECT_EQ(gb.state, JobState::kAdmitted);
  EXPECT_EQ(gb.reason, reason::kPlaced);
  EXPECT_EQ(gb.admitted_at_ms, 2000);
  ASSERT_EQ(gb.placement.size(), 1u);
  EXPECT_EQ(gb.placement[0].node, "gpu-a");
  EXPECT_EQ(gb.placement[0].gpu_indices, (std::vector<int>{0, 1}));
  EXPECT_EQ(Get(a.id).state, JobState::kPending);
  Job gc = Get(c.id);
  EXPECT_EQ(gc.reason, reason::kNoCapacity);
  // A list page carries the same placements (loaded for the page at once).
  ASSERT_OK_AND_ASSIGN(JobPage listed, store_->ListJobs(Scope::All(), {}, std::nullopt, 10));
  ASSERT_EQ(listed.jobs.size(), 3u);
  for (const Job& job : listed.jobs) {
    if (job.id != b.id) {
      EXPECT_TRUE(job.placement.empty()) << job.id;
      continue;
    }
    ASSERT_EQ(job.placement.size(), 1u);
    EXPECT_EQ(job.placement[0].node, "gpu-a");
    EXPECT_EQ(job.placement[0].gpu_indices, (std::vector<int>{0, 1}));
    EXPECT_EQ(job.placement[0].gpu_ids, gb.placement[0].gpu_ids);
  }

  // The same reason again writes no second event.
  ASSERT_OK(store_->CommitPlacements(
      {}, {{c.id, std::string(reason::kNoCapacity), "still no free GPU"}}, 2100));
  auto events = store_->ListEvents(Scope::All(), c.id, 0, 100);
  ASSERT_TRUE(events.ok() && events->has_value());
  int reason_events = 0;
  for (const JobEvent& e : **events) reason_events += e.reason == reason::kNoCapacity ? 1 : 0;
  EXPECT_EQ(reason_events, 1);

  // The snapshot shows the holder and the usage.
  ASSERT_OK_AND_ASSIGN(snap, store_->LoadSchedulingSnapshot());
  EXPECT_EQ(snap.pending.size(), 2u);
  EXPECT_FALSE(snap.nodes[0].gpus[0].free);
  ASSERT_EQ(snap.running.size(), 1u);  // b holds it
  EXPECT_EQ(snap.running[0].job_id, b.id);
  ASSERT_EQ(snap.running[0].tasks.size(), 1u);
  EXPECT_EQ(snap.running[0].tasks[0].gpu_ids[0], snap.nodes[0].gpus[0].id);
  EXPECT_EQ(snap.nodes[0].cpus_used, 2);
  EXPECT_EQ(snap.nodes[0].memory_mb_used, 1024);
  ASSERT_OK_AND_ASSIGN(auto pools, store_->ListPools());
  ASSERT_EQ(pools.size(), 1u);
  EXPECT_EQ(pools[0].nodes, 2);
  EXPECT_EQ(pools[0].gpus, 4);
  EXPECT_EQ(pools[0].gpus_free, 0);  // gpu-a's are held, gpu-b is drained
  EXPECT_EQ(pools[0].gpus_by_model["H200"], 4);

  // Committing b again: no longer PENDING at attempt 1.
  ASSERT_OK_AND_ASSIGN(commit, store_->CommitPlacements({pb}, {}, 2200));
  EXPECT_EQ(commit.conflicted, std::vector<int64_t>{b.id});
  // A placement that names the wrong number of tasks is refused.
  Placement bad{a.id, 1, {}};
  EXPECT_EQ(store_->CommitPlacements({bad}, {}, 2300).status().code(), StatusCode::kInvalid);
  // So is one that gives a task the wrong number of GPUs.
  const sched::NodeInfo drained = snap.nodes[1];
  ASSERT_EQ(drained.name, "gpu-b");
  Placement short_of_gpus{a.id, 1, {{0, drained.id, drained.name, {drained.gpus[0].id}, {0}}}};
  EXPECT_EQ(store_->CommitPlacements({short_of_gpus}, {}, 2300).status().code(),
            StatusCode::kInvalid);
  // A drained node takes no new work, even from a stale snapshot.
  Placement on_drained{
      a.id, 1, {{0, drained.id, drained.name, {drained.gpus[0].id, drained.gpus[1].id}, {0, 1}}}};
  ASSERT_OK_AND_ASSIGN(commit, store_->CommitPlacements({on_drained}, {}, 2400));
  EXPECT_EQ(commit.conflicted, std::vector<int64_t>{a.id});
  ASSERT_OK(store_->SetDrain("gpu-b", false));
  ASSERT_OK_AND_ASSIGN(commit, store_->CommitPlacements({on_drained}, {}, 2500));
  EXPECT_EQ(commit.admitted, std::vector<int64_t>{a.id});
  // Nothing of the refused attempts was left behind.
  EXPECT_EQ(Get(a.id).placement.size(), 1u);
  EXPECT_EQ(FreeGpus("gpu-b"), 0);
}

TEST_P(StoreTest, DatabaseRefusesASecondOpenAllocationOfAGpu) {
  Principal ana = User("acme", "ml", "ana");
  Node node = Register("gpu-a", 1);
  Job job = Submit(ana, Spec("j", 1, 1));
  // Bypass the store's own checks: write to the database directly.
  std::unique_ptr<sql::Database> db;
  if (GetParam() == Backend::kSqlite) {
    ASSERT_OK_AND_ASSIGN(db, sql::OpenSqlite(url_.substr(7)));
  } else {
    ASSERT_OK_AND_ASSIGN(db, sql::OpenPostgres(url_));
  }
  ASSERT_OK_AND_ASSIGN(sql::Lease lease, db->Acquire(true));
  const std::string insert =
      "INSERT INTO allocations (job_id, attempt, task, gpu_id, node_id, cpus, memory_mb,"
      " started_at_ms) VALUES (?, 1, ?, ?, ?, 1, 0, 100) RETURNING id";
  const int64_t gpu = node.gpus[0].id;
  ASSERT_OK_AND_ASSIGN(sql::Rows first, lease->Query(insert, {job.id, int64_t{0}, gpu, node.id}));
  auto second = lease->Query(insert, {job.id, int64_t{1}, gpu, node.id});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(lease->last_error(), sql::ErrorKind::kUnique);
  // Once the first is released, the GPU may be allocated again.
  ASSERT_OK(
      lease->Query("UPDATE allocations SET released_at_ms = 200 WHERE id = ?", {first[0].Int(0)}));
  ASSERT_OK(lease->Query(insert, {job.id, int64_t{1}, gpu, node.id}));
  // Allocations without a GPU (CPU-only tasks) never collide.
  const std::string cpu_only =
      "INSERT INTO allocations (job_id, attempt, task, gpu_id, node_id, cpus, memory_mb,"
      " started_at_ms) VALUES (?, 1, 2, NULL, ?, 1, 0, 100)";
  ASSERT_OK(lease->Query(cpu_only, {job.id, node.id}));
  ASSERT_OK(lease->Query(cpu_only, {job.id, node.id}));
}

TEST_P(StoreTest, SyncStartsStopsAndFencesReports) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 2);
  Register("gpu-b", 2);
  Job gang = Submit(ana, Spec("gang", 2, 1));
  ASSERT_EQ(Place(gang, {"gpu-a", "gpu-b"}).admitted.size(), 1u);

  // Unknown node, another instance: register again.
  EXPECT_FALSE(Sync("nope", {}, {}).registered);
  EXPECT_FALSE(Sync("gpu-a", {}, {}, 3000, "other-instance").registered);

  SyncResult a = Sync("gpu-a", {}, {}, 3000);
  EXPECT_TRUE(a.registered);
  EXPECT_EQ(a.lease_expires_at_ms, 13'000);
  ASSERT_EQ(a.start.size(), 1u);
  const TaskAssignment& start = a.start[0];
  EXPECT_EQ(start.ref, (TaskRef{gang.id, 0, 1}));
  EXPECT_EQ(start.job_name, "gang");
  EXPECT_EQ(start.spec.command, std::vector<std::string>{"/bin/true"});
  EXPECT_EQ(start.gpu_indices, std::vector<int>{0});
  EXPECT_EQ(start.gpu_uuids, std::vector<std::string>{"gpu-a-gpu0"});
  EXPECT_EQ(start.gang_nodes, (std::vector<std::string>{"gpu-a", "gpu-b"}));
  // Asked again before it runs: started again (the answer may have been lost).
  EXPECT_EQ(Sync("gpu-a", {}, {}, 3100).start.size(), 1u);
  // Running it: nothing to start.
  TaskRef t0{gang.id, 0, 1}, t1{gang.id, 1, 1};
  a = Sync("gpu-a", {t0}, {Started(gang, 0)}, 3200);
  EXPECT_TRUE(a.start.empty());
  EXPECT_TRUE(a.stop.empty());
  EXPECT_EQ(Get(gang.id).state, JobState::kAdmitted);  // task 1 not started yet
  // A report about a task of another node is ignored; a task that is not
  // allocated here is told to stop.
  SyncResult b = Sync("gpu-b", {t0}, {Started(gang, 0)}, 3300);
  EXPECT_EQ(b.stop, std::vector<TaskRef>{t0});
  ASSERT_EQ(b.start.size(), 1u);
  EXPECT_EQ(b.start[0].ref, t1);
  b = Sync("gpu-b", {t1}, {Started(gang, 1)}, 3400);
  Job got = Get(gang.id);
  EXPECT_EQ(got.state, JobState::kRunning);
  EXPECT_EQ(got.reason, reason::kTasksStarted);
  EXPECT_EQ(got.started_at_ms, 3400);

  // A report for a stale attempt is ignored (fencing).
  Sync("gpu-a", {t0}, {Exited(gang, 0, 1, std::nullopt, /*attempt=*/7)}, 3500);
  EXPECT_EQ(Get(gang.id).state, JobState::kRunning);
  // Exit 0 of one task: still running; of both: SUCCEEDED, GPUs free.
  Sync("gpu-a", {}, {Exited(gang, 0, 0)}, 3600);
  EXPECT_EQ(Get(gang.id).state, JobState::kRunning);
  EXPECT_EQ(FreeGpus("gpu-a"), 2);
  Sync("gpu-b", {}, {Exited(gang, 1, 0)}, 3700);
  got = Get(gang.id);
  EXPECT_EQ(got.state, JobState::kSucceeded);
  EXPECT_EQ(got.reason, reason::kExitedZero);
  EXPECT_EQ(got.exit_code, 0);
  EXPECT_EQ(got.finished_at_ms, 3700);
  EXPECT_EQ(FreeGpus("gpu-b"), 2);
  ASSERT_EQ(got.attempts.size(), 1u);
  EXPECT_EQ(got.attempts[0].state, JobState::kSucceeded);
  EXPECT_EQ(got.attempts[0].placement.size(), 2u);
  // A duplicate exit report changes nothing.
  Sync("gpu-b", {}, {Exited(gang, 1, 3)}, 3800);
  EXPECT_EQ(Get(gang.id).state, JobState::kSucceeded);

  // Nonzero exit: FAILED, and the other task is stopped.
  Job fails = Submit(ana, Spec("fails", 2, 1));
  ASSERT_EQ(Place(fails, {"gpu-a", "gpu-b"}).admitted.size(), 1u);
  TaskRef f0{fails.id, 0, 1}, f1{fails.id, 1, 1};
  Sync("gpu-a", {f0}, {Started(fails, 0)}, 4000);
  Sync("gpu-b", {f1}, {Started(fails, 1)}, 4000);
  Sync("gpu-a", {}, {Exited(fails, 0, 3)}, 4100);
  got = Get(fails.id);
  EXPECT_EQ(got.state, JobState::kFailed);
  EXPECT_EQ(got.reason, reason::kExitedNonZero);
  EXPECT_EQ(got.exit_code, 3);
  b = Sync("gpu-b", {f1}, {}, 4200);
  EXPECT_EQ(b.stop, std::vector<TaskRef>{f1});
  EXPECT_EQ(FreeGpus("gpu-b"), 1);
  // Killed by the stop: the job stays FAILED with its first reason.
  Sync("gpu-b", {}, {Exited(fails, 1, std::nullopt, 9)}, 4300);
  EXPECT_EQ(Get(fails.id).reason, reason::kExitedNonZero);
  EXPECT_EQ(FreeGpus("gpu-b"), 2);

  // Killed by a signal on its own; and a launch failure.
  Job killed = Submit(ana, Spec("killed", 1, 1));
  ASSERT_EQ(Place(killed, {"gpu-a"}).admitted.size(), 1u);
  Sync("gpu-a", {{killed.id, 0, 1}}, {Started(killed, 0)}, 5000);
  Sync("gpu-a", {}, {Exited(killed, 0, std::nullopt, 11)}, 5100);
  got = Get(killed.id);
  EXPECT_EQ(got.state, JobState::kFailed);
  EXPECT_EQ(got.reason, reason::kKilledBySignal);
  EXPECT_FALSE(got.exit_code.has_value());
  Job broken = Submit(ana, Spec("broken", 1, 1));
  ASSERT_EQ(Place(broken, {"gpu-a"}).admitted.size(), 1u);
  TaskReport launch;
  launch.ref = {broken.id, 0, 1};
  launch.kind = TaskReport::Kind::kLaunchFailed;
  launch.message = "exec: no such file";
  Sync("gpu-a", {}, {launch}, 5200);
  got = Get(broken.id);
  EXPECT_EQ(got.state, JobState::kFailed);
  EXPECT_EQ(got.reason, reason::kLaunchFailed);
  EXPECT_EQ(FreeGpus("gpu-a"), 2);
  // A task of a job that does not exist is stopped too.
  EXPECT_EQ(Sync("gpu-a", {{424242, 0, 1}}, {}, 5300).stop, (std::vector<TaskRef>{{424242, 0, 1}}));
}

TEST_P(StoreTest, ExternalUseHoldsGpusFerryDoesNotOwn) {
  Principal ana = User("acme", "ml", "ana");
  Register("hpc-n1", 4);
  Job mine = Submit(ana, Spec("mine", 1, 1));
  ASSERT_EQ(Place(mine, {"hpc-n1"}).admitted.size(), 1u);  // GPU 0
  ExternalUse use;
  use.gpus = 2;
  use.cpus = 6;
  use.memory_mb = 4096;
  ASSERT_OK_AND_ASSIGN(bool found, store_->SetExternalUse("hpc-n1", use));
  EXPECT_TRUE(found);
  ASSERT_OK_AND_ASSIGN(auto node, store_->GetNode("hpc-n1"));
  ASSERT_TRUE(node.has_value());
  std::vector<int> external;
  for (const Gpu& g : node->gpus) {
    if (g.external) external.push_back(g.index);
  }
  EXPECT_EQ(external, (std::vector<int>{2, 3}));  // the highest indices
  EXPECT_DOUBLE_EQ(node->external_cpus, 6);
  EXPECT_EQ(node->external_memory_mb, 4096);
  ASSERT_OK_AND_ASSIGN(auto pools, store_->ListPools());
  ASSERT_EQ(pools.size(), 1u);
  EXPECT_EQ(pools[0].gpus_free, 1);  // 4 - Ferry's 1 - Slurm's 2
  ASSERT_OK_AND_ASSIGN(sched::Snapshot snap, store_->LoadSchedulingSnapshot());
  ASSERT_EQ(snap.nodes.size(), 1u);
  int free = 0;
  for (const sched::GpuSlot& g : snap.nodes[0].gpus) free += g.free ? 1 : 0;
  EXPECT_EQ(free, 1);
  EXPECT_DOUBLE_EQ(snap.nodes[0].cpus_used, 6 + 2);  // Slurm's 6, the job's 2
  EXPECT_EQ(snap.nodes[0].memory_mb_used, 4096 + 1024);
  // A placement on a GPU marked external since the snapshot is a conflict.
  Job late = Submit(ana, Spec("late", 1, 1));
  Placement onto{late.id, late.attempt, {{0, snap.nodes[0].id, "hpc-n1", {}, {}}}};
  for (const sched::GpuSlot& g : snap.nodes[0].gpus) {
    if (g.index == 3) {
      onto.tasks[0].gpu_ids = {g.id};
      onto.tasks[0].gpu_indices = {g.index};
    }
  }
  ASSERT_OK_AND_ASSIGN(CommitResult commit, store_->CommitPlacements({onto}, {}, 2500));
  EXPECT_EQ(commit.conflicted, std::vector<int64_t>{late.id});
  // More outside use than GPUs Ferry does not hold marks only those; less
  // keeps the marked ones stable.
  use.gpus = 9;
  ASSERT_OK(store_->SetExternalUse("hpc-n1", use).status());
  ASSERT_OK_AND_ASSIGN(node, store_->GetNode("hpc-n1"));
  int marked = 0;
  for (const Gpu& g : node->gpus) marked += g.external ? 1 : 0;
  EXPECT_EQ(marked, 3);
  EXPECT_FALSE(node->gpus[0].external);  // Ferry's own
  use.gpus = 1;
  use.unavailable = "slurm: DRAIN (maintenance)";
  ASSERT_OK(store_->SetExternalUse("hpc-n1", use).status());
  ASSERT_OK_AND_ASSIGN(node, store_->GetNode("hpc-n1"));
  marked = 0;
  for (const Gpu& g : node->gpus) marked += g.external ? 1 : 0;
  EXPECT_EQ(marked, 1);
  EXPECT_EQ(node->unavailable, "slurm: DRAIN (maintenance)");
  ASSERT_OK_AND_ASSIGN(snap, store_->LoadSchedulingSnapshot());
  EXPECT_FALSE(snap.nodes[0].schedulable);
  ASSERT_OK_AND_ASSIGN(pools, store_->ListPools());
  EXPECT_EQ(pools[0].gpus_free, 0);  // unavailable
  ASSERT_OK_AND_ASSIGN(found, store_->SetExternalUse("no-such-node", use));
  EXPECT_FALSE(found);
}

TEST_P(StoreTest, AttemptWideReportsLoseRequeuePreemptAndTimeOut) {
  Principal ana = User("acme", "ml", "ana");
  Register("hpc-n1", 4);
  auto end = [&](const Job& job, TaskReport::Kind kind, const std::string& message, int64_t at) {
    TaskReport r;
    r.ref = {job.id, 1, job.attempt};
    r.kind = kind;
    r.message = message;
    r.at_ms = at;
    return Sync("hpc-n1", {}, {r}, at);
  };
  // A gang of two on one node, lost by Slurm (NODE_FAIL): every task ends,
  // the GPUs come back, the job is requeued as attempt 2.
  Job gang = Submit(ana, Spec("gang", 2, 1));
  ASSERT_EQ(Place(gang, {"hpc-n1"}).admitted.size(), 1u);
  Sync("hpc-n1", {{gang.id, 0, 1}, {gang.id, 1, 1}}, {Started(gang, 0), Started(gang, 1)}, 2500);
  EXPECT_EQ(Get(gang.id).state, JobState::kRunning);
  end(gang, TaskReport::Kind::kLost, "Slurm job 7: NODE_FAIL", 3000);
  Job got = Get(gang.id);
  EXPECT_EQ(got.state, JobState::kPending);
  EXPECT_EQ(got.reason, reason::kRequeued);
  EXPECT_EQ(got.attempt, 2);
  ASSERT_EQ(got.attempts.size(), 2u);
  EXPECT_EQ(got.attempts[0].state, JobState::kLost);
  EXPECT_EQ(got.attempts[0].reason, reason::kNodeLost);
  EXPECT_EQ(FreeGpus("hpc-n1"), 4);
  // Preempted by Slurm: requeued with its own reason.
  ASSERT_EQ(Place(got, {"hpc-n1"}).admitted.size(), 1u);
  end(got, TaskReport::Kind::kPreempted, "Slurm job 8: PREEMPTED", 4000);
  got = Get(gang.id);
  EXPECT_EQ(got.state, JobState::kPending);
  EXPECT_EQ(got.reason, reason::kPreemptedByResourceManager);
  EXPECT_EQ(got.attempt, 3);
  EXPECT_EQ(got.attempts[1].state, JobState::kPreempted);
  // Timed out: terminal.
  ASSERT_EQ(Place(got, {"hpc-n1"}).admitted.size(), 1u);
  end(got, TaskReport::Kind::kTimedOut, "Slurm job 9: TIMEOUT", 5000);
  got = Get(gang.id);
  EXPECT_EQ(got.state, JobState::kTimeout);
  EXPECT_EQ(got.reason, reason::kMaxRuntimeExceeded);
  EXPECT_EQ(FreeGpus("hpc-n1"), 4);
  EXPECT_EQ(Reasons(gang.id),
            (std::vector<std::string>{"PENDING/SUBMITTED", "ADMITTED/PLACED",
                                      "RUNNING/TASKS_STARTED", "LOST/NODE_LOST", "PENDING/REQUEUED",
                                      "ADMITTED/PLACED", "PREEMPTED/PREEMPTED_BY_RESOURCE_MANAGER",
                                      "PENDING/PREEMPTED_BY_RESOURCE_MANAGER", "ADMITTED/PLACED",
                                      "TIMEOUT/MAX_RUNTIME_EXCEEDED"}));
  // A stale attempt's report is fenced: nothing changes.
  end(gang, TaskReport::Kind::kLost, "late", 6000);
  EXPECT_EQ(Get(gang.id).state, JobState::kTimeout);
}

TEST_P(StoreTest, NotesOnLiveAttemptsSetReasonsOnce) {
  Principal ana = User("acme", "ml", "ana");
  Register("hpc-n1", 4);
  Job job = Submit(ana, Spec("noted", 1, 1));
  // Not live yet (PENDING): refused.
  ASSERT_OK_AND_ASSIGN(
      bool live, store_->NoteAttempt(job.id, 1, "slurm_submitted", "", "x", "slurm:hpc", 2100));
  EXPECT_FALSE(live);
  ASSERT_EQ(Place(job, {"hpc-n1"}).admitted.size(), 1u);
  ASSERT_OK_AND_ASSIGN(live, store_->NoteAttempt(job.id, 1, "slurm_submitted", "", "Slurm job 42",
                                                 "slurm:hpc", 2200));
  EXPECT_TRUE(live);
  for (int i = 0; i < 3; ++i) {  // the same pending reason three times: one event
    ASSERT_OK_AND_ASSIGN(
        live, store_->NoteAttempt(job.id, 1, "slurm_pending", std::string(reason::kNoCapacity),
                                  "Slurm job 42 pending: Resources", "slurm:hpc", 2300 + i));
    EXPECT_TRUE(live);
  }
  Job got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kAdmitted);
  EXPECT_EQ(got.reason, reason::kNoCapacity);
  ASSERT_OK_AND_ASSIGN(auto events, store_->ListEvents(Scope::All(), job.id, 0, 100));
  std::vector<std::string> notes;
  for (const JobEvent& e : *events) {
    if (e.type.rfind("slurm_", 0) == 0) notes.push_back(e.type + ": " + e.message);
  }
  EXPECT_EQ(notes, (std::vector<std::string>{"slurm_submitted: Slurm job 42",
                                             "slurm_pending: Slurm job 42 pending: Resources"}));
  ASSERT_OK_AND_ASSIGN(
      live, store_->NoteAttempt(job.id, 2, "slurm_pending", "", "stale", "slurm:hpc", 2400));
  EXPECT_FALSE(live);
}

TEST_P(StoreTest, NotesAheadOfAStartWhilePendingOrLiveOnly) {
  Principal ana = User("acme", "ml", "ana");
  Register("n1", 4);
  Job job = Submit(ana, Spec("prefetched", 1, 1));
  // PENDING: an agent prefetching for it may say so.
  ASSERT_OK_AND_ASSIGN(bool written,
                       store_->NoteAhead(job.id, 1, "prefetched", "2 inputs", "agent:n1", 2100));
  EXPECT_TRUE(written);
  // Not its attempt: nothing written.
  ASSERT_OK_AND_ASSIGN(written,
                       store_->NoteAhead(job.id, 2, "prefetched", "stale", "agent:n1", 2150));
  EXPECT_FALSE(written);
  ASSERT_EQ(Place(job, {"n1"}).admitted.size(), 1u);
  // ADMITTED: a report that arrives just after the admission still counts.
  ASSERT_OK_AND_ASSIGN(written,
                       store_->NoteAhead(job.id, 1, "prefetched", "late", "agent:n1", 2200));
  EXPECT_TRUE(written);
  // Unknown job: nothing written.
  ASSERT_OK_AND_ASSIGN(written,
                       store_->NoteAhead(job.id + 100, 1, "prefetched", "x", "agent:n1", 2250));
  EXPECT_FALSE(written);
  ASSERT_OK_AND_ASSIGN(auto events, store_->ListEvents(Scope::All(), job.id, 0, 100));
  std::vector<std::string> notes;
  for (const JobEvent& e : *events) {
    if (e.type == "prefetched") notes.push_back(e.actor + ": " + e.message);
  }
  EXPECT_EQ(notes, (std::vector<std::string>{"agent:n1: 2 inputs", "agent:n1: late"}));
  Job got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kAdmitted);
}

TEST_P(StoreTest, LeaseExpiryRequeuesThenHitsTheRetryLimit) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 1, "i1", 1000);  // lease until 11 000
  JobSpec spec = Spec("flaky", 1, 1);
  spec.max_retries = 1;
  Job job = Submit(ana, spec);
  ASSERT_EQ(Place(job, {"gpu-a"}).admitted.size(), 1u);
  Sync("gpu-a", {{job.id, 0, 1}}, {Started(job, 0)}, 3000);  // lease until 13 000

  ASSERT_OK_AND_ASSIGN(ExpiryResult none, store_->ExpireLeases(12'999));
  EXPECT_TRUE(none.lost_nodes.empty());
  ASSERT_OK_AND_ASSIGN(ExpiryResult first, store_->ExpireLeases(13'001));
  EXPECT_EQ(first.lost_nodes, std::vector<std::string>{"gpu-a"});
  EXPECT_EQ(first.requeued_jobs, std::vector<int64_t>{job.id});
  EXPECT_TRUE(first.failed_jobs.empty());
  Job got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kPending);
  EXPECT_EQ(got.reason, reason::kRequeued);
  EXPECT_EQ(got.attempt, 2);
  EXPECT_TRUE(got.placement.empty());
  ASSERT_EQ(got.attempts.size(), 2u);
  EXPECT_EQ(got.attempts[0].state, JobState::kLost);
  EXPECT_EQ(got.attempts[0].reason, reason::kNodeLost);
  ASSERT_OK_AND_ASSIGN(auto node, store_->GetNode("gpu-a"));
  EXPECT_EQ(node->state, NodeState::kLost);
  EXPECT_FALSE(node->gpus[0].job_id.has_value());
  // The lost node's agent is told to register again.
  EXPECT_FALSE(Sync("gpu-a", {{job.id, 0, 1}}, {}, 13'100).registered);

  // It comes back (same process): READY, and its old task must stop.
  Register("gpu-a", 1, "i1", 14'000);
  SyncResult back = Sync("gpu-a", {{job.id, 0, 1}}, {Exited(job, 0, 0, std::nullopt, 1)}, 14'100);
  EXPECT_TRUE(back.registered);
  EXPECT_EQ(Get(job.id).state, JobState::kPending);  // the old attempt's exit is fenced
  got = Get(job.id);
  ASSERT_EQ(Place(got, {"gpu-a"}).admitted.size(), 1u);
  back = Sync("gpu-a", {{job.id, 0, 1}}, {}, 14'200);
  EXPECT_EQ(back.stop, (std::vector<TaskRef>{{job.id, 0, 1}}));
  ASSERT_EQ(back.start.size(), 1u);
  EXPECT_EQ(back.start[0].ref, (TaskRef{job.id, 0, 2}));

  // Lost again, past max_retries: FAILED with RETRY_LIMIT.
  ASSERT_OK_AND_ASSIGN(ExpiryResult second, store_->ExpireLeases(30'000));
  EXPECT_EQ(second.failed_jobs, std::vector<int64_t>{job.id});
  got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kFailed);
  EXPECT_EQ(got.reason, reason::kRetryLimit);
  EXPECT_EQ(Reasons(job.id),
            (std::vector<std::string>{"PENDING/SUBMITTED", "ADMITTED/PLACED",
                                      "RUNNING/TASKS_STARTED", "LOST/NODE_LOST", "PENDING/REQUEUED",
                                      "ADMITTED/PLACED", "LOST/NODE_LOST", "FAILED/RETRY_LIMIT"}));
}

TEST_P(StoreTest, NewAgentInstanceLosesTheOldTasks) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 2, "i1");
  Job job = Submit(ana, Spec("job", 1, 2));
  ASSERT_EQ(Place(job, {"gpu-a"}).admitted.size(), 1u);
  Sync("gpu-a", {{job.id, 0, 1}}, {Started(job, 0)}, 3000);
  EXPECT_EQ(FreeGpus("gpu-a"), 0);
  // Same instance again: nothing is lost.
  Register("gpu-a", 2, "i1", 3500);
  EXPECT_EQ(Get(job.id).state, JobState::kRunning);
  // The agent restarted: a new instance registers; the old task is gone.
  Node node = Register("gpu-a", 3, "i2", 4000);
  EXPECT_EQ(node.instance, "i2");
  EXPECT_EQ(node.gpus.size(), 3u);  // a GPU it did not have is added
  Job got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kPending);
  EXPECT_EQ(got.attempt, 2);
  EXPECT_EQ(FreeGpus("gpu-a"), 3);
  // The old instance is refused.
  EXPECT_FALSE(Sync("gpu-a", {}, {}, 4100, "i1").registered);
  EXPECT_TRUE(Sync("gpu-a", {}, {}, 4100, "i2").registered);
}

TEST_P(StoreTest, RuntimeExpiry) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 1);
  JobSpec spec = Spec("slow", 1, 1);
  spec.max_runtime_seconds = 10;
  Job job = Submit(ana, spec);
  Job unlimited = Submit(ana, Spec("forever", 1, 0));
  ASSERT_EQ(Place(job, {"gpu-a"}).admitted.size(), 1u);
  ASSERT_EQ(Place(unlimited, {"gpu-a"}).admitted.size(), 1u);
  Sync("gpu-a", {{job.id, 0, 1}, {unlimited.id, 0, 1}}, {Started(job, 0), Started(unlimited, 0)},
       5000);
  ASSERT_OK_AND_ASSIGN(auto none, store_->ExpireRuntimes(14'999));
  EXPECT_TRUE(none.empty());
  ASSERT_OK_AND_ASSIGN(auto expired, store_->ExpireRuntimes(15'000));
  EXPECT_EQ(expired, std::vector<int64_t>{job.id});
  Job got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kTimeout);
  EXPECT_EQ(got.reason, reason::kMaxRuntimeExceeded);
  // The GPU stays held until the agent reports the exit.
  EXPECT_EQ(FreeGpus("gpu-a"), 0);
  SyncResult sync = Sync("gpu-a", {{job.id, 0, 1}, {unlimited.id, 0, 1}}, {}, 15'100);
  EXPECT_EQ(sync.stop, (std::vector<TaskRef>{{job.id, 0, 1}}));
  Sync("gpu-a", {{unlimited.id, 0, 1}}, {Exited(job, 0, std::nullopt, 15)}, 15'200);
  got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kTimeout);  // not KILLED_BY_SIGNAL
  EXPECT_EQ(got.reason, reason::kMaxRuntimeExceeded);
  EXPECT_EQ(FreeGpus("gpu-a"), 1);
  ASSERT_OK_AND_ASSIGN(auto again, store_->ExpireRuntimes(99'999));
  EXPECT_TRUE(again.empty());
}

TEST_P(StoreTest, Logs) {
  Principal ana = User("acme", "ml", "ana");
  Principal eve = User("evil", "red", "eve");
  Job job = Submit(ana, Spec("logs"));
  const std::string binary("bin\0ary \xff\xfe\n", 12);
  ASSERT_OK(store_->AppendLog(job.id, 1, 0, "stdout", "epoch 1\n", 100));
  ASSERT_OK(store_->AppendLog(job.id, 1, 0, "stderr", binary, 101));
  ASSERT_OK(store_->AppendLog(job.id, 1, 1, "stdout", "epoch 2\n", 102));
  EXPECT_EQ(store_->AppendLog(job.id, 1, 0, "stdin", "x", 103).code(), StatusCode::kInvalid);
  EXPECT_FALSE(store_->AppendLog(987654, 1, 0, "stdout", "x", 103).ok());

  ASSERT_OK_AND_ASSIGN(auto all, store_->ReadLogs(Scope::All(), job.id, 0, 100));
  ASSERT_TRUE(all.has_value());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].seq, 1);
  EXPECT_EQ((*all)[0].data, "epoch 1\n");
  EXPECT_EQ((*all)[1].stream, "stderr");
  EXPECT_EQ((*all)[1].data, binary);
  EXPECT_EQ((*all)[2].task, 1);
  EXPECT_EQ((*all)[2].at_ms, 102);
  ASSERT_OK_AND_ASSIGN(auto tail, store_->ReadLogs(Scope::All(), job.id, 1, 1));
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_EQ((*tail)[0].seq, 2);
  ASSERT_OK_AND_ASSIGN(auto hidden, store_->ReadLogs(Scope::Tenant(eve.tenant_id), job.id, 0, 10));
  EXPECT_FALSE(hidden.has_value());
}

TEST_P(StoreTest, ConcurrentSubmitsAreAllKeptWithUniqueIds) {
  Principal ana = User("acme", "ml", "ana");
  constexpr int kThreads = 6;
  constexpr int kPerThread = 15;
  std::vector<std::vector<int64_t>> ids(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        SubmitRequest req;
        req.principal = ana;
        req.spec = Spec("c" + std::to_string(t) + "-" + std::to_string(i));
        req.now_ms = 1000 + i;
        auto r = store_->Submit(req, Render);
        if (!r.ok()) {
          errors[t] = r.status().ToString();
          return;
        }
        ids[t].push_back(r->job.id);
        // Reads run alongside the writes.
        auto page = store_->ListJobs(Scope::All(), {}, std::nullopt, 5);
        if (!page.ok()) errors[t] = page.status().ToString();
      }
    });
  }
  // Meanwhile, several threads race on one idempotency key: one job only.
  std::vector<int64_t> keyed(4);
  std::vector<std::thread> racers;
  for (int t = 0; t < 4; ++t) {
    racers.emplace_back([&, t] {
      SubmitRequest req;
      req.principal = ana;
      req.spec = Spec("keyed");
      req.idempotency_key = "same";
      req.request_hash = Sha256Hex("same body");
      req.now_ms = 5000;
      auto r = store_->Submit(req, Render);
      keyed[t] = r.ok() ? r->job.id : -1;
    });
  }
  for (auto& th : threads) th.join();
  for (auto& th : racers) th.join();
  std::set<int64_t> unique;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "");
    EXPECT_EQ(ids[t].size(), static_cast<size_t>(kPerThread));
    unique.insert(ids[t].begin(), ids[t].end());
  }
  EXPECT_EQ(unique.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_GT(keyed[0], 0);
  for (int64_t id : keyed) EXPECT_EQ(id, keyed[0]);
  ASSERT_OK_AND_ASSIGN(JobPage page, store_->ListJobs(Scope::All(), {}, std::nullopt, 1000));
  EXPECT_EQ(page.jobs.size(), static_cast<size_t>(kThreads * kPerThread + 1));
}

TEST_P(StoreTest, PreemptionStopsWithGraceThenRequeuesOrFails) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 2, "i1", 1000);
  JobSpec spec = Spec("victim", 1, 1);
  spec.preemptible = true;
  spec.max_retries = 1;
  Job victim = Submit(ana, spec);
  Job other = Submit(ana, Spec("other", 1, 1));
  ASSERT_EQ(Place(victim, {"gpu-a"}).admitted.size(), 1u);
  ASSERT_EQ(Place(other, {"gpu-a"}).admitted.size(), 1u);
  Sync("gpu-a", {{victim.id, 0, 1}, {other.id, 0, 1}}, {Started(victim, 0), Started(other, 0)},
       3000);

  // Fenced by attempt; a running attempt is preempted once.
  ASSERT_OK_AND_ASSIGN(bool done,
                       store_->PreemptJob({victim.id, 2, "PREEMPTED_BY_PRIORITY", 99, 5000}, 3100));
  EXPECT_FALSE(done);
  PreemptRequest request{victim.id, 1, std::string(reason::kPreemptedByPriority), 99, 5000};
  ASSERT_OK_AND_ASSIGN(done, store_->PreemptJob(request, 3100));
  EXPECT_TRUE(done);
  ASSERT_OK_AND_ASSIGN(done, store_->PreemptJob(request, 3150));
  EXPECT_FALSE(done);
  EXPECT_EQ(store_->PreemptJob({victim.id, 1, "", 99, 5000}, 3150).status().code(),
            StatusCode::kInvalid);
  auto events = store_->ListEvents(Scope::All(), victim.id, 0, 100);
  ASSERT_TRUE(events.ok() && events->has_value());
  int requested = 0;
  for (const JobEvent& e : **events) {
    if (e.type != "preempt_requested") continue;
    ++requested;
    EXPECT_EQ(e.reason, reason::kPreemptedByPriority);
    EXPECT_NE(e.message.find("for job 99"), std::string::npos) << e.message;
  }
  EXPECT_EQ(requested, 1);

  // The scheduler sees it terminating, holding its GPU until the task ends.
  ASSERT_OK_AND_ASSIGN(sched::Snapshot snap, store_->LoadSchedulingSnapshot());
  ASSERT_EQ(snap.running.size(), 2u);
  const sched::RunningJob& a = snap.running[0];
  EXPECT_EQ(a.job_id, victim.id);
  EXPECT_EQ(a.attempt, 1);
  EXPECT_TRUE(a.terminating);
  EXPECT_EQ(a.preempt_reason, reason::kPreemptedByPriority);
  EXPECT_EQ(a.preempted_for, 99);
  EXPECT_EQ(a.started_s, 2.0);  // admitted at 2000 ms
  ASSERT_EQ(a.tasks.size(), 1u);
  EXPECT_EQ(a.tasks[0].node, "gpu-a");
  EXPECT_EQ(a.tasks[0].gpu_indices.size(), 1u);
  EXPECT_FALSE(snap.running[1].terminating);
  EXPECT_EQ(snap.running[1].job_id, other.id);

  // The agent is told to stop the victim (only it) with the preemption's grace.
  SyncResult sync = Sync("gpu-a", {{victim.id, 0, 1}, {other.id, 0, 1}}, {}, 3200);
  EXPECT_EQ(sync.stop, (std::vector<TaskRef>{{victim.id, 0, 1}}));
  EXPECT_EQ(sync.stop_grace_ms, std::optional<int64_t>(5000));
  EXPECT_TRUE(sync.start.empty());
  EXPECT_EQ(Get(victim.id).state, JobState::kRunning);
  EXPECT_EQ(FreeGpus("gpu-a"), 0);
  // Without a preempted task the default grace applies.
  EXPECT_FALSE(Sync("gpu-a", {{other.id, 0, 1}}, {}, 3250).stop_grace_ms.has_value());

  // It checkpoints and exits non-zero: not FAILED, but requeued with the reason.
  Sync("gpu-a", {{other.id, 0, 1}}, {Exited(victim, 0, 143)}, 3300);
  Job got = Get(victim.id);
  EXPECT_EQ(got.state, JobState::kPending);
  EXPECT_EQ(got.reason, reason::kPreemptedByPriority);
  EXPECT_EQ(got.attempt, 2);
  ASSERT_EQ(got.attempts.size(), 2u);
  EXPECT_EQ(got.attempts[0].state, JobState::kPreempted);
  EXPECT_EQ(got.attempts[0].reason, reason::kPreemptedByPriority);
  EXPECT_EQ(got.attempts[0].placement.size(), 1u);
  EXPECT_EQ(got.attempts[1].reason, reason::kPreemptedByPriority);
  EXPECT_EQ(FreeGpus("gpu-a"), 1);

  // Attempt 2 is preempted by fair share and its node is lost: requeue
  // impossible (max_retries 1), so it fails.
  ASSERT_EQ(Place(got, {"gpu-a"}, 4000).admitted.size(), 1u);
  Sync("gpu-a", {{other.id, 0, 1}, {victim.id, 0, 2}}, {Started(victim, 0, 2)}, 4100);
  ASSERT_OK_AND_ASSIGN(
      done,
      store_->PreemptJob({victim.id, 2, std::string(reason::kPreemptedForFairShare), 7, 0}, 4200));
  EXPECT_TRUE(done);
  ASSERT_OK_AND_ASSIGN(ExpiryResult lost, store_->ExpireLeases(60'000));
  EXPECT_EQ(lost.failed_jobs, std::vector<int64_t>{victim.id});
  got = Get(victim.id);
  EXPECT_EQ(got.state, JobState::kFailed);
  EXPECT_EQ(got.reason, reason::kRetryLimit);
  EXPECT_EQ(got.attempts[1].state, JobState::kPreempted);
  EXPECT_EQ(got.attempts[1].reason, reason::kPreemptedForFairShare);
  EXPECT_EQ(
      Reasons(victim.id),
      (std::vector<std::string>{"PENDING/SUBMITTED", "ADMITTED/PLACED", "RUNNING/TASKS_STARTED",
                                "PREEMPTED/PREEMPTED_BY_PRIORITY", "PENDING/PREEMPTED_BY_PRIORITY",
                                "ADMITTED/PLACED", "RUNNING/TASKS_STARTED",
                                "PREEMPTED/PREEMPTED_FOR_FAIR_SHARE", "FAILED/RETRY_LIMIT"}));
  // The other job on the lost node was lost the ordinary way.
  EXPECT_EQ(Get(other.id).attempts[0].reason, reason::kNodeLost);
}

TEST_P(StoreTest, PreemptingAnAttemptNoAgentStartedEndsAtTheNextSync) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 1);
  JobSpec spec = Spec("queued", 1, 1);
  spec.preemptible = true;
  Job job = Submit(ana, spec);
  ASSERT_EQ(Place(job, {"gpu-a"}).admitted.size(), 1u);
  ASSERT_OK_AND_ASSIGN(bool done,
                       store_->PreemptJob({job.id, 1, "PREEMPTED_BY_PRIORITY", 0, 1000}, 2100));
  EXPECT_TRUE(done);
  EXPECT_EQ(Get(job.id).state, JobState::kAdmitted);
  // The agent does not run it: it is not started, and the attempt ends.
  SyncResult sync = Sync("gpu-a", {}, {}, 2200);
  EXPECT_TRUE(sync.start.empty());
  EXPECT_TRUE(sync.stop.empty());
  Job got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kPending);
  EXPECT_EQ(got.attempt, 2);
  EXPECT_EQ(FreeGpus("gpu-a"), 1);
  // A job that is not live cannot be preempted.
  ASSERT_OK_AND_ASSIGN(done, store_->PreemptJob({job.id, 2, "PREEMPTED_BY_PRIORITY", 0, 0}, 2300));
  EXPECT_FALSE(done);
}

TEST_P(StoreTest, SpotInterruptionRequeuesWithItsOwnReason) {
  Principal ana = User("acme", "ml", "ana");
  Register("spot-a", 1);
  Register("gpu-b", 1);
  Job job = Submit(ana, Spec("on-spot", 1, 1));
  ASSERT_EQ(Place(job, {"spot-a"}).admitted.size(), 1u);
  Sync("spot-a", {{job.id, 0, 1}}, {Started(job, 0)}, 3000);
  ASSERT_OK_AND_ASSIGN(ExpiryResult none,
                       store_->MarkNodeLost("nope", "SPOT_INTERRUPTED", "", 3100));
  EXPECT_TRUE(none.lost_nodes.empty());
  EXPECT_EQ(store_->MarkNodeLost("spot-a", "", "", 3100).status().code(), StatusCode::kInvalid);
  ASSERT_OK_AND_ASSIGN(ExpiryResult lost,
                       store_->MarkNodeLost("spot-a", std::string(reason::kSpotInterrupted),
                                            "the provider took spot-a back", 3100));
  EXPECT_EQ(lost.lost_nodes, std::vector<std::string>{"spot-a"});
  EXPECT_EQ(lost.requeued_jobs, std::vector<int64_t>{job.id});
  Job got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kPending);
  EXPECT_EQ(got.reason, reason::kSpotInterrupted);
  EXPECT_EQ(got.attempt, 2);
  EXPECT_EQ(got.attempts[0].state, JobState::kLost);
  EXPECT_EQ(got.attempts[0].reason, reason::kSpotInterrupted);
  ASSERT_OK_AND_ASSIGN(auto node, store_->GetNode("spot-a"));
  EXPECT_EQ(node->state, NodeState::kLost);
  EXPECT_FALSE(node->gpus[0].job_id.has_value());
  // Not READY any more: a second interruption changes nothing.
  ASSERT_OK_AND_ASSIGN(none, store_->MarkNodeLost("spot-a", "SPOT_INTERRUPTED", "", 3200));
  EXPECT_TRUE(none.lost_nodes.empty());
  // It finishes on another node.
  ASSERT_EQ(Place(got, {"gpu-b"}, 3300).admitted.size(), 1u);
  Sync("gpu-b", {{job.id, 0, 2}}, {Started(job, 0, 2)}, 3400);
  Sync("gpu-b", {}, {Exited(job, 0, 0, std::nullopt, 2)}, 3500);
  EXPECT_EQ(Get(job.id).state, JobState::kSucceeded);
}

TEST_P(StoreTest, RemoveNodeOnlyWhenIdleAndItMayComeBack) {
  Principal ana = User("acme", "ml", "ana");
  Register("cloud-a", 1);
  Register("gpu-b", 1);
  Job job = Submit(ana, Spec("busy", 1, 1));
  ASSERT_EQ(Place(job, {"cloud-a"}).admitted.size(), 1u);
  ASSERT_OK_AND_ASSIGN(RemoveNodeOutcome outcome, store_->RemoveNode("cloud-a", 2500));
  EXPECT_EQ(outcome, RemoveNodeOutcome::kBusy);
  ASSERT_OK_AND_ASSIGN(outcome, store_->RemoveNode("nope", 2500));
  EXPECT_EQ(outcome, RemoveNodeOutcome::kNotFound);
  Sync("cloud-a", {{job.id, 0, 1}}, {Started(job, 0)}, 3000);
  Sync("cloud-a", {}, {Exited(job, 0, 0)}, 3100);
  ASSERT_OK_AND_ASSIGN(outcome, store_->RemoveNode("cloud-a", 3200));
  EXPECT_EQ(outcome, RemoveNodeOutcome::kRemoved);
  ASSERT_OK_AND_ASSIGN(outcome, store_->RemoveNode("cloud-a", 3300));
  EXPECT_EQ(outcome, RemoveNodeOutcome::kNotFound);
  ASSERT_OK_AND_ASSIGN(auto nodes, store_->ListNodes());
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].name, "gpu-b");
  ASSERT_OK_AND_ASSIGN(auto gone, store_->GetNode("cloud-a"));
  EXPECT_FALSE(gone.has_value());
  ASSERT_OK_AND_ASSIGN(bool found, store_->SetDrain("cloud-a", true));
  EXPECT_FALSE(found);
  ASSERT_OK_AND_ASSIGN(sched::Snapshot snap, store_->LoadSchedulingSnapshot());
  EXPECT_EQ(snap.nodes.size(), 1u);
  EXPECT_FALSE(Sync("cloud-a", {}, {}, 3400).registered);
  // The job's history still names the node.
  EXPECT_EQ(Get(job.id).placement[0].node, "cloud-a");
  ASSERT_OK_AND_ASSIGN(auto expired, store_->ExpireLeases(99'000));
  EXPECT_EQ(expired.lost_nodes, std::vector<std::string>{"gpu-b"});
  // A node of that name registers again: it is back.
  Node back = Register("cloud-a", 1, "i9", 100'000);
  EXPECT_EQ(back.state, NodeState::kReady);
  ASSERT_OK_AND_ASSIGN(nodes, store_->ListNodes());
  EXPECT_EQ(nodes.size(), 2u);
}

TEST_P(StoreTest, SnapshotShowsAttemptsThatStillHoldResources) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 4);
  JobSpec gang = Spec("gang", 2, 2);
  gang.priority = 5;
  Job job = Submit(ana, gang);
  Job cancelled = Submit(ana, Spec("cancelled", 1, 0));
  ASSERT_EQ(Place(job, {"gpu-a"}).admitted.size(), 1u);
  ASSERT_EQ(Place(cancelled, {"gpu-a"}).admitted.size(), 1u);
  ASSERT_OK(store_->CancelJob(Scope::All(), cancelled.id, "ana", 2500).status());
  ASSERT_OK_AND_ASSIGN(sched::Snapshot snap, store_->LoadSchedulingSnapshot());
  ASSERT_EQ(snap.running.size(), 2u);
  const sched::RunningJob& a = snap.running[0];
  EXPECT_EQ(a.job_id, job.id);
  EXPECT_EQ(a.priority, 5);
  EXPECT_EQ(a.tenant, "acme");
  EXPECT_EQ(a.team, "ml");
  EXPECT_EQ(a.user, "ana");
  EXPECT_FALSE(a.terminating);
  ASSERT_EQ(a.tasks.size(), 2u);
  EXPECT_EQ(a.tasks[0].gpu_indices, (std::vector<int>{0, 1}));
  EXPECT_EQ(a.tasks[1].gpu_indices, (std::vector<int>{2, 3}));
  // Cancelled, its task not yet stopped: it still holds its CPUs.
  EXPECT_EQ(snap.running[1].job_id, cancelled.id);
  EXPECT_TRUE(snap.running[1].terminating);
  EXPECT_TRUE(snap.running[1].preempt_reason.empty());
  ASSERT_EQ(snap.running[1].tasks.size(), 1u);
  EXPECT_TRUE(snap.running[1].tasks[0].gpu_ids.empty());
}

TEST_P(StoreTest, SchemaOneDatabaseMigratesWithItsData) {
  // A database as the previous release left it: only migration 1.
  store_.reset();
  std::unique_ptr<sql::Database> db;
  if (GetParam() == Backend::kSqlite) {
    std::filesystem::remove(url_.substr(7));
    ASSERT_OK_AND_ASSIGN(db, sql::OpenSqlite(url_.substr(7)));
  } else {
    ASSERT_OK_AND_ASSIGN(url_, PgServer::Get().NewSchema());
    ASSERT_OK_AND_ASSIGN(db, sql::OpenPostgres(url_));
  }
  const sql::Dialect dialect =
      GetParam() == Backend::kSqlite ? sql::Dialect::kSqlite : sql::Dialect::kPostgres;
  {
    ASSERT_OK_AND_ASSIGN(sql::Lease lease, db->Acquire(true));
    ASSERT_OK(lease->Begin(true));
    ASSERT_OK(lease
                  ->Query("CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY,"
                          " applied_at_ms BIGINT NOT NULL)")
                  .status());
    for (const char* statement : sql::Migrations()[0].statements) {
      ASSERT_OK(lease->Query(sql::ForDialect(dialect, statement)).status());
    }
    ASSERT_OK(lease->Query("INSERT INTO schema_migrations VALUES (1, 0)").status());
    ASSERT_OK(
        lease->Query("INSERT INTO nodes (name, pool, state) VALUES ('old-node', 'p', 'READY')")
            .status());
    ASSERT_OK(lease->Commit());
  }
  db.reset();
  ASSERT_OK_AND_ASSIGN(store_, OpenStore(url_));
  EXPECT_EQ(store_->schema_version(), sql::Migrations().back().version);
  EXPECT_GE(store_->schema_version(), 2);
  ASSERT_OK_AND_ASSIGN(auto nodes, store_->ListNodes());
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].name, "old-node");
  ASSERT_OK_AND_ASSIGN(RemoveNodeOutcome outcome, store_->RemoveNode("old-node", 5));
  EXPECT_EQ(outcome, RemoveNodeOutcome::kRemoved);
}

// A manifest as ParseDatasetRegistration leaves it: sorted, summed, digested.
DatasetVersion Manifest(const std::string& name, const std::string& source, int objects,
                        const std::string& salt = "") {
  DatasetVersion version;
  version.name = name;
  version.source = source;
  version.description = "test data";
  for (int i = 0; i < objects; ++i) {
    char path[32];
    std::snprintf(path, sizeof(path), "part-%06d.bin", i);
    version.objects.push_back({path, i + 1, Sha256Hex(salt + path)});
    version.bytes += i + 1;
  }
  version.object_count = objects;
  version.digest = ManifestDigest(source, version.objects);
  return version;
}

TEST_P(StoreTest, DatasetVersionsNumberPerTenantAndReRegistrationIsIdempotent) {
  Principal ana = User("acme", "ml", "ana");
  Principal bob = User("globex", "ml", "bob");
  ASSERT_OK_AND_ASSIGN(
      DatasetCreateResult first,
      store_->CreateDatasetVersion(ana, Manifest("imagenet", "s3://lake/in/", 3), 1000));
  EXPECT_TRUE(first.created);
  EXPECT_EQ(first.version.version, 1);
  EXPECT_EQ(first.version.tenant, "acme");
  EXPECT_EQ(first.version.created_by, "ana");
  EXPECT_EQ(first.version.created_at_ms, 1000);
  EXPECT_EQ(first.version.bytes, 6);
  EXPECT_EQ(first.version.object_count, 3);
  EXPECT_EQ(first.version.objects.size(), 3u);

  // The same manifest again: version 1 comes back, nothing new.
  ASSERT_OK_AND_ASSIGN(
      DatasetCreateResult again,
      store_->CreateDatasetVersion(ana, Manifest("imagenet", "s3://lake/in/", 3), 2000));
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.version.version, 1);
  EXPECT_EQ(again.version.created_at_ms, 1000);
  EXPECT_EQ(again.version.digest, first.version.digest);
  EXPECT_EQ(again.version.objects.size(), 3u);

  // A changed manifest is version 2; another tenant's "imagenet" starts at 1.
  ASSERT_OK_AND_ASSIGN(
      DatasetCreateResult second,
      store_->CreateDatasetVersion(ana, Manifest("imagenet", "s3://lake/in/", 3, "changed"), 3000));
  EXPECT_TRUE(second.created);
  EXPECT_EQ(second.version.version, 2);
  ASSERT_OK_AND_ASSIGN(
      DatasetCreateResult other,
      store_->CreateDatasetVersion(bob, Manifest("imagenet", "file:///d/", 1), 3000));
  EXPECT_EQ(other.version.version, 1);
  EXPECT_EQ(other.version.tenant, "globex");
  // Back to the first manifest: not the latest, so a new version 3.
  ASSERT_OK_AND_ASSIGN(
      DatasetCreateResult third,
      store_->CreateDatasetVersion(ana, Manifest("imagenet", "s3://lake/in/", 3), 4000));
  EXPECT_TRUE(third.created);
  EXPECT_EQ(third.version.version, 3);

  // Lookups: the latest for 0, a given version, nothing across tenants.
  ASSERT_OK_AND_ASSIGN(auto latest, store_->GetDatasetVersion(ana.tenant_id, "imagenet", 0, false));
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->version, 3);
  EXPECT_TRUE(latest->objects.empty());
  ASSERT_OK_AND_ASSIGN(auto v2, store_->GetDatasetVersion(ana.tenant_id, "imagenet", 2, true));
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->digest, second.version.digest);
  ASSERT_EQ(v2->objects.size(), 3u);
  EXPECT_EQ(v2->objects[0].path, "part-000000.bin");
  EXPECT_EQ(v2->objects[2].size, 3);
  // What the store returns digests to what it was given.
  EXPECT_EQ(ManifestDigest(v2->source, v2->objects), v2->digest);
  ASSERT_OK_AND_ASSIGN(auto missing, store_->GetDatasetVersion(ana.tenant_id, "imagenet", 9, true));
  EXPECT_FALSE(missing.has_value());
  ASSERT_OK_AND_ASSIGN(auto unknown, store_->GetDatasetVersion(ana.tenant_id, "c4", 0, false));
  EXPECT_FALSE(unknown.has_value());

  // Listings: one entry per dataset (its latest), scoped by tenant.
  ASSERT_OK_AND_ASSIGN(DatasetCreateResult c4,
                       store_->CreateDatasetVersion(ana, Manifest("c4", "https://h/c4/", 2), 5000));
  EXPECT_EQ(c4.version.version, 1);
  ASSERT_OK_AND_ASSIGN(auto mine, store_->ListDatasets(Scope::Tenant(ana.tenant_id)));
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[0].name, "c4");
  EXPECT_EQ(mine[1].name, "imagenet");
  EXPECT_EQ(mine[1].version, 3);
  ASSERT_OK_AND_ASSIGN(auto everyone, store_->ListDatasets(Scope::All()));
  EXPECT_EQ(everyone.size(), 3u);
  ASSERT_OK_AND_ASSIGN(auto versions, store_->ListDatasetVersions(ana.tenant_id, "imagenet"));
  ASSERT_EQ(versions.size(), 3u);
  EXPECT_EQ(versions[0].version, 1);
  EXPECT_EQ(versions[2].version, 3);
  ASSERT_OK_AND_ASSIGN(auto theirs, store_->ListDatasetVersions(bob.tenant_id, "c4"));
  EXPECT_TRUE(theirs.empty());

  // A manifest whose digest does not match its objects is refused.
  DatasetVersion forged = Manifest("imagenet", "s3://lake/in/", 2);
  forged.objects[0].size = 999;
  EXPECT_FALSE(store_->CreateDatasetVersion(ana, forged, 6000).ok());
}

TEST_P(StoreTest, LargeManifestsAndConcurrentRegistrations) {
  Principal ana = User("acme", "ml", "ana");
  // 100,000 objects (the limit) in one version.
  ASSERT_OK_AND_ASSIGN(
      DatasetCreateResult big,
      store_->CreateDatasetVersion(ana, Manifest("big", "s3://lake/big/", 100'000), 1000));
  EXPECT_EQ(big.version.object_count, 100'000);
  ASSERT_OK_AND_ASSIGN(auto read, store_->GetDatasetVersion(ana.tenant_id, "big", 1, true));
  ASSERT_TRUE(read.has_value());
  ASSERT_EQ(read->objects.size(), 100'000u);
  EXPECT_EQ(ManifestDigest(read->source, read->objects), big.version.digest);

  // Racing registrations of different manifests get distinct numbers.
  std::vector<std::thread> threads;
  std::vector<int64_t> numbers(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto created = store_->CreateDatasetVersion(
          ana, Manifest("raced", "s3://lake/r/", 2, std::to_string(i)), 2000);
      if (created.ok()) numbers[i] = created->version.version;
    });
  }
  for (auto& thread : threads) thread.join();
  std::sort(numbers.begin(), numbers.end());
  EXPECT_EQ(numbers, (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST_P(StoreTest, StagingReportsAddEventsAndStagingFailureEndsTheJob) {
  Principal ana = User("acme", "ml", "ana");
  Register("gpu-a", 2);
  Job job = Submit(ana, Spec("staged", 1, 2));
  ASSERT_EQ(Place(job, {"gpu-a"}).admitted.size(), 1u);
  SyncResult first = Sync("gpu-a", {}, {}, 3000);
  ASSERT_EQ(first.start.size(), 1u);
  EXPECT_EQ(first.start[0].tenant, "acme");
  EXPECT_EQ(first.start[0].tenant_id, ana.tenant_id);
  TaskReport staging;
  staging.ref = {job.id, 0, 1};
  staging.kind = TaskReport::Kind::kStaging;
  staging.message = "1 input, 3 objects, 6 B";
  TaskReport staged = staging;
  staged.kind = TaskReport::Kind::kStaged;
  staged.message = "6 B fetched in 0.1 s";
  Sync("gpu-a", {{job.id, 0, 1}}, {staging, staged}, 3100);
  EXPECT_EQ(Get(job.id).state, JobState::kAdmitted);  // staging is not a start
  EXPECT_EQ(FreeGpus("gpu-a"), 0);
  TaskReport failed = staging;
  failed.kind = TaskReport::Kind::kStagingFailed;
  failed.message = "input train: a/b.bin: sha256 mismatch";
  Sync("gpu-a", {}, {failed}, 3200);
  Job got = Get(job.id);
  EXPECT_EQ(got.state, JobState::kFailed);
  EXPECT_EQ(got.reason, reason::kStagingFailed);
  EXPECT_EQ(got.attempt, 1);  // not requeued
  EXPECT_EQ(FreeGpus("gpu-a"), 2);
  auto events = store_->ListEvents(Scope::All(), job.id, 0, 100);
  ASSERT_TRUE(events.ok() && events->has_value());
  std::vector<std::string> types;
  for (const JobEvent& event : **events) {
    types.push_back(event.type);
    if (event.type == "staging_failed") {
      EXPECT_NE(event.message.find("sha256 mismatch"), std::string::npos) << event.message;
    }
    if (event.type == "staged") EXPECT_NE(event.message.find("0.1 s"), std::string::npos);
  }
  EXPECT_NE(std::find(types.begin(), types.end(), "staging_started"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "staged"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "staging_failed"), types.end());
  EXPECT_EQ(Reasons(job.id).back(), "FAILED/STAGING_FAILED");
  // Late staging reports for the ended task add nothing.
  const size_t before = (*events)->size();
  Sync("gpu-a", {}, {staged}, 3300);
  auto after = store_->ListEvents(Scope::All(), job.id, 0, 100);
  ASSERT_TRUE(after.ok() && after->has_value());
  EXPECT_EQ((*after)->size(), before);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres),
                         [](const auto& info) {
                           return info.param == Backend::kSqlite ? "Sqlite" : "Postgres";
                         });

// ---- Not parameterised.

TEST(OpenStoreTest, RefusesBadUrlsWithoutShowingPasswords) {
  auto r = OpenStore("mysql://root@localhost/db");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expected sqlite:"), std::string::npos);
  EXPECT_FALSE(OpenStore("sqlite:").ok());
  EXPECT_FALSE(OpenStore("sqlite:/nonexistent-dir/sub/fleet.db").ok());
  r = OpenStore("postgresql://ferry:hunter2@127.0.0.1:1/db?connect_timeout=2");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find("hunter2"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("ferry:***@127.0.0.1"), std::string::npos)
      << r.status().message();
}

TEST(OpenStoreTest, InMemorySqlite) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore("sqlite::memory:"));
  EXPECT_EQ(store->backend(), "sqlite");
  ASSERT_OK_AND_ASSIGN(int64_t id, store->EnsureTenant("t"));
  EXPECT_GT(id, 0);
  ASSERT_OK_AND_ASSIGN(int64_t users, store->CountUsers());
  EXPECT_EQ(users, 0);
}

TEST(Sha256HexTest, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(RedactUrlTest, HidesPasswords) {
  EXPECT_EQ(sql::RedactUrl("postgresql://u:p@h/db"), "postgresql://u:***@h/db");
  EXPECT_EQ(sql::RedactUrl("postgresql://u@h/db?password=x&sslmode=require"),
            "postgresql://u@h/db?password=***&sslmode=require");
  EXPECT_EQ(sql::RedactUrl("sqlite:/var/lib/ferry.db"), "sqlite:/var/lib/ferry.db");
}

}  // namespace
}  // namespace ferry::fleet
