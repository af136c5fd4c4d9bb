"""The API contract against a live `ferry server`: the server serves its
OpenAPI document (src/fleet/server/openapi.json) without a token, and
Schemathesis (the CLI of the pinned package in .venv) generates requests for
every operation from it, with a bounded number of examples each, and checks
every answer: no 5xx, status codes, content types, headers and bodies as
documented, bad input refused with a documented 4xx problem
(application/problem+json), authentication enforced, 405 with Allow for
methods a path does not have.

Every operation is tested, none excluded (one check is: use_after_free, see
below): the destructive ones are harmless
on the test's own store (revoking the admin's own tokens is refused with
409, and the admin token is the one the run uses; drains, cancels and users
exist only in this store). The long polls are cut to 200 ms by
openapi_hooks.py so the run stays bounded."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import harness

HERE = Path(__file__).resolve().parent
DOCUMENT = harness.REPO / "src" / "fleet" / "server" / "openapi.json"
SCHEMATHESIS = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or \
    shutil.which("schemathesis")
needs_schemathesis = pytest.mark.skipif(
    SCHEMATHESIS is None, reason="schemathesis is not installed (pinned in requirements.txt)")

# Cases per operation and phase: enough to reach every parameter and problem
# path, small enough for about a minute on two cores.
MAX_EXAMPLES = int(os.environ.get("FERRY_OPENAPI_EXAMPLES", "25"))

# Valid data a schema cannot tell from invalid data: an existing user name,
# an unknown job for a log upload, a job no registered node could hold, a
# page token that was never issued. Those answers are documented 4xx problems
# (the status, type and body are still checked); only 5xx and undocumented
# answers fail.
#
# A body over the size limit is refused with 413 before it is parsed: a
# rejection like the others Schemathesis expects for invalid data.
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "400", "401", "403", "404", "409", "422", "429"]

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428",
                     "429"]
"""


def test_document_is_served_without_a_token(fleet):
    server = fleet.server("sqlite")
    r = harness.request(server.port, "GET", "/v1/openapi.json")
    assert r.status == 200, r
    assert r.content_type == "application/json"
    assert r.body == DOCUMENT.read_bytes()
    document = r.json()
    assert document["openapi"].startswith("3.1.")
    # The paths the CLI and agents call are all there.
    for path in ("/v1/jobs", "/v1/jobs/{id}", "/v1/agent/sync", "/v1/admin/users"):
        assert path in document["paths"], path
    # A HEAD is a GET without a body; other methods are 405.
    assert harness.request(server.port, "HEAD", "/v1/openapi.json").status == 200
    r = harness.request(server.port, "DELETE", "/v1/openapi.json")
    assert r.status == 405 and r.headers.get("allow") == "GET", r
    assert r.content_type == "application/problem+json"


@needs_schemathesis
def test_schemathesis_finds_nothing(fleet, tmp_path):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    # A node, so that node routes have something to find and submissions
    # meet the capacity check.
    agent_token = server.agent_token_file.read_text().strip()
    r = server.call("POST", "/v1/agent/register",
                    {"name": "gpu-a", "instance": "gpu-a-1", "cpus": 64, "memory_mb": 65536,
                     "gpus": [{"index": i, "model": "H200"} for i in range(4)]},
                    token=agent_token)
    assert r.status == 200, r
    server.admin("POST", "/v1/jobs", {"name": "seed", "command": ["true"]})
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    junit_path = tmp_path / "junit.xml"
    env = dict(os.environ, SCHEMATHESIS_HOOKS="openapi_hooks",
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    args = [SCHEMATHESIS, "--config-file", str(config), "--no-color", "run",
            f"{server.url}/v1/openapi.json",
            "--checks", "all",
            # DELETE /v1/jobs/{id} cancels: the job stays as history (200 on a
            # later GET), which this check takes for a deleted resource still there.
            "--exclude-checks", "use_after_free",
            "--max-examples", str(MAX_EXAMPLES),
            "--seed", "1",
            "--workers", "2",
            "--header", f"Authorization: Bearer {server.admin_token}",
            "--request-timeout", "20",
            "--generation-database", "none",
            "--report", "junit", "--report-junit-path", str(junit_path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-20000:]
    # Every operation of the document was tested.
    document = json.loads(DOCUMENT.read_text())
    operations = sum(1 for item in document["paths"].values() for method in item
                     if method in ("get", "put", "post", "delete", "patch"))
    junit = junit_path.read_text()
    assert junit.count("<testcase ") >= operations, output[-5000:]
    # The server survived it.
    assert harness.request(server.port, "GET", "/readyz").status == 200
