"""Operators in one runtime: Python operators and shared-library operators
side by side (ferry.runtime.build_host + OperatorHost.run_scripted, no
daemon), and whole runs through `ferry run` (build/release/bin/ferry, or
$FERRY_BIN). The shared-library operators are the C++ tests' ones
(src/flow/operator/testing) and the opencl-pipeline example's."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

import ferry
import ferry.flow
from ferry._ferry.flow import OperatorHost
from ferry.runtime import build_host

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FERRY = os.environ.get("FERRY_BIN", os.path.join(REPO, "build", "release", "bin", "ferry"))
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(FERRY)))
TEST_OPERATORS = os.path.join(BUILD, "src", "flow", "operator", "test_operators")
C_RELAY = os.path.join(TEST_OPERATORS, "libferry_test_c_relay.so")
CXX_OPERATOR = os.path.join(TEST_OPERATORS, "libferry_test_operator.so")
RUN_TIMEOUT = 120

needs_test_operators = pytest.mark.skipif(
    not (os.path.exists(C_RELAY) and os.path.exists(CXX_OPERATOR)),
    reason=f"the test operators are not built in {TEST_OPERATORS} (make build, or set FERRY_BIN)",
)


def has_opencl():
    return bool(ferry.devices().present("opencl"))


def script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def library(op_id, path, inputs, outputs, config=None):
    return {"id": op_id, "kind": "shared-library", "path": path,
            "inputs": [{"id": i, "source": s} for i, s in inputs.items()],
            "outputs": outputs, "config": config or {}}


def python_op(op_id, path, inputs, outputs, config=None):
    return {"id": op_id, "kind": "python", "path": path,
            "inputs": [{"id": i, "source": s} for i, s in inputs.items()],
            "outputs": outputs, "config": config or {}}


def values_address(batch):
    return pa.record_batch(batch).column(0).buffers()[1].address


FORWARD = """\
    import pyarrow as pa
    import ferry
    import ferry.flow


    class Operator:
        def __init__(self, config):
            self.tag = config.get("tag", "py")

        def on_event(self, event, send_output):
            if event["type"] == "INPUT":
                value = event["value"]
                metadata = dict(event["metadata"])
                if isinstance(value, pa.RecordBatch):
                    metadata[self.tag + ".seen"] = "%#x" % value.column(0).buffers()[1].address
                metadata[self.tag + ".kind"] = type(value).__name__
                on_device = isinstance(value, ferry.RecordBatch)
                metadata[self.tag + ".device"] = value.device_type if on_device else "cpu"
                metadata[self.tag + ".sequence"] = event["sequence"]
                send_output("out", value, metadata)
            return ferry.flow.CONTINUE
    """


@needs_test_operators
def test_python_and_library_operators_pass_one_batch_without_copying(tmp_path):
    forward = script(tmp_path, "forward.py", FORWARD)
    host = build_host([
        library("a", C_RELAY, {"in": "external"}, ["out"]),
        python_op("py", forward, {"in": "a/out"}, ["out"]),
        library("b", C_RELAY, {"in": "py/out"}, ["out"]),
    ])
    batch = pa.record_batch({"x": pa.array([1, 2, 3, 4], pa.int64())})
    address = values_address(batch)
    before = ferry.telemetry()
    sent, closed = host.run_scripted(["a/in"], ["b/out"], [("input", "a/in", batch, {"n": 7})])
    after = ferry.telemetry()

    assert len(sent) == 1
    output, out_batch, metadata = sent[0]
    assert output == "b/out"
    # One memory all the way: C operator -> Python operator -> C operator.
    assert values_address(out_batch) == address
    assert int(metadata["a.values"], 16) == address
    assert int(metadata["py.seen"], 16) == address
    assert int(metadata["b.values"], 16) == address
    assert metadata["py.kind"] == "RecordBatch"
    assert metadata["py.sequence"] == 1 and metadata["n"] == 7  # typed metadata stays typed
    for counter in ("bytes_copied_host", "bytes_copied_h2d", "bytes_copied_d2h", "bytes_copied_d2d"):
        assert after[counter] == before[counter], counter
    assert closed == ["b/out"]
    stats = {entry["id"]: entry for entry in host.stats()["operators"]}
    assert stats["py"]["inputs_moved"] == 1 and stats["b"]["inputs_moved"] == 1
    assert host.errors() == []


@needs_test_operators
def test_a_failing_python_operator_stops_alone(tmp_path):
    raiser = script(tmp_path, "raiser.py", """\
        class Operator:
            def on_event(self, event, send_output):
                if event["type"] == "INPUT":
                    raise ValueError("no good")
        """)
    stopper = script(tmp_path, "stopper.py", """\
        import ferry.flow

        class Operator:
            def on_event(self, event, send_output):
                if event["type"] == "INPUT":
                    send_output("out", event["value"])
                    return ferry.flow.STOP
                return ferry.flow.CONTINUE
        """)
    wrong = script(tmp_path, "wrong.py", """\
        class Operator:
            def on_event(self, event, send_output):
                return "carry on"
        """)
    host = build_host([
        python_op("raiser", raiser, {"in": "external"}, ["out"]),
        python_op("stopper", stopper, {"in": "external"}, ["out"]),
        library("after", C_RELAY, {"in": "stopper/out"}, ["out"]),
        python_op("wrong", wrong, {"in": "external"}, []),
    ], log_errors=False)
    batch = pa.record_batch({"x": pa.array([1], pa.int64())})
    events = [("input", "raiser/in", batch), ("input", "stopper/in", batch),
              ("input", "stopper/in", batch), ("input", "wrong/in", batch)]
    sent, closed = host.run_scripted(["raiser/in", "stopper/in", "wrong/in"], ["after/out"], events)

    errors = dict(host.errors())
    assert "Python exception: ValueError: no good" in errors["raiser"]
    assert "raiser.py" in errors["raiser"]  # the traceback names the script
    assert "on_event returned 'carry on'" in errors["wrong"]
    assert [entry[0] for entry in sent] == ["after/out"]  # one batch before the STOP
    assert closed == ["after/out"]
    states = {entry["id"]: entry["state"] for entry in host.stats()["operators"]}
    assert states == {"raiser": "failed", "stopper": "stopped", "after": "stopped", "wrong": "failed"}


@needs_test_operators
def test_arrays_travel_by_the_array_convention(tmp_path):
    make_array = script(tmp_path, "make_array.py", """\
        import pyarrow as pa

        class Operator:
            def on_event(self, event, send_output):
                if event["type"] == "INPUT":
                    send_output("out", pa.array([10, 20, 30], pa.int64()), {"what": "array"})
        """)
    take_array = script(tmp_path, "take_array.py", """\
        import pyarrow as pa
        import pyarrow.compute as pc

        class Operator:
            def on_event(self, event, send_output):
                if event["type"] == "INPUT":
                    value = event["value"]
                    assert isinstance(value, pa.Array), type(value)
                    total = pc.sum(value).as_py()
                    send_output("out", pa.record_batch({"total": pa.array([total])}),
                                {"what": event["metadata"]["what"]})
        """)
    host = build_host([
        python_op("make", make_array, {"tick": "external"}, ["out"]),
        python_op("take", take_array, {"in": "make/out"}, ["out"]),
    ])
    tick = pa.record_batch({"t": pa.array([0], pa.int64())})
    sent, _ = host.run_scripted(["make/tick"], ["take/out"], [("input", "make/tick", tick)])
    assert host.errors() == []
    (_, batch, metadata), = sent
    assert pa.record_batch(batch).column(0).to_pylist() == [60]
    assert metadata == {"what": "array"}


@needs_test_operators
@pytest.mark.skipif(not has_opencl(), reason="no OpenCL device (PoCL) here")
def test_a_python_operator_passes_device_batches_on_without_a_copy(tmp_path):
    forward = script(tmp_path, "forward.py", FORWARD)
    rows = 4096
    host = build_host([
        library("fill", CXX_OPERATOR, {"tick": "external"}, ["out"],
                {"mode": "source", "device": "opencl", "rows": rows, "delay_ms": 20}),
        python_op("py", forward, {"in": "fill/out"}, ["out"]),
        library("sum", CXX_OPERATOR, {"in": "py/out"}, ["out"], {"mode": "sum"}),
    ])
    tick = pa.record_batch({"t": pa.array([0], pa.int64())})
    before = ferry.telemetry()
    sent, _ = host.run_scripted(["fill/tick"], ["sum/out"], [("input", "fill/tick", tick)])
    after = ferry.telemetry()
    assert host.errors() == []
    (_, batch, metadata), = sent
    start = 1000
    assert pa.record_batch(batch).column(0).to_pylist() == [rows * start + rows * (rows - 1) // 2]
    # Python saw a ferry batch still on the OpenCL device, and handed it on.
    assert metadata["py.kind"] == "RecordBatch" and metadata["py.device"] == "opencl"
    assert metadata["device"] == "opencl"
    assert after["bytes_copied_d2h"] == before["bytes_copied_d2h"]
    assert after["bytes_copied_h2d"] == before["bytes_copied_h2d"]


def test_broken_python_operators_are_refused_with_their_name(tmp_path):
    no_class = script(tmp_path, "no_class.py", "x = 1\n")
    with pytest.raises(RuntimeError, match="operator 'lonely': cannot start .*defines no class Operator"):
        build_host([python_op("lonely", no_class, {}, [])])
    broken = script(tmp_path, "broken.py", "raise ImportError('missing dependency')\n")
    with pytest.raises(RuntimeError, match="operator 'broken'.*missing dependency"):
        build_host([python_op("broken", broken, {}, [])])
    with pytest.raises(ValueError, match="cannot open operator library"):
        build_host([library("ghost", "/nonexistent/libghost.so", {}, [])])
    with pytest.raises(ValueError, match="source must be"):
        OperatorHost().add(json.dumps(python_op("x", no_class, {"in": "nowhere"}, [])),
                                      lambda event, send: None)


def test_the_runtime_module_explains_how_to_start_it():
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    env.pop("FERRY_OPERATORS", None)
    result = subprocess.run([sys.executable, "-m", "ferry.runtime"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "ferry run dataflow.yml" in result.stderr
    env["FERRY_OPERATORS"] = '[{"id": "x"}]'
    result = subprocess.run([sys.executable, "-m", "ferry.runtime"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "operator 1 ('x'): 'kind' is missing" in result.stderr


# ---- Whole runs through the daemon -------------------------------------------------

EXAMPLE_LIBS = [os.path.join(BUILD, "lib", "libferry_example_fill.so"),
                os.path.join(BUILD, "lib", "libferry_example_sum.so"),
                os.path.join(BUILD, "bin", "ferry_example_pipeline_check")]
needs_example = pytest.mark.skipif(
    not os.access(FERRY, os.X_OK) or not all(os.path.exists(p) for p in EXAMPLE_LIBS),
    reason=f"ferry and the opencl-pipeline example are not built in {BUILD}",
)


def pipeline(tmp_path, device, extra_operator=None):
    """The opencl-pipeline example in tmp_path, built parts from BUILD."""
    target = tmp_path / "opencl-pipeline"
    shutil.copytree(os.path.join(REPO, "examples", "opencl-pipeline"), target)
    descriptor = target / "dataflow.yml"
    text = descriptor.read_text().replace("../../build/release/", BUILD + "/")
    text = text.replace("device: opencl", f"device: {device}")
    if extra_operator:
        text = extra_operator(text)
    descriptor.write_text(text)
    return target


def ferry_run(directory):
    env = dict(os.environ, FERRY_PYTHON=sys.executable,
               FERRY_PYTHONPATH=os.path.join(REPO, "python"))
    result = subprocess.run([FERRY, "run", "dataflow.yml", "--summary-json", "summary.json"],
                            cwd=directory, env=env, capture_output=True, text=True,
                            timeout=RUN_TIMEOUT)
    summary_path = os.path.join(directory, "summary.json")
    summary = json.load(open(summary_path)) if os.path.exists(summary_path) else None
    return result, summary


@needs_example
def test_opencl_pipeline_example_runs(tmp_path):
    device = "opencl" if has_opencl() else "cpu"
    result, summary = ferry_run(pipeline(tmp_path, device))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checked 5 totals and 5 value batches: all correct" in result.stdout
    if device == "opencl":
        assert "waited on the device: yes" in result.stdout
    assert summary is not None


@needs_example
def test_python_operator_inside_the_pipeline_under_the_daemon(tmp_path):
    """fill (library) -> relay (Python) -> sum (library) in one `python -m
    ferry.runtime` process: the device batch crosses Python untouched."""
    def insert_python(text):
        text = text.replace("          values: runtime/fill/values\n        outputs: [total]",
                            "          values: runtime/relay/out\n        outputs: [total]")
        return text.replace(
            "      - id: sum\n",
            "      - id: relay\n"
            "        python: forward.py\n"
            "        inputs:\n"
            "          in: runtime/fill/values\n"
            "        outputs: [out]\n"
            "      - id: sum\n")
    device = "opencl" if has_opencl() else "cpu"
    directory = pipeline(tmp_path, device, insert_python)
    (directory / "forward.py").write_text(textwrap.dedent(FORWARD))
    result, _ = ferry_run(directory)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checked 5 totals and 5 value batches: all correct" in result.stdout
