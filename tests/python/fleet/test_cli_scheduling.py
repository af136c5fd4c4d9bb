"""The CLI's scheduling flags and `ferry scheduler` against a real server:
hints reach the job, bad hints are refused with the server's message, and the
scheduler summary shows the config in force."""

import json

import harness


ferry = harness.cli  # the CLI against `server`, as its admin unless token= says


def test_submit_hints_reach_the_job(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    done = ferry(server, "submit", "--json", "--gpus", "1", "--tasks", "2",
                 "--topology", "same_domain", "--dataset", "imagenet", "--dataset", "laion",
                 "--pool-set", "training", "--", "true")
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    spec = server.admin("GET", f"/v1/jobs/{job['id']}")["spec"]
    assert spec["topology"] == "same_domain"
    assert spec["datasets"] == ["imagenet", "laion"]
    assert spec["pool_set"] == "training"


def test_a_bad_topology_is_refused_with_the_servers_reason(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    refused = ferry(server, "submit", "--topology", "same_rack", "--", "true")
    assert refused.returncode == 1
    assert "topology" in refused.stderr, refused.stderr
    assert server.all_job_ids() == []


def test_scheduler_summary_shows_the_config_in_force(fleet, tmp_path):
    config = tmp_path / "scheduler.yaml"
    config.write_text("ordering: drf\ndefault_scoring: spread\n")
    server = fleet.server("sqlite", extra_args=["--rate", "0", "--scheduler-config", config])
    shown = ferry(server, "scheduler")
    assert shown.returncode == 0, shown.stderr
    assert "ordering drf, default scoring spread" in shown.stdout
    assert str(config) in shown.stdout
    as_json = json.loads(ferry(server, "scheduler", "--json").stdout)
    assert as_json["config"]["ordering"] == "drf"
    # Users are not platform admins: the summary is refused.
    token = server.create_user("ana")
    denied = ferry(server, "scheduler", token=token)
    assert denied.returncode == 1


def test_status_says_why_a_job_waits(fleet):
    # One node with 2 GPUs; a running job holds 1; two jobs need 2 each.
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    fleet.agent(server, "gpu-w", "2xH200")
    holder = server.admin("POST", "/v1/jobs", {"name": "holder", "command": ["sleep", "60"],
                                               "gpus_per_task": 1})["id"]
    server.wait_state(holder, "RUNNING")
    ids = [server.admin("POST", "/v1/jobs", {"name": f"big{i}", "command": ["true"],
                                             "gpus_per_task": 2})["id"] for i in range(2)]

    def explained():
        job = server.job(ids[1])
        return job.get("explanation") and job["explanation"]["reason"] == "NO_CAPACITY"
    harness.wait_for(explained, 20, "an explanation for the second job")
    shown = ferry(server, "status", str(ids[1]))
    assert shown.returncode == 0, shown.stderr
    line = next(l for l in shown.stdout.splitlines() if l.startswith("waiting"))
    assert "no free capacity for 1 task with 2 GPUs each" in line, shown.stdout
    assert "the largest free block is 1 GPU on one node" in line, shown.stdout
    assert "1 job ahead in default/default's queue" in line, shown.stdout
    # A running job has nothing to explain.
    running = ferry(server, "status", str(holder))
    assert "waiting" not in running.stdout
    server.admin("POST", f"/v1/jobs/{holder}:cancel")
