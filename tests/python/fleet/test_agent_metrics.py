"""`ferry agent --metrics-listen`: a real Prometheus scrapes an agent that
reads its GPUs through a stand-in libnvidia-ml.so.1 (the agent's real dlopen
path, found through LD_LIBRARY_PATH), with the shipped alert rules loaded;
the test asks Prometheus' HTTP API for the GPU, task, log-shipping and
server-reachability series (docs/fleet-metrics.md, "Agent metrics"), injects
an XID error and watches the alert fire, and stops the server to see the
agent report it unreachable. Also: `promtool check metrics` accepts the text,
nothing listens without the flag, and bad flag values are refused."""

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

import harness

needs_prometheus = pytest.mark.skipif(harness.prometheus_missing() is not None,
                                      reason=str(harness.prometheus_missing()))
FAKE_NVML = Path(os.environ.get(
    "FERRY_FAKE_NVML", Path(harness.FERRY).resolve().parents[1] / "src/fleet/agent/fake_nvml.so"))
RULES = harness.REPO / "deploy" / "prometheus" / "ferry-rules.yml"

H200 = 'gpu="0",uuid="GPU-aaaa",model="H200",node="gpu-a"'
H100 = 'gpu="1",uuid="GPU-bbbb",model="H100",node="gpu-a"'


@pytest.fixture
def nvml_agent(fleet, tmp_path):
    """A server and an agent with the fake NVML and its metrics on a free port."""
    if not FAKE_NVML.exists():
        pytest.skip(f"{FAKE_NVML} is not built (the ferry_fake_nvml target)")
    nvml_dir = tmp_path / "nvml"
    nvml_dir.mkdir()
    (nvml_dir / "libnvidia-ml.so.1").symlink_to(FAKE_NVML)
    xid_file = tmp_path / "xids"
    xid_file.write_text("")
    env = dict(os.environ, LD_LIBRARY_PATH=str(nvml_dir), FAKE_NVML_XID_FILE=str(xid_file))
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    port = harness.free_port()
    agent = harness.Agent(server, "gpu-a", "1xA100", tmp_path,
                          ["--metrics-listen", f"127.0.0.1:{port}", "--sync-wait-ms", "500"],
                          env=env, ignore_nvml=False)
    fleet.agents.append(agent)
    agent.start().wait_ready()
    agent.metrics_port = port
    agent.xid_file = xid_file
    return server, agent


def scrape(port):
    reply = harness.request(port, "GET", "/metrics")
    assert reply.status == 200, reply
    return reply


def sample(text, series):
    """The value of the line `series value` in a scrape, or None."""
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == series:
            return float(value)
    return None


@needs_prometheus
def test_prometheus_scrapes_the_agent(nvml_agent, tmp_path):
    server, agent = nvml_agent
    # The node registered NVML's GPUs, not the declared 1xA100.
    node = server.admin("GET", "/v1/nodes/gpu-a")
    assert sorted(g["model"] for g in node["gpus"]) == ["H100", "H200"], node
    job = server.admin("POST", "/v1/jobs", {
        "name": "ticks", "gpus_per_task": 1,
        "command": ["sh", "-c", "while true; do echo tick; sleep 0.1; done"]})["id"]
    server.wait_state(job, "RUNNING")

    prometheus = harness.Prometheus(tmp_path, [{
        "job_name": "ferry-agent",
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [f"127.0.0.1:{agent.metrics_port}"]}],
    }], rule_files=[RULES]).start()
    try:
        value = prometheus.value
        harness.wait_for(lambda: value('up{job="ferry-agent"}') == 1, 60,
                         "Prometheus to scrape the agent")
        assert value(f"ferry_gpu_utilization_ratio{{{H200}}}") == 0.87
        assert value(f"ferry_gpu_utilization_ratio{{{H100}}}") == 0
        assert value(f"ferry_gpu_memory_used_bytes{{{H200}}}") == 40960 * 2**20
        assert value(f"ferry_gpu_memory_total_bytes{{{H200}}}") == 143771 * 2**20
        assert value(f"ferry_gpu_memory_free_bytes{{{H100}}}") == 81559 * 2**20
        assert value(f"ferry_gpu_power_watts{{{H200}}}") == 312.5
        assert value(f"ferry_gpu_temperature_celsius{{{H100}}}") == 33
        assert value("count(ferry_gpu_power_watts)") == 2
        assert value(f"ferry_gpu_xid_errors_total{{{H100}}}") == 0
        assert value('ferry_agent_nvml_available{job="ferry-agent"}') == 1
        assert value('ferry_agent_info{node="gpu-a",pool="default"}') == 1
        harness.wait_for(lambda: value("ferry_agent_tasks_running") == 1, 30,
                         "one task running in Prometheus")
        assert value("ferry_agent_server_reachable") == 1
        assert value("time() - ferry_agent_last_sync_success_timestamp_seconds") < 30
        assert value("ferry_agent_sync_failures_total") == 0
        assert value('sum(ferry_agent_sync_duration_seconds_count{mode="long_poll"})') >= 1
        harness.wait_for(lambda: (value("ferry_agent_log_shipped_bytes_total") or 0) > 0, 30,
                         "shipped task output in Prometheus")
        assert value("ferry_zero_copy_exports_total") is not None  # process telemetry
        assert value('ALERTS{alertname="FerryAgentGpuXidErrors"}') is None

        # An XID on the H100: the counter, the last code and the alert.
        with open(agent.xid_file, "a") as f:
            f.write("1 79\n")
        harness.wait_for(lambda: value(f"ferry_gpu_xid_errors_total{{{H100}}}") == 1, 30,
                         "the XID in Prometheus")
        assert value(f"ferry_gpu_last_xid{{{H100}}}") == 79
        assert value(f"ferry_gpu_xid_errors_total{{{H200}}}") == 0
        harness.wait_for(
            lambda: value('ALERTS{alertname="FerryAgentGpuXidErrors",alertstate="firing",'
                          'gpu="1",uuid="GPU-bbbb"}') == 1, 30, "the XID alert firing")

        # The server goes away: the agent keeps its task and says so.
        server.stop()
        harness.wait_for(lambda: value("ferry_agent_server_reachable") == 0, 30,
                         "the agent reporting the server unreachable")
        harness.wait_for(lambda: (value("ferry_agent_sync_failures_total") or 0) >= 1, 30,
                         "sync failures in Prometheus")
        # The task's output now waits on the node.
        text = harness.wait_for(
            lambda: (lambda t: t if (sample(t, "ferry_agent_log_unshipped_bytes") or 0) > 0
                     else None)(scrape(agent.metrics_port).body.decode()), 30,
            "unshipped task output")
        assert sample(text, "ferry_agent_log_oldest_unshipped_age_seconds") > 0
        assert sample(text, "ferry_agent_log_unshipped_chunks") >= 1
        assert sample(text, "ferry_agent_tasks_running") == 1
        assert agent.proc.running()
    finally:
        prometheus.stop()


@needs_prometheus
def test_agent_text_passes_promtool(nvml_agent):
    _, agent = nvml_agent
    reply = scrape(agent.metrics_port)
    assert reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    lint = subprocess.run([harness.PROMTOOL, "check", "metrics"], input=reply.body,
                          capture_output=True)
    assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()
    assert lint.stdout.decode().strip() == "", lint.stdout.decode()
    assert harness.request(agent.metrics_port, "GET", "/v1/jobs").status == 404
    # It listens on the metrics port only.
    assert harness.listening_ports(agent.proc.pid) == {agent.metrics_port}


def test_without_the_flag_nothing_listens(fleet):
    server = fleet.server("sqlite")
    agent = fleet.agent(server, "quiet", "1xH200")
    time.sleep(0.5)
    assert harness.listening_ports(agent.proc.pid) == set()
    assert "metrics on" not in agent.proc.log()


@pytest.mark.parametrize("address, why", [
    ("nonsense", "no port"),
    ("127.0.0.1:70000", "from 0 to 65535"),
    ("127.0.0.1:", "from 0 to 65535"),
    ("::1:9402", "brackets"),
    ("bad host:9402", "letters, digits"),
])
def test_bad_metrics_addresses_are_refused(address, why, tmp_path):
    reason = harness.fleet_missing()
    if reason:
        pytest.skip(reason)
    done = subprocess.run([harness.FERRY, "agent", "--server", "http://127.0.0.1:1", "--token",
                           "t", "--ignore-nvml", "--work-dir", tmp_path, "--metrics-listen",
                           address], capture_output=True, text=True, timeout=20)
    assert done.returncode == 2, done.stderr
    assert "--metrics-listen" in done.stderr and why in done.stderr, done.stderr


def test_a_busy_metrics_port_stops_the_agent(tmp_path):
    reason = harness.fleet_missing()
    if reason:
        pytest.skip(reason)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run([harness.FERRY, "agent", "--server", "http://127.0.0.1:1", "--token",
                               "t", "--ignore-nvml", "--work-dir", tmp_path, "--metrics-listen",
                               f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=20)
    assert done.returncode not in (0, 2), done.stderr
    assert f"cannot listen for metrics on 127.0.0.1:{port}" in done.stderr, done.stderr
