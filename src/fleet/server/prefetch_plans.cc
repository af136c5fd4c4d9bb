// PrefetchPlans (prefetch_plans.h).
#include "fleet/server/prefetch_plans.h"

#include <algorithm>
#include <utility>

namespace ferry::fleet::server_internal {

std::set<std::string> PrefetchPlans::Replace(
    std::map<std::string, std::vector<PrefetchOrder>> plan) {
  for (auto& [node, orders] : plan) {
    std::sort(orders.begin(), orders.end(), [](const PrefetchOrder& a, const PrefetchOrder& b) {
      return a.job_id != b.job_id ? a.job_id < b.job_id : a.attempt < b.attempt;
    });
    orders.erase(std::unique(orders.begin(), orders.end()), orders.end());
  }
  for (auto it = plan.begin(); it != plan.end();) {
    it = it->second.empty() ? plan.erase(it) : std::next(it);
  }
  std::set<std::string> changed;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [node, orders] : plan_) {
    auto now = plan.find(node);
    if (now == plan.end() || now->second != orders) changed.insert(node);
  }
  for (const auto& [node, orders] : plan) {
    if (!plan_.count(node)) changed.insert(node);
  }
  plan_ = std::move(plan);
  return changed;
}

std::vector<PrefetchOrder> PrefetchPlans::For(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = plan_.find(node);
  return it == plan_.end() ? std::vector<PrefetchOrder>{} : it->second;
}

std::optional<PrefetchOrder> PrefetchPlans::Find(int64_t job_id, int attempt) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [node, orders] : plan_) {
    for (const PrefetchOrder& order : orders) {
      if (order.job_id == job_id && order.attempt == attempt) return order;
    }
  }
  return std::nullopt;
}

}  // namespace ferry::fleet::server_internal
