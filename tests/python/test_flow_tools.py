"""The dataflow tools through the real `ferry` binary: `ferry graph` (Mermaid
and HTML), `ferry logs` (a running and a finished dataflow, and the fleet job
path that shares the command name) and `ferry top` (once, JSON, live)."""

import html.parser
import json
import re
import signal
import subprocess
import textwrap
import time
import uuid
import xml.etree.ElementTree as ET

import pytest

from test_dataflow import FERRY, REPO, environment, pytestmark  # noqa: F401 (the same skip)


def ferry(*args, cwd=REPO, timeout=60):
    return subprocess.run([FERRY, *args], cwd=cwd, env=environment(), capture_output=True,
                          text=True, timeout=timeout)


def write(directory, name, text):
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


# ---- ferry graph

DESCRIPTOR = """\
    nodes:
      - id: camera
        path: camera.py
        inputs:
          tick: dora/timer/millis/33
        outputs: [image]
      - id: runtime
        operators:
          - id: detect
            python: detect.py
            inputs:
              image: {source: camera/image, queue_size: 4, overflow: drop_oldest}
            outputs: [boxes]
      - id: sink
        path: sink.py
        inputs:
          boxes: runtime/detect/boxes
          frame: camera/image
    """

NODE_LINE = re.compile(r'^ +(\w+)(?:\[|\(\[|\[\[)"([^"]*)"(?:\]|\]\)|\]\])$')
SUBGRAPH_LINE = re.compile(r'^  subgraph (\w+) \["([^"]*)"\]$')
EDGE_LINE = re.compile(r'^  (\w+) -->\|"([^"|]*)"\| (\w+)$')


def parse_mermaid(text):
    """The flowchart's vertices {id: label} and edges [(from, label, to)];
    fails on any line that is not one of the statements `ferry graph` writes."""
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    vertices, edges, depth = {}, [], 0
    for line in lines[1:]:
        if m := SUBGRAPH_LINE.match(line):
            vertices[m[1]] = m[2]
            depth += 1
        elif line == "  end":
            depth -= 1
            assert depth >= 0
        elif m := NODE_LINE.match(line):
            assert m[1] not in vertices, line
            vertices[m[1]] = m[2]
        elif m := EDGE_LINE.match(line):
            edges.append((m[1], m[2], m[3]))
        else:
            raise AssertionError(f"not a flowchart statement: {line!r}")
    assert depth == 0
    for source, _, target in edges:
        assert source in vertices and target in vertices, (source, target)
    return vertices, edges


def test_graph_mermaid_has_nodes_operators_timers_and_labelled_edges(tmp_path):
    write(tmp_path, "dataflow.yml", DESCRIPTOR)
    # The programs do not exist: a graph is drawn before anything is built.
    result = ferry("graph", "dataflow.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    vertices, edges = parse_mermaid(result.stdout)
    names = {label.split("<br/>")[0]: key for key, label in vertices.items()}
    assert set(names) == {"camera", "runtime", "detect", "sink", "dora/timer/millis/33"}
    assert vertices[names["camera"]] == "camera<br/>python camera.py"
    assert vertices[names["dora/timer/millis/33"]] == "dora/timer/millis/33<br/>every 33 ms"
    labelled = {(s, label, t) for s, label, t in edges}
    assert (names["dora/timer/millis/33"], "tick", names["camera"]) in labelled
    assert (names["camera"], "image (queue 4, drop_oldest)", names["detect"]) in labelled
    assert (names["detect"], "boxes (queue 64, block)", names["sink"]) in labelled
    assert (names["camera"], "image \u2192 frame (queue 64, block)", names["sink"]) in labelled
    assert len(edges) == 4


class _Page(html.parser.HTMLParser):
    """Collects the tags of a page and checks that they nest."""

    VOID = {"meta", "br", "link", "img", "input", "hr"}

    def __init__(self):
        super().__init__()
        self.stack, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (self.stack[-3:], tag)
        self.stack.pop()


def test_graph_html_is_self_contained_and_shows_every_node_and_edge(tmp_path):
    write(tmp_path, "dataflow.yml", DESCRIPTOR)
    result = ferry("graph", "dataflow.yml", "-o", "graph.html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    page = (tmp_path / "graph.html").read_text()
    parser = _Page()
    parser.feed(page)
    assert parser.stack == []
    assert "script" not in parser.tags and "link" not in parser.tags
    assert "https://" not in page
    # The drawing is inline SVG, well-formed XML.
    svg = ET.fromstring(page[page.index("<svg"):page.index("</svg>") + len("</svg>")])
    ns = {"s": "http://www.w3.org/2000/svg"}
    vertices = {g.get("data-name") for g in svg.iterfind(".//s:g", ns)
                if "vertex" in g.get("class", "").split()}
    assert vertices == {"camera", "runtime", "runtime/detect", "sink", "dora/timer/millis/33"}
    edges = {(g.get("data-source"), g.get("data-target")) for g in svg.iterfind(".//s:g", ns)
             if g.get("class") == "edge"}
    assert edges == {("dora/timer/millis/33", "camera/tick"),
                     ("camera/image", "runtime/detect/image"),
                     ("runtime/detect/boxes", "sink/boxes"), ("camera/image", "sink/frame")}
    for g in svg.iterfind(".//s:g", ns):
        if g.get("class") == "edge":
            assert g.find("s:path", ns).get("d").startswith("M ")
    # --format wins over the file name; stdout without -o.
    mermaid = ferry("graph", "dataflow.yml", "--format", "mermaid", "-o", "g.html", cwd=tmp_path)
    assert mermaid.returncode == 0
    assert (tmp_path / "g.html").read_text().startswith("flowchart LR\n")
    to_stdout = ferry("graph", "dataflow.yml", "--format", "html", cwd=tmp_path)
    assert to_stdout.stdout.startswith("<!DOCTYPE html>")


def test_graph_bad_input_is_a_clear_error(tmp_path):
    missing = ferry("graph", "nowhere.yml", cwd=tmp_path)
    assert missing.returncode == 1 and "nowhere.yml" in missing.stderr
    assert missing.stdout == ""

    write(tmp_path, "bad.yml", """\
        nodes:
          - id: a
            path: a.py
            inputs: {x: b/y}
        """)
    bad = ferry("graph", "bad.yml", cwd=tmp_path)
    assert bad.returncode == 1
    assert re.match(r"bad\.yml:4:\d+: .*unknown node 'b'", bad.stderr), bad.stderr
    assert bad.stdout == ""

    write(tmp_path, "broken.yml", "nodes: [unclosed\n")
    broken = ferry("graph", "broken.yml", cwd=tmp_path)
    assert broken.returncode == 1 and broken.stderr.startswith("broken.yml:"), broken.stderr

    write(tmp_path, "dataflow.yml", DESCRIPTOR)
    wrong = ferry("graph", "dataflow.yml", "--format", "svg", cwd=tmp_path)
    assert wrong.returncode == 2 and "svg" in wrong.stderr
    unwritable = ferry("graph", "dataflow.yml", "-o", "no/such/dir/g.html", cwd=tmp_path)
    assert unwritable.returncode == 1 and "cannot write 'no/such/dir/g.html'" in unwritable.stderr


# ---- ferry logs

CHATTY = """\
    import sys
    from ferry.flow import Node

    with Node() as node:
        count = 0
        for event in node:
            if event["type"] == "INPUT":
                count += 1
                print(f"{node.id} line {count}", flush=True)
                if count == 3:
                    print(f"{node.id} to stderr", file=sys.stderr, flush=True)
    """


def start_run(tmp_path, name, *extra):
    return subprocess.Popen([FERRY, "run", "--name", name, *extra, "dataflow.yml"], cwd=tmp_path,
                            env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def wait_for(predicate, process, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def chatty_flow(tmp_path):
    write(tmp_path, "chatty.py", CHATTY)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: alpha
            path: chatty.py
            inputs: {tick: ferry/timer/millis/20}
          - id: beta
            path: chatty.py
            inputs: {tick: ferry/timer/millis/30}
        """)
    return tmp_path


def test_logs_of_a_running_and_a_finished_dataflow(chatty_flow, tmp_path):
    name = f"logs-{uuid.uuid4().hex[:8]}"
    logs = tmp_path / "elsewhere"
    run = start_run(chatty_flow, name, "--log-dir", str(logs))
    try:
        def both_printed():
            files = [logs / "alpha.log", logs / "beta.log"]
            return all(f.exists() for f in files) and "alpha to stderr" in files[0].read_text() \
                and "beta line 4" in files[1].read_text()
        wait_for(both_printed, run)
        # The daemon says where its logs are: any directory works.
        one = ferry("logs", name, "alpha", cwd=REPO)
        assert one.returncode == 0, one.stderr
        lines = one.stdout.splitlines()
        assert "alpha line 1" in lines and "alpha line 3" in lines
        assert "alpha to stderr" in lines
        assert not any(line.startswith("[alpha]") for line in lines), lines
        every = ferry("logs", name, cwd=REPO)
        assert every.returncode == 0, every.stderr
        assert "[alpha] alpha line 1" in every.stdout.splitlines()
        assert "[beta] beta line 1" in every.stdout.splitlines()
        # alpha's lines come before beta's: the dataflow's order.
        assert every.stdout.index("[alpha]") < every.stdout.index("[beta]")

        unknown = ferry("logs", name, "gamma")
        assert unknown.returncode == 1
        assert "no node 'gamma'" in unknown.stderr and "alpha, beta" in unknown.stderr

        # --follow prints what comes and returns when the run ends.
        follow = subprocess.Popen([FERRY, "logs", name, "beta", "--follow"], cwd=REPO,
                                  env=environment(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert follow.poll() is None, follow.communicate()
        stop = ferry("stop", name)
        assert stop.returncode == 0, stop.stderr
        out, err = follow.communicate(timeout=30)
        assert follow.returncode == 0, err
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    final = (logs / "beta.log").read_text()
    assert out == final, (out, final)
    assert "[ferry] exited" in out  # the daemon's note about the end is in the log

    # Finished: --log-dir finds it; without, .ferry/logs/<run> under the current directory.
    finished = ferry("logs", name, "--log-dir", str(logs))
    assert finished.returncode == 0, finished.stderr
    assert "[alpha] alpha line 1" in finished.stdout and "[beta] beta line 1" in finished.stdout
    gone = ferry("logs", name)
    assert gone.returncode == 1
    assert f"no dataflow '{name}' is running here" in gone.stderr and "--log-dir" in gone.stderr


def test_logs_default_log_directory_and_df_run_ids(chatty_flow):
    tmp_path = chatty_flow
    run = start_run(tmp_path, "df-12345-abcd")
    try:
        wait_for(lambda: (tmp_path / ".ferry/logs/df-12345-abcd/alpha.log").exists() and
                 "alpha line 2" in (tmp_path / ".ferry/logs/df-12345-abcd/alpha.log").read_text(),
                 run)
        assert ferry("stop", "df-12345-abcd").returncode == 0
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    result = ferry("logs", "df-12345-abcd", "alpha", "--follow", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[ferry] started, pid ")
    assert "alpha line 2\n" in result.stdout


def test_logs_of_a_job_id_is_the_fleet_command(tmp_path):
    # No dataflow named 42 runs here: the fleet's `logs` asks the (absent) server.
    result = ferry("logs", "42", "--server", "http://127.0.0.1:9", "--token", "t", cwd=tmp_path)
    assert result.returncode == 1
    assert "no dataflow" not in result.stderr
    assert "127.0.0.1:9" in result.stderr, result.stderr
    # Options before the id, and a value that is not a job id, are read as the fleet's too.
    result = ferry("logs", "--server", "http://127.0.0.1:9", "--token", "t", "7", cwd=tmp_path)
    assert result.returncode == 1 and "no dataflow" not in result.stderr, result.stderr
    assert "127.0.0.1:9" in result.stderr, result.stderr
    # A word that is not a job id is a dataflow run id.
    result = ferry("logs", "not-running", cwd=tmp_path)
    assert result.returncode == 1
    assert "no dataflow 'not-running' is running here" in result.stderr
    bad = ferry("logs", "bad/name", cwd=tmp_path)
    assert bad.returncode == 1 and "bad/name" in bad.stderr


# ---- ferry top

BUSY = """\
    from ferry.flow import Node

    with Node() as node:
        for event in node:
            if event["type"] == "INPUT":
                total = 0
                for i in range(200_000):  # keeps a core busy between ticks
                    total += i
    """

HOLDER = """\
    from ferry.flow import Node

    ballast = bytearray(64 << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1  # resident, not just reserved
    with Node() as node:
        for event in node:
            pass
    """

FLAKY = """\
    import json, os, sys
    import pyarrow as pa
    from ferry.flow import Node

    first = json.loads(os.environ["FERRY_NODE_CONFIG"])["restart_count"] == 0
    with Node() as node:
        sent = 0
        for event in node:
            if event["type"] == "INPUT":
                node.send_output("out", pa.array([sent] * 100, pa.int64()))
                sent += 1
                if first and sent == 5:
                    break
    if first:
        sys.exit(3)  # after the statistics went out: restarted once
    """


def test_top_once_json_and_live(tmp_path):
    write(tmp_path, "busy.py", BUSY)
    write(tmp_path, "holder.py", HOLDER)
    write(tmp_path, "flaky.py", FLAKY)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: busy
            path: busy.py
            inputs: {tick: ferry/timer/millis/5}
          - id: holder
            path: holder.py
            inputs: {tick: ferry/timer/millis/500}
          - id: flaky
            path: flaky.py
            restart: on-failure
            inputs: {tick: ferry/timer/millis/10}
            outputs: [out]
          - id: sink
            path: holder.py
            inputs: {values: flaky/out}
        """)
    name = f"top-{uuid.uuid4().hex[:8]}"
    run = start_run(tmp_path, name, "--log-dir", "logs")
    try:
        def restarted_and_running():
            listed = ferry("ps", "--json")
            mine = [d for d in json.loads(listed.stdout) if d.get("dataflow") == name]
            return mine and mine[0]["phase"] == "running" and all(
                n["state"] == "running" for n in mine[0]["nodes"]) and any(
                n["restarts"] == 1 for n in mine[0]["nodes"])
        wait_for(restarted_and_running, run)
        once = ferry("top", name, "--once", "--json")
        assert once.returncode == 0, once.stderr
        document = json.loads(once.stdout)
        [flow] = document["dataflows"]
        assert flow["dataflow"] == name and flow["phase"] == "running"
        nodes = {n["id"]: n for n in flow["nodes"]}
        assert set(nodes) == {"busy", "holder", "flaky", "sink"}
        for entry in nodes.values():
            assert entry["pid"] > 0 and entry["state"] == "running"
            assert entry["rss_bytes"] > 1 << 20 and entry["processes"] >= 1
            assert entry["cpu_percent"] is not None and entry["cpu_percent"] >= 0
        assert nodes["busy"]["cpu_percent"] > 20, nodes["busy"]
        assert nodes["holder"]["rss_bytes"] > 64 << 20, nodes["holder"]
        assert nodes["holder"]["cpu_percent"] < nodes["busy"]["cpu_percent"]
        # The first instance of flaky reported its 5 messages when it ended.
        assert nodes["flaky"]["restarts"] == 1
        assert nodes["flaky"]["messages"] >= 5 and nodes["flaky"]["bytes"] >= 5 * 800
        assert nodes["flaky"]["bytes_copied"] >= 0
        assert nodes["sink"]["drops"] == 0
        # Rates come from taps on the outputs: flaky sends every 10 ms; busy
        # has no output, hence no rate.
        # (at most 100 a second; fewer when the machine is loaded)
        rate = nodes["flaky"]["messages_per_s"]
        assert 3 <= rate <= 150, nodes["flaky"]
        assert nodes["flaky"]["bytes_per_s"] == pytest.approx(800 * rate, rel=0.01)
        assert nodes["busy"]["messages_per_s"] is None
        untapped = json.loads(ferry("top", name, "--once", "--json", "--no-taps").stdout)
        untapped_nodes = {n["id"]: n for n in untapped["dataflows"][0]["nodes"]}
        assert untapped_nodes["flaky"]["messages_per_s"] is None
        [edge] = flow["edges"]
        assert edge["edge"] == "flaky/out -> sink/values" and edge["queue_size"] == 64

        table = ferry("top", name, "--once")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0] == f"dataflow {name} (running)"
        assert lines[1].split()[:5] == ["NODE", "STATE", "PID", "CPU%", "MEM"]
        assert {line.split()[0] for line in lines[2:6]} == {"busy", "holder", "flaky", "sink"}

        # Live: a refreshed screen until the dataflow ends.
        live = subprocess.Popen([FERRY, "top", name, "--interval", "0.2"], cwd=tmp_path,
                                env=environment(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert ferry("stop", name).returncode == 0
        out, err = live.communicate(timeout=30)
        assert live.returncode == 0, err
        assert out.count("\x1b[H\x1b[2J") >= 3, out
        assert f"dataflow {name} has ended" in out
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_top_of_a_dataflow_that_is_not_running(tmp_path):
    result = ferry("top", "no-such-run", "--once", cwd=tmp_path)
    assert result.returncode == 1
    assert "no dataflow 'no-such-run' is running here" in result.stderr
    bad = ferry("top", "bad/name", "--once", cwd=tmp_path)
    assert bad.returncode == 1 and "bad/name" in bad.stderr
    usage = ferry("top", "--interval", "0", cwd=tmp_path)
    assert usage.returncode == 2


# ---- ferry topic echo / hz

COUNTER = """\
    import pyarrow as pa
    from ferry.flow import Node

    with Node() as node:
        sent = 0
        for event in node:
            if event["type"] == "INPUT" and event["id"] == "tick":
                node.send_output("numbers", pa.array([sent, sent * 10], pa.int64()),
                                 {"frame": str(sent)})
                sent += 1
                if sent == 250:  # about 5 s: then the graph ends by itself
                    break
    """

SILENT = """\
    from ferry.flow import Node

    with Node() as node:
        received = 0
        for event in node:
            if event["type"] == "INPUT":
                received += 1
        print(f"sink received {received}", flush=True)
    """


@pytest.fixture
def counting_flow(tmp_path):
    write(tmp_path, "counter.py", COUNTER)
    write(tmp_path, "silent.py", SILENT)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: counter
            path: counter.py
            inputs: {tick: ferry/timer/millis/20}
            outputs: [numbers]
          - id: sink
            path: silent.py
            inputs: {numbers: counter/numbers}
        """)
    name = f"topic-{uuid.uuid4().hex[:8]}"
    run = start_run(tmp_path, name, "--log-dir", "logs", "--summary-json", "summary.json")
    wait_for(lambda: (tmp_path / "logs" / "counter.log").exists() and ferry(
        "top", name, "--once", "--json").returncode == 0, run)
    yield tmp_path, name, run
    if run.poll() is None:
        ferry("stop", name)
        try:
            run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()


def test_topic_echo_prints_live_messages(counting_flow):
    tmp_path, name, run = counting_flow
    echo = ferry("topic", "echo", f"{name}/counter/numbers", "--count", "3", timeout=60)
    assert echo.returncode == 0, echo.stderr
    headers = [line for line in echo.stdout.splitlines() if line.startswith("--- seq ")]
    assert len(headers) == 3, echo.stdout
    frames = []
    for header in headers:
        m = re.match(r"--- seq (\d+), 2 rows, \d+ B, frame=(\d+)$", header)
        assert m, header
        frames.append(int(m[2]))
    # Consecutive live messages; each shows its values.
    assert frames == list(range(frames[0], frames[0] + 3)), frames
    assert f"  {frames[0] * 10}" in echo.stdout, echo.stdout

    # The tap did not disturb the graph: nothing dropped, nothing lost.
    assert run.wait(timeout=60) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    [edge] = summary["edges"]
    assert edge["drops"] == 0 and edge["lost"] == 0, edge
    assert edge["sent"] == edge["received"] == 250, edge


def test_topic_hz_reports_the_rate(counting_flow):
    tmp_path, name, run = counting_flow
    hz = ferry("topic", "hz", f"{name}/counter/numbers", "--count", "2", "--window", "0.5",
               timeout=60)
    assert hz.returncode == 0, hz.stderr
    lines = hz.stdout.splitlines()
    assert len(lines) == 2, hz.stdout
    for line in lines:
        m = re.match(r"([\d.]+) msg/s  [\d.]+ (?:B|KiB)/s  \((\d+) messages in ([\d.]+) s", line)
        assert m, line
        assert 10 <= float(m[1]) <= 80, line  # a 20 ms timer: about 50 a second


def test_topic_errors(counting_flow, tmp_path):
    _, name, _ = counting_flow
    no_output = ferry("topic", "echo", f"{name}/counter/nothing")
    assert no_output.returncode == 1
    assert "has no output 'nothing' (outputs: numbers)" in no_output.stderr
    no_node = ferry("topic", "hz", f"{name}/ghost/numbers")
    assert no_node.returncode == 1 and "no node 'ghost' (nodes: counter, sink)" in no_node.stderr
    not_running = ferry("topic", "echo", "nobody-here/counter/numbers")
    assert not_running.returncode == 1
    assert "no dataflow 'nobody-here' is running here" in not_running.stderr
    malformed = ferry("topic", "echo", "just-a-name")
    assert malformed.returncode == 1 and "RUN/NODE/OUTPUT" in malformed.stderr
    usage = ferry("topic", "echo")
    assert usage.returncode == 2


# ---- ferry record

TWO_OUTPUTS = """\
    import pyarrow as pa
    from ferry.flow import Node

    with Node() as node:
        sent = 0
        for event in node:
            if event["type"] == "INPUT" and event["id"] == "tick":
                node.send_output("numbers", pa.array([sent, sent * 10], pa.int64()),
                                 {"frame": str(sent)})
                node.send_output("table", pa.record_batch({
                    "x": pa.array([sent, -sent], pa.int32()),
                    "name": pa.array([f"n{sent}", None]),
                    "score": pa.array([sent / 2, None], pa.float64())}))
                sent += 1
    """


@pytest.fixture
def two_output_flow(tmp_path):
    write(tmp_path, "counter.py", TWO_OUTPUTS)
    write(tmp_path, "silent.py", SILENT)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: counter
            path: counter.py
            inputs: {tick: ferry/timer/millis/10}
            outputs: [numbers, table]
          - id: sink
            path: silent.py
            inputs: {numbers: counter/numbers, table: counter/table}
        """)
    name = f"rec-{uuid.uuid4().hex[:8]}"
    run = start_run(tmp_path, name, "--log-dir", "logs")
    wait_for(lambda: ferry("top", name, "--once", "--json").returncode == 0, run)
    yield tmp_path, name, run
    if run.poll() is None:
        ferry("stop", name)
        try:
            run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()


def test_record_writes_arrow_ipc_files_pyarrow_and_polars_read(two_output_flow):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc
    tmp_path, name, _ = two_output_flow
    result = ferry("record", name, "-o", "rec", "--count", "20", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "counter/numbers: 20 messages" in result.stdout, result.stdout
    assert "counter/table: 20 messages" in result.stdout, result.stdout

    numbers = pyarrow.ipc.open_file(tmp_path / "rec" / "counter__numbers.arrow")
    assert numbers.schema.field("time").type == pa.timestamp("us", tz="UTC")
    assert numbers.schema.field("seq").type == pa.uint64()
    assert numbers.schema.field("value").type == pa.list_(pa.int64())
    assert numbers.schema.metadata[b"ferry.output"] == b"counter/numbers"
    assert numbers.schema.metadata[b"ferry.kind"] == b"array"
    table = numbers.read_all()
    assert table.num_rows == 20
    rows = table.to_pylist()
    seqs = [row["seq"] for row in rows]
    assert seqs == sorted(seqs) and len(set(seqs)) == 20
    for row in rows:
        frame = int(json.loads(row["metadata"])["frame"])
        assert row["value"] == [frame, frame * 10], row  # what was sent
    times = [row["time"] for row in rows]
    assert times == sorted(times)

    batches = pyarrow.ipc.open_file(tmp_path / "rec" / "counter__table.arrow").read_all()
    assert batches.schema.metadata[b"ferry.kind"] == b"batch"
    for row in batches.to_pylist():
        [first, second] = row["value"]
        k = first["x"]
        assert first == {"x": k, "name": f"n{k}", "score": k / 2}
        assert second == {"x": -k, "name": None, "score": None}

    polars = pytest.importorskip("polars")
    frame = polars.read_ipc(tmp_path / "rec" / "counter__numbers.arrow")
    assert frame.height == 20 and frame["value"].to_list() == [r["value"] for r in rows]

    duckdb = pytest.importorskip("duckdb")
    recording = table  # duckdb finds the pyarrow table by its variable's name
    assert duckdb.sql("SELECT count(*), sum(len(value)) FROM recording").fetchall() == [(20, 40)]


def test_record_until_ctrl_c_leaves_complete_files(two_output_flow):
    pyarrow_ipc = pytest.importorskip("pyarrow.ipc")
    tmp_path, name, _ = two_output_flow
    recorder = subprocess.Popen([FERRY, "record", name, "counter/numbers", "-o", "rec"],
                                cwd=tmp_path, env=environment(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    recorder.send_signal(signal.SIGINT)
    out, err = recorder.communicate(timeout=30)
    assert recorder.returncode == 0, err
    m = re.search(r"counter/numbers: (\d+) messages", out)
    assert m and int(m[1]) > 0, out
    assert not (tmp_path / "rec" / "counter__table.arrow").exists()
    table = pyarrow_ipc.open_file(tmp_path / "rec" / "counter__numbers.arrow").read_all()
    assert table.num_rows == int(m[1])


def test_record_errors(two_output_flow):
    tmp_path, name, _ = two_output_flow
    unknown = ferry("record", name, "counter/nothing", "-o", "rec", cwd=tmp_path)
    assert unknown.returncode == 1
    assert "no output 'counter/nothing' (outputs: counter/numbers, counter/table)" in unknown.stderr
    missing = ferry("record", "nobody-here", "-o", "rec", cwd=tmp_path)
    assert missing.returncode == 1 and "no dataflow 'nobody-here' is running" in missing.stderr
    (tmp_path / "afile").write_text("")
    blocked = ferry("record", name, "-o", "afile/rec", "--count", "1", cwd=tmp_path)
    assert blocked.returncode == 1 and "afile" in blocked.stderr
    usage = ferry("record", name, cwd=tmp_path)
    assert usage.returncode == 2


# ---- ferry replay

PRINTER = """\
    from ferry.flow import Node

    with Node() as node:
        for event in node:
            if event["type"] == "INPUT":
                value = event["value"]
                print(event["id"], event["metadata"].get("frame"), value.to_pylist(), flush=True)
    """


def test_replay_reproduces_what_a_consumer_saw(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.ipc
    live = tmp_path / "live"
    live.mkdir()
    write(live, "counter.py", TWO_OUTPUTS)
    write(live, "printer.py", PRINTER)
    write(live, "dataflow.yml", """\
        nodes:
          - id: counter
            path: counter.py
            inputs: {tick: ferry/timer/millis/10}
            outputs: [numbers, table]
          - id: printer
            path: printer.py
            inputs: {numbers: counter/numbers, table: counter/table}
        """)
    name = f"replay-{uuid.uuid4().hex[:8]}"
    run = start_run(live, name, "--log-dir", "logs")
    try:
        wait_for(lambda: ferry("top", name, "--once", "--json").returncode == 0, run)
        recorded = ferry("record", name, "-o", str(tmp_path / "rec"), "--count", "40")
        assert recorded.returncode == 0, recorded.stderr
        assert ferry("stop", name).returncode == 0
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    numbers = pyarrow.ipc.open_file(tmp_path / "rec" / "counter__numbers.arrow").read_all()
    seqs = numbers.column("seq").to_pylist()
    assert seqs == list(range(seqs[0], seqs[0] + 40)), seqs  # nothing missed
    live_lines = (live / "logs" / "printer.log").read_text().splitlines()

    # A replay of the recording into the same consumer, in a dataflow of its own.
    replay = tmp_path / "replay"
    replay.mkdir()
    write(replay, "printer.py", PRINTER)
    write(replay, "dataflow.yml", f"""\
        nodes:
          - id: counter
            path: {FERRY}
            args: replay ../rec --speed recorded
            outputs: [numbers, table]
          - id: printer
            path: printer.py
            inputs: {{numbers: counter/numbers, table: counter/table}}
        """)
    result = ferry("run", "dataflow.yml", "--log-dir", "logs", cwd=replay)
    assert result.returncode == 0, result.stdout + result.stderr
    m = re.search(r"\[counter\] replayed 80 messages in ([\d.]+) s", result.stdout)
    assert m, result.stdout
    replayed_lines = (replay / "logs" / "printer.log").read_text().splitlines()
    for input_id in ("numbers", "table"):
        mine = [line for line in replayed_lines if line.startswith(input_id + " ")]
        assert len(mine) == 40, replayed_lines
        # Exactly the consumer's lines of the recorded stretch, in order.
        theirs = [line for line in live_lines if line.startswith(input_id + " ")]
        start = theirs.index(mine[0])
        assert theirs[start:start + 40] == mine, (input_id, mine[:3])
    # At the recorded pace: the recording spans about 40 ticks of 10 ms.
    times = numbers.column("time").to_pylist()
    span = (times[-1] - times[0]).total_seconds()
    assert float(m[1]) >= 0.8 * span, (m[1], span)

    # As fast as possible: the same lines, sooner.
    text = (replay / "dataflow.yml").read_text().replace("--speed recorded", "--speed max")
    (replay / "dataflow.yml").write_text(text)
    fast = ferry("run", "dataflow.yml", "--log-dir", "logs-max", cwd=replay)
    assert fast.returncode == 0, fast.stdout + fast.stderr
    m_fast = re.search(r"\[counter\] replayed 80 messages in ([\d.]+) s", fast.stdout)
    assert m_fast and float(m_fast[1]) < max(float(m[1]) / 2, 0.05), (m_fast, m[1])
    fast_lines = (replay / "logs-max" / "printer.log").read_text().splitlines()
    for input_id in ("numbers", "table"):
        assert ([line for line in fast_lines if line.startswith(input_id + " ")] ==
                [line for line in replayed_lines if line.startswith(input_id + " ")])


def test_replay_errors(tmp_path):
    outside = ferry("replay", str(tmp_path), cwd=tmp_path)
    assert outside.returncode == 1 and "runs as a node of a dataflow" in outside.stderr
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "junk.arrow").write_text("not arrow")
    write(tmp_path, "dataflow.yml", f"""\
        nodes:
          - id: counter
            path: {FERRY}
            args: replay rec
            outputs: [numbers]
        """)
    missing = ferry("run", "dataflow.yml", "--log-dir", "logs", cwd=tmp_path)
    assert missing.returncode == 1
    assert "no recording for output 'numbers' of node 'counter'" in missing.stderr, missing.stderr
    assert "(recordings: none)" in missing.stderr
    (tmp_path / "dataflow.yml").write_text(
        (tmp_path / "dataflow.yml").read_text().replace("replay rec", "replay nowhere"))
    nodir = ferry("run", "dataflow.yml", "--log-dir", "logs", cwd=tmp_path)
    assert nodir.returncode == 1 and "no recording directory nowhere" in nodir.stderr, nodir.stderr
    bad_speed = ferry("replay", "rec", "--speed", "warp", cwd=tmp_path)
    assert bad_speed.returncode == 2


def test_help_lists_the_tools():
    result = ferry("--help")
    assert result.returncode == 0
    for command in ("graph", "logs", "top", "topic", "record", "replay"):
        assert re.search(rf"^\s+{command}\b", result.stdout, re.M), command
    topic = ferry("topic", "--help")
    assert topic.returncode == 0 and "echo" in topic.stdout and "hz" in topic.stdout
    logs = ferry("logs", "df-1-abcd", "--help")
    assert logs.returncode == 0 and "--follow" in logs.stdout and "--log-dir" in logs.stdout


RESTARTING = """\
    import json, os, sys
    import pyarrow as pa
    from ferry.flow import Node

    instance = json.loads(os.environ["FERRY_NODE_CONFIG"])["restart_count"]
    with Node() as node:
        sent = 0
        for event in node:
            if event["type"] == "INPUT":
                node.send_output("out", pa.array([instance, sent], pa.int64()))
                sent += 1
                if instance == 0 and sent == 200:  # about 2 s
                    break
    if instance == 0:
        sys.exit(3)
    """


def test_record_follows_a_restarted_producer_and_ends_with_its_node(tmp_path):
    pyarrow_ipc = pytest.importorskip("pyarrow.ipc")
    write(tmp_path, "producer.py", RESTARTING)
    write(tmp_path, "silent.py", SILENT)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: producer
            path: producer.py
            restart: on-failure
            inputs: {tick: ferry/timer/millis/10}
            outputs: [out]
          - id: sink
            path: silent.py
            inputs: {values: producer/out}
        """)
    name = f"rec-restart-{uuid.uuid4().hex[:8]}"
    run = start_run(tmp_path, name, "--log-dir", "logs")
    try:
        wait_for(lambda: ferry("ps", "--json").stdout.count(name) > 0, run)
        recorder = ferry("record", name, "-o", "rec", "--duration", "4", cwd=tmp_path, timeout=60)
        assert recorder.returncode == 0, recorder.stderr
        assert "1 restart of the producer followed" in recorder.stdout, recorder.stdout
        table = pyarrow_ipc.open_file(tmp_path / "rec" / "producer__out.arrow").read_all()
        instances = [value[0] for value in table.column("value").to_pylist()]
        assert 0 in instances and 1 in instances, instances
        assert instances == sorted(instances)  # the first instance's, then the second's
        assert ferry("stop", name).returncode == 0
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_record_ends_when_the_recorded_node_finishes(counting_flow):
    pyarrow_ipc = pytest.importorskip("pyarrow.ipc")
    tmp_path, name, run = counting_flow
    recorder = ferry("record", name, "counter/numbers", "-o", "rec", cwd=tmp_path, timeout=60)
    assert recorder.returncode == 0, recorder.stderr
    m = re.search(r"counter/numbers: (\d+) messages", recorder.stdout)
    assert m and 0 < int(m[1]) <= 250, recorder.stdout
    table = pyarrow_ipc.open_file(tmp_path / "rec" / "counter__numbers.arrow").read_all()
    assert table.column("seq").to_pylist()[-1] == 250  # up to the counter's last message
    assert run.wait(timeout=60) == 0


DOUBLER = """\
    import pyarrow as pa
    import pyarrow.compute as pc
    import ferry.flow


    class Operator:
        def __init__(self, config):
            pass

        def on_event(self, event, send_output):
            if event["type"] == "INPUT":
                send_output("doubled", pc.multiply(event["value"], 2), event["metadata"])
            return ferry.flow.CONTINUE
    """


def test_operator_outputs_in_topic_and_record(tmp_path):
    pyarrow_ipc = pytest.importorskip("pyarrow.ipc")
    write(tmp_path, "counter.py", COUNTER)
    write(tmp_path, "doubler.py", DOUBLER)
    write(tmp_path, "silent.py", SILENT)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: counter
            path: counter.py
            inputs: {tick: ferry/timer/millis/20}
            outputs: [numbers]
          - id: runtime
            operators:
              - id: doubler
                python: doubler.py
                inputs: {numbers: counter/numbers}
                outputs: [doubled, unread]
          - id: sink
            path: silent.py
            inputs: {values: runtime/doubler/doubled}
        """)
    name = f"ops-{uuid.uuid4().hex[:8]}"
    run = start_run(tmp_path, name, "--log-dir", "logs")
    try:
        wait_for(lambda: ferry("top", name, "--once", "--json", "--no-taps").returncode == 0, run)
        echo = ferry("topic", "echo", f"{name}/runtime/doubler/doubled", "-n", "2")
        assert echo.returncode == 0, echo.stderr
        frames = [int(f) for f in re.findall(r"frame=(\d+)", echo.stdout)]
        assert len(frames) == 2 and f"  {frames[0] * 20}\n" in echo.stdout, echo.stdout
        recorded = ferry("record", name, "runtime/doubler/doubled", "-o", "rec", "-n", "5",
                         cwd=tmp_path)
        assert recorded.returncode == 0, recorded.stderr
        table = pyarrow_ipc.open_file(tmp_path / "rec" / "runtime__doubler__doubled.arrow").read_all()
        for row in table.to_pylist():
            frame = int(json.loads(row["metadata"])["frame"])
            assert row["value"] == [frame * 2, frame * 20]
        unread = ferry("topic", "hz", f"{name}/runtime/doubler/unread")
        assert unread.returncode == 1
        assert "published only when another node reads it" in unread.stderr, unread.stderr
        graph = ferry("graph", "dataflow.yml", cwd=tmp_path)
        assert '-->|"numbers (queue 64, block)"| n1_o0' in graph.stdout, graph.stdout
        assert ferry("stop", name).returncode == 0
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_topic_echo_of_a_stdout_output(tmp_path):
    write(tmp_path, "talker.py", """\
        import time
        for i in range(100000):
            print(f"line {i}", flush=True)
            time.sleep(0.02)
        """)
    write(tmp_path, "silent.py", SILENT)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: talker
            path: talker.py
            outputs: [lines]
            send_stdout_as: lines
          - id: sink
            path: silent.py
            inputs: {lines: talker/lines}
        """)
    name = f"stdout-{uuid.uuid4().hex[:8]}"
    run = start_run(tmp_path, name, "--log-dir", "logs")
    try:
        wait_for(lambda: ferry("top", name, "--once", "--json", "--no-taps").returncode == 0, run)
        echo = ferry("topic", "echo", f"{name}/talker/lines", "-n", "2")
        assert echo.returncode == 0, echo.stderr
        assert re.search(r"^  \"line \d+\\x0a\"$", echo.stdout, re.M), echo.stdout
        assert ferry("stop", name).returncode == 0
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


SWITCHING = """\
    import pyarrow as pa
    from ferry.flow import Node

    with Node() as node:
        sent = 0
        for event in node:
            if event["type"] == "INPUT":
                value = pa.array([sent]) if sent % 20 < 10 else pa.array([f"s{sent}"])
                node.send_output("out", value, {"frame": str(sent)})
                sent += 1
    """


def test_record_starts_a_new_file_when_the_type_changes_and_replay_reads_all(tmp_path):
    pyarrow_ipc = pytest.importorskip("pyarrow.ipc")
    write(tmp_path, "switching.py", SWITCHING)
    write(tmp_path, "silent.py", SILENT)
    write(tmp_path, "printer.py", PRINTER)
    write(tmp_path, "dataflow.yml", """\
        nodes:
          - id: source
            path: switching.py
            inputs: {tick: ferry/timer/millis/10}
            outputs: [out]
          - id: sink
            path: silent.py
            inputs: {values: source/out}
        """)
    name = f"rec-types-{uuid.uuid4().hex[:8]}"
    run = start_run(tmp_path, name, "--log-dir", "logs")
    try:
        wait_for(lambda: ferry("top", name, "--once", "--json", "--no-taps").returncode == 0, run)
        recorded = ferry("record", name, "-o", "rec", "-n", "30", cwd=tmp_path)
        assert recorded.returncode == 0, recorded.stderr
        assert ferry("stop", name).returncode == 0
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    files = sorted(p.name for p in (tmp_path / "rec").iterdir())
    assert "source__out.arrow" in files and "source__out.2.arrow" in files, files
    kinds = {}
    for file in files:
        table = pyarrow_ipc.open_file(tmp_path / "rec" / file).read_all()
        kinds[file] = str(table.schema.field("value").type)
    assert set(kinds.values()) <= {"list<item: int64>", "list<item: string>"}, kinds
    assert len(set(kinds.values())) == 2, kinds

    write(tmp_path, "replay.yml", f"""\
        nodes:
          - id: source
            path: {FERRY}
            args: replay rec
            outputs: [out]
          - id: printer
            path: printer.py
            inputs: {{out: source/out}}
        """)
    result = ferry("run", "replay.yml", "--log-dir", "replay-logs", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[source] replayed 30 messages" in result.stdout, result.stdout
    lines = (tmp_path / "replay-logs" / "printer.log").read_text().splitlines()
    values = [line for line in lines if line.startswith("out ")]
    numbers = [int(line.split()[1]) for line in values]
    assert numbers == sorted(numbers) and len(numbers) == 30, values
    for line, n in zip(values, numbers):
        expected = [n] if n % 20 < 10 else [f"s{n}"]
        assert line == f"out {n} {expected}", line
