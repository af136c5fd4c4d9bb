// Strict parsers for the request bodies the server reads besides job specs
// (those are model_json.h's ParseJobSpec): agent registration, sync and log
// uploads, and user creation. Unknown fields, wrong types and out-of-range
// values are collected as FieldErrors, every one of them, never thrown.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ferry/fleet/model.h"
#include "ferry/fleet/model_json.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet::server_internal {

struct AgentLogUpload {
  std::string node;
  int64_t job_id = 0;
  int attempt = 0;
  int task = 0;
  std::string stream;
  std::string data;
};

// What an agent did ahead of a job's start (POST /v1/agent/sync,
// "prefetched"): recorded as the job's `prefetched` event.
struct PrefetchReport {
  int64_t job_id = 0;
  int attempt = 0;
  std::string message;  // "2 inputs, 3 objects, 1.2 GiB: ..." or why it failed
};

struct CreateUserRequest {
  std::string tenant;
  std::string team;
  std::string name;
  Role role = Role::kUser;
};

// An existing user, named by tenant and name (revoke, new token).
struct UserRef {
  std::string tenant;
  std::string name;
};
using RevokeUserRequest = UserRef;

// POST /v1/webhooks.
struct CreateWebhookRequest {
  std::string url;
  std::vector<JobState> states;  // default: the terminal states
  std::string description;
  bool all_tenants = false;       // platform admins only (the handler checks)
  std::optional<int64_t> job_id;  // one job's events (the handler checks it is visible)
};

// Each returns nullopt and fills `errors` when the body breaks a rule.
// `now_ms` fills report times the agent left out.
std::optional<NodeRegistration> ParseNodeRegistration(const nlohmann::json& body,
                                                      std::vector<FieldError>* errors);
// The optional "address" of a registration or sync body (the node's
// advertised host): "" when absent; nullopt with a field error when it is not
// a host name or IP address.
std::optional<std::string> ParseAdvertisedAddress(const nlohmann::json& body,
                                                  std::vector<FieldError>* errors);

// The optional "cache" of a sync body (the node's input cache report, see
// NodeCache): nullopt in `*cache` when absent or null. False, with field
// errors, when it breaks a rule: counters are integers >= 0, at most
// NodeCache::kMaxInputs inputs, each with a tenant name, a digest
// ("sha256:" and 64 lower-case hex digits), 0 <= bytes <= total_bytes, no
// (tenant, digest) twice. Inputs with 0 bytes are dropped.
bool ParseCacheReport(const nlohmann::json& body, int64_t now_ms, std::optional<NodeCache>* cache,
                      std::vector<FieldError>* errors);

// The optional "prefetched" of a sync body: at most 256 reports, each with
// job_id >= 1, attempt >= 1 and a message of 1 to 4096 characters. nullopt,
// with field errors, when one breaks a rule; empty when absent or null.
std::optional<std::vector<PrefetchReport>> ParsePrefetchReports(const nlohmann::json& body,
                                                                std::vector<FieldError>* errors);

std::optional<SyncRequest> ParseSyncRequest(const nlohmann::json& body, int64_t now_ms,
                                            std::vector<FieldError>* errors);
std::optional<AgentLogUpload> ParseAgentLogUpload(const nlohmann::json& body,
                                                  std::vector<FieldError>* errors);
std::optional<CreateUserRequest> ParseCreateUserRequest(const nlohmann::json& body,
                                                        std::vector<FieldError>* errors);
std::optional<RevokeUserRequest> ParseRevokeUserRequest(const nlohmann::json& body,
                                                        std::vector<FieldError>* errors);
std::optional<CreateWebhookRequest> ParseCreateWebhookRequest(const nlohmann::json& body,
                                                              std::vector<FieldError>* errors);

}  // namespace ferry::fleet::server_internal
