"""What every transport benchmark in this folder shares: payload sizes, how
many messages each size gets, percentiles, and the result record.

Latency is one-way: the sender reads CLOCK_MONOTONIC (system-wide, so both
processes read the same clock) right before it hands the message to the
transport, the receiver reads it again as soon as the transport hands the
message over, and the difference is one sample. Only one message is in flight
at a time (the receiver acknowledges each one before the next is sent), so
no sample includes time spent queued behind another message.

Throughput: the sender sends a burst back to back under the transport's own
flow control; messages per second = burst / (last receive - first send).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

KIB = 1024
SIZES = [8, 64, 512, 2 * KIB, 4 * KIB, 16 * KIB, 40 * KIB, 400 * KIB, 4_000_000, 40_000_000]


def size_label(size: int) -> str:
    if size >= 1_000_000 and size % 1_000_000 == 0:
        return f"{size // 1_000_000} MB"
    if size >= KIB and size % KIB == 0:
        return f"{size // KIB} KiB"
    return f"{size} B"


def quick() -> bool:
    return os.environ.get("BENCH_QUICK", "0") == "1"


def latency_iterations(size: int) -> int:
    """One-way samples per size: enough for a p99.9 up to 40 KiB, fewer where
    one message takes milliseconds (the whole run must stay short)."""
    if quick():
        return 200 if size <= 400 * KIB else 20
    if size <= 40 * KIB:
        return 3000
    if size <= 400 * KIB:
        return 1000
    if size <= 4_000_000:
        return 300
    return 60


def throughput_messages(size: int) -> int:
    """Messages in one throughput burst: about 400 MB or 4000 messages."""
    count = min(4000, max(20, 400_000_000 // size))
    return max(10, count // 10) if quick() else count


def pin(role: str) -> None:
    """Pins this process to its core: the sender to the first CPU of
    FERRY_BENCH_CPUS (default "0,1"), the receiver to the second, so that every
    system is measured with the same placement. Which cores the scheduler
    would pick matters a lot on a VM: a futex wake-up of a process on the
    same core is a context switch, on the other core it wakes that vCPU.
    FERRY_BENCH_CPUS="" leaves placement to the scheduler."""
    cpus = cpu_pair()
    if cpus:
        os.sched_setaffinity(0, {cpus[0] if role == "sender" else cpus[1]})


def cpu_pair() -> tuple[int, int] | None:
    text = os.environ.get("FERRY_BENCH_CPUS", "0,1" if (os.cpu_count() or 1) >= 2 else "")
    if not text.strip():
        return None
    sender, receiver = (int(cpu) for cpu in text.split(","))
    return sender, receiver


def placement() -> str:
    cpus = cpu_pair()
    if cpus is None:
        return "unpinned"
    return "same core" if cpus[0] == cpus[1] else "two cores"


def now_ns() -> int:
    # time.monotonic_ns() is clock_gettime(CLOCK_MONOTONIC) on Linux, the clock
    # the C++ benchmark and floor.c read too.
    return time.monotonic_ns()


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in [0, 1])."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def record(system: str, language: str, mode: str, size: int, latencies_ns: list[int],
           throughput_count: int = 0, throughput_seconds: float = 0.0, note: str = "") -> dict:
    values = sorted(latencies_ns)
    result = {
        "system": system,
        "language": language,
        "mode": mode,
        "placement": placement(),
        "size": size,
        "samples": len(values),
        "p50_us": percentile(values, 0.50) / 1000.0,
        "p99_us": percentile(values, 0.99) / 1000.0,
        "p999_us": percentile(values, 0.999) / 1000.0,
    }
    if throughput_count and throughput_seconds > 0:
        result["msgs_per_s"] = throughput_count / throughput_seconds
        result["gb_per_s"] = throughput_count * size / throughput_seconds / 1e9
    if note:
        result["note"] = note
    return result


def write_results(path: str, results: list[dict]) -> None:
    with open(path, "w") as handle:
        json.dump(results, handle, indent=1)
        handle.write("\n")


def load_key_values(path: str | None) -> dict:
    """The KEY=VALUE lines of a file (run.sh's floor and machine notes), values
    as floats where they parse; empty when `path` is unset or missing."""
    values = {}
    if path and os.path.exists(path):
        with open(path) as handle:
            for line in handle:
                key, _, value = line.strip().partition("=")
                if not value:
                    continue
                try:
                    values[key] = float(value)
                except ValueError:
                    values[key] = value
    return values


def run_session(command: list[str], cwd: str, env: dict, log_path: str,
                timeout: float) -> int | None:
    """Runs `command` in a session of its own with its output in `log_path`.
    Returns its exit code, or None when it overran `timeout` seconds; then the
    whole session (a daemon and its nodes) is killed: SIGTERM, and SIGKILL if
    that does not end it within 5 s."""
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
    return code


def report_failed_run(what: str, command: str, code: int | None, log_path: str) -> None:
    """Says on stderr why `command` (run by run_session) failed, with the end
    of its log."""
    reason = "timed out" if code is None else f"exited with {code}"
    with open(log_path) as log:
        tail = log.read()[-3000:]
    print(f"{what}: `{command}` {reason}; last lines of {log_path}:\n{tail}", file=sys.stderr)


def load_records(paths: list[str], key) -> dict:
    """The records of the JSON result files in `paths` by `key(record)`;
    files that are unset or missing are skipped, and a later record with the
    same key replaces an earlier one."""
    records = {}
    for path in paths:
        if not path or not os.path.exists(path):
            continue
        with open(path) as handle:
            for record in json.load(handle):
                records[key(record)] = record
    return records


# ---- Two-process benchmarks (a sender that starts its receiver) ----------------


def pair_arguments(name: str, description: str, default_modes: str,
                   default_run_id: str) -> tuple[argparse.Namespace, list[str], list[int]]:
    """The command line of a benchmark whose sender starts its receiver (this
    same file with --role receiver): the arguments, the modes to run and the
    sizes. Busy-polling is dropped when sender and receiver share a core."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--role", choices=["sender", "receiver"], default="sender")
    parser.add_argument("--modes", default=default_modes)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--run-id", default=default_run_id)
    parser.add_argument("--json", help="where the sender writes its results")
    parser.add_argument("--timeout", type=float, default=150, help="seconds for the whole run")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if placement() == "same core" and "busy" in modes:
        # Two processes spinning on one core only hand over at scheduler ticks.
        print(f"{name}: busy-poll skipped, sender and receiver share a core", file=sys.stderr)
        modes.remove("busy")
    return args, modes, [int(size) for size in args.sizes.split(",")]


def run_with_receiver(name: str, script: str, args: argparse.Namespace, modes: list[str],
                      run_sender, receiver_timeout: float) -> int:
    """The sender's side of a pair_arguments benchmark: starts the receiver
    (`script` with --role receiver), runs `run_sender()` (which returns the
    records), waits up to `receiver_timeout` seconds for the receiver to end,
    and writes the records to --json. The exit code for main()."""

    def give_up(signum, _frame):
        raise TimeoutError(f"{name}: stopped by signal {signum}")

    # SIGALRM bounds the whole run; SIGTERM (e.g. from `timeout`) also goes
    # through the `finally` below, so the receiver never outlives the sender.
    signal.signal(signal.SIGALRM, give_up)
    signal.signal(signal.SIGTERM, give_up)
    signal.alarm(int(args.timeout))
    receiver = subprocess.Popen(
        [sys.executable, os.path.abspath(script), "--role", "receiver", "--modes",
         ",".join(modes), "--sizes", args.sizes, "--run-id", args.run_id])
    try:
        results = run_sender()
        receiver.wait(timeout=receiver_timeout)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    if receiver.returncode != 0:
        print(f"{name}: receiver exited with {receiver.returncode}", file=sys.stderr)
        return 1
    if args.json:
        write_results(args.json, results)
    return 0


# ---- Dataflow benchmarks (a driver that starts a graph of this file's nodes) ---


def driver_parser(description: str, workdir: str,
                  timeout_help: str | None = None) -> argparse.ArgumentParser:
    """The options every dataflow driver takes; the same file is also the
    graph's sender and receiver node (--role). Callers add their own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--role", choices=["driver", "sender", "receiver"], default="driver")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--json", help="where the results go")
    parser.add_argument("--workdir", default=workdir)
    parser.add_argument("--timeout", type=float, default=150, help=timeout_help)
    return parser


def run_node_role(role: str, run_sender, run_receiver) -> bool:
    """Runs the sender or the receiver node when `role` names one; False for
    the driver."""
    if role == "sender":
        run_sender()
        return True
    if role == "receiver":
        run_receiver()
        return True
    return False


def remove_stale(path: str) -> None:
    """Removes what an earlier run left at `path`, so that only this run's
    results are read back."""
    if os.path.exists(path):
        os.remove(path)


def find_dora(what: str) -> str | None:
    """The `dora` command, next to this Python first; None (said on stderr
    as `what`) when it is not installed."""
    dora = shutil.which("dora", path=os.path.dirname(sys.executable)) or shutil.which("dora")
    if not dora:
        print(f"{what}: the `dora` command (PyPI dora-rs-cli) is not installed", file=sys.stderr)
    return dora


def run_graph(what: str, label: str, command: list[str], cwd: str, env: dict, log_path: str,
              timeout: float, out: str) -> list[dict] | None:
    """Runs a dataflow (`command`, called `label` in messages) with
    run_session and reads back the records its sender wrote to `out`; None
    (said on stderr with the end of the log) when it failed."""
    code = run_session(command, cwd=cwd, env=env, log_path=log_path, timeout=timeout)
    if code != 0 or not os.path.exists(out):
        report_failed_run(what, label, code, log_path)
        return None
    with open(out) as handle:
        return json.load(handle)
