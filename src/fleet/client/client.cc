#include "ferry/fleet/client.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
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

}  // namespace

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
      what += field.empty() ? detail : field + ": " + detail;
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
};

Client::Client(ClientOptions options) : options_(std::move(options)) {
  while (!options_.base_url.empty() && options_.base_url.back() == '/') {
    options_.base_url.pop_back();
  }
  impl_ = std::make_unique<Impl>(options_.base_url);
  auto& http = impl_->http;
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
  const std::string& url = options_.base_url;
  const size_t scheme_end = url.find("://");
  const std::string scheme =
      scheme_end == std::string::npos ? "" : Lower(url.substr(0, scheme_end));
  const bool well_formed = (scheme == "http" || scheme == "https") && url.size() > scheme_end + 3 &&
                           url.find('/', scheme_end + 3) == std::string::npos;
  if (!well_formed || !http.is_valid()) {
    return Status::Invalid("bad server URL '" + options_.base_url +
                           "' (expected http://host:port)");
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
  if (request.body.has_value()) {
    req.body = request.body->dump();
    req.headers.emplace("Content-Type", "application/json");
  }

  httplib::Result result = http.send(req);
  if (!result) {
    return Status::IOError("cannot reach " + options_.base_url + " (" + request.method + " " +
                           request.path + "): " + httplib::to_string(result.error()));
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
