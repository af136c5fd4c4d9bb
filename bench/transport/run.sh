#!/usr/bin/env bash
# The cross-process transport benchmark, in one run: this machine's floor
# (floor.c), Ferry (C++, and Python once its bindings exist), iceoryx2 and
# dora-rs, on the same payload sizes, then one markdown report on stdout.
# Raw results go to bench/results/transport/. Called by `scripts/bench`
# (its transport section) and by `scripts/bench transport`.
#
# Every system runs twice: with sender and receiver pinned to one core
# (blocking waits only: two spinning processes on one core hand over at
# scheduler ticks) and pinned to two cores (blocking and busy-poll). On this
# VM a futex wake-up measured about 1.3 µs within one core and about 25 µs
# across cores; pinning makes each figure say which one it is.
#
# Environment: PYTHON (default .venv/bin/python), BUILD_DIR (Release build
# tree, default build/bench), JOBS, BENCH_QUICK=1 for a smoke run,
# FERRY_FLOOR_SRC (default ../shared/floor/floor.c beside the checkout), FERRY_PYTHONPATH
# (where `import ferry` finds the extension; default python/) and
# FERRY_BENCH_CPUS (below). Every step has a time limit, and each benchmark
# kills its own child processes when it ends.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../lib.sh"

build_dir=${BUILD_DIR:-$root/build/bench}
out=$root/bench/results/transport
mkdir -p "$out" "$build_dir"
rm -f "$out"/*.json "$out"/*.log "$out"/floor*.txt
quick=()
[ "${BENCH_QUICK:-0}" = 1 ] && quick=(--quick)
missing=()
results=()

# FERRY_BENCH_CPUS="S,R" picks the sender's and the receiver's core (default
# 0,1; the one-core runs use S); FERRY_BENCH_CPUS="" leaves placement to the
# scheduler (one unpinned run).
if [ "$(nproc)" -lt 2 ] || { [ -n "${FERRY_BENCH_CPUS+set}" ] && [ -z "$FERRY_BENCH_CPUS" ]; }; then
  placements=("unpinned=")
  spin_pair=
else
  cpu_pair=${FERRY_BENCH_CPUS:-0,1}
  sender_cpu=${cpu_pair%%,*}
  receiver_cpu=${cpu_pair#*,}
  placements=("same core=$sender_cpu,$sender_cpu" "two cores=$sender_cpu,$receiver_cpu")
  spin_pair=$sender_cpu:$receiver_cpu
fi

bench_machine "$out/machine.txt"

# floor.c as it is, with its fork() pinning parent and child like the
# benchmarks (bench/transport/pinned_fork.h).
floor_bin=
if [ -f "$floor_src" ]; then
  cc -O2 -include "$root/bench/transport/pinned_fork.h" -o "$build_dir/floor_pinned" "$floor_src" &&
    floor_bin=$build_dir/floor_pinned
else
  echo "bench transport: no floor program at $floor_src; skipping it" >&2
fi
floor_args=()
# run_floor NAME: floor.c once per placement, right before system NAME, whose
# ratios then use it (the cost of a wake-up moves with the machine's load).
run_floor() {
  [ -n "$floor_bin" ] || return 0
  echo "load_before_$1=$(cut -d' ' -f1 /proc/loadavg)" >>"$out/machine.txt"
  for entry in "${placements[@]}"; do
    local placement=${entry%%=*} cpus=${entry#*=} fork_placement=
    # Its futex ping-pong (first fork) as placed; its spin ping-pong (second
    # fork) always on two cores.
    [ -n "$cpus" ] && fork_placement="${cpus/,/:},$spin_pair"
    local file=$out/floor_$1_${placement// /_}.txt
    if FERRY_FORK_PLACEMENT=$fork_placement timeout 60 "$floor_bin" >"$file"; then
      floor_args+=(--floor "$1/$placement=$file")
    fi
  done
}

# run_system NAME COMMAND...: the command once per placement (FERRY_BENCH_CPUS),
# writing $out/NAME_<placement>.json; the command gets --json=PATH appended.
run_system() {
  local name=$1
  shift
  for entry in "${placements[@]}"; do
    local placement=${entry%%=*} cpus=${entry#*=}
    local stem=$out/${name}_${placement// /_}
    echo "bench transport: $name, $placement" >&2
    if FERRY_BENCH_CPUS=$cpus "$@" "--json=$stem.json" 2>"$stem.log"; then
      results+=("$stem.json")
    else
      cat "$stem.log" >&2
      missing+=("$name ($placement)=the benchmark failed; see $(basename "$stem").log")
    fi
  done
}

# Ferry, C++: built only when the flow library is part of the tree.
if ! bench_configure "$build_dir" -DPython3_EXECUTABLE="$python" \
  >"$out/ferry_cpp_build.log" 2>&1; then
  tail -20 "$out/ferry_cpp_build.log" >&2
  missing+=("Ferry C++=CMake could not configure $build_dir; see ferry_cpp_build.log")
elif ! grep -q '^build bench/ferry_transport_bench:' "$build_dir/build.ninja"; then
  missing+=("Ferry C++=the ferry_flow library is not in this tree yet")
elif ! cmake --build "$build_dir" --target ferry_transport_bench -j "$jobs" \
  >>"$out/ferry_cpp_build.log" 2>&1; then
  tail -20 "$out/ferry_cpp_build.log" >&2
  missing+=("Ferry C++=ferry_transport_bench did not build; see ferry_cpp_build.log")
else
  run_floor ferry_cpp
  run_system ferry_cpp timeout -k 5 170 "$build_dir/bench/ferry_transport_bench" --timeout=160 \
    "${quick[@]+"${quick[@]}"}"
fi

# Ferry, Python: needs the transport in the extension module.
ferry_pythonpath=${FERRY_PYTHONPATH:-$root/python}
if PYTHONPATH=$ferry_pythonpath "$python" -c 'from ferry._ferry import flow; flow.Publisher' \
  2>/dev/null; then
  run_floor ferry_python
  run_system ferry_python env PYTHONPATH="$ferry_pythonpath" timeout -k 5 170 "$python" \
    bench/transport/ferry_python_bench.py --timeout 160
else
  missing+=("Ferry Python=the extension under $ferry_pythonpath has no ferry._ferry.flow")
fi

run_floor iceoryx2
run_system iceoryx2 timeout -k 5 170 "$python" bench/transport/iceoryx2_bench.py --timeout 160

run_floor dora
run_system dora timeout -k 10 200 "$python" bench/transport/dora_bench.py \
  --workdir "$out/dora" --timeout 180

echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
report_args=(--machine "$out/machine.txt" "${floor_args[@]+"${floor_args[@]}"}")
for entry in "${missing[@]+"${missing[@]}"}"; do report_args+=(--missing "$entry"); done
{
  "$python" bench/transport/report.py "${report_args[@]}" \
    --results "${results[@]+"${results[@]}"}"
  echo "Machine: $(sed -n 's/^cpu=//p' "$out/machine.txt"), $(nproc) cores; load average" \
    "(1, 5, 15 min) before: $(sed -n 's/^load_before=//p' "$out/machine.txt"), after:" \
    "$(sed -n 's/^load_after=//p' "$out/machine.txt")."
} | tee "$out/report.md"
