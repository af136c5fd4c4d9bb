"""Slurm pools end to end: `ferry server` with a `slurm` provider over a real
private Slurm 22.05 cluster (scripts/slurm-test-cluster: one node, four fake
GPUs) next to Ferry agents. Ferry registers the Slurm node, places jobs on
it under its own quotas and policies, submits them with sbatch or through
slurmrestd, mirrors their state, collects their logs, cancels them, and
survives a slurmd crash, a slurmctld outage and its own kill -9 between a
Slurm submission and its record."""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import harness

REPO = Path(__file__).resolve().parents[3]
CLUSTER = REPO / "scripts" / "slurm-test-cluster"
AGENT_ARGS = ["--pool", "onprem", "--cpus", "8", "--memory-mb", "16384", "--sync-wait-ms", "500"]


class SlurmCluster:
    """A private Slurm cluster for one test, stopped by PID afterwards."""

    def __init__(self, slurmd_timeout=None, nodes=1):
        # Socket paths must be short: not under pytest's tmp dirs.
        self.dir = tempfile.mkdtemp(prefix="fyslurm-", dir="/tmp")
        os.rmdir(self.dir)
        self.env = {}
        self.slurmd_timeout = slurmd_timeout
        self.nodes = nodes

    def start(self):
        env = dict(os.environ, SLURM_TEST_OWNER_PID=str(os.getpid()))
        if self.slurmd_timeout:
            env["SLURM_TEST_SLURMD_TIMEOUT"] = str(self.slurmd_timeout)
        env["SLURM_TEST_NODES"] = str(self.nodes)
        done = subprocess.run([str(CLUSTER), "start", self.dir], capture_output=True, text=True,
                              timeout=120, env=env)
        if done.returncode == 3:
            pytest.skip("Slurm is not installed (scripts/slurm-test-cluster exited 3): "
                        + done.stderr.strip()[-300:])
        assert done.returncode == 0, f"slurm-test-cluster start failed:\n{done.stderr[-3000:]}"
        for line in done.stdout.splitlines():
            key, _, value = line.partition("=")
            self.env[key] = value
        names = [f"ferry-node{i}" for i in range(1, self.nodes + 1)]
        assert self.env.get("SLURM_TEST_NODES") == str(self.nodes), self.env
        assert self.env.get("SLURM_TEST_NODE_NAMES") == ",".join(names), self.env
        return self

    def daemon(self, action, name, signal=None):
        args = [str(CLUSTER), action, self.dir, name] + ([signal] if signal else [])
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{action} {name}: {done.stderr[-2000:]}"

    def tool(self, *args, timeout=30):
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, SLURM_CONF=self.env["SLURM_CONF"]))

    def jobs(self):
        done = self.tool("squeue", "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["jobs"]

    def stop(self):
        subprocess.run([str(CLUSTER), "stop", self.dir], capture_output=True, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def slurm():
    if os.getuid() != 0:
        pytest.skip("the Slurm test cluster needs root (slurmd runs jobs as their users)")
    clusters = []

    def make(**kw):
        cluster = SlurmCluster(**kw)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        cluster.stop()


def config_text(cluster, endpoint="cli", extra_params="", extra=""):
    params = {"endpoint": endpoint, "slurm_conf": cluster.env["SLURM_CONF"],
              "sync_interval_s": "0.2"}
    param_lines = "".join(f"      {k}: {json.dumps(v)}\n" for k, v in params.items())
    return (
        "providers:\n"
        "  - name: hpc\n"
        "    type: slurm\n"
        "    breaker_failures: 2\n"
        "    breaker_open_s: 2\n"
        "    params:\n" + param_lines + extra_params +
        "pools:\n"
        "  - name: hpc\n"
        "    provider: hpc\n"
        "    price_per_gpu_hour: 1.0\n"
        "    node: {gpu_model: H200, gpus: 4}\n"
        "    slurm:\n"
        f"      partition: {cluster.env['SLURM_TEST_PARTITION']}\n"
        "  - name: onprem\n"
        "pool_sets:\n"
        "  - {name: any, pools: [onprem, hpc]}\n"
        "  - {name: slurm, pools: [hpc]}\n"
        "  - {name: agents, pools: [onprem]}\n" + extra)


def start_server(fleet, tmp_path, text, store_url=None):
    config = tmp_path / "scheduler.yaml"
    config.write_text(text)
    return fleet.server("sqlite", store_url=store_url,
                        extra_args=["--rate", "0", "--lease-ms", "4000", "--stop-grace-ms",
                                    "3000", "--scheduler-config", config])


def slurm_node(server, timeout=30):
    def ready():
        r = server.call("GET", "/v1/nodes/hpc-ferry-node1")
        return r.json() if r.status == 200 and r.json()["state"] == "READY" else None

    return harness.wait_for(ready, timeout, "Slurm node hpc-ferry-node1 READY in Ferry")


def submit(server, token=None, **spec):
    spec.setdefault("name", "slurm-e2e")
    r = server.call("POST", "/v1/jobs", spec, token=token)
    assert r.status == 201, r
    return r.json()["id"]


def events(server, job_id):
    return server.admin("GET", f"/v1/jobs/{job_id}/events?limit=500")["events"]


def log_text(server, job_id, task=None, stream="stdout"):
    return "".join(c["data"] for c in server.logs(job_id)
                   if c["stream"] == stream and (task is None or c["task"] == task))


def slurm_cluster_status(server):
    return server.admin("GET", "/v1/scheduler")["slurm_clusters"][0]


def test_slurm_node_gang_logs_and_capacity_in_ferrys_view(fleet, slurm, tmp_path):
    cluster = slurm()
    server = start_server(fleet, tmp_path, config_text(cluster))
    node = slurm_node(server)
    assert node["pool"] == "hpc"
    assert node["labels"]["resource_manager"] == "slurm"
    assert node["labels"]["slurm_node"] == "ferry-node1"
    assert [g["model"] for g in node["gpus"]] == ["H200"] * 4
    assert not any(g["external"] for g in node["gpus"])

    # A gang of two tasks of one GPU each: one Slurm job, one node, two tasks.
    script = ("echo task=$FERRY_TASK_INDEX of $FERRY_TASK_COUNT rank=$RANK "
              "cuda=$CUDA_VISIBLE_DEVICES job=$FERRY_JOB_ID master=$MASTER_ADDR; "
              "echo to-stderr >&2")
    job_id = submit(server, command=["/bin/sh", "-c", script], tasks=2, gpus_per_task=1,
                    gpu_models=["H200"], pool_set="slurm")
    job = server.wait_state(job_id, "SUCCEEDED", timeout=60)
    assert job["reason"] == "EXITED_ZERO"
    lines = sorted(log_text(server, job_id).splitlines())
    assert len(lines) == 2, lines
    assert lines[0].startswith("task=0 of 2 rank=0 cuda=")
    assert lines[1].startswith("task=1 of 2 rank=1 cuda=")
    # Each task has its own GPU (Slurm's CUDA_VISIBLE_DEVICES, sliced per task).
    devices = [line.split("cuda=")[1].split()[0] for line in lines]
    assert len(set(devices)) == 2 and all(d in "0123" for d in devices), devices
    assert f"job={job_id}" in lines[0]
    assert log_text(server, job_id, stream="stderr").count("to-stderr") == 2
    timeline = events(server, job_id)
    notes = [e for e in timeline if e["type"] == "slurm_submitted"]
    assert len(notes) == 1 and "as job" in notes[0]["message"], notes
    # The task events name the Slurm controller, not an agent.
    task_events = [e for e in timeline if e["type"] in ("task_started", "task_exited")]
    assert len(task_events) == 4, timeline
    assert {e["actor"] for e in task_events} == {"slurm:hpc"}, task_events
    slurm_id = int(notes[0]["message"].split("as job ")[1].split()[0])
    mine = [j for j in cluster.jobs() if j["job_id"] == slurm_id]
    assert mine and mine[0]["comment"] == f"ferry:hpc:{job_id}:1"
    assert mine[0]["job_state"] == "COMPLETED"
    # The model asked for went to Slurm as the GRES type; both tasks on one node.
    assert "gpu:h200:2" in mine[0]["tres_per_node"], mine[0]["tres_per_node"]
    assert mine[0]["node_count"] == 1 and mine[0]["tasks_per_node"] == 2

    # A task's exit code comes back through the wrapper's file.
    failing = submit(server, command=["/bin/sh", "-c", "echo bye; exit 3"], gpus_per_task=1,
                     pool_set="slurm")
    failed = server.wait_state(failing, "FAILED", timeout=60)
    assert failed["reason"] == "EXITED_NONZERO" and failed["exit_code"] == 3, failed
    assert log_text(server, failing) == "bye\n"

    # A job outside Ferry takes three GPUs: Ferry sees them as external and
    # never places a 2-GPU job there, while a 1-GPU job still fits.
    outside = cluster.tool("sbatch", "--parsable", "--gpus-per-node=3", f"--chdir={tmp_path}",
                           "--output=/dev/null", "--wrap", "sleep 120")
    assert outside.returncode == 0, outside.stderr
    outside_id = int(outside.stdout.strip().split(";")[0])

    def external_count():
        gpus = server.admin("GET", "/v1/nodes/hpc-ferry-node1")["gpus"]
        return sum(g["external"] for g in gpus)

    harness.wait_for(lambda: external_count() == 3, 20, "3 GPUs external in Ferry's view")
    pools = {p["name"]: p for p in server.admin("GET", "/v1/pools")["pools"]}
    assert pools["hpc"]["gpus_free"] == 1
    listed = harness.cli(server, "nodes")
    assert listed.returncode == 0, listed.stderr
    row = [line.split() for line in listed.stdout.splitlines() if "hpc-ferry-node1" in line][0]
    assert row[1:5] == ["hpc", "READY", "4", "1"], listed.stdout  # POOL STATE GPUS FREE
    big = submit(server, command=["/bin/true"], gpus_per_task=2, pool_set="slurm")
    small = submit(server, command=["/bin/true"], gpus_per_task=1, pool_set="slurm")
    server.wait_state(small, "SUCCEEDED", timeout=60)
    pending = server.wait_job(big, lambda j: j["reason"] == "NO_CAPACITY", 20, "NO_CAPACITY")
    assert pending["state"] == "PENDING"  # never handed to Slurm while it cannot fit
    assert cluster.tool("scancel", str(outside_id)).returncode == 0
    server.wait_state(big, "SUCCEEDED", timeout=60)
    harness.wait_for(lambda: external_count() == 0, 20, "the outside GPUs free again")

    # What only Ferry's agents stage fails clearly, never reaching Slurm.
    staged = submit(server, command=["/bin/true"], gpus_per_task=1, pool_set="slurm",
                    max_retries=0, outputs={"uri": f"file://{tmp_path}/out/"},
                    code={"git": "https://example.com/r.git", "commit": "a" * 40})
    failed = server.wait_state(staged, ["FAILED", "SUCCEEDED"], timeout=60)
    assert failed["state"] == "FAILED" and failed["reason"] == "LAUNCH_FAILED", failed
    said = [e["message"] for e in events(server, staged) if e["type"] == "launch_failed"]
    assert said and "does not stage code, outputs yet" in said[0], said
    assert not [j for j in cluster.jobs() if j["comment"] == f"ferry:hpc:{staged}:1"]

    status = slurm_cluster_status(server)
    assert status["reachable"] and status["breaker"] == "closed"
    assert status["submitted"] == 4 and status["pools"] == ["hpc"]
    assert harness.metric(server, 'ferry_slurm_submitted_total{provider="hpc"}') == 4
    assert harness.metric(server, 'ferry_slurm_reachable{provider="hpc"}') == 1
    assert harness.metric(server, 'ferry_provider_breaker_state{provider="hpc",state="closed"}') == 1
    assert harness.metric(server, 'ferry_provider_nodes{provider="hpc",state="registered"}') == 1


def test_mixed_fleet_one_quota_across_agents_and_slurm(fleet, slurm, tmp_path):
    cluster = slurm()
    quota = ("quotas:\n"
             "  - {path: default, nominal_gpus: 4, borrowing_limit: 0}\n")
    server = start_server(fleet, tmp_path, config_text(cluster, extra=quota))
    slurm_node(server)
    fleet.agent(server, "agent-1", gpus="2xH200", extra_args=AGENT_ARGS)
    flag = tmp_path / "release"
    hold = ["/bin/sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.1; done; echo done"]
    # Bin-packing fills the agent's 2 GPUs first, then the Slurm node.
    first = submit(server, command=hold, gpus_per_task=2, pool_set="any")
    second = submit(server, command=hold, gpus_per_task=2, pool_set="any")
    server.wait_state(first, "RUNNING", timeout=60)
    server.wait_state(second, "RUNNING", timeout=60)
    nodes = {server.job(j)["placement"][0]["node"] for j in (first, second)}
    assert nodes == {"agent-1", "hpc-ferry-node1"}, nodes
    # The tenant's 4 GPUs are in use on two resource managers: a third job
    # waits for the quota although the Slurm node has 2 GPUs free.
    third = submit(server, command=["/bin/true"], gpus_per_task=2, pool_set="any")
    waiting = server.wait_job(third, lambda j: j["reason"] == "QUOTA_EXCEEDED", 20,
                              "QUOTA_EXCEEDED")
    assert waiting["state"] == "PENDING"
    flag.write_text("go")
    for job in (first, second, third):
        server.wait_state(job, "SUCCEEDED", timeout=60)
    assert "done" in log_text(server, first) and "done" in log_text(server, second)


def test_fair_share_counts_slurm_and_agent_usage_together(fleet, slurm, tmp_path):
    """Fair-share order over one view of both resource managers: acme holds
    1 GPU on the agent and 2 on Slurm (3), beta 2 on the agent. Counting the
    agent alone, acme would be the under-served tenant; with its Slurm job
    counted, beta is, and beta's younger job gets the freed Slurm GPUs."""
    cluster = slurm()
    server = start_server(fleet, tmp_path, config_text(cluster, extra="ordering: fair_share\n"))
    slurm_node(server)
    fleet.agent(server, "agent-1", gpus="4xH200", extra_args=AGENT_ARGS)
    acme = server.create_user("ann", tenant="acme")
    beta = server.create_user("bob", tenant="beta")
    gamma = server.create_user("gus", tenant="gamma")

    def holder(name):
        flag = tmp_path / f"release-{name}"
        return flag, ["/bin/sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.1; done"]

    flags = {}
    held = []
    for name, token, gpus, pool_set in (("acme-agent", acme, 1, "agents"),
                                        ("acme-slurm", acme, 2, "slurm"),
                                        ("beta-agent", beta, 2, "agents"),
                                        ("gamma-slurm", gamma, 2, "slurm")):
        flags[name], command = holder(name)
        job = submit(server, token=token, name=name, command=command, gpus_per_task=gpus,
                     pool_set=pool_set)
        server.wait_state(job, "RUNNING", timeout=60)
        held.append(job)
    where = {server.job(j)["name"]: server.job(j)["placement"][0]["node"] for j in held}
    assert where == {"acme-agent": "agent-1", "acme-slurm": "hpc-ferry-node1",
                     "beta-agent": "agent-1", "gamma-slurm": "hpc-ferry-node1"}, where

    # Full for 2-GPU jobs (1 GPU left on the agent): both wait, acme's first.
    older = submit(server, token=acme, name="acme-next", command=["/bin/true"],
                   gpus_per_task=2, pool_set="any")
    server.wait_job(older, lambda j: j["reason"] == "NO_CAPACITY", 20, "NO_CAPACITY")
    flags["beta-next"], command = holder("beta-next")
    younger = submit(server, token=beta, name="beta-next", command=command,
                     gpus_per_task=2, pool_set="any")
    server.wait_job(younger, lambda j: j["reason"] == "NO_CAPACITY", 20, "NO_CAPACITY")

    flags["gamma-slurm"].write_text("go")
    server.wait_state(held[3], "SUCCEEDED", timeout=60)
    placed = server.wait_state(younger, "RUNNING", timeout=60)
    assert placed["placement"][0]["node"] == "hpc-ferry-node1", placed["placement"]
    waiting = server.job(older)
    assert waiting["state"] == "PENDING" and waiting["reason"] == "NO_CAPACITY", waiting
    for flag in flags.values():
        flag.write_text("go")
    server.wait_state(older, "SUCCEEDED", timeout=60)
    for job in held + [younger]:
        server.wait_state(job, "SUCCEEDED", timeout=60)


def test_pending_reason_from_slurm_then_cancel_with_sigterm(fleet, slurm, tmp_path):
    cluster = slurm()
    server = start_server(fleet, tmp_path, config_text(cluster, endpoint="unix:" +
                                                        cluster.env["SLURMRESTD_SOCKET"]))
    slurm_node(server)
    partition = cluster.env["SLURM_TEST_PARTITION"]
    # The partition is down: Slurm takes the job but holds it.
    assert cluster.tool("scontrol", "update", f"partition={partition}",
                        "state=down").returncode == 0
    trap = ("trap 'echo got-term; exit 0' TERM; echo started; "
            "while :; do sleep 0.1; done")
    job_id = submit(server, command=["/bin/sh", "-c", trap], gpus_per_task=1, pool_set="slurm")
    held = server.wait_job(job_id, lambda j: j["reason"] == "POLICY", 30,
                           "Slurm's pending reason")
    assert held["state"] == "ADMITTED"
    pending = [e for e in events(server, job_id) if e["type"] == "slurm_pending"]
    assert pending and "PartitionDown" in pending[-1]["message"], pending
    assert cluster.tool("scontrol", "update", f"partition={partition}",
                        "state=up").returncode == 0
    server.wait_state(job_id, "RUNNING", timeout=30)
    harness.wait_for(lambda: "started" in log_text(server, job_id), 20, "the task's first line")
    r = server.call("POST", f"/v1/jobs/{job_id}:cancel")
    assert r.status == 200, r
    harness.wait_for(lambda: "got-term" in log_text(server, job_id), 20,
                     "the task saw SIGTERM and said so")
    assert server.job(job_id)["state"] == "CANCELLED"

    def slurm_state():
        return [j["job_state"] for j in cluster.jobs()
                if j["comment"] == f"ferry:hpc:{job_id}:1"]

    harness.wait_for(lambda: slurm_state() and slurm_state()[0] != "RUNNING", 30,
                     "the Slurm job ended")
    # The GPU is Ferry's to give again.
    harness.wait_for(lambda: server.admin("GET", "/v1/pools")["pools"][0]["gpus_free"] == 4,
                     20, "the GPU back")


def test_slurmd_killed_requeues_the_job_on_an_agent(fleet, slurm, tmp_path):
    cluster = slurm(slurmd_timeout=5)
    server = start_server(fleet, tmp_path, config_text(cluster))
    slurm_node(server)
    runs = tmp_path / "runs"
    script = f"echo run >> {runs}; sleep 600"
    job_id = submit(server, command=["/bin/sh", "-c", script], gpus_per_task=1, pool_set="any",
                    max_retries=2)
    job = server.wait_state(job_id, "RUNNING", timeout=60)
    assert job["placement"][0]["node"] == "hpc-ferry-node1"
    fleet.agent(server, "agent-1", gpus="1xH200", extra_args=AGENT_ARGS)
    cluster.daemon("kill", "slurmd")
    # Slurm declares the node DOWN (NODE_FAIL for the job); Ferry loses the
    # attempt and its retry rules run attempt 2 on the agent.
    job = server.wait_job(job_id, lambda j: j["attempt"] == 2 and j["state"] == "RUNNING", 90,
                          "attempt 2 running")
    assert job["placement"][0]["node"] == "agent-1"
    lost = [a for a in job["attempts"] if a["attempt"] == 1][0]
    assert lost["state"] == "LOST", lost
    node = server.admin("GET", "/v1/nodes/hpc-ferry-node1")
    assert node["state"] == "LOST"
    # slurmd back: the node returns to Ferry.
    cluster.daemon("restart", "slurmd")
    slurm_node(server, timeout=90)
    server.call("POST", f"/v1/jobs/{job_id}:cancel")


def test_slurmctld_down_opens_the_breaker_and_nothing_is_lost(fleet, slurm, tmp_path):
    cluster = slurm()
    server = start_server(fleet, tmp_path, config_text(
        cluster, extra_params="      unreachable_requeue_s: \"3\"\n      timeout_s: \"3\"\n"))
    slurm_node(server)
    flag = tmp_path / "release"
    hold = ["/bin/sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.1; done; echo finished"]
    running = submit(server, command=hold, gpus_per_task=1, pool_set="slurm")
    server.wait_state(running, "RUNNING", timeout=60)
    # A clean stop (slurmctld saves its state; a SIGKILL within seconds of a
    # job's start loses it in Slurm itself, which then cancels the job).
    cluster.daemon("kill", "slurmctld", "TERM")
    harness.wait_for(lambda: slurm_cluster_status(server)["breaker"] != "closed", 30,
                     "the circuit breaker open")
    assert harness.metric(server, 'ferry_slurm_reachable{provider="hpc"}') == 0
    assert harness.metric(server, 'ferry_provider_breaker_opens_total{provider="hpc",type="slurm"}') >= 1
    node = server.admin("GET", "/v1/nodes/hpc-ferry-node1")
    assert node["state"] == "READY" and "unreachable" in node["unavailable"], node
    # New work goes to the agents; the job in Slurm stays RUNNING in Ferry.
    fleet.agent(server, "agent-1", gpus="1xH200", extra_args=AGENT_ARGS)
    elsewhere = submit(server, command=["/bin/true"], gpus_per_task=1, pool_set="any")
    done = server.wait_state(elsewhere, "SUCCEEDED", timeout=60)
    assert done["placement"][0]["node"] == "agent-1"
    time.sleep(2)
    assert server.job(running)["state"] == "RUNNING"
    # The task finishes while slurmctld is away; it comes back with its state.
    flag.write_text("go")
    cluster.daemon("restart", "slurmctld")
    job = server.wait_state(running, "SUCCEEDED", timeout=90)
    assert job["attempt"] == 1
    assert "finished" in log_text(server, running)
    harness.wait_for(lambda: slurm_cluster_status(server)["breaker"] == "closed", 30,
                     "the circuit breaker closed")
    assert slurm_cluster_status(server)["reachable"]


def test_server_killed_between_slurm_submit_and_record_runs_the_job_once(fleet, slurm,
                                                                         tmp_path):
    cluster = slurm()
    store = f"sqlite:{tmp_path}/crash.db"
    config = tmp_path / "scheduler.yaml"
    config.write_text(config_text(cluster,
                                  extra_params="      fault_kill_after_submit: \"1\"\n"))
    args = ["--rate", "0", "--lease-ms", "4000", "--scheduler-config", config]
    server = fleet.server("sqlite", store_url=store, extra_args=args)
    slurm_node(server)
    runs = tmp_path / "runs"
    job_id = submit(server, command=["/bin/sh", "-c", f"echo run >> {runs}; sleep 2"],
                    gpus_per_task=1, pool_set="slurm")
    # The server dies right after Slurm accepted the job, before any record.
    harness.wait_for(lambda: not server.proc.running(), 60, "the server killed by the fault")
    tagged = [j for j in cluster.jobs() if j["comment"] == f"ferry:hpc:{job_id}:1"]
    assert len(tagged) == 1, tagged
    # A new server on the same store (without the fault) adopts the Slurm job.
    config.write_text(config_text(cluster))
    again = harness.Server(store, tmp_path, args, name=server.name)  # same data dir, tokens
    fleet.servers.append(again)
    again.start()
    job = again.wait_state(job_id, "SUCCEEDED", timeout=90)
    assert job["attempt"] == 1
    tagged = [j for j in cluster.jobs() if j["comment"].startswith(f"ferry:hpc:{job_id}:")]
    assert len(tagged) == 1, tagged  # never submitted twice
    assert runs.read_text() == "run\n"


def test_ferry_preempts_a_slurm_job_with_its_grace_then_requeues_it(fleet, slurm, tmp_path):
    cluster = slurm()
    preemption = "preemption: {priority: true, grace_s: 2}\n"
    server = start_server(fleet, tmp_path, config_text(cluster, extra=preemption))
    slurm_node(server)
    saved = tmp_path / "checkpoint"
    victim_script = (f"trap 'echo checkpoint > {saved}; exit 0' TERM; echo working; "
                     "while :; do sleep 0.1; done")
    victim = submit(server, command=["/bin/sh", "-c", victim_script], gpus_per_task=4,
                    pool_set="slurm", preemptible=True, priority=-10, max_retries=2)
    server.wait_state(victim, "RUNNING", timeout=60)
    harness.wait_for(lambda: "working" in log_text(server, victim), 20, "the victim working")
    urgent = submit(server, command=["/bin/sh", "-c", "echo urgent"], gpus_per_task=4,
                    pool_set="slurm", priority=100)
    # SIGTERM reaches the victim in Slurm; it checkpoints; its attempt ends
    # PREEMPTED and the urgent job runs on the GPUs it gave back.
    done = server.wait_state(urgent, "SUCCEEDED", timeout=90)
    assert done["placement"][0]["node"] == "hpc-ferry-node1"
    assert saved.read_text() == "checkpoint\n"
    job = server.job(victim)
    first = [a for a in job["attempts"] if a["attempt"] == 1][0]
    assert first["state"] == "PREEMPTED" and first["reason"] == "PREEMPTED_BY_PRIORITY", first
    assert first["preempted_for"] == urgent
    # Attempt 2 runs in Slurm again, as a new Slurm job.
    server.wait_job(victim, lambda j: j["attempt"] == 2 and j["state"] == "RUNNING", 60,
                    "attempt 2 running")
    tags = sorted(j["comment"] for j in cluster.jobs() if j["comment"].startswith(
        f"ferry:hpc:{victim}:"))
    assert tags == [f"ferry:hpc:{victim}:1", f"ferry:hpc:{victim}:2"], tags
    server.call("POST", f"/v1/jobs/{victim}:cancel")


def test_slurm_preemption_requeues_the_attempt_in_ferry(fleet, slurm, tmp_path):
    """Slurm's own preemption: a job of the cluster's `urgent` partition (a
    higher PriorityTier, PreemptMode=CANCEL) takes the node from Ferry's job.
    The attempt ends PREEMPTED_BY_RESOURCE_MANAGER and is requeued; attempt 2
    waits in Slurm's queue behind the other job, then runs."""
    cluster = slurm()
    server = start_server(fleet, tmp_path, config_text(cluster))
    slurm_node(server)
    script = 'if [ "$FERRY_ATTEMPT" = 1 ]; then echo first; sleep 600; fi; echo second'
    job_id = submit(server, command=["/bin/sh", "-c", script], gpus_per_task=4, pool_set="slurm",
                    max_retries=2)
    server.wait_state(job_id, "RUNNING", timeout=60)
    harness.wait_for(lambda: "first" in log_text(server, job_id), 20, "attempt 1 working")
    flag = tmp_path / "urgent-release"
    other = cluster.tool("sbatch", "--parsable", "--partition",
                         cluster.env["SLURM_TEST_URGENT_PARTITION"], "--gpus-per-node=4",
                         f"--chdir={tmp_path}", "--output=/dev/null",
                         "--wrap", f"while [ ! -e {flag} ]; do sleep 0.1; done")
    assert other.returncode == 0, other.stderr
    job = server.wait_job(job_id, lambda j: j["attempt"] == 2, 60, "attempt 2")
    first = [a for a in job["attempts"] if a["attempt"] == 1][0]
    assert first["state"] == "PREEMPTED", first
    assert first["reason"] == "PREEMPTED_BY_RESOURCE_MANAGER", first
    tag = f"ferry:hpc:{job_id}:1"
    preempted = [j for j in cluster.jobs() if j["comment"] == tag]
    assert [j["job_state"] for j in preempted] == ["PREEMPTED"], preempted

    # Attempt 2 went back to Slurm at once (the urgent job had not started
    # when Slurm reported the preemption), and Slurm queues it behind the
    # urgent job: Ferry shows Slurm's reason.
    waiting = server.wait_job(job_id, lambda j: j["reason"] == "NO_CAPACITY", 20,
                              "attempt 2 waiting in Slurm")
    assert waiting["state"] == "ADMITTED" and waiting["attempt"] == 2, waiting
    pending = [e for e in events(server, job_id) if e["type"] == "slurm_pending"]
    assert pending and "Resources" in pending[-1]["message"], pending
    queued = [j for j in cluster.jobs() if j["comment"] == f"ferry:hpc:{job_id}:2"]
    assert [j["job_state"] for j in queued] == ["PENDING"], queued
    flag.write_text("go")
    done = server.wait_state(job_id, "SUCCEEDED", timeout=60)
    assert done["attempt"] == 2
    assert "second" in log_text(server, job_id)


def test_slurm_time_limit_ends_the_job_as_timeout(fleet, slurm, tmp_path):
    """The pool's time_limit_minutes goes to Slurm as --time; when Slurm ends
    the job at its limit (TIMEOUT), Ferry's job ends TIMEOUT,
    MAX_RUNTIME_EXCEEDED. Slurm's smallest limit is a minute and slurmctld
    checks limits every 30 s, so this takes 60-95 s."""
    cluster = slurm()
    text = config_text(cluster).replace(
        f"      partition: {cluster.env['SLURM_TEST_PARTITION']}\n",
        f"      partition: {cluster.env['SLURM_TEST_PARTITION']}\n"
        "      time_limit_minutes: 1\n")
    assert "time_limit_minutes: 1" in text
    server = start_server(fleet, tmp_path, text)
    slurm_node(server)
    job_id = submit(server, command=["/bin/sh", "-c", "echo started; sleep 600"],
                    gpus_per_task=1, pool_set="slurm")
    server.wait_state(job_id, "RUNNING", timeout=60)
    tag = f"ferry:hpc:{job_id}:1"
    mine = [j for j in cluster.jobs() if j["comment"] == tag]
    assert len(mine) == 1 and mine[0]["time_limit"] == 1, mine
    job = server.wait_state(job_id, ["TIMEOUT", "FAILED", "SUCCEEDED", "LOST"], timeout=150)
    assert job["state"] == "TIMEOUT" and job["reason"] == "MAX_RUNTIME_EXCEEDED", job
    assert [j["job_state"] for j in cluster.jobs() if j["comment"] == tag] == ["TIMEOUT"]
    assert "started" in log_text(server, job_id)
    ended = [e for e in events(server, job_id) if e["state"] == "TIMEOUT"]
    assert ended and "time limit" in ended[0]["message"], ended
