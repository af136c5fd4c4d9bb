"""The scheduler of `ferry server --scheduler-config` end to end, with real
agents: priority preemption with a grace period for checkpointing, a quota
raised at runtime (no restart), burst to a cloud pool of the `local` provider
and scale-down after the idle timeout, a provider that fails and then
recovers (circuit breaker), and a spot interruption that requeues a job."""

import json
import os
import urllib.parse

import harness

AGENT_ARGS = ["--cpus", "8", "--memory-mb", "16384", "--sync-wait-ms", "500"]


def write_config(path, text):
    """Replaces the config file atomically (the server may read it any time)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def scheduler_server(fleet, tmp_path, config_text):
    config = tmp_path / "scheduler.yaml"
    write_config(config, config_text)
    server = fleet.server("sqlite", extra_args=["--rate", "0", "--lease-ms", "3000",
                                                "--scheduler-config", config])
    return server, config


def submit(server, **spec):
    spec.setdefault("name", "sched-e2e")
    return server.admin("POST", "/v1/jobs", spec)["id"]


def wrote_line(path):
    return path.exists() and path.read_text().endswith("\n")


def processes_with(text):
    """Pids of live processes whose command line contains `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and harness.process_alive(int(entry)):
            found.append(int(entry))
    return found


def node_names(server):
    return [n["name"] for n in server.admin("GET", "/v1/nodes")["nodes"]]


def provider(server, name="local"):
    for p in server.admin("GET", "/v1/scheduler")["providers"]:
        if p["name"] == name:
            return p
    raise AssertionError(f"no provider {name}")


def test_priority_preemption_gives_the_victim_its_grace(fleet, tmp_path):
    server, _ = scheduler_server(fleet, tmp_path, "preemption:\n  priority: true\n  grace_s: 10\n")
    fleet.agent(server, "gpu-a", "1xH200", AGENT_ARGS)
    ckpt = tmp_path / "checkpoint"
    # Resumes from its checkpoint when it has one; else works until SIGTERM,
    # then writes the checkpoint and exits.
    victim = submit(server, gpus_per_task=1, priority=-10, preemptible=True, command=[
        "sh", "-c", f"if [ -f {ckpt} ]; then echo resumed; exit 0; fi; "
                    f"trap 'echo step-42 > {ckpt}.tmp && mv {ckpt}.tmp {ckpt}; exit 0' TERM; "
                    "echo working; while true; do sleep 0.1; done"])
    server.wait_state(victim, "RUNNING")
    high = submit(server, gpus_per_task=1, priority=100, command=["sh", "-c", "echo urgent"])

    harness.wait_for(lambda: wrote_line(ckpt), 20, "the victim to checkpoint on SIGTERM")
    assert ckpt.read_text() == "step-42\n"
    done = server.wait_state(high, "SUCCEEDED", timeout=20)
    assert [p["node"] for p in done["placement"]] == ["gpu-a"]

    job = server.wait_state(victim, "SUCCEEDED", timeout=20)
    assert job["attempt"] == 2, job
    first = job["attempts"][0]
    assert first["state"] == "PREEMPTED" and first["reason"] == "PREEMPTED_BY_PRIORITY", first
    events = server.admin("GET", f"/v1/jobs/{victim}/events")["events"]
    requested = [e for e in events if e["type"] == "preempt_requested"]
    assert len(requested) == 1 and f"for job {high}" in requested[0]["message"], requested
    states = [(e["state"], e["reason"]) for e in events if e["type"] == "state"]
    assert ("PENDING", "PREEMPTED_BY_PRIORITY") in states, states
    # The rerun found the checkpoint.
    out = "".join(c["data"] for c in server.logs(victim) if c["attempt"] == 2)
    assert "resumed" in out, out
    assert server.admin("GET", "/v1/scheduler")["preemptions_total"] >= 1


def test_raising_a_quota_at_runtime_starts_the_waiting_job(fleet, tmp_path):
    quota = "quotas:\n  - path: default\n    nominal_gpus: {n}\n    borrowing_limit: 0\n"
    server, config = scheduler_server(fleet, tmp_path, quota.format(n=1))
    fleet.agent(server, "gpu-a", "2xH200", AGENT_ARGS)
    release = tmp_path / "release"
    holder = submit(server, gpus_per_task=1, command=[
        "sh", "-c", f"while [ ! -f {release} ]; do sleep 0.1; done"])
    server.wait_state(holder, "RUNNING")
    waiting = submit(server, gpus_per_task=1, command=["sh", "-c", "echo second"])
    server.wait_job(waiting, lambda j: j["reason"] == "QUOTA_EXCEEDED", 15, "QUOTA_EXCEEDED")
    # Soft check at submission: a job larger than the quota could ever allow.
    r = server.call("POST", "/v1/jobs", {"name": "too-big", "command": ["true"],
                                         "gpus_per_task": 2})
    assert r.status == 422 and r.json()["errors"][0]["field"] == "quota", r

    write_config(config, quota.format(n=2))
    done = server.wait_state(waiting, "SUCCEEDED", timeout=20)
    assert done["attempt"] == 1
    status = server.admin("GET", "/v1/scheduler")
    assert status["config"]["quotas"][0]["nominal_gpus"] == 2 and status["config_error"] is None
    release.write_text("go\n")
    server.wait_state(holder, "SUCCEEDED", timeout=20)


CLOUD_CONFIG = """
pools:
  - name: onprem
    price_per_gpu_hour: 1.0
  - name: burst
    cloud: true
    provider: local
    price_per_gpu_hour: 3.0
    spot: {spot}
    provisioning_delay_s: 0.2
    max_nodes: 1
    idle_timeout_s: 2
    node: {{gpu_model: H100, gpus: 4, gpu_memory_mb: 81920, cpus: 4, memory_mb: 8192}}
providers:
  - name: local
    type: local
    max_attempts: 3
    backoff_base_s: 0.05
    backoff_max_s: 0.1
    breaker_failures: 3
    breaker_open_s: 1
    spot_interruptions_per_hour: {rate}
    params:
      name_prefix: {prefix}
      fail_next_provisions: "{fail}"
      stop_timeout_s: "2"
"""


def cloud_server(fleet, tmp_path, prefix, spot="false", rate=0, fail=0):
    server, _ = scheduler_server(fleet, tmp_path, CLOUD_CONFIG.format(
        spot=spot, rate=rate, prefix=prefix, fail=fail))
    fleet.agent(server, "gpu-a", "2xH200", AGENT_ARGS + ["--pool", "onprem"])
    return server


def test_burst_to_a_cloud_pool_then_scale_down(fleet, tmp_path):
    server = cloud_server(fleet, tmp_path, "bst")
    # Four GPUs in one task: on-prem has two, so only a cloud node fits it.
    job = submit(server, gpus_per_task=4, command=["sh", "-c", "echo on $FERRY_NODE"])
    done = server.wait_state(job, "SUCCEEDED", timeout=30)
    node = done["placement"][0]["node"]
    assert node.startswith("bst-burst-"), done["placement"]
    assert done["attempt"] == 1
    out = "".join(c["data"] for c in server.logs(job))
    assert f"on {node}" in out
    # Idle for idle_timeout_s: drained, deprovisioned, removed; its agent is gone.
    harness.wait_for(lambda: node not in node_names(server), 20, f"{node} to be scaled down")
    harness.wait_for(lambda: not processes_with(f"--name {node}"), 15,
                     f"the agent of {node} to exit")
    assert provider(server)["breaker"] == "closed"
    assert node_names(server) == ["gpu-a"]


def test_provider_that_fails_then_recovers(fleet, tmp_path):
    # Three transient failures: the first call fails after its 3 attempts and
    # opens the breaker (3 failures in a row); calls fail fast for
    # breaker_open_s, then a trial call succeeds and closes it.
    server = cloud_server(fleet, tmp_path, "rcv", fail=3)
    job = submit(server, gpus_per_task=3, command=["sh", "-c", "echo recovered"])
    done = server.wait_state(job, "SUCCEEDED", timeout=40)
    assert done["placement"][0]["node"].startswith("rcv-burst-"), done["placement"]
    p = provider(server)
    assert p["breaker_opens"] >= 1 and p["failures"] >= 1, p
    assert p["breaker"] == "closed", p
    assert p["retries"] >= 2, p


def test_spot_interruption_requeues_the_job_elsewhere(fleet, tmp_path):
    # One interruption per running spot node every 2 s on average.
    server = cloud_server(fleet, tmp_path, "spt", spot="true", rate=1800)
    server.admin("POST", "/v1/nodes/gpu-a:drain")
    # On the spot node it runs until interrupted; elsewhere it finishes.
    job = submit(server, gpus_per_task=2, max_retries=10, command=[
        "sh", "-c", 'case "$FERRY_NODE" in spt-*) while true; do sleep 0.1; done;; esac; '
                    "echo finished on $FERRY_NODE"])
    server.wait_job(job, lambda j: j["state"] in ("ADMITTED", "RUNNING")
                    and j["placement"][0]["node"].startswith("spt-"), 30,
                    "placement on a spot node")
    server.admin("POST", "/v1/nodes/gpu-a:undrain")
    done = server.wait_state(job, "SUCCEEDED", timeout=40)
    assert done["placement"][0]["node"] == "gpu-a", done["placement"]
    interrupted = [a for a in done["attempts"] if a["reason"] == "SPOT_INTERRUPTED"]
    assert interrupted and all(a["state"] == "LOST" for a in interrupted), done["attempts"]
    assert not any(a["reason"] == "NODE_LOST" for a in done["attempts"]), done["attempts"]
    events = server.admin("GET", f"/v1/jobs/{job}/events?limit=1000")["events"]
    assert ("PENDING", "SPOT_INTERRUPTED") in [(e["state"], e["reason"]) for e in events
                                                 if e["type"] == "state"]
    # The interrupted node is gone, with its agent and the task it ran.
    spot_nodes = {a["placement"][0]["node"] for a in interrupted if a["placement"]}
    for node in spot_nodes:
        assert node not in node_names(server)
        harness.wait_for(lambda: not processes_with(f"--name {node}"), 15,
                         f"the agent of {node} to be gone")
