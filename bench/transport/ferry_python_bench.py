"""One-way latency and throughput of Ferry's transport from Python (the
`flow` module of the extension) between two processes, for every payload
size of common.SIZES; the Python twin of transport_bench.cc, run like
iceoryx2_bench.py so that the two Python rows compare like with like.

    PYTHONPATH=python python bench/transport/ferry_python_bench.py --json out.json

The process started by hand is the sender; it starts the receiver (this file
with --role receiver) and kills it on the way out. Per mode and size the
sender publishes channel `.../d` and the receiver `.../a` (acknowledgements).
The sender loans a uint8 column of the payload size from the channel's shared
memory (Publisher.loan), copies the payload into it through the buffer
protocol (the sequence number in its first 8 bytes, which the receiver
checks), reads CLOCK_MONOTONIC, and sends the loan as a one-column record
batch with the time in its metadata (send_loans: nothing is copied). The
receiver reads the clock as soon as `receive` returns.

Modes: futex (the default wait) and busy (busy_poll=True on both sides).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    from ferry._ferry import flow  # noqa: E402
except ImportError:  # a package that re-exports it
    from ferry import flow  # type: ignore  # noqa: E402

WARMUP = 50
QUEUE = 8  # the same window as the other benchmarks
RECEIVE_TIMEOUT_S = 20.0


def channel(run_id: str, mode: str, size: int, which: str) -> str:
    return f"ferry-bench-py/{run_id}/{mode}/{size}/{which}"


def acknowledge(acks, seq: int, value: int) -> None:
    loan = acks.loan(1, "uint8")
    acks.send_loans({"ack": loan}, {"seq": seq, "v": value})


def run_sender(run_id: str, modes: list[str], sizes: list[int]) -> list[dict]:
    results = []
    for mode in modes:
        busy = mode == "busy"
        for size in sizes:
            source = b"\x5a" * size
            with flow.Publisher(channel(run_id, mode, size, "d"), queue_capacity=QUEUE,
                                busy_poll=busy, max_memory=1 << 30) as data:
                data.wait_for_subscribers(1, timeout=20)
                with flow.Subscriber(channel(run_id, mode, size, "a"), busy_poll=busy) as acks:

                    def send(seq: int, phase: str) -> int:
                        loan = data.loan(size, "uint8")
                        view = memoryview(loan)
                        view[:] = source
                        view[:8] = seq.to_bytes(8, "little")
                        del view
                        sent = common.now_ns()
                        data.send_loans({"payload": loan}, {"seq": seq, "t": sent, "p": phase})
                        return sent

                    def wait_ack(seq: int) -> int:
                        while True:
                            metadata = acks.receive(RECEIVE_TIMEOUT_S).metadata
                            if int(metadata["seq"]) == seq:
                                return int(metadata["v"])

                    latencies = []
                    for seq in range(1, WARMUP + common.latency_iterations(size) + 1):
                        send(seq, "l")
                        latency = wait_ack(seq)
                        if seq > WARMUP:
                            latencies.append(latency)
                    burst = common.throughput_messages(size)
                    first = None
                    for seq in range(1, burst + 1):
                        sent = send(seq, "b")
                        first = sent if first is None else first
                    last = wait_ack(-1)
                    mismatches = wait_ack(-2)
                    # The claim measured here is zero copy: nothing may have been copied.
                    copied = data.stats()["bytes_copied"]
                    if copied:
                        raise RuntimeError(f"ferry python bench: send_loans copied {copied} bytes")
                    if mismatches:
                        raise RuntimeError(f"ferry python bench: {mismatches} payloads arrived "
                                           "with the wrong bytes")
            record = common.record("ferry", "python", mode, size, latencies, burst,
                                   (last - first) / 1e9)
            results.append(record)
            print(f"ferry python {mode:5} {common.size_label(size):>8}: p50 "
                  f"{record['p50_us']:.1f} us", file=sys.stderr)
    return results


def payload_matches(message, seq: int, size: int) -> bool:
    import pyarrow as pa

    column = pa.record_batch(message.batch).column(0)
    data = column.buffers()[1]
    return len(column) == size and int.from_bytes(data[:8].to_pybytes(), "little") == seq


def run_receiver(run_id: str, modes: list[str], sizes: list[int]) -> None:
    for mode in modes:
        busy = mode == "busy"
        for size in sizes:
            with flow.Publisher(channel(run_id, mode, size, "a"), queue_capacity=QUEUE,
                                busy_poll=busy) as acks:
                with flow.Subscriber(channel(run_id, mode, size, "d"), busy_poll=busy) as data:
                    acks.wait_for_subscribers(1, timeout=20)
                    mismatches = 0
                    for _ in range(WARMUP + common.latency_iterations(size)):
                        message = data.receive(RECEIVE_TIMEOUT_S)
                        received = common.now_ns()
                        metadata = message.metadata
                        seq = int(metadata["seq"])
                        mismatches += not payload_matches(message, seq, size)
                        del message  # the drop token goes back before the answer
                        acknowledge(acks, seq, received - int(metadata["t"]))
                    last = 0
                    for _ in range(common.throughput_messages(size)):
                        message = data.receive(RECEIVE_TIMEOUT_S)
                        last = common.now_ns()
                        del message
                    acknowledge(acks, -1, last)
                    acknowledge(acks, -2, mismatches)
                    # Tear down once the sender has closed its end, so that the
                    # last acknowledgements are never lost with this publisher.
                    try:
                        while True:
                            data.receive(RECEIVE_TIMEOUT_S)
                    except (EOFError, TimeoutError):
                        pass


def main() -> int:
    name = "ferry python bench"
    args, modes, sizes = common.pair_arguments(name, __doc__.splitlines()[0], "futex,busy",
                                               str(os.getpid()))
    common.pin(args.role)
    if args.role == "receiver":
        run_receiver(args.run_id, modes, sizes)
        return 0
    return common.run_with_receiver(name, __file__, args, modes,
                                    lambda: run_sender(args.run_id, modes, sizes), 30)


if __name__ == "__main__":
    sys.exit(main())
