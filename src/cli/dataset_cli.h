// `ferry dataset create|list|show` and the `--input` flag of `ferry submit`
// (docs/fleet-cli.md#datasets): manifests read from a file or computed from a
// local directory, and their registration over the REST API.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "ferry/base/status.h"
#include "ferry/fleet/client.h"

namespace ferry::cli {

// `--input NAME=DATASET[@VERSION]` or `--input NAME=URI#sha256=HEX` as one
// item of the spec's "inputs" ({"name", "dataset", "version"} or {"name",
// "uri", "sha256"}). Only the form is checked here; the server checks the rest.
Result<nlohmann::json> ParseInputFlag(const std::string& text);

// "NAME" or "NAME@VERSION" (VERSION >= 1); version 0 when absent.
Result<std::pair<std::string, int64_t>> ParseDatasetRef(const std::string& text);

// A manifest file's objects: {"objects": [...]} or a bare array of
// {"path", "size", "sha256"}; `file_name` names it in errors.
Result<nlohmann::json> ManifestObjectsFromJson(const std::string& text,
                                               const std::string& file_name);

// The objects of every regular file under `dir` (symbolic links are not
// followed), by relative path in byte order, each with its size and SHA-256
// read from the file. Fails on an unreadable file or an empty directory.
Result<nlohmann::json> ManifestObjectsFromDir(const std::string& dir);

struct DatasetCreateArgs {
  std::string name;
  std::string source;
  std::string manifest_file;  // or
  std::string from_dir;
  std::string description;
};

// The commands; each prints its result (the server's JSON with
// `json_output`) and returns an exit code of fleet_cli.h.
int DatasetCreate(fleet::Client& client, const DatasetCreateArgs& args, bool json_output);
int DatasetList(fleet::Client& client, bool json_output);
int DatasetShow(fleet::Client& client, const std::string& ref, bool json_output);

}  // namespace ferry::cli
