// The staging library against real sources: files under an allowed root and
// a local HTTP server (cpp-httplib, which answers Range requests) that counts
// what it serves. S3 is exercised end to end against SeaweedFS in
// tests/python/fleet/test_staging.py.
#include "ferry/fleet/staging.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "ferry/base/hash.h"
#include "testing/test_util.h"

// The tests write inputs as {"name", {objects}}, leaving StagedInput::digest
// (which staging does not read) to its default.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace ferry::fleet {
namespace {

using testing::ReadFile;
using testing::ScratchDir;

std::string Bytes(size_t n, char seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(seed + (i * 7) % 251);
  return out;
}

bool NoFilesUnder(const std::string& dir) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) return false;
  }
  return true;
}

StagedObject Ref(const std::string& path, const std::string& uri, const std::string& content) {
  return StagedObject{path, uri, static_cast<int64_t>(content.size()), Sha256Hex(content)};
}

// An HTTP server on a free loopback port serving `objects` by path, counting
// requests and body bytes sent per path.
class ObjectServer {
 public:
  ObjectServer() {
    server_.Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++requests_[req.path];
      if (req.has_header("Range")) ranges_.push_back(req.get_header_value("Range"));
      auto it = objects_.find(req.path);
      if (it == objects_.end()) {
        res.status = 404;
        return;
      }
      if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
      res.set_content(it->second, "application/octet-stream");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 2000 && !server_.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~ObjectServer() {
    server_.stop();
    thread_.join();
  }
  void Put(const std::string& path, std::string content) {
    std::lock_guard<std::mutex> lock(mu_);
    objects_[path] = std::move(content);
  }
  void SetDelay(int ms) { delay_ms_ = ms; }
  int Requests(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_[path];
  }
  std::vector<std::string> Ranges() {
    std::lock_guard<std::mutex> lock(mu_);
    return ranges_;
  }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> delay_ms_{0};
  std::mutex mu_;
  std::map<std::string, std::string> objects_;
  std::map<std::string, int> requests_;
  std::vector<std::string> ranges_;
};

// Files a, b and c of 10,000 bytes each under <dir>/shared, and an input of one of them.
struct ThreeFiles {
  explicit ThreeFiles(const ScratchDir& dir) : dir(dir) {
    for (const char* name : {"a", "b", "c"}) {
      bytes[name] = Bytes(10'000, name[0]);
      dir.Write(std::string("shared/") + name, bytes[name]);
    }
  }
  std::vector<StagedInput> Input(const std::string& name) const {
    return {{"in", {Ref(name, "file://" + (dir / ("shared/" + name)), bytes.at(name))}}};
  }
  const ScratchDir& dir;
  std::map<std::string, std::string> bytes;
};

class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    std::filesystem::create_directories(dir_ / "shared");
    config_.file_roots = {dir_ / "shared"};
    fetcher_ = std::make_unique<ObjectFetcher>(config_);
    cache_ = OpenCache(1 << 20);
  }
  void TearDown() override {
    for (const std::string& dest : dests_) RemoveStagedTree(dest);
  }
  std::unique_ptr<ContentCache> OpenCache(int64_t quota) {
    auto cache = ContentCache::Open({dir_ / "cache", quota});
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  std::string Dest(const std::string& name) {
    dests_.push_back(dir_ / name);
    return dests_.back();
  }
  Result<StageResult> Stage(const std::vector<StagedInput>& inputs, const std::string& dest,
                            const std::string& holder = "job-1", const std::string& tenant = "acme",
                            StageOptions options = Fast()) {
    return StageInputs(cache_.get(), *fetcher_, tenant, holder, inputs, dest, options, nullptr);
  }
  static StageOptions Fast() {
    StageOptions options;
    options.attempts = 2;
    options.backoff_ms = 10;
    return options;
  }

  ScratchDir dir_{"ferry-staging"};
  StorageConfig config_;
  std::unique_ptr<ObjectFetcher> fetcher_;
  std::unique_ptr<ContentCache> cache_;
  std::vector<std::string> dests_;
};

TEST_F(StagingTest, FetchesOnceThenServesFromTheCache) {
  ObjectServer server;
  const std::string a = Bytes(300'000, 'a');
  const std::string b = Bytes(1000, 'b');
  server.Put("/d/a.bin", a);
  server.Put("/d/sub/b.bin", b);
  std::vector<StagedInput> inputs = {
      {"train",
       {Ref("a.bin", server.Url("/d/a.bin"), a), Ref("sub/b.bin", server.Url("/d/sub/b.bin"), b)}}};

  auto first = Stage(inputs, Dest("job-1"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->objects, 2);
  EXPECT_EQ(first->bytes, 301'000);
  EXPECT_EQ(first->bytes_fetched, 301'000);
  EXPECT_EQ(first->bytes_from_cache, 0);
  EXPECT_EQ(ReadFile(dir_ / "job-1/train/a.bin"), a);
  EXPECT_EQ(ReadFile(dir_ / "job-1/train/sub/b.bin"), b);

  auto second = Stage(inputs, Dest("job-2"), "job-2");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->bytes_fetched, 0);
  EXPECT_EQ(second->bytes_from_cache, 301'000);
  EXPECT_EQ(server.Requests("/d/a.bin"), 1);
  EXPECT_EQ(server.Requests("/d/sub/b.bin"), 1);
  // One copy on disk, shared by both jobs' trees.
  struct stat one {
  }, two{};
  ASSERT_EQ(stat((dir_ / "job-1/train/a.bin").c_str(), &one), 0);
  ASSERT_EQ(stat((dir_ / "job-2/train/a.bin").c_str(), &two), 0);
  EXPECT_EQ(one.st_ino, two.st_ino);

  const CacheStats stats = cache_->Stats();
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.bytes_fetched, 301'000);
  EXPECT_EQ(stats.bytes_hit, 301'000);
  EXPECT_EQ(stats.bytes_used, 301'000);
  EXPECT_EQ(stats.bytes_pinned, 301'000);
  EXPECT_EQ(second->Summary(1),
            "1 input, 2 objects, 293.9 KiB: 0 B fetched, 293.9 KiB from the node cache, in " +
                second->Summary(1).substr(second->Summary(1).rfind("in ") + 3));
}

TEST_F(StagingTest, StagedTreeIsReadOnly) {
  const std::string content = "vocabulary\n";
  const std::string src = dir_.Write("shared/vocab.txt", content);
  const std::string dest = Dest("job-ro");
  ASSERT_TRUE(Stage({{"vocab", {Ref("vocab.txt", "file://" + src, content)}}}, dest).ok());
  struct stat st {};
  ASSERT_EQ(stat((dest + "/vocab/vocab.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  ASSERT_EQ(stat((dest + "/vocab").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0555u);
  if (geteuid() != 0) {  // root ignores permission bits
    EXPECT_EQ(::open((dest + "/vocab/vocab.txt").c_str(), O_WRONLY), -1);
    EXPECT_EQ(::open((dest + "/vocab/new").c_str(), O_WRONLY | O_CREAT, 0644), -1);
  }
}

TEST_F(StagingTest, RefusesAnObjectWhoseDigestDoesNotMatch) {
  ObjectServer server;
  server.Put("/x", "tampered bytes");
  StagedObject ref = Ref("x", server.Url("/x"), "tampered bytes");
  ref.sha256 = Sha256Hex("the bytes the manifest names");
  ref.size = -1;
  auto staged = Stage({{"in", {ref}}}, Dest("job-bad"));
  ASSERT_FALSE(staged.ok());
  EXPECT_NE(staged.status().message().find("refused: its sha256 is " + Sha256Hex("tampered bytes")),
            std::string::npos)
      << staged.status().message();
  EXPECT_NE(staged.status().message().find("input in: x"), std::string::npos);
  EXPECT_NE(staged.status().message().find("after 2 attempts"), std::string::npos);
  const CacheStats stats = cache_->Stats();
  EXPECT_EQ(stats.corrupt, 2);
  EXPECT_EQ(stats.entries, 0);
  EXPECT_EQ(stats.bytes_pinned, 0);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "job-bad"));
  EXPECT_TRUE(NoFilesUnder(dir_ / "cache/partial"));
}

TEST_F(StagingTest, RefusesAnObjectLongerThanDeclared) {
  ObjectServer server;
  server.Put("/long", Bytes(5000, 'l'));
  StagedObject ref = Ref("long", server.Url("/long"), Bytes(5000, 'l'));
  ref.size = 100;
  auto staged = Stage({{"in", {ref}}}, Dest("job-long"));
  ASSERT_FALSE(staged.ok());
  EXPECT_NE(staged.status().message().find("longer than its declared size 100"), std::string::npos);
}

TEST_F(StagingTest, ResumesAPartialDownload) {
  ObjectServer server;
  const std::string content = Bytes(200'000, 'r');
  server.Put("/big", content);
  const StagedObject ref = Ref("big", server.Url("/big"), content);
  // What a killed agent left: the first 150000 bytes in partial/.
  const std::string key_dir = dir_ / ("cache/partial/" + Sha256Hex("acme").substr(0, 16));
  std::filesystem::create_directories(key_dir);
  std::ofstream(key_dir + "/" + ref.sha256, std::ios::binary) << content.substr(0, 150'000);

  auto staged = Stage({{"in", {ref}}}, Dest("job-resume"));
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_EQ(staged->bytes_fetched, 50'000);
  EXPECT_EQ(ReadFile(dir_ / "job-resume/in/big"), content);
  EXPECT_EQ(server.Ranges(), std::vector<std::string>{"bytes=150000-"});
  EXPECT_EQ(cache_->Stats().bytes_resumed, 150'000);
  EXPECT_FALSE(std::filesystem::exists(key_dir + "/" + ref.sha256));
}

TEST_F(StagingTest, AWholePartialIsVerifiedWithoutATransfer) {
  ObjectServer server;
  const std::string content = Bytes(50'000, 'w');
  server.Put("/whole", content);
  const StagedObject ref = Ref("whole", server.Url("/whole"), content);
  const std::string key_dir = dir_ / ("cache/partial/" + Sha256Hex("acme").substr(0, 16));
  std::filesystem::create_directories(key_dir);
  std::ofstream(key_dir + "/" + ref.sha256, std::ios::binary) << content;
  auto staged = Stage({{"in", {ref}}}, Dest("job-whole"));
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_EQ(server.Requests("/whole"), 0);
  EXPECT_EQ(staged->bytes_fetched, 0);
  EXPECT_EQ(cache_->Stats().bytes_resumed, 50'000);
  EXPECT_EQ(ReadFile(dir_ / "job-whole/in/whole"), content);
}

TEST_F(StagingTest, APartialThatIsNoPrefixIsRefetchedWhole) {
  ObjectServer server;
  const std::string content = Bytes(10'000, 'p');
  server.Put("/obj", content);
  const StagedObject ref = Ref("obj", server.Url("/obj"), content);
  const std::string key_dir = dir_ / ("cache/partial/" + Sha256Hex("acme").substr(0, 16));
  std::filesystem::create_directories(key_dir);
  std::ofstream(key_dir + "/" + ref.sha256, std::ios::binary) << std::string(4000, 'Z');
  auto staged = Stage({{"in", {ref}}}, Dest("job-garbage"));
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();  // attempt 1 refused, attempt 2 whole
  EXPECT_EQ(ReadFile(dir_ / "job-garbage/in/obj"), content);
  EXPECT_EQ(cache_->Stats().corrupt, 1);
}

TEST_F(StagingTest, EvictsLeastRecentlyUsedButNeverWhatAJobHolds) {
  cache_ = OpenCache(25'000);
  const ThreeFiles files(dir_);
  auto input = [&](const std::string& name) { return files.Input(name); };
  ASSERT_TRUE(Stage(input("a"), Dest("ja"), "ja").ok());
  ASSERT_TRUE(Stage(input("b"), Dest("jb"), "jb").ok());
  // a and b are held: c does not fit (30000 > 25000).
  auto refused = Stage(input("c"), Dest("jc"), "jc");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no room in the node cache"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("19.5 KiB held by staged or running jobs"),
            std::string::npos)
      << refused.status().message();
  cache_->Release("ja");
  cache_->Release("jb");
  // Use a again: b is now the least recently used and goes.
  ASSERT_TRUE(Stage(input("a"), Dest("ja2"), "ja2").ok());
  auto c = Stage(input("c"), Dest("jc2"), "jc2");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const CacheStats stats = cache_->Stats();
  EXPECT_EQ(stats.evictions, 1);
  EXPECT_EQ(stats.bytes_evicted, 10'000);
  EXPECT_EQ(cache_->PresentBytes("acme", input("a")[0].objects), 10'000);
  EXPECT_EQ(cache_->PresentBytes("acme", input("b")[0].objects), 0);
  EXPECT_EQ(cache_->PresentBytes("acme", input("c")[0].objects), 10'000);
  // The evicted file's job tree still reads (its own link).
  EXPECT_EQ(ReadFile(dir_ / "jb/in/b"), files.bytes.at("b"));
  // Larger than the whole quota: a clear error at once.
  const std::string huge_bytes = Bytes(30'000, 'h');
  dir_.Write("shared/huge", huge_bytes);
  auto huge = Stage({{"in", {Ref("huge", "file://" + (dir_ / "shared/huge"), huge_bytes)}}},
                    Dest("jh"), "jh");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("is larger than the node cache's quota"),
            std::string::npos);
}

TEST_F(StagingTest, EntriesAndTheirOrderSurviveARestart) {
  cache_ = OpenCache(25'000);
  const ThreeFiles files(dir_);
  auto input = [&](const std::string& name) { return files.Input(name); };
  ASSERT_TRUE(Stage(input("b"), Dest("j1"), "j1").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(Stage(input("a"), Dest("j2"), "j2").ok());
  cache_.reset();
  cache_ = OpenCache(25'000);
  EXPECT_EQ(cache_->Stats().entries, 2);
  EXPECT_EQ(cache_->Stats().bytes_used, 20'000);
  auto again = Stage(input("a"), Dest("j3"), "j3");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->bytes_from_cache, 10'000);
  cache_->Release("j3");
  ASSERT_TRUE(Stage(input("c"), Dest("j4"), "j4").ok());
  EXPECT_EQ(cache_->PresentBytes("acme", input("b")[0].objects), 0);  // b was used first
  EXPECT_EQ(cache_->PresentBytes("acme", input("a")[0].objects), 10'000);
  // A lowered quota evicts at start.
  cache_.reset();
  cache_ = OpenCache(10'000);
  EXPECT_EQ(cache_->Stats().bytes_used, 10'000);
}

TEST_F(StagingTest, AChangedEntryIsDroppedAndFetchedAgain) {
  const std::string content = Bytes(4096, 't');
  const std::string src = dir_.Write("shared/t", content);
  const StagedObject ref = Ref("t", "file://" + src, content);
  ASSERT_TRUE(Stage({{"in", {ref}}}, Dest("j1"), "j1").ok());
  cache_->Release("j1");
  // Someone rewrote the cached bytes in place (what a job with a writable link could do).
  const std::string entry =
      dir_ / ("cache/objects/" + Sha256Hex("acme").substr(0, 16) + "/" + ref.sha256);
  chmod(entry.c_str(), 0644);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::ofstream(entry, std::ios::binary | std::ios::in | std::ios::out) << "XXXX";
  auto again = Stage({{"in", {ref}}}, Dest("j2"), "j2");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->bytes_fetched, 4096);
  EXPECT_EQ(cache_->Stats().tampered, 1);
  EXPECT_EQ(ReadFile(dir_ / "j2/in/t"), content);
}

TEST_F(StagingTest, TenantsDoNotShareEntries) {
  const std::string content = "shared digest";
  const std::string src = dir_.Write("shared/s", content);
  const StagedObject ref = Ref("s", "file://" + src, content);
  ASSERT_TRUE(Stage({{"in", {ref}}}, Dest("ja"), "ja", "acme").ok());
  EXPECT_EQ(cache_->PresentBytes("acme", {ref}), static_cast<int64_t>(content.size()));
  EXPECT_EQ(cache_->PresentBytes("globex", {ref}), 0);
  auto other = Stage({{"in", {ref}}}, Dest("jg"), "jg", "globex");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->bytes_from_cache, 0);
  EXPECT_EQ(other->bytes_fetched, static_cast<int64_t>(content.size()));
}

TEST_F(StagingTest, ConcurrentJobsShareOneDownload) {
  ObjectServer server;
  server.SetDelay(200);
  const std::string content = Bytes(100'000, 'c');
  server.Put("/c", content);
  const std::vector<StagedInput> inputs = {{"in", {Ref("c", server.Url("/c"), content)}}};
  std::vector<std::thread> jobs;
  std::vector<Result<StageResult>> results(4, Status::OK());
  for (int i = 0; i < 4; ++i) {
    const std::string dest = Dest("jc" + std::to_string(i));
    jobs.emplace_back([&, i, dest] { results[i] = Stage(inputs, dest, "jc" + std::to_string(i)); });
  }
  for (auto& t : jobs) t.join();
  int64_t fetched = 0;
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    fetched += r->bytes_fetched;
  }
  EXPECT_EQ(fetched, 100'000);
  EXPECT_EQ(server.Requests("/c"), 1);
  EXPECT_EQ(cache_->Stats().hits, 3);
}

TEST_F(StagingTest, SourcesOutsideTheAllowedPlacesAreRefused) {
  ScratchDir outside("ferry-staging-outside");
  const std::string secret = outside.Write("secret", "not yours");
  const StagedObject direct = Ref("s", "file://" + secret, "not yours");
  auto refused = Stage({{"in", {direct}}}, Dest("j1"));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("outside this node's file_roots"), std::string::npos);
  // Through a symbolic link inside the root, or "..": the real path counts.
  std::filesystem::create_symlink(secret, dir_ / "shared/link");
  auto via_link =
      Stage({{"in", {Ref("s", "file://" + (dir_ / "shared/link"), "not yours")}}}, Dest("j2"));
  ASSERT_FALSE(via_link.ok());
  EXPECT_NE(via_link.status().message().find("outside"), std::string::npos);
  auto via_dots =
      Stage({{"in",
              {Ref("s", "file://" + (dir_ / "shared/../../") + outside.path().substr(1) + "/secret",
                   "not yours")}}},
            Dest("j3"));
  ASSERT_FALSE(via_dots.ok());
  // Unsafe layout paths never touch the file system.
  for (const std::string bad : {"../escape", "/abs", "a//b", "a/./b", ""}) {
    auto unsafe = Stage({{"in", {Ref(bad, "file://" + secret, "not yours")}}}, Dest("j4"));
    ASSERT_FALSE(unsafe.ok()) << bad;
    EXPECT_NE(unsafe.status().message().find("must be relative"), std::string::npos);
  }
  auto bad_name = Stage({{"../x", {}}}, Dest("j5"));
  EXPECT_FALSE(bad_name.ok());
  // No file roots at all: file:// is off.
  ObjectFetcher closed(StorageConfig{});
  auto none = StageInputs(cache_.get(), closed, "acme", "j6", {{"in", {direct}}}, Dest("j6"),
                          Fast(), nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("file:// sources are not allowed"), std::string::npos);
}

TEST_F(StagingTest, HttpErrorsAndS3RoutingAreNamed) {
  ObjectServer server;
  auto missing =
      Stage({{"in", {StagedObject{"m", server.Url("/missing"), -1, Sha256Hex("m")}}}}, Dest("j1"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("HTTP 404"), std::string::npos);

  StorageConfig config;
  S3Endpoint lake;
  lake.name = "lake";
  lake.endpoint = "http://127.0.0.1:1";
  lake.buckets = {"datasets"};
  lake.tenants = {"acme"};
  config.s3.push_back(lake);
  ObjectFetcher s3(config);
  EXPECT_TRUE(s3.EndpointFor("acme", "datasets").ok());
  auto other_tenant = s3.EndpointFor("globex", "datasets");
  ASSERT_FALSE(other_tenant.ok());
  EXPECT_NE(other_tenant.status().message().find("tenant globex may not read bucket datasets"),
            std::string::npos);
  auto unknown = s3.EndpointFor("acme", "elsewhere");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("no S3 endpoint"), std::string::npos);
  std::string bucket, key;
  EXPECT_TRUE(ParseS3Uri("s3://datasets/a/b c.bin", &bucket, &key));
  EXPECT_EQ(bucket, "datasets");
  EXPECT_EQ(key, "a/b c.bin");
  EXPECT_FALSE(ParseS3Uri("s3:///key", &bucket, &key));
  EXPECT_FALSE(ParseS3Uri("s3://bucket", &bucket, &key));
  // Unreachable endpoint: a transport error, no credentials in it.
  auto down = StageInputs(cache_.get(), s3, "acme", "j2",
                          {{"in", {StagedObject{"k", "s3://datasets/k", -1, Sha256Hex("k")}}}},
                          Dest("j2"), Fast(), nullptr);
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.status().message().find("http://127.0.0.1:1/datasets/k"), std::string::npos)
      << down.status().message();
}

TEST_F(StagingTest, CancelStopsStaging) {
  ObjectServer server;
  server.SetDelay(3000);
  server.Put("/slow", "slow");
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  const auto started = std::chrono::steady_clock::now();
  auto staged = StageInputs(cache_.get(), *fetcher_, "acme", "jx",
                            {{"in", {Ref("slow", server.Url("/slow"), "slow")}}}, Dest("jx"),
                            Fast(), &cancel);
  canceller.join();
  ASSERT_FALSE(staged.ok());
  EXPECT_EQ(staged.status().code(), StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
  EXPECT_EQ(cache_->Stats().bytes_pinned, 0);
}

TEST(StorageConfigTest, ReadsEndpointsAndSecretReferences) {
  ScratchDir dir("ferry-storage-config");
  ASSERT_TRUE(dir.ok());
  dir.Write("secret", "s3cr3t\n");
  setenv("FERRY_TEST_S3_KEY", "AKIDTEST", 1);
  const std::string path = dir.Write("storage.yaml", R"(s3:
  - name: lake
    endpoint: http://127.0.0.1:8333/
    buckets: [datasets, checkpoints]
    tenants: [acme]
    access_key_id_env: FERRY_TEST_S3_KEY
    secret_access_key_file: )" + (dir / "secret") + R"(
  - endpoint: https://s3.example.com
file_roots: [/mnt/shared/]
allow_http: false
max_bytes_per_second: 50M
)");
  auto config = LoadStorageConfig(path);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->s3.size(), 2u);
  EXPECT_EQ(config->s3[0].endpoint, "http://127.0.0.1:8333");
  EXPECT_EQ(config->s3[0].access_key_id, "AKIDTEST");
  EXPECT_EQ(config->s3[0].secret_access_key, "s3cr3t");
  EXPECT_EQ(config->s3[0].buckets, (std::vector<std::string>{"datasets", "checkpoints"}));
  EXPECT_EQ(config->s3[1].name, "https://s3.example.com");
  EXPECT_TRUE(config->s3[1].access_key_id.empty());
  EXPECT_EQ(config->file_roots, std::vector<std::string>{"/mnt/shared"});
  EXPECT_FALSE(config->allow_http);
  EXPECT_EQ(config->max_bytes_per_second, 50LL << 20);
}

TEST(StorageConfigTest, RefusesInlineSecretsAndBadValues) {
  ScratchDir dir("ferry-storage-config");
  ASSERT_TRUE(dir.ok());
  auto error = [&](const std::string& text) {
    auto config = LoadStorageConfig(dir.Write("s.yaml", text));
    return config.ok() ? std::string() : config.status().message();
  };
  EXPECT_NE(error("s3:\n  - endpoint: http://h\n    secret_access_key: abc\n")
                .find("s3[0].secret_access_key: unknown key"),
            std::string::npos);
  EXPECT_NE(error("s3:\n  - endpoint: ftp://h\n").find("must be an http:// or https:// URL"),
            std::string::npos);
  EXPECT_NE(error("s3:\n  - endpoint: http://h\n    access_key_id_env: FERRY_TEST_UNSET_VAR\n")
                .find("FERRY_TEST_UNSET_VAR is not set"),
            std::string::npos);
  EXPECT_NE(error("file_roots: [relative]\n").find("not an absolute path"), std::string::npos);
  EXPECT_NE(error("s3:\n  - endpoint: http://h\n    access_key_id_file: /nonexistent/k\n")
                .find("cannot read /nonexistent/k"),
            std::string::npos);
  EXPECT_NE(error("bogus: 1\n").find("bogus: unknown key"), std::string::npos);
  EXPECT_FALSE(LoadStorageConfig(dir / "missing.yaml").ok());
}

TEST(ByteSizeTest, ParsesUnits) {
  EXPECT_EQ(*ParseByteSize("123"), 123);
  EXPECT_EQ(*ParseByteSize("500K"), 500 * 1024);
  EXPECT_EQ(*ParseByteSize("20G"), 20LL << 30);
  EXPECT_EQ(*ParseByteSize("2TiB"), 2LL << 40);
  EXPECT_EQ(*ParseByteSize("3m"), 3LL << 20);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("G").ok());
  EXPECT_FALSE(ParseByteSize("10X").ok());
  EXPECT_FALSE(ParseByteSize("-5G").ok());
  EXPECT_FALSE(ParseByteSize("99999999999T").ok());
}

TEST(FormatBytesTest, Units) {
  EXPECT_EQ(FormatBytes(5), "5 B");
  EXPECT_EQ(FormatBytes(12 * 1024), "12.0 KiB");
  EXPECT_EQ(FormatBytes(340LL << 20), "340.0 MiB");
  EXPECT_EQ(FormatBytes((12LL << 30) / 10), "1.2 GiB");
}

}  // namespace
}  // namespace ferry::fleet
