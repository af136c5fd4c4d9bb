#include "cli/dataset_cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <system_error>
#include <vector>

#include "cli/fleet_cli.h"
#include "ferry/base/hash.h"

namespace ferry::cli {

using nlohmann::json;

namespace {

int Usage(const std::string& message) {
  std::cerr << "ferry: " << message << "\n";
  return kExitUsage;
}

int Failed(const Status& status) {
  std::cerr << "ferry: " << status.message() << "\n";
  return kExitApiError;
}

std::string Text(const json& object, const char* key) {
  if (!object.is_object()) return "-";
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// 1234567 -> "1.2 MiB".
std::string FormatBytes(const json& value) {
  if (!value.is_number_integer()) return "-";
  double bytes = value.get<double>();
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t unit = 0;
  while (bytes >= 1024 && unit + 1 < std::size(kUnits)) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[unit]);
  return text;
}

bool AllDigits(const std::string& text) {
  return !text.empty() && text.size() <= 15 &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Result<std::string> HashFile(const std::filesystem::path& path, int64_t* size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path.string() + ": " + std::strerror(errno));
  Sha256Stream hash;
  std::vector<char> buffer(1 << 20);
  *size = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    hash.Update({buffer.data(), static_cast<size_t>(got)});
    *size += got;
  }
  if (in.bad()) return Status::IOError("cannot read " + path.string());
  return hash.FinishHex();
}

}  // namespace

Result<std::pair<std::string, int64_t>> ParseDatasetRef(const std::string& text) {
  const size_t at = text.rfind('@');
  if (at == std::string::npos) {
    if (text.empty()) return Status::Invalid("a dataset name is required");
    return std::make_pair(text, int64_t{0});
  }
  const std::string name = text.substr(0, at);
  const std::string version = text.substr(at + 1);
  if (name.empty() || !AllDigits(version) || std::stoll(version) < 1) {
    return Status::Invalid("expected NAME or NAME@VERSION (a version from 1), got '" + text + "'");
  }
  return std::make_pair(name, static_cast<int64_t>(std::stoll(version)));
}

Result<json> ParseInputFlag(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return Status::Invalid("--input expects NAME=DATASET[@VERSION] or NAME=URI#sha256=HEX, got '" +
                           text + "'");
  }
  const std::string name = text.substr(0, eq);
  const std::string what = text.substr(eq + 1);
  if (what.find("://") != std::string::npos) {
    const std::string marker = "#sha256=";
    const size_t hash = what.rfind(marker);
    if (hash == std::string::npos || hash + marker.size() == what.size()) {
      return Status::Invalid("--input " + name + ": a URI input needs its digest: " + name +
                             "=URI#sha256=HEX");
    }
    return json{{"name", name},
                {"uri", what.substr(0, hash)},
                {"sha256", what.substr(hash + marker.size())}};
  }
  auto ref = ParseDatasetRef(what);
  if (!ref.ok()) return ref.status().WithPrefix("--input " + name + ": ");
  json input = {{"name", name}, {"dataset", ref->first}};
  if (ref->second > 0) input["version"] = ref->second;
  return input;
}

Result<json> ManifestObjectsFromJson(const std::string& text, const std::string& file_name) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Status::Invalid(file_name + ": not valid JSON");
  if (parsed.is_object() && parsed.contains("objects")) parsed = parsed["objects"];
  if (!parsed.is_array()) {
    return Status::Invalid(file_name +
                           ": expected {\"objects\": [...]} or an array of {\"path\", \"size\", "
                           "\"sha256\"}");
  }
  return parsed;
}

Result<json> ManifestObjectsFromDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return Status::Invalid(dir + ": not a directory");
  std::vector<std::pair<std::string, fs::path>> files;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, error);
  if (error) return Status::IOError("cannot list " + dir + ": " + error.message());
  for (const fs::recursive_directory_iterator end; it != end; it.increment(error)) {
    if (error) return Status::IOError("cannot list " + dir + ": " + error.message());
    if (!it->is_regular_file(error) || it->is_symlink(error)) continue;
    files.emplace_back(fs::relative(it->path(), dir, error).generic_string(), it->path());
  }
  if (error) return Status::IOError("cannot list " + dir + ": " + error.message());
  if (files.empty()) return Status::Invalid(dir + ": no regular files to register");
  std::sort(files.begin(), files.end());
  json objects = json::array();
  for (const auto& [relative, path] : files) {
    int64_t size = 0;
    FERRY_ASSIGN_OR_RAISE(std::string digest, HashFile(path, &size));
    objects.push_back({{"path", relative}, {"size", size}, {"sha256", digest}});
  }
  return objects;
}

int DatasetCreate(fleet::Client& client, const DatasetCreateArgs& args, bool json_output) {
  if (args.manifest_file.empty() == args.from_dir.empty()) {
    return Usage("dataset create: give exactly one of --manifest FILE and --from-dir DIR");
  }
  json objects;
  if (!args.manifest_file.empty()) {
    std::ifstream in(args.manifest_file);
    if (!in) return Usage("cannot read manifest " + args.manifest_file);
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = ManifestObjectsFromJson(text.str(), args.manifest_file);
    if (!parsed.ok()) return Usage(parsed.status().message());
    objects = std::move(*parsed);
  } else {
    auto walked = ManifestObjectsFromDir(args.from_dir);
    if (!walked.ok()) return Usage(walked.status().message());
    objects = std::move(*walked);
  }
  json body = {{"name", args.name}, {"source", args.source}, {"objects", std::move(objects)}};
  if (!args.description.empty()) body["description"] = args.description;
  auto response = client.Post("/v1/datasets", body);
  if (!response.ok()) return Failed(response.status());
  const json& version = response->body;
  if (json_output) {
    std::cout << version.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "dataset " << Text(version, "name") << "@" << Text(version, "version") << ": "
            << Text(version, "objects")
            << (Text(version, "objects") == "1" ? " object, " : " objects, ")
            << FormatBytes(version.value("bytes", json())) << ", " << Text(version, "digest")
            << (response->status == 200 ? " (unchanged: same as the latest version)" : "") << "\n";
  return kExitOk;
}

int DatasetList(fleet::Client& client, bool json_output) {
  auto response = client.Get("/v1/datasets");
  if (!response.ok()) return Failed(response.status());
  if (json_output) {
    std::cout << response->body.dump(2) << "\n";
    return kExitOk;
  }
  const json datasets = response->body.value("datasets", json::array());
  const bool tenants = std::any_of(datasets.begin(), datasets.end(),
                                   [](const json& d) { return d.contains("tenant"); });
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NAME", "LATEST", "OBJECTS", "BYTES", "CREATED", "BY"});
  if (tenants) rows.front().insert(rows.front().begin(), "TENANT");
  for (const json& dataset : datasets) {
    std::vector<std::string> row = {
        Text(dataset, "name"),       Text(dataset, "version"),
        Text(dataset, "objects"),    FormatBytes(dataset.value("bytes", json())),
        Text(dataset, "created_at"), Text(dataset, "created_by")};
    if (tenants) row.insert(row.begin(), Text(dataset, "tenant"));
    rows.push_back(std::move(row));
  }
  std::cout << FormatTable(rows);
  return kExitOk;
}

int DatasetShow(fleet::Client& client, const std::string& ref, bool json_output) {
  auto parsed = ParseDatasetRef(ref);
  if (!parsed.ok()) return Usage("dataset show: " + parsed.status().message());
  const auto& [name, number] = *parsed;
  const std::string path = "/v1/datasets/" + fleet::UrlEncode(name);
  auto response = client.Get(number > 0 ? path + "/versions/" + std::to_string(number) : path);
  if (!response.ok()) return Failed(response.status());
  const json& body = response->body;
  if (json_output) {
    std::cout << body.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "dataset      " << Text(body, "name") << "@" << Text(body, "version") << "\n"
            << "source       " << Text(body, "source") << "\n"
            << "objects      " << Text(body, "objects") << " ("
            << FormatBytes(body.value("bytes", json())) << ")\n"
            << "digest       " << Text(body, "digest") << "\n"
            << "created      " << Text(body, "created_at") << " by " << Text(body, "created_by")
            << "\n";
  const json description = body.value("description", json());
  if (description.is_string() && !description.get<std::string>().empty()) {
    std::cout << "description  " << description.get<std::string>() << "\n";
  }
  std::vector<std::vector<std::string>> rows;
  if (body.contains("versions")) {
    rows.push_back({"VERSION", "OBJECTS", "BYTES", "DIGEST", "CREATED", "BY"});
    for (const json& version : body["versions"]) {
      rows.push_back({Text(version, "version"), Text(version, "objects"),
                      FormatBytes(version.value("bytes", json())), Text(version, "digest"),
                      Text(version, "created_at"), Text(version, "created_by")});
    }
  } else {
    rows.push_back({"PATH", "SIZE", "SHA256"});
    for (const json& object : body.value("manifest", json::array())) {
      rows.push_back({Text(object, "path"), Text(object, "size"), Text(object, "sha256")});
    }
  }
  std::cout << "\n" << FormatTable(rows);
  return kExitOk;
}

}  // namespace ferry::cli
