#include "fleet/server/provisioning.h"

#include <chrono>
#include <cstdio>

#include "fleet/server/clock.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

ProvisioningController::ProvisioningController(Store* store, Options options)
    : store_(store), options_(std::move(options)) {}

ProvisioningController::~ProvisioningController() { Stop(); }

double ProvisioningController::NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status ProvisioningController::Configure(const sched::Config& config) {
  std::map<std::string, sched::ProviderConfig> wanted;
  for (const sched::ProviderConfig& provider : config.providers) {
    // Slurm clusters are not cloud providers: the Slurm controller runs them.
    if (provider.type != "slurm") wanted[provider.name] = provider;
  }
  std::vector<std::string> missing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pools_.clear();
    for (const sched::PoolConfig& pool : config.pools) pools_[pool.name] = pool;
    for (const auto& [name, provider] : wanted) {
      if (providers_.count(name) == 0) missing.push_back(name);
    }
  }
  Status first_error;
  for (const std::string& name : missing) {
    const sched::ProviderConfig& provider_config = wanted[name];
    Result<std::unique_ptr<Provider>> made = MakeProvider(provider_config, options_.local_base);
    if (!made.ok()) {
      if (first_error.ok()) first_error = made.status();
      continue;
    }
    ProviderEntry entry;
    entry.config = provider_config;
    entry.resilient = dynamic_cast<ResilientProvider*>(made->get());
    entry.provider = std::shared_ptr<Provider>(std::move(*made));
    std::lock_guard<std::mutex> lock(mu_);
    providers_.emplace(name, std::move(entry));
  }
  return first_error;
}

void ProvisioningController::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
}

void ProvisioningController::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The providers' destructors remove the nodes they created (the local
  // provider stops its agents); do it outside the lock.
  std::map<std::string, ProviderEntry> providers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    providers.swap(providers_);
  }
  providers.clear();
}

void ProvisioningController::Submit(const std::vector<sched::ProvisionRequest>& provision,
                                    const std::vector<sched::ScaleDown>& scale_down) {
  if (provision.empty() && scale_down.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    for (const sched::ProvisionRequest& request : provision) {
      if (request.nodes <= 0) continue;
      requested_[request.pool] += request.nodes;
      provision_queue_.push_back(request);
    }
    for (const sched::ScaleDown& request : scale_down) {
      if (!scaling_down_.insert(request.node).second) continue;
      scale_down_queue_.push_back(request);
    }
  }
  cv_.notify_all();
}

std::map<std::string, int> ProvisioningController::Provisioning(
    const std::vector<sched::NodeInfo>& registered) {
  std::set<std::string> names;
  for (const sched::NodeInfo& node : registered) names.insert(node.name);
  const double now = NowS();
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int> out;
  for (auto it = named_.begin(); it != named_.end();) {
    if (names.count(it->first) > 0 || now > it->second.deadline_s) {
      it = named_.erase(it);
    } else {
      ++out[it->second.pool];
      ++it;
    }
  }
  for (const auto& [pool, count] : requested_) {
    if (count > 0) out[pool] += count;
  }
  return out;
}

std::shared_ptr<Provider> ProvisioningController::ProviderOfPool(const std::string& pool,
                                                                 sched::PoolConfig* config,
                                                                 std::string* provider_name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto p = pools_.find(pool);
  if (p == pools_.end()) return nullptr;
  *config = p->second;
  *provider_name = p->second.provider;
  auto entry = providers_.find(p->second.provider);
  return entry == providers_.end() ? nullptr : entry->second.provider;
}

void ProvisioningController::NoteError(const std::string& provider, const std::string& what,
                                       const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto entry = providers_.find(provider);
    if (entry != providers_.end()) entry->second.last_error = what + ": " + status.ToString();
  }
  if (options_.log_error) options_.log_error(what, status);
}

void ProvisioningController::DoProvision(const sched::ProvisionRequest& request) {
  sched::PoolConfig pool;
  std::string provider_name;
  std::shared_ptr<Provider> provider = ProviderOfPool(request.pool, &pool, &provider_name);
  Result<std::vector<std::string>> names =
      provider ? provider->Provision(pool, request.nodes)
               : Result<std::vector<std::string>>(Status::Invalid(
                     "pool '" + request.pool + "' has no provider (or is no longer configured)"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    int& count = requested_[request.pool];
    count = std::max(0, count - request.nodes);
    if (names.ok()) {
      const double deadline = NowS() + pool.provisioning_delay_s + options_.register_slack_s;
      for (const std::string& name : *names) {
        named_[name] = {request.pool, deadline};
        node_provider_[name] = provider_name;
      }
    }
  }
  if (!names.ok()) {
    NoteError(provider_name,
              "provisioning " + std::to_string(request.nodes) + " node(s) in pool " + request.pool,
              names.status());
  } else if (options_.log_info) {
    std::string list;
    for (const std::string& name : *names) list += (list.empty() ? "" : ", ") + name;
    options_.log_info("provisioning " + list + " in pool " + request.pool + " (provider " +
                      provider_name + ")");
  }
  if (options_.on_change) options_.on_change(false);
}

void ProvisioningController::DoScaleDown(const sched::ScaleDown& request) {
  auto done = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    scaling_down_.erase(request.node);
  };
  sched::PoolConfig pool;
  std::string provider_name;
  std::shared_ptr<Provider> provider = ProviderOfPool(request.pool, &pool, &provider_name);
  if (!provider) {
    NoteError(provider_name, "scaling down " + request.node,
              Status::Invalid("pool '" + request.pool + "' has no provider"));
    return done();
  }
  Result<std::optional<Node>> node = store_->GetNode(request.node);
  if (!node.ok() || !node->has_value()) {
    if (!node.ok()) NoteError(provider_name, "scaling down " + request.node, node.status());
    return done();
  }
  const bool was_drained = (*node)->drain;
  const int64_t node_id = (*node)->id;
  // Drained first: no placement can land on it while it goes away.
  if (!was_drained) {
    Result<bool> drained = store_->SetDrain(request.node, true);
    if (!drained.ok() || !*drained) return done();
  }
  auto undrain = [&] {
    if (!was_drained) (void)store_->SetDrain(request.node, false);
  };
  Result<sched::Snapshot> snapshot = store_->LoadSchedulingSnapshot();
  if (!snapshot.ok()) {
    NoteError(provider_name, "scaling down " + request.node, snapshot.status());
    undrain();
    return done();
  }
  bool busy = false;  // an open allocation on it: a task of a running job, or a taken GPU
  for (const sched::RunningJob& running : snapshot->running) {
    for (const TaskPlacement& task : running.tasks) busy = busy || task.node_id == node_id;
  }
  for (const sched::NodeInfo& n : snapshot->nodes) {
    if (n.id != node_id) continue;
    for (const sched::GpuSlot& gpu : n.gpus) busy = busy || !gpu.free;
  }
  if (busy) {  // work landed on it just before the drain: keep it
    undrain();
    return done();
  }
  Status gone = provider->Deprovision(request.node);
  if (!gone.ok()) {
    NoteError(provider_name, "deprovisioning " + request.node, gone);
    undrain();
    return done();
  }
  Result<RemoveNodeOutcome> removed = store_->RemoveNode(request.node, NowMs());
  if (!removed.ok()) NoteError(provider_name, "removing node " + request.node, removed.status());
  {
    std::lock_guard<std::mutex> lock(mu_);
    node_provider_.erase(request.node);
  }
  if (options_.log_info) {
    char idle[32];
    std::snprintf(idle, sizeof(idle), "%.0f", request.idle_s);
    options_.log_info("scaled down " + request.node + " in pool " + request.pool + " (idle " +
                      idle + " s)");
  }
  done();
  if (options_.on_change) options_.on_change(false);
}

void ProvisioningController::PollInterruptions() {
  std::vector<std::pair<std::string, std::shared_ptr<Provider>>> providers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, entry] : providers_) providers.emplace_back(name, entry.provider);
  }
  for (const auto& [name, provider] : providers) {
    for (const std::string& node : provider->TakeInterruptions()) {
      Result<ExpiryResult> lost = store_->MarkNodeLost(
          node, std::string(reason::kSpotInterrupted),
          "spot node " + node + " was interrupted by provider " + name, NowMs());
      if (!lost.ok()) {
        NoteError(name, "marking interrupted node " + node + " lost", lost.status());
        continue;
      }
      if (options_.log_info) {
        options_.log_info("spot node " + node + " interrupted; " +
                          std::to_string(lost->requeued_jobs.size()) + " job(s) requeued");
      }
      // The provider already took it: forget it everywhere.
      (void)provider->Deprovision(node);
      (void)store_->RemoveNode(node, NowMs());
      {
        std::lock_guard<std::mutex> lock(mu_);
        node_provider_.erase(node);
        named_.erase(node);
      }
      if (options_.on_change) options_.on_change(true);
    }
  }
}

void ProvisioningController::RefreshLists() {
  std::vector<std::pair<std::string, std::shared_ptr<Provider>>> providers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, entry] : providers_) providers.emplace_back(name, entry.provider);
  }
  for (const auto& [name, provider] : providers) {
    Result<std::vector<CloudNode>> nodes = provider->List();
    std::lock_guard<std::mutex> lock(mu_);
    auto entry = providers_.find(name);
    if (entry == providers_.end()) continue;
    if (nodes.ok()) {
      entry->second.nodes = std::move(*nodes);
    } else {
      entry->second.last_error = "list: " + nodes.status().ToString();
    }
  }
}

void ProvisioningController::Loop() {
  const auto poll = std::chrono::duration<double>(std::max(0.01, options_.poll_interval_s));
  for (;;) {
    std::vector<sched::ProvisionRequest> provision;
    std::vector<sched::ScaleDown> scale_down;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, poll, [&] {
        return stopping_ || !provision_queue_.empty() || !scale_down_queue_.empty();
      });
      if (stopping_) return;
      provision.assign(provision_queue_.begin(), provision_queue_.end());
      provision_queue_.clear();
      scale_down.assign(scale_down_queue_.begin(), scale_down_queue_.end());
      scale_down_queue_.clear();
    }
    for (const sched::ProvisionRequest& request : provision) DoProvision(request);
    for (const sched::ScaleDown& request : scale_down) DoScaleDown(request);
    PollInterruptions();
    const double now = NowS();
    if (now - last_list_s_ >= options_.list_interval_s || !provision.empty() ||
        !scale_down.empty()) {
      last_list_s_ = now;
      RefreshLists();
    }
  }
}

std::vector<ProvisioningController::ProviderMetrics> ProvisioningController::Metrics() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProviderMetrics> out;
  out.reserve(providers_.size());
  for (const auto& [name, entry] : providers_) {
    ProviderMetrics& m = out.emplace_back();
    m.name = name;
    m.type = entry.config.type;
    if (entry.resilient != nullptr) {
      m.breaker = ToString(entry.resilient->breaker_state());
      m.counters = entry.resilient->counters();
    }
    for (const CloudNode& node : entry.nodes) ++m.nodes[std::string(ToString(node.state))];
  }
  return out;
}

json ProvisioningController::StatusJson() {
  std::lock_guard<std::mutex> lock(mu_);
  json out = json::array();
  for (const auto& [name, entry] : providers_) {
    json nodes = json::array();
    for (const CloudNode& node : entry.nodes) {
      nodes.push_back({{"name", node.name},
                       {"pool", node.pool},
                       {"spot", node.spot},
                       {"state", ToString(node.state)}});
    }
    json item = {{"name", name}, {"type", entry.config.type}, {"nodes", std::move(nodes)}};
    if (entry.resilient != nullptr) {
      const ResilientProvider::Counters counters = entry.resilient->counters();
      item["breaker"] = ToString(entry.resilient->breaker_state());
      item["calls"] = counters.calls;
      item["retries"] = counters.retries;
      item["failures"] = counters.failures;
      item["breaker_opens"] = counters.breaker_opens;
    }
    item["last_error"] = entry.last_error.empty() ? json(nullptr) : json(entry.last_error);
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace ferry::fleet::server_internal
