// Users and their tokens: /v1/whoami for everyone, and the platform
// admin's /v1/admin/users (create, list, revoke, new token).
#include <optional>
#include <string>
#include <vector>

#include "ferry/base/hash.h"
#include "fleet/server/api_tokens.h"
#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/request_bodies.h"
#include "fleet/server/request_parsing.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

json UserInfoJson(const UserInfo& user) {
  return {{"id", user.id},
          {"tenant", user.tenant},
          {"team", user.team},
          {"name", user.name},
          {"role", ToString(user.role)},
          {"created_at", TimestampJson(user.created_at_ms)},
          {"active_tokens", user.active_tokens}};
}

}  // namespace

void FleetServer::WhoAmI(Call& c) {
  if (!OnlyParams(c, {})) return;
  SendJson(c, 200,
           {{"tenant", c.principal.tenant},
            {"team", c.principal.team},
            {"user", c.principal.user},
            {"role", ToString(c.principal.role)}});
}

void FleetServer::CreateUser(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<CreateUserRequest> request = ParseJsonBody(c, ParseCreateUserRequest);
  if (!request) return;
  Result<std::optional<Principal>> existing = store_->FindUser(request->tenant, request->name);
  if (!existing.ok()) return SendStoreError(c, existing.status());
  if (existing->has_value()) {
    return SendValidation(c, {{"name", "user '" + request->name + "' already exists in tenant '" +
                                           request->tenant + "'"}});
  }
  Result<std::string> token = NewToken();
  if (!token.ok()) return SendStoreError(c, token.status());
  Result<int64_t> tenant = store_->EnsureTenant(request->tenant);
  if (!tenant.ok()) return SendStoreError(c, tenant.status());
  Result<int64_t> team = store_->EnsureTeam(*tenant, request->team);
  if (!team.ok()) return SendStoreError(c, team.status());
  Result<int64_t> user = store_->CreateUser(*team, request->name, request->role);
  if (!user.ok()) {
    if (user.status().code() == StatusCode::kInvalid) {
      return SendValidation(c, {{"name", user.status().message()}});
    }
    return SendStoreError(c, user.status());
  }
  Principal created;
  created.user_id = *user;
  created.tenant = request->tenant;
  created.team = request->team;
  created.user = request->name;
  created.role = request->role;
  SendNewToken(c, created, *token, "created by " + c.principal.user);
}

void FleetServer::ListUsers(Call& c) {
  if (!OnlyParams(c, {"tenant"})) return;
  std::optional<std::string> tenant;
  if (c.HasParam("tenant")) {
    if (!AtMostOnce(c, "tenant")) return;
    tenant = c.Param("tenant");
    if (!ValidName(*tenant)) {
      return SendProblem(c, 400, "bad-request",
                         "query parameter 'tenant' must be " + std::string(kNameRule));
    }
  }
  Result<std::optional<std::vector<UserInfo>>> users = store_->ListUsers(tenant);
  if (!users.ok()) return SendStoreError(c, users.status());
  if (!users->has_value()) return SendProblem(c, 404, "not-found", "no tenant '" + *tenant + "'");
  json list = json::array();
  for (const UserInfo& user : **users) list.push_back(UserInfoJson(user));
  SendJson(c, 200, {{"users", std::move(list)}});
}

void FleetServer::RevokeUser(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<RevokeUserRequest> request = ParseJsonBody(c, ParseRevokeUserRequest);
  if (!request) return;
  // An admin revoking their own tokens would lock themselves out with this
  // very request; another platform admin can do it when it is meant.
  if (request->tenant == c.principal.tenant && request->name == c.principal.user) {
    return SendProblem(c, 409, "conflict",
                       "you may not revoke your own tokens (" + request->name + " in tenant '" +
                           request->tenant + "'); ask another platform admin");
  }
  Result<std::optional<RevokeResult>> revoked =
      store_->RevokeUserTokens(request->tenant, request->name, NowMs());
  if (!revoked.ok()) return SendStoreError(c, revoked.status());
  if (!revoked->has_value()) {
    return SendProblem(c, 404, "not-found",
                       "no user '" + request->name + "' in tenant '" + request->tenant + "'");
  }
  // The store no longer knows the tokens; neither may the cache.
  token_cache_.DropUser((*revoked)->user.id);
  SendJson(
      c, 200,
      {{"user", UserInfoJson((*revoked)->user)}, {"revoked_tokens", (*revoked)->revoked_tokens}});
}

void FleetServer::IssueToken(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<UserRef> request = ParseJsonBody(c, ParseRevokeUserRequest);
  if (!request) return;
  Result<std::optional<Principal>> user = store_->FindUser(request->tenant, request->name);
  if (!user.ok()) return SendStoreError(c, user.status());
  if (!user->has_value()) {
    return SendProblem(c, 404, "not-found",
                       "no user '" + request->name + "' in tenant '" + request->tenant + "'");
  }
  Result<std::string> token = NewToken();
  if (!token.ok()) return SendStoreError(c, token.status());
  SendNewToken(c, **user, *token, "issued by " + c.principal.user);
}

void FleetServer::SendNewToken(Call& c, const Principal& owner, const std::string& token,
                               const std::string& note) {
  Result<int64_t> added = store_->AddToken(owner.user_id, Sha256Hex(token), note, NowMs());
  if (!added.ok()) return SendStoreError(c, added.status());
  SendJson(c, 201,
           {{"tenant", owner.tenant},
            {"team", owner.team},
            {"user", owner.user},
            {"role", ToString(owner.role)},
            {"token", token}});
}

}  // namespace ferry::fleet::server_internal
