"""Submission checks of `ferry server`: a gang no capacity could
ever hold is refused with 422 `unsatisfiable` by the scheduling core's own
reasoning (nodes that are not LOST plus cloud pools at their max_nodes), and
length limits count Unicode code points, not bytes."""

import json
import socket

import harness

CONFIG = """
pools:
  - {name: onprem}
  - name: cloud-h100
    cloud: true
    provider: local
    price_per_gpu_hour: 3
    provisioning_delay_s: 3600   # requested, never started during the test
    max_nodes: 2
    node: {gpu_model: H100, gpus: 8, cpus: 64, memory_mb: 65536}
pool_sets:
  - {name: default}
  - {name: onprem-only, pools: [onprem]}
providers:
  - {name: local, type: local}
"""


def register(server, name, model, gpus, pool="onprem"):
    agent_token = server.agent_token_file.read_text().strip()
    body = {"name": name, "pool": pool, "instance": f"{name}-1", "cpus": 64, "memory_mb": 65536,
            "gpus": [{"index": i, "model": model, "memory_mb": 81920} for i in range(gpus)]}
    r = server.call("POST", "/v1/agent/register", body, token=agent_token)
    assert r.status == 200, r


def job(**spec):
    spec.setdefault("name", "check")
    spec.setdefault("command", ["true"])
    return spec


def test_a_gang_no_pool_could_ever_hold_is_refused(fleet, tmp_path):
    config = tmp_path / "scheduler.yaml"
    config.write_text(CONFIG)
    server = fleet.server("sqlite", extra_args=["--rate", "0", "--scheduler-config", config])
    register(server, "h100-a", "H100", 8)
    before = server.all_job_ids()

    # One on-prem node plus the cloud pool at max_nodes (2 nodes): 3 tasks of 8 H100.
    fits = server.call("POST", "/v1/jobs", job(tasks=3, gpus_per_task=8, gpu_models=["H100"]))
    assert fits.status == 201, fits
    too_big = server.call("POST", "/v1/jobs", job(tasks=4, gpus_per_task=8, gpu_models=["H100"]))
    assert too_big.status == 422, too_big
    assert too_big.content_type == "application/problem+json"
    problem = too_big.json()
    assert problem["type"] == "urn:ferry:problem:unsatisfiable"
    assert "could ever hold 4 tasks" in problem["detail"], problem
    # A model neither the node nor the cloud pool has.
    wrong_model = server.call("POST", "/v1/jobs", job(gpus_per_task=1, gpu_models=["B200"]))
    assert wrong_model.status == 422, wrong_model
    assert wrong_model.json()["type"] == "urn:ferry:problem:unsatisfiable"
    assert len(server.all_job_ids()) == len(before) + 1

    # The accepted gang waits for the burst and says so.
    waiting = server.wait_job(fits.json()["id"],
                              lambda j: j["reason"] == "WAITING_FOR_PROVISIONING", 20,
                              "WAITING_FOR_PROVISIONING")
    assert waiting["state"] == "PENDING"
    events = server.admin("GET", f"/v1/jobs/{waiting['id']}/events")["events"]
    assert any("requested 2 node(s) in cloud pool 'cloud-h100'" in (e.get("message") or "")
               for e in events), events

    # The pool set decides which pools count: on-prem alone holds one task
    # (submitted last: the accepted one takes the on-prem node).
    only_onprem = server.call("POST", "/v1/jobs", job(tasks=2, gpus_per_task=8,
                                                      pool_set="onprem-only"))
    assert only_onprem.status == 422, only_onprem
    assert "pool set 'onprem-only'" in only_onprem.json()["detail"]
    assert server.call("POST", "/v1/jobs",
                       job(gpus_per_task=8, pool_set="onprem-only")).status == 201
    assert len(server.all_job_ids()) == len(before) + 2


def test_lengths_count_code_points(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    emoji = "\U0001F680"  # four bytes in UTF-8

    def submit(**spec):
        return server.call("POST", "/v1/jobs", job(**spec))

    for char in ("é", emoji):
        assert submit(name=char * 128).status == 201
        refused = submit(name=char * 129)
        assert refused.status == 422, refused
        errors = refused.json()["errors"]
        assert errors == [{"field": "name", "detail": "must have between 1 and 128 characters"}]
        assert submit(env={char * 128: char * 4096}).status == 201
        assert submit(env={char * 129: "x"}).status == 422
        assert submit(env={"K": char * 4097}).status == 422
        assert submit(labels={char * 128: char * 4096}).status == 201
        assert submit(datasets=[char * 128]).status == 201
        assert submit(datasets=[char * 129]).status == 422
    created = server.all_jobs()
    assert "é" * 128 in [j["name"] for j in created]


def test_invalid_utf8_is_a_clear_400(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    for raw in (b'{"name": "\xff", "command": ["true"]}',     # not UTF-8 at all
                b'{"name": "\xc3\xa9\xc3", "command": ["true"]}',  # cut in the middle
                b'{"name": "\xed\xa0\x80", "command": ["true"]}',  # a UTF-16 surrogate
                b'{"name": "\xc0\xaf", "command": ["true"]}'):     # an overlong "/"
        r = server.call("POST", "/v1/jobs", raw=raw)
        assert r.status == 400, (raw, r)
        problem = r.json()
        assert problem["type"] == "urn:ferry:problem:malformed-json"
        assert problem["detail"] == "the body is not valid UTF-8"
    assert server.all_job_ids() == []
    # Escaped non-ASCII is the same text as raw UTF-8.
    escaped = json.dumps(job(name="é" * 128), ensure_ascii=True)
    assert server.call("POST", "/v1/jobs", raw=escaped).status == 201


def test_lost_nodes_do_not_count_at_submission(fleet, tmp_path):
    server = fleet.server("sqlite", extra_args=["--rate", "0", "--lease-ms", "1000"])
    fleet.agent(server, "alive", "1xT4")
    register(server, "gone", "H200", 8)  # never syncs: its lease runs out
    harness.wait_for(lambda: server.admin("GET", "/v1/nodes/gone")["state"] == "LOST", 20,
                     "node gone LOST")
    refused = server.call("POST", "/v1/jobs", job(gpus_per_task=8, gpu_models=["H200"]))
    assert refused.status == 422, refused
    assert refused.json()["type"] == "urn:ferry:problem:unsatisfiable"
    assert server.call("POST", "/v1/jobs", job(gpus_per_task=1, gpu_models=["T4"])).status == 201


def raw_exchange(port, requests):
    """Sends each raw request on one kept-alive connection; returns the
    (status, body) of each response in order."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    replies = []
    try:
        stream = sock.makefile("rb")
        for raw in requests:
            sock.sendall(raw)
            status = int(stream.readline().split()[1])
            length = 0
            while True:
                line = stream.readline().strip()
                if not line:
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            replies.append((status, json.loads(stream.read(length) or b"null")))
    finally:
        sock.close()
    return replies


def submission(token, key_line, name="keyed"):
    body = json.dumps(job(name=name)).encode()
    return (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() +
            b"\r\nContent-Type: application/json\r\n" + key_line +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def test_an_empty_idempotency_key_is_refused(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    token = server.admin_token
    replies = raw_exchange(server.port, [
        submission(token, b"Idempotency-Key:\r\n"),
        submission(token, b"Idempotency-Key: \t \r\n"),
        submission(token, b"idempotency-key:\r\n"),
        # The same connection goes on serving: a real key, then its replay.
        submission(token, b"Idempotency-Key: k-1\r\n"),
        submission(token, b"Idempotency-Key: k-1\r\n"),
        # A client cannot fake the listener's note of empty headers.
        submission(token, b"Ferry-Empty-Headers: idempotency-key\r\n", name="plain"),
    ])
    for status, problem in replies[:3]:
        assert status == 400, problem
        assert problem["type"] == "urn:ferry:problem:bad-request"
        assert "Idempotency-Key" in problem["detail"]
    assert replies[3][0] == 201 and replies[4][0] == 201
    assert replies[3][1]["id"] == replies[4][1]["id"]
    assert replies[5][0] == 201
    assert sorted(j["name"] for j in server.all_jobs()) == ["keyed", "plain"]
