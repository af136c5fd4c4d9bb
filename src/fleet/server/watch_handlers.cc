// GET /v1/jobs:watch (docs/fleet-api.md#watching-jobs): job events after a
// resource version, as server-sent events (Accept: text/event-stream) that
// the watch hub streams off the worker pool, or as a JSON long poll.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "fleet/server/fleet_server.h"
#include "fleet/server/raw_headers.h"
#include "fleet/server/request_parsing.h"
#include "fleet/server/responses.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

constexpr int64_t kDefaultTimeoutS = 25;
constexpr int64_t kMaxTimeoutS = 60;
constexpr int64_t kRetryAfterS = 5;

bool WantsEventStream(const httplib::Request& req) {
  std::string accept = req.get_header_value("Accept");
  std::transform(accept.begin(), accept.end(), accept.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  return accept.find("text/event-stream") != std::string::npos;
}

}  // namespace

void FleetServer::WatchJobs(Call& c) {
  if (!OnlyParams(c, {"since", "timeout_s", "state", "team", "limit"})) return;
  WatchQuery query;
  query.scope = ScopeOf(c.principal);
  if (!StateParams(c, &query.filter.states)) return;
  if (!AtMostOnce(c, "team")) return;
  query.filter.team = c.Param("team");
  std::optional<int64_t> limit = IntParam(c, "limit", 500, 1, 1000);
  if (!limit) return;
  query.limit = static_cast<int>(*limit);
  std::optional<int64_t> timeout_s = IntParam(c, "timeout_s", kDefaultTimeoutS, 0, kMaxTimeoutS);
  if (!timeout_s) return;

  const bool stream = WantsEventStream(c.req) && c.req.method != "HEAD";
  // An EventSource that reconnects sends the last id it saw; it wins over the query.
  std::optional<int64_t> since;
  if (stream && c.req.has_header("Last-Event-ID")) {
    since = ParseInt(c.req.get_header_value("Last-Event-ID"));
    if (!since || *since < 0) {
      return SendProblem(c, 400, "bad-request",
                         "Last-Event-ID must be an event id (an integer >= 0)");
    }
  } else if (c.HasParam("since")) {
    since = IntParam(c, "since", 0, 0, INT64_MAX);
    if (!since) return;
  }
  Result<int64_t> head = watch_.Head();
  if (!head.ok()) return SendStoreError(c, head.status());
  if (since && *since > *head) {
    // The hub may trail the store by one poll; only the store can say no.
    Result<int64_t> latest = store_->LatestEventId();
    if (!latest.ok()) return SendStoreError(c, latest.status());
    if (*since > *latest) {
      return SendProblem(c, 400, "bad-request",
                         "since " + std::to_string(*since) + " is newer than the newest event (" +
                             std::to_string(*latest) +
                             "); this store never issued it: watch without since to start now");
    }
  }
  auto unavailable = [&](const std::string& what) {
    c.res.set_header("Retry-After", std::to_string(kRetryAfterS));
    // A rejected client that keeps its connection would hold a worker.
    c.res.set_header("Connection", "close");
    SendProblem(c, 503, "unavailable",
                "all " + what + " places are taken; retry in " + std::to_string(kRetryAfterS) +
                    " s" + (stream ? "" : " or use Accept: text/event-stream"));
  };

  if (stream) {
    std::shared_ptr<WatchHub::Slot> slot = watch_.ReserveStream();
    if (!slot) return unavailable("watch stream");
    c.res.status = 200;
    c.res.set_header("Cache-Control", "no-cache");
    c.res.set_header("Connection", "close");
    c.res.set_header("X-Accel-Buffering", "no");  // proxies: do not buffer the stream
    c.res.set_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
      sink.done();
      return true;
    });
    const int64_t from = since.value_or(*head);
    TakeConnectionAfterResponse(
        [this, slot, query, from](std::unique_ptr<TakenConnection> connection) {
          watch_.Adopt(slot, std::move(connection), query, from);
        });
    return;
  }

  if (!since) {
    // No resource version yet: the current one, at once.
    return SendJson(c, 200, {{"events", json::array()}, {"next_since", *head}});
  }
  std::shared_ptr<WatchHub::Slot> slot = watch_.ReserveLongPoll();
  if (!slot) return unavailable("long-poll");
  Result<WatchHub::Batch> batch = watch_.Wait(*slot, query, *since, *timeout_s * 1000);
  if (!batch.ok()) return SendStoreError(c, batch.status());
  json events = json::array();
  for (const WatchedEvent& event : batch->events) events.push_back(WatchEventJson(event));
  SendJson(c, 200, {{"events", std::move(events)}, {"next_since", batch->next_since}});
}

}  // namespace ferry::fleet::server_internal
