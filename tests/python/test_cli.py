"""The `ferry` command's own surface: --version, the help line, and `ferry ps`
listing the dataflows that run on this machine, through the real binary."""

import json
import re
import subprocess
import textwrap
import time
import uuid

from test_dataflow import FERRY, REPO, environment, pytestmark  # noqa: F401 (the same skip)


def ferry(*args, cwd=REPO, timeout=60):
    return subprocess.run([FERRY, *args], cwd=cwd, env=environment(), capture_output=True,
                          text=True, timeout=timeout)


def test_version_flag_and_command_agree():
    flag = ferry("--version")
    command = ferry("version")
    assert flag.returncode == 0 and command.returncode == 0, flag.stderr + command.stderr
    assert re.fullmatch(r"ferry \d+\.\d+\.\d+\n", flag.stdout), flag.stdout
    assert flag.stdout == command.stdout


def test_help_names_both_dataflows_and_the_fleet():
    result = ferry("--help")
    assert result.returncode == 0
    first = result.stdout.splitlines()[0]
    assert "dataflow" in first.lower() and "gpu job" in first.lower(), first
    for command in ("run", "ps", "stop", "server", "agent", "submit", "jobs", "sim"):
        assert re.search(rf"^\s+{command}\b", result.stdout, re.M), command


def ps_json():
    result = ferry("ps", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_ps_lists_a_running_dataflow_and_forgets_it_once_stopped(tmp_path):
    (tmp_path / "ticker.py").write_text(textwrap.dedent("""\
        from ferry.flow import Node
        with Node() as node:
            for event in node:
                pass
        """))
    (tmp_path / "dataflow.yml").write_text(textwrap.dedent("""\
        nodes:
          - id: ticker
            path: ticker.py
            inputs: {tick: ferry/timer/millis/50}
          - id: idle
            path: ticker.py
            inputs: {tick: ferry/timer/millis/200}
        """))
    name = f"ps-{uuid.uuid4().hex[:8]}"
    run = subprocess.Popen([FERRY, "run", "--name", name, "--log-dir", str(tmp_path / "logs"),
                            "dataflow.yml"], cwd=tmp_path, env=environment(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        mine = None
        while time.monotonic() < deadline:
            mine = next((d for d in ps_json() if d.get("dataflow") == name), None)
            if mine and mine["phase"] == "running" and all(
                    n["state"] == "running" for n in mine["nodes"]):
                break
            time.sleep(0.1)
        assert mine and mine["phase"] == "running", mine
        assert mine["file"] == str(tmp_path / "dataflow.yml")
        assert [n["id"] for n in mine["nodes"]] == ["ticker", "idle"]
        assert all(n["pid"] > 0 and n["restarts"] == 0 for n in mine["nodes"]), mine
        assert mine["daemon_pid"] == run.pid
        table = ferry("ps")
        assert table.returncode == 0, table.stderr
        row = next(line for line in table.stdout.splitlines() if line.startswith(name))
        assert "running" in row and "2/2 running" in row and "dataflow.yml" in row, row
        # The alias.
        assert name in ferry("list").stdout

        stop = ferry("stop", name)
        assert stop.returncode == 0, stop.stderr
        run.wait(timeout=60)
        assert all(d.get("dataflow") != name for d in ps_json())
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
