"""ferry.flow.Node from Python: real node processes (this file run as a
script plays producer and consumer) exchanging pyarrow and polars data, zero
copy shown by shared-memory addresses and telemetry, typed metadata, timers
and errors."""

import json
import os
import subprocess
import sys
import uuid

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import ferry
from ferry.flow import Node
from flow_peer import region_of


def channel(what):
    return "pytest-node/" + uuid.uuid4().hex[:12] + "/" + what


def config(node, inputs=(), outputs=()):
    """A standalone node config (no daemon): inputs are (id, channel) or
    (id, timer_ns) pairs, outputs (id, channel) pairs."""
    return json.dumps({
        "dataflow": "pytest",
        "node": node,
        "inputs": [{"id": i, "timer_ns": c} if isinstance(c, int) else {"id": i, "channel": c}
                   for i, c in inputs],
        "outputs": [{"id": o, "channel": c} for o, c in outputs],
    })


def copied_bytes():
    return sum(v for k, v in ferry.telemetry().items() if k.startswith("bytes_copied"))


# ---- The node programs (run as `python test_node.py producer|consumer CONFIG`).

def producer(config_json):
    node = Node(config_json=config_json, startup_timeout=20)
    node.wait_for_subscribers("out", 1, timeout=20)
    report = {"loans": []}
    ferry.reset_telemetry()
    # 1. A loaned array: numpy fills shared memory in place, nothing is copied.
    loan = node.loan("out", 1000, "int64")
    np.asarray(loan)[:] = np.arange(1000) * 3
    report["loans"].append(region_of(loan.address))
    node.send_output("out", loan, metadata={"kind": "loan", "frame": 1, "gain": 0.5, "ok": True})
    # 2. Loaned columns as one batch.
    a, b = node.loan("out", 4, "float64"), node.loan("out", 4, "uint8")
    np.asarray(a)[:] = [0.5, 1.5, 2.5, 3.5]
    np.asarray(b)[:] = [1, 2, 3, 4]
    report["loans"].append(region_of(a.address))
    node.send_loans("out", {"a": a, "b": b}, metadata={"kind": "loans"})
    report["copied_after_loans"] = copied_bytes()
    # 3. Foreign data: copied once into shared memory, counted.
    node.send_output("out", pa.record_batch({"x": pa.array(range(100), pa.int64())}),
                     metadata={"kind": "pyarrow batch"})
    node.send_output("out", pa.array([1.0, None, 3.0]), metadata={"kind": "pyarrow array"})
    node.send_output("out", pl.DataFrame({"name": ["ab", "c"], "score": [1.5, 2.5]}),
                     metadata={"kind": "polars frame"})
    node.send_output("out", pl.Series("ids", [7, 8, 9], dtype=pl.Int32),
                     metadata={"kind": "polars series"})
    report["stats"] = node.stats()["outputs"]["out"]
    report["copied"] = ferry.telemetry()["bytes_copied_host"]
    print(json.dumps(report), flush=True)
    node.close()


def consumer(config_json):
    node = Node(config_json=config_json, startup_timeout=20)
    ferry.reset_telemetry()
    for event in node:
        line = {"type": event["type"], "id": event["id"]}
        if event["type"] == "INPUT":
            value = event["value"]
            line["class"] = type(value).__name__
            line["metadata"] = event["metadata"]
            line["sequence"] = event["sequence"]
            if isinstance(value, pa.RecordBatch):
                line["columns"] = value.schema.names
                line["values"] = {n: value.column(n).to_pylist()[:8] for n in value.schema.names}
                first = value.column(0)
            else:
                line["values"] = value.to_pylist()[:8]
                first = value
            line["region"] = region_of(first.buffers()[1].address)
            if isinstance(value, pa.RecordBatch) and line["metadata"].get("kind") == "polars frame":
                line["polars"] = pl.from_arrow(value).to_dicts()
        print(json.dumps(line), flush=True)
    print(json.dumps({"end": True, "copied": copied_bytes(),
                      "stats": node.stats()["inputs"]}), flush=True)


def run(role, config_json):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, __file__, role, config_json], stdout=subprocess.PIPE,
                            text=True, env=env)


def finish(process):
    try:
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# ---- Tests -----------------------------------------------------------------------

def test_nodes_exchange_pyarrow_and_polars_without_copying():
    out = channel("out")
    consumer_process = run("consumer", config("sink", inputs=[("in", out)]))
    producer_process = run("producer", config("source", outputs=[("out", out)]))
    (sent,) = finish(producer_process)
    *events, end = finish(consumer_process)

    inputs = [e for e in events if e["type"] == "INPUT"]
    assert [e["metadata"]["kind"] for e in inputs] == [
        "loan", "loans", "pyarrow batch", "pyarrow array", "polars frame", "polars series"]
    assert [e["sequence"] for e in inputs] == [1, 2, 3, 4, 5, 6]
    assert events[-1] == {"type": "INPUT_CLOSED", "id": "in"}

    loan, loans, batch, array, frame, series = inputs
    # The loaned array arrives as a pyarrow Array over the very memory the
    # producer wrote: the same memfd at the same offset, mapped read-only.
    assert loan["class"] == "Int64Array" and loan["values"] == [i * 3 for i in range(8)]
    assert loan["metadata"] == {"kind": "loan", "frame": 1, "gain": 0.5, "ok": True}
    for got, lent in zip((loan, loans), sent["loans"]):
        assert got["region"]["path"] == lent["path"] and got["region"]["path"].startswith("/memfd:")
        assert got["region"]["offset"] == lent["offset"]
        assert got["region"]["perms"] == "r--s"
    assert loans["class"] == "RecordBatch" and loans["columns"] == ["a", "b"]
    assert loans["values"] == {"a": [0.5, 1.5, 2.5, 3.5], "b": [1, 2, 3, 4]}
    assert sent["copied_after_loans"] == 0

    # Foreign data was copied once by the producer, and only there.
    assert batch["class"] == "RecordBatch" and batch["values"]["x"] == list(range(8))
    assert array["class"] == "DoubleArray" and array["values"] == [1.0, None, 3.0]
    assert frame["columns"] == ["name", "score"]
    assert frame["polars"] == [{"name": "ab", "score": 1.5}, {"name": "c", "score": 2.5}]
    assert series["class"] == "Int32Array" and series["values"] == [7, 8, 9]
    for got in (batch, array, frame, series):
        assert got["region"]["path"].startswith("/memfd:ferry:")
    stats = sent["stats"]
    assert stats["loaned_sends"] == 2 and stats["copied_sends"] == 4
    assert stats["bytes_copied"] == sent["copied"] > 800
    assert end["copied"] == 0  # the consumer never copies
    assert end["stats"]["in"]["received"] == 6


def test_a_node_talks_to_itself_in_one_process():
    loop = channel("loop")
    with Node(config_json=config("echo", inputs=[("in", loop)], outputs=[("out", loop)])) as node:
        assert node.id == "echo"
        assert node.config["outputs"] == [{"id": "out", "channel": loop}]
        frame = pl.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
        node.send_output("out", frame, metadata={"n": -5, "big": 2**62, "text": "1"})
        event = node.next(timeout=10)
        assert event["type"] == "INPUT" and event["id"] == "in"
        assert isinstance(event["value"], pa.RecordBatch)
        assert pl.from_arrow(event["value"]).equals(frame)
        assert event["metadata"] == {"n": -5, "big": 2**62, "text": "1"}
        address = event["value"].column(0).buffers()[1].address
        assert region_of(address)["path"].startswith("/memfd:ferry:")
        # A struct array is an array, not a batch.
        points = pa.array([{"x": 1, "y": 2}])
        node.send_output("out", points)
        event = node.next(timeout=10)
        assert isinstance(event["value"], pa.StructArray) and event["value"].equals(points)
        node.close_output("out")
        assert node.next(timeout=10) == {"type": "INPUT_CLOSED", "id": "in"}
        assert node.next(timeout=10) is None  # every input closed, no timer: the end
        assert list(node) == []


def test_values_keep_their_types_when_types_change_between_events():
    # pyarrow types are cached per stream; every change of type or schema
    # must still arrive as what was sent, in any order, repeatedly.
    loop = channel("types")
    values = [
        pa.array([1, 2, 3], pa.int64()),
        pa.array(["a", None, "c"]),
        pa.array([1, 2, 3], pa.int64()),
        pa.array([1.5, 2.5], pa.float32()),
        pa.record_batch({"a": [1, 2], "b": ["x", "y"]}),
        pa.record_batch({"a": [1, 2], "b": [0.5, 1.5]}),
        pa.record_batch({"a": [3, 4], "b": ["z", "w"]}),
        pa.array(["a", None, "c"]),
    ]
    with Node(config_json=config("types", inputs=[("in", loop)], outputs=[("out", loop)])) as node:
        for round_ in range(3):
            for sent in values:
                node.send_output("out", sent)
                received = node.next(timeout=10)["value"]
                assert type(received) is type(sent), (round_, sent.type if hasattr(sent, "type") else sent.schema)
                assert received.equals(sent)


def test_timers_tick():
    with Node(config_json=config("clock", inputs=[("tick", 5_000_000)])) as node:
        events = [node.next(timeout=10) for _ in range(3)]
    assert [e["id"] for e in events] == ["tick"] * 3
    assert all(isinstance(e["value"], pa.NullArray) and len(e["value"]) == 0 for e in events)
    assert events[0]["sequence"] < events[1]["sequence"] < events[2]["sequence"]


def test_bad_input_is_a_clear_error():
    os.environ.pop("FERRY_NODE_CONFIG", None)
    with pytest.raises(ValueError, match="ferry run"):
        Node()
    with pytest.raises(ValueError, match="not valid JSON"):
        Node(config_json="{bad")
    with pytest.raises(ValueError, match="inputs\\[0\\].queue_size"):
        Node(config_json=json.dumps({"node": "n", "inputs": [
            {"id": "i", "channel": "c", "queue_size": 0}]}))
    with pytest.raises(ValueError, match="not 'other'"):
        Node("other", config_json=config("mine"))
    hourly = 3_600_000_000_000
    node = Node(config_json=config("n", inputs=[("t", hourly)], outputs=[("out", channel("o"))]))
    with pytest.raises(TimeoutError):
        node.next(timeout=0.01)
    with pytest.raises(ValueError, match="has no output 'nope'"):
        node.send_output("nope", pa.array([1]))
    with pytest.raises(ValueError, match="has no open output 'nope'"):
        node.loan("nope", 4)
    with pytest.raises(ValueError, match="loans hold fixed-width"):
        node.loan("out", 4, "utf8")
    with pytest.raises(TypeError, match="must be str, int, float, bool, list or dict, not set"):
        node.send_output("out", pa.array([1]), metadata={"k": {1}})
    with pytest.raises(ValueError, match="reserved"):
        node.send_output("out", pa.array([1]), metadata={"ferry.array": "0"})
    with pytest.raises(TypeError):
        node.send_output("out", object())
    with pytest.raises(ValueError, match="same length"):
        node.send_loans("out", {"a": node.loan("out", 2), "b": node.loan("out", 3)})
    assert node.stats()["outputs"]["out"]["sent"] == 0
    node.close()
    with pytest.raises(ValueError, match="closed"):
        node.next()
    assert repr(node) == "ferry.flow.Node(closed)"


if __name__ == "__main__":
    {"producer": producer, "consumer": consumer}[sys.argv[1]](sys.argv[2])
