"""`ferry agent --log-format json`: every line the agent writes is a JSON
object, and its task lines name the node, job id, task and attempt
(docs/fleet-agent.md#logs). A format other than text or json is refused."""

import json
import subprocess

import pytest

import harness


def test_json_log_lines_name_the_node_and_the_task(fleet):
    server = fleet.server("sqlite")
    agent = fleet.agent(server, "gpu-j", "1xH200", ["--log-format", "json", "--sync-wait-ms", "500"])
    job = server.admin("POST", "/v1/jobs", {"name": "three", "command": ["sh", "-c", "exit 3"]})["id"]
    server.wait_state(job, "FAILED")
    agent.stop()
    lines = [json.loads(line) for line in agent.proc.log().splitlines() if line.strip()]
    assert lines, agent.proc.log()
    for line in lines:
        assert line["component"] == "agent" and line["level"] in ("info", "warn", "error"), line
        assert line["ts"].endswith("Z"), line
    by_message = {line["msg"].split(" (")[0]: line for line in lines}
    registered = next(line for line in lines if line["msg"].startswith("registered node gpu-j"))
    assert registered["node"] == "gpu-j" and registered["pool"] == "default"
    assert registered["gpus"] == 1
    started = by_message["task started"]
    assert (started["job_id"], started["task"], started["attempt"]) == (job, 0, 1), started
    exited = by_message["task exited"]
    assert exited["job_id"] == job and exited["exit_code"] == 3 and exited["node"] == "gpu-j"


def test_text_is_the_default(fleet):
    server = fleet.server("sqlite")
    agent = fleet.agent(server, "gpu-t", "1xH200")
    agent.stop()
    first = agent.proc.log().splitlines()[0]
    assert first.startswith("ferry agent: registered node gpu-t"), first


def test_a_bad_log_format_is_refused(tmp_path):
    reason = harness.fleet_missing()
    if reason:
        pytest.skip(reason)
    done = subprocess.run([harness.FERRY, "agent", "--server", "http://127.0.0.1:1", "--token",
                           "t", "--ignore-nvml", "--work-dir", tmp_path, "--log-format", "yaml"],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 2, done.stderr
    assert "--log-format" in done.stderr and "yaml" in done.stderr, done.stderr
