"""Typed metadata: ints, floats (NaN and infinities too), bools,
strings, lists and nested dicts arrive exactly as sent, through
Publisher/Subscriber and through Node, between Python processes and through
a C++ node and a C node under `ferry run`; past the documented limits (64-bit
integers, 16 levels of nesting, 1 MiB of text) and for other bad input, a
clear error and no crash."""

import json
import math
import os
import subprocess
import sys
import textwrap
import uuid

import pyarrow as pa
import pytest

from ferry.flow import Node, Publisher

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PEER = os.path.join(HERE, "flow_peer.py")
FERRY = os.environ.get("FERRY_BIN", os.path.join(REPO, "build", "release", "bin", "ferry"))
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(FERRY)))
CPP_NODE = os.path.join(BUILD, "src", "flow", "daemon", "ferry_test_node")
C_NODE = os.path.join(BUILD, "tests", "ferry_node_c_test")


def deep(levels):
    value = []
    for _ in range(levels - 1):
        value = [value]
    return value


VALUES = {
    "i": 42, "neg": -7, "max": 2**63 - 1, "min": -2**63, "zero": 0,
    "f": 0.25, "whole": 2.0, "tiny": 5e-324, "third": 1 / 3, "negzero": -0.0,
    "nan": math.nan, "inf": math.inf, "ninf": -math.inf,
    "t": True, "no": False,
    "s": "hello", "empty": "", "uni": "gr\u00fc\u00df \U0001F600 \"q\" \\ \n\t\x00 end",
    "l": [1, 2], "mixed": [1, 2.5, "x", True, [], {}, [math.nan, -math.inf]],
    "nested": {"a": {"b": [1, {"c": [[2**63 - 1]]}]}, "k": ["zero", "\u00e9"], "": 0.5},
    "emptyl": [], "emptyd": {}, "deep": deep(16),
}


def same(a, b):
    """Equal, with the same types all the way down (1 is not 1.0 nor True), NaN
    equal to NaN, and -0.0 apart from 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def channel(what):
    return "pytest-meta/" + uuid.uuid4().hex[:12] + "/" + what


def loop_node():
    name = channel("loop")
    return Node(config_json=json.dumps({
        "dataflow": "pytest", "node": "meta",
        "inputs": [{"id": "in", "channel": name}], "outputs": [{"id": "out", "channel": name}]}))


def test_node_metadata_round_trips_exactly():
    with loop_node() as node:
        node.send_output("out", pa.array([1]), metadata=VALUES)
        event = node.next(timeout=10)
        assert event["type"] == "INPUT"
        assert same(event["metadata"], VALUES), event["metadata"]
        # A tuple travels as a list; ordering of keys is kept.
        node.send_output("out", pa.array([1]), metadata={"z": (1, (2.0, "x")), "a": 1})
        event = node.next(timeout=10)
        assert same(event["metadata"], {"z": [1, [2.0, "x"]], "a": 1})
        assert list(event["metadata"]) == ["z", "a"]


def test_bad_metadata_is_refused_clearly():
    cyclic = []
    cyclic.append(cyclic)
    cases = [
        ({"big": 2**63}, ValueError, "'big' exceeds 64 bits"),
        ({"small": -2**63 - 1}, ValueError, "exceeds 64 bits"),
        ({"l": [1, 2**64]}, ValueError, r"'l\[1\]' exceeds 64 bits"),
        ({1: "x"}, TypeError, "keys must be str, not int"),
        ({"d": {"ok": {2.5: 1}}}, TypeError, r"keys must be str, not float \(in 'd.ok'\)"),
        ({"deep": deep(17)}, ValueError, "nests deeper than 16 levels"),
        ({"deep": {"x": deep(16)}}, ValueError, "nests deeper than 16 levels"),
        ({"cyclic": cyclic}, ValueError, "nests deeper than 16 levels"),
        ({"n": None}, TypeError, "must be str, int, float, bool, list or dict, not NoneType"),
        ({"l": [b"raw"]}, TypeError, r"'l\[0\]' must be .* not bytes"),
        ({"s": "\ud800"}, ValueError, "not valid Unicode"),
        ({"ferry.mine": 1}, ValueError, "reserved"),
        ({"": 1}, ValueError, "must not be empty"),
        ({"huge": "x" * (1 << 20)}, ValueError, "larger than 1048576 bytes"),
    ]
    with loop_node() as node:
        for metadata, error, message in cases:
            with pytest.raises(error, match=message):
                node.send_output("out", pa.array([1]), metadata=metadata)
        with pytest.raises(TypeError, match="must be a dict"):
            node.send_output("out", pa.array([1]), metadata=[("a", 1)])
        # Nothing was sent, and the node still works.
        assert node.stats()["outputs"]["out"]["sent"] == 0
        node.send_output("out", pa.array([1]), metadata={"ok": [1]})
        assert node.next(timeout=10)["metadata"] == {"ok": [1]}


def start_peer(publisher, name, count):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    peer = subprocess.Popen([sys.executable, PEER, name, str(count), "10"],
                            stdout=subprocess.PIPE, text=True, env=env)
    publisher.wait_for_subscribers(1, timeout=20)
    assert json.loads(peer.stdout.readline()) == {"connected": True}
    return peer


def test_publisher_and_subscriber_keep_types_across_processes():
    name = channel("pubsub")
    with Publisher(name) as publisher:
        peer = start_peer(publisher, name, 3)
        publisher.send(pa.record_batch({"x": pa.array([1, 2])}), metadata={"t": 0.25})
        publisher.send(pa.record_batch({"x": pa.array([1, 2])}), metadata=VALUES)
        publisher.send(pa.record_batch({"x": pa.array([1])}), metadata={"raw": b"bytes\x01", "n": 1})
        out, _ = peer.communicate(timeout=30)
    assert peer.returncode == 0
    first, second, third = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert same(first["metadata"], {"t": 0.25})  # a float, not '0.25'
    assert same(second["metadata"], VALUES), second["metadata"]
    assert same(third["metadata"], {"raw": "bytes\x01", "n": 1})  # bytes arrive as str
    with Publisher(channel("bad")) as publisher:
        with pytest.raises(ValueError, match="exceeds 64 bits"):
            publisher.send(pa.record_batch({"x": pa.array([1])}), metadata={"big": 2**70})
        with pytest.raises(TypeError, match="keys must be str"):
            publisher.send(pa.record_batch({"x": pa.array([1])}), metadata={("a",): 1})


SOURCE = """\
    import json, math
    import pyarrow as pa
    from ferry.flow import Node

    values = json.load(open("values.json"))
    values.update(nan=math.nan, inf=math.inf, ninf=-math.inf)
    with Node() as node:
        node.send_output("values", pa.array([1, 2, 3], pa.int64()), metadata=values)
    """

SINK = """\
    import json
    from ferry.flow import Node

    with Node() as node:
        for event in node:
            if event["type"] == "INPUT":
                with open("got.json", "w") as out:
                    json.dump({"metadata": event["metadata"],
                               "value": event["value"].to_pylist()}, out)
    """


@pytest.mark.skipif(not all(os.access(p, os.X_OK) for p in (FERRY, CPP_NODE, C_NODE)),
                    reason="ferry, ferry_test_node or ferry_node_c_test is not built")
def test_python_cpp_c_python_keep_types(tmp_path):
    finite = {k: v for k, v in VALUES.items() if k not in ("nan", "inf", "ninf")}
    (tmp_path / "values.json").write_text(json.dumps(finite))
    (tmp_path / "source.py").write_text(textwrap.dedent(SOURCE))
    (tmp_path / "sink.py").write_text(textwrap.dedent(SINK))
    (tmp_path / "dataflow.yml").write_text(textwrap.dedent(f"""\
        nodes:
          - id: source
            path: source.py
            outputs: [values]
          - id: cpp
            path: {CPP_NODE}
            args: "--forward --echo-metadata"
            inputs: {{in: source/values}}
            outputs: [out]
          - id: c
            path: {C_NODE}
            args: "--echo-node"
            inputs: {{in: cpp/out}}
            outputs: [out]
          - id: sink
            path: sink.py
            inputs: {{in: c/out}}
        """))
    env = dict(os.environ)
    env["FERRY_PYTHON"] = sys.executable
    env["FERRY_PYTHONPATH"] = os.path.join(REPO, "python")
    result = subprocess.run([FERRY, "run", "dataflow.yml", "--log-dir", "logs"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    got = json.loads((tmp_path / "got.json").read_text())
    assert got["value"] == [1, 2, 3]
    metadata = got["metadata"]
    # What Python sent, through C++ and C unchanged.
    sent = dict(VALUES)
    for key in sent:
        assert same(metadata[key], sent[key]), (key, metadata[key])
    # The C++ node read every value with its type ...
    types = metadata["cpp_types"]
    assert types["i"] == "int" and types["f"] == "float" and types["whole"] == "float"
    assert types["t"] == "bool" and types["s"] == "str" and types["nan"] == "float"
    assert types["l"] == "list" and types["nested"] == "map" and types["emptyd"] == "map"
    (line,) = [text for text in result.stdout.splitlines() if text.startswith("[cpp] METADATA ")]
    assert '"max":9223372036854775807' in line and '"whole":2.0' in line and '"nan":NaN' in line
    # ... and sent values made in C++, which Python reads exactly.
    assert same(metadata["cpp_values"], {
        "max": 2**63 - 1, "min": -2**63, "tenth": 0.1, "whole": 2.0, "inf": -math.inf,
        "yes": True, "text": "gr\u00fc\u00df \"quoted\"\n", "nested": [1, [2.5], {}]})
    # The C node read values with the accessors, and added its own.
    (c_line,) = [text for text in result.stdout.splitlines() if text.startswith("[c] C read ")]
    assert c_line == f"[c] C read max={2**63 - 1} f=0.25 word=\u00e9 list=2 types=236", c_line
    assert same(metadata["c_values"], [-1, 0.5, math.nan, {"deep": [[[]]]}])
    assert same(metadata["c_text"], "\u00e9t\u00e9")
