// Webhooks (docs/fleet-api.md#webhooks): the dispatcher thread that turns
// job events into deliveries (Store::EnqueueWebhookDeliveries) and POSTs
// them, signed with HMAC-SHA256, retrying with exponential backoff until
// the receiver answers 2xx or the attempts run out. Deliveries live in the
// store, so a restarted server goes on where it stopped: at least once, in
// no guaranteed order. Internal to src/fleet/server.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "ferry/base/metrics.h"
#include "ferry/base/status.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet::server_internal {

// Where a webhook URL points, split for httplib.
struct WebhookTarget {
  std::string scheme_host_port;  // "https://hooks.example:8443"
  std::string path;              // "/ferry?x=1"; "/" when the URL has none
};

// http or https, a host name or address (IPv6 in brackets), an optional
// port and path; no user info, fragment, spaces or control characters, at
// most 2,048 bytes. The error says what is wrong.
Result<WebhookTarget> ParseWebhookUrl(std::string_view url);

// The lower-case hex HMAC-SHA256 of "<timestamp>.<body>" under `secret`:
// the X-Ferry-Signature header is "sha256=" followed by it.
std::string WebhookSignature(std::string_view secret, std::string_view timestamp,
                             std::string_view body);

// The delay before attempt `attempts + 1` (attempts >= 1 made so far):
// base_ms * 2^(attempts - 1), at most 10 minutes, times `jitter` (0.8-1.2).
int64_t WebhookBackoffMs(int64_t base_ms, int attempts, double jitter);

class WebhookDispatcher {
 public:
  struct Options {
    int64_t poll_ms = 200;          // how often events are turned into deliveries
    int64_t retry_base_ms = 2'000;  // the first retry's delay, doubling after
    int max_attempts = 12;          // then the delivery fails for good
    int64_t connect_timeout_ms = 3'000;
    int64_t timeout_ms = 10'000;  // to send the request and read the answer
    std::string ca_file;          // for https receivers; empty: the system's
  };
  using LogError = std::function<void(const std::string&, const Status&)>;
  // The newest event id every lower one of which is settled (WatchHub::Head).
  using SettledHead = std::function<Result<int64_t>()>;
  // The JSON body of one event for one webhook.
  using Render = std::function<std::string(const Webhook&, const WatchedEvent&)>;

  // Registers the ferry_webhook_* metrics; `store` and `registry` outlive it.
  WebhookDispatcher(Store* store, metrics::Registry* registry, Options options,
                    SettledHead settled_head, Render render, LogError log_error);
  ~WebhookDispatcher();
  WebhookDispatcher(const WebhookDispatcher&) = delete;
  WebhookDispatcher& operator=(const WebhookDispatcher&) = delete;

  void Start();
  void Stop();  // idempotent; an attempt in flight finishes first
  // A webhook was created or deleted: look again now.
  void Wake();

 private:
  void Loop();
  void Tick(int64_t now_ms);
  WebhookAttempt Send(const WebhookDelivery& delivery, int64_t now_ms);

  Store* const store_;
  const Options options_;
  SettledHead settled_head_;
  Render render_;
  LogError log_error_;
  metrics::Family<metrics::Counter>* attempts_;
  metrics::Family<metrics::Counter>* made_;
  metrics::Family<metrics::Histogram>* seconds_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool woken_ = false;
  std::thread thread_;
  int64_t hooks_checked_ms_ = 0;  // loop thread only
  bool any_hooks_ = false;        // loop thread only
};

}  // namespace ferry::fleet::server_internal
