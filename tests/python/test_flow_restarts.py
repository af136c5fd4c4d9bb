"""Restarted consumers under real `ferry run` processes.

A producer sends a fixed number of messages on a fast timer and finishes; a
consumer with `restart: on-failure` crashes at random points (an exception,
or os._exit without statistics). Whether the restart comes before or after
the producer finished, every run must end, the restarted consumer must see
INPUT_CLOSED for an input whose producer is gone, the exit code must say
whether the consumer failed in the end, and every edge of the summary must
add up: sent = received + drops + lost."""

import json
import os
import random
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FERRY = os.environ.get("FERRY_BIN", os.path.join(REPO, "build", "release", "bin", "ferry"))
# A run takes a second or two; a hang shows as a timeout far below this.
RUN_TIMEOUT = 45
RUNS = int(os.environ.get("FERRY_RESTART_RUNS", "60"))
SEED = int(os.environ.get("FERRY_RESTART_SEED", "13"))
MESSAGES = 20
MAX_RESTARTS = 3

pytestmark = pytest.mark.skipif(
    not os.access(FERRY, os.X_OK), reason=f"{FERRY} is not built (make build, or set FERRY_BIN)"
)

PRODUCER = """\
    import pyarrow as pa
    from ferry.flow import Node

    sent = 0
    with Node() as node:
        for event in node:
            if event["type"] == "INPUT" and event["id"] == "tick":
                sent += 1
                node.send_output("reading", pa.array([sent], pa.int64()))
                if sent == {messages}:
                    break
    print("producer sent", sent)
    """

# CRASHES[r] is where instance r crashes: None (never), or (message number
# within the instance, 0 for right after start-up, "raise" | "exit").
CONSUMER = """\
    import os
    from ferry.flow import Node

    CRASHES = {crashes}
    with Node() as node:
        run = node.config["restart_count"]
        crash = CRASHES[run] if run < len(CRASHES) else None
        seen = 0
        closed = []
        if crash is not None and crash[0] == 0:
            if crash[1] == "exit":
                os._exit(3)
            raise RuntimeError("boom at start-up")
        for event in node:
            if event["type"] == "INPUT" and event["id"] == "reading":
                seen += 1
                if crash is not None and seen == crash[0]:
                    if crash[1] == "exit":
                        os._exit(3)
                    raise RuntimeError(f"boom on reading {{seen}}")
            elif event["type"] == "INPUT_CLOSED":
                closed.append(event["id"])
    print(f"instance {{run}} saw {{seen}} closed {{','.join(closed)}}")
    """

DATAFLOW = """\
    nodes:
      - id: producer
        path: producer.py
        inputs:
          tick: ferry/timer/millis/{tick_ms}
        outputs: [reading]
      - id: consumer
        path: consumer.py
        inputs:
          reading: producer/reading
        restart: on-failure
        max_restarts: {max_restarts}
    """


def environment():
    env = dict(os.environ)
    env["FERRY_PYTHON"] = sys.executable
    env["FERRY_PYTHONPATH"] = os.path.join(REPO, "python")
    return env


def plan(rng):
    """A random scenario: the producer's tick and each instance's crash."""
    tick_ms = rng.choice([1, 2, 5, 25])  # fast: restarts come after the producer ended
    kind = rng.random()
    crashes = []
    for run in range(MAX_RESTARTS + 1):
        how = rng.choice(["raise", "exit"])
        if kind < 0.1:
            crashes.append(None)  # no crash at all
        elif kind < 0.3:
            # Doomed: every instance crashes (the later ones at start-up, since
            # the producer may have ended): the run must fail, not hang.
            crashes.append((rng.randint(1, MESSAGES // 2) if run == 0 else 0, how))
        elif rng.random() < 0.25:
            crashes.append(None)
        else:
            crashes.append((rng.choice([0] + list(range(1, MESSAGES // 2 + 1))), how))
    return tick_ms, crashes


def run_once(directory, tick_ms, crashes):
    os.makedirs(directory)
    for name, text in (("producer.py", PRODUCER.format(messages=MESSAGES)),
                       ("consumer.py", CONSUMER.format(crashes=repr(crashes))),
                       ("dataflow.yml", DATAFLOW.format(tick_ms=tick_ms,
                                                        max_restarts=MAX_RESTARTS))):
        with open(os.path.join(directory, name), "w") as file:
            file.write(textwrap.dedent(text))
    try:
        result = subprocess.run(
            [FERRY, "run", "dataflow.yml", "--log-dir", "logs", "--summary-json", "summary.json"],
            cwd=directory, env=environment(), capture_output=True, text=True,
            timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired as expired:
        return None, None, expired
    path = os.path.join(directory, "summary.json")
    summary = json.load(open(path)) if os.path.exists(path) else None
    return result, summary, None


def check(index, tick_ms, crashes, result, summary, timeout):
    where = f"run {index} (seed {SEED}, tick {tick_ms} ms, crashes {crashes})"
    assert timeout is None, f"{where}: ferry run did not end within {RUN_TIMEOUT} s"
    output = result.stdout + result.stderr
    assert summary is not None, f"{where}: no summary\n{output}"
    assert "Timed out" not in output, f"{where}\n{output}"
    nodes = {entry["id"]: entry for entry in summary["nodes"]}
    producer, consumer = nodes["producer"], nodes["consumer"]
    assert producer["failed"] is False and producer["exit_code"] == 0, f"{where}\n{output}"
    # The exit code says whether the consumer failed in the end.
    assert result.returncode == (1 if consumer["failed"] else 0), f"{where}\n{output}"
    assert summary["exit_code"] == result.returncode
    if consumer["failed"]:
        assert consumer["restarts"] == MAX_RESTARTS, f"{where}\n{output}"
        assert "(failed)" in result.stdout
        assert "no restarts left" in result.stderr
    else:
        assert consumer["exit_code"] == 0, f"{where}\n{output}"
        # The last instance finished normally: its input closed after the
        # producer ended, whether it was connected to it or started after it.
        last = consumer["restarts"]
        assert f"[consumer] instance {last} saw" in result.stdout, f"{where}\n{output}"
        line = [text for text in result.stdout.splitlines()
                if f"[consumer] instance {last} saw" in text][0]
        assert line.endswith("closed reading"), f"{where}\n{output}"
    if all(crash is None for crash in crashes):
        assert consumer["restarts"] == 0
    # Every message sent is received, dropped or lost: the edge adds up.
    (edge,) = summary["edges"]
    assert edge["edge"] == "producer/reading -> consumer/reading"
    assert edge["sent"] == MESSAGES, f"{where}: {edge}"
    assert edge["received"] is not None and edge["lost"] is not None, f"{where}: {edge}"
    assert edge["sent"] == edge["received"] + edge["drops"] + edge["lost"], f"{where}: {edge}"
    assert edge["drops"] == 0, f"{where}: {edge}"  # a blocking queue never drops
    if consumer["stats_reports"] > 0:
        assert edge["messages"] == edge["received"]
    else:  # no instance reported: nothing is known received, all is lost
        assert edge["received"] == 0 and edge["lost"] == MESSAGES, f"{where}: {edge}"
    if consumer["restarts"] == 0 and not consumer["failed"]:
        assert edge["received"] == MESSAGES and edge["lost"] == 0, f"{where}: {edge}"
    # Instances that crashed through os._exit reported nothing: what they took
    # counts as lost. The first instance crashed at message k by raising: it
    # reported k at least.
    first = crashes[0]
    if first is not None and first[1] == "raise" and consumer["restarts"] > 0:
        assert edge["received"] >= first[0], f"{where}: {edge}"
    header = [text for text in result.stdout.splitlines() if text.strip().startswith("edge")]
    assert header and header[0].split()[1:] == ["sent", "received", "bytes", "copied", "drops",
                                                "lost"], result.stdout


def test_restarted_consumers_always_end_and_edges_add_up(tmp_path):
    rng = random.Random(SEED)
    scenarios = [plan(rng) for _ in range(RUNS)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(run_once, str(tmp_path / f"run{index}"), tick_ms, crashes)
                   for index, (tick_ms, crashes) in enumerate(scenarios)]
        outcomes = [future.result() for future in futures]
    for index, ((tick_ms, crashes), outcome) in enumerate(zip(scenarios, outcomes)):
        check(index, tick_ms, crashes, *outcome)
    # The scenarios covered both ends: consumers that failed for good and ones
    # that recovered after a restart.
    summaries = [outcome[1] for outcome in outcomes]
    restarted = [s for s in summaries if s["nodes"][1]["restarts"] > 0]
    assert any(s["exit_code"] == 1 for s in summaries)
    assert any(s["exit_code"] == 0 for s in restarted)
