"""The dataflow tools through the real `ferry` binary: `ferry graph` (Mermaid
and HTML)."""

import html.parser
import re
import subprocess
import textwrap
import xml.etree.ElementTree as ET

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
