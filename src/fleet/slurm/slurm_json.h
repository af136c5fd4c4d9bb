// Reading and writing Slurm's JSON: the bodies of slurmrestd (v0.0.36-v0.0.38
// and the data_parser versions v0.0.40+) and of `sinfo --json` / `squeue
// --json`, which print the shape of the newest version their Slurm has.
// Every function takes untrusted text and returns an error Status for
// anything it cannot read; none throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/slurm.h"

namespace ferry::fleet::slurm::internal {

// The "errors" of a response as one message ("Invalid job id specified
// (2017); ..."); empty when there are none. `body` must be a JSON object.
Result<std::string> ErrorsOf(std::string_view body);

// `what` names the request in error messages ("GET /slurm/v0.0.38/nodes").
Result<std::vector<Node>> ParseNodes(std::string_view body, std::string_view what);
Result<std::vector<Job>> ParseJobs(std::string_view body, std::string_view what);
// The job id of a /job/submit response. Errors with a job id (a held job's
// "Job is in held state") are a success.
Result<int64_t> ParseSubmitResponse(std::string_view body, std::string_view what);
// A response that carries nothing but errors (DELETE /job/{id}).
Status ParseEmptyResponse(std::string_view body, std::string_view what);
// The /slurm/vX/ping response: controller up, Slurm's release.
Result<ProbeResult> ParsePing(std::string_view body, std::string_view what);
// The OpenAPI document (/openapi/v3, /openapi.json): every version with a
// /slurm/vX/ping path, oldest first.
Result<std::vector<ApiVersion>> ParseServedVersions(std::string_view body);

// The checks both clients apply before submitting.
Status ValidateSubmit(const SubmitRequest& request);
// The body of POST /slurm/<version>/job/submit. Precondition: ValidateSubmit.
std::string SubmitBody(const SubmitRequest& request, ApiVersion version);
// sbatch's arguments for the request (after "sbatch", before no script: the
// script goes to stdin). Precondition: ValidateSubmit.
std::vector<std::string> SbatchArguments(const SubmitRequest& request);

}  // namespace ferry::fleet::slurm::internal
