// One scheduling cycle of the core (scheduler.cc drives it): the dense index
// of the snapshot, gang placement with scoring and topology, quotas,
// preemption, backfill reservations, burst and scale-down (cycle_*.cc over
// the shared state in cycle_run.h).
#pragma once

#include <optional>
#include <string>

#include "ferry/fleet/sched.h"
#include "fleet/sched/policy.h"

namespace ferry::fleet::sched::internal {

// Runs one cycle. `usage` must already be advanced to snapshot.now_s;
// `limiter` is the fair-share preemption limit that spans cycles.
Decision RunCycle(const Config& config, const Snapshot& snapshot, const UsageTracker& usage,
                  RateLimiter* limiter);

// When a pending job of `snapshot` could never be held by the snapshot's nodes
// plus the cloud pools of its set at their max_nodes (burst enabled): the
// CONSTRAINT_UNSATISFIABLE message a cycle gives it (the first such job);
// nullopt when every job could be held. Malformed jobs are not judged here. The same
// capacity reasoning as RunCycle (Scheduler::CheckCapacity uses it).
std::optional<std::string> CapacityRefusal(const Config& config, const Snapshot& snapshot);

}  // namespace ferry::fleet::sched::internal
