"""The Python operators of the operator→operator benchmark, for Ferry's
runtime and for dora-rs's (the same code; FERRY_BENCH_SYSTEM picks the API).

Source: sends one uint8 array of the round's payload size per trigger, with
its CLOCK_MONOTONIC send time in the metadata ("t"). Ferry: every input event
on "tick" is a trigger (operators_bench.py queues one tick per message; the
runtime delivers each batch before the next tick). dora: the first timer tick
starts, then each answer of the sink on "ack" triggers the next message, so
one message is in flight at a time.

Sink: reads the clock as soon as on_event gets the input, keeps the latency,
answers on "ack" (dora), and after the last message writes the results to
$FERRY_BENCH_OUT (common.record entries).

The rounds: FERRY_BENCH_SIZES (comma-separated), with the sample counts of
bench/transport/common.py (a third of them for dora, as dora_bench.py).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "transport"))
import common  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

SYSTEM = os.environ.get("FERRY_BENCH_SYSTEM", "ferry")
if SYSTEM == "dora":
    from dora import DoraStatus

    CONTINUE, STOP = DoraStatus.CONTINUE, DoraStatus.STOP
else:
    import ferry.flow

    CONTINUE, STOP = ferry.flow.CONTINUE, ferry.flow.STOP

WARMUP = 20


def rounds():
    """(size, messages) per round, warm-up included."""
    sizes = [int(size) for size in os.environ["FERRY_BENCH_SIZES"].split(",")]
    out = []
    for size in sizes:
        count = common.latency_iterations(size)
        if SYSTEM == "dora":
            count = max(20, count // 3)
        out.append((size, WARMUP + count))
    return out


class Source:
    def __init__(self, config=None):
        self.rounds = rounds()
        self.round = 0
        self.seq = 0
        self.started = False
        self.payload = self._payload()

    def _payload(self):
        size = self.rounds[self.round][0]
        array = np.full(size, 0x5A, dtype=np.uint8)
        return pa.Array.from_buffers(pa.uint8(), size, [None, pa.py_buffer(array)])

    def on_event(self, event, send_output):
        if event["type"] != "INPUT":
            return CONTINUE
        if SYSTEM == "dora" and event["id"] == "tick":
            if self.started:
                return CONTINUE
            self.started = True
        if self.round >= len(self.rounds):
            return STOP
        size, count = self.rounds[self.round]
        self.seq += 1
        last = self.round == len(self.rounds) - 1 and self.seq == count
        send_output("data", self.payload,
                    {"round": self.round, "seq": self.seq, "last": int(last),
                     "t": common.now_ns()})
        if self.seq == count:
            self.round += 1
            self.seq = 0
            if self.round < len(self.rounds):
                self.payload = self._payload()
        return CONTINUE


class Sink:
    def __init__(self, config=None):
        self.rounds = rounds()
        self.latencies = [[] for _ in self.rounds]
        self.bad = 0

    def on_event(self, event, send_output):
        if event["type"] != "INPUT":
            return CONTINUE
        received = common.now_ns()
        metadata = event["metadata"]
        round_index, seq = int(metadata["round"]), int(metadata["seq"])
        size = self.rounds[round_index][0]
        if len(event["value"]) != size:
            self.bad += 1
        if seq > WARMUP:
            self.latencies[round_index].append(received - int(metadata["t"]))
        if SYSTEM == "dora":
            send_output("ack", pa.array([seq], pa.int64()))
        if int(metadata["last"]):
            self._write()
            return STOP
        return CONTINUE

    def _write(self):
        results = []
        for (size, _), latencies in zip(self.rounds, self.latencies):
            record = common.record("dora-rs" if SYSTEM == "dora" else "ferry", "python",
                                   "runtime" if SYSTEM == "dora" else "in-process", size,
                                   latencies, note=f"{self.bad} wrong sizes" if self.bad else "")
            record["kind"] = "operator"
            results.append(record)
        common.write_results(os.environ["FERRY_BENCH_OUT"], results)
