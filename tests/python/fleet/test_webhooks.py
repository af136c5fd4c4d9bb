"""Webhooks (docs/fleet-api.md, "Webhooks") against a real `ferry server`
and a real HTTP receiver on loopback: signed deliveries of job state
changes, retries with backoff after failures, a delivery that runs out of
attempts, deliveries that survive a server restart, tenant scoping, and the
bad requests the API refuses."""

import hashlib
import hmac
import http.server
import json
import threading

import harness

AGENT_ARGS = ["--cpus", "4", "--memory-mb", "8192", "--sync-wait-ms", "500"]


class Receiver:
    """An HTTP server that records every POST; the first `fail_first`
    requests are answered 503."""

    def __init__(self, fail_first=0, port=0):
        self.requests = []  # dicts: path, headers (lower-cased), body (bytes), answered
        self.fail_first = fail_first
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    status = 503 if len(receiver.requests) < receiver.fail_first else 200
                    receiver.requests.append({
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body, "answered": status})
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else b"no")

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def delivered(self, path):
        """The bodies answered 200 on `path`, parsed, with their headers."""
        with self.lock:
            return [(json.loads(r["body"]), r["headers"]) for r in self.requests
                    if r["path"] == path and r["answered"] == 200]

    def on(self, path):
        with self.lock:
            return [r for r in self.requests if r["path"] == path]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def signature(secret, headers, body):
    message = headers["x-ferry-timestamp"].encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()




def test_signed_deliveries_retry_and_stay_in_their_tenant(fleet):
    receiver = Receiver(fail_first=2)
    server = fleet.server("sqlite", extra_args=["--rate", "0", "--webhook-retry-base-ms", "200"])
    fleet.agent(server, "node-a", "1xH200", AGENT_ARGS)
    alice = server.create_user("alice", tenant="tenant-a", team="ml")
    bob = server.create_user("bob", tenant="tenant-b", team="ml")
    try:
        r = server.call("POST", "/v1/webhooks", {"url": receiver.url("/alice"),
                                                 "description": "CI"}, token=alice)
        assert r.status == 201, r
        hook = r.json()
        assert hook["secret"].startswith("whsec_") and len(hook["secret"]) > 40
        assert hook["states"] == ["SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"]
        assert hook["tenant"] == "tenant-a" and hook["created_by"] == "alice"
        assert r.headers["location"] == f"/v1/webhooks/{hook['id']}"
        theirs = server.call("POST", "/v1/webhooks", {"url": receiver.url("/bob"),
                                                      "states": ["RUNNING"]}, token=bob).json()

        ok = server.call("POST", "/v1/jobs", {"name": "ok", "command": ["true"]},
                         token=alice).json()["id"]
        server.wait_state(ok, "SUCCEEDED")
        waits = server.call("POST", "/v1/jobs", {"name": "waits", "command": ["true"],
                                                 "gpus_per_task": 8}, token=alice)
        assert waits.status == 422  # never fits: refused, nothing to tell
        pending = server.call("POST", "/v1/jobs", {"name": "cancelled", "command": ["sleep", "60"],
                                                   "gpus_per_task": 1}, token=alice).json()["id"]
        server.wait_state(pending, "RUNNING")
        assert server.call("POST", f"/v1/jobs/{pending}:cancel", token=alice).status == 200

        harness.wait_for(lambda: len(receiver.delivered("/alice")) == 2, 30,
                         "two deliveries to alice's receiver")
        got = receiver.delivered("/alice")
        states = sorted(body["event"]["state"] for body, _ in got)
        assert states == ["CANCELLED", "SUCCEEDED"], got
        with receiver.lock:
            exact = [r for r in receiver.requests if r["path"] == "/alice"]
        for r in exact:
            assert r["headers"]["x-ferry-signature"] == signature(hook["secret"], r["headers"],
                                                                   r["body"]), r
            assert r["headers"]["content-type"] == "application/json"
            assert r["headers"]["x-ferry-webhook-id"] == str(hook["id"])
            body = json.loads(r["body"])
            assert body["type"] == "job.state" and body["webhook_id"] == hook["id"]
            assert body["event"]["tenant"] == "tenant-a"
            assert body["event"]["job_id"] in (ok, pending)
        # The first two attempts were refused (503) and retried: each
        # delivery's attempts are numbered 1, 2, ... and the log agrees.
        assert [r["answered"] for r in exact].count(503) == 2, exact
        log = server.call("GET", f"/v1/webhooks/{hook['id']}/deliveries", token=alice).json()
        assert sorted(d["status"] for d in log["deliveries"]) == ["delivered", "delivered"]
        for d in log["deliveries"]:
            sent = [r["headers"]["x-ferry-attempt"] for r in exact
                    if r["headers"]["x-ferry-delivery-id"] == str(d["id"])]
            assert sent == [str(n) for n in range(1, d["attempts"] + 1)], (d, sent)
            assert d["last_status_code"] == 200 and d["last_error"] == "", d
            assert d["finished_at"] is not None and d["next_attempt_at"] is None, d
            assert d["body"]["event"]["job_id"] == d["job_id"]
        assert sum(d["attempts"] for d in log["deliveries"]) == 4

        # Bob asked for RUNNING of tenant B: none of alice's events reach him.
        assert receiver.on("/bob") == []
        assert [h["id"] for h in server.call("GET", "/v1/webhooks", token=bob).json()["webhooks"]] \
            == [theirs["id"]]
        assert "secret" not in server.call("GET", f"/v1/webhooks/{theirs['id']}",
                                           token=bob).json()
        for method, path in (("GET", f"/v1/webhooks/{hook['id']}"),
                             ("GET", f"/v1/webhooks/{hook['id']}/deliveries"),
                             ("DELETE", f"/v1/webhooks/{hook['id']}")):
            assert server.call(method, path, token=bob).status == 404, (method, path)
        # Platform admins see every tenant's webhooks.
        every = server.call("GET", "/v1/webhooks").json()["webhooks"]
        assert {h["id"] for h in every} == {hook["id"], theirs["id"]}

        assert harness.metric(server, 'ferry_webhook_attempts_total{outcome="delivered"}') == 2
        assert harness.metric(server, 'ferry_webhook_attempts_total{outcome="retry"}') == 2
        assert harness.metric(server, "ferry_webhook_deliveries_total") == 2

        # Deleted: nothing more is sent to it (a second webhook, made before
        # the next job, shows the dispatcher got that far).
        assert server.call("DELETE", f"/v1/webhooks/{hook['id']}", token=alice).status == 204
        assert server.call("GET", f"/v1/webhooks/{hook['id']}", token=alice).status == 404
        server.call("POST", "/v1/webhooks", {"url": receiver.url("/alice2")}, token=alice)
        again = server.call("POST", "/v1/jobs", {"name": "after", "command": ["true"]},
                            token=alice).json()["id"]
        server.wait_state(again, "SUCCEEDED")
        harness.wait_for(lambda: receiver.delivered("/alice2"), 20, "the second webhook's delivery")
        assert [b["event"]["job_id"] for b, _ in receiver.delivered("/alice2")] == [again]
        assert len(receiver.on("/alice")) == len(exact)
    finally:
        receiver.close()


def test_bad_webhooks_are_refused(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    user = server.create_user("carol", tenant="tenant-c", team="ml")
    bad = [
        {},
        {"url": "ftp://example.com/hook"},
        {"url": "http://user:pw@example.com/"},
        {"url": "http://exa mple.com/"},
        {"url": "http://example.com:99999/"},
        {"url": "http://example.com/#frag"},
        {"url": "https://"},
        {"url": "http://example.com/", "states": []},
        {"url": "http://example.com/", "states": ["BOGUS"]},
        {"url": "http://example.com/", "states": "SUCCEEDED"},
        {"url": "http://example.com/", "colour": "red"},
        {"url": "http://example.com/", "description": "x" * 201},
        {"url": 42},
    ]
    for body in bad:
        r = server.call("POST", "/v1/webhooks", body, token=user)
        assert r.status == 422 and r.content_type == "application/problem+json", (body, r)
    r = server.call("POST", "/v1/webhooks", raw=b"{not json", token=user)
    assert r.status == 400, r
    r = server.call("POST", "/v1/webhooks", {"url": "http://example.com/", "all_tenants": True},
                    token=user)
    assert r.status == 403, r
    for path in ("/v1/webhooks/0", "/v1/webhooks/x", "/v1/webhooks/999/deliveries"):
        assert server.call("GET", path, token=user).status == 404, path
    assert server.call("GET", "/v1/webhooks", token=user).json()["webhooks"] == []


def test_a_dead_receiver_fails_after_the_last_attempt_and_restarts_lose_nothing(fleet):
    url = fleet.store_url("sqlite")
    server = fleet.server(store_url=url,
                          extra_args=["--rate", "0", "--webhook-retry-base-ms", "100",
                                      "--webhook-max-attempts", "3"])
    dead_port = harness.free_port()  # nothing listens there
    dead = server.admin("POST", "/v1/webhooks",
                        {"url": f"http://127.0.0.1:{dead_port}/x", "states": ["CANCELLED"]})
    job = server.admin("POST", "/v1/jobs", {"name": "j", "command": ["true"], "gpus_per_task": 0})
    server.admin("POST", f"/v1/jobs/{job['id']}:cancel")

    def deliveries(hook):
        return server.admin("GET", f"/v1/webhooks/{hook['id']}/deliveries")["deliveries"]

    harness.wait_for(lambda: [d["status"] for d in deliveries(dead)] == ["failed"], 30,
                     "the delivery to fail")
    failed = deliveries(dead)[0]
    assert failed["attempts"] == 3 and failed["last_status_code"] is None, failed
    assert failed["last_error"], failed
    assert harness.metric(server, 'ferry_webhook_attempts_total{outcome="failed"}') == 1

    # A receiver that is down while the server restarts: the pending delivery
    # is in the store and goes out once both are back.
    port = harness.free_port()
    server.stop()
    server.extra_args = ["--rate", "0", "--webhook-retry-base-ms", "300",
                         "--webhook-max-attempts", "50"]
    server.start()
    later = server.admin("POST", "/v1/webhooks",
                         {"url": f"http://127.0.0.1:{port}/later", "states": ["CANCELLED"]})
    job2 = server.admin("POST", "/v1/jobs", {"name": "k", "command": ["true"]})
    server.admin("POST", f"/v1/jobs/{job2['id']}:cancel")
    harness.wait_for(lambda: deliveries(later) and deliveries(later)[0]["attempts"] >= 1, 30,
                     "a failed first attempt")
    server.stop()
    receiver = Receiver(port=port)
    try:
        server.start()
        harness.wait_for(lambda: receiver.delivered("/later"), 30, "the delivery after restart")
        got = receiver.delivered("/later")
        assert len(got) == 1 and got[0][0]["event"]["job_id"] == job2["id"], got
        assert deliveries(later)[0]["status"] == "delivered"
        # The failed delivery is not retried after the restart (the dead
        # webhook has a new one, for the second job, still retrying).
        again = {d["id"]: d for d in deliveries(dead)}
        assert again[failed["id"]]["status"] == "failed"
        assert again[failed["id"]]["attempts"] == 3
        assert [d["job_id"] for d in again.values() if d["status"] == "pending"] == [job2["id"]]
    finally:
        receiver.close()


def test_a_per_job_webhook_hears_of_that_job_only(fleet):
    receiver = Receiver()
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    dana = server.create_user("dana", tenant="tenant-d", team="ml")
    erin = server.create_user("erin", tenant="tenant-e", team="ml")
    try:
        mine = server.call("POST", "/v1/jobs", {"name": "mine", "command": ["true"]},
                           token=dana).json()["id"]
        other = server.call("POST", "/v1/jobs", {"name": "other", "command": ["true"]},
                            token=dana).json()["id"]
        # Another tenant's job is not one erin may watch.
        r = server.call("POST", "/v1/webhooks", {"url": receiver.url("/e"), "job_id": mine},
                        token=erin)
        assert r.status == 422 and r.json()["errors"][0]["field"] == "job_id", r
        hook = server.call("POST", "/v1/webhooks", {"url": receiver.url("/d"), "job_id": mine,
                                                    "states": ["CANCELLED"]}, token=dana)
        assert hook.status == 201 and hook.json()["job_id"] == mine, hook
        assert server.call("POST", f"/v1/jobs/{other}:cancel", token=dana).status == 200
        assert server.call("POST", f"/v1/jobs/{mine}:cancel", token=dana).status == 200
        harness.wait_for(lambda: receiver.delivered("/d"), 20, "the job's delivery")
        got = receiver.delivered("/d")
        assert [b["event"]["job_id"] for b, _ in got] == [mine], got
        assert got[0][0]["event"]["state"] == "CANCELLED"
        assert receiver.on("/e") == []
    finally:
        receiver.close()
