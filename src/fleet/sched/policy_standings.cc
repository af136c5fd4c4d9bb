// Fair Tree standings for reports: every tenant, team and user known from
// decayed usage or config.shares, in Fair Tree rank order (depth first,
// siblings by level fair share, ties by name).
//
//   users:           fair_share = (n - rank + 1) / n, rank 1..n over all users
//                    in that order (Slurm's rank-based factor);
//   tenants, teams:  fair_share = 2^(-U/S), S = s / Σ sibling shares,
//                    U = u / Σ sibling usage (0 when the siblings have none):
//                    1 when unused, 0.5 exactly at its share.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "fleet/sched/policy.h"
#include "fleet/sched/policy_util.h"

namespace ferry::fleet::sched::internal {
namespace {

struct TreeNode {
  std::string path;
  std::string name;
  int level = 0;
  double shares = 1;
  double usage = 0;
  std::map<std::string, TreeNode> children;
};

// Splits "a/b/c" into segments; empty segments are kept.
std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    if (slash == std::string::npos) {
      out.push_back(path.substr(start));
      return out;
    }
    out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
}

TreeNode* Insert(TreeNode* root, const std::string& path) {
  const std::vector<std::string> segments = Split(path);
  if (segments.size() > 3) return nullptr;  // not a tenant, team or user path
  TreeNode* node = root;
  for (const std::string& segment : segments) {
    auto [it, inserted] = node->children.try_emplace(segment);
    TreeNode& child = it->second;
    if (inserted) {
      child.name = segment;
      child.level = node->level + 1;
      child.path = node->level == 0 ? segment : node->path + "/" + segment;
    }
    node = &child;
  }
  return node;
}

double LevelKey(double shares, double usage) {
  if (!(shares > 0)) return 0;
  if (!(usage > 0)) return std::numeric_limits<double>::infinity();
  return shares / usage;
}

// Children in Fair Tree order.
std::vector<const TreeNode*> Ordered(const TreeNode& node) {
  std::vector<const TreeNode*> out;
  for (const auto& [name, child] : node.children) out.push_back(&child);
  std::stable_sort(out.begin(), out.end(), [](const TreeNode* a, const TreeNode* b) {
    return LevelKey(a->shares, a->usage) > LevelKey(b->shares, b->usage);
  });  // std::map already sorted them by name: ties keep that order
  return out;
}

void Walk(const TreeNode& node, std::vector<ShareStanding>* out, std::vector<size_t>* users) {
  const std::vector<const TreeNode*> children = Ordered(node);
  double share_sum = 0, usage_sum = 0;
  for (const TreeNode* child : children) {
    share_sum += child->shares;
    usage_sum += child->usage;
  }
  for (const TreeNode* child : children) {
    ShareStanding standing;
    standing.path = child->path;
    standing.shares = child->shares;
    standing.usage = child->usage;
    if (child->level == 3) {
      users->push_back(out->size());
    } else {
      const double s = share_sum > 0 ? child->shares / share_sum : 0;
      const double u = usage_sum > 0 ? child->usage / usage_sum : 0;
      double factor = s > 0 ? std::exp2(-u / s) : 0;
      standing.fair_share = std::max(factor, std::numeric_limits<double>::min());
    }
    out->push_back(std::move(standing));
    Walk(*child, out, users);
  }
}

}  // namespace

std::vector<ShareStanding> Standings(const Config& config, const UsageTracker& usage) {
  TreeNode root;
  for (const auto& [path, value] : usage.all()) {
    TreeNode* node = Insert(&root, path);
    if (node != nullptr) node->usage = std::isfinite(value) ? std::max(0.0, value) : 0.0;
  }
  const ShareTable shares(config);
  for (const ShareConfig& share : config.shares) Insert(&root, share.path);
  // Every node's shares, listed or not.
  std::vector<TreeNode*> stack{&root};
  while (!stack.empty()) {
    TreeNode* node = stack.back();
    stack.pop_back();
    if (node->level > 0) node->shares = shares.Shares(node->path);
    for (auto& [name, child] : node->children) stack.push_back(&child);
  }

  std::vector<ShareStanding> out;
  std::vector<size_t> users;
  Walk(root, &out, &users);
  const double n = static_cast<double>(users.size());
  for (size_t rank = 0; rank < users.size(); ++rank) {
    out[users[rank]].fair_share = (n - static_cast<double>(rank)) / n;
  }
  return out;
}

}  // namespace ferry::fleet::sched::internal
