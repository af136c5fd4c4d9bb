#!/usr/bin/env bash
# `scripts/bench watch`: does the watch stream (and /metrics) under 1,000
# slow clients slow submissions down? One `ferry server` on SQLite; the
# submission benchmark (ferry_fleet_bench, POST /v1/jobs from 8 client
# threads) runs three times against it: alone, next to 1,000 slow clients
# (bench/fleet/slow_clients.py: 600 server-sent event streams, 200 long
# polls, 200 /metrics scrapes; half never read, half read 16 bytes a
# second, each reconnects when its connection ends), and alone again.
# Prints p50/p99 of each run and the loaded/alone ratio; raw JSON goes to
# bench/results/watch_*.json. docs/benchmarks.md ("Watch stream under slow
# clients").
#
#   FLEET_BENCH_BUILD=build/x   use the ferry and ferry_fleet_bench built there
#   BENCH_QUICK=1               fewer submissions (figures not for reporting)
#   WATCH_BENCH_CLIENTS=N       slow clients (default 1000)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../lib.sh"
bench_fleet_tools

if [ "${BENCH_QUICK:-0}" = 1 ]; then submissions=1000; else submissions=10000; fi
clients=${WATCH_BENCH_CLIENTS:-1000}
threads=${FLEET_BENCH_THREADS:-8}

tmp=$(mktemp -d /tmp/fwb-XXXXXX)
server_pid=
slow_pid=
cleanup() {
  [ -z "$slow_pid" ] || kill "$slow_pid" 2>/dev/null || true
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

"$ferry" server --store "sqlite:$tmp/watch.db" --port 0 --port-file "$tmp/port" \
  --data-dir "$tmp" --rate 0 2>"$tmp/server.log" &
server_pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { cat "$tmp/server.log" >&2; exit 1; }
port=$(cat "$tmp/port")

submit() {  # label
  "$bench" --url "http://127.0.0.1:$port" --token-file "$tmp/admin.token" --threads "$threads" \
    --submissions "$submissions" --gets 0 --lists 0 --json "$results/watch_$1.json" >/dev/null
}

echo "## Watch stream under slow clients: $(bench_cpu), $(nproc) cores"
echo "bench: $submissions submissions alone" >&2
submit alone
echo "bench: $clients slow clients connecting" >&2
"$python" "$root/bench/fleet/slow_clients.py" --port "$port" --token-file "$tmp/admin.token" \
  --clients "$clients" --seconds 0 --ready-file "$tmp/ready" 2>"$tmp/slow.log" &
slow_pid=$!
for _ in $(seq 1800); do [ -s "$tmp/ready" ] && break; sleep 0.1; done
[ -s "$tmp/ready" ] || { cat "$tmp/slow.log" >&2; exit 1; }
sleep 2
echo "bench: $submissions submissions next to them" >&2
submit loaded
curl -s -H "Authorization: Bearer $(cat "$tmp/admin.token")" "http://127.0.0.1:$port/metrics" |
  grep -E '^ferry_watch_(streams|rejected_total|stream_closes_total)' >"$tmp/watch_metrics.txt" || true
kill "$slow_pid" 2>/dev/null || true
wait "$slow_pid" 2>/dev/null || true
slow_pid=
sleep 3
echo "bench: $submissions submissions alone again" >&2
submit alone_again

"$python" - "$results" "$clients" "$tmp/watch_metrics.txt" <<'EOF'
import json, sys
results, clients, metrics = sys.argv[1], sys.argv[2], sys.argv[3]
def phase(label):
    data = json.load(open(f"{results}/watch_{label}.json"))
    return next(p for p in data["phases"] if "POST" in p["name"] or "submit" in p["name"])
rows = [("alone", phase("alone")), (f"next to {clients} slow clients", phase("loaded")),
        ("alone again", phase("alone_again"))]
print("| POST /v1/jobs | ok | errors | per s | p50 ms | p99 ms |")
print("|---|---:|---:|---:|---:|---:|")
for name, p in rows:
    print(f"| {name} | {p['ok']} | {p['errors']} | {p['per_second']:.0f} | {p['p50_ms']:.2f} |"
          f" {p['p99_ms']:.2f} |")
base = (rows[0][1]["p50_ms"] + rows[2][1]["p50_ms"]) / 2, (rows[0][1]["p99_ms"] + rows[2][1]["p99_ms"]) / 2
loaded = rows[1][1]
print(f"\nloaded / alone (mean of both alone runs): p50 x{loaded['p50_ms'] / base[0]:.2f},"
      f" p99 x{loaded['p99_ms'] / base[1]:.2f}")
print("\nserver metrics while loaded:\n```")
print(open(metrics).read().rstrip())
print("```")
EOF
