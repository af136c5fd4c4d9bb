// One scheduling cycle of the core (scheduler.cc drives it): the dense index
// of the snapshot, gang placement with scoring and topology, quotas,
// preemption, backfill reservations, burst and scale-down.
#pragma once

#include "ferry/fleet/sched.h"
#include "fleet/sched/policy.h"

namespace ferry::fleet::sched::internal {

// Runs one cycle. `usage` must already be advanced to snapshot.now_s;
// `limiter` is the fair-share preemption limit that spans cycles.
Decision RunCycle(const Config& config, const Snapshot& snapshot, const UsageTracker& usage,
                  RateLimiter* limiter);

}  // namespace ferry::fleet::sched::internal
