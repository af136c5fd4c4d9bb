// Small helpers shared by the policy_*.cc files (not part of policy.h's seam).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/fleet/model.h"
#include "fleet/sched/policy.h"

namespace ferry::fleet::sched::internal {

// GPUs a running job holds (over all its tasks).
int RunningGpus(const RunningJob& job);

// What a running job holds in GPUs, CPUs and memory.
Demand RunningDemand(const RunningJob& job);

// A job's owner as views (into the snapshot or into strings the holder keeps).
struct OwnerView {
  std::string_view tenant, team, user;
  bool operator==(const OwnerView&) const = default;
};
// Names are short: a few multiply-xor rounds over 8-byte words hash them
// several times faster than std::hash, which matters at one lookup per job.
inline uint64_t HashName(std::string_view text, uint64_t h) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  const char* p = text.data();
  size_t n = text.size();
  h = (h ^ n) * kMul;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    h = (h ^ word) * kMul;
    h ^= h >> 29;
  }
  if (n > 0) {
    uint64_t word = 0;
    for (size_t i = 0; i < n; ++i) word |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
    h = (h ^ word) * kMul;
    h ^= h >> 29;
  }
  return h;
}
struct OwnerViewHash {
  size_t operator()(const OwnerView& owner) const {
    uint64_t h = HashName(owner.tenant, 0x243F6A8885A308D3ull);
    h = HashName(owner.team, h);
    h = HashName(owner.user, h);
    return static_cast<size_t>(h ^ (h >> 32));
  }
};

// GPU model spellings interned as small ids of their canonical form
// (CanonicalGpuModel), so a fleet of one model folds it once, not once per GPU. The last
// spelling asked for is answered without hashing (GPUs of a node, and nodes
// of a pool, mostly repeat it).
class ModelKeys {
 public:
  int Id(std::string_view model) {
    if (last_id_ >= 0 && model == last_) return last_id_;
    last_.assign(model);
    last_id_ = Lookup(model);
    return last_id_;
  }
  const std::string& Key(int id) const { return keys_[static_cast<size_t>(id)]; }
  size_t size() const { return keys_.size(); }

 private:
  int Lookup(std::string_view model);

  std::vector<std::string> keys_;                 // canonical, by id
  std::unordered_map<std::string, int> key_ids_;  // canonical -> id
  std::string last_;
  int last_id_ = -1;
};

// Maps the GPUs of running jobs to their models, through the snapshot's
// nodes. Built in one pass over the nodes into flat arrays, so a running
// job's lookups stay in a few cache-resident tables instead of chasing each
// node's GPU list.
class GpuModelIndex {
 public:
  // Interns the model of every GPU of the snapshot in `keys` (which must
  // outlive the index).
  GpuModelIndex(const Snapshot& snapshot, ModelKeys* keys);
  // GPUs held by `job` as (model id in `keys`, GPUs), in order of first
  // appearance; the id of "" where the node or GPU is not in the snapshot.
  void ModelIdsOf(const RunningJob& job, std::vector<std::pair<int, int>>* out) const;
  // Whether the model of some GPU of the snapshot has id `model`.
  bool InFleet(int model) const {
    return static_cast<size_t>(model) < in_fleet_.size() && in_fleet_[static_cast<size_t>(model)];
  }
  bool any_gpu() const { return !slots_.empty(); }

 private:
  struct Slot {
    int64_t id;
    int index;
    int model;
  };
  int FindNode(const TaskPlacement& task) const;  // -1: none

  const Snapshot* snapshot_;
  ModelKeys* keys_;
  std::vector<Slot> slots_;        // every GPU, node after node
  std::vector<uint32_t> first_;    // per node: its first slot; [nodes]: slots_.size()
  std::vector<uint8_t> in_fleet_;  // per model id
  // Node ids, open addressing (id 0 marks a free entry): the first node of an id.
  std::vector<std::pair<int64_t, int>> by_id_;
  uint64_t id_mask_ = 0;
  // Built on first use: the store always names nodes by id.
  mutable bool names_built_ = false;
  mutable std::unordered_map<std::string_view, int> by_name_;
};

// Shares configured for `path` (1 when unlisted); never negative or NaN.
class ShareTable {
 public:
  explicit ShareTable(const Config& config);
  double Shares(const std::string& path) const;

 private:
  std::unordered_map<std::string, double> shares_;
};

}  // namespace ferry::fleet::sched::internal
