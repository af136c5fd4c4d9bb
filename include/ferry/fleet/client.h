// A small HTTP client for the fleet REST API (docs/fleet-api.md), used by the
// `ferry` CLI and the node agent. It sends JSON with a bearer token and
// returns the status, the parsed JSON body and the headers. An https:// base
// URL speaks TLS and verifies the server's certificate chain and host name
// (against `ca_file`, else the system's CA store). An error status
// (>= 400) becomes a Status whose message is read from the problem details:
// "422 validation: gpus_per_task: must be an integer between 0 and 64".
//
// Thread-compatible: one Client per thread, except Interrupt(), which any
// thread may call to abort the request in flight.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ferry/base/status.h"

namespace ferry::fleet {

struct ClientOptions {
  std::string base_url = "http://127.0.0.1:8700";  // scheme://host:port, no path
  std::string token;                               // bearer token; empty: none sent
  int64_t connect_timeout_ms = 5'000;
  int64_t read_timeout_ms = 60'000;  // long polls add their wait to this
  int64_t write_timeout_ms = 30'000;
  // PEM file of the CA certificates an https server's certificate must chain
  // to; empty: the system's CA store. Ignored for http:// URLs.
  std::string ca_file{};
};

// Checks what can be checked before connecting: the URL's form
// (http[s]://host[:port], no path) and, for https with a `ca_file`, that the
// file is readable and holds at least one PEM certificate. kInvalid with a
// message naming the URL or the file.
Status CheckClientOptions(const ClientOptions& options);

// nlohmann::json's destructor flattens nested values into a std::vector,
// which the analysis counts as a throw.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct Response {
  int status = 0;
  nlohmann::json body;  // null when the body is empty or not JSON
  std::string raw_body;
  // Header names in lower case; the last value wins for repeated headers.
  std::map<std::string, std::string> headers;

  // The value of header `name` (any case), or "" when absent.
  std::string Header(const std::string& name) const;
};

struct Request {
  std::string method = "GET";
  std::string path;                                        // "/v1/jobs"
  std::vector<std::pair<std::string, std::string>> query;  // appended URL-encoded
  std::optional<nlohmann::json> body;                      // sent as application/json
  // Or raw bytes (an upload) sent with `content_type`; ignored when `body` is set.
  std::optional<std::string> raw_body;
  std::string content_type = "application/octet-stream";
  std::map<std::string, std::string> headers;  // extra headers (Idempotency-Key, ...)
  int64_t extra_read_timeout_ms = 0;           // added to the read timeout (long polls)
  bool allow_error_status = false;             // true: return >= 400 responses as values
};

// The message for an error response: "<status> <problem type suffix>: <what>",
// where <what> lists the problem's field errors ("field: detail; ...") or else
// its detail or title; a body that is not a problem is quoted (shortened).
std::string DescribeErrorResponse(int status, const std::string& content_type,
                                  const std::string& body);

// Percent-encodes a query or path component (unreserved characters kept).
std::string UrlEncode(const std::string& text);

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends `request`. Transport failures are IOError ("cannot reach
  // http://...: Connection"); TLS failures say what failed: an untrusted
  // certificate ("TLS certificate verification failed: ... unable to get
  // local issuer certificate"), a certificate not issued for the URL's host
  // ("... does not match host ..."), a failed handshake, an unusable CA
  // file. An error status is an error unless
  // `allow_error_status` (4xx: Invalid, 5xx: IOError, message from
  // DescribeErrorResponse).
  Result<Response> Send(const Request& request);

  Result<Response> Get(const std::string& path,
                       std::vector<std::pair<std::string, std::string>> query = {});
  Result<Response> Post(const std::string& path, const nlohmann::json& body,
                        std::map<std::string, std::string> headers = {});
  Result<Response> Delete(const std::string& path);

  // Aborts the request in flight (its Send returns an IOError); a no-op when
  // none is. Safe from any thread.
  void Interrupt();

  const ClientOptions& options() const { return options_; }

 private:
  struct Impl;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::fleet
