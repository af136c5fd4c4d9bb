// Identity: tenants, teams, users and their API tokens (stored hashed).
#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

Result<int64_t> SqlStore::EnsureTenant(const std::string& name) {
  if (name.empty()) return Status::Invalid("tenant name must not be empty");
  int64_t id = 0;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_RETURN_NOT_OK(c.Query("INSERT INTO tenants (name, created_at_ms) VALUES (?, ?)"
                                " ON CONFLICT (name) DO NOTHING",
                                {name, NowMsForMigrations()})
                            .status());
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query("SELECT id FROM tenants WHERE name = ?", {name}));
    id = rows[0].Int(0);
    return Status::OK();
  }));
  return id;
}

Result<int64_t> SqlStore::EnsureTeam(int64_t tenant_id, const std::string& name) {
  if (name.empty()) return Status::Invalid("team name must not be empty");
  int64_t id = 0;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(Rows tenant, c.Query("SELECT id FROM tenants WHERE id = ?", {tenant_id}));
    if (tenant.empty()) return Status::Invalid("no tenant with id " + std::to_string(tenant_id));
    FERRY_RETURN_NOT_OK(c.Query("INSERT INTO teams (tenant_id, name) VALUES (?, ?)"
                                " ON CONFLICT (tenant_id, name) DO NOTHING",
                                {tenant_id, name})
                            .status());
    FERRY_ASSIGN_OR_RAISE(
        Rows rows,
        c.Query("SELECT id FROM teams WHERE tenant_id = ? AND name = ?", {tenant_id, name}));
    id = rows[0].Int(0);
    return Status::OK();
  }));
  return id;
}

Result<int64_t> SqlStore::CreateUser(int64_t team_id, const std::string& name, Role role) {
  if (name.empty()) return Status::Invalid("user name must not be empty");
  int64_t id = 0;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(
        Rows team,
        c.Query("SELECT t.tenant_id, tn.name FROM teams t JOIN tenants tn ON tn.id = t.tenant_id"
                " WHERE t.id = ?",
                {team_id}));
    if (team.empty()) return Status::Invalid("no team with id " + std::to_string(team_id));
    const int64_t tenant_id = team[0].Int(0);
    FERRY_ASSIGN_OR_RAISE(
        Rows taken,
        c.Query("SELECT id FROM users WHERE tenant_id = ? AND name = ?", {tenant_id, name}));
    if (!taken.empty()) {
      return Status::Invalid("user '" + name + "' already exists in tenant '" + team[0].Text(1) +
                             "'");
    }
    FERRY_ASSIGN_OR_RAISE(
        Rows rows, c.Query("INSERT INTO users (tenant_id, team_id, name, role, created_at_ms)"
                           " VALUES (?, ?, ?, ?, ?) RETURNING id",
                           {tenant_id, team_id, name, Str(ToString(role)), NowMsForMigrations()}));
    id = rows[0].Int(0);
    return Status::OK();
  }));
  return id;
}

Result<int64_t> SqlStore::AddToken(int64_t user_id, const std::string& token_sha256,
                                   const std::string& label, int64_t now_ms) {
  if (token_sha256.size() != 64) {
    return Status::Invalid("a token hash is 64 hex characters, got " +
                           std::to_string(token_sha256.size()));
  }
  int64_t id = 0;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(Rows user, c.Query("SELECT id FROM users WHERE id = ?", {user_id}));
    if (user.empty()) return Status::Invalid("no user with id " + std::to_string(user_id));
    FERRY_ASSIGN_OR_RAISE(
        Rows dup, c.Query("SELECT id FROM api_tokens WHERE token_sha256 = ?", {token_sha256}));
    if (!dup.empty()) return Status::Invalid("this token is already registered");
    FERRY_ASSIGN_OR_RAISE(
        Rows rows, c.Query("INSERT INTO api_tokens (user_id, token_sha256, label, created_at_ms)"
                           " VALUES (?, ?, ?, ?) RETURNING id",
                           {user_id, token_sha256, label, now_ms}));
    id = rows[0].Int(0);
    return Status::OK();
  }));
  return id;
}

Principal SqlStore::PrincipalFromRow(const Row& row) {
  Principal p;
  p.tenant_id = row.Int(0);
  p.tenant = row.Text(1);
  p.team_id = row.Int(2);
  p.team = row.Text(3);
  p.user_id = row.Int(4);
  p.user = row.Text(5);
  p.role = ParseRole(row.Text(6)).value_or(Role::kUser);
  return p;
}

Result<std::optional<Principal>> SqlStore::QueryPrincipal(const std::string& tail,
                                                          const Params& params) {
  std::optional<Principal> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(std::string(kPrincipalSelect) + tail, params));
    out.reset();
    if (!rows.empty()) out = PrincipalFromRow(rows[0]);
    return Status::OK();
  }));
  return out;
}

Result<std::optional<Principal>> SqlStore::LookupToken(const std::string& token_sha256) {
  return QueryPrincipal(
      " JOIN api_tokens k ON k.user_id = u.id"
      " WHERE k.token_sha256 = ? AND k.revoked_at_ms IS NULL",
      {token_sha256});
}

Result<std::optional<Principal>> SqlStore::FindUser(const std::string& tenant,
                                                    const std::string& user) {
  return QueryPrincipal(" WHERE tn.name = ? AND u.name = ?", {tenant, user});
}

Result<int64_t> SqlStore::CountUsers() {
  int64_t n = 0;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query("SELECT COUNT(*) FROM users"));
    n = rows[0].Int(0);
    return Status::OK();
  }));
  return n;
}

UserInfo SqlStore::UserInfoFromRow(const Row& row) {
  UserInfo u;
  u.id = row.Int(0);
  u.tenant = row.Text(1);
  u.team = row.Text(2);
  u.name = row.Text(3);
  u.role = ParseRole(row.Text(4)).value_or(Role::kUser);
  u.created_at_ms = row.Int(5);
  u.active_tokens = row.Int(6);
  return u;
}

Result<std::optional<std::vector<UserInfo>>> SqlStore::ListUsers(
    const std::optional<std::string>& tenant) {
  std::optional<std::vector<UserInfo>> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    out.reset();
    Params params;
    std::string query = kUserInfoSelect;
    if (tenant) {
      FERRY_ASSIGN_OR_RAISE(Rows found,
                            c.Query("SELECT id FROM tenants WHERE name = ?", {*tenant}));
      if (found.empty()) return Status::OK();
      query += " WHERE u.tenant_id = ?";
      params.push_back(found[0].Int(0));
    }
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(query + " ORDER BY u.id", params));
    out.emplace();
    for (const Row& row : rows.rows) out->push_back(UserInfoFromRow(row));
    return Status::OK();
  }));
  return out;
}

Result<std::optional<RevokeResult>> SqlStore::RevokeUserTokens(const std::string& tenant,
                                                               const std::string& user,
                                                               int64_t now_ms) {
  std::optional<RevokeResult> out;
  FERRY_RETURN_NOT_OK(Run(true, [&](Connection& c) -> Status {
    out.reset();
    const std::string select = std::string(kUserInfoSelect) + " WHERE tn.name = ? AND u.name = ?";
    FERRY_ASSIGN_OR_RAISE(Rows found, c.Query(select, {tenant, user}));
    if (found.empty()) return Status::OK();
    const int64_t user_id = found[0].Int(0);
    FERRY_ASSIGN_OR_RAISE(Rows revoked, c.Query("UPDATE api_tokens SET revoked_at_ms = ?"
                                                " WHERE user_id = ? AND revoked_at_ms IS NULL",
                                                {now_ms, user_id}));
    FERRY_ASSIGN_OR_RAISE(Rows after, c.Query(select, {tenant, user}));
    out = RevokeResult{UserInfoFromRow(after[0]), revoked.affected};
    return Status::OK();
  }));
  return out;
}

}  // namespace ferry::fleet::store_internal
