#include "fleet/server/webhooks.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>

#include "fleet/server/clock.h"

namespace ferry::fleet::server_internal {

namespace {

constexpr size_t kMaxUrlBytes = 2048;
constexpr int kDuePerTick = 100;
constexpr int kEventsPerTick = 1000;
constexpr int64_t kMaxBackoffMs = 600'000;
constexpr int64_t kHooksRecheckMs = 1'000;
// Enough of the receiver's answer for the delivery log.
constexpr size_t kErrorBodyBytes = 200;

bool HostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.';
}

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 0xf]);
  }
  return out;
}

}  // namespace

Result<WebhookTarget> ParseWebhookUrl(std::string_view url) {
  if (url.size() > kMaxUrlBytes) return Status::Invalid("is longer than 2048 bytes");
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return Status::Invalid("must not contain spaces or control characters");
    }
  }
  std::string_view rest;
  std::string scheme;
  int default_port = 0;
  if (url.starts_with("http://")) {
    scheme = "http";
    default_port = 80;
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    scheme = "https";
    default_port = 443;
    rest = url.substr(8);
  } else {
    return Status::Invalid("must start with http:// or https://");
  }
  if (rest.find('#') != std::string_view::npos) return Status::Invalid("must not have a fragment");
  const size_t path_at = rest.find_first_of("/?");
  const std::string_view authority = rest.substr(0, path_at);
  std::string path(path_at == std::string_view::npos ? "/" : rest.substr(path_at));
  if (path.front() == '?') path.insert(0, "/");
  if (authority.find('@') != std::string_view::npos) {
    return Status::Invalid("must not carry a user name or password");
  }
  std::string_view host = authority;
  std::string_view port_text;
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos || close == 1)
      return Status::Invalid("has a bad IPv6 host");
    for (char c : authority.substr(1, close - 1)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
        return Status::Invalid("has a bad IPv6 host");
      }
    }
    host = authority.substr(0, close + 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Status::Invalid("has a bad host");
      port_text = after.substr(1);
      if (port_text.empty()) return Status::Invalid("has an empty port");
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return Status::Invalid("has an empty port");
    }
    if (host.empty()) return Status::Invalid("has no host");
    if (!std::all_of(host.begin(), host.end(), HostChar) || host.front() == '.' ||
        host.front() == '-') {
      return Status::Invalid("has a bad host name");
    }
  }
  int port = default_port;
  if (!port_text.empty()) {
    if (port_text.size() > 5 || !std::all_of(port_text.begin(), port_text.end(),
                                             [](char c) { return c >= '0' && c <= '9'; })) {
      return Status::Invalid("has a bad port");
    }
    port = std::stoi(std::string(port_text));
    if (port < 1 || port > 65535) return Status::Invalid("has a port outside 1-65535");
  }
  return WebhookTarget{scheme + "://" + std::string(host) + ":" + std::to_string(port),
                       std::move(path)};
}

std::string WebhookSignature(std::string_view secret, std::string_view timestamp,
                             std::string_view body) {
  std::string message;
  message.reserve(timestamp.size() + 1 + body.size());
  message.append(timestamp).append(".").append(body);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return Hex(digest, length);
}

int64_t WebhookBackoffMs(int64_t base_ms, int attempts, double jitter) {
  const int doublings = std::clamp(attempts - 1, 0, 30);
  const double delay = std::min(static_cast<double>(kMaxBackoffMs),
                                static_cast<double>(base_ms) * std::ldexp(1.0, doublings));
  return std::max<int64_t>(1, std::llround(delay * std::clamp(jitter, 0.8, 1.2)));
}

WebhookDispatcher::WebhookDispatcher(Store* store, metrics::Registry* registry, Options options,
                                     SettledHead settled_head, Render render, LogError log_error)
    : store_(store),
      options_(std::move(options)),
      settled_head_(std::move(settled_head)),
      render_(std::move(render)),
      log_error_(std::move(log_error)) {
  attempts_ = &registry->AddCounter(
      "ferry_webhook_attempts_total",
      "Webhook delivery attempts by outcome: delivered (2xx), retry (another attempt is due),"
      " failed (no attempt left)",
      {"outcome"});
  for (const char* outcome : {"delivered", "retry", "failed"}) attempts_->With({outcome});
  made_ = &registry->AddCounter("ferry_webhook_deliveries_total",
                                "Webhook deliveries made from job events");
  made_->With();
  seconds_ = &registry->AddHistogram(
      "ferry_webhook_attempt_duration_seconds",
      "Time from connecting to a webhook receiver to its answer (or the failure)", {},
      {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
}

WebhookDispatcher::~WebhookDispatcher() { Stop(); }

void WebhookDispatcher::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void WebhookDispatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WebhookDispatcher::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void WebhookDispatcher::Loop() {
  for (;;) {
    bool woken = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_ms),
                   [&] { return stopping_ || woken_; });
      if (stopping_) return;
      woken = std::exchange(woken_, false);
    }
    if (woken) hooks_checked_ms_ = 0;
    Tick(NowMs());
  }
}

void WebhookDispatcher::Tick(int64_t now_ms) {
  if (now_ms - hooks_checked_ms_ >= kHooksRecheckMs) {
    hooks_checked_ms_ = now_ms;
    Result<std::vector<Webhook>> hooks = store_->ListWebhooks(Scope::All());
    if (!hooks.ok()) return log_error_("webhooks: listing them", hooks.status());
    any_hooks_ = !hooks->empty();
  }
  if (!any_hooks_) return;
  Result<int64_t> head = settled_head_();
  if (!head.ok()) return log_error_("webhooks: reading the newest event", head.status());
  Result<int64_t> made = store_->EnqueueWebhookDeliveries(*head, kEventsPerTick, now_ms, render_);
  if (!made.ok()) return log_error_("webhooks: making deliveries", made.status());
  made_->With().Add(static_cast<double>(*made));
  Result<std::vector<WebhookDelivery>> due = store_->DueWebhookDeliveries(now_ms, kDuePerTick);
  if (!due.ok()) return log_error_("webhooks: reading due deliveries", due.status());
  // A receiver that fails once this tick gets no more tries this tick, so a
  // dead one does not hold up the others' deliveries.
  std::set<int64_t> failing;
  for (const WebhookDelivery& delivery : *due) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    if (failing.count(delivery.webhook_id) > 0) continue;
    const WebhookAttempt attempt = Send(delivery, NowMs());
    if (!attempt.delivered) failing.insert(delivery.webhook_id);
    attempts_->With({attempt.delivered ? "delivered" : attempt.give_up ? "failed" : "retry"}).Add();
    if (Status st = store_->RecordWebhookAttempt(attempt); !st.ok()) {
      log_error_("webhooks: recording an attempt", st);
    }
  }
}

WebhookAttempt WebhookDispatcher::Send(const WebhookDelivery& delivery, int64_t now_ms) {
  WebhookAttempt attempt;
  attempt.delivery_id = delivery.id;
  const auto started = std::chrono::steady_clock::now();
  Result<WebhookTarget> target = ParseWebhookUrl(delivery.url);
  if (!target.ok()) {
    attempt.error = "bad url: " + target.status().message();
  } else {
    httplib::Client client(target->scheme_host_port);
    client.set_connection_timeout(std::chrono::milliseconds(options_.connect_timeout_ms));
    client.set_read_timeout(std::chrono::milliseconds(options_.timeout_ms));
    client.set_write_timeout(std::chrono::milliseconds(options_.timeout_ms));
    client.set_keep_alive(false);
    if (!options_.ca_file.empty()) client.set_ca_cert_path(options_.ca_file);
    const std::string timestamp = std::to_string(now_ms / 1000);
    const httplib::Headers headers = {
        {"User-Agent", "ferry-webhook/1"},
        {"X-Ferry-Webhook-Id", std::to_string(delivery.webhook_id)},
        {"X-Ferry-Delivery-Id", std::to_string(delivery.id)},
        {"X-Ferry-Event-Id", std::to_string(delivery.event_id)},
        {"X-Ferry-Attempt", std::to_string(delivery.attempts + 1)},
        {"X-Ferry-Timestamp", timestamp},
        {"X-Ferry-Signature",
         "sha256=" + WebhookSignature(delivery.secret, timestamp, delivery.body)},
    };
    httplib::Result answer = client.Post(target->path, headers, delivery.body, "application/json");
    if (!answer) {
      attempt.error = httplib::to_string(answer.error());
    } else {
      attempt.status_code = answer->status;
      if (answer->status >= 200 && answer->status < 300) {
        attempt.delivered = true;
      } else {
        attempt.error = "answered " + std::to_string(answer->status) + ": " +
                        answer->body.substr(0, kErrorBodyBytes);
      }
    }
  }
  seconds_->With().Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  attempt.at_ms = NowMs();
  if (!attempt.delivered) {
    const int made = delivery.attempts + 1;
    attempt.give_up = made >= options_.max_attempts;
    thread_local std::mt19937 random(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    attempt.next_attempt_at_ms =
        attempt.at_ms + WebhookBackoffMs(options_.retry_base_ms, made, jitter(random));
  }
  return attempt;
}

}  // namespace ferry::fleet::server_internal
