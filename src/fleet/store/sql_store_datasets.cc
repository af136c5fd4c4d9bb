// Datasets: immutable, numbered versions of a tenant's manifests. A version
// row carries the summary (source, bytes, object count, digest); its objects
// are rows of dataset_objects, written in batches.
#include "fleet/store/sql_store.h"

namespace ferry::fleet::store_internal {

namespace {

// Columns of a version summary, in the order VersionFromRow reads them.
constexpr const char* kVersionSelect =
    "SELECT v.id, v.tenant_id, tn.name, v.name, v.version, v.source, v.description, v.bytes,"
    " v.object_count, v.digest, v.created_at_ms, u.name FROM dataset_versions v"
    " JOIN tenants tn ON tn.id = v.tenant_id JOIN users u ON u.id = v.created_by";

// Objects per INSERT: three parameters each, well under SQLite's and
// PostgreSQL's limits on bound parameters.
constexpr size_t kObjectsPerInsert = 500;

DatasetVersion VersionFromRow(const Row& row) {
  DatasetVersion out;
  out.tenant_id = row.Int(1);
  out.tenant = row.Text(2);
  out.name = row.Text(3);
  out.version = row.Int(4);
  out.source = row.Text(5);
  out.description = row.Text(6);
  out.bytes = row.Int(7);
  out.object_count = row.Int(8);
  out.digest = row.Text(9);
  out.created_at_ms = row.Int(10);
  out.created_by = row.Text(11);
  return out;
}

Status LoadObjects(Connection& c, int64_t version_id, DatasetVersion* version) {
  FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query("SELECT path, size, sha256 FROM dataset_objects"
                                           " WHERE version_id = ? ORDER BY path",
                                           {version_id}));
  version->objects.clear();
  version->objects.reserve(rows.size());
  for (const Row& row : rows.rows) {
    version->objects.push_back({row.Text(0), row.Int(1), row.Text(2)});
  }
  // ORDER BY follows the database's collation; the manifest's order is bytewise.
  std::sort(version->objects.begin(), version->objects.end(),
            [](const DatasetObject& a, const DatasetObject& b) { return a.path < b.path; });
  return Status::OK();
}

// The newest version of (tenant, name): its row id and summary.
Result<std::optional<std::pair<int64_t, DatasetVersion>>> FindVersion(Connection& c,
                                                                      int64_t tenant_id,
                                                                      const std::string& name,
                                                                      int64_t version) {
  std::string sql = std::string(kVersionSelect) + " WHERE v.tenant_id = ? AND v.name = ?";
  Params params{tenant_id, name};
  if (version > 0) {
    sql += " AND v.version = ?";
    params.emplace_back(version);
  } else {
    sql += " ORDER BY v.version DESC LIMIT 1";
  }
  FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(sql, params));
  if (rows.empty()) return std::optional<std::pair<int64_t, DatasetVersion>>();
  return std::optional<std::pair<int64_t, DatasetVersion>>(
      std::make_pair(rows[0].Int(0), VersionFromRow(rows[0])));
}

}  // namespace

Result<DatasetCreateResult> SqlStore::CreateDatasetVersion(const Principal& creator,
                                                           const DatasetVersion& manifest,
                                                           int64_t now_ms) {
  if (manifest.objects.empty()) return Status::Invalid("a dataset version needs objects");
  if (manifest.digest != ManifestDigest(manifest.source, manifest.objects)) {
    return Status::Invalid("the manifest's digest does not match its objects");
  }
  DatasetCreateResult result;
  // Two registrations racing for the same number: the loser's insert hits
  // the unique (tenant, name, version) and its retry sees the winner's version.
  FERRY_RETURN_NOT_OK(Run(true, /*retry_unique=*/true, [&](Connection& c) -> Status {
    result = DatasetCreateResult{};
    FERRY_ASSIGN_OR_RAISE(auto latest, FindVersion(c, creator.tenant_id, manifest.name, 0));
    if (latest && latest->second.digest == manifest.digest) {
      result.created = false;
      result.version = std::move(latest->second);
      return LoadObjects(c, latest->first, &result.version);
    }
    const int64_t number = latest ? latest->second.version + 1 : 1;
    FERRY_ASSIGN_OR_RAISE(
        Rows inserted,
        c.Query("INSERT INTO dataset_versions (tenant_id, name, version, source, description,"
                " bytes, object_count, digest, created_at_ms, created_by)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                {creator.tenant_id, manifest.name, number, manifest.source, manifest.description,
                 manifest.bytes, static_cast<int64_t>(manifest.objects.size()), manifest.digest,
                 now_ms, creator.user_id}));
    const int64_t version_id = inserted[0].Int(0);
    for (size_t start = 0; start < manifest.objects.size(); start += kObjectsPerInsert) {
      const size_t end = std::min(manifest.objects.size(), start + kObjectsPerInsert);
      std::string sql = "INSERT INTO dataset_objects (version_id, path, size, sha256) VALUES ";
      Params params;
      params.reserve((end - start) * 4);
      for (size_t index = start; index < end; ++index) {
        const DatasetObject& object = manifest.objects[index];
        sql += index == start ? "(?, ?, ?, ?)" : ", (?, ?, ?, ?)";
        params.emplace_back(version_id);
        params.emplace_back(object.path);
        params.emplace_back(object.size);
        params.emplace_back(object.sha256);
      }
      FERRY_RETURN_NOT_OK(c.Query(sql, params).status());
    }
    FERRY_ASSIGN_OR_RAISE(auto stored, FindVersion(c, creator.tenant_id, manifest.name, number));
    if (!stored) return Status::UnknownError("store: the new dataset version vanished");
    result.version = std::move(stored->second);
    result.version.objects = manifest.objects;
    return Status::OK();
  }));
  return result;
}

Result<std::optional<DatasetVersion>> SqlStore::GetDatasetVersion(int64_t tenant_id,
                                                                  const std::string& name,
                                                                  int64_t version,
                                                                  bool with_objects) {
  std::optional<DatasetVersion> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    out.reset();
    FERRY_ASSIGN_OR_RAISE(auto found, FindVersion(c, tenant_id, name, version));
    if (!found) return Status::OK();
    out = std::move(found->second);
    if (with_objects) return LoadObjects(c, found->first, &*out);
    return Status::OK();
  }));
  return out;
}

Result<std::vector<DatasetVersion>> SqlStore::ListDatasets(const Scope& scope) {
  std::vector<DatasetVersion> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    out.clear();
    std::string sql = std::string(kVersionSelect) +
                      " WHERE v.version = (SELECT MAX(w.version) FROM dataset_versions w"
                      " WHERE w.tenant_id = v.tenant_id AND w.name = v.name)";
    Params params;
    if (scope.tenant_id) {
      sql += " AND v.tenant_id = ?";
      params.emplace_back(*scope.tenant_id);
    }
    sql += " ORDER BY tn.name, v.name";
    FERRY_ASSIGN_OR_RAISE(Rows rows, c.Query(sql, params));
    out.reserve(rows.size());
    for (const Row& row : rows.rows) out.push_back(VersionFromRow(row));
    return Status::OK();
  }));
  return out;
}

Result<std::vector<DatasetVersion>> SqlStore::ListDatasetVersions(int64_t tenant_id,
                                                                  const std::string& name) {
  std::vector<DatasetVersion> out;
  FERRY_RETURN_NOT_OK(Run(false, [&](Connection& c) -> Status {
    out.clear();
    FERRY_ASSIGN_OR_RAISE(Rows rows,
                          c.Query(std::string(kVersionSelect) +
                                      " WHERE v.tenant_id = ? AND v.name = ? ORDER BY v.version",
                                  {tenant_id, name}));
    out.reserve(rows.size());
    for (const Row& row : rows.rows) out.push_back(VersionFromRow(row));
    return Status::OK();
  }));
  return out;
}

}  // namespace ferry::fleet::store_internal
