"""One-way latency and throughput of dora-rs between two Python nodes, for
every payload size of common.SIZES.

    python bench/transport/dora_bench.py --json out.json [--workdir DIR]

Writes a two-node dataflow (this file as the sender node and as the receiver
node) into the work folder and runs it with `dora run`, which starts a local
daemon for this one dataflow (no coordinator, no network beyond loopback). The
sender sends a uint8 pyarrow array of the payload size as output `data` with
`send_output`, carrying the sequence number and its CLOCK_MONOTONIC send time
in the message metadata (dora's own benchmark stamps its metadata the same
way, with its clock); the receiver reads the clock as soon as `node.next()`
returns the input and answers on output `ack`, which is the sender's input.
dora's Python API has no loan: `send_output` copies the array into dora's
shared memory, and that copy is part of what is measured.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PHASE_LATENCY, PHASE_THROUGHPUT, PHASE_REPORT = 1, 2, 3
WARMUP = 20
NEXT_TIMEOUT_S = 30.0


def dora_latency_iterations(size: int) -> int:
    # dora takes hundreds of microseconds a message: a third of the samples
    # of the shared-memory transports keeps its share of the run near 30 s.
    return max(20, common.latency_iterations(size) // 3)


# ---- Nodes (run by the dora daemon) ------------------------------------------


def payload(size: int, np, pa):
    """A uint8 array of `size` bytes over numpy memory (pyarrow wraps it, no copy)."""
    array = np.ones(size, dtype=np.uint8)
    return pa.Array.from_buffers(pa.uint8(), size, [None, pa.py_buffer(array)])


def run_sender() -> None:
    # Before dora starts its threads, which inherit the placement.
    common.pin("sender")
    import numpy as np
    import pyarrow as pa
    from dora import Node

    sizes = [int(size) for size in os.environ["FERRY_BENCH_SIZES"].split(",")]
    node = Node()
    results = []

    def wait_ack(key: list[int], timeout: float = NEXT_TIMEOUT_S) -> list[int] | None:
        """The acknowledgement that starts with `key` ([key..., values...]), or
        None when nothing came for `timeout` seconds."""
        while True:
            event = node.next(timeout=timeout)
            if event is not None and event["type"] == "ERROR" and "imeout" in event["error"]:
                return None
            if event is None or event["type"] in ("STOP", "ERROR"):
                raise RuntimeError(f"dora bench: sender got {event} waiting for ack {key}")
            if event["type"] != "INPUT":
                continue
            values = event["value"].to_pylist()
            if values[:len(key)] == key:
                return values

    for round_index, size in enumerate(sizes):
        # Built once per size, as dora's own benchmark does; the receiver
        # checks the size of what arrives.
        data = payload(size, np, pa)
        latencies = []
        for seq in range(1, WARMUP + dora_latency_iterations(size) + 1):
            sent = common.now_ns()
            node.send_output("data", data,
                             {"round": round_index, "seq": seq, "phase": PHASE_LATENCY, "t": sent})
            ack = wait_ack([seq])
            if ack is None:
                raise RuntimeError(f"dora bench: no answer to message {seq} of {size} B")
            if seq > WARMUP:
                latencies.append(ack[1])
        burst = common.throughput_messages(size)
        first = common.now_ns()
        for seq in range(1, burst + 1):
            node.send_output("data", data, {"round": round_index, "seq": seq,
                                            "phase": PHASE_THROUGHPUT, "total": burst})
        # The receiver answers when the whole burst is in. dora drops the
        # oldest queued input when a queue is full; then the burst never
        # completes and, once the sender has waited, a report message asks how
        # much arrived (sent only after a quiet pause, because dora may carry a
        # small message on another path than the large ones before it).
        done = wait_ack([-1, round_index], timeout=15)
        if done is None:
            node.send_output("data", pa.array([0], pa.uint8()),
                             {"round": round_index, "seq": 0, "phase": PHASE_REPORT})
            done = wait_ack([-1, round_index])
            if done is None:
                raise RuntimeError(f"dora bench: no report for the burst of {size} B")
        _, _, last, received, bad_sizes = done
        if bad_sizes:
            raise RuntimeError(f"dora bench: {bad_sizes} messages of {size} B had the wrong size")
        results.append(common.record("dora-rs", "python", "blocking", size, latencies,
                                     received, (last - first) / 1e9,
                                     note="" if received == burst else
                                     f"{burst - received} of {burst} dropped"))
        print(f"dora-rs {common.size_label(size):>8}: p50 {results[-1]['p50_us']:.1f} us",
              file=sys.stderr, flush=True)
    common.write_results(os.environ["FERRY_BENCH_OUT"], results)


def run_receiver() -> None:
    # Before dora starts its threads, which inherit the placement.
    common.pin("receiver")
    import pyarrow as pa
    from dora import Node

    sizes = [int(size) for size in os.environ["FERRY_BENCH_SIZES"].split(",")]
    node = Node()
    # Per round (payload size): burst messages received, wrong sizes, last receive time.
    counts = [0] * len(sizes)
    bad_sizes = [0] * len(sizes)
    last = [0] * len(sizes)
    for event in node:
        if event["type"] != "INPUT":
            if event["type"] == "STOP":
                break
            continue
        received = common.now_ns()
        metadata = event["metadata"]
        round_index, seq, phase = metadata["round"], metadata["seq"], metadata["phase"]
        if phase == PHASE_LATENCY:
            node.send_output("ack", pa.array([seq, received - metadata["t"]], pa.int64()))
            continue
        if phase == PHASE_THROUGHPUT:
            counts[round_index] += 1
            bad_sizes[round_index] += len(event["value"]) != sizes[round_index]
            last[round_index] = received
            if counts[round_index] != metadata["total"]:
                continue
        node.send_output("ack", pa.array(
            [-1, round_index, last[round_index], counts[round_index], bad_sizes[round_index]],
            pa.int64()))


# ---- Driver ------------------------------------------------------------------

DATAFLOW = """\
nodes:
  - id: sender
    path: {python}
    args: {script} --role sender
    env:
      FERRY_BENCH_SIZES: "{sizes}"
      FERRY_BENCH_CPUS: "{cpus}"
      FERRY_BENCH_OUT: {out}
      BENCH_QUICK: "{quick}"
      # Room for a few of the largest messages in the sender's zenoh shared
      # memory pool (dora's default, 8 MB, sends larger ones through the heap).
      DORA_NODE_SHM_POOL_SIZE: "{pool}"
    inputs:
      ack:
        source: receiver/ack
        queue_size: 16
    outputs:
      - data
  - id: receiver
    path: {python}
    args: {script} --role receiver
    env:
      FERRY_BENCH_SIZES: "{sizes}"
      FERRY_BENCH_CPUS: "{cpus}"
      BENCH_QUICK: "{quick}"
    inputs:
      data:
        source: sender/data
        queue_size: {queue}
    outputs:
      - ack
"""


def main() -> int:
    parser = common.driver_parser(__doc__.splitlines()[0], "/tmp/ferry-dora-bench",
                                  timeout_help="seconds for `dora run`")
    args = parser.parse_args()
    if common.run_node_role(args.role, run_sender, run_receiver):
        return 0

    dora = common.find_dora("dora bench")
    if not dora:
        return 1
    os.makedirs(args.workdir, exist_ok=True)
    out = os.path.join(os.path.abspath(args.workdir), "dora_nodes.json")
    common.remove_stale(out)
    sizes = [int(size) for size in args.sizes.split(",")]
    dataflow = os.path.join(args.workdir, "dataflow.yml")
    with open(dataflow, "w") as handle:
        handle.write(DATAFLOW.format(
            python=sys.executable, script=os.path.abspath(__file__), sizes=args.sizes, out=out,
            quick="1" if common.quick() else "0", pool=max(8 << 20, 6 * max(sizes)),
            cpus=",".join(map(str, common.cpu_pair() or ())),
            queue=max(common.throughput_messages(size) for size in sizes) + 8))
    log_path = os.path.join(args.workdir, "dora_run.log")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    # A session of its own, so that on a timeout the daemon and both nodes are
    # killed together.
    results = common.run_graph("dora bench", "dora run", [dora, "run", dataflow],
                               cwd=args.workdir, env=env, log_path=log_path,
                               timeout=args.timeout, out=out)
    if results is None:
        return 1
    for result in results:
        print(f"dora-rs {common.size_label(result['size']):>8}: p50 {result['p50_us']:.1f} us",
              file=sys.stderr)
    if args.json:
        common.write_results(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
