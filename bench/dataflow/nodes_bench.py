"""Node→node one-way latency of Ferry through `ferry run`: two nodes (C++ or
Python) in a ping-pong dataflow, for every payload size of
bench/transport/common.py, with loaned sends and with plain (copying) sends.

    python bench/dataflow/nodes_bench.py --lang python|cpp --ferry BIN --json OUT
        [--flow-bench BIN] [--workdir DIR] [--timeout S]

The method is dora_bench.py's: the sender stamps CLOCK_MONOTONIC into the
message metadata ("t") right before send_output, the receiver reads the clock
as soon as next() returns the input and answers on "ack" with [seq, latency,
damaged]; one message is in flight at a time. A message is a uint8 array of
the payload size.

Python send modes: "loan" fills node.loan("data", size) (shared memory; only
its first 8 bytes, the sequence number, are written) and sends it without a
copy; "copy" sends one pyarrow array built once per size, which send_output
copies into shared memory inside the measured time (dora's send_output copies
too). The C++ nodes are bench/dataflow/flow_bench.cc (node-sender,
node-receiver), same modes.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "transport"))
import common  # noqa: E402

WARMUP = 20
MODES = ["loan", "copy"]


def run_sender() -> None:
    common.pin("sender")
    import numpy as np
    import pyarrow as pa
    from ferry.flow import Node

    sizes = [int(size) for size in os.environ["FERRY_BENCH_SIZES"].split(",")]
    node = Node()
    results = []
    seq = 0

    def wait_ack(expected: int) -> int:
        while True:
            event = node.next(timeout=30.0)
            if event is None or event["type"] in ("STOP", "INPUT_CLOSED"):
                raise RuntimeError(f"nodes bench: sender got {event} waiting for {expected}")
            if event["type"] != "INPUT":
                continue
            answer = event["value"].to_pylist()
            if answer[0] == expected:
                if answer[2]:
                    raise RuntimeError(f"nodes bench: message {expected} arrived damaged")
                return answer[1]

    for mode in MODES:
        for size in sizes:
            heap = None
            if mode == "copy":
                array = np.full(size, 0x5A, dtype=np.uint8)
                heap = pa.Array.from_buffers(pa.uint8(), size, [None, pa.py_buffer(array)])
                first = array[:8]
            latencies = []
            for index in range(WARMUP + common.latency_iterations(size)):
                seq += 1
                stamp = seq.to_bytes(8, "little")[: min(size, 8)]
                if mode == "loan":
                    data = node.loan("data", size, "uint8")
                    np.asarray(data)[: len(stamp)] = np.frombuffer(stamp, dtype=np.uint8)
                else:
                    first[: len(stamp)] = np.frombuffer(stamp, dtype=np.uint8)
                    data = heap
                node.send_output("data", data, {"seq": seq, "t": common.now_ns()})
                del data
                latency = wait_ack(seq)
                if index >= WARMUP:
                    latencies.append(latency)
            record = common.record("ferry", "python", mode, size, latencies)
            record["kind"] = "node"
            results.append(record)
            print(f"ferry python node {mode} {common.size_label(size):>8}: "
                  f"p50 {record['p50_us']:.1f} us", file=sys.stderr, flush=True)
    common.write_results(os.environ["FERRY_BENCH_OUT"], results)
    node.close()


def run_receiver() -> None:
    common.pin("receiver")
    import numpy as np
    import pyarrow as pa
    from ferry.flow import Node

    node = Node()
    for event in node:
        if event["type"] == "STOP":
            break
        if event["type"] != "INPUT":
            continue
        received = common.now_ns()
        metadata = event["metadata"]
        seq, sent = int(metadata["seq"]), int(metadata["t"])
        value = event["value"]
        damaged = 0
        if len(value) >= 8:
            buffer = value.buffers()[1]
            first = int.from_bytes(np.frombuffer(buffer, dtype=np.uint8,
                                                 count=8, offset=value.offset).tobytes(),
                                   "little")
            damaged = int(first != seq)
        del value, event
        node.send_output("ack", pa.array([seq, received - sent, damaged], pa.int64()))


DATAFLOW = """\
nodes:
  - id: sender
    path: {sender_path}
    args: {sender_args}
    env:
      FERRY_BENCH_SIZES: "{sizes}"
      FERRY_BENCH_CPUS: "{cpus}"
      FERRY_BENCH_OUT: {out}
      BENCH_QUICK: "{quick}"
    inputs:
      ack:
        source: receiver/ack
        queue_size: 16
    outputs: [data]
  - id: receiver
    path: {receiver_path}
    args: {receiver_args}
    env:
      FERRY_BENCH_CPUS: "{cpus}"
      BENCH_QUICK: "{quick}"
    inputs:
      data:
        source: sender/data
        queue_size: 8
    outputs: [ack]
"""


def main() -> int:
    parser = common.driver_parser(__doc__.splitlines()[0], "/tmp/ferry-nodes-bench")
    parser.add_argument("--lang", choices=["python", "cpp"], default="python")
    parser.add_argument("--ferry", help="the `ferry` command")
    parser.add_argument("--flow-bench", help="ferry_flow_bench (for --lang cpp)")
    args = parser.parse_args()
    if common.run_node_role(args.role, run_sender, run_receiver):
        return 0

    workdir = os.path.abspath(os.path.join(args.workdir, args.lang))
    os.makedirs(workdir, exist_ok=True)
    out = os.path.join(workdir, "sender.json")
    common.remove_stale(out)
    if args.lang == "python":
        script = os.path.abspath(__file__)
        paths = dict(sender_path=script, sender_args="--role sender",
                     receiver_path=script, receiver_args="--role receiver")
    else:
        binary = os.path.abspath(args.flow_bench)
        paths = dict(sender_path=binary, sender_args="node-sender",
                     receiver_path=binary, receiver_args="node-receiver")
    dataflow = os.path.join(workdir, "dataflow.yml")
    with open(dataflow, "w") as handle:
        handle.write(DATAFLOW.format(sizes=args.sizes, out=out,
                                     cpus=",".join(map(str, common.cpu_pair() or ())),
                                     quick="1" if common.quick() else "0", **paths))
    log_path = os.path.join(workdir, "ferry_run.log")
    env = dict(os.environ, FERRY_PYTHON=sys.executable)
    results = common.run_graph(
        "nodes bench", "ferry run",
        [os.path.abspath(args.ferry), "run", dataflow, "--allow-cycles", "--log-dir",
         os.path.join(workdir, "logs")],
        cwd=workdir, env=env, log_path=log_path, timeout=args.timeout, out=out)
    if results is None:
        return 1
    for result in results:
        result["kind"] = "node"
    if args.json:
        common.write_results(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
