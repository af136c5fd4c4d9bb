// The server's provisioning controller: carries out the scheduler's cloud
// decisions on its own thread, because provider calls are slow (retries,
// back-off, provisioning delays) and must never hold up a scheduling pass.
// It provisions nodes, scales idle ones down (drain, deprovision, remove),
// turns spot interruptions into lost nodes (SPOT_INTERRUPTED), and keeps the
// count of nodes on their way per pool for the next snapshot.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/provider.h"
#include "ferry/fleet/sched.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet::server_internal {

class ProvisioningController {
 public:
  struct Options {
    LocalProviderOptions local_base;  // the server's URL, agent token, work dir, ferry binary
    double poll_interval_s = 0.2;     // spot interruptions are looked for this often
    double list_interval_s = 1.0;     // providers' node lists are refreshed this often
    // Extra time a requested node gets (beyond the pool's provisioning delay)
    // to register before it stops counting as "on its way".
    double register_slack_s = 120;
    // Called (from the controller's thread) when something changed that the
    // scheduler or the agents should see now. `nodes_lost`: tasks were lost.
    std::function<void(bool nodes_lost)> on_change;
    std::function<void(const std::string& what, const Status& status)> log_error;
    std::function<void(const std::string& line)> log_info;
  };

  ProvisioningController(Store* store, Options options);
  ~ProvisioningController();  // Stop()

  // Providers for the config's provider entries that do not exist yet (an
  // existing provider keeps its settings and nodes until the server stops),
  // and the pool settings used from now on. Errors name the provider.
  Status Configure(const sched::Config& config);
  void Start();
  // Joins the thread, then removes every node the providers created.
  void Stop();

  // Hands over one cycle's decision (returns at once).
  void Submit(const std::vector<sched::ProvisionRequest>& provision,
              const std::vector<sched::ScaleDown>& scale_down);
  // Nodes requested and not yet registered, per pool. `registered`: the
  // store's nodes now (those that appeared stop counting).
  std::map<std::string, int> Provisioning(const std::vector<sched::NodeInfo>& registered);
  // Providers for GET /v1/scheduler: breaker state, counters, nodes.
  nlohmann::json StatusJson();
  // The same for GET /metrics.
  struct ProviderMetrics {
    std::string name;
    std::string type;
    std::string breaker;  // "closed", "open", "half_open"; empty without retries/breaker
    ResilientProvider::Counters counters;
    std::map<std::string, int> nodes;  // by state, from the last list
  };
  std::vector<ProviderMetrics> Metrics();

 private:
  struct ProviderEntry {
    sched::ProviderConfig config;
    std::shared_ptr<Provider> provider;
    ResilientProvider* resilient = nullptr;  // the same object, for counters
    std::vector<CloudNode> nodes;            // from the last List()
    std::string last_error;
  };
  struct Requested {
    std::string pool;
    double deadline_s = 0;
  };

  void Loop();
  void DoProvision(const sched::ProvisionRequest& request);
  void DoScaleDown(const sched::ScaleDown& request);
  void PollInterruptions();
  void RefreshLists();
  std::shared_ptr<Provider> ProviderOfPool(const std::string& pool, sched::PoolConfig* config,
                                           std::string* provider_name);
  void NoteError(const std::string& provider, const std::string& what, const Status& status);
  static double NowS();

  Store* store_;
  Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool started_ = false;
  std::thread thread_;
  std::map<std::string, sched::PoolConfig> pools_;
  std::map<std::string, ProviderEntry> providers_;
  std::deque<sched::ProvisionRequest> provision_queue_;
  std::deque<sched::ScaleDown> scale_down_queue_;
  std::set<std::string> scaling_down_;      // queued or in progress
  std::map<std::string, int> requested_;    // pool → nodes asked for, names not known yet
  std::map<std::string, Requested> named_;  // node → pool, until it registers or times out
  std::map<std::string, std::string> node_provider_;  // cloud node → provider name
  double last_list_s_ = 0;
};

}  // namespace ferry::fleet::server_internal
