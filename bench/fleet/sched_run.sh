#!/usr/bin/env bash
# `scripts/bench sched`: the scheduling core's throughput next to
# this machine's floor, in one run. One Scheduler::Cycle over 10,000 nodes x
# 8 GPUs with 100,000 pending jobs (mixed gangs, quotas on), per ordering, on
# an empty and a 90%-full fleet (bench/fleet/sched_bench.cc). Prints markdown.
#
#   SCHED_BENCH_BUILD=build/x   use ferry_sched_bench built there (default: build Release in build/bench)
#   BENCH_QUICK=1               a small fleet (figures not for reporting)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../lib.sh"

bench_build_tree "${SCHED_BENCH_BUILD:-}" ferry_sched_bench
bench=$build_dir/bench/fleet/ferry_sched_bench
[ -x "$bench" ] || { echo "bench: $bench missing" >&2; exit 1; }

echo "## Scheduling core throughput (ferry_sched_bench)"
echo
echo "cpu: $(bench_cpu), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -f "$floor_src" ]; then
  cc -O2 -o "$build_dir/floor" "$floor_src"
  echo
  echo "floor (${floor_src}):"
  echo
  "$build_dir/floor" | sed 's/^/    /'
else
  echo "floor: no program at $floor_src (set FERRY_FLOOR_SRC)"
fi
echo
args=(--repeat 5)
[ "${BENCH_QUICK:-0}" = 1 ] && args=(--quick --repeat 2)
echo '```'
echo "ferry_sched_bench ${args[*]}"
echo '```'
echo
"$bench" "${args[@]}"
