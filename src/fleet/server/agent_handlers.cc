// /v1/agent: node registration, the sync long poll (reports in, work and
// stops out, with each gang's rendezvous) and log uploads.
#include <algorithm>
#include <chrono>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/request_bodies.h"

namespace ferry::fleet::server_internal {

using nlohmann::json;

namespace {

json TaskRefJson(const TaskRef& ref) {
  return {{"job_id", ref.job_id}, {"task", ref.task}, {"attempt", ref.attempt}};
}

}  // namespace

void FleetServer::RememberAddress(const std::string& node, const std::string& address) {
  if (address.empty()) return;
  std::lock_guard<std::mutex> lock(address_mu_);
  node_addresses_[node] = address;
}

void FleetServer::AddRendezvous(TaskAssignment* assignment) {
  {
    std::lock_guard<std::mutex> lock(address_mu_);
    assignment->gang_addresses.clear();
    for (const std::string& node : assignment->gang_nodes) {
      auto it = node_addresses_.find(node);
      assignment->gang_addresses.push_back(it == node_addresses_.end() ? node : it->second);
    }
  }
  const int64_t span = int64_t{options_.rendezvous_port_max} - options_.rendezvous_port_min + 1;
  assignment->rendezvous_port =
      options_.rendezvous_port_min + static_cast<int>(assignment->ref.job_id % span);
}

Status FleetServer::AddInputs(TaskAssignment* assignment, DatasetCache* cache) {
  FERRY_ASSIGN_OR_RAISE(assignment->inputs, InputsOf(assignment->ref.job_id, assignment->tenant_id,
                                                     assignment->spec, cache));
  return Status::OK();
}

Result<std::vector<StagedInput>> FleetServer::InputsOf(int64_t job_id, int64_t tenant_id,
                                                       const JobSpec& spec, DatasetCache* cache) {
  std::vector<StagedInput> out;
  for (const JobInput& input : spec.inputs) {
    StagedInput staged;
    staged.name = input.name;
    staged.digest = input.dataset.empty() ? "sha256:" + input.sha256 : input.manifest_digest;
    if (input.dataset.empty()) {
      // The object's own name, as the URI's last path component.
      const size_t slash = input.uri.rfind('/');
      staged.objects.push_back({input.uri.substr(slash == std::string::npos ? 0 : slash + 1),
                                input.uri, input.size, input.sha256});
    } else {
      const auto key = std::make_tuple(tenant_id, input.dataset, input.version);
      auto it = cache->find(key);
      if (it == cache->end()) {
        Result<std::optional<DatasetVersion>> version = store_->GetDatasetVersion(
            tenant_id, input.dataset, input.version, /*with_objects=*/true);
        if (!version.ok()) return version.status();
        it = cache->emplace(key, std::move(*version)).first;
      }
      if (it->second) {
        for (const DatasetObject& object : it->second->objects) {
          staged.objects.push_back(
              {object.path, it->second->source + object.path, object.size, object.sha256});
        }
      } else {
        // Versions are never deleted; the agent refuses an input without
        // objects and reports the task's staging as failed.
        LogError("job " + std::to_string(job_id) + " input " + input.name,
                 Status::Invalid("dataset " + input.dataset + " version " +
                                 std::to_string(input.version) + " is gone"));
      }
    }
    out.push_back(std::move(staged));
  }
  return out;
}

void FleetServer::AgentRegister(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::vector<FieldError> errors;
  std::optional<NodeRegistration> registration = ParseNodeRegistration(*body, &errors);
  std::optional<std::string> address = ParseAdvertisedAddress(*body, &errors);
  if (!registration || !address) return SendValidation(c, errors);
  Result<Node> node = store_->RegisterNode(*registration, NowMs(), options_.lease_ms);
  // A new agent instance reports its cache on its first sync.
  if (node.ok()) caches_.Forget(registration->name);
  if (!node.ok()) {
    if (node.status().code() == StatusCode::kInvalid) {
      return SendValidation(c, {{"(body)", node.status().message()}});
    }
    return SendStoreError(c, node.status());
  }
  RememberAddress(registration->name, *address);
  // A re-registration may have requeued the old instance's jobs, and new
  // capacity may fit pending jobs: schedule now; end the old instance's poll.
  WakeNodes({registration->name});
  WakeLogWaiters();
  checker_.NodesChanged();
  WakeScheduler();
  SendJson(c, 200, {{"node", ToJson(*node)}, {"lease_ms", options_.lease_ms}});
}

void FleetServer::AgentSync(Call& c) {
  if (!OnlyParams(c, {"wait_ms"})) return;
  std::optional<int64_t> wait_ms = IntParam(c, "wait_ms", 0, 0, INT64_MAX / 4);
  if (!wait_ms) return;
  *wait_ms = std::min(*wait_ms, options_.lease_ms / 2);
  std::optional<json> body = ReadJsonBody(c);
  if (!body) return;
  std::vector<FieldError> errors;
  std::optional<SyncRequest> request = ParseSyncRequest(*body, NowMs(), &errors);
  std::optional<std::string> address = ParseAdvertisedAddress(*body, &errors);
  std::optional<NodeCache> cache;
  const bool cache_ok = ParseCacheReport(*body, NowMs(), &cache, &errors);
  std::optional<std::vector<PrefetchReport>> prefetched = ParsePrefetchReports(*body, &errors);
  if (!request || !address || !cache_ok || !prefetched) return SendValidation(c, errors);
  request->lease_ms = options_.lease_ms;
  RememberAddress(request->node, *address);

  auto generation = [&] {
    std::lock_guard<std::mutex> lock(node_mu_);
    auto it = node_gen_.find(request->node);
    return std::make_pair(it == node_gen_.end() ? 0 : it->second, all_nodes_gen_);
  };
  auto seen = generation();
  Result<SyncResult> result = store_->SyncNode(*request);
  if (!result.ok()) return SendStoreError(c, result.status());
  // Only the registered instance speaks for the node's cache.
  if (cache && result->registered) {
    caches_.Report(request->node, request->instance, std::move(*cache));
  }
  if (result->registered) {
    for (const PrefetchReport& report : *prefetched) {
      // Fenced like the reports: only the job's current attempt, while it waits or runs.
      Result<bool> noted = store_->NoteAhead(report.job_id, report.attempt, "prefetched",
                                             report.message, "agent:" + request->node, NowMs());
      if (!noted.ok()) return SendStoreError(c, noted.status());
    }
    if (!prefetched->empty()) WakeLogWaiters();
  }

  if (!request->reports.empty()) {
    // Exits free GPUs and may end a gang: reschedule, tell the peers, wake log readers.
    bool ended = false;
    std::set<std::string> peers;
    for (const TaskReport& report : request->reports) {
      if (report.kind == TaskReport::Kind::kStarted || report.kind == TaskReport::Kind::kStaging ||
          report.kind == TaskReport::Kind::kStaged) {
        continue;
      }
      ended = true;
      for (const std::string& node : NodesOfJob(report.ref.job_id)) {
        if (node != request->node) peers.insert(node);
      }
    }
    if (ended) WakeScheduler();
    WakeNodes(peers);
    WakeLogWaiters();
  }

  const bool idle = result->registered && result->start.empty() && result->stop.empty();
  if (idle && *wait_ms > 0 && !stopping_.load() && TryEnterLongPoll()) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(*wait_ms);
    bool woken = false;
    {
      std::unique_lock<std::mutex> lock(node_mu_);
      woken = node_cv_.wait_until(lock, deadline, [&] {
        if (stopping_.load()) return true;
        auto it = node_gen_.find(request->node);
        const uint64_t mine = it == node_gen_.end() ? 0 : it->second;
        return std::make_pair(mine, all_nodes_gen_) != seen;
      });
    }
    LeaveLongPoll();
    if (woken && !stopping_.load()) {
      // The reports were applied above; this sync only renews and asks again.
      SyncRequest again = *request;
      again.reports.clear();
      again.now_ms = NowMs();
      Result<SyncResult> second = store_->SyncNode(again);
      if (!second.ok()) return SendStoreError(c, second.status());
      result = std::move(second);
    }
  }

  json start = json::array();
  DatasetCache datasets;
  for (TaskAssignment& assignment : result->start) {
    AddRendezvous(&assignment);
    Status added = AddInputs(&assignment, &datasets);
    if (!added.ok()) return SendStoreError(c, added);
    start.push_back(ToJson(assignment));
  }
  json stop = json::array();
  for (const TaskRef& ref : result->stop) stop.push_back(TaskRefJson(ref));
  // Every order for the node, each time: the agent fetches what is new and
  // drops what is gone (prefetch_plans.h).
  json prefetch = json::array();
  if (result->registered) {
    for (const PrefetchOrder& order : prefetch_.For(request->node)) {
      json inputs = json::array();
      for (const StagedInput& input : order.inputs) inputs.push_back(ToJson(input));
      json entry = {{"job_id", order.job_id},
                    {"attempt", order.attempt},
                    {"tenant", order.tenant},
                    {"inputs", std::move(inputs)}};
      if (!order.code.bundle.empty()) {
        entry["code"] = {{"bundle", order.code.bundle}, {"bytes", order.code.bytes}};
      }
      if (!order.image.empty()) {
        entry["image"] = order.image;
        entry["image_digest"] = order.image_digest;
      }
      prefetch.push_back(std::move(entry));
    }
  }
  SendJson(c, 200,
           {{"registered", result->registered},
            {"lease_expires_at_ms", result->lease_expires_at_ms},
            {"stop_grace_ms", result->stop_grace_ms.value_or(options_.stop_grace_ms)},
            {"start", std::move(start)},
            {"stop", std::move(stop)},
            {"prefetch", std::move(prefetch)}});
}

void FleetServer::AgentLogs(Call& c) {
  if (!OnlyParams(c, {})) return;
  std::optional<AgentLogUpload> upload = ParseJsonBody(c, ParseAgentLogUpload);
  if (!upload) return;
  Status appended = store_->AppendLog(upload->job_id, upload->attempt, upload->task, upload->stream,
                                      upload->data, NowMs());
  if (!appended.ok()) {
    if (appended.code() == StatusCode::kInvalid) {
      return SendValidation(c, {{"job_id", appended.message()}});
    }
    return SendStoreError(c, appended);
  }
  WakeLogWaiters();
  c.res.status = 204;
}

}  // namespace ferry::fleet::server_internal
