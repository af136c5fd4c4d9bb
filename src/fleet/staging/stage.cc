// StageInputs (staging.h): a job's inputs acquired in the node cache, a few
// objects at a time, each retried with back-off, then laid out read-only
// under the attempt's inputs directory as links to the cache's entries.
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "ferry/fleet/staging.h"
#include "fleet/staging/fs_util.h"

namespace ferry::fleet {
namespace {

// A path inside an input's directory: relative, no "." or ".." parts, no
// empty parts, no control characters. The server checks manifests too; the
// agent does not rely on it.
bool SafeRelativePath(const std::string& path) {
  if (path.empty() || path.size() > 1024 || path.front() == '/') return false;
  size_t from = 0;
  while (from <= path.size()) {
    size_t slash = path.find('/', from);
    if (slash == std::string::npos) slash = path.size();
    const std::string part = path.substr(from, slash - from);
    if (part.empty() || part == "." || part == "..") return false;
    from = slash + 1;
  }
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

Status MakeParents(const std::string& root, const std::string& relative) {
  size_t slash = relative.find('/');
  while (slash != std::string::npos) {
    const std::string dir = root + "/" + relative.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::IOError("cannot create " + dir + ": " + std::strerror(errno));
    }
    slash = relative.find('/', slash + 1);
  }
  return Status::OK();
}

// Directories of the tree made read-only (bottom up), or writable again.
void ChmodTree(const std::string& dir, mode_t mode) {
  if (mode & S_IWUSR) chmod(dir.c_str(), mode);
  for (const std::string& name : staging_internal::ListDir(dir)) {
    const std::string child = dir + "/" + name;
    struct stat st {};
    if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ChmodTree(child, mode);
  }
  if (!(mode & S_IWUSR)) chmod(dir.c_str(), mode);
}

// Sleeps `ms`, waking early when `cancel` is set; false if it was.
bool SleepUnlessCancelled(int64_t ms, const std::atomic<bool>* cancel) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    if (cancel->load()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !cancel->load();
}

}  // namespace

Result<int64_t> ParseByteSize(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) {
    return Status::Invalid("'" + text + "' is not a size (e.g. 1073741824, 500M, 20G)");
  }
  const int64_t number = std::stoll(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() == 3 && unit.substr(1) == "IB") unit.resize(1);
  if (unit == "B") unit.clear();
  static const std::string kUnits = "KMGT";
  int shift = 0;
  if (!unit.empty()) {
    const size_t at = kUnits.find(unit);
    if (unit.size() != 1 || at == std::string::npos) {
      return Status::Invalid("'" + text + "': unknown unit (K, M, G or T)");
    }
    shift = 10 * static_cast<int>(at + 1);
  }
  if (number > (std::numeric_limits<int64_t>::max() >> shift)) {
    return Status::Invalid("'" + text + "' is too large");
  }
  return number << shift;
}

std::string FormatBytes(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) {
    std::snprintf(text, sizeof(text), "%.1f GiB", b / (1 << 30));
  } else if (bytes >= (int64_t{1} << 20)) {
    std::snprintf(text, sizeof(text), "%.1f MiB", b / (1 << 20));
  } else if (bytes >= 1024) {
    std::snprintf(text, sizeof(text), "%.1f KiB", b / 1024);
  } else {
    std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  }
  return text;
}

std::string StageResult::Summary(size_t inputs) const {
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f s", static_cast<double>(duration_ms) / 1000.0);
  return std::to_string(inputs) + (inputs == 1 ? " input, " : " inputs, ") +
         std::to_string(objects) + (objects == 1 ? " object, " : " objects, ") +
         FormatBytes(bytes) + ": " + FormatBytes(bytes_fetched) + " fetched, " +
         FormatBytes(bytes_from_cache) + " from the node cache, in " + seconds;
}

void RemoveStagedTree(const std::string& dest) {
  ChmodTree(dest, 0755);
  staging_internal::RemoveTree(dest);
}

namespace {

// Both of the above: every object acquired (pinned for `holder`), and, when
// `dest` is not empty, laid out there.
Result<StageResult> AcquireInputs(ContentCache* cache, const ObjectFetcher& fetcher,
                                  const std::string& tenant, const std::string& holder,
                                  const std::vector<StagedInput>& inputs, const std::string& dest,
                                  const StageOptions& options, const std::atomic<bool>* cancel) {
  const bool lay_out = !dest.empty();
  const auto started = std::chrono::steady_clock::now();
  struct Work {
    const StagedInput* input;
    const StagedObject* object;
  };
  std::vector<Work> work;
  for (const StagedInput& input : inputs) {
    if (!SafeRelativePath(input.name) || input.name.find('/') != std::string::npos) {
      return Status::Invalid("input name '" + input.name + "' is not a plain name");
    }
    for (const StagedObject& object : input.objects) {
      if (!SafeRelativePath(object.path)) {
        return Status::Invalid("input " + input.name + ": object path '" + object.path +
                               "' must be relative, without '.', '..' or empty parts");
      }
      work.push_back({&input, &object});
    }
  }
  if (lay_out) {
    RemoveStagedTree(dest);
    const size_t parent = dest.rfind('/');
    if (parent != std::string::npos && parent > 0) {
      FERRY_RETURN_NOT_OK(staging_internal::MakeDirs(dest.substr(0, parent)));
    }
    if (mkdir(dest.c_str(), 0755) != 0) {
      return Status::IOError("cannot create " + dest + ": " + std::strerror(errno));
    }
    for (const StagedInput& input : inputs) {
      const std::string dir = dest + "/" + input.name;
      if (mkdir(dir.c_str(), 0755) != 0) {
        return Status::IOError("cannot create " + dir + ": " + std::strerror(errno));
      }
    }
  }

  std::atomic<bool> stop{false};
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status failure;
  StageResult result;
  auto fail = [&](Status status) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.ok()) failure = std::move(status);
    stop = true;
  };
  int active = 0;  // workers still running, under mu
  std::condition_variable all_done;
  auto worker = [&] {
    struct Done {
      std::mutex* mu;
      int* active;
      std::condition_variable* cv;
      ~Done() {
        std::lock_guard<std::mutex> lock(*mu);
        if (--*active == 0) cv->notify_all();
      }
    } done{&mu, &active, &all_done};
    while (!stop.load()) {
      const size_t i = next.fetch_add(1);
      if (i >= work.size()) return;
      const Work& w = work[i];
      const std::string what =
          "input " + w.input->name + ": " + w.object->path + " (" + w.object->uri + ")";
      Result<ContentCache::Acquired> acquired = Status::OK();
      int64_t backoff = options.backoff_ms;
      for (int attempt = 1;; ++attempt) {
        acquired = cache->Acquire(tenant, *w.object, holder, fetcher, &stop);
        if (acquired.ok() || stop.load() || attempt >= options.attempts) break;
        if (!SleepUnlessCancelled(backoff, &stop)) break;
        backoff = std::min(backoff * 2, options.max_backoff_ms);
      }
      if (!acquired.ok()) {
        if (!stop.load()) {
          fail(Status(acquired.status().code(), what + ": " + acquired.status().message() +
                                                    " (after " + std::to_string(options.attempts) +
                                                    " attempts)"));
        }
        return;
      }
      if (!lay_out) {
        std::lock_guard<std::mutex> lock(mu);
        ++result.objects;
        result.bytes += acquired->size;
        result.bytes_fetched += acquired->fetched;
        if (acquired->hit) result.bytes_from_cache += acquired->size;
        continue;
      }
      const std::string target = dest + "/" + w.input->name + "/" + w.object->path;
      Status made;
      {
        std::lock_guard<std::mutex> lock(mu);  // parents shared between objects
        made = MakeParents(dest + "/" + w.input->name, w.object->path);
      }
      if (!made.ok()) return fail(made);
      if (link(acquired->path.c_str(), target.c_str()) != 0) {
        if (errno == EEXIST) {
          return fail(Status::Invalid(what + ": the path appears twice"));
        }
        if (symlink(acquired->path.c_str(), target.c_str()) != 0) {
          return fail(Status::IOError("cannot link " + target + ": " + std::strerror(errno)));
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      ++result.objects;
      result.bytes += acquired->size;
      result.bytes_fetched += acquired->fetched;
      if (acquired->hit) result.bytes_from_cache += acquired->size;
    }
  };
  const int threads =
      std::max(1, std::min<int>(options.parallelism, static_cast<int>(work.size())));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  active = threads;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  // The caller's cancel reaches transfers in flight through `stop`.
  {
    std::unique_lock<std::mutex> lock(mu);
    while (active > 0) {
      if (cancel != nullptr && cancel->load()) {
        if (failure.ok()) failure = Status::Cancelled("staging cancelled");
        stop = true;
      }
      all_done.wait_for(lock, std::chrono::milliseconds(20));
    }
  }
  for (std::thread& t : pool) t.join();
  if (!failure.ok()) {
    cache->Release(holder);
    if (lay_out) RemoveStagedTree(dest);
    return failure;
  }
  if (lay_out) ChmodTree(dest, 0555);
  result.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - started)
                           .count();
  return result;
}

}  // namespace

Result<StageResult> StageInputs(ContentCache* cache, const ObjectFetcher& fetcher,
                                const std::string& tenant, const std::string& holder,
                                const std::vector<StagedInput>& inputs, const std::string& dest,
                                const StageOptions& options, const std::atomic<bool>* cancel) {
  if (dest.empty()) return Status::Invalid("no directory to stage the inputs in");
  return AcquireInputs(cache, fetcher, tenant, holder, inputs, dest, options, cancel);
}

Result<StageResult> FetchInputs(ContentCache* cache, const ObjectFetcher& fetcher,
                                const std::string& tenant, const std::string& holder,
                                const std::vector<StagedInput>& inputs, const StageOptions& options,
                                const std::atomic<bool>* cancel) {
  return AcquireInputs(cache, fetcher, tenant, holder, inputs, "", options, cancel);
}

}  // namespace ferry::fleet
