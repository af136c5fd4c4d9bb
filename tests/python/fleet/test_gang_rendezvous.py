"""Gang tasks find each other: two real agents, gangs whose tasks
rendezvous over TCP with exactly the variables PyTorch, JAX and MPI-style
launchers read (MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK/LOCAL_RANK/...,
JAX_*, FERRY_HOSTFILE), and two gangs at once on the same two nodes whose
rank-0 ports do not collide."""

import sys
from pathlib import Path

import pytest

import harness

AGENT_ARGS = ["--cpus", "8", "--memory-mb", "16384", "--sync-wait-ms", "500",
              "--advertise-host", "127.0.0.1"]
RENDEZVOUS = str(Path(__file__).with_name("rendezvous.py"))


@pytest.fixture
def cluster(fleet, tmp_path):
    # Spread scoring puts a gang's tasks on both nodes, one at a time to the
    # emptiest node.
    config = tmp_path / "scheduler.yaml"
    config.write_text("default_scoring: spread\n")
    server = fleet.server("sqlite", extra_args=["--rate", "0", "--scheduler-config", config,
                                                "--rendezvous-port-min", "31000",
                                                "--rendezvous-port-max", "31099"])
    fleet.agent(server, "gpu-a", "4xH200", AGENT_ARGS)
    fleet.agent(server, "gpu-b", "4xH200", AGENT_ARGS)
    return server


def submit(server, command, tasks):
    return server.admin("POST", "/v1/jobs", {"name": "rendezvous", "command": command,
                                             "tasks": tasks, "gpus_per_task": 1})["id"]


def lines_by_task(server, job_id):
    out = {}
    for chunk in server.logs(job_id):
        if chunk["stream"] == "stdout":
            out[chunk["task"]] = out.get(chunk["task"], "") + chunk["data"]
    return {task: dict(field.split("=") for field in text.split())
            for task, text in out.items()}


def stderr_of(server, job_id):
    return "".join(c["data"] for c in server.logs(job_id) if c["stream"] == "stderr")


def test_a_gang_across_two_nodes_rendezvous(cluster):
    job_id = submit(cluster, [sys.executable, RENDEZVOUS], tasks=3)
    job = cluster.wait_state(job_id, {"SUCCEEDED", "FAILED"}, timeout=60)
    assert job["state"] == "SUCCEEDED", (job, stderr_of(cluster, job_id))
    nodes = [p["node"] for p in sorted(job["placement"], key=lambda p: p["task"])]
    assert sorted(set(nodes)) == ["gpu-a", "gpu-b"], nodes
    fields = lines_by_task(cluster, job_id)
    assert sorted(fields) == [0, 1, 2]
    for task, f in fields.items():
        assert f["rank"] == str(task)
        assert f["sum"] == "3"  # 0 + 1 + 2, seen by every rank
        assert f["port"] == str(31000 + job_id % 100)
        same_node = [t for t, n in enumerate(nodes) if n == nodes[task]]
        assert f["local_world"] == str(len(same_node))
        assert f["local_rank"] == str(same_node.index(task))
        node_order = list(dict.fromkeys(nodes))
        assert f["node_rank"] == str(node_order.index(nodes[task]))


def test_two_gangs_on_the_same_nodes_use_different_ports(cluster, tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    command = [sys.executable, RENDEZVOUS, str(barrier), "2"]
    first = submit(cluster, command, tasks=2)
    second = submit(cluster, command, tasks=2)
    jobs = [cluster.wait_state(j, {"SUCCEEDED", "FAILED"}, timeout=60) for j in (first, second)]
    for job in jobs:
        assert job["state"] == "SUCCEEDED", (job, stderr_of(cluster, job["id"]))
        assert sorted(p["node"] for p in job["placement"]) == ["gpu-a", "gpu-b"]
    # Both rank-0 listeners were bound at once (the barrier), on one address.
    assert sorted(p.name for p in barrier.iterdir()) == [f"{first}.bound", f"{second}.bound"]
    ports = [lines_by_task(cluster, j)[0]["port"] for j in (first, second)]
    assert ports[0] != ports[1], ports
    for job_id in (first, second):
        assert {f["sum"] for f in lines_by_task(cluster, job_id).values()} == {"1"}
