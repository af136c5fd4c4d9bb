// Stage-in throughput: stages one manifest (the objects of a dataset, as
// JSON) into a node cache with the agent's staging code and prints one JSON
// line per run: seconds, bytes, bytes fetched and bytes served from the
// cache. bench/fleet/staging_run.sh runs it next to rclone and fio.
//
//   ferry_staging_bench --manifest M.json --cache-dir D [--storage-config F]
//                       [--runs N] [--cold] [--parallelism P] [--read]
//
// --cold empties the cache before each run (every byte fetched); without it
// the first run fills the cache and the rest are hits. --read also reads
// every staged byte back through the staged tree (1 MiB reads) and times it.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ferry/fleet/staging.h"

namespace {

using ferry::fleet::StagedInput;
using ferry::fleet::StagedObject;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Reads every regular file under `dir` (following the staged links); bytes read.
int64_t ReadTree(const std::string& dir) {
  std::vector<char> buffer(1 << 20);
  int64_t total = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const int fd = open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n;
    while ((n = read(fd, buffer.data(), buffer.size())) > 0) total += n;
    close(fd);
  }
  return total;
}

int Usage() {
  std::cerr << "usage: ferry_staging_bench --manifest M.json --cache-dir D [--storage-config F] "
               "[--runs N] [--cold] [--parallelism P] [--read]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string manifest_path, cache_dir, storage_path;
  int runs = 3;
  int parallelism = 4;
  bool cold = false;
  bool read_back = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--manifest") {
      manifest_path = value();
    } else if (arg == "--cache-dir") {
      cache_dir = value();
    } else if (arg == "--storage-config") {
      storage_path = value();
    } else if (arg == "--runs") {
      runs = std::atoi(value().c_str());
    } else if (arg == "--parallelism") {
      parallelism = std::atoi(value().c_str());
    } else if (arg == "--cold") {
      cold = true;
    } else if (arg == "--read") {
      read_back = true;
    } else {
      return Usage();
    }
  }
  if (manifest_path.empty() || cache_dir.empty() || runs < 1 || parallelism < 1) return Usage();

  // {"source": "s3://b/p/", "objects": [{"path", "size", "sha256"}]}
  std::ifstream in(manifest_path);
  const nlohmann::json manifest = nlohmann::json::parse(in, nullptr, false);
  if (!manifest.is_object() || !manifest.contains("objects")) {
    std::cerr << manifest_path << ": not a manifest\n";
    return 2;
  }
  StagedInput input;
  input.name = "data";
  for (const auto& o : manifest["objects"]) {
    input.objects.push_back(StagedObject{
        o["path"], manifest["source"].get<std::string>() + o["path"].get<std::string>(), o["size"],
        o["sha256"]});
  }
  ferry::fleet::StorageConfig storage;
  if (!storage_path.empty()) {
    auto loaded = ferry::fleet::LoadStorageConfig(storage_path);
    if (!loaded.ok()) {
      std::cerr << loaded.status().ToString() << "\n";
      return 1;
    }
    storage = std::move(*loaded);
  }
  const ferry::fleet::ObjectFetcher fetcher(storage);
  ferry::fleet::StageOptions options;
  options.parallelism = parallelism;
  for (int run = 0; run < runs; ++run) {
    if (cold) std::filesystem::remove_all(cache_dir + "/objects");
    auto cache = ferry::fleet::ContentCache::Open({cache_dir, int64_t{1} << 50});
    if (!cache.ok()) {
      std::cerr << cache.status().ToString() << "\n";
      return 1;
    }
    const std::string dest = cache_dir + "/../staged-" + std::to_string(run);
    const auto started = std::chrono::steady_clock::now();
    auto result = ferry::fleet::StageInputs(cache->get(), fetcher, "bench", "run", {input}, dest,
                                            options, nullptr);
    const double stage_s = Seconds(started);
    if (!result.ok()) {
      std::cerr << result.status().ToString() << "\n";
      return 1;
    }
    nlohmann::json out = {{"run", run},
                          {"seconds", stage_s},
                          {"bytes", result->bytes},
                          {"fetched", result->bytes_fetched},
                          {"from_cache", result->bytes_from_cache}};
    if (read_back) {
      const auto read_started = std::chrono::steady_clock::now();
      out["read_bytes"] = ReadTree(dest);
      out["read_seconds"] = Seconds(read_started);
    }
    std::cout << out.dump() << std::endl;
    (*cache)->Release("run");
    ferry::fleet::RemoveStagedTree(dest);
  }
  return 0;
}
