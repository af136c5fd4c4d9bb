// /v1/code: a tenant's code bundles (docs/fleet-staging.md#code). A bundle
// is a gzip'd tar archive named by the SHA-256 of its bytes, checked entry
// by entry when it is uploaded and kept under
// <data_dir>/code/<tenant id>/<hex>.tar.gz. Tenants see only their own
// (another tenant's digest is simply not found); agents fetch a bundle for
// a job placed on them that names it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "ferry/fleet/code_bundle.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/request_parsing.h"
#include "fleet/server/responses.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

bool IsHexDigest(const std::string& hex) {
  if (hex.size() != 64) return false;
  for (char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

json BundleJson(const std::string& hex, int64_t bytes) {
  return {{"digest", "sha256:" + hex}, {"bytes", bytes}};
}

}  // namespace

std::string FleetServer::CodePath(int64_t tenant_id, const std::string& hex) const {
  const std::string dir = options_.data_dir.empty() ? "." : options_.data_dir;
  return dir + "/code/" + std::to_string(tenant_id) + "/" + hex + ".tar.gz";
}

void FleetServer::UploadCode(Call& c) {
  if (!OnlyParams(c, {})) return;
  const std::string& body = c.req.body;
  if (static_cast<int64_t>(body.size()) > options_.max_code_bundle_bytes) {
    return SendProblem(c, 413, "payload-too-large",
                       "a code bundle may have at most " +
                           std::to_string(options_.max_code_bundle_bytes) + " bytes");
  }
  const std::string type = c.req.get_header_value("Content-Type");
  const std::string media = type.substr(0, type.find(';'));
  if (media != "application/gzip" && media != "application/x-gzip" &&
      media != "application/octet-stream") {
    return SendProblem(c, 415, "unsupported-media-type",
                       "the body must be a gzip'd tar archive (application/gzip)");
  }
  Result<BundleInfo> info = CheckBundle(body);
  if (!info.ok()) {
    return SendValidation(c, {{"(body)", "not a usable code bundle: " + info.status().message()}});
  }
  const std::string path = CodePath(c.principal.tenant_id, info->sha256);
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  if (!existed) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    Status written = WriteFileAtomically(path, body, 0640);
    if (!written.ok()) return SendStoreError(c, written);
  }
  json out = BundleJson(info->sha256, info->bytes);
  out["files"] = info->files;
  out["unpacked_bytes"] = info->unpacked_bytes;
  c.res.set_header("Location", "/v1/code/sha256:" + info->sha256);
  SendJson(c, existed ? 200 : 201, out);
}

void FleetServer::GetCode(Call& c) {
  if (!OnlyParams(c, {})) return;
  const std::string& hex = c.captures.at(0);
  struct stat st {};
  if (!IsHexDigest(hex) || ::stat(CodePath(c.principal.tenant_id, hex).c_str(), &st) != 0) {
    return SendProblem(c, 404, "not-found", "no code bundle sha256:" + hex);
  }
  SendJson(c, 200, BundleJson(hex, st.st_size));
}

void FleetServer::AgentGetCode(Call& c) {
  if (!OnlyParams(c, {"job"})) return;
  const std::string& hex = c.captures.at(0);
  std::optional<int64_t> job_id = IntParam(c, "job", 0, 1, INT64_MAX);
  if (!job_id) return;
  if (*job_id == 0) {
    return SendValidation(c, {{"job", "is required: the job the bundle is fetched for"}});
  }
  Result<std::optional<Job>> job = store_->GetJob(Scope::All(), *job_id);
  if (!job.ok()) return SendStoreError(c, job.status());
  // Only for a job that is placed, or waits with nodes held for it (a
  // prefetch order), and names this bundle: an agent reads what a job it
  // runs or fetches ahead for declared, nothing else.
  const bool placed = job->has_value() &&
                      ((*job)->state == JobState::kAdmitted || (*job)->state == JobState::kRunning);
  const bool ahead = job->has_value() && (*job)->state == JobState::kPending &&
                     prefetch_.Find((*job)->id, (*job)->attempt).has_value();
  if (!(placed || ahead) || (*job)->spec.code.bundle != "sha256:" + hex) {
    return SendProblem(
        c, 404, "not-found",
        "no code bundle sha256:" + hex + " for a placed or held job " + std::to_string(*job_id));
  }
  const std::string path = CodePath((*job)->tenant_id, hex);
  auto file = std::make_shared<int>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (*file < 0 || ::fstat(*file, &st) != 0) {
    if (*file >= 0) ::close(*file);
    return SendProblem(c, 404, "not-found", "code bundle sha256:" + hex + " is gone");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  // Streamed from the file (httplib serves Range requests from it, so an
  // interrupted download resumes).
  c.res.set_content_provider(
      size, "application/gzip",
      [file](size_t offset, size_t length, httplib::DataSink& sink) {
        char buffer[1 << 16];
        const ssize_t got =
            ::pread(*file, buffer, std::min(length, sizeof(buffer)), static_cast<off_t>(offset));
        if (got <= 0) return false;
        return sink.write(buffer, static_cast<size_t>(got));
      },
      [file](bool) { ::close(*file); });
  c.res.status = 200;
}

std::vector<FieldError> FleetServer::ResolveCode(const Principal& principal, JobSpec* spec) {
  JobSpec::Code& code = spec->code;
  code.bytes = 0;
  if (code.bundle.empty()) return {};
  const std::string hex = code.bundle.substr(7);  // ParseJobSpec checked "sha256:<hex>"
  struct stat st {};
  if (!IsHexDigest(hex) || ::stat(CodePath(principal.tenant_id, hex).c_str(), &st) != 0) {
    return {{"code.bundle", "no code bundle " + code.bundle + " in tenant " + principal.tenant +
                                " (upload it with POST /v1/code)"}};
  }
  code.bytes = st.st_size;
  return {};
}

}  // namespace ferry::fleet::server_internal
