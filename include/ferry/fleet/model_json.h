// JSON forms of the fleet model, as sent by the REST API (docs/fleet-api.md)
// and as the store keeps a job's spec. Parsing is strict: unknown fields,
// wrong types and out-of-range values are refused with an error that names
// the field ("gpus_per_task: must be between 0 and 64").
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/model.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet {

// One problem with one field of a request body.
struct FieldError {
  std::string field;   // JSON pointer-ish path: "tasks", "env.PATH", "command[2]"
  std::string detail;  // "must be an integer between 1 and 1024"
};

// Parses and validates a submission body. On failure returns every field
// error found (not only the first); `errors` is empty on success.
Result<JobSpec> ParseJobSpec(const nlohmann::json& body, std::vector<FieldError>* errors);

// The number of Unicode code points in `text`, or nullopt when it is not
// well-formed UTF-8 (overlong forms, surrogates and values past U+10FFFF are
// not). API length limits ("1-128 characters") count these, not bytes.
std::optional<size_t> Utf8CodePoints(std::string_view text);

nlohmann::json ToJson(const JobSpec& spec);
nlohmann::json ToJson(const JobInput& input);
nlohmann::json ToJson(const TaskPlacement& placement);
// The full job resource (GET /v1/jobs/{id}); `with_attempts` adds the history.
nlohmann::json ToJson(const Job& job, bool with_attempts = true);
nlohmann::json ToJson(const JobEvent& event);
nlohmann::json ToJson(const Node& node);
nlohmann::json ToJson(const Pool& pool);
// The assignment as GET... /v1/agent/sync sends it, with "tenant" and
// "inputs" ([{"name", "objects": [{"path", "uri", "size", "sha256"}]}]).
nlohmann::json ToJson(const TaskAssignment& assignment);
nlohmann::json ToJson(const StagedInput& input);
// An assignment's "inputs" array as ToJson writes it (agents read it with
// this). Strict: every name, path, URI and digest is checked as the server
// checks them, so a node never stages from a malformed assignment.
Result<std::vector<StagedInput>> ParseStagedInputs(const nlohmann::json& inputs);

// ---- Datasets.
// POST /v1/datasets: {"name", "source", "description"?, "objects": [{"path",
// "size", "sha256"}]}. Validates the manifest (docs/fleet-api.md#datasets),
// sorts the objects by path and fills bytes, object_count and digest; the
// tenant, version and creation fields are left for the store. Errors name
// the field ("objects[3].path: must be relative (no leading '/')"); after
// kMaxObjectErrors object errors the rest are counted, not listed.
inline constexpr size_t kMaxObjectErrors = 50;
Result<DatasetVersion> ParseDatasetRegistration(const nlohmann::json& body,
                                                std::vector<FieldError>* errors);
// {"name", "version", "source", "description", "bytes", "objects" (the
// count), "digest", "created_at", "created_at_ms", "created_by"}; with
// `with_objects`, also "manifest": the objects.
nlohmann::json ToJson(const DatasetVersion& version, bool with_objects = false);

// Milliseconds since the epoch as RFC 3339 UTC with milliseconds
// ("2026-11-29T14:41:08.123Z"); 0 becomes null.
nlohmann::json TimestampJson(int64_t unix_ms);

}  // namespace ferry::fleet
