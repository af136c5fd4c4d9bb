// What agents fetch ahead for jobs that still wait (docs/fleet-staging.md,
// "Prefetch while pending"): each scheduling pass names the nodes a blocked
// job is held on (a backfill reservation or a drain), and the agents of
// those nodes fetch its inputs into their caches before it is admitted, so
// its GPUs do not wait on the download. Kept in memory only; the next pass
// after a restart plans again. Internal to src/fleet/server; free of HTTP
// state so the tests reach it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ferry/fleet/store.h"

namespace ferry::fleet::server_internal {

// What one node fetches ahead for one job: its inputs, code bundle and
// image (sent in sync replies).
struct PrefetchOrder {
  int64_t job_id = 0;
  int attempt = 1;
  std::string tenant;  // its tenant's name (agents pick storage credentials by it)
  std::vector<StagedInput> inputs;
  JobSpec::Code code;        // a bundle is fetched ahead; a git commit is not
  std::string image;         // the job's image, pulled ahead
  std::string image_digest;  // resolved at submission
  bool empty() const { return inputs.empty() && code.bundle.empty() && image.empty(); }
  bool operator==(const PrefetchOrder& other) const {
    return job_id == other.job_id && attempt == other.attempt;
  }
};

// Thread-safe: every member takes the object's own lock.
class PrefetchPlans {
 public:
  // Replaces every node's orders with `plan` (node -> orders, in any
  // order); returns the nodes whose orders changed (to wake their agents).
  std::set<std::string> Replace(std::map<std::string, std::vector<PrefetchOrder>> plan);
  // The node's orders, ordered by job id.
  std::vector<PrefetchOrder> For(const std::string& node) const;
  // The order of (job, attempt) in the current plan, on any node: a pass
  // reuses it instead of reading the job's inputs again.
  std::optional<PrefetchOrder> Find(int64_t job_id, int attempt) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::vector<PrefetchOrder>> plan_;
};

}  // namespace ferry::fleet::server_internal
