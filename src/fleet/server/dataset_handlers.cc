// /v1/datasets: a tenant's registered datasets (register a version, list,
// show a dataset and its versions, show one version's manifest), and the
// resolution of a submission's dataset inputs against them.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/request_parsing.h"
#include "fleet/server/responses.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

// A dataset name in the path, or nullopt: no dataset can have that name.
std::optional<std::string> DatasetNameFrom(const Call& c) {
  const std::string& name = c.captures.at(0);
  if (!CheckInputName(name, DatasetVersion::kMaxNameChars).empty()) return std::nullopt;
  return name;
}

}  // namespace

void FleetServer::CreateDataset(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<json> body = ReadJsonBody(c, options_.max_manifest_bytes);
  if (!body) return;
  std::vector<FieldError> errors;
  Result<DatasetVersion> manifest = ParseDatasetRegistration(*body, &errors);
  if (!manifest.ok()) {
    if (errors.empty()) errors.push_back({"(body)", manifest.status().message()});
    return SendValidation(c, errors);
  }
  Result<DatasetCreateResult> created =
      store_->CreateDatasetVersion(c.principal, *manifest, NowMs());
  if (!created.ok()) {
    if (created.status().code() == StatusCode::kInvalid) {
      return SendValidation(c, {{"(body)", created.status().message()}});
    }
    return SendStoreError(c, created.status());
  }
  const DatasetVersion& version = created->version;
  c.res.set_header("Location",
                   "/v1/datasets/" + version.name + "/versions/" + std::to_string(version.version));
  SendJson(c, created->created ? 201 : 200, ToJson(version));
}

void FleetServer::ListDatasets(Call& c) {
  if (!OnlyParams(c, {})) return;
  // As with jobs, platform admins see every tenant's (each entry names its tenant).
  Result<std::vector<DatasetVersion>> latest = store_->ListDatasets(ScopeOf(c.principal));
  if (!latest.ok()) return SendStoreError(c, latest.status());
  json datasets = json::array();
  for (const DatasetVersion& version : *latest) {
    json entry = ToJson(version);
    entry["latest_version"] = version.version;
    datasets.push_back(std::move(entry));
  }
  SendJson(c, 200, {{"datasets", std::move(datasets)}});
}

void FleetServer::GetDataset(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<std::string> name = DatasetNameFrom(c);
  // Names are per tenant: another tenant's dataset is simply not found here.
  Result<std::vector<DatasetVersion>> versions =
      name ? store_->ListDatasetVersions(c.principal.tenant_id, *name)
           : Result<std::vector<DatasetVersion>>(std::vector<DatasetVersion>{});
  if (!versions.ok()) return SendStoreError(c, versions.status());
  if (versions->empty()) {
    return SendProblem(c, 404, "not-found", "no dataset " + c.captures.at(0));
  }
  json body = ToJson(versions->back());
  body["latest_version"] = versions->back().version;
  json list = json::array();
  for (auto it = versions->rbegin(); it != versions->rend(); ++it) list.push_back(ToJson(*it));
  body["versions"] = std::move(list);
  SendJson(c, 200, body);
}

void FleetServer::GetDatasetVersion(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<std::string> name = DatasetNameFrom(c);
  std::optional<int64_t> number = ParseInt(c.captures.at(1));
  const std::string what = "no version " + c.captures.at(1) + " of dataset " + c.captures.at(0);
  if (!name || !number || *number <= 0) return SendProblem(c, 404, "not-found", what);
  Result<std::optional<DatasetVersion>> version =
      store_->GetDatasetVersion(c.principal.tenant_id, *name, *number, /*with_objects=*/true);
  if (!version.ok()) return SendStoreError(c, version.status());
  if (!version->has_value()) return SendProblem(c, 404, "not-found", what);
  SendJson(c, 200, ToJson(**version, /*with_objects=*/true));
}

Result<std::vector<FieldError>> FleetServer::ResolveInputs(const Principal& principal,
                                                           JobSpec* spec) {
  std::vector<FieldError> errors;
  for (size_t index = 0; index < spec->inputs.size(); ++index) {
    JobInput& input = spec->inputs[index];
    const std::string field = "inputs[" + std::to_string(index) + "]";
    input.manifest_digest.clear();
    if (input.dataset.empty()) {
      input.bytes = std::max<int64_t>(input.size, 0);
      input.objects = 1;
      continue;
    }
    FERRY_ASSIGN_OR_RAISE(std::optional<DatasetVersion> version,
                          store_->GetDatasetVersion(principal.tenant_id, input.dataset,
                                                    input.version, /*with_objects=*/false));
    if (!version) {
      bool exists = false;
      if (input.version > 0) {
        FERRY_ASSIGN_OR_RAISE(std::optional<DatasetVersion> latest,
                              store_->GetDatasetVersion(principal.tenant_id, input.dataset, 0,
                                                        /*with_objects=*/false));
        exists = latest.has_value();
      }
      errors.push_back(
          {exists ? field + ".version" : field + ".dataset",
           "input \"" + input.name + "\": " +
               (exists ? "dataset " + input.dataset + " has no version " +
                             std::to_string(input.version)
                       : "no dataset " + input.dataset + " in tenant " + principal.tenant)});
      continue;
    }
    input.version = version->version;
    input.manifest_digest = version->digest;
    input.bytes = version->bytes;
    input.objects = version->object_count;
    // The locality hint (scheduling scores nodes that hold these data sets).
    if (std::find(spec->datasets.begin(), spec->datasets.end(), input.dataset) ==
            spec->datasets.end() &&
        spec->datasets.size() < static_cast<size_t>(JobSpec::kMaxDatasets)) {
      spec->datasets.push_back(input.dataset);
    }
  }
  return errors;
}

}  // namespace ferry::fleet::server_internal
