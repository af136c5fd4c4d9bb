"""Operator→operator one-way latency of Python operators inside one runtime:
Ferry's (the OperatorHost of the Python extension, in this process) and
dora-rs's (a runtime node started by `dora run`), with the operators of
py_operator.py, for every payload size of bench/transport/common.py.

    python bench/dataflow/operators_bench.py --system ferry|dora --json OUT
        [--workdir DIR] [--timeout S]

Ferry: ferry.runtime.build_host loads the source and the sink; a scripted
node (OperatorHost.run_scripted, no daemon) queues one tick per message; the
runtime delivers the source's batch to the sink before it takes the next tick.
dora-rs: `dora run` with the two operators in two runtime nodes (dora's
runtime takes one Python operator only, see DORA_DATAFLOW); the sink answers
each message on "ack", which triggers the next one. Both stamp the
send time in the metadata and read the clock when the sink's on_event starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "transport"))
import common  # noqa: E402

# dora-rs's runtime refuses a second Python operator in one runtime node
# ("Runtime currently only supports one Python Operator. This is because PyO3
# sub-interpreter is not yet available"), so each operator gets a runtime
# node of its own and the hand-off goes through dora's daemon: the closest a
# dora-rs Python dataflow gets to operator→operator.
DORA_DATAFLOW = """\
nodes:
  - id: runtime-a
    operators:
      - id: source
        python: {source}
        inputs:
          tick: dora/timer/millis/200
          ack: runtime-b/sink/ack
        outputs:
          - data
  - id: runtime-b
    operators:
      - id: sink
        python: {sink}
        inputs:
          data:
            source: runtime-a/source/data
            queue_size: 4
        outputs:
          - ack
"""

def run_ferry(args, out: str) -> int:
    # The runtime runs its operators on one thread: one core.
    cpus = common.cpu_pair()
    if cpus:
        os.sched_setaffinity(0, {cpus[0]})
    os.environ["FERRY_BENCH_SYSTEM"] = "ferry"
    os.environ["FERRY_BENCH_OUT"] = out
    import pyarrow as pa
    from ferry.runtime import build_host

    sys.path.insert(0, HERE)
    import py_operator

    ticks = sum(count for _, count in py_operator.rounds())
    host = build_host([
        {"id": "source", "kind": "python", "path": os.path.join(HERE, "op_source.py"),
         "inputs": [{"id": "tick", "source": "external"}], "outputs": ["data"]},
        {"id": "sink", "kind": "python", "path": os.path.join(HERE, "op_sink.py"),
         "inputs": [{"id": "data", "source": "source/data", "queue_size": 4}],
         "outputs": []},
    ])
    tick = pa.RecordBatch.from_arrays([pa.array([0], pa.int8())], ["tick"])
    events = [("input", "source/tick", tick)] * ticks + [("stop", "done")]
    host.run_scripted(["source/tick"], [], events)
    if host.errors():
        print(f"operators bench: {host.errors()}", file=sys.stderr)
        return 1
    return 0


def run_dora(args, out: str) -> int:
    dora = common.find_dora("operators bench")
    if not dora:
        return 1
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    dataflow = os.path.join(workdir, "dataflow.yml")
    with open(dataflow, "w") as handle:
        handle.write(DORA_DATAFLOW.format(source=os.path.join(HERE, "op_source.py"),
                                          sink=os.path.join(HERE, "op_sink.py")))
    sizes = [int(size) for size in os.environ["FERRY_BENCH_SIZES"].split(",")]
    # Room for a few of the largest messages in dora's shared memory pool, as
    # dora_bench.py gives its sender (the default, 8 MB, sends larger ones
    # through the heap).
    env = dict(os.environ, FERRY_BENCH_SYSTEM="dora", FERRY_BENCH_OUT=out,
               DORA_NODE_SHM_POOL_SIZE=str(max(8 << 20, 6 * max(sizes))),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    log_path = os.path.join(workdir, "dora_run.log")
    code = common.run_session([dora, "run", dataflow], cwd=workdir, env=env, log_path=log_path,
                              timeout=args.timeout)
    if not os.path.exists(out):
        common.report_failed_run("operators bench", "dora run", code, log_path)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", choices=["ferry", "dora"], required=True)
    parser.add_argument("--sizes", default=",".join(map(str, common.SIZES)))
    parser.add_argument("--json", required=True)
    parser.add_argument("--workdir", default="/tmp/ferry-operators-bench")
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()
    os.environ["FERRY_BENCH_SIZES"] = args.sizes
    out = os.path.abspath(args.json) + ".partial"
    common.remove_stale(out)
    code = run_ferry(args, out) if args.system == "ferry" else run_dora(args, out)
    if code != 0 or not os.path.exists(out):
        return code or 1
    with open(out) as handle:
        results = json.load(handle)
    os.remove(out)
    for result in results:
        print(f"{result['system']} python operator {common.size_label(result['size']):>8}: "
              f"p50 {result['p50_us']:.1f} us", file=sys.stderr)
        if result.get("note"):
            print(f"operators bench: {result['note']}", file=sys.stderr)
            return 1
    common.write_results(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
