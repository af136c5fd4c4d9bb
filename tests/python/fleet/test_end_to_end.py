"""A server and two agents with declared GPUs running real commands: output
through the logs API, exit codes to SUCCEEDED/FAILED, a gang across both
nodes, cancellation (SIGTERM reaches the task) and the runtime limit."""

import pytest

import harness

AGENT_ARGS = ["--cpus", "8", "--memory-mb", "16384", "--sync-wait-ms", "500"]


@pytest.fixture
def cluster(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0", "--stop-grace-ms", "3000"])
    fleet.agent(server, "gpu-a", "4xH200", AGENT_ARGS)
    fleet.agent(server, "gpu-b", "4xH200", AGENT_ARGS)
    return server


def submit(server, **spec):
    spec.setdefault("name", "e2e")
    return server.admin("POST", "/v1/jobs", spec)["id"]


def output(server, job_id, stream="stdout"):
    """Text of each task's stream, by task index."""
    by_task = {}
    for c in server.logs(job_id):
        if c["stream"] == stream:
            by_task[c["task"]] = by_task.get(c["task"], "") + c["data"]
    return by_task


def wait_output(server, job_id, text, timeout=10):
    return harness.wait_for(lambda: text in "".join(output(server, job_id).values()), timeout,
                            f"{text!r} in the logs of job {job_id}")


def test_commands_run_and_exit_codes_decide_the_state(cluster):
    ok = submit(cluster, command=["sh", "-c", "echo hello from $FERRY_NODE; echo oops >&2"])
    bad = submit(cluster, command=["sh", "-c", "echo failing; exit 3"])
    missing = submit(cluster, command=["/nonexistent/program"])
    done = cluster.wait_state(ok, "SUCCEEDED")
    assert done["reason"] == "EXITED_ZERO" and done["exit_code"] == 0
    assert done["finished_at"] is not None and done["started_at"] is not None
    harness.wait_for(lambda: "hello from gpu-" in output(cluster, ok).get(0, ""), 10, "stdout")
    harness.wait_for(lambda: "oops" in output(cluster, ok, "stderr").get(0, ""), 10, "stderr")
    failed = cluster.wait_state(bad, "FAILED")
    assert failed["reason"] == "EXITED_NONZERO" and failed["exit_code"] == 3
    lost = cluster.wait_state(missing, "FAILED")
    assert lost["reason"] == "LAUNCH_FAILED", lost
    # Terminal and every chunk returned: the log is finished.
    harness.wait_for(lambda: cluster.admin("GET", f"/v1/jobs/{ok}/logs?limit=1000")["finished"],
                     10, "finished logs")


def test_gang_spans_both_nodes(cluster):
    job_id = submit(cluster, tasks=2, gpus_per_task=4, command=[
        "sh", "-c", "echo task=$FERRY_TASK_INDEX count=$FERRY_TASK_COUNT node=$FERRY_NODE "
                    "gang=$FERRY_GANG_NODES cuda=$CUDA_VISIBLE_DEVICES attempt=$FERRY_ATTEMPT "
                    "job=$FERRY_JOB_ID"])
    job = cluster.wait_state(job_id, "SUCCEEDED")
    nodes = sorted(p["node"] for p in job["placement"])
    assert nodes == ["gpu-a", "gpu-b"], job["placement"]
    for p in job["placement"]:
        assert sorted(p["gpu_indices"]) == [0, 1, 2, 3]
    harness.wait_for(lambda: len(output(cluster, job_id)) == 2, 10, "output of both tasks")
    lines = output(cluster, job_id)
    seen_nodes = set()
    for task in (0, 1):
        fields = dict(kv.split("=", 1) for kv in lines[task].split())
        assert fields["task"] == str(task)
        assert fields["count"] == "2"
        assert fields["cuda"] == "0,1,2,3"
        assert fields["attempt"] == "1" and fields["job"] == str(job_id)
        assert sorted(fields["gang"].split(",")) == ["gpu-a", "gpu-b"]
        assert fields["gang"].split(",")[task] == fields["node"]
        seen_nodes.add(fields["node"])
    assert seen_nodes == {"gpu-a", "gpu-b"}
    # Both started in one attempt, and the GPUs are free again.
    assert len(job["attempts"]) == 1
    harness.wait_for(lambda: all(g["job_id"] is None for g in cluster.admin("GET", "/v1/gpus")["gpus"]),
                     10, "all GPUs free")


def wrote_line(path):
    """True once `path` holds a whole line: a shell's `echo x > f` creates
    the file before it writes to it."""
    return path.exists() and path.read_text().endswith("\n")


def test_cancel_running_job_sends_sigterm(cluster, tmp_path):
    marker = tmp_path / "term"
    job_id = submit(cluster, gpus_per_task=1, command=[
        "sh", "-c", f"trap 'echo got-term > {marker}; exit 143' TERM; echo ready; "
                    "while true; do sleep 0.1; done"])
    cluster.wait_state(job_id, "RUNNING")
    wait_output(cluster, job_id, "ready")
    r = cluster.call("DELETE", f"/v1/jobs/{job_id}")
    assert r.status == 200 and r.json()["state"] == "CANCELLED", r
    harness.wait_for(lambda: wrote_line(marker), 15, "the task to see SIGTERM")
    assert marker.read_text().strip() == "got-term"
    job = cluster.wait_state(job_id, "CANCELLED")
    assert job["reason"] == "CANCELLED_BY_USER"
    harness.wait_for(lambda: all(g["job_id"] != job_id
                                 for g in cluster.admin("GET", "/v1/gpus")["gpus"]),
                     15, "the cancelled job's GPU to be free")


def test_max_runtime_times_out(cluster, tmp_path):
    marker = tmp_path / "term"
    job_id = submit(cluster, max_runtime_seconds=1, command=[
        "sh", "-c", f"trap 'echo got-term > {marker}; exit 143' TERM; "
                    "while true; do sleep 0.1; done"])
    job = cluster.wait_state(job_id, "TIMEOUT", timeout=20)
    assert job["reason"] == "MAX_RUNTIME_EXCEEDED"
    harness.wait_for(lambda: wrote_line(marker), 15, "the timed-out task to be stopped")
