// ObjectFetcher (staging.h): S3 GETs signed with AWS Signature Version 4 by
// libcurl, plain HTTP(S) GETs, and reads from allowed shared directories,
// each able to start at a byte offset (a resumed download).
#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "ferry/base/hash.h"
#include "ferry/fleet/staging.h"

namespace ferry::fleet {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// S3 object keys are encoded once in the request path; '/' stays.
std::string EncodeKey(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    if (Unreserved(c) || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

bool Listed(const std::vector<std::string>& list, const std::string& item) {
  return list.empty() || std::find(list.begin(), list.end(), item) != list.end();
}

struct Transfer {
  CURL* curl = nullptr;
  const ObjectFetcher::Sink* sink = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  int64_t offset = 0;
  bool* restarted = nullptr;
  long status = 0;
  bool sink_stopped = false;
  std::string error_body;  // the start of an error response, for the message
  // The rate limit: libcurl's own lets the socket buffers' worth through at
  // once, so the write callback paces the transfer (TCP then slows the sender).
  int64_t max_bytes_per_second = 0;
  int64_t received = 0;
  std::chrono::steady_clock::time_point started;
};

// Sleeps until `t->received` bytes are within the rate limit, in steps that
// notice a cancel.
void Pace(Transfer* t) {
  if (t->max_bytes_per_second <= 0) return;
  const auto due =
      t->started + std::chrono::microseconds(t->received * 1'000'000 / t->max_bytes_per_second);
  while (std::chrono::steady_clock::now() < due) {
    if (t->cancel != nullptr && t->cancel->load()) return;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        due - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
  }
}

size_t OnData(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  if (t->status == 0) {
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &t->status);
    if (t->status == 200 && t->offset > 0) *t->restarted = true;
  }
  if (t->status != 200 && t->status != 206) {
    if (t->error_body.size() < 2048) t->error_body.append(data, std::min<size_t>(bytes, 2048));
    return bytes;
  }
  if (!(*t->sink)(data, bytes)) {
    t->sink_stopped = true;
    return 0;  // aborts the transfer
  }
  t->received += static_cast<int64_t>(bytes);
  Pace(t);
  return bytes;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return (t->cancel != nullptr && t->cancel->load()) ? 1 : 0;
}

// "NoSuchKey: The specified key does not exist." from an S3 error document.
std::string S3ErrorText(const std::string& body) {
  auto tag = [&](const std::string& name) {
    const size_t open = body.find("<" + name + ">");
    if (open == std::string::npos) return std::string();
    const size_t from = open + name.size() + 2;
    const size_t close = body.find("</" + name + ">", from);
    return close == std::string::npos ? std::string() : body.substr(from, close - from);
  };
  std::string code = tag("Code");
  std::string message = tag("Message");
  if (code.empty()) return std::string();
  return message.empty() ? code : code + ": " + message;
}

}  // namespace

ObjectFetcher::ObjectFetcher(StorageConfig config) : config_(std::move(config)) { GlobalInit(); }
ObjectFetcher::~ObjectFetcher() = default;

Result<const S3Endpoint*> ObjectFetcher::EndpointFor(const std::string& tenant,
                                                     const std::string& bucket) const {
  bool bucket_known = false;
  for (const S3Endpoint& e : config_.s3) {
    if (!Listed(e.buckets, bucket)) continue;
    bucket_known = true;
    if (Listed(e.tenants, tenant)) return &e;
  }
  if (bucket_known) {
    return Status::Invalid("tenant " + tenant + " may not read bucket " + bucket +
                           " (not among the tenants of its endpoint in the storage config)");
  }
  return Status::Invalid("no S3 endpoint in this node's storage config serves bucket " + bucket);
}

namespace {
// Whether `url` lies under the agent's Ferry server.
bool IsServerUrl(const StorageConfig& config, const std::string& url) {
  if (config.server_url.empty()) return false;
  std::string base = config.server_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return url.size() > base.size() && url.compare(0, base.size(), base) == 0 &&
         url[base.size()] == '/';
}
}  // namespace

Status ObjectFetcher::Fetch(const std::string& tenant, const std::string& uri, int64_t offset,
                            const Sink& sink, bool* restarted,
                            const std::atomic<bool>* cancel) const {
  *restarted = false;
  if (uri.rfind("s3://", 0) == 0) {
    FERRY_ASSIGN_OR_RAISE(auto url, S3Url(tenant, uri));
    return FetchHttp(url.first, url.second, offset, sink, restarted, cancel);
  }
  if (uri.rfind("https://", 0) == 0 || uri.rfind("http://", 0) == 0) {
    if (uri.rfind("http://", 0) == 0 && !config_.allow_http && !IsServerUrl(config_, uri)) {
      return Status::Invalid(
          "plain http:// sources are not allowed on this node (allow_http: false)");
    }
    return FetchHttp(uri, nullptr, offset, sink, restarted, cancel);
  }
  if (uri.rfind("file://", 0) == 0) return FetchFile(uri.substr(7), offset, sink, cancel);
  return Status::Invalid("unsupported source " + uri + " (s3://, https://, http:// or file://)");
}

Result<std::pair<std::string, const S3Endpoint*>> ObjectFetcher::S3Url(
    const std::string& tenant, const std::string& uri) const {
  std::string bucket;
  std::string key;
  if (!ParseS3Uri(uri, &bucket, &key)) return Status::Invalid(uri + " is not an s3:// URI");
  FERRY_ASSIGN_OR_RAISE(const S3Endpoint* endpoint, EndpointFor(tenant, bucket));
  return std::make_pair(endpoint->endpoint + "/" + EncodeKey(bucket) + "/" + EncodeKey(key),
                        endpoint);
}

Result<std::optional<std::string>> ObjectFetcher::ReadSmall(const std::string& tenant,
                                                            const std::string& uri,
                                                            size_t max_bytes) const {
  std::string data;
  auto sink = [&](const char* bytes, size_t size) {
    if (data.size() + size > max_bytes) return false;
    data.append(bytes, size);
    return true;
  };
  bool restarted = false;
  if (uri.rfind("file://", 0) == 0) {
    FERRY_ASSIGN_OR_RAISE(std::string path, AllowedFile(uri.substr(7), false));
    if (access(path.c_str(), F_OK) != 0) return std::optional<std::string>();
    FERRY_RETURN_NOT_OK(FetchFile(path, 0, sink, nullptr));
    return std::optional<std::string>(std::move(data));
  }
  FERRY_ASSIGN_OR_RAISE(auto url, S3Url(tenant, uri));
  long status = 0;
  Status fetched = FetchHttp(url.first, url.second, 0, sink, &restarted, nullptr, &status);
  if (status == 404) return std::optional<std::string>();
  FERRY_RETURN_NOT_OK(fetched);
  return std::optional<std::string>(std::move(data));
}

namespace {

struct UploadSource {
  int fd = -1;
  Sha256Stream hash;
  bool failed = false;
};

size_t OnRead(char* buffer, size_t size, size_t count, void* user) {
  auto* source = static_cast<UploadSource*>(user);
  const ssize_t n = read(source->fd, buffer, size * count);
  if (n < 0) {
    source->failed = true;
    return CURL_READFUNC_ABORT;
  }
  source->hash.Update(std::string_view(buffer, static_cast<size_t>(n)));
  return static_cast<size_t>(n);
}

size_t OnResponse(char* data, size_t size, size_t count, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() < 2048) out->append(data, std::min<size_t>(size * count, 2048));
  return size * count;
}

}  // namespace

Status ObjectFetcher::Upload(const std::string& tenant, const std::string& uri,
                             const std::string& path, std::string* sha256) const {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(path + ": " + std::strerror(errno));
  struct stat st {};
  fstat(fd, &st);
  UploadSource source;
  source.fd = fd;
  struct Cleanup {
    int fd;
    ~Cleanup() { close(fd); }
  } cleanup{fd};
  if (uri.rfind("file://", 0) == 0) {
    FERRY_ASSIGN_OR_RAISE(std::string target, AllowedFile(uri.substr(7), false));
    std::error_code ignored;
    std::filesystem::create_directories(target.substr(0, target.rfind('/')), ignored);
    const std::string tmp = target + ".ferry-upload";
    const int out = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) return Status::IOError(tmp + ": " + std::strerror(errno));
    std::vector<char> buffer(1 << 20);
    bool ok = true;
    while (true) {
      const size_t n = OnRead(buffer.data(), 1, buffer.size(), &source);
      if (source.failed || n == 0) break;
      if (write(out, buffer.data(), n) != static_cast<ssize_t>(n)) ok = false;
    }
    ok = ok && !source.failed && fsync(out) == 0;
    close(out);
    if (!ok || rename(tmp.c_str(), target.c_str()) != 0) {
      const std::string error = std::strerror(errno);
      unlink(tmp.c_str());
      return Status::IOError("cannot write " + uri + ": " + error);
    }
    *sha256 = source.hash.FinishHex();
    return Status::OK();
  }
  FERRY_ASSIGN_OR_RAISE(auto url, S3Url(tenant, uri));
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return Status::OutOfMemory("curl_easy_init failed");
  char error[CURL_ERROR_SIZE] = {0};
  std::string body;
  std::string credentials;
  std::string sigv4;
  curl_easy_setopt(curl, CURLOPT_URL, url.first.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(curl, CURLOPT_READFUNCTION, OnRead);
  curl_easy_setopt(curl, CURLOPT_READDATA, &source);
  curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(st.st_size));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(config_.connect_timeout_ms));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(config_.stall_timeout_ms / 1000)));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnResponse);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  if (!config_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, config_.ca_file.c_str());
  const S3Endpoint* signer = url.second;
  if (!signer->access_key_id.empty()) {
    sigv4 = "aws:amz:" + signer->region + ":s3";
    credentials = signer->access_key_id + ":" + signer->secret_access_key;
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, credentials.c_str());
  }
  const CURLcode code = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  if (code != CURLE_OK) {
    return Status::IOError("upload to " + uri + ": " +
                           (error[0] != '\0' ? error : curl_easy_strerror(code)));
  }
  if (status < 200 || status >= 300) {
    const std::string detail = S3ErrorText(body);
    return Status::IOError("upload to " + uri + ": HTTP " + std::to_string(status) +
                           (detail.empty() ? std::string() : " (" + detail + ")"));
  }
  *sha256 = source.hash.FinishHex();
  return Status::OK();
}

Status ObjectFetcher::FetchHttp(const std::string& url, const S3Endpoint* signer, int64_t offset,
                                const Sink& sink, bool* restarted, const std::atomic<bool>* cancel,
                                long* http_status) const {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return Status::OutOfMemory("curl_easy_init failed");
  Transfer t;
  t.curl = curl;
  t.sink = &sink;
  t.cancel = cancel;
  t.offset = offset;
  t.restarted = restarted;
  char error[CURL_ERROR_SIZE] = {0};
  const std::string range = std::to_string(offset) + "-";
  std::string credentials;
  std::string sigv4;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, signer == nullptr ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, config_.allow_http ? "http,https" : "https");
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(config_.connect_timeout_ms));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(config_.stall_timeout_ms / 1000)));
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L * 1024L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnData);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
  if (!config_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, config_.ca_file.c_str());
  // The Ferry server itself: the agent's token, its CA, no redirects.
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(nullptr, curl_slist_free_all);
  std::string authorization;
  if (signer == nullptr && IsServerUrl(config_, url)) {
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    if (!config_.server_ca_file.empty()) {
      curl_easy_setopt(curl, CURLOPT_CAINFO, config_.server_ca_file.c_str());
    }
    if (!config_.server_token.empty()) {
      authorization = "Authorization: Bearer " + config_.server_token;
      headers.reset(curl_slist_append(nullptr, authorization.c_str()));
      curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
    }
  }
  t.max_bytes_per_second = config_.max_bytes_per_second;
  t.started = std::chrono::steady_clock::now();
  if (offset > 0) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  if (signer != nullptr && !signer->access_key_id.empty()) {
    sigv4 = "aws:amz:" + signer->region + ":s3";
    credentials = signer->access_key_id + ":" + signer->secret_access_key;
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, credentials.c_str());
  }
  const CURLcode code = curl_easy_perform(curl);
  if (t.status == 0) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &t.status);
  curl_easy_cleanup(curl);
  if (http_status != nullptr) *http_status = t.status;
  // Never put the URL's query (a presigned signature) or credentials in messages.
  std::string shown = url.substr(0, url.find('?'));
  if (cancel != nullptr && cancel->load()) return Status::Cancelled("download cancelled");
  if (t.sink_stopped) return Status::IOError(shown + ": the download was stopped by its writer");
  if (code != CURLE_OK && t.status < 300) {
    return Status::IOError(shown + ": " + (error[0] != '\0' ? error : curl_easy_strerror(code)));
  }
  if (t.status == 416 && offset > 0) {
    // The partial download is already whole (or longer than the object): restart.
    *restarted = true;
    return Status::IndexError(shown + ": range from " + std::to_string(offset) +
                              " not satisfiable; restart the download");
  }
  if (t.status != 200 && t.status != 206) {
    std::string detail = S3ErrorText(t.error_body);
    return Status::IOError(shown + ": HTTP " + std::to_string(t.status) +
                           (detail.empty() ? std::string() : " (" + detail + ")"));
  }
  return Status::OK();
}

Result<std::string> ObjectFetcher::AllowedFile(const std::string& path, bool must_exist) const {
  if (config_.file_roots.empty()) {
    return Status::Invalid(
        "file:// sources are not allowed on this node (no file_roots in its storage config)");
  }
  // The real path of the file, or (when it need not exist yet) of its
  // deepest existing parent with the rest appended.
  std::string real;
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) != nullptr) {
    real = resolved;
  } else if (must_exist) {
    return Status::IOError("file://" + path + ": " + std::strerror(errno));
  } else {
    std::string head = path;
    std::string tail;
    while (!head.empty() && realpath(head.c_str(), resolved) == nullptr) {
      const size_t slash = head.rfind('/');
      if (slash == std::string::npos) break;
      const std::string part = head.substr(slash + 1);
      if (part == "..") return Status::Invalid("file://" + path + ": '..' in a new path");
      tail = "/" + part + tail;
      head.resize(slash);
    }
    real = (head.empty() ? std::string() : std::string(resolved)) + tail;
  }
  for (const std::string& root : config_.file_roots) {
    if (root == "/" || real == root || real.rfind(root + "/", 0) == 0) return real;
  }
  return Status::Invalid("file://" + path + " is outside this node's file_roots");
}

Status ObjectFetcher::FetchFile(const std::string& path, int64_t offset, const Sink& sink,
                                const std::atomic<bool>* cancel) const {
  FERRY_ASSIGN_OR_RAISE(const std::string real, AllowedFile(path, true));
  const int fd = open(real.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("file://" + path + ": " + std::strerror(errno));
  std::vector<char> buffer(1 << 20);
  int64_t at = offset;
  Status status;
  while (true) {
    if (cancel != nullptr && cancel->load()) {
      status = Status::Cancelled("download cancelled");
      break;
    }
    const ssize_t n = pread(fd, buffer.data(), buffer.size(), at);
    if (n < 0) {
      if (errno == EINTR) continue;
      status = Status::IOError("file://" + path + ": " + std::strerror(errno));
      break;
    }
    if (n == 0) break;
    if (!sink(buffer.data(), static_cast<size_t>(n))) {
      status = Status::IOError("file://" + path + ": the copy was stopped by its writer");
      break;
    }
    at += n;
  }
  close(fd);
  return status;
}

}  // namespace ferry::fleet
