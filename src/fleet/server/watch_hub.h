// The watch stream behind GET /v1/jobs:watch (docs/fleet-api.md#watching-jobs):
// one hub thread reads the events appended to the store (one query per poll
// interval, only while someone watches), keeps the newest in a ring, wakes
// the long polls and writes server-sent events to the streams it holds.
// A stream is a connection taken from the HTTP worker pool after its
// response head (raw_headers.h), so open streams cost no worker thread; a
// reader that falls behind is dropped. Internal to src/fleet/server.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ferry/base/metrics.h"
#include "ferry/base/status.h"
#include "ferry/fleet/store.h"
#include "fleet/server/raw_headers.h"

namespace ferry::fleet::server_internal {

// What one watcher sees: its scope (the same as GET /v1/jobs) and filters.
struct WatchQuery {
  Scope scope;
  EventFilter filter;
  int limit = 500;  // events per long-poll answer or store read
};

// True when `event` is in the query's scope and passes its filters.
bool Matches(const WatchQuery& query, const WatchedEvent& event);
// The JSON of one watched event (the SSE data line and the long-poll list item).
nlohmann::json WatchEventJson(const WatchedEvent& event);
// One server-sent event: id, event (the event's type) and data lines.
std::string SseFrame(const WatchedEvent& event);

class WatchHub {
 public:
  struct Options {
    int max_streams = 1000;  // open server-sent event streams
    int max_long_polls = 2;  // long polls waiting at once (each holds a worker)
    int64_t poll_interval_ms = 100;
    int64_t heartbeat_ms = 15'000;          // a comment line when nothing else was sent
    int64_t write_timeout_ms = 10'000;      // a stream whose bytes wait longer is dropped
    size_t max_pending_bytes = 256 * 1024;  // a stream with more unsent bytes is dropped
    size_t ring_events = 4096;              // newest events kept in memory
    int64_t idle_grace_ms = 30'000;         // keep polling this long after the last watcher
    // The longest the stream waits for a missing event id to commit before
    // it streams past it (PostgreSQL; docs/fleet-api.md#watching-jobs).
    int64_t max_gap_hold_ms = 10'000;
  };
  using LogError = std::function<void(const std::string&, const Status&)>;

  // Registers the ferry_watch_* metrics in `registry` (docs/fleet-metrics.md).
  // `store` and `registry` outlive the hub. Starts the hub thread.
  WatchHub(Store* store, metrics::Registry* registry, Options options, LogError log_error);
  ~WatchHub();
  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;

  // Closes every stream, wakes every long poll and ends the hub thread.
  // Idempotent; later streams are closed at once and long polls return.
  void Stop();

  // The newest event id: the hub's when it is current, else the store's.
  Result<int64_t> Head();

  // A held place for one stream (Adopt) or one long poll (Wait); released
  // when destroyed unless a stream was adopted with it.
  class Slot;
  // nullopt when every place is taken (counted in ferry_watch_rejected_total).
  std::shared_ptr<Slot> ReserveStream();
  std::shared_ptr<Slot> ReserveLongPoll();

  // Takes over a connection whose SSE response head was written and streams
  // the events after `since` that match `query` to it, from the hub thread.
  void Adopt(std::shared_ptr<Slot> slot, std::unique_ptr<TakenConnection> connection,
             WatchQuery query, int64_t since);

  struct Batch {
    std::vector<WatchedEvent> events;
    int64_t next_since = 0;  // the resource version to ask from next
  };
  // Waits (holding `slot`, from ReserveLongPoll) up to `timeout_ms` for
  // events after `since` that match `query`; an empty batch at the timeout
  // or when the hub stops.
  Result<Batch> Wait(const Slot& slot, const WatchQuery& query, int64_t since, int64_t timeout_ms);

 private:
  struct Stream;
  void Loop();
  // Reads the events appended since the last read (or the head, when the hub
  // was idle); true when a full page came back (more may be waiting). Holds
  // back at an id missing below a visible one until the store's write
  // horizon says it cannot appear any more (Store::EventWriteHorizon).
  bool Fetch();
  // Finds the head to start from when the hub wakes up.
  bool Prime(int64_t now);
  // Appends the stream's new frames (from the ring, or from the store when
  // its cursor is older than the ring) and heartbeats; false to drop it.
  bool Deliver(Stream& stream, int64_t now_ms);
  // Reads from the store for a cursor older than the ring: at most one page,
  // up to `head`. Advances *since.
  Result<std::vector<WatchedEvent>> CatchUp(const WatchQuery& query, int64_t* since, int64_t head);
  void Close(Stream& stream, const char* reason);
  void Wake();

  Store* const store_;
  const Options options_;
  LogError log_error_;

  metrics::Family<metrics::Gauge>* streams_gauge_;
  metrics::Family<metrics::Counter>* sent_;
  metrics::Family<metrics::Counter>* rejected_;
  metrics::Family<metrics::Counter>* closed_;
  metrics::Family<metrics::Counter>* gaps_;

  std::mutex mu_;
  std::condition_variable cv_;  // head_ moved, primed_ changed, or stopping_
  bool stopping_ = false;
  bool primed_ = false;     // head_ is the store's (the hub polls)
  int64_t head_ = 0;        // the newest event read
  int64_t ring_start_ = 0;  // the ring holds every event in (ring_start_, head_]
  struct Entry {
    WatchedEvent event;
    std::string frame;  // SseFrame(event), formatted once for every stream
  };
  std::deque<Entry> ring_;
  int streams_reserved_ = 0;
  int long_polls_reserved_ = 0;
  int64_t active_until_ms_ = 0;
  std::vector<std::unique_ptr<Stream>> incoming_;
  int wake_fd_ = -1;  // eventfd that interrupts the hub's poll()

  std::vector<std::unique_ptr<Stream>> streams_;  // hub thread only
  // Hub thread only: the gap Fetch holds back at, and priming.
  bool horizons_ = false;  // the store reports write horizons (PostgreSQL)
  struct Gap {
    bool held = false;
    int64_t at = 0;        // the first missing id
    int64_t token = 0;     // settled once oldest_running reaches it
    int64_t covers = 0;    // the newest id read when the token was taken
    int64_t since_ms = 0;  // when the hold began
  } gap_;
  struct Priming {
    bool held = false;
    int64_t latest = 0;
    int64_t token = 0;
    int64_t since_ms = 0;
  } prime_;
  std::thread thread_;
};

}  // namespace ferry::fleet::server_internal
