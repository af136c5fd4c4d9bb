#!/usr/bin/env bash
# The dataflow runtime benchmark, in one run: one-way latency by
# payload size (bench/transport/common.py's SIZES, 8 B to 40 MB) of
#   - node→node through `ferry run`: C++ and Python nodes, loaned and copying
#     sends (nodes_bench.py; the C++ nodes are ferry_flow_bench), plus C++
#     nodes without a daemon (ferry_flow_bench nodes);
#   - operator→operator in one runtime: C++ shared-library operators in an
#     OperatorHost (ferry_flow_bench operators) and Python operators
#     (operators_bench.py);
#   - the raw transport (bench/transport's ferry_transport_bench, futex mode);
#   - dora-rs (PyPI): two Python nodes (bench/transport/dora_bench.py) and
#     two Python operators (operators_bench.py --system dora);
#   - this machine's floor (floor.c);
# then one markdown report on stdout (report.py). Raw results go to
# bench/results/dataflow/. Called by `scripts/bench` (its dataflow section)
# and by `scripts/bench dataflow`. About 4 minutes on 2 cores.
#
# Every process pair runs pinned to two cores (sender on the first CPU of
# FERRY_BENCH_CPUS, default "0,1", receiver on the second), as in
# bench/transport; the in-process operator runs use the first core.
#
# Environment: PYTHON (default .venv/bin/python), BUILD_DIR (Release build
# tree, default build/bench), JOBS, BENCH_QUICK=1 for a smoke run (fewer
# samples; figures not for reporting), FERRY_FLOOR_SRC (default
# ../shared/floor/floor.c beside the checkout), FERRY_PYTHONPATH (where `import ferry` finds
# the extension; default python/), FERRY_BENCH_CPUS. Every step has a time
# limit and kills its own child processes when it ends.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../lib.sh"

build_dir=${BUILD_DIR:-$root/build/bench}
ferry_pythonpath=${FERRY_PYTHONPATH:-$root/python}
out=$root/bench/results/dataflow
mkdir -p "$out" "$build_dir"
rm -f "$out"/*.json "$out"/*.log "$out"/floor.txt
quick=()
[ "${BENCH_QUICK:-0}" = 1 ] && quick=(--quick)
missing=()
results=()

if [ "$(nproc)" -lt 2 ]; then
  export FERRY_BENCH_CPUS=""
else
  export FERRY_BENCH_CPUS=${FERRY_BENCH_CPUS:-0,1}
fi

bench_machine "$out/machine.txt"

# step NAME SECONDS COMMAND...: runs one measurement with a time limit; its
# stderr goes to NAME.log, its results to NAME.json (the command writes them).
step() {
  local name=$1 limit=$2
  shift 2
  echo "bench dataflow: $name" >&2
  if timeout -k 5 "$limit" "$@" 2>"$out/$name.log" && [ -s "$out/$name.json" ]; then
    results+=("$out/$name.json")
  else
    tail -15 "$out/$name.log" >&2
    missing+=("$name=the benchmark failed; see bench/results/dataflow/$name.log")
  fi
}

# ---- Build (Release): the CLI, the raw transport benchmark, ours ------------------
targets=(ferry ferry_transport_bench ferry_flow_bench ferry_bench_operator)
built=0
if ! bench_configure "$build_dir" -DPython3_EXECUTABLE="$python" >"$out/build.log" 2>&1; then
  tail -20 "$out/build.log" >&2
  missing+=("Ferry C++=CMake could not configure $build_dir; see build.log")
elif ! grep -q '^build bench/ferry_flow_bench:' "$build_dir/build.ninja"; then
  missing+=("Ferry C++=the node API or the operator host is not in this tree yet")
elif ! cmake --build "$build_dir" --target "${targets[@]}" -j "$jobs" >>"$out/build.log" 2>&1; then
  tail -20 "$out/build.log" >&2
  missing+=("Ferry C++=the benchmark programs did not build; see build.log")
else
  built=1
fi
ferry_bin=$build_dir/bin/ferry
flow_bench=$build_dir/bench/ferry_flow_bench
operator_lib=$build_dir/bench/libferry_bench_operator.so

# ---- Floor ------------------------------------------------------------------------
# floor.c as it is, its ping-pongs pinned like the benchmarks (two cores).
if [ -f "$floor_src" ] && cc -O2 -include "$root/bench/transport/pinned_fork.h" \
  -o "$build_dir/floor_pinned" "$floor_src"; then
  placement=
  [ -n "$FERRY_BENCH_CPUS" ] && placement="${FERRY_BENCH_CPUS/,/:},${FERRY_BENCH_CPUS/,/:}"
  echo "bench dataflow: floor" >&2
  FERRY_FORK_PLACEMENT=$placement timeout 60 "$build_dir/floor_pinned" >"$out/floor.txt" ||
    rm -f "$out/floor.txt"
else
  echo "bench dataflow: no floor program at $floor_src; skipping it" >&2
fi

# ---- Ferry C++ ----------------------------------------------------------------------
if [ "$built" = 1 ]; then
  step raw_transport 120 "$build_dir/bench/ferry_transport_bench" --modes=futex --timeout=110 \
    "--json=$out/raw_transport.json" "${quick[@]+"${quick[@]}"}"
  step cpp_nodes 120 "$python" bench/dataflow/nodes_bench.py --lang cpp --ferry "$ferry_bin" \
    --flow-bench "$flow_bench" --workdir "$out/work" --timeout 110 --json "$out/cpp_nodes.json"
  step cpp_nodes_no_daemon 90 "$flow_bench" nodes --modes=loan --timeout=80 \
    "--json=$out/cpp_nodes_no_daemon.json" "${quick[@]+"${quick[@]}"}"
  step cpp_operators 90 "$flow_bench" operators "--operator=$operator_lib" --timeout=80 \
    "--json=$out/cpp_operators.json" "${quick[@]+"${quick[@]}"}"
fi

# ---- Ferry Python -------------------------------------------------------------------
if PYTHONPATH=$ferry_pythonpath "$python" -c 'from ferry.flow import Node; import ferry.runtime' \
  2>/dev/null; then
  if [ "$built" = 1 ]; then
    step python_nodes 150 env PYTHONPATH="$ferry_pythonpath" FERRY_PYTHONPATH="$ferry_pythonpath" \
      "$python" bench/dataflow/nodes_bench.py --lang python --ferry "$ferry_bin" \
      --workdir "$out/work" --timeout 140 --json "$out/python_nodes.json"
  fi
  step python_operators 90 env PYTHONPATH="$ferry_pythonpath" "$python" \
    bench/dataflow/operators_bench.py --system ferry --json "$out/python_operators.json"
else
  missing+=("Ferry Python=the extension under $ferry_pythonpath has no ferry.flow.Node / ferry.runtime")
fi

# ---- dora-rs --------------------------------------------------------------------------
step dora_nodes 200 "$python" bench/transport/dora_bench.py --workdir "$out/work/dora" \
  --timeout 190 --json="$out/dora_nodes.json"
step dora_operators 120 "$python" bench/dataflow/operators_bench.py --system dora \
  --workdir "$out/work/dora-operators" --timeout 110 --json "$out/dora_operators.json"

echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
report_args=(--machine "$out/machine.txt")
[ -s "$out/floor.txt" ] && report_args+=(--floor "$out/floor.txt")
for entry in "${missing[@]+"${missing[@]}"}"; do report_args+=(--missing "$entry"); done
"$python" bench/dataflow/report.py "${report_args[@]}" --results "${results[@]+"${results[@]}"}" |
  tee "$out/report.md"
