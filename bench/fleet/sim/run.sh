#!/usr/bin/env bash
# `scripts/bench sim`: scheduling-policy quality with `ferry sim` (the real
# scheduling core on a simulated cluster; docs/fleet-sim.md), then the
# simulator's own speed at 100,000 GPUs. Prints markdown; CSV and SVG reports
# go to bench/results/sim/<scenario>/ (git-ignored).
#
#   1. contended: 4 equally weighted tenants with different job shapes on 128 GPUs
#      (fifo, fair_share, drf, fair_share+cost)
#   2. uniform:   4 equally weighted tenants, one mixed distribution, 128 GPUs
#   2b. flood:    one tenant floods the queue with long jobs, three submit short ones, 128 GPUs
#   3. philly:    a Philly-shaped trace (8 VCs, heavy-tailed run times) on 256 GPUs
#   4. burst:     128 on-prem GPUs + on-demand + spot cloud: "on-prem first, then the
#                 cheapest on-demand cloud" vs cost-optimized (min_pending_s 600 and 0),
#                 restarting preempted jobs from zero, then with --checkpoint
#   5. scale:     12,500 nodes × 8 GPUs (100,000 GPUs), 50,000 jobs, fair share, a cycle
#                 at most every 60 s (SIM_SCALE_JOBS, SIM_SCALE_CYCLE_S to change)
#
#   SIM_BENCH_BUILD=build/x   use the ferry built there (default: build Release in build/bench)
#   BENCH_QUICK=1             stop every run early (figures not for reporting)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../../lib.sh"
results=$root/bench/results/sim
mkdir -p "$results"

bench_build_tree "${SIM_BENCH_BUILD:-}" ferry
ferry=$build_dir/bin/ferry
[ -x "$ferry" ] || { echo "bench: $ferry missing" >&2; exit 1; }

ex=$root/examples/sim
limit=()
scale_jobs=${SIM_SCALE_JOBS:-50000}
scale_cycle=${SIM_SCALE_CYCLE_S:-60}
if [ "${BENCH_QUICK:-0}" = 1 ]; then
  limit=(--max-time-s 20000)
  scale_jobs=2000
fi

sim() {  # title out_dir args...
  local title=$1 dir=$2
  shift 2
  echo
  echo "### $title"
  echo
  echo '```'
  echo "ferry sim $*" | sed "s#$root/##g"
  echo '```'
  echo
  "$ferry" sim "$@" "${limit[@]}" --out "$dir" 2>"$dir.log" || { cat "$dir.log" >&2; exit 1; }
  echo
  grep -E '^run ' "$dir.log" | sed 's/^/    /'
}

# tenant_shares DIR: per policy run under DIR, each tenant's share ratio and
# average slowdown (columns 9 and 4 of its tenants.csv), after a blank line.
tenant_shares() {
  echo
  for p in fifo fair_share drf fair_share+cost; do
    echo "    $p: $(tail -n +2 "$1/$p/tenants.csv" |
      awk -F, '{printf "%s %.2f/%.2f  ", $1, $9, $4}')"
  done
}

# cloud_spend RUNS_CSV: each run's cloud bill, cloud GPU-hours and total cost
# (columns 18, 20 and 19 of runs.csv).
cloud_spend() {
  awk -F, 'NR > 1 {printf "    %s: cloud $%.0f, %.0f cloud GPU-hours, total $%.0f\n", $1, $18, $20, $19}' \
    "$1"
}

echo "## Scheduling policies in the simulator (ferry sim)"
echo
echo "cpu: $(bench_cpu), $(nproc) cores"

policies=fifo,fair_share,drf,fair_share+cost
sim "Contended: 4 tenants (llm, vision, research, eval), equal weights, 128 GPUs" \
  "$results/contended" --config "$ex/contended/cluster.yaml" \
  --synthetic "$ex/contended/tenant-llm.yaml" --synthetic "$ex/contended/tenant-vision.yaml" \
  --synthetic "$ex/contended/tenant-research.yaml" --synthetic "$ex/contended/tenant-eval.yaml" \
  --policy "$policies"
echo
echo "Per tenant: share ratio (GPU-time held / weighted max-min fair share; Jain's inputs)"
echo "and average slowdown:"
tenant_shares "$results/contended"

sim "Uniform: 4 tenants, one mixed distribution, equal weights, 128 GPUs" \
  "$results/uniform" --config "$ex/contended/cluster.yaml" \
  --synthetic "$ex/contended/uniform.yaml" --policy "$policies"

sim "Flood: one tenant floods the queue with long jobs, three submit short ones, 128 GPUs" \
  "$results/flood" --config "$ex/contended/cluster.yaml" \
  --synthetic "$ex/flood/tenant-batch.yaml" --synthetic "$ex/flood/tenant-dev.yaml" \
  --synthetic "$ex/flood/tenant-notebook.yaml" --synthetic "$ex/flood/tenant-ci.yaml" \
  --policy "$policies"
tenant_shares "$results/flood"

sim "Philly-shaped: 8 virtual clusters, 256 GPUs" \
  "$results/philly" --config "$ex/philly/cluster.yaml" --synthetic "$ex/philly/workload.yaml" \
  --policy "$policies"

# The eager variant of the cost-optimized config: no wait before bursting.
burst_tmp=$results/burst-configs
mkdir -p "$burst_tmp"
cp "$ex/burst/onprem-first.yaml" "$burst_tmp/onprem-first.yaml"
cp "$ex/burst/cost.yaml" "$burst_tmp/cost.yaml"
sed 's/^  min_pending_s: 600$/  min_pending_s: 0/' "$ex/burst/cost.yaml" > "$burst_tmp/cost-eager.yaml"
sim "Burst: on-prem first then cheapest on-demand cloud vs cost-optimized" \
  "$results/burst" --config "$burst_tmp/onprem-first.yaml" --config "$burst_tmp/cost.yaml" \
  --config "$burst_tmp/cost-eager.yaml" \
  --synthetic "$ex/burst/steady.yaml" --synthetic "$ex/burst/burst.yaml"
echo
echo "Cloud spend per run (cost_cloud, cloud_gpu_hours from runs.csv):"
echo
cloud_spend "$results/burst/runs.csv"
echo
echo "Cost-optimized vs on-prem first (first row): cloud bill and total cost ratios, avg JCT:"
echo
awk -F, 'NR == 2 {c = $18; t = $19; j = $8}
  NR > 2 {printf "    %s: cloud %.2f×, total %.2f×, avg JCT %.2f×\n", $1, $18 / c, $19 / t, $8 / j}' \
  "$results/burst/runs.csv"

# The same with checkpointing: preempted and interrupted jobs keep their work
# (the preemptible half of this workload is described as checkpointing).
sim "Burst, with --checkpoint" \
  "$results/burst-checkpoint" --config "$burst_tmp/onprem-first.yaml" \
  --config "$burst_tmp/cost.yaml" --config "$burst_tmp/cost-eager.yaml" \
  --synthetic "$ex/burst/steady.yaml" --synthetic "$ex/burst/burst.yaml" --checkpoint
echo
cloud_spend "$results/burst-checkpoint/runs.csv"

# Scale: 100,000 GPUs and 50,000 jobs.
scale=$results/scale-input
mkdir -p "$scale"
cat > "$scale/cluster.yaml" <<EOF
ordering: fair_share
default_scoring: binpack
pools:
  - name: hall-a
    price_per_gpu_hour: 1.2
    nodes: 6250
    nodes_per_domain: 32
    node: {gpu_model: H100, gpus: 8}
  - name: hall-b
    price_per_gpu_hour: 1.0
    nodes: 6250
    nodes_per_domain: 32
    node: {gpu_model: H100, gpus: 8}
backfill: {enabled: true, reservations: 1}
burst: {enabled: false}
EOF
cat > "$scale/workload.yaml" <<EOF
seed: 41
jobs: $scale_jobs
arrival_rate_per_s: 0.6
tenants:
  - {name: t1, teams: [a, b]}
  - {name: t2, teams: [a, b]}
  - {name: t3, teams: [a, b]}
  - {name: t4, teams: [a, b]}
gang_sizes: [{size: 1, probability: 0.5}, {size: 2, probability: 0.2}, {size: 4, probability: 0.2}, {size: 8, probability: 0.1}]
gpus_per_task: [{gpus: 1, probability: 0.3}, {gpus: 4, probability: 0.3}, {gpus: 8, probability: 0.4}]
duration: {median_s: 7200, sigma: 1.0, min_s: 60, max_s: 172800}
EOF
sim "Scale: 100,000 GPUs (12,500 nodes), $scale_jobs jobs, fair share, --cycle-s $scale_cycle" \
  "$results/scale" --config "$scale/cluster.yaml" --synthetic "$scale/workload.yaml" \
  --cycle-s "$scale_cycle"
awk -F, 'NR > 1 {printf "\n    %d cycles, core %.1f ms/cycle (max %.1f ms), simulation wall time %.1f s (%.1f s in the core)\n", $29, $30, $31, $32, $29 * $30 / 1000}' \
  "$results/scale/runs.csv"
