"""`ferry run` end to end: the examples, stopping by name, Python node
failures, restarts, and a runtime node with a Python operator, each through
the real `ferry` binary (build/release/bin/ferry, or $FERRY_BIN)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FERRY = os.environ.get("FERRY_BIN", os.path.join(REPO, "build", "release", "bin", "ferry"))
BIN_DIR = os.path.dirname(os.path.abspath(FERRY))
EXAMPLES = os.path.join(REPO, "examples")
RUN_TIMEOUT = 120

pytestmark = pytest.mark.skipif(
    not os.access(FERRY, os.X_OK), reason=f"{FERRY} is not built (make build, or set FERRY_BIN)"
)


def environment():
    env = dict(os.environ)
    env["FERRY_PYTHON"] = sys.executable
    env["FERRY_PYTHONPATH"] = os.path.join(REPO, "python")
    return env


def ferry(*args, cwd, timeout=RUN_TIMEOUT):
    return subprocess.run([FERRY, *args], cwd=cwd, env=environment(), capture_output=True,
                          text=True, timeout=timeout)


def run_dataflow(directory, *extra):
    """`ferry run dataflow.yml` in `directory`; the result and its JSON summary."""
    result = ferry("run", "dataflow.yml", "--log-dir", "logs", "--summary-json", "summary.json",
                   *extra, cwd=directory)
    summary_path = os.path.join(directory, "summary.json")
    summary = json.load(open(summary_path)) if os.path.exists(summary_path) else None
    return result, summary


def copy_example(name, tmp_path):
    """The example in a temporary directory, its C++ nodes taken from the bin/
    directory of the ferry binary under test."""
    target = tmp_path / name
    shutil.copytree(os.path.join(EXAMPLES, name), target)
    descriptor = target / "dataflow.yml"
    text = descriptor.read_text().replace("../../build/release/bin/", BIN_DIR + "/")
    descriptor.write_text(text)
    return target


def edge(summary, label):
    matches = [entry for entry in summary["edges"] if entry["edge"] == label]
    assert matches, f"no edge {label} in {summary['edges']}"
    return matches[0]


def node(summary, node_id):
    matches = [entry for entry in summary["nodes"] if entry["id"] == node_id]
    assert matches, f"no node {node_id} in {summary['nodes']}"
    return matches[0]


def write(directory, name, text):
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def test_python_cpp_python_example(tmp_path):
    if not os.access(os.path.join(BIN_DIR, "ferry_example_transform"), os.X_OK):
        pytest.skip("the example's C++ node is not built")
    directory = copy_example("python-cpp-python", tmp_path)
    result, summary = run_dataflow(directory)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[source] source: sent 10 batches of 100 rows" in result.stdout
    assert "[transform] transform: added fahrenheit to 1000 rows in 10 batches" in result.stdout
    assert "[sink] sink: 1000 rows in 10 batches, every fahrenheit value correct" in result.stdout

    readings = edge(summary, "source/readings -> transform/readings")
    assert readings["messages"] == 10
    assert readings["bytes"] >= 10 * 100 * 16  # id and celsius: 16 bytes a row
    # The source builds its columns in loaned shared memory: nothing is copied.
    assert readings["bytes_copied"] == 0
    enriched = edge(summary, "transform/enriched -> sink/enriched")
    assert enriched["messages"] == 10
    # The fahrenheit column was built in the output's shared memory: only the
    # two passed-through columns were copied.
    assert 0 < enriched["bytes_copied"] < enriched["bytes"]
    assert all(entry["status"] == "exit 0" for entry in summary["nodes"])
    assert "every fahrenheit value correct" in (directory / "logs" / "sink.log").read_text()


def test_sensor_example(tmp_path):
    directory = copy_example("sensor", tmp_path)
    result, summary = run_dataflow(directory)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[sensor] sensor: sent 50 readings" in result.stdout
    assert "[filter] filter: kept 43 of 50 readings, dropped 7 out of range" in result.stdout
    match = re.search(r"\[sink\] sink: 43 readings \(seq 1\.\.50\), mean temperature (-?[\d.]+), "
                      r"all within \[-40, 85\]", result.stdout)
    assert match, result.stdout
    assert 17.0 < float(match.group(1)) < 25.0
    assert edge(summary, "sensor/reading -> filter/reading")["messages"] == 50
    assert edge(summary, "filter/clean -> sink/clean")["messages"] == 43
    assert summary["stop_reason"] == "all nodes finished"


def test_check_prints_graph_and_exact_errors(tmp_path):
    directory = copy_example("sensor", tmp_path)
    result = ferry("check", "dataflow.yml", cwd=directory)
    assert result.returncode == 0, result.stderr
    assert "dataflow.yml: ok, 3 nodes, 2 edges" in result.stdout
    assert "input  tick <- ferry/timer/millis/10" in result.stdout

    write(directory, "bad.yml", """\
        nodes:
          - id: sink
            path: sink.py
            inputs:
              clean: nowhere/clean
        """)
    result = ferry("check", "bad.yml", cwd=directory)
    assert result.returncode == 1
    assert re.match(r"^\S*bad\.yml:5:\d+: .*nowhere", result.stderr), result.stderr
    run = ferry("run", "bad.yml", cwd=directory)
    assert run.returncode == 1
    assert run.stderr == result.stderr


def test_ferry_stop_by_name(tmp_path):
    write(tmp_path, "ticker.py", """\
        import pyarrow as pa
        from ferry.flow import Node

        with Node() as node:
            for event in node:
                if event["type"] == "INPUT":
                    node.send_output("count", pa.array([event["sequence"]], pa.int64()))
                elif event["type"] == "STOP":
                    print("ticker stopped:", event["id"], flush=True)
        """)
    write(tmp_path, "listener.py", """\
        from ferry.flow import Node

        count = 0
        with Node() as node:
            for event in node:
                if event["type"] == "INPUT" and event["id"] == "count":
                    count += 1
                    if count == 3:
                        print("listener: three ticks", flush=True)
        """)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: ticker
            path: ticker.py
            inputs: {tick: ferry/timer/millis/20}
            outputs: [count]
          - id: listener
            path: listener.py
            inputs: {count: ticker/count}
        """)
    name = "e2e-" + uuid.uuid4().hex[:8]
    process = subprocess.Popen(
        [FERRY, "run", "dataflow.yml", "--name", name, "--log-dir", "logs", "--summary-json",
         "summary.json"], cwd=tmp_path, env=environment(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        log = tmp_path / "logs" / "listener.log"
        while time.monotonic() < deadline:
            if log.exists() and "three ticks" in log.read_text():
                break
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        stop = ferry("stop", name, cwd=tmp_path)
        assert stop.returncode == 0, stop.stderr
        assert f"dataflow {name} stopped" in stop.stdout
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.communicate()
    assert process.returncode == 0, out + err
    assert "[ticker] ticker stopped: ferry stop" in out
    summary = json.load(open(tmp_path / "summary.json"))
    assert summary["dataflow"] == name
    assert summary["stop_reason"] == "ferry stop"
    assert edge(summary, "ticker/count -> listener/count")["messages"] >= 3

    again = ferry("stop", name, cwd=tmp_path)
    assert again.returncode == 1
    assert f"no dataflow '{name}' is running" in again.stderr


def test_python_node_exception_is_reported(tmp_path):
    write(tmp_path, "source.py", """\
        import pyarrow as pa
        from ferry.flow import Node

        with Node() as node:
            node.send_output("values", pa.array([1, 2, 3], pa.int64()))
        """)
    write(tmp_path, "picky.py", """\
        from ferry.flow import Node

        with Node() as node:
            for event in node:
                if event["type"] == "INPUT":
                    values = event["value"].to_pylist()
                    raise ValueError(f"cannot handle {values}")
        """)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: source
            path: source.py
            outputs: [values]
          - id: picky
            path: picky.py
            inputs: {values: source/values}
        """)
    result, summary = run_dataflow(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    log = (tmp_path / "logs" / "picky.log").read_text()
    assert "Traceback (most recent call last):" in log
    assert "ValueError: cannot handle [1, 2, 3]" in log
    assert "[picky] (stderr) ValueError: cannot handle [1, 2, 3]" in result.stderr
    picky = node(summary, "picky")
    assert picky["exit_code"] == 1 and picky["failed"]
    assert node(summary, "source")["failed"] is False


def test_python_node_restarts_on_failure(tmp_path):
    write(tmp_path, "flaky.py", """\
        import json, os, sys
        import pyarrow as pa
        from ferry.flow import Node

        node = Node()
        run = node.config["restart_count"]
        if run > 0:
            node.wait_for_subscribers("values", 1, timeout=20)
        node.send_output("values", pa.array([run], pa.int64()))
        if run < 2:
            os._exit(5)  # a crash: no statistics, no clean close
        node.close()
        """)
    write(tmp_path, "collect.py", """\
        from ferry.flow import Node

        runs = []
        with Node() as node:
            for event in node:
                if event["type"] == "INPUT" and event["id"] == "values":
                    runs.extend(event["value"].to_pylist())
                    if len(runs) == 3:
                        break
        print("collected runs", sorted(runs))
        """)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: flaky
            path: flaky.py
            outputs: [values]
            restart: on-failure
            max_restarts: 4
          - id: collect
            path: collect.py
            inputs:
              values: flaky/values
              keepalive: ferry/timer/millis/600000
        """)
    result, summary = run_dataflow(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[collect] collected runs [0, 1, 2]" in result.stdout
    flaky = node(summary, "flaky")
    assert flaky["restarts"] == 2 and flaky["status"] == "exit 0"
    log = (tmp_path / "logs" / "flaky.log").read_text()
    assert "exit 5; restarting in 100 ms (restart 1 of 4)" in log
    assert "exit 5; restarting in 200 ms (restart 2 of 4)" in log


def test_runtime_node_with_python_operator(tmp_path):
    write(tmp_path, "source.py", """\
        import pyarrow as pa
        from ferry.flow import Node

        with Node() as node:
            for start in range(0, 30, 10):
                node.send_output("numbers", pa.record_batch({"x": pa.array(range(start, start + 10), pa.int64())}))
        """)
    write(tmp_path, "double.py", """\
        import pyarrow as pa
        import pyarrow.compute as pc
        import ferry.flow


        class Operator:
            def __init__(self, config):
                self.factor = config.get("factor", 2)

            def on_event(self, event, send_output):
                if event["type"] == "INPUT":
                    batch = pa.record_batch(event["value"])
                    doubled = pc.multiply(batch.column("x"), self.factor)
                    send_output("doubled", pa.record_batch({"x": doubled}))
                return ferry.flow.CONTINUE
        """)
    write(tmp_path, "sink.py", """\
        from ferry.flow import Node

        total = 0
        with Node() as node:
            for event in node:
                if event["type"] == "INPUT":
                    total += sum(event["value"].column("x").to_pylist())
        print("sink total", total)
        """)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: source
            path: source.py
            outputs: [numbers]
          - id: runtime
            operators:
              - id: double
                python: double.py
                config: {factor: 3}
                inputs: {numbers: source/numbers}
                outputs: [doubled]
          - id: sink
            path: sink.py
            inputs: {doubled: runtime/double/doubled}
        """)
    result, summary = run_dataflow(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[sink] sink total 1305" in result.stdout  # 3 * (0 + ... + 29)
    assert edge(summary, "source/numbers -> runtime/double/numbers")["messages"] == 3
    assert edge(summary, "runtime/double/doubled -> sink/doubled")["messages"] == 3
