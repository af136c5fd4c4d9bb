// Load generator for the fleet control plane (`ferry server`): starts a
// server on the given store (or targets a running one), then measures, over
// loopback and with a bounded number of requests,
//   - submissions per second and their p50/p99 latency (POST /v1/jobs),
//   - GET /v1/jobs/{id} and GET /v1/jobs (one page of 50),
//   - with --latency: submit → RUNNING on idle capacity with one agent
//     (declared GPUs), from the server's own created_at/started_at stamps.
// A benchmark, not a test: it prints what it saw (docs/benchmarks.md).
//
//   ferry_fleet_bench --ferry build/bench/bin/ferry --store sqlite:/tmp/f.db
//   ferry_fleet_bench --ferry ... --store postgresql://... --threads 16 --submissions 20000
//   ferry_fleet_bench --ferry ... --store sqlite:/tmp/g.db --latency 50
//   ferry_fleet_bench --url http://127.0.0.1:8700 --token-file admin.token
#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "ferry_fleet_bench: %s\n", message.c_str());
  std::exit(1);
}

struct Options {
  std::string ferry;       // binary that runs `server` and `agent`
  std::string store;       // store of the server we start
  std::string url;         // or an already running server
  std::string token_file;  // its admin token
  int threads = 8;
  int submissions = 10'000;
  int gets = 10'000;
  int lists = 2'000;
  int latency_jobs = 0;      // submit → RUNNING samples (starts an agent)
  bool idempotency = false;  // send an Idempotency-Key with every submission
  int nodes = 0;             // register this many drained 8-GPU nodes first
  int preload = 0;           // submissions before the measured ones (not reported)
  int scrape_every_ms = 0;   // scrape /metrics this often during the measured phases
  int scrapes = 0;           // then time this many scrapes one after another
  std::string json_out;
  std::vector<std::string> server_args;
};

void Usage() {
  std::puts(
      "usage: ferry_fleet_bench (--ferry BIN --store URL | --url URL --token-file FILE)\n"
      "         [--threads N] [--submissions N] [--gets N] [--lists N] [--latency N]\n"
      "         [--idempotency] [--json FILE] [--server-arg ARG]...\n"
      "         [--nodes N] [--preload N] [--scrape-every-ms MS] [--scrapes N]\n"
      "  --ferry BIN       the ferry binary; the benchmark starts `ferry server` on --store\n"
      "                    (rate limit off) and, with --latency, one `ferry agent`\n"
      "  --url, --token-file  target a running server with this admin token instead\n"
      "  --threads N       client threads, one keep-alive connection each (default 8)\n"
      "  --submissions N   POST /v1/jobs in total (default 10000)\n"
      "  --gets N          GET /v1/jobs/{id} in total (default 10000)\n"
      "  --lists N         GET /v1/jobs?page_size=50 in total (default 2000)\n"
      "  --latency N       then N jobs one at a time: submit -> RUNNING with one agent\n"
      "  --idempotency     send an Idempotency-Key with every submission\n"
      "  --json FILE       also write the results as JSON\n"
      "  --nodes N         register N drained nodes of 8 H200 each first (jobs then\n"
      "                    wait NO_CAPACITY); needs --ferry\n"
      "  --preload N       submit N jobs before the measured phases\n"
      "  --scrape-every-ms MS  GET /metrics every MS ms during the measured phases\n"
      "  --scrapes N       then time N scrapes of /metrics one after another");
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) Die(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i) {
    std::string v = value(i);
    char* end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < 0 || n > 10'000'000) {
      Die(std::string(argv[i - 1]) + ": not a count: " + v);
    }
    return static_cast<int>(n);
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ferry")
      o.ferry = value(i);
    else if (a == "--store")
      o.store = value(i);
    else if (a == "--url")
      o.url = value(i);
    else if (a == "--token-file")
      o.token_file = value(i);
    else if (a == "--threads")
      o.threads = std::max(1, number(i));
    else if (a == "--submissions")
      o.submissions = number(i);
    else if (a == "--gets")
      o.gets = number(i);
    else if (a == "--lists")
      o.lists = number(i);
    else if (a == "--latency")
      o.latency_jobs = number(i);
    else if (a == "--idempotency")
      o.idempotency = true;
    else if (a == "--json")
      o.json_out = value(i);
    else if (a == "--nodes")
      o.nodes = number(i);
    else if (a == "--preload")
      o.preload = number(i);
    else if (a == "--scrape-every-ms")
      o.scrape_every_ms = number(i);
    else if (a == "--scrapes")
      o.scrapes = number(i);
    else if (a == "--server-arg")
      o.server_args.push_back(value(i));
    else if (a == "-h" || a == "--help") {
      Usage();
      std::exit(0);
    } else {
      Usage();
      Die("unknown argument " + a);
    }
  }
  if (o.url.empty() == o.ferry.empty()) Die("give either --ferry and --store, or --url");
  if (!o.ferry.empty() && o.store.empty()) Die("--ferry needs --store");
  if (!o.url.empty() && o.token_file.empty()) Die("--url needs --token-file");
  if (!o.url.empty() && o.latency_jobs > 0) Die("--latency starts its own agent; use --ferry");
  if (!o.url.empty() && o.nodes > 0) Die("--nodes registers with the agent token; use --ferry");
  return o;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

// A child process in its own process group, output to a log file.
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& log) {
    pid_ = fork();
    if (pid_ < 0) Die("fork failed");
    if (pid_ == 0) {
      setsid();
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Child() { Stop(); }

  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  // SIGTERM, then SIGKILL to the group after 10 s.
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        kill(-pid_, SIGKILL);
        pid_ = -1;
        return;
      }
      usleep(10'000);
    }
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

struct Target {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
};

httplib::Headers Auth(const Target& t) { return {{"Authorization", "Bearer " + t.token}}; }

std::unique_ptr<httplib::Client> Connect(const Target& t) {
  auto c = std::make_unique<httplib::Client>(t.host, t.port);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  c->set_connection_timeout(5);
  c->set_read_timeout(60);
  c->set_write_timeout(60);
  return c;
}

// Percentiles of a latency sample, in ms.
struct Summary {
  std::string name;
  int ok = 0;
  int errors = 0;
  double seconds = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
  double per_second() const { return seconds > 0 ? ok / seconds : 0; }
  json ToJson() const {
    return {{"name", name},
            {"ok", ok},
            {"errors", errors},
            {"seconds", seconds},
            {"per_second", per_second()},
            {"p50_ms", p50_ms},
            {"p90_ms", p90_ms},
            {"p99_ms", p99_ms},
            {"max_ms", max_ms}};
  }
};

Summary Summarize(std::string name, std::vector<double> ms, int errors, double seconds) {
  Summary s;
  s.name = std::move(name);
  s.ok = static_cast<int>(ms.size());
  s.errors = errors;
  s.seconds = seconds;
  if (!ms.empty()) {
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) {
      size_t i = static_cast<size_t>(q * static_cast<double>(ms.size() - 1) + 0.5);
      return ms[std::min(i, ms.size() - 1)];
    };
    s.p50_ms = at(0.50);
    s.p90_ms = at(0.90);
    s.p99_ms = at(0.99);
    s.max_ms = ms.back();
  }
  return s;
}

// Runs `total` requests over `threads` threads; `one(client, n)` sends
// request n and returns whether it succeeded.
template <typename One>
Summary Drive(const std::string& name, const Target& target, int threads, int total, One one) {
  std::atomic<int> next{0};
  std::atomic<int> errors{0};
  std::mutex mu;
  std::vector<double> all;
  all.reserve(static_cast<size_t>(total));
  auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      auto client = Connect(target);
      // The connection is opened outside the measurement.
      client->Get("/healthz");
      std::vector<double> mine;
      for (int n = next++; n < total; n = next++) {
        auto t0 = Clock::now();
        bool ok = one(*client, n);
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (ok) {
          mine.push_back(ms);
        } else {
          ++errors;
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  for (auto& th : pool) th.join();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return Summarize(name, std::move(all), errors.load(), seconds);
}

void Print(const Summary& s) {
  std::printf(
      "%-28s %8d ok %5d err %9.0f /s   p50 %7.2f ms   p90 %7.2f ms   p99 %7.2f ms   "
      "max %7.2f ms\n",
      s.name.c_str(), s.ok, s.errors, s.per_second(), s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms);
  std::fflush(stdout);
}

// "2026-11-29T14:41:08.123Z" → Unix ms.
std::optional<int64_t> ParseTime(const json& v) {
  if (!v.is_string()) return std::nullopt;
  std::string s = v.get<std::string>();
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

template <typename Predicate>
bool WaitFor(Predicate p, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return p();
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Options o = ParseArgs(argc, argv);
  Target target;
  std::unique_ptr<Child> server;
  std::unique_ptr<Child> agent;
  std::string work;

  if (!o.ferry.empty()) {
    char tmpl[] = "/tmp/ferry-fleet-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
    work = tmpl;
    std::vector<std::string> args = {o.ferry,      "server", "--store",     o.store,
                                     "--port",     "0",      "--port-file", work + "/port",
                                     "--data-dir", work,     "--rate",      "0"};
    args.insert(args.end(), o.server_args.begin(), o.server_args.end());
    server = std::make_unique<Child>(args, work + "/server.log");
    bool up = WaitFor(
        [&] {
          std::string p = Trim(ReadFile(work + "/port"));
          if (p.empty()) return false;
          target.port = std::atoi(p.c_str());
          return target.port > 0;
        },
        60);
    if (!up || !server->Running()) Die("the server did not start; see " + work + "/server.log");
    target.token = Trim(ReadFile(work + "/admin.token"));
  } else {
    std::string url = o.url;
    const std::string scheme = "http://";
    if (url.rfind(scheme, 0) != 0) Die("--url must be http://HOST:PORT");
    url = url.substr(scheme.size());
    size_t colon = url.rfind(':');
    if (colon == std::string::npos) Die("--url needs a port");
    target.host = url.substr(0, colon);
    if (target.host != "127.0.0.1" && target.host != "localhost" && target.host != "[::1]") {
      Die("the benchmark only targets loopback servers");
    }
    target.port = std::atoi(url.substr(colon + 1).c_str());
    target.token = Trim(ReadFile(o.token_file));
  }
  if (target.token.empty()) Die("no admin token");

  {
    auto c = Connect(target);
    bool ready = WaitFor(
        [&] {
          auto r = c->Get("/readyz");
          return r && r->status == 200;
        },
        30);
    if (!ready) Die("GET /readyz never answered 200");
  }
  std::printf("fleet bench: store %s, %d client threads\n",
              o.store.empty() ? o.url.c_str() : o.store.c_str(), o.threads);

  json results = json::object();
  results["store"] = o.store.empty() ? o.url : o.store;
  results["threads"] = o.threads;
  results["phases"] = json::array();

  // Submissions hold a GPU model no node has: with no nodes registered the
  // server accepts them, and the jobs stay PENDING without tying up agents.
  // With --nodes they ask for the nodes' model, which the nodes (drained)
  // never give.
  const std::string model = o.nodes > 0 ? "H200" : "BENCH-NONE";
  if (o.nodes > 0) {
    Target agent_target = target;
    agent_target.token = Trim(ReadFile(work + "/agent.token"));
    json gpus = json::array();
    for (int i = 0; i < 8; ++i) gpus.push_back({{"index", i}, {"model", model}});
    Summary reg =
        Drive("register + drain nodes", target, o.threads, o.nodes, [&](httplib::Client& c, int n) {
          const std::string name = "bench-node-" + std::to_string(n);
          json body = {{"name", name},
                       {"instance", name + "-i1"},
                       {"cpus", 64},
                       {"memory_mb", 1 << 20},
                       {"gpus", gpus}};
          auto r =
              c.Post("/v1/agent/register", Auth(agent_target), body.dump(), "application/json");
          if (!r || r->status != 200) return false;
          r = c.Post("/v1/nodes/" + name + ":drain", Auth(target), "", "application/json");
          return r && r->status == 200;
        });
    Print(reg);
  }
  const std::string run_tag = std::to_string(::getpid());
  auto submit = [&](httplib::Client& c, int n) {
    json body = {{"name", "bench-" + std::to_string(n)},
                 {"command", {"sleep", "1"}},
                 {"gpus_per_task", 1},
                 {"gpu_models", {model}},
                 {"labels", {{"bench", run_tag}}}};
    auto r = c.Post("/v1/jobs", Auth(target), body.dump(), "application/json");
    return r && r->status == 201;
  };
  if (o.preload > 0) {
    Summary s = Drive("preload POST /v1/jobs", target, o.threads, o.preload, submit);
    Print(s);
  }

  // Scrapes in the background while the measured phases run.
  std::atomic<bool> scraping{o.scrape_every_ms > 0};
  std::vector<double> background_ms;
  int background_errors = 0;
  std::thread scraper;
  if (scraping) {
    scraper = std::thread([&] {
      auto c = Connect(target);
      while (scraping.load()) {
        auto t0 = Clock::now();
        auto r = c->Get("/metrics", Auth(target));
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (r && r->status == 200) {
          background_ms.push_back(ms);
        } else {
          ++background_errors;
        }
        std::this_thread::sleep_until(t0 + std::chrono::milliseconds(o.scrape_every_ms));
      }
    });
  }

  std::vector<int64_t> ids(static_cast<size_t>(o.submissions), 0);
  if (o.submissions > 0) {
    Summary s =
        Drive("POST /v1/jobs", target, o.threads, o.submissions, [&](httplib::Client& c, int n) {
          json body = {{"name", "bench-" + std::to_string(n)},
                       {"command", {"sleep", "1"}},
                       {"gpus_per_task", 1},
                       {"gpu_models", {model}},
                       {"labels", {{"bench", run_tag}}}};
          httplib::Headers h = Auth(target);
          if (o.idempotency) h.emplace("Idempotency-Key", run_tag + "-" + std::to_string(n));
          auto r = c.Post("/v1/jobs", h, body.dump(), "application/json");
          if (!r || r->status != 201) return false;
          ids[static_cast<size_t>(n)] =
              json::parse(r->body, nullptr, false).value("id", int64_t{0});
          return true;
        });
    Print(s);
    results["phases"].push_back(s.ToJson());
  }
  std::vector<int64_t> known;
  for (int64_t id : ids) {
    if (id > 0) known.push_back(id);
  }
  if (o.gets > 0 && !known.empty()) {
    Summary s =
        Drive("GET /v1/jobs/{id}", target, o.threads, o.gets, [&](httplib::Client& c, int n) {
          int64_t id = known[static_cast<size_t>(n) * 7919 % known.size()];
          auto r = c.Get("/v1/jobs/" + std::to_string(id), Auth(target));
          return r && r->status == 200;
        });
    Print(s);
    results["phases"].push_back(s.ToJson());
  }
  if (o.lists > 0) {
    Summary s = Drive("GET /v1/jobs?page_size=50", target, o.threads, o.lists,
                      [&](httplib::Client& c, int) {
                        auto r = c.Get("/v1/jobs?page_size=50", Auth(target));
                        return r && r->status == 200;
                      });
    Print(s);
    results["phases"].push_back(s.ToJson());
  }

  if (scraper.joinable()) {
    scraping = false;
    scraper.join();
    Summary s = Summarize("GET /metrics (background)", background_ms, background_errors, 0);
    Print(s);
    results["phases"].push_back(s.ToJson());
  }
  if (o.scrapes > 0) {
    Summary s = Drive("GET /metrics", target, 1, o.scrapes, [&](httplib::Client& c, int) {
      auto r = c.Get("/metrics", Auth(target));
      return r && r->status == 200 && r->body.find("ferry_jobs{") != std::string::npos;
    });
    Print(s);
    results["phases"].push_back(s.ToJson());
    auto c = Connect(target);
    if (auto r = c->Get("/metrics", Auth(target))) {
      results["scrape_bytes"] = r->body.size();
      std::printf("%-28s %8zu bytes\n", "scrape size", r->body.size());
    }
  }

  if (o.latency_jobs > 0) {
    // One agent with 8 declared GPUs; jobs one at a time, each cancelled once
    // RUNNING so the next finds idle capacity.
    std::string agent_dir = work + "/agent";
    fs::create_directories(agent_dir);
    agent = std::make_unique<Child>(
        std::vector<std::string>{
            o.ferry, "agent", "--server", "http://127.0.0.1:" + std::to_string(target.port),
            "--token-file", work + "/agent.token", "--name", "bench-node", "--gpus", "8xH200",
            "--ignore-nvml", "--work-dir", agent_dir, "--cpus", "64", "--memory-mb", "65536"},
        work + "/agent.log");
    auto c = Connect(target);
    bool ready = WaitFor(
        [&] {
          auto r = c->Get("/v1/nodes/bench-node", Auth(target));
          return r && r->status == 200 &&
                 json::parse(r->body, nullptr, false).value("state", "") == "READY";
        },
        30);
    if (!ready) Die("the agent did not register; see " + work + "/agent.log");
    std::vector<double> server_ms;
    std::vector<double> client_ms;
    int errors = 0;
    auto start = Clock::now();
    for (int n = 0; n < o.latency_jobs; ++n) {
      json body = {{"name", "latency-" + std::to_string(n)},
                   {"command", {"sleep", "30"}},
                   {"gpus_per_task", 1},
                   {"cpus_per_task", 0.1}};
      auto t0 = Clock::now();
      auto r = c->Post("/v1/jobs", Auth(target), body.dump(), "application/json");
      if (!r || r->status != 201) {
        ++errors;
        continue;
      }
      int64_t id = json::parse(r->body, nullptr, false).value("id", int64_t{0});
      json job;
      bool running = WaitFor(
          [&] {
            auto g = c->Get("/v1/jobs/" + std::to_string(id), Auth(target));
            if (!g || g->status != 200) return false;
            job = json::parse(g->body, nullptr, false);
            return job.value("state", "") == "RUNNING";
          },
          30);
      double seen = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      auto created = ParseTime(job["created_at"]);
      auto started = ParseTime(job["started_at"]);
      if (!running || !created || !started) {
        ++errors;
      } else {
        client_ms.push_back(seen);
        server_ms.push_back(static_cast<double>(*started - *created));
      }
      c->Delete("/v1/jobs/" + std::to_string(id), Auth(target));
    }
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    Summary by_server = Summarize("submit->RUNNING (server)", server_ms, errors, seconds);
    Summary by_client = Summarize("submit->RUNNING (client)", client_ms, errors, seconds);
    Print(by_server);
    Print(by_client);
    results["phases"].push_back(by_server.ToJson());
    results["phases"].push_back(by_client.ToJson());
  }

  if (agent) agent->Stop();
  if (server) server->Stop();
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out);
    out << results.dump(2) << "\n";
  }
  if (!work.empty()) fs::remove_all(work);
  return 0;
}
