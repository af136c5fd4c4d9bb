#include "ferry/fleet/client.h"

#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string_view>
#include <utility>

namespace ferry::fleet {

namespace {

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// Printable, one line, at most `limit` characters: error bodies end up in
// terminal messages.
std::string Shorten(std::string_view text, size_t limit = 200) {
  std::string out;
  for (char c : text) {
    if (out.size() >= limit) {
      out += "...";
      break;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string StringField(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

int64_t Millis(int64_t value) { return std::max<int64_t>(value, 1); }

const char* ReasonPhrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

// The parts of a base URL: scheme (lower case) and host (without brackets or
// port). False when it is not http[s]://host[:port] without a path.
bool SplitBaseUrl(std::string url, std::string* scheme, std::string* host) {
  while (!url.empty() && url.back() == '/') url.pop_back();  // as the Client does
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return false;
  *scheme = Lower(url.substr(0, scheme_end));
  if (*scheme != "http" && *scheme != "https") return false;
  const std::string authority = url.substr(scheme_end + 3);
  if (authority.empty() || authority.find('/') != std::string::npos) return false;
  if (authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos || close == 1) return false;
    *host = authority.substr(1, close - 1);
  } else {
    *host = authority.substr(0, authority.find(':'));
  }
  return !host->empty();
}

// While a TLS request runs, a peer that closed its end must not kill the
// process: OpenSSL writes with write(2), which raises SIGPIPE. The signal is
// blocked on this thread and a SIGPIPE raised meanwhile is consumed.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedSigpipeBlock() {
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
};

}  // namespace

Status CheckClientOptions(const ClientOptions& options) {
  std::string scheme, host;
  if (!SplitBaseUrl(options.base_url, &scheme, &host)) {
    return Status::Invalid("bad server URL '" + options.base_url +
                           "' (expected http://host:port or https://host:port)");
  }
  if (scheme != "https" || options.ca_file.empty()) return Status::OK();
  errno = 0;
  BIO* file = BIO_new_file(options.ca_file.c_str(), "r");
  if (file == nullptr) {
    const int error = errno;
    ERR_clear_error();
    return Status::Invalid("cannot read CA file " + options.ca_file + ": " +
                           (error != 0 ? std::strerror(error) : "cannot open it"));
  }
  int certificates = 0;
  while (X509* certificate = PEM_read_bio_X509(file, nullptr, nullptr, nullptr)) {
    X509_free(certificate);
    ++certificates;
  }
  BIO_free(file);
  ERR_clear_error();  // the read that ended the loop
  if (certificates == 0) {
    return Status::Invalid("CA file " + options.ca_file +
                           " holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)");
  }
  return Status::OK();
}

std::string Response::Header(const std::string& name) const {
  auto it = headers.find(Lower(name));
  return it == headers.end() ? "" : it->second;
}

std::string UrlEncode(const std::string& text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string DescribeErrorResponse(int status, const std::string& content_type,
                                  const std::string& body) {
  std::string prefix = std::to_string(status);
  nlohmann::json problem = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  const bool is_problem =
      problem.is_object() && (Lower(content_type).find("problem+json") != std::string::npos ||
                              problem.contains("type") || problem.contains("title"));
  if (!is_problem) {
    const std::string reason = ReasonPhrase(status);
    if (!reason.empty()) prefix += " " + reason;
    const std::string text = Shorten(body);
    return text.empty() ? prefix : prefix + ": " + text;
  }
  std::string type = StringField(problem, "type");
  if (auto colon = type.rfind(':'); colon != std::string::npos) type = type.substr(colon + 1);
  if (!type.empty()) prefix += " " + Shorten(type, 64);

  std::string what;
  auto errors = problem.find("errors");
  if (errors != problem.end() && errors->is_array()) {
    for (const auto& error : *errors) {
      if (!error.is_object()) continue;
      const std::string field = StringField(error, "field");
      const std::string detail = StringField(error, "detail");
      if (field.empty() && detail.empty()) continue;
      if (!what.empty()) what += "; ";
      if (!field.empty()) what.append(field).append(": ");
      what += detail;
    }
  }
  if (what.empty()) what = StringField(problem, "detail");
  if (what.empty()) what = StringField(problem, "title");
  what = Shorten(what, 2000);
  return what.empty() ? prefix : prefix + ": " + what;
}

struct Client::Impl {
  explicit Impl(const std::string& url) : http(url) {}
  httplib::Client http;
  Status usable;  // CheckClientOptions, once
  bool https = false;
  std::string host;

  // What failed, for a transport error of a request to `url`.
  std::string DescribeFailure(httplib::Error error, const ClientOptions& options,
                              const std::string& what) {
    const std::string& url = options.base_url;
    const std::string trusted =
        options.ca_file.empty()
            ? "the system's CA store; pass --ca-file or set FERRY_CA_FILE for a private CA"
            : "CA file " + options.ca_file;
    switch (error) {
      case httplib::Error::SSLServerVerification: {
        const long verify = http.get_openssl_verify_result();
        const bool name_mismatch =
            verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH;
        if (verify != X509_V_OK && !name_mismatch) {
          return "TLS certificate verification failed for " + url + " (" + what +
                 "): " + X509_verify_cert_error_string(verify) + " (checked against " + trusted +
                 ")";
        }
        return "TLS certificate verification failed for " + url + " (" + what +
               "): the server's certificate does not match host '" + host +
               "' (no subjectAltName of the certificate names it)";
      }
      case httplib::Error::SSLConnection:
        return "TLS handshake with " + url + " failed (" + what +
               "); if the server speaks plain HTTP, use an http:// URL";
      case httplib::Error::SSLLoadingCerts:
        return "cannot load the CA certificates of " + trusted + " (" + what + ")";
      default:
        break;
    }
    if (!https && error == httplib::Error::Read) {
      return "cannot reach " + url + " (" + what +
             "): the connection closed without an answer (Read); if the server uses TLS, use "
             "an https:// URL";
    }
    return "cannot reach " + url + " (" + what + "): " + httplib::to_string(error);
  }
};

Client::Client(ClientOptions options) : options_(std::move(options)) {
  while (!options_.base_url.empty() && options_.base_url.back() == '/') {
    options_.base_url.pop_back();
  }
  impl_ = std::make_unique<Impl>(options_.base_url);
  impl_->usable = CheckClientOptions(options_);
  std::string scheme;
  if (SplitBaseUrl(options_.base_url, &scheme, &impl_->host)) impl_->https = scheme == "https";
  auto& http = impl_->http;
  if (impl_->https) {
    http.enable_server_certificate_verification(true);
    if (!options_.ca_file.empty()) http.set_ca_cert_path(options_.ca_file);
    // OpenSSL checks the host name as part of the chain (RFC 6125: the
    // subjectAltName entries when there are any, the common name only when
    // there are none; IP hosts against IP entries). httplib's own check,
    // which falls back to the common name, then runs on a verified name.
    if (SSL_CTX* context = http.ssl_context()) {
      X509_VERIFY_PARAM* param = SSL_CTX_get0_param(context);
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      if (X509_VERIFY_PARAM_set1_ip_asc(param, impl_->host.c_str()) != 1) {
        ERR_clear_error();
        X509_VERIFY_PARAM_set1_host(param, impl_->host.c_str(), impl_->host.size());
      }
    }
  }
  const int64_t connect = Millis(options_.connect_timeout_ms);
  const int64_t write = Millis(options_.write_timeout_ms);
  http.set_connection_timeout(connect / 1000, (connect % 1000) * 1000);
  http.set_write_timeout(write / 1000, (write % 1000) * 1000);
  http.set_keep_alive(true);
  http.set_tcp_nodelay(true);  // else each kept-alive POST waits ~40 ms (Nagle)
  if (!options_.token.empty()) http.set_bearer_token_auth(options_.token);
}

Client::~Client() = default;

void Client::Interrupt() { impl_->http.stop(); }

Result<Response> Client::Send(const Request& request) {
  auto& http = impl_->http;
  if (!impl_->usable.ok()) return impl_->usable;
  if (!http.is_valid()) {
    return Status::Invalid("bad server URL '" + options_.base_url +
                           "' (expected http://host:port or https://host:port)");
  }
  const int64_t read =
      Millis(options_.read_timeout_ms + std::max<int64_t>(0, request.extra_read_timeout_ms));
  http.set_read_timeout(read / 1000, (read % 1000) * 1000);

  httplib::Request req;
  req.method = request.method;
  req.path = request.path;
  for (size_t i = 0; i < request.query.size(); ++i) {
    req.path += (i == 0 && request.path.find('?') == std::string::npos) ? '?' : '&';
    req.path += UrlEncode(request.query[i].first) + "=" + UrlEncode(request.query[i].second);
  }
  for (const auto& [name, value] : request.headers) req.headers.emplace(name, value);
  req.headers.emplace("Accept", "application/json, application/problem+json");
  if (!request.body.has_value() && request.raw_body.has_value()) {
    req.body = *request.raw_body;
    req.headers.emplace("Content-Type", request.content_type);
  }
  if (request.body.has_value()) {
    req.body = request.body->dump();
    req.headers.emplace("Content-Type", "application/json");
  }

  std::optional<ScopedSigpipeBlock> no_sigpipe;
  if (impl_->https) no_sigpipe.emplace();
  httplib::Result result = http.send(req);
  if (!result) {
    return Status::IOError(
        impl_->DescribeFailure(result.error(), options_, request.method + " " + request.path));
  }
  Response response;
  response.status = result->status;
  response.raw_body = result->body;
  for (const auto& [name, value] : result->headers) response.headers[Lower(name)] = value;
  if (!response.raw_body.empty()) {
    response.body = nlohmann::json::parse(response.raw_body, nullptr, /*allow_exceptions=*/false);
    if (response.body.is_discarded()) response.body = nullptr;
  }
  if (response.status >= 400 && !request.allow_error_status) {
    std::string message =
        DescribeErrorResponse(response.status, response.Header("content-type"), response.raw_body);
    return response.status >= 500 ? Status::IOError(std::move(message))
                                  : Status::Invalid(std::move(message));
  }
  return response;
}

Result<Response> Client::Get(const std::string& path,
                             std::vector<std::pair<std::string, std::string>> query) {
  Request request;
  request.path = path;
  request.query = std::move(query);
  return Send(request);
}

Result<Response> Client::Post(const std::string& path, const nlohmann::json& body,
                              std::map<std::string, std::string> headers) {
  Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.headers = std::move(headers);
  return Send(request);
}

Result<Response> Client::Delete(const std::string& path) {
  Request request;
  request.method = "DELETE";
  request.path = path;
  return Send(request);
}

}  // namespace ferry::fleet
