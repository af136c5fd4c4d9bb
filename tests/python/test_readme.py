"""The README's five-minute tour, run as written: every code block of the
tour section, in order, from the checkout's root, so that the tour cannot
rot. Shell blocks run verbatim in one bash session; Python blocks run in
.venv's interpreter inside that session; a block that shows a file of the
repository (the paragraph before it names the file) must be that file; the
example node program runs as the filter of the sensor dataflow."""

import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FERRY = ROOT / "build" / "release" / "bin" / "ferry"
PYTHON = ROOT / ".venv" / "bin" / "python"

needs_build = pytest.mark.skipif(
    not FERRY.exists() or not PYTHON.exists(),
    reason="the tour runs after `make build` (build/release/bin/ferry and .venv)")


class Block:
    def __init__(self, language, text, before, line):
        self.language = language
        self.text = text
        self.before = before  # the prose between the previous block and this one
        self.line = line

    def shown_file(self):
        """The repository file the preceding prose names right before the block."""
        names = re.findall(r"`([\w./-]+\.\w+)`", self.before)
        for name in reversed(names):
            if (ROOT / name).is_file():
                return name
        return None

    def is_node_program(self):
        return self.language == "python" and self.text.startswith("from ferry.flow import Node")


def tour_blocks():
    text = README.read_text()
    start = text.index("## A five-minute tour")
    end = text.index("\n## ", start + 1)
    section = text[start:end]
    first_line = text[:start].count("\n") + 1
    blocks = []
    position = 0
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", section, re.S | re.M):
        blocks.append(Block(match.group(1), match.group(2), section[position:match.start()],
                            first_line + section[:match.start()].count("\n")))
        position = match.end()
    return blocks


def test_the_tour_has_the_blocks_it_promises():
    languages = [block.language for block in tour_blocks()]
    for language in ("sh", "python", "cpp", "yaml"):
        assert language in languages, f"the tour lost its {language} block"
    # Every block has a language, so that this test knows what to do with it.
    assert all(languages), languages


def test_files_shown_in_the_tour_are_the_repository_files():
    shown = [block for block in tour_blocks() if block.language in ("cpp", "yaml")]
    assert shown
    for block in shown:
        name = block.shown_file()
        assert name, f"README.md:{block.line}: no repository file named before the block"
        assert (ROOT / name).read_text() == block.text, (
            f"README.md:{block.line}: the block differs from {name}; copy the file into the README")


def tour_script():
    """One bash script of the tour's shell and Python blocks."""
    lines = ["set -euo pipefail", f"cd {shlex_quote(ROOT)}"]
    for block in tour_blocks():
        if block.language == "sh":
            lines += [f"echo '>>> README.md:{block.line}'", block.text]
        elif block.language == "python" and not block.is_node_program():
            lines += [f"echo '>>> README.md:{block.line}'",
                      f"{shlex_quote(PYTHON)} - <<'FERRY_TOUR_PY'", block.text.rstrip("\n"),
                      "FERRY_TOUR_PY"]
    return "\n".join(lines) + "\n"


def shlex_quote(path):
    return shlex.quote(str(path))


@needs_build
def test_the_tour_runs_as_written(tmp_path):
    script = tmp_path / "tour.sh"
    script.write_text(tour_script())
    env = dict(os.environ)
    env.pop("FERRY_TOKEN_FILE", None)
    env.pop("FERRY_TOKEN", None)
    env.pop("FERRY_SERVER", None)
    env["TMPDIR"] = str(tmp_path)  # the tour's mktemp -d directories land here
    process = subprocess.Popen(["bash", str(script)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail("the tour did not finish within 300 s:\n" + output[-6000:])
    finally:
        # Whatever the tour left running in the background (server, agent).
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert process.returncode == 0, output[-8000:]
    # What the tour says each step shows.
    assert re.search(r"^ferry \d+\.\d+\.\d+$", output, re.M), output[:2000]
    assert "bytes copied: 0" in output  # the C++ round trip
    assert re.search(r"^cpu: ", output, re.M)  # ferry.devices() printed as lines
    assert "sink: " in output and "all within" in output  # the sensor dataflow
    assert "rank 0 done" in output and "rank 1 done" in output  # the gang's logs
    assert re.search(r"\[task 1 stdout\] rank 1 step 3/3", output)  # whole prefixed lines
    assert "CANCELLED" in output
    assert re.search(r"^code: examples/fleet -> sha256:[0-9a-f]{12} ", output, re.M)  # --workdir
    assert "rank 0 step 1/1" in output  # the job that brought its code ran it
    assert "fair_share" in output  # the simulator's comparison table


@needs_build
def test_the_tours_node_program_filters_the_sensor_dataflow(tmp_path):
    node = next(block for block in tour_blocks() if block.is_node_program())
    for name in ("sensor.py", "sink.py", "dataflow.yml"):
        shutil.copy(ROOT / "examples" / "sensor" / name, tmp_path / name)
    (tmp_path / "filter.py").write_text(node.text)
    result = subprocess.run([str(FERRY), "run", "--log-dir", str(tmp_path / "logs"),
                             "dataflow.yml"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    # The sink exits 1 when a glitch (999 degrees) got through the filter.
    assert "all within" in result.stdout, result.stdout
