"""Node loss: kill -9 of an agent running a job requeues the job (LOST →
PENDING, attempt 2) onto another node within the lease; the dead agent's task
dies with it; a restarted or stale agent never overwrites the new attempt."""

import json
import uuid

import harness

LEASE_MS = 2000
AGENT_ARGS = ["--cpus", "8", "--memory-mb", "16384", "--sync-wait-ms", "500"]


def events(server, job_id):
    return server.admin("GET", f"/v1/jobs/{job_id}/events?limit=1000")["events"]


def test_agent_kill9_requeues_on_another_node(fleet, tmp_path):
    server = fleet.server("sqlite", extra_args=["--lease-ms", str(LEASE_MS), "--rate", "0"])
    a = fleet.agent(server, "node-a", "4xH200", AGENT_ARGS)
    pids = tmp_path / "task.pids"
    fleet.task_pid_files.append(pids)
    job = server.admin("POST", "/v1/jobs", {
        "name": "survivor", "gpus_per_task": 4, "max_retries": 2,
        "command": ["sh", "-c", f"echo $$ >> {pids}; echo attempt=$FERRY_ATTEMPT "
                                "node=$FERRY_NODE; exec sleep 60"]})
    first = server.wait_job(job["id"], lambda j: j["state"] == "RUNNING", 20, "RUNNING on node-a")
    assert first["attempt"] == 1 and first["placement"][0]["node"] == "node-a"
    harness.wait_for(lambda: pids.exists() and pids.read_text().split(), 10, "the task's pid")
    old_pid = int(pids.read_text().split()[0])
    assert harness.process_alive(old_pid)

    b = fleet.agent(server, "node-b", "4xH200", AGENT_ARGS)
    a.proc.kill9_leader()  # the agent alone, as a crash would

    # The task dies with its agent (a new agent instance means its tasks are gone).
    harness.wait_for(lambda: not harness.process_alive(old_pid), 10, "the orphaned task to die")

    second = server.wait_job(job["id"],
                             lambda j: j["attempt"] == 2 and j["state"] == "RUNNING",
                             LEASE_MS / 1000 + 20, "requeued and RUNNING on node-b")
    assert second["placement"][0]["node"] == "node-b"
    assert [x["attempt"] for x in second["attempts"]] == [1, 2]
    assert second["attempts"][0]["state"] == "LOST"
    assert second["attempts"][0]["reason"] == "NODE_LOST"
    timeline = events(server, job["id"])
    assert any(e.get("state") == "LOST" and e["reason"] == "NODE_LOST" for e in timeline), timeline
    assert any(e["reason"] == "REQUEUED" for e in timeline), timeline
    node_a = server.admin("GET", "/v1/nodes/node-a")
    assert node_a["state"] == "LOST"

    # Restart A under the same name: it comes back READY, and nothing it does
    # touches attempt 2 on node-b.
    mark = max(e["id"] for e in events(server, job["id"]))
    fleet.agent(server, "node-a", "4xH200", AGENT_ARGS)
    harness.wait_for(lambda: all(g["job_id"] is None for g in
                                 server.admin("GET", "/v1/nodes/node-a")["gpus"]),
                     10, "node-a's GPUs to be free after the restart")
    # Let the restarted agent sync a few more times before looking.
    for _ in range(2):
        beat = server.admin("GET", "/v1/nodes/node-a")["last_heartbeat"]
        harness.wait_for(lambda: server.admin("GET", "/v1/nodes/node-a")["last_heartbeat"] != beat,
                         10, "another heartbeat from node-a")
    later = server.job(job["id"])
    assert later["state"] == "RUNNING" and later["attempt"] == 2, later
    assert later["placement"][0]["node"] == "node-b"
    for e in events(server, job["id"]):
        if e["id"] > mark:
            assert e["actor"] != "agent:node-a", f"node-a touched the new attempt: {e}"
    attempt_lines = [c["data"] for c in server.logs(job["id"]) if c["attempt"] == 2]
    assert "node=node-b" in "".join(attempt_lines)

    server.admin("DELETE", f"/v1/jobs/{job['id']}")
    server.wait_job(job["id"], lambda j: j["state"] == "CANCELLED", 10, "CANCELLED")
    b.stop()


def test_stale_agent_reports_are_fenced(fleet):
    """An agent that was declared lost and comes back with its old instance
    (a partition, not a restart) is told to stop its old task, and its late
    reports do not change the job's new attempt."""
    server = fleet.server("sqlite", extra_args=["--lease-ms", str(LEASE_MS), "--rate", "0"])
    agent_token = server.agent_token_file.read_text().strip()
    instance = uuid.uuid4().hex

    def sync(node, inst, running=(), reports=()):
        r = server.call("POST", "/v1/agent/sync?wait_ms=0",
                        {"node": node, "instance": inst, "running": list(running),
                         "reports": list(reports)}, token=agent_token)
        assert r.status == 200, r
        return r.json()

    gpus = [{"index": i, "model": "H200", "memory_mb": 1000, "uuid": f"stale-gpu{i}"}
            for i in range(2)]
    r = server.call("POST", "/v1/agent/register",
                    {"name": "stale", "pool": "default", "labels": {}, "cpus": 4,
                     "memory_mb": 4096, "instance": instance, "gpus": gpus}, token=agent_token)
    assert r.status == 200, r
    job = server.admin("POST", "/v1/jobs", {"name": "fenced", "command": ["sleep", "60"],
                                            "gpus_per_task": 2, "cpus_per_task": 1})
    box = {}

    def assigned():
        box["s"] = sync("stale", instance)
        return box["s"]["start"]

    start = harness.wait_for(assigned, 10, "an assignment for the fake node")
    ref = {"job_id": job["id"], "task": 0, "attempt": 1}
    assert {k: start[0][k] for k in ref} == ref
    sync("stale", instance, running=[ref],
         reports=[dict(ref, kind="started", message="", at_ms=0)])
    server.wait_state(job["id"], "RUNNING")

    # A real agent takes over once the fake node's lease runs out.
    fleet.agent(server, "fresh", "2xH200", AGENT_ARGS)
    moved = server.wait_job(job["id"], lambda j: j["attempt"] == 2 and j["state"] == "RUNNING",
                            LEASE_MS / 1000 + 20, "attempt 2 RUNNING on fresh")
    assert moved["placement"][0]["node"] == "fresh"

    # The stale node wakes up and reports its old task as finished.
    answer = sync("stale", instance, running=[ref],
                  reports=[dict(ref, kind="exited", exit_code=0, message="late", at_ms=0)])
    assert answer["registered"] is False or ref in answer["stop"], json.dumps(answer)
    after = server.job(job["id"])
    assert after["state"] == "RUNNING" and after["attempt"] == 2, after
    assert after["exit_code"] is None
    server.admin("DELETE", f"/v1/jobs/{job['id']}")
