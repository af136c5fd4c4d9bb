#include "fleet/server/watch_hub.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "ferry/fleet/model_json.h"
#include "fleet/server/clock.h"
#include "fleet/server/responses.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

constexpr int kFetchPage = 1000;

// The first entry of the ring with an event id above `since`.
template <typename Ring>
typename Ring::const_iterator After(const Ring& ring, int64_t since) {
  return std::upper_bound(ring.begin(), ring.end(), since,
                          [](int64_t id, const auto& e) { return id < e.event.event.id; });
}

}  // namespace

bool Matches(const WatchQuery& query, const WatchedEvent& event) {
  if (query.scope.tenant_id && *query.scope.tenant_id != event.tenant_id) return false;
  if (!query.filter.team.empty() && query.filter.team != event.team) return false;
  if (!query.filter.states.empty()) {
    if (!event.event.state) return false;
    const auto& states = query.filter.states;
    if (std::find(states.begin(), states.end(), *event.event.state) == states.end()) return false;
  }
  return true;
}

json WatchEventJson(const WatchedEvent& event) {
  json out = ToJson(event.event);
  out["job_id"] = event.event.job_id;
  out["job_name"] = event.job_name;
  out["tenant"] = event.tenant;
  out["team"] = event.team;
  out["user"] = event.user;
  return out;
}

std::string SseFrame(const WatchedEvent& event) {
  // The type is one of the store's own words; the data is one line of JSON
  // (json::dump escapes every newline), so neither can break the framing.
  return "id: " + std::to_string(event.event.id) + "\nevent: " + event.event.type +
         "\ndata: " + Dump(WatchEventJson(event)) + "\n\n";
}

class WatchHub::Slot {
 public:
  Slot(WatchHub* hub, bool stream) : hub_(hub), stream_(stream) {}
  ~Slot() {
    std::lock_guard<std::mutex> lock(hub_->mu_);
    int& reserved = stream_ ? hub_->streams_reserved_ : hub_->long_polls_reserved_;
    --reserved;
    hub_->streams_gauge_->With({stream_ ? "sse" : "long_poll"}).Set(reserved);
    hub_->active_until_ms_ = NowMs() + hub_->options_.idle_grace_ms;
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

 private:
  WatchHub* hub_;
  bool stream_;
};

struct WatchHub::Stream {
  std::shared_ptr<Slot> slot;
  std::unique_ptr<TakenConnection> connection;
  WatchQuery query;
  int64_t cursor = 0;
  std::string pending;  // bytes not written yet, from `offset` on
  size_t offset = 0;
  int64_t last_queued_ms = 0;    // for heartbeats
  int64_t waiting_since_ms = 0;  // when the oldest unsent byte was queued
  bool closed = false;

  size_t Unsent() const { return pending.size() - offset; }
  void Queue(const std::string& bytes, int64_t now_ms) {
    if (Unsent() == 0) waiting_since_ms = now_ms;
    pending += bytes;
    last_queued_ms = now_ms;
  }
};

WatchHub::WatchHub(Store* store, metrics::Registry* registry, Options options, LogError log_error)
    : store_(store), options_(options), log_error_(std::move(log_error)) {
  streams_gauge_ = &registry->AddGauge(
      "ferry_watch_streams",
      "Open watch streams (GET /v1/jobs:watch): server-sent event streams and waiting long polls",
      {"kind"});
  sent_ = &registry->AddCounter("ferry_watch_events_sent_total",
                                "Job events sent to watchers, by kind of watch", {"kind"});
  rejected_ = &registry->AddCounter(
      "ferry_watch_rejected_total",
      "Watch requests answered 503 because every place of their kind was taken", {"kind"});
  closed_ = &registry->AddCounter("ferry_watch_stream_closes_total",
                                  "Server-sent event streams that ended, by why", {"reason"});
  gaps_ = &registry->AddCounter(
      "ferry_watch_gaps_total",
      "Event ids the watch stream held back for (seen after a higher id, PostgreSQL), by how the"
      " wait ended: filled (committed late), rolled_back, expired (streamed past)",
      {"outcome"});
  for (const char* outcome : {"filled", "rolled_back", "expired"}) gaps_->With({outcome});
  for (const char* kind : {"sse", "long_poll"}) {
    streams_gauge_->With({kind}).Set(0);
    sent_->With({kind});
    rejected_->With({kind});
  }
  for (const char* reason : {"client", "slow_reader", "error", "shutdown"}) closed_->With({reason});
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { Loop(); });
}

WatchHub::~WatchHub() {
  Stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void WatchHub::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  Wake();
  if (thread_.joinable()) thread_.join();
}

void WatchHub::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(wake_fd_, &one, sizeof(one));
}

Result<int64_t> WatchHub::Head() {
  {
    // Wake the hub and take its head once primed: the store's newest id may
    // lie past one still uncommitted (Fetch).
    std::unique_lock<std::mutex> lock(mu_);
    if (!primed_ && !stopping_) {
      active_until_ms_ = std::max(active_until_ms_, NowMs() + options_.idle_grace_ms);
      lock.unlock();
      Wake();
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(options_.max_gap_hold_ms + 1000),
                   [&] { return primed_ || stopping_; });
    }
    if (primed_) return head_;
  }
  return store_->LatestEventId();
}

std::shared_ptr<WatchHub::Slot> WatchHub::ReserveStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || streams_reserved_ >= options_.max_streams) {
      rejected_->With({"sse"}).Add();
      return nullptr;
    }
    ++streams_reserved_;
    streams_gauge_->With({"sse"}).Set(streams_reserved_);
  }
  Wake();
  return std::make_shared<Slot>(this, true);
}

std::shared_ptr<WatchHub::Slot> WatchHub::ReserveLongPoll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || long_polls_reserved_ >= options_.max_long_polls) {
      rejected_->With({"long_poll"}).Add();
      return nullptr;
    }
    ++long_polls_reserved_;
    streams_gauge_->With({"long_poll"}).Set(long_polls_reserved_);
  }
  Wake();
  return std::make_shared<Slot>(this, false);
}

void WatchHub::Adopt(std::shared_ptr<Slot> slot, std::unique_ptr<TakenConnection> connection,
                     WatchQuery query, int64_t since) {
  auto stream = std::make_unique<Stream>();
  stream->slot = std::move(slot);
  stream->connection = std::move(connection);
  stream->query = std::move(query);
  stream->cursor = since;
  const int64_t now = NowMs();
  // A reconnecting EventSource waits `retry` ms; the first event names the
  // resource version the stream starts from, so a client that reconnects
  // before any job event still resumes without a gap.
  stream->Queue("retry: 2000\nid: " + std::to_string(since) +
                    "\nevent: ready\ndata: " + Dump(json{{"since", since}}) + "\n\n",
                now);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      closed_->With({"shutdown"}).Add();
      return;  // the connection closes here
    }
    incoming_.push_back(std::move(stream));
  }
  Wake();
}

Result<std::vector<WatchedEvent>> WatchHub::CatchUp(const WatchQuery& query, int64_t* since,
                                                    int64_t head) {
  FERRY_ASSIGN_OR_RAISE(std::vector<WatchedEvent> events,
                        store_->ListEventsSince(query.scope, *since, query.filter, query.limit));
  bool full = static_cast<int>(events.size()) == query.limit;
  std::vector<WatchedEvent> out;
  for (WatchedEvent& event : events) {
    // Events past the ring's head reach the watcher through the ring later.
    if (event.event.id > head) {
      full = false;
      break;
    }
    *since = event.event.id;
    out.push_back(std::move(event));
  }
  if (!full) *since = std::max(*since, head);
  return out;
}

bool WatchHub::Fetch() {
  bool primed;
  int64_t head;
  {
    std::lock_guard<std::mutex> lock(mu_);
    primed = primed_;
    head = head_;
  }
  const int64_t now = NowMs();
  if (!primed) return Prime(now);

  // A horizon before the read says whether the held gap has settled: every
  // transaction that could still fill it has ended, so this read sees all
  // that ever will.
  std::optional<Store::WriteHorizon> before;
  if (gap_.held) {
    Result<std::optional<Store::WriteHorizon>> horizon = store_->EventWriteHorizon();
    if (!horizon.ok()) {
      log_error_("watch: reading the store's write horizon", horizon.status());
      return false;
    }
    before = *horizon;
  }
  Result<std::vector<WatchedEvent>> events =
      store_->ListEventsSince(Scope::All(), head, {}, kFetchPage);
  if (!events.ok()) {
    log_error_("watch: reading new events", events.status());
    return false;
  }
  if (events->empty()) return false;
  const size_t count = events->size();
  const bool settled = gap_.held && (!before || before->oldest_running >= gap_.token);
  const bool expired = gap_.held && now - gap_.since_ms >= options_.max_gap_hold_ms;

  // Events are taken in id order up to the first missing id that may still
  // be committed (PostgreSQL); SQLite's ids never have such gaps.
  std::vector<Entry> entries;
  entries.reserve(count);
  int64_t expected = head + 1;
  bool held_back = false;
  for (WatchedEvent& event : *events) {
    const int64_t id = event.event.id;
    if (id > expected && horizons_) {
      const bool known = gap_.held && gap_.at == expected;
      if (known && settled && expected <= gap_.covers) {
        gaps_->With({"rolled_back"}).Add();
      } else if (known && expired) {
        gaps_->With({"expired"}).Add();
        log_error_("watch: event ids " + std::to_string(expected) + " to " +
                       std::to_string(id - 1) + " still missing after " +
                       std::to_string(options_.max_gap_hold_ms) + " ms; streaming past them",
                   Status::OK());
      } else {
        held_back = true;
        break;
      }
      gap_.held = false;
    } else if (gap_.held && id == expected && expected == gap_.at) {
      gaps_->With({"filled"}).Add();
      gap_.held = false;
    }
    std::string frame = SseFrame(event);
    entries.push_back({std::move(event), std::move(frame)});
    expected = id + 1;
  }
  if (held_back && !(gap_.held && gap_.at == expected && !settled)) {
    // A new gap, or one a settled horizon did not cover: a horizon taken
    // after this read covers every id it saw.
    Result<std::optional<Store::WriteHorizon>> after = store_->EventWriteHorizon();
    if (!after.ok()) {
      log_error_("watch: reading the store's write horizon", after.status());
    } else if (*after) {
      if (!gap_.held || gap_.at != expected) gap_.since_ms = now;
      gap_.held = true;
      gap_.at = expected;
      gap_.token = (*after)->next;
      gap_.covers = (*events)[count - 1].event.id;
    }
  }
  if (!held_back) gap_.held = false;
  if (entries.empty()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Entry& entry : entries) {
      head_ = entry.event.event.id;
      ring_.push_back(std::move(entry));
    }
    while (ring_.size() > options_.ring_events) {
      ring_start_ = ring_.front().event.event.id;
      ring_.pop_front();
    }
  }
  cv_.notify_all();
  return !held_back && static_cast<int>(count) == kFetchPage;
}

bool WatchHub::Prime(int64_t now) {
  // The newest id is where watchers start. On PostgreSQL an id below it may
  // still be uncommitted: wait until every transaction running when it was
  // read has ended (or max_gap_hold_ms), so none is missed.
  if (!prime_.held) {
    Result<int64_t> latest = store_->LatestEventId();
    if (!latest.ok()) {
      log_error_("watch: reading the newest event", latest.status());
      return false;
    }
    Result<std::optional<Store::WriteHorizon>> after = store_->EventWriteHorizon();
    if (!after.ok()) {
      log_error_("watch: reading the store's write horizon", after.status());
      return false;
    }
    horizons_ = after->has_value();
    prime_ = {true, *latest, horizons_ ? (*after)->next : 0, now};
    if (horizons_) return false;  // settles at the next poll
  } else {
    Result<std::optional<Store::WriteHorizon>> horizon = store_->EventWriteHorizon();
    if (!horizon.ok()) {
      log_error_("watch: reading the store's write horizon", horizon.status());
      return false;
    }
    const bool settled = !*horizon || (*horizon)->oldest_running >= prime_.token;
    if (!settled && now - prime_.since_ms < options_.max_gap_hold_ms) return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    head_ = ring_start_ = prime_.latest;
    ring_.clear();
    primed_ = true;
  }
  prime_.held = false;
  gap_.held = false;
  cv_.notify_all();
  return false;
}

bool WatchHub::Deliver(Stream& stream, int64_t now_ms) {
  // Only this thread changes the ring, so it reads it without the lock.
  if (stream.cursor < ring_start_) {
    Result<std::vector<WatchedEvent>> events = CatchUp(stream.query, &stream.cursor, head_);
    if (!events.ok()) {
      log_error_("watch: catching a stream up", events.status());
    } else {
      for (const WatchedEvent& event : *events) stream.Queue(SseFrame(event), now_ms);
      sent_->With({"sse"}).Add(static_cast<double>(events->size()));
    }
  } else if (stream.cursor < head_) {
    int64_t sent = 0;
    for (auto it = After(ring_, stream.cursor); it != ring_.end(); ++it) {
      if (!Matches(stream.query, it->event)) continue;
      stream.Queue(it->frame, now_ms);
      ++sent;
    }
    stream.cursor = head_;
    sent_->With({"sse"}).Add(static_cast<double>(sent));
  }
  if (stream.Unsent() == 0 && now_ms - stream.last_queued_ms >= options_.heartbeat_ms) {
    stream.Queue(": keep-alive\n\n", now_ms);
  }
  return stream.Unsent() <= options_.max_pending_bytes;
}

void WatchHub::Close(Stream& stream, const char* reason) {
  if (stream.closed) return;
  stream.closed = true;
  closed_->With({reason}).Add();
  stream.connection.reset();
  stream.slot.reset();
}

void WatchHub::Loop() {
  std::vector<pollfd> fds;
  bool more = false;
  for (;;) {
    bool active;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& stream : incoming_) streams_.push_back(std::move(stream));
      incoming_.clear();
      if (stopping_) break;
      active = !streams_.empty() || long_polls_reserved_ > 0 || streams_reserved_ > 0 ||
               NowMs() < active_until_ms_;
      if (!active) {
        primed_ = false;
        prime_.held = false;
      }
    }
    more = active && Fetch();
    bool primed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      primed = primed_;
    }
    const int64_t now = NowMs();
    for (auto& stream : streams_) {
      if (primed && !Deliver(*stream, now)) Close(*stream, "slow_reader");
      while (!stream->closed && stream->Unsent() > 0) {
        const ssize_t n = stream->connection->WriteSome(stream->pending.data() + stream->offset,
                                                        stream->Unsent());
        if (n < 0) {
          Close(*stream, "client");
        } else if (n == 0) {
          break;
        } else {
          stream->offset += static_cast<size_t>(n);
          stream->waiting_since_ms = now;
        }
      }
      if (stream->closed) continue;
      if (stream->Unsent() == 0) {
        stream->pending.clear();
        stream->offset = 0;
      } else if (now - stream->waiting_since_ms > options_.write_timeout_ms) {
        Close(*stream, "slow_reader");
      } else if (stream->offset > stream->pending.size() / 2) {
        stream->pending.erase(0, stream->offset);
        stream->offset = 0;
      }
    }
    std::erase_if(streams_, [](const std::unique_ptr<Stream>& s) { return s->closed; });

    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    for (const auto& stream : streams_) {
      const short events = POLLIN | (stream->Unsent() > 0 ? POLLOUT : 0);
      fds.push_back({stream->connection->fd(), events, 0});
    }
    const int timeout =
        more ? 0
             : (active ? static_cast<int>(std::max<int64_t>(1, options_.poll_interval_ms)) : -1);
    int ready;
    do {
      ready = ::poll(fds.data(), fds.size(), timeout);
    } while (ready < 0 && errno == EINTR);
    if (ready <= 0) continue;
    if (fds[0].revents != 0) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t got = ::read(wake_fd_, &count, sizeof(count));
    }
    // POLLOUT needs nothing here: the next round writes what is pending.
    for (size_t i = 1; i < fds.size(); ++i) {
      Stream& stream = *streams_[i - 1];
      if ((fds[i].revents & (POLLERR | POLLNVAL)) != 0) {
        Close(stream, "error");
      } else if ((fds[i].revents & (POLLIN | POLLHUP)) != 0 && !stream.connection->DrainInput()) {
        Close(stream, "client");
      }
    }
    std::erase_if(streams_, [](const std::unique_ptr<Stream>& s) { return s->closed; });
  }
  std::vector<std::unique_ptr<Stream>> late;
  {
    std::lock_guard<std::mutex> lock(mu_);
    late.swap(incoming_);
  }
  for (auto& stream : late) streams_.push_back(std::move(stream));
  // Closing releases slots, which take the lock.
  for (auto& stream : streams_) Close(*stream, "shutdown");
  streams_.clear();
}

Result<WatchHub::Batch> WatchHub::Wait(const Slot& /*slot*/, const WatchQuery& query, int64_t since,
                                       int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  auto empty = [&] { return Batch{{}, since}; };
  for (;;) {
    if (stopping_) return empty();
    if (!primed_ || since > head_) {
      // The hub is waking up, or the caller knows an event the hub has not
      // read yet (it was committed after the last read).
      if (!cv_.wait_until(lock, deadline,
                          [&] { return stopping_ || (primed_ && since <= head_); })) {
        return empty();
      }
      continue;
    }
    if (since < ring_start_) {
      const int64_t head = head_;
      lock.unlock();
      Result<std::vector<WatchedEvent>> events = CatchUp(query, &since, head);
      if (!events.ok()) return events.status();
      sent_->With({"long_poll"}).Add(static_cast<double>(events->size()));
      if (!events->empty()) return Batch{std::move(*events), since};
      lock.lock();
      continue;
    }
    Batch batch;
    batch.next_since = head_;
    for (auto it = After(ring_, since); it != ring_.end(); ++it) {
      if (!Matches(query, it->event)) continue;
      batch.events.push_back(it->event);
      if (static_cast<int>(batch.events.size()) == query.limit) {
        batch.next_since = it->event.event.id;
        break;
      }
    }
    if (!batch.events.empty()) {
      sent_->With({"long_poll"}).Add(static_cast<double>(batch.events.size()));
      return batch;
    }
    since = head_;
    if (!cv_.wait_until(lock, deadline, [&] { return stopping_ || head_ != since; })) {
      return empty();
    }
  }
}

}  // namespace ferry::fleet::server_internal
