#!/usr/bin/env bash
# `scripts/bench staging`: stage-in next to its references, in one run on one
# S3 server (SeaweedFS on loopback): Ferry's staging of a dataset into an
# empty node cache vs `rclone copy` of the same objects; serving the staged
# dataset from the cache vs fio's sequential read of the same bytes on this
# disk; and this machine's floor (memcpy bandwidth among it).
#   STAGING_BENCH_MB   dataset size in MiB (default 1024; BENCH_QUICK=1: 128)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../lib.sh"
bench_build_tree "${FLEET_BENCH_BUILD:-}" ferry_staging_bench
bench=$build_dir/bench/fleet/ferry_staging_bench
results=$root/bench/results
mkdir -p "$results"
if [ -f "$floor_src" ]; then
  cc -O2 -o "$build_dir/floor" "$floor_src"
  echo "floor (${floor_src}):"
  "$build_dir/floor" | sed 's/^/    /'
else
  echo "floor: no program at $floor_src (set FERRY_FLOOR_SRC)"
fi
size=${STAGING_BENCH_MB:-1024}
[ "${BENCH_QUICK:-0}" = 1 ] && size=128
PYTHONPATH=$root/tests/python/fleet "$python" bench/fleet/staging_bench.py "$bench" "$size" \
  "$results"
