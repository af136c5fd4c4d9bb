// SlurmClient over slurmrestd: a UNIX socket (rest_auth/local) or HTTP(S)
// with a JWT. The first call probes the served OpenAPI versions and picks
// the newest one this code knows.
#include <httplib.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <csignal>
#include <mutex>
#include <utility>

#include "ferry/fleet/slurm.h"
#include "fleet/slurm/slurm_json.h"

namespace ferry::fleet::slurm {

namespace {

const char* SignalName(int signal) {
  switch (signal) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGTERM:
      return "SIGTERM";
    case SIGCONT:
      return "SIGCONT";
    case SIGSTOP:
      return "SIGSTOP";
    default:
      return nullptr;
  }
}

class RestClient final : public SlurmClient {
 public:
  explicit RestClient(RestOptions options) : options_(std::move(options)) {
    if (options_.endpoint.starts_with("unix:")) {
      socket_path_ = options_.endpoint.substr(5);
      while (socket_path_.starts_with("//")) socket_path_.erase(0, 1);
    }
  }

  std::string Describe() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return "rest " + options_.endpoint + (version_ ? " " + version_->ToString() : "");
  }

  Result<ProbeResult> Probe() override {
    std::vector<ApiVersion> served;
    auto document = Request("GET", "/openapi/v3", "");
    if (document.ok() && document->status == 200) {
      auto parsed = internal::ParseServedVersions(document->body);
      if (parsed.ok()) served = parsed.MoveValueUnsafe();
    } else if (!document.ok() && document.status().code() == StatusCode::kIOError) {
      return document.status();
    }
    if (served.empty()) {
      // No OpenAPI document: ask each known version's ping, newest first.
      for (auto it = KnownApiVersions().rbegin(); it != KnownApiVersions().rend(); ++it) {
        auto ping = Request("GET", "/slurm/" + it->ToString() + "/ping", "");
        if (ping.ok() && ping->status != 404) served.insert(served.begin(), *it);
      }
    }
    ApiVersion chosen;
    if (options_.version) {
      if (std::find(served.begin(), served.end(), *options_.version) == served.end()) {
        return Status::NotImplemented("slurmrestd at " + options_.endpoint + " does not serve " +
                                      options_.version->ToString() + " (serves " +
                                      VersionList(served) + ")");
      }
      chosen = *options_.version;
    } else {
      for (const ApiVersion& version : served) {
        if (std::find(KnownApiVersions().begin(), KnownApiVersions().end(), version) !=
            KnownApiVersions().end()) {
          chosen = std::max(chosen, version);
        }
      }
      if (chosen.number == 0) {
        return Status::NotImplemented("slurmrestd at " + options_.endpoint +
                                      " serves no API version this client knows (serves " +
                                      VersionList(served) + ")");
      }
    }
    const std::string what = "GET /slurm/" + chosen.ToString() + "/ping";
    FERRY_ASSIGN_OR_RAISE(Response ping,
                          Request("GET", "/slurm/" + chosen.ToString() + "/ping", ""));
    FERRY_RETURN_NOT_OK(CheckHttp(ping, what));
    FERRY_ASSIGN_OR_RAISE(ProbeResult probe, internal::ParsePing(ping.body, what));
    probe.version = chosen;
    probe.served = served;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      version_ = chosen;
    }
    return probe;
  }

  Result<std::vector<Node>> ListNodes() override {
    FERRY_ASSIGN_OR_RAISE(ApiVersion version, Version());
    const std::string path = "/slurm/" + version.ToString() + "/nodes";
    FERRY_ASSIGN_OR_RAISE(Response response, Request("GET", path, ""));
    FERRY_RETURN_NOT_OK(CheckHttp(response, "GET " + path));
    return internal::ParseNodes(response.body, "GET " + path);
  }

  Result<std::vector<Job>> ListJobs(const JobFilter& filter) override {
    FERRY_ASSIGN_OR_RAISE(ApiVersion version, Version());
    const std::string path = "/slurm/" + version.ToString() + "/jobs";
    FERRY_ASSIGN_OR_RAISE(Response response, Request("GET", path, ""));
    FERRY_RETURN_NOT_OK(CheckHttp(response, "GET " + path));
    FERRY_ASSIGN_OR_RAISE(std::vector<Job> jobs, internal::ParseJobs(response.body, "GET " + path));
    std::erase_if(jobs, [&](const Job& job) { return !filter.Matches(job); });
    return jobs;
  }

  Result<std::optional<Job>> GetJob(int64_t job_id) override {
    FERRY_ASSIGN_OR_RAISE(ApiVersion version, Version());
    const std::string path = "/slurm/" + version.ToString() + "/job/" + std::to_string(job_id);
    FERRY_ASSIGN_OR_RAISE(Response response, Request("GET", path, ""));
    FERRY_RETURN_NOT_OK(CheckHttp(response, "GET " + path));
    FERRY_ASSIGN_OR_RAISE(std::vector<Job> jobs, internal::ParseJobs(response.body, "GET " + path));
    for (Job& job : jobs) {
      if (job.id == job_id) return std::optional<Job>(std::move(job));
    }
    return std::optional<Job>();
  }

  Result<int64_t> Submit(const SubmitRequest& request) override {
    FERRY_RETURN_NOT_OK(internal::ValidateSubmit(request));
    FERRY_ASSIGN_OR_RAISE(ApiVersion version, Version());
    const std::string path = "/slurm/" + version.ToString() + "/job/submit";
    FERRY_ASSIGN_OR_RAISE(Response response,
                          Request("POST", path, internal::SubmitBody(request, version)));
    FERRY_RETURN_NOT_OK(CheckHttp(response, "POST " + path));
    return internal::ParseSubmitResponse(response.body, "POST " + path);
  }

  Status Cancel(int64_t job_id, int signal) override {
    FERRY_ASSIGN_OR_RAISE(ApiVersion version, Version());
    std::string path = "/slurm/" + version.ToString() + "/job/" + std::to_string(job_id);
    if (signal != 0) {
      const char* name = SignalName(signal);
      if (name == nullptr) {
        return Status::Invalid("slurm cancel: signal " + std::to_string(signal) +
                               " has no name slurmrestd accepts");
      }
      path += std::string("?signal=") + name;
    }
    FERRY_ASSIGN_OR_RAISE(Response response, Request("DELETE", path, ""));
    FERRY_RETURN_NOT_OK(CheckHttp(response, "DELETE " + path));
    Status status = internal::ParseEmptyResponse(response.body, "DELETE " + path);
    // Idempotent: the job is gone or over already.
    if (!status.ok() && (status.message().find("(2017)") != std::string::npos ||
                         status.message().find("(2021)") != std::string::npos)) {
      return Status::OK();
    }
    return status;
  }

 private:
  struct Response {
    int status = 0;
    std::string body;
  };

  static std::string VersionList(const std::vector<ApiVersion>& versions) {
    if (versions.empty()) return "none";
    std::string out;
    for (const ApiVersion& version : versions) {
      if (!out.empty()) out += ", ";
      out += version.ToString();
    }
    return out;
  }

  Result<ApiVersion> Version() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (version_) return *version_;
    }
    FERRY_ASSIGN_OR_RAISE(ProbeResult probe, Probe());
    return probe.version;
  }

  // slurmrestd answers errors with 4xx/5xx and a JSON body that says why;
  // those bodies go to the parsers. Anything else is an error here.
  Status CheckHttp(const Response& response, const std::string& what) const {
    if (response.status == 401 || response.status == 403) {
      return Status::IOError(what + ": slurmrestd refused the credentials (HTTP " +
                             std::to_string(response.status) + ")");
    }
    if (response.status == 404) {
      return Status::NotImplemented(what + ": not served by slurmrestd (HTTP 404)");
    }
    if (response.status != 200 && response.body.find('{') == std::string::npos) {
      return Status::IOError(what + ": HTTP " + std::to_string(response.status));
    }
    return Status::OK();
  }

  Result<Response> Request(const std::string& method, const std::string& path,
                           const std::string& body) {
    std::unique_ptr<httplib::Client> client;
    if (!socket_path_.empty()) {
      client = std::make_unique<httplib::Client>(socket_path_, 80);
      client->set_address_family(AF_UNIX);
    } else {
      client = std::make_unique<httplib::Client>(options_.endpoint);
    }
    const auto seconds = static_cast<time_t>(options_.timeout_s);
    const auto micros =
        static_cast<time_t>((options_.timeout_s - static_cast<double>(seconds)) * 1e6);
    client->set_connection_timeout(seconds, micros);
    client->set_read_timeout(seconds, micros);
    client->set_write_timeout(seconds, micros);
    httplib::Headers headers;
    if (!options_.user_name.empty()) headers.emplace("X-SLURM-USER-NAME", options_.user_name);
    if (!options_.token.empty()) headers.emplace("X-SLURM-USER-TOKEN", options_.token);
    httplib::Result result = method == "GET" ? client->Get(path, headers)
                             : method == "POST"
                                 ? client->Post(path, headers, body, "application/json")
                                 : client->Delete(path, headers);
    if (!result) {
      return Status::IOError(method + " " + path + ": slurmrestd at " + options_.endpoint +
                             " unreachable: " + httplib::to_string(result.error()));
    }
    return Response{result->status, result->body};
  }

  const RestOptions options_;
  std::string socket_path_;
  mutable std::mutex mutex_;
  std::optional<ApiVersion> version_;  // guarded by mutex_
};

}  // namespace

Result<std::unique_ptr<SlurmClient>> MakeRestClient(RestOptions options) {
  const std::string& endpoint = options.endpoint;
  if (endpoint.starts_with("unix:")) {
    std::string path = endpoint.substr(5);
    while (path.starts_with("//")) path.erase(0, 1);
    if (path.empty() || path.front() != '/') {
      return Status::Invalid("slurm rest: \"" + endpoint + "\": want unix:/absolute/path");
    }
    if (path.size() >= sizeof(sockaddr_un::sun_path)) {
      return Status::Invalid("slurm rest: socket path too long for a UNIX socket: " + path);
    }
  } else if (!endpoint.starts_with("http://") && !endpoint.starts_with("https://")) {
    return Status::Invalid("slurm rest: endpoint \"" + endpoint +
                           "\" is neither unix:/path nor http(s)://host:port");
  }
  if (options.timeout_s <= 0) return Status::Invalid("slurm rest: timeout must be positive");
  if (options.token.empty() != options.user_name.empty()) {
    return Status::Invalid("slurm rest: a JWT needs both user_name and token");
  }
  return std::unique_ptr<SlurmClient>(std::make_unique<RestClient>(std::move(options)));
}

}  // namespace ferry::fleet::slurm
