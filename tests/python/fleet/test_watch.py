"""GET /v1/jobs:watch against a real `ferry server` (docs/fleet-api.md,
"Watching jobs"): a server-sent event stream read while jobs are submitted
and cancelled with the CLI, scoped to the caller's tenant, resumed with
Last-Event-ID; the JSON long poll; and 1,000 slow clients (event streams,
long polls, /metrics) that must not stop a submission from succeeding."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import harness

sys.path.insert(0, str(harness.REPO / "bench" / "fleet"))
from slow_clients import SlowClients  # noqa: E402


class EventStream:
    """The watch stream read on its own thread: the parsed events in order."""

    def __init__(self, port, token, query="", last_event_id=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        head = (f"GET /v1/jobs:watch{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Accept: text/event-stream\r\nAuthorization: Bearer {token}\r\n")
        if last_event_id is not None:
            head += f"Last-Event-ID: {last_event_id}\r\n"
        self.sock.sendall((head + "\r\n").encode())
        self.status_line = None
        self.headers = {}
        self.events = []  # dicts: id, event, data (parsed JSON)
        self.comments = 0
        self.closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        buffer = b""
        try:
            while b"\r\n\r\n" not in buffer:
                chunk = self.sock.recv(4096)
                if not chunk:
                    self.closed = True
                    return
                buffer += chunk
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            lines = head.decode().split("\r\n")
            self.status_line = lines[0]
            self.headers = {k.lower(): v.strip() for k, v in
                            (line.split(":", 1) for line in lines[1:])}
            self.sock.settimeout(None)
            while True:
                while b"\n\n" in buffer:
                    frame, buffer = buffer.split(b"\n\n", 1)
                    self._frame(frame.decode())
                chunk = self.sock.recv(4096)
                if not chunk:
                    break
                buffer += chunk
        except OSError:
            pass
        self.closed = True

    def _frame(self, frame):
        fields = {}
        for line in frame.split("\n"):
            if line.startswith(":"):
                self.comments += 1
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if "data" in fields:
            with self._lock:
                self.events.append({"id": int(fields.get("id", "-1")),
                                    "event": fields.get("event", "message"),
                                    "data": json.loads(fields["data"])})

    def states(self, job_id):
        with self._lock:
            return [e["data"]["state"] for e in self.events
                    if e["event"] == "state" and e["data"]["job_id"] == job_id]

    def job_ids(self):
        with self._lock:
            return {e["data"]["job_id"] for e in self.events if "job_id" in e["data"]}

    def wait_state(self, job_id, state, timeout=20):
        harness.wait_for(lambda: state in self.states(job_id), timeout,
                         f"job {job_id} {state} on the stream")

    def close(self):
        self.sock.close()


def cli_json(server, *args, token=None):
    done = harness.cli(server, *args, token=token)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip().startswith("{") else done.stdout


def test_stream_follows_cli_submit_and_cancel_scoped_and_resumable(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    alice = server.create_user("alice", tenant="tenant-a", team="ml")
    bob = server.create_user("bob", tenant="tenant-b", team="ml")
    mine, theirs = EventStream(server.port, alice), EventStream(server.port, bob)
    try:
        harness.wait_for(lambda: mine.events and theirs.events, 10, "the ready events")
        assert mine.status_line == "HTTP/1.1 200 OK"
        assert mine.headers["content-type"] == "text/event-stream"
        assert mine.events[0]["event"] == "ready"

        # Nothing runs it (no agent): it waits, then the CLI cancels it.
        job = cli_json(server, "submit", "--json", "--name", "watched", "--", "true",
                       token=alice)["id"]
        other = cli_json(server, "submit", "--json", "--name", "theirs", "--", "true",
                         token=bob)["id"]
        mine.wait_state(job, "PENDING")
        done = harness.cli(server, "cancel", str(job), token=alice)
        assert done.returncode == 0, done.stderr
        mine.wait_state(job, "CANCELLED")
        theirs.wait_state(other, "PENDING")
        ids = [e["id"] for e in mine.events[1:]]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        cancelled = [e for e in mine.events if e["data"].get("state") == "CANCELLED"][0]
        assert cancelled["data"]["reason"] == "CANCELLED_BY_USER"
        assert cancelled["data"]["tenant"] == "tenant-a"
        assert cancelled["data"]["at"].endswith("Z")
        # Tenant B saw none of tenant A's events, and the reverse.
        time.sleep(0.5)
        assert mine.job_ids() == {job}
        assert theirs.job_ids() == {other}

        # Reconnecting with the id of the first event resumes after it.
        first = mine.events[1]["id"]
        resumed = EventStream(server.port, alice, last_event_id=first)
        try:
            resumed.wait_state(job, "CANCELLED")
            assert all(e["id"] > first for e in resumed.events[1:])
            assert resumed.states(job) == ["CANCELLED"]
        finally:
            resumed.close()

        # The long poll: terminal states only, from the start.
        r = server.call("GET", "/v1/jobs:watch?since=0&state=CANCELLED,SUCCEEDED&timeout_s=5",
                        token=alice)
        assert r.status == 200, r
        body = r.json()
        assert [e["job_id"] for e in body["events"]] == [job]
        assert body["next_since"] >= cancelled["id"]
        r = server.call("GET", f"/v1/jobs:watch?since={body['next_since']}&timeout_s=1",
                        token=bob)
        assert r.status == 200 and r.json()["events"] == [], r
        for bad in ("since=-3", "since=x", "since=99999999", "timeout_s=1000&since=0",
                    "state=BOGUS"):
            r = server.call("GET", f"/v1/jobs:watch?{bad}", token=alice)
            assert r.status == 400 and r.content_type == "application/problem+json", (bad, r)
    finally:
        mine.close()
        theirs.close()




def test_thousand_slow_clients_do_not_stop_submissions(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    # 600 event streams, 200 long polls, 200 /metrics; half never read.
    slow = SlowClients(server.port, server.admin_token, 1000).start()
    try:
        assert slow.wait_open(60), "the slow clients could not all connect"
        streams = 'ferry_watch_streams{kind="sse"}'
        harness.wait_for(lambda: harness.metric(server, streams) == 600, 30,
                         "600 open event streams in ferry_watch_streams")
        watcher = EventStream(server.port, server.admin_token)
        try:
            # The submission's normal CLI timeout (harness.cli: 30 s) is the only bound.
            job = cli_json(server, "submit", "--json", "--name", "under-load", "--", "true")["id"]
            watcher.wait_state(job, "PENDING")
            done = harness.cli(server, "cancel", str(job))
            assert done.returncode == 0, done.stderr
            watcher.wait_state(job, "CANCELLED")
        finally:
            watcher.close()
        assert server.call("GET", "/healthz").status == 200
        assert server.proc.running()
        # The long polls beyond a quarter of the pool were refused (503 and
        # reconnected); the streams were all admitted.
        assert harness.metric(server, 'ferry_watch_rejected_total{kind="long_poll"}') > 0
        assert harness.metric(server, 'ferry_watch_rejected_total{kind="sse"}') == 0
        assert harness.metric(server, 'ferry_watch_events_sent_total{kind="sse"}') > 0
        assert slow.connect_errors == 0
    finally:
        slow.stop()
    # Their connections closed: the streams are gone from the gauge.
    harness.wait_for(lambda: harness.metric(server, 'ferry_watch_streams{kind="sse"}') == 0, 30,
                     "the closed streams to leave ferry_watch_streams")


class HeldTransaction:
    """A psql session that inserts one job event in an open transaction, so
    that its id is taken but not visible until commit (or never)."""

    def __init__(self, url, job_id, message):
        psql = os.path.join(harness.pg_bin(), "psql")
        self.proc = subprocess.Popen([psql, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", url],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.proc.stdin.write(
            "BEGIN;\n"
            "INSERT INTO job_events (job_id, at_ms, type, message)"
            f" VALUES ({int(job_id)}, 0, 'note', '{message}') RETURNING id;\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        assert line.isdigit(), f"psql: {line}{self.proc.stdout.read() if not line else ''}"
        self.event_id = int(line)

    def end(self, how):
        self.proc.stdin.write(how + ";\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0, self.proc.stdout.read()


def test_stream_waits_for_an_event_committed_late_on_postgresql(fleet):
    """PostgreSQL hands out event ids when rows are inserted and shows them
    at commit, so id N+1 can be visible before id N. The stream holds back
    at the missing id until the transaction holding it ends: committed, the
    event is streamed in id order; rolled back, the stream goes on."""
    url = fleet.store_url("postgresql")
    server = fleet.server(store_url=url, extra_args=["--rate", "0"])
    stream = EventStream(server.port, server.admin_token)
    try:
        harness.wait_for(lambda: stream.events, 10, "the ready event")
        # The held event belongs to a job of its own: its row lock (the
        # event's foreign key) would hold up a cancel of that job.
        quiet = server.admin("POST", "/v1/jobs", {"name": "quiet", "command": ["true"]})["id"]
        job = server.admin("POST", "/v1/jobs", {"name": "held", "command": ["true"]})["id"]
        stream.wait_state(job, "PENDING")

        held = HeldTransaction(url, quiet, "committed late")
        r = server.call("POST", f"/v1/jobs/{job}:cancel")
        assert r.status == 200, r
        # The cancel's events are newer than the held one: they wait too.
        time.sleep(1.5)
        assert "CANCELLED" not in stream.states(job)
        assert not [e for e in stream.events if e["event"] == "note"]
        held.end("COMMIT")
        stream.wait_state(job, "CANCELLED")
        ids = [e["id"] for e in stream.events[1:]]
        assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
        notes = [e for e in stream.events if e["event"] == "note"]
        assert [e["id"] for e in notes] == [held.event_id], stream.events
        assert notes[0]["data"]["message"] == "committed late"
        assert harness.metric(server, 'ferry_watch_gaps_total{outcome="filled"}') >= 1

        # A transaction that rolls back leaves its id missing for good.
        other = server.admin("POST", "/v1/jobs", {"name": "after", "command": ["true"]})["id"]
        stream.wait_state(other, "PENDING")
        lost = HeldTransaction(url, quiet, "rolled back")
        server.call("POST", f"/v1/jobs/{other}:cancel")
        time.sleep(1.0)
        assert "CANCELLED" not in stream.states(other)
        lost.end("ROLLBACK")
        stream.wait_state(other, "CANCELLED")
        assert all(e["id"] != lost.event_id for e in stream.events)
        assert harness.metric(server, 'ferry_watch_gaps_total{outcome="rolled_back"}') >= 1
        assert harness.metric(server, 'ferry_watch_gaps_total{outcome="expired"}') == 0

        # The long poll reads the hub's settled head, so it agrees.
        r = server.call("GET", "/v1/jobs:watch?since=0&timeout_s=1")
        polled = [e["id"] for e in r.json()["events"]]
        assert held.event_id in polled and lost.event_id not in polled
    finally:
        stream.close()
