"""`ferry server --log-format json`: every stderr line is one JSON object;
each request is logged with its X-Request-Id (the caller's when usable, else
a new one, and returned either way), route, status, latency and caller; a
submission's line names the job it created (docs/fleet-server.md#logs)."""

import json

import harness


def log_lines(server):
    lines = [line for line in server.proc.log().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line parses
    return records


def requests_logged(server):
    return [r for r in log_lines(server) if r.get("msg") == "request"]


def test_json_logs_carry_request_ids_callers_and_jobs(fleet):
    server = fleet.server("sqlite", extra_args=["--log-format", "json"])
    ana = server.create_user("ana", tenant="acme", team="ml")

    # A usable id is kept and returned.
    r = harness.request(server.port, "POST", "/v1/jobs",
                        body={"name": "logged", "command": ["true"]}, token=ana,
                        headers={"X-Request-Id": "trace-42.a:b"})
    assert r.status == 201, r
    assert r.headers["x-request-id"] == "trace-42.a:b"
    job_id = r.json()["id"]

    # A hostile one is replaced, not echoed or logged.
    hostile = 'x" \\n{"evil":1}'
    r = harness.request(server.port, "GET", f"/v1/jobs/{job_id}", token=ana,
                        headers={"X-Request-Id": hostile})
    assert r.status == 200
    fresh = r.headers["x-request-id"]
    assert fresh != hostile and len(fresh) == 16 and int(fresh, 16) >= 0

    # No id sent: one is made up; a refused request is logged too.
    r = harness.request(server.port, "GET", "/v1/jobs/999999", token=ana)
    assert r.status == 404 and len(r.headers["x-request-id"]) == 16
    r = harness.request(server.port, "GET", "/v1/jobs", token="not-a-token")
    assert r.status == 401

    def all_logged():
        ids = {rec["request_id"] for rec in requests_logged(server)}
        return {"trace-42.a:b", fresh} <= ids
    harness.wait_for(all_logged, 10, "the request lines")
    by_id = {rec["request_id"]: rec for rec in requests_logged(server)}

    submit = by_id["trace-42.a:b"]
    assert submit["method"] == "POST" and submit["route"] == "/v1/jobs"
    assert submit["status"] == 201
    assert submit["tenant"] == "acme" and submit["user"] == "ana"
    assert submit["job_id"] == str(job_id)
    assert submit["level"] == "info" and submit["component"] == "server"
    assert isinstance(submit["latency_ms"], (int, float)) and submit["latency_ms"] >= 0
    assert submit["ts"].endswith("Z")

    get = by_id[fresh]
    assert get["route"] == "/v1/jobs/{}" and get["path"] == f"/v1/jobs/{job_id}"
    assert get["job_id"] == str(job_id)
    assert hostile not in server.proc.log()

    refused = [rec for rec in requests_logged(server) if rec["status"] == 401]
    assert refused and refused[0]["user"] == "" and refused[0]["route"] == "/v1/jobs"

    # Start-up lines are JSON too.
    assert any(rec["msg"].startswith("listening on") for rec in log_lines(server))


def test_text_logs_stay_as_they_were(fleet):
    server = fleet.server("sqlite")
    r = harness.request(server.port, "GET", "/healthz")
    assert r.status == 200 and len(r.headers["x-request-id"]) == 16
    log = server.proc.log()
    assert "ferry server: listening on" in log
    assert '"msg":"request"' not in log  # no per-request lines in text mode


def test_bad_log_format_is_refused(tmp_path):
    import subprocess
    out = subprocess.run([harness.FERRY, "server", "--log-format", "yaml", "--port", "0",
                          "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "log-format" in out.stderr and "yaml" in out.stderr
