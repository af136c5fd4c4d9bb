// The scheduling decision: from a snapshot of pending jobs and free GPUs to
// placements and, for every job left pending, a reason. A pure function of
// its input (no store, no clock), so the server and tests call it alike.
//
// Policy (the simple one of the control plane; richer policies replace it):
// jobs in snapshot order (priority, then age); a job is placed only when
// every task of its gang fits at once (all-or-nothing), on nodes whose free
// GPUs match `gpu_models` and count and whose free CPUs and memory cover the
// task; GPUs, CPUs and memory taken by earlier placements in the same decision
// are not offered again (no double booking). A job that does not fit does not
// block smaller jobs behind it.
#pragma once

#include <vector>

#include "ferry/fleet/store.h"

namespace ferry::fleet {

struct ScheduleDecision {
  std::vector<Placement> placements;
  std::vector<PendingReason> pending;  // one per job not placed
};

ScheduleDecision Schedule(const SchedulingSnapshot& snapshot);

// Whether the gang could ever fit on these nodes if every GPU were free
// (this scheduler's CONSTRAINT_UNSATISFIABLE versus NO_CAPACITY). Drained and
// lost nodes count: they may come back. Submissions are judged by the
// scheduling core instead (sched::Scheduler::CheckCapacity).
bool GangCouldEverFit(const JobSpec& spec, const std::vector<Node>& nodes);

}  // namespace ferry::fleet
