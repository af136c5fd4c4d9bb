# shellcheck shell=bash
# What the benchmark scripts share (scripts/bench and the run.sh scripts under
# bench/). Source it after `set -euo pipefail`; it moves to the checkout's
# root and sets:
#   root       the checkout
#   jobs       build parallelism (JOBS, default: every core)
#   python     the interpreter (PYTHON, default .venv/bin/python)
#   floor_src  floor.c (FERRY_FLOOR_SRC, default ../shared/floor/floor.c beside
#              the checkout)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
jobs=${JOBS:-$(nproc)}
# shellcheck disable=SC2034  # python and floor_src are for the scripts that source this
python=${PYTHON:-$root/.venv/bin/python}
# shellcheck disable=SC2034
floor_src=${FERRY_FLOOR_SRC:-$root/../shared/floor/floor.c}

# bench_configure DIR [CMAKE ARGS...]: configures the Release tree the
# benchmarks are built in (no tests, no Python module, benchmarks on).
bench_configure() {
  local dir=$1
  shift
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_PYTHON=OFF \
    -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=ON "$@"
}

# bench_build_tree DIR TARGET...: sets build_dir to DIR, binaries built
# elsewhere (FLEET_BENCH_BUILD and the like), or, when DIR is empty, to
# build/bench after building the TARGETs there.
bench_build_tree() {
  build_dir=$1
  shift
  [ -z "$build_dir" ] || return 0
  build_dir=$root/build/bench
  local what=$1
  [ $# -eq 2 ] && what="$1 and $2"
  [ $# -gt 2 ] && what=$(IFS=' '; echo "$*")
  echo "bench: building $what (Release) in build/bench" >&2
  bench_configure "$build_dir" >/dev/null
  cmake --build "$build_dir" --target "$@" -j "$jobs" >/dev/null
}

# bench_fleet_tools: results (bench/results, created), ferry and bench (the
# ferry binary and ferry_fleet_bench) from FLEET_BENCH_BUILD or build/bench.
bench_fleet_tools() {
  results=$root/bench/results
  mkdir -p "$results"
  bench_build_tree "${FLEET_BENCH_BUILD:-}" ferry ferry_fleet_bench
  ferry=$build_dir/bin/ferry
  bench=$build_dir/bench/fleet/ferry_fleet_bench
  [ -x "$ferry" ] && [ -x "$bench" ] || { echo "bench: $ferry or $bench missing" >&2; exit 1; }
}

# bench_machine FILE: the machine notes the reports read (cpu=, cores=,
# load_before=).
bench_machine() {
  {
    echo "cpu=$(bench_cpu)"
    echo "cores=$(nproc)"
    echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
  } >"$1"
}

# bench_cpu: the CPU's model name.
bench_cpu() {
  lscpu | sed -n 's/^Model name: *//p'
}
