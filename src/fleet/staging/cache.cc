// ContentCache (staging.h): the node-local, content-addressed object cache.
//
// <dir>/objects/<tenant>/<sha256>   complete, verified entries (mode 0444)
// <dir>/partial/<tenant>/<sha256>   downloads in progress or cut short
//
// <tenant> is the first 16 hex digits of the SHA-256 of the tenant's name,
// so one tenant's entries never serve another's jobs. An entry is created by
// rename() after its bytes hashed to its name and were fsynced, so a crash
// leaves no entry that is not whole. The LRU order survives restarts through
// each entry's access time, which the cache sets itself on every use.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>
#include <string_view>
#include <utility>

#include "ferry/base/hash.h"
#include "ferry/fleet/staging.h"
#include "fleet/staging/fs_util.h"

namespace ferry::fleet {
namespace {

using staging_internal::ListDir;
using staging_internal::MakeDirs;

constexpr int64_t kStalePartialSeconds = int64_t{24} * 3600;

bool IsDigest(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

void FsyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

Status WriteAll(int fd, const char* data, size_t size, int64_t at) {
  while (size > 0) {
    const ssize_t n = pwrite(fd, data, size, at);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(std::string("write: ") + std::strerror(errno));
    }
    data += n;
    size -= static_cast<size_t>(n);
    at += n;
  }
  return Status::OK();
}

}  // namespace

ContentCache::ContentCache(CacheOptions options) : options_(std::move(options)) {}
ContentCache::~ContentCache() = default;

Result<std::unique_ptr<ContentCache>> ContentCache::Open(CacheOptions options) {
  if (options.dir.empty()) return Status::Invalid("the cache needs a directory");
  if (options.quota_bytes <= 0) return Status::Invalid("the cache quota must be above 0");
  while (options.dir.size() > 1 && options.dir.back() == '/') options.dir.pop_back();
  std::unique_ptr<ContentCache> cache(new ContentCache(std::move(options)));
  FERRY_RETURN_NOT_OK(MakeDirs(cache->options_.dir + "/objects"));
  FERRY_RETURN_NOT_OK(MakeDirs(cache->options_.dir + "/partial"));
  FERRY_RETURN_NOT_OK(cache->Scan());
  return cache;
}

std::string ContentCache::Key(const std::string& tenant, const std::string& sha256) const {
  return Sha256Hex(tenant).substr(0, 16) + "/" + sha256;
}
std::string ContentCache::EntryPath(const std::string& key) const {
  return options_.dir + "/objects/" + key;
}
std::string ContentCache::PartialPath(const std::string& key) const {
  return options_.dir + "/partial/" + key;
}

Status ContentCache::Scan() {
  std::lock_guard<std::mutex> lock(mu_);
  // Entries, oldest use first, so the clock replays the LRU order.
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& tenant : ListDir(options_.dir + "/objects")) {
    for (const std::string& name : ListDir(options_.dir + "/objects/" + tenant)) {
      const std::string key = tenant + "/" + name;
      struct stat st {};
      if (!IsDigest(name) || stat(EntryPath(key).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        continue;
      }
      Entry entry;
      entry.size = st.st_size;
      entry.mtime_ns = MtimeNs(st);
      entries_.emplace(key, entry);
      found.emplace_back(
          static_cast<int64_t>(st.st_atim.tv_sec) * 1'000'000'000 + st.st_atim.tv_nsec, key);
    }
  }
  std::sort(found.begin(), found.end());
  for (const auto& [atime, key] : found) {
    Entry& entry = entries_[key];
    entry.last_use = ++clock_;
    lru_.emplace(entry.last_use, key);
    stats_.bytes_used += entry.size;
  }
  // Partial downloads are kept for resuming, unless nobody came back for a day.
  const int64_t now = std::time(nullptr);
  for (const std::string& tenant : ListDir(options_.dir + "/partial")) {
    for (const std::string& name : ListDir(options_.dir + "/partial/" + tenant)) {
      const std::string path = PartialPath(tenant + "/" + name);
      struct stat st {};
      if (stat(path.c_str(), &st) == 0 &&
          (!IsDigest(name) || now - st.st_mtim.tv_sec > kStalePartialSeconds)) {
        unlink(path.c_str());
      }
    }
  }
  // A quota lowered since the last run.
  return ReserveLocked(0, "the cache at start");
}

void ContentCache::PinLocked(const std::string& key, Entry* entry, const std::string& holder) {
  if (entry->holders.empty()) lru_.erase({entry->last_use, key});
  entry->holders.insert(holder);
  entry->last_use = ++clock_;
  pins_[holder].insert(key);
  // The on-disk LRU stamp: the access time, set explicitly (relatime would skip it).
  struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  utimensat(AT_FDCWD, EntryPath(key).c_str(), times, 0);
}

void ContentCache::DropLocked(const std::string& key, bool tampered) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  if (it->second.holders.empty()) lru_.erase({it->second.last_use, key});
  for (const std::string& holder : it->second.holders) pins_[holder].erase(key);
  stats_.bytes_used -= it->second.size;
  ++generation_;
  if (tampered) {
    ++stats_.tampered;
  } else {
    ++stats_.evictions;
    stats_.bytes_evicted += it->second.size;
  }
  unlink(EntryPath(key).c_str());
  entries_.erase(it);
}

Status ContentCache::ReserveLocked(int64_t bytes, const std::string& what) {
  while (stats_.bytes_used + reserved_ + bytes > options_.quota_bytes) {
    if (lru_.empty()) {
      int64_t pinned = 0;
      for (const auto& [key, entry] : entries_) {
        if (!entry.holders.empty()) pinned += entry.size;
      }
      return Status::IOError("no room in the node cache for " + what + " (" + FormatBytes(bytes) +
                             "): quota " + FormatBytes(options_.quota_bytes) + ", " +
                             FormatBytes(pinned) + " held by staged or running jobs, " +
                             FormatBytes(reserved_) + " being downloaded");
    }
    const std::string victim = lru_.begin()->second;
    DropLocked(victim, false);
  }
  return Status::OK();
}

Result<ContentCache::Acquired> ContentCache::Acquire(const std::string& tenant,
                                                     const StagedObject& object,
                                                     const std::string& holder,
                                                     const ObjectFetcher& fetcher,
                                                     const std::atomic<bool>* cancel) {
  if (!IsDigest(object.sha256)) {
    return Status::Invalid(object.uri + ": sha256 must be 64 lower-case hex digits");
  }
  const std::string key = Key(tenant, object.sha256);
  const std::string path = EntryPath(key);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      struct stat st {};
      if (stat(path.c_str(), &st) != 0 || st.st_size != it->second.size ||
          MtimeNs(st) != it->second.mtime_ns || (object.size >= 0 && object.size != st.st_size)) {
        DropLocked(key, true);  // changed under us (or gone): fetch it again
        continue;
      }
      PinLocked(key, &it->second, holder);
      ++stats_.hits;
      stats_.bytes_hit += it->second.size;
      return Acquired{path, true, it->second.size, 0};
    }
    if (in_flight_.count(key) == 0) break;
    done_cv_.wait_for(lock,
                      std::chrono::milliseconds(100));  // another job fetches it: share its copy
    if (cancel != nullptr && cancel->load()) return Status::Cancelled("staging cancelled");
  }
  if (object.size > options_.quota_bytes) {
    return Status::IOError(object.uri + " (" + FormatBytes(object.size) +
                           ") is larger than the node cache's quota (" +
                           FormatBytes(options_.quota_bytes) + ")");
  }
  const int64_t reserve = std::max<int64_t>(object.size, 0);
  FERRY_RETURN_NOT_OK(ReserveLocked(reserve, object.uri));
  in_flight_.insert(key);
  reserved_ += reserve;
  lock.unlock();

  int64_t resumed = 0;
  Result<int64_t> size = Download(tenant, object, key, fetcher, cancel, &resumed);

  lock.lock();
  in_flight_.erase(key);
  reserved_ -= reserve;
  done_cv_.notify_all();
  stats_.bytes_resumed += resumed;
  if (!size.ok()) return size.status();
  if (object.size < 0) {
    Status room = ReserveLocked(*size, object.uri);
    if (!room.ok()) {
      unlink(path.c_str());
      return room;
    }
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return Status::IOError(path + ": vanished after download: " + std::strerror(errno));
  }
  Entry& entry = entries_[key];
  entry.size = *size;
  entry.mtime_ns = MtimeNs(st);
  entry.last_use = ++clock_;
  lru_.emplace(entry.last_use, key);
  stats_.bytes_used += entry.size;
  ++generation_;
  ++stats_.misses;
  const int64_t fetched = *size - resumed;
  stats_.bytes_fetched += fetched;
  PinLocked(key, &entry, holder);
  return Acquired{path, false, *size, fetched};
}

Result<int64_t> ContentCache::Download(const std::string& tenant, const StagedObject& object,
                                       const std::string& key, const ObjectFetcher& fetcher,
                                       const std::atomic<bool>* cancel, int64_t* resumed) {
  const std::string partial = PartialPath(key);
  const std::string entry = EntryPath(key);
  FERRY_RETURN_NOT_OK(MakeDirs(partial.substr(0, partial.rfind('/'))));
  FERRY_RETURN_NOT_OK(MakeDirs(entry.substr(0, entry.rfind('/'))));
  const int fd = open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("cannot open " + partial + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};

  auto hash = std::make_unique<Sha256Stream>();
  struct stat st {};
  fstat(fd, &st);
  int64_t written = st.st_size;
  if (object.size >= 0 && written > object.size) written = 0;
  if (written > 0) {
    // Resume: the bytes already here go through the hash first.
    std::vector<char> buffer(1 << 20);
    int64_t at = 0;
    while (at < written) {
      const ssize_t n =
          pread(fd, buffer.data(), std::min<int64_t>(buffer.size(), written - at), at);
      if (n <= 0) {
        written = at;
        break;
      }
      hash->Update(std::string_view(buffer.data(), static_cast<size_t>(n)));
      at += n;
    }
  }
  if (ftruncate(fd, written) != 0) {
    return Status::IOError("cannot truncate " + partial + ": " + std::strerror(errno));
  }
  *resumed = written;

  bool too_long = false;
  Status write_error;
  // A partial download as long as the object (the agent died before the
  // rename) needs no transfer: its digest decides.
  const bool whole = object.size >= 0 && written == object.size && written > 0;
  for (int round = whole ? 2 : 0; round < 2; ++round) {
    bool restarted = false;
    bool reset = false;
    const int64_t from = written;
    Status fetched = fetcher.Fetch(
        tenant, object.uri, from,
        [&](const char* data, size_t size) {
          if (restarted && !reset) {
            // The source sent the whole object: start over.
            reset = true;
            hash = std::make_unique<Sha256Stream>();
            written = 0;
            *resumed = 0;
            if (ftruncate(fd, 0) != 0) {
              write_error = Status::IOError(std::string("truncate: ") + std::strerror(errno));
              return false;
            }
          }
          if (object.size >= 0 && written + static_cast<int64_t>(size) > object.size) {
            too_long = true;
            return false;
          }
          write_error = WriteAll(fd, data, size, written);
          if (!write_error.ok()) return false;
          hash->Update(std::string_view(data, size));
          written += static_cast<int64_t>(size);
          return true;
        },
        &restarted, cancel);
    if (fetched.code() == StatusCode::kIndexError && restarted && round == 0) {
      // 416: what we hold is no prefix of the object; fetch it whole.
      hash = std::make_unique<Sha256Stream>();
      written = 0;
      *resumed = 0;
      if (ftruncate(fd, 0) != 0) return Status::IOError(std::strerror(errno));
      continue;
    }
    if (too_long) {
      unlink(partial.c_str());
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.corrupt;
      return Status::Invalid(object.uri + ": refused: longer than its declared size " +
                             std::to_string(object.size));
    }
    if (!write_error.ok()) return write_error.WithPrefix(partial + ": ");
    FERRY_RETURN_NOT_OK(fetched);
    break;
  }
  const std::string digest = hash->FinishHex();
  if (digest != object.sha256 || (object.size >= 0 && written != object.size)) {
    unlink(partial.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.corrupt;
    if (digest != object.sha256) {
      return Status::Invalid(object.uri + ": refused: its sha256 is " + digest +
                             ", the manifest says " + object.sha256);
    }
    return Status::Invalid(object.uri + ": refused: " + std::to_string(written) +
                           " bytes, the manifest says " + std::to_string(object.size));
  }
  if (fchmod(fd, 0444) != 0 || fsync(fd) != 0) {
    return Status::IOError(partial + ": " + std::strerror(errno));
  }
  if (rename(partial.c_str(), entry.c_str()) != 0) {
    return Status::IOError("cannot move " + partial + " into the cache: " + std::strerror(errno));
  }
  FsyncDir(entry.substr(0, entry.rfind('/')));
  return written;
}

void ContentCache::Release(const std::string& holder) {
  std::lock_guard<std::mutex> lock(mu_);
  auto pins = pins_.find(holder);
  if (pins == pins_.end()) return;
  for (const std::string& key : pins->second) {
    auto it = entries_.find(key);
    if (it == entries_.end()) continue;
    it->second.holders.erase(holder);
    if (it->second.holders.empty()) lru_.emplace(it->second.last_use, key);
  }
  pins_.erase(pins);
}

int64_t ContentCache::PresentBytes(const std::string& tenant,
                                   const std::vector<StagedObject>& objects) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t bytes = 0;
  std::set<std::string> counted;
  for (const StagedObject& object : objects) {
    const std::string key = Key(tenant, object.sha256);
    auto it = entries_.find(key);
    if (it != entries_.end() && counted.insert(key).second) bytes += it->second.size;
  }
  return bytes;
}

CacheStats ContentCache::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats out = stats_;
  out.entries = static_cast<int64_t>(entries_.size());
  out.quota_bytes = options_.quota_bytes;
  out.generation = generation_;
  out.bytes_pinned = 0;
  for (const auto& [key, entry] : entries_) {
    if (!entry.holders.empty()) out.bytes_pinned += entry.size;
  }
  return out;
}

}  // namespace ferry::fleet
