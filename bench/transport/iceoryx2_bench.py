"""One-way latency and throughput of iceoryx2 (its Python package) between two
processes, for every payload size of common.SIZES.

    python bench/transport/iceoryx2_bench.py --json out.json [--modes event,busy]

The process started by hand is the sender; it starts the receiver (this file
with --role receiver) and kills it on the way out. Per mode and size both
open a publish-subscribe service of u8 slices with a user header that carries
the sequence number and the send time (the "metadata"), and an acknowledgement
service back. The sender loans a sample of the payload size from its shared
memory, copies the payload into it (the sequence number in its first 8 bytes,
which the receiver checks), then stamps it and sends it; the receiver takes
its time stamp as soon as `receive` returns the sample and acknowledges.

Modes:
  event  each side sleeps in an iceoryx2 Listener until the other side's
         Notifier fires (iceoryx2's event-based waiting)
  busy   each side polls `receive` in a loop (two spinning processes fill both
         cores of a 2-core machine)
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import iceoryx2 as iox2  # noqa: E402

PHASE_HELLO, PHASE_LATENCY, PHASE_THROUGHPUT, PHASE_STOP = 0, 1, 2, 3
WARMUP = 50
DATA_BUFFER = 8  # samples a subscriber may hold queued (also the burst window)


class Stamp(ctypes.Structure):
    _fields_ = [("seq", ctypes.c_uint64), ("send_ns", ctypes.c_uint64),
                ("phase", ctypes.c_uint64), ("total", ctypes.c_uint64)]

    @staticmethod
    def type_name() -> str:
        return "FerryBenchStamp"


class Ack(ctypes.Structure):
    _fields_ = [("seq", ctypes.c_uint64), ("value", ctypes.c_uint64)]

    @staticmethod
    def type_name() -> str:
        return "FerryBenchAck"


class Deadline:
    def __init__(self, seconds: float, what: str):
        self.end = time.monotonic() + seconds
        self.what = what

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise TimeoutError(f"iceoryx2 bench: timed out {self.what}")


class Channel:
    """One side's ports for one (mode, size): data out and acks in for the
    sender, data in and acks out for the receiver."""

    def __init__(self, node, prefix: str, size: int, event: bool, sender: bool):
        self.event = event
        self.size = size
        data = (node.service_builder(iox2.ServiceName.new(prefix + "/data"))
                .publish_subscribe(iox2.Slice[ctypes.c_uint8]).user_header(Stamp)
                .max_publishers(1).max_subscribers(1).history_size(0)
                .subscriber_max_buffer_size(DATA_BUFFER).enable_safe_overflow(False)
                .open_or_create())
        acks = (node.service_builder(iox2.ServiceName.new(prefix + "/ack"))
                .publish_subscribe(Ack).max_publishers(1).max_subscribers(1).history_size(0)
                .subscriber_max_buffer_size(DATA_BUFFER).enable_safe_overflow(False)
                .open_or_create())
        if sender:
            self.source = (ctypes.c_uint8 * size).from_buffer(bytearray(b"\x5a" * size))
            self.publisher = (data.publisher_builder().initial_max_slice_len(size)
                              .allocation_strategy(iox2.AllocationStrategy.Static)
                              .max_loaned_samples(1)
                              .backpressure_strategy(iox2.BackpressureStrategy.RetryUntilDelivered)
                              .create())
            self.subscriber = acks.subscriber_builder().create()
        else:
            self.publisher = (acks.publisher_builder().max_loaned_samples(1)
                              .backpressure_strategy(iox2.BackpressureStrategy.RetryUntilDelivered)
                              .create())
            self.subscriber = data.subscriber_builder().create()
        self.services = [data, acks]
        if event:
            data_event = node.service_builder(iox2.ServiceName.new(prefix + "/data-event")) \
                .event().open_or_create()
            ack_event = node.service_builder(iox2.ServiceName.new(prefix + "/ack-event")) \
                .event().open_or_create()
            out_event, in_event = (data_event, ack_event) if sender else (ack_event, data_event)
            self.notifier = out_event.notifier_builder().create()
            self.listener = in_event.listener_builder().create()
            self.services += [data_event, ack_event]

    def wait(self, deadline: Deadline, spins: list[int]) -> None:
        """Called when `receive` found nothing: sleep on the listener (event
        mode) or just check the deadline now and then (busy mode)."""
        if self.event:
            self.listener.timed_wait(iox2.Duration.from_millis(20))
            deadline.check()
        else:
            spins[0] += 1
            if spins[0] % 4096 == 0:
                deadline.check()

    def notify(self) -> None:
        if self.event:
            self.notifier.notify()

    def close(self) -> None:
        for name in ("notifier", "listener", "publisher", "subscriber"):
            port = getattr(self, name, None)
            if port is not None:
                port.delete()
        self.services.clear()


# ---- Sender ------------------------------------------------------------------


def send(channel: Channel, seq: int, phase: int, total: int = 0) -> int:
    sample = channel.publisher.loan_slice_uninit(channel.size)
    # The payload is copied in full from the producer's memory (as Ferry's
    # builder and dora's send_output do) before the send time is taken.
    ctypes.memmove(sample.payload_ptr, channel.source, channel.size)
    ctypes.c_uint64.from_address(sample.payload_ptr).value = seq  # checked by the receiver
    header = sample.user_header().contents
    header.seq, header.phase, header.total = seq, phase, total
    sent = common.now_ns()
    header.send_ns = sent
    sample.assume_init().send()
    channel.notify()
    return sent


def wait_ack(channel: Channel, seq: int, deadline: Deadline) -> int:
    spins = [0]
    while True:
        sample = channel.subscriber.receive()
        if sample is None:
            channel.wait(deadline, spins)
            continue
        ack = sample.payload().contents
        got, value = ack.seq, ack.value
        sample.delete()
        if got == seq:
            return value


def hello(channel: Channel) -> None:
    """Pings until the receiver's subscriber is connected and answers."""
    deadline = Deadline(15, "waiting for the receiver to connect")
    while True:
        send(channel, 0, PHASE_HELLO)
        try:
            wait_ack(channel, 0, Deadline(0.005, ""))
            return
        except TimeoutError:
            deadline.check()


def run_sender(node, run_id: str, modes: list[str], sizes: list[int]) -> list[dict]:
    results = []
    for mode in modes:
        for size in sizes:
            channel = Channel(node, f"ferry-bench/{run_id}/{mode}/{size}", size, mode == "event",
                              sender=True)
            hello(channel)
            deadline = Deadline(60, f"{mode} {size} B")
            latencies = []
            for seq in range(1, WARMUP + common.latency_iterations(size) + 1):
                send(channel, seq, PHASE_LATENCY)
                latency = wait_ack(channel, seq, deadline)
                if seq > WARMUP:
                    latencies.append(latency)
            burst = common.throughput_messages(size)
            first = None
            for seq in range(1, burst + 1):
                sent = send(channel, seq, PHASE_THROUGHPUT, burst)
                first = sent if first is None else first
            last = wait_ack(channel, burst, deadline)
            send(channel, 1, PHASE_STOP)
            mismatches = wait_ack(channel, 1, deadline)
            if mismatches:
                raise RuntimeError(f"iceoryx2 bench: {mismatches} payloads arrived corrupted")
            results.append(common.record("iceoryx2", "python", mode, size, latencies,
                                         burst, (last - first) / 1e9))
            print(f"iceoryx2 {mode:5} {common.size_label(size):>8}: p50 "
                  f"{results[-1]['p50_us']:.1f} us", file=sys.stderr)
            channel.close()
    return results


# ---- Receiver ----------------------------------------------------------------


def run_receiver(node, run_id: str, modes: list[str], sizes: list[int]) -> None:
    parent = os.getppid()
    for mode in modes:
        for size in sizes:
            channel = Channel(node, f"ferry-bench/{run_id}/{mode}/{size}", size, mode == "event",
                              sender=False)
            deadline = Deadline(90, f"receiver {mode} {size} B")
            spins = [0]
            mismatches = 0
            while True:
                sample = channel.subscriber.receive()
                if sample is None:
                    channel.wait(deadline, spins)
                    if os.getppid() != parent:
                        return  # the sender is gone
                    continue
                received = common.now_ns()
                header = sample.user_header().contents
                seq, phase, sent, total = header.seq, header.phase, header.send_ns, header.total
                if phase == PHASE_LATENCY and \
                        ctypes.c_uint64.from_address(sample.payload_ptr).value != seq:
                    mismatches += 1
                sample.delete()
                if phase == PHASE_HELLO:
                    reply = (0, 0)
                elif phase == PHASE_LATENCY:
                    reply = (seq, received - sent)
                elif phase == PHASE_THROUGHPUT:
                    if seq != total:
                        continue
                    reply = (seq, received)
                else:
                    reply = (seq, mismatches)
                channel.publisher.send_copy(Ack(*reply))
                channel.notify()
                if phase == PHASE_STOP:
                    break
            channel.close()


def main() -> int:
    name = "iceoryx2 bench"
    args, modes, sizes = common.pair_arguments(name, __doc__.splitlines()[0], "event,busy",
                                               f"{os.getpid()}-{time.monotonic_ns()}")
    common.pin(args.role)
    iox2.set_log_level_from_env_or(iox2.LogLevel.Error)
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    if args.role == "receiver":
        run_receiver(node, args.run_id, modes, sizes)
        return 0
    return common.run_with_receiver(name, __file__, args, modes,
                                    lambda: run_sender(node, args.run_id, modes, sizes), 10)


if __name__ == "__main__":
    sys.exit(main())
