// Staging a job's inputs on a node: fetching objects from object storage (S3
// protocol), HTTP(S) servers and shared file systems into a node-local,
// content-addressed cache, and laying them out read-only in the task's
// inputs directory. Used by `ferry agent`; docs/fleet-staging.md describes
// the behaviour users see.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/store.h"  // StagedObject, StagedInput

namespace ferry::fleet {

// An S3-compatible endpoint and the credentials the agent uses with it.
struct S3Endpoint {
  std::string name;      // for messages
  std::string endpoint;  // http(s)://host[:port], path-style requests
  std::string region = "us-east-1";
  std::vector<std::string> buckets;  // the buckets served here; empty: every bucket
  std::vector<std::string> tenants;  // tenants whose jobs may read through it; empty: all
  std::string access_key_id;
  std::string secret_access_key;
};

// Where a node may read from. Loaded from the agent's --storage-config file;
// credentials never come from a job spec.
struct StorageConfig {
  std::vector<S3Endpoint> s3;
  // file:// sources must lie under one of these directories; empty: file:// refused.
  std::vector<std::string> file_roots;
  bool allow_http = true;  // plain http:// sources (https:// always allowed)
  std::string ca_file;     // PEM CAs for https:// and https S3 endpoints; empty: the system's
  int64_t connect_timeout_ms = 10'000;
  // A transfer slower than 1 KiB/s for this long is abandoned (and retried).
  int64_t stall_timeout_ms = 30'000;
  // Each HTTP(S)/S3 download is held at or below this rate; 0: no limit.
  // Keeps staging from starving the node's network (checkpoints, NCCL).
  int64_t max_bytes_per_second = 0;
  // The Ferry server the agent syncs with (its --server URL, set by the
  // agent, not the YAML): requests for URLs under it carry the agent's
  // bearer token and are verified with its CA file (code bundles), and plain
  // http:// is allowed for it whatever allow_http says.
  std::string server_url;
  std::string server_token;
  std::string server_ca_file;
};

// Reads the YAML storage configuration (docs/fleet-staging.md#storage-configuration).
// Secrets are given as `*_file` (a file holding the value) or `*_env` (an
// environment variable), never inline.
Result<StorageConfig> LoadStorageConfig(const std::string& path);

// Splits "s3://bucket/key" into bucket and key; false if it is not one.
bool ParseS3Uri(const std::string& uri, std::string* bucket, std::string* key);

// Downloads objects. Thread-safe: each call uses its own transfer.
class ObjectFetcher {
 public:
  explicit ObjectFetcher(StorageConfig config);
  ~ObjectFetcher();
  ObjectFetcher(const ObjectFetcher&) = delete;
  ObjectFetcher& operator=(const ObjectFetcher&) = delete;

  // Calls `sink` with the bytes of `uri` from byte `offset` on, in order.
  // Sets *restarted when the source ignored the offset and sent the object
  // from its start (the caller must discard what it had). A sink returning
  // false aborts the transfer. `cancel` (may be null) aborts it too.
  using Sink = std::function<bool(const char* data, size_t size)>;
  Status Fetch(const std::string& tenant, const std::string& uri, int64_t offset, const Sink& sink,
               bool* restarted, const std::atomic<bool>* cancel) const;

  // Writes the file at `path` to `uri` (s3:// with a PUT, or file:// under a
  // file root, made whole by rename). Sets *sha256 to the digest of the
  // bytes sent (which differs from a digest taken before when the file
  // changed meanwhile).
  Status Upload(const std::string& tenant, const std::string& uri, const std::string& path,
                std::string* sha256) const;
  // A small object (a manifest) whole; nullopt when it does not exist.
  Result<std::optional<std::string>> ReadSmall(const std::string& tenant, const std::string& uri,
                                               size_t max_bytes) const;

  // The endpoint serving this bucket for this tenant, or an error naming why none does.
  Result<const S3Endpoint*> EndpointFor(const std::string& tenant, const std::string& bucket) const;

  const StorageConfig& config() const { return config_; }

 private:
  Status FetchHttp(const std::string& url, const S3Endpoint* signer, int64_t offset,
                   const Sink& sink, bool* restarted, const std::atomic<bool>* cancel,
                   long* http_status = nullptr) const;
  // The URL (and signer) of an s3:// URI for this tenant.
  Result<std::pair<std::string, const S3Endpoint*>> S3Url(const std::string& tenant,
                                                          const std::string& uri) const;
  Result<std::string> AllowedFile(const std::string& path, bool must_exist) const;
  Status FetchFile(const std::string& path, int64_t offset, const Sink& sink,
                   const std::atomic<bool>* cancel) const;

  StorageConfig config_;
};

struct CacheOptions {
  std::string dir;                   // created if missing
  int64_t quota_bytes = 10LL << 30;  // complete entries are kept at or below this
};

// Counters since the cache was opened (the agent exports them).
struct CacheStats {
  int64_t hits = 0;           // objects found in the cache
  int64_t misses = 0;         // objects fetched
  int64_t bytes_hit = 0;      // bytes served from the cache
  int64_t bytes_fetched = 0;  // bytes downloaded (resumed downloads count what was new)
  int64_t bytes_resumed = 0;  // bytes of partial downloads reused after a restart
  int64_t evictions = 0;
  int64_t bytes_evicted = 0;
  int64_t corrupt = 0;   // downloads refused: digest or size mismatch
  int64_t tampered = 0;  // entries found changed on disk and dropped
  int64_t entries = 0;
  int64_t bytes_used = 0;    // complete entries
  int64_t bytes_pinned = 0;  // held by a job that runs or is being staged
  int64_t quota_bytes = 0;
  uint64_t generation = 0;  // grows whenever an entry is added or removed
};

// A node-local, content-addressed object cache. Entries are named by tenant
// and SHA-256 and are immutable files (mode 0444) under <dir>/objects; a
// download goes to <dir>/partial first and becomes an entry only after its
// digest matched (fsync, then rename), so a killed agent leaves either a
// complete entry or a partial download that the next fetch resumes. Holders
// (a job's attempt) pin the entries they use; eviction, least recently used
// first, never takes a pinned entry. Thread-safe; concurrent requests for
// one object share one download.
class ContentCache {
 public:
  static Result<std::unique_ptr<ContentCache>> Open(CacheOptions options);
  ~ContentCache();
  ContentCache(const ContentCache&) = delete;
  ContentCache& operator=(const ContentCache&) = delete;

  struct Acquired {
    std::string path;  // the entry's file
    bool hit = false;  // already present (or fetched by a concurrent request)
    int64_t size = 0;
    int64_t fetched = 0;  // bytes this call downloaded
  };
  // Makes `object` present for `tenant` and pins it for `holder`.
  Result<Acquired> Acquire(const std::string& tenant, const StagedObject& object,
                           const std::string& holder, const ObjectFetcher& fetcher,
                           const std::atomic<bool>* cancel);
  // Unpins everything `holder` pinned.
  void Release(const std::string& holder);

  // Bytes of these objects the cache holds now for `tenant`.
  int64_t PresentBytes(const std::string& tenant, const std::vector<StagedObject>& objects) const;
  CacheStats Stats() const;
  const std::string& dir() const { return options_.dir; }

 private:
  explicit ContentCache(CacheOptions options);
  struct Entry {
    int64_t size = 0;
    int64_t mtime_ns = 0;  // as written; a changed file is dropped, not served
    uint64_t last_use = 0;
    std::set<std::string> holders;
  };
  std::string Key(const std::string& tenant, const std::string& sha256) const;
  std::string EntryPath(const std::string& key) const;
  std::string PartialPath(const std::string& key) const;
  Status Scan();
  // With mu_ held: makes room for `bytes` more, evicting unpinned entries.
  Status ReserveLocked(int64_t bytes, const std::string& what);
  void DropLocked(const std::string& key, bool tampered);
  void PinLocked(const std::string& key, Entry* entry, const std::string& holder);
  Result<int64_t> Download(const std::string& tenant, const StagedObject& object,
                           const std::string& key, const ObjectFetcher& fetcher,
                           const std::atomic<bool>* cancel, int64_t* resumed);

  CacheOptions options_;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  std::map<std::string, Entry> entries_;
  std::set<std::pair<uint64_t, std::string>> lru_;     // unpinned entries by last use
  std::map<std::string, std::set<std::string>> pins_;  // holder -> keys
  std::set<std::string> in_flight_;
  int64_t reserved_ = 0;  // bytes of downloads in flight
  uint64_t clock_ = 0;
  uint64_t generation_ = 0;
  CacheStats stats_;
};

struct StageOptions {
  int parallelism = 4;       // objects fetched at once
  int attempts = 4;          // per object, then the staging fails
  int64_t backoff_ms = 500;  // doubled after each failed attempt
  int64_t max_backoff_ms = 8'000;
};

struct StageResult {
  int64_t objects = 0;
  int64_t bytes = 0;
  int64_t bytes_fetched = 0;
  int64_t bytes_from_cache = 0;
  int64_t duration_ms = 0;
  // "2 inputs, 3 objects, 1.2 GiB: 0.2 GiB fetched, 1.0 GiB from the node cache, in 1.8 s"
  std::string Summary(size_t inputs) const;
};

// Stages `inputs` for `holder` into `dest` (a directory this call creates
// afresh): every object acquired in the cache, retried with back-off, then
// linked (hard link, else symbolic link) at <dest>/<name>/<path>; the tree
// is left read-only. On failure nothing stays pinned and the error names the
// object and the last cause.
Result<StageResult> StageInputs(ContentCache* cache, const ObjectFetcher& fetcher,
                                const std::string& tenant, const std::string& holder,
                                const std::vector<StagedInput>& inputs, const std::string& dest,
                                const StageOptions& options, const std::atomic<bool>* cancel);

// Acquires every object of `inputs` in the cache for `holder`, with the
// retries of StageInputs, and lays nothing out: a node fetching ahead for a
// job that has not started (prefetch). The pins stay until Release(holder);
// on failure nothing stays pinned.
Result<StageResult> FetchInputs(ContentCache* cache, const ObjectFetcher& fetcher,
                                const std::string& tenant, const std::string& holder,
                                const std::vector<StagedInput>& inputs, const StageOptions& options,
                                const std::atomic<bool>* cancel);

// Removes a staged tree (making its directories writable first).
void RemoveStagedTree(const std::string& dest);

// "123", "500K", "500M", "20G", "2T" (binary multiples; "GiB"/"G"/"g" alike) as bytes.
Result<int64_t> ParseByteSize(const std::string& text);

// "1.2 GiB", "340 MiB", "12 KiB", "5 B".
std::string FormatBytes(int64_t bytes);

}  // namespace ferry::fleet
