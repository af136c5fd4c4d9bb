#!/usr/bin/env bash
# `scripts/bench scrape`: what `GET /metrics` costs on a large fleet. One
# `ferry server` on SQLite per run, 10,000 drained nodes of 8 H200 each
# registered and about 100,000 jobs in the store (all PENDING, NO_CAPACITY):
#   off  the submission benchmark (POST /v1/jobs, 8 client threads) alone;
#   on   the same with /metrics scraped every second meanwhile (Prometheus
#        scrapes every 15-60 s: this is 15-60 times the usual load);
# then 50 scrapes one after another. Prints p50/p99 of each run, the on/off
# ratio and the scrape latency; raw JSON goes to bench/results/scrape_*.json.
# docs/benchmarks.md ("Metrics scrape cost").
#
#   FLEET_BENCH_BUILD=build/x   use the ferry and ferry_fleet_bench built there
#   BENCH_QUICK=1               1,000 nodes and 10,000 jobs (figures not for reporting)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../lib.sh"
bench_fleet_tools

if [ "${BENCH_QUICK:-0}" = 1 ]; then
  nodes=1000; preload=8000; submissions=2000
else
  nodes=10000; preload=80000; submissions=20000
fi
threads=${FLEET_BENCH_THREADS:-8}
tmp=$(mktemp -d /tmp/ffs-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

run() {  # label extra-args...
  local label=$1
  shift
  echo "### metrics $label: $nodes nodes, $preload + $submissions jobs, $threads client threads"
  "$bench" --ferry "$ferry" --store "sqlite:$tmp/$label.db" --threads "$threads" \
    --nodes "$nodes" --preload "$preload" --submissions "$submissions" --gets 0 --lists 0 \
    --server-arg --lease-ms --server-arg 3600000 --scrapes 50 "$@" \
    --json "$results/scrape_$label.json"
}

echo "## Metrics scrape cost: $(bench_cpu), $(nproc) cores"
run off
run on --scrape-every-ms 1000
"$python" - "$results/scrape_off.json" "$results/scrape_on.json" <<'PY'
import json, sys
off, on = (json.load(open(p)) for p in sys.argv[1:3])
def phase(r, name):
    return next(p for p in r["phases"] if p["name"] == name)
a, b = phase(off, "POST /v1/jobs"), phase(on, "POST /v1/jobs")
print(f"submission p50 on/off {b['p50_ms'] / a['p50_ms']:.3f}, "
      f"p99 on/off {b['p99_ms'] / a['p99_ms']:.3f}, "
      f"throughput on/off {b['per_second'] / a['per_second']:.3f}")
for label, r in (("off", off), ("on", on)):
    s = phase(r, "GET /metrics")
    print(f"scrape after the {label} run: p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, "
          f"max {s['max_ms']:.1f} ms, {r.get('scrape_bytes', 0)} bytes")
bg = phase(on, "GET /metrics (background)")
print(f"scrapes during the on run: {bg['ok']}, p50 {bg['p50_ms']:.1f} ms, p99 {bg['p99_ms']:.1f} ms")
PY
