#!/usr/bin/env bash
# `scripts/bench fleet`: the fleet control plane under load (bench/fleet/
# fleet_bench.cc). For SQLite and, when PostgreSQL is installed, a throwaway
# PostgreSQL cluster (scripts/pg-test-server): submissions/s and p50/p99 of
# POST /v1/jobs, GET /v1/jobs/{id} and a 50-job list page, then submit ->
# RUNNING on idle capacity with one agent. Loopback only; raw JSON goes to
# bench/results/fleet_*.json. docs/benchmarks.md ("Fleet control plane").
#
#   FLEET_BENCH_BUILD=build/x   use the ferry and ferry_fleet_bench built there
#   BENCH_QUICK=1               fewer requests (figures not for reporting)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../lib.sh"
bench_fleet_tools

if [ "${BENCH_QUICK:-0}" = 1 ]; then
  submissions=2000; gets=2000; lists=300; latency=10
else
  submissions=20000; gets=20000; lists=2000; latency=50
fi
threads=${FLEET_BENCH_THREADS:-8}

# PostgreSQL runs as user `postgres` when we are root: the directory must be reachable.
tmp=$(mktemp -d /tmp/ffb-XXXXXX)
chmod 755 "$tmp"
clusters=()
cleanup() {
  for c in "${clusters[@]}"; do scripts/pg-test-server stop "$c" >/dev/null 2>&1 || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

api() {  # label store
  echo "### $1: $threads client threads, $submissions submissions"
  "$bench" --ferry "$ferry" --store "$2" --threads "$threads" --submissions "$submissions" \
    --gets "$gets" --lists "$lists" --json "$results/fleet_$1_api.json"
}
latency() {  # label store
  echo "### $1: submit -> RUNNING, $latency jobs one at a time, one agent"
  "$bench" --ferry "$ferry" --store "$2" --submissions 0 --gets 0 --lists 0 \
    --latency "$latency" --json "$results/fleet_$1_latency.json"
}

echo "## Fleet control plane: $(bench_cpu), $(nproc) cores"
api sqlite "sqlite:$tmp/api.db"
latency sqlite "sqlite:$tmp/latency.db"
if pg_api=$(scripts/pg-test-server start "$tmp/pg1" 2>"$tmp/pg1.log"); then
  clusters+=("$tmp/pg1")
  api postgresql "$pg_api"
  pg_latency=$(scripts/pg-test-server start "$tmp/pg2" 2>"$tmp/pg2.log")
  clusters+=("$tmp/pg2")
  latency postgresql "$pg_latency"
else
  echo "### postgresql: skipped ($(tail -n 1 "$tmp/pg1.log"))"
fi
