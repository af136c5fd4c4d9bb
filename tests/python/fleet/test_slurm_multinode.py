"""Slurm pools over a two-node Slurm cluster: scripts/slurm-test-cluster with
SLURM_TEST_NODES=2 runs every slurmd in its own network namespace (a bridge
on the host, slurmctld at its address), so a gang that spans nodes is one
Slurm job over two real slurmds, and srun's steps cross the bridge. Ferry
places the gang on both nodes, hands it to Slurm as one job with --nodes 2,
and loses the attempt, not the job, when one node's slurmd dies."""

import harness
from test_slurm import AGENT_ARGS, config_text, events, log_text, slurm, start_server  # noqa: F401 (slurm: the fixture)

NODES = ["hpc-ferry-node1", "hpc-ferry-node2"]


def nodes_ready(server, names=NODES, timeout=30):
    def ready():
        found = {}
        for name in names:
            r = server.call("GET", f"/v1/nodes/{name}")
            if r.status != 200 or r.json()["state"] != "READY":
                return None
            found[name] = r.json()
        return found

    return harness.wait_for(ready, timeout, f"Slurm nodes {names} READY in Ferry")


def slurm_job_of(cluster, job_id, attempt):
    tagged = [j for j in cluster.jobs() if j["comment"] == f"ferry:hpc:{job_id}:{attempt}"]
    assert len(tagged) == 1, tagged
    return tagged[0]


def fields(line):
    return dict(part.split("=", 1) for part in line.split())


def test_gang_over_two_slurm_nodes_is_one_slurm_job(fleet, slurm, tmp_path):
    cluster = slurm(nodes=2)
    server = start_server(fleet, tmp_path, config_text(cluster))
    nodes = nodes_ready(server)
    for name, node in nodes.items():
        assert node["pool"] == "hpc"
        assert node["labels"]["slurm_node"] == name.removeprefix("hpc-")
        assert [g["model"] for g in node["gpus"]] == ["H200"] * 4

    # Four tasks of two GPUs: no node holds more than two, so the gang spans
    # both nodes, two tasks each.
    script = ("echo rank=$RANK task=$FERRY_TASK_INDEX local=$LOCAL_RANK world=$WORLD_SIZE "
              "count=$FERRY_TASK_COUNT node=$FERRY_NODE slurmd=$SLURMD_NODENAME "
              "gang=$FERRY_GANG_NODES master=$MASTER_ADDR port=${MASTER_PORT:-none} "
              "job=$FERRY_JOB_ID attempt=$FERRY_ATTEMPT cuda=$CUDA_VISIBLE_DEVICES")
    job_id = submit_gang(server, script, tasks=4, gpus_per_task=2)
    job = server.wait_state(job_id, "SUCCEEDED", timeout=60)
    assert job["reason"] == "EXITED_ZERO" and job["attempt"] == 1, job

    # Ferry's record: two tasks on each node.
    placed = {p["task"]: p["node"] for p in job["placement"]}
    assert sorted(placed) == [0, 1, 2, 3], job["placement"]
    assert sorted(placed.values()) == sorted(NODES * 2), job["placement"]

    # Slurm's: one job over both nodes, two tasks and four GPUs per node.
    sj = slurm_job_of(cluster, job_id, 1)
    assert sj["job_state"] == "COMPLETED", sj["job_state"]
    assert sj["node_count"] == 2 and sj["tasks_per_node"] == 2, sj
    assert sj["nodes"] == "ferry-node[1-2]", sj["nodes"]
    assert "gpu:h200:4" in sj["tres_per_node"], sj["tres_per_node"]
    notes = [e for e in events(server, job_id) if e["type"] == "slurm_submitted"]
    assert len(notes) == 1 and f"as job {sj['job_id']} " in notes[0]["message"], notes

    # Each task's own output: where it ran, and the gang's shared view.
    seen = {}
    for task in range(4):
        lines = log_text(server, job_id, task=task).splitlines()
        assert len(lines) == 1, (task, lines)
        seen[task] = fields(lines[0])
    for task, f in seen.items():
        assert f["rank"] == f["task"] == str(task), f
        assert f["world"] == f["count"] == "4", f
        assert f["job"] == str(job_id) and f["attempt"] == "1", f
        assert f["node"] == f["slurmd"], f
        # The task ran on the Slurm node Ferry placed it on.
        assert "hpc-" + f["slurmd"] == placed[task], (task, f, placed)
        assert f["gang"] == "ferry-node1,ferry-node2", f
        assert f["master"] == "ferry-node1", f
    assert len({f["port"] for f in seen.values()}) == 1, seen
    by_node = {}
    for f in seen.values():
        by_node.setdefault(f["slurmd"], []).append(f)
    assert sorted(by_node) == ["ferry-node1", "ferry-node2"], seen
    for node, tasks in by_node.items():
        assert sorted(f["local"] for f in tasks) == ["0", "1"], (node, tasks)
        # The node's four GPUs, two to each of its tasks.
        devices = [set(f["cuda"].split(",")) for f in tasks]
        assert all(len(d) == 2 for d in devices), (node, tasks)
        assert devices[0].isdisjoint(devices[1]), (node, tasks)
        assert devices[0] | devices[1] == {"0", "1", "2", "3"}, (node, tasks)
    # The GPUs are Ferry's to give again on both nodes.
    harness.wait_for(lambda: {p["name"]: p["gpus_free"] for p in
                              server.admin("GET", "/v1/pools")["pools"]}["hpc"] == 8,
                     20, "all 8 Slurm GPUs free again")


def submit_gang(server, script, **spec):
    spec.setdefault("name", "slurm-gang")
    spec.setdefault("gpu_models", ["H200"])
    spec.setdefault("pool_set", "slurm")
    r = server.call("POST", "/v1/jobs", dict(command=["/bin/sh", "-c", script], **spec))
    assert r.status == 201, r
    return r.json()["id"]


def test_slurmd_killed_on_one_node_loses_the_gang_attempt_once(fleet, slurm, tmp_path):
    cluster = slurm(nodes=2, slurmd_timeout=5)
    server = start_server(fleet, tmp_path, config_text(cluster))
    nodes_ready(server)
    runs = tmp_path / "runs"
    # Each task records its start and, when stopped with SIGTERM, its end,
    # with the time: "start|end ATTEMPT RANK WHERE PID SECONDS".
    now = "$(date +%s.%N)"
    script = (f"where=${{SLURMD_NODENAME:-agent}}; "
              f"echo start $FERRY_ATTEMPT $RANK $where $$ {now} >> {runs}; "
              f"trap 'echo end $FERRY_ATTEMPT $RANK $where $$ {now} >> {runs}; exit 0' TERM; "
              "while :; do sleep 0.1; done")
    job_id = submit_gang(server, script, tasks=2, gpus_per_task=4, pool_set="any",
                         max_retries=2)
    job = server.wait_state(job_id, "RUNNING", timeout=60)
    assert sorted(p["node"] for p in job["placement"]) == NODES, job["placement"]

    def records(kind, attempt, count=None):
        lines = runs.read_text().splitlines() if runs.exists() else []
        mine = {}
        for line in lines:
            what, att, rank, where, pid, at = line.split()
            if what == kind and att == str(attempt):
                mine[int(rank)] = (where, int(pid), float(at))
        return mine if count is None or len(mine) == count else None

    first = harness.wait_for(lambda: records("start", 1, 2), 30, "both tasks of attempt 1")
    assert {r: w for r, (w, _, _) in first.items()} == \
        {t: p["node"].removeprefix("hpc-") for t, p in
         ((p["task"], p) for p in job["placement"])}, (first, job["placement"])
    sj = slurm_job_of(cluster, job_id, 1)
    assert sj["node_count"] == 2 and sj["job_state"] == "RUNNING", sj
    healthy = [r for r, (w, _, _) in first.items() if w == "ferry-node1"][0]
    broken = 1 - healthy

    fleet.agent(server, "agent-1", gpus="8xH200", extra_args=AGENT_ARGS)
    cluster.daemon("kill", "slurmd:ferry-node2")
    # Slurm stops hearing from ferry-node2 (NOT_RESPONDING, then DOWN);
    # Ferry loses the node and the attempt, and its retry rules run attempt
    # 2 on the agent.
    job = server.wait_job(job_id, lambda j: j["attempt"] == 2 and j["state"] == "RUNNING", 60,
                          "attempt 2 running")
    assert [p["node"] for p in job["placement"]] == ["agent-1", "agent-1"], job["placement"]
    lost = [a for a in job["attempts"] if a["attempt"] == 1][0]
    assert lost["state"] == "LOST" and lost["reason"] == "NODE_LOST", lost
    lost_event = [e for e in events(server, job_id) if e["state"] == "LOST"]
    assert len(lost_event) == 1 and "ferry-node2" in lost_event[0]["message"], lost_event
    # The message names the state that made it lost, flags included.
    assert ("NOT_RESPONDING" in lost_event[0]["message"]
            or "DOWN" in lost_event[0]["message"]), lost_event
    assert server.admin("GET", "/v1/nodes/hpc-ferry-node2")["state"] == "LOST"
    # The healthy node's slurmd is untouched and its node stays in Ferry.
    assert server.admin("GET", "/v1/nodes/hpc-ferry-node1")["state"] == "READY"
    second = harness.wait_for(lambda: records("start", 2, 2), 30, "both tasks of attempt 2")
    assert sorted(w for w, _, _ in second.values()) == ["agent", "agent"], second

    # Attempt 1's task on the healthy node is stopped: Ferry cancels the
    # Slurm job and the step's SIGTERM reaches the task on ferry-node1.
    ended = harness.wait_for(lambda: records("end", 1).get(healthy), 20,
                             "attempt 1's task on ferry-node1 stopped")
    assert ended[:2] == first[healthy][:2], (ended, first)
    harness.wait_for(lambda: not harness.process_alive(first[healthy][1]), 10,
                     "attempt 1's task on ferry-node1 gone")
    # It ends about when attempt 2 starts, not later: the LOST attempt's
    # surviving task does not keep running next to its retry.
    overlap = ended[2] - min(at for _, _, at in second.values())
    assert overlap < 3.0, f"attempt 1 ran {overlap:.2f} s on ferry-node1 after attempt 2 started"
    # Ferry never handed the job to Slurm again.
    tagged = [j for j in cluster.jobs() if j["comment"].startswith(f"ferry:hpc:{job_id}:")]
    assert len(tagged) == 1, tagged

    # ferry-node2's slurmd back: Slurm ends the step it no longer has a job
    # for there, the Slurm job of attempt 1 is over and the node returns to
    # Ferry.
    assert harness.process_alive(first[broken][1])  # a dead slurmd kills nothing
    cluster.daemon("restart", "slurmd:ferry-node2")
    nodes_ready(server, timeout=60)
    harness.wait_for(lambda: not harness.process_alive(first[broken][1]), 30,
                     "attempt 1's task on ferry-node2 gone")
    final = harness.wait_for(
        lambda: (slurm_job_of(cluster, job_id, 1)["job_state"]
                 not in ("RUNNING", "COMPLETING")) and slurm_job_of(cluster, job_id, 1), 30,
        "the Slurm job of attempt 1 over")
    assert final["job_state"] in ("CANCELLED", "NODE_FAIL"), final["job_state"]
    assert server.job(job_id)["attempt"] == 2
    assert len(records("start", 1)) == len(records("start", 2)) == 2
    server.call("POST", f"/v1/jobs/{job_id}:cancel")
