"""Smoke test of scripts/bench-slurm: a tiny run (3 submissions, 2 running
jobs, the CLI endpoint) on a private Slurm test cluster produces every
figure, and every job Ferry ran there succeeded. Figures are not checked."""

import json
import os
import subprocess
import sys

import pytest

import harness

SCRIPT = harness.REPO / "scripts" / "bench-slurm"


def test_bench_slurm_smoke(tmp_path):
    if os.getuid() != 0:
        pytest.skip("the Slurm test cluster needs root")
    reason = harness.fleet_missing()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--jobs", "3", "--lag-jobs", "2",
                           "--endpoint", "cli", "--sync-interval", "0.2", "--json", str(out)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, FERRY_BIN=harness.FERRY))
    if done.returncode == 3:
        pytest.skip("Slurm is not installed: " + done.stderr.strip()[-300:])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| Ferry cli, sequential" in done.stdout
    result = json.loads(out.read_text())
    assert [len(r["samples_s"]) for r in result["sbatch"]["runs"]] == [3, 3]
    assert len(result["sbatch_same_job"]["samples_s"]) == 3
    assert "| sbatch of Ferry's job" in done.stdout
    cli = result["ferry"]["cli"]
    assert cli["submission"]["sequential_latency_s"]["n"] == 3
    assert cli["submission"]["burst_latency_s"]["n"] == 3
    # The breakdown of each one-at-a-time submission, from its own events.
    assert {k: v["n"] for k, v in cli["submission"]["sequential_stages_s"].items()} == {
        "post_to_pending_s": 3, "pending_to_admitted_s": 3, "admitted_to_submitted_s": 3}
    assert cli["lag"]["final_states"] == {"SUCCEEDED": 2}
    assert cli["lag"]["running_lag_s"]["n"] == 2 and cli["lag"]["terminal_lag_s"]["n"] == 2
    assert cli["server_log_issue_count"] == 0, cli["server_log_issues"]
