"""kill -9 of `ferry server` in the middle of a submission burst: every job
that got a 201 survives exactly once, and retrying every request with its
Idempotency-Key creates no duplicates (replays for the committed ones)."""

import collections
import http.client
import threading
import time

import pytest

import harness
from conftest import BACKENDS

THREADS = 6
PER_THREAD = 150


def body_for(key):
    return {"name": key, "command": ["true"], "labels": {"burst": "crash", "key": key}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_kill9_mid_burst_keeps_every_acknowledged_job_once(fleet, backend):
    store = fleet.store_url(backend)
    # No rate limit: the burst is the point. No nodes: jobs stay PENDING.
    server = fleet.server(backend, extra_args=["--rate", "0"], store_url=store)
    tokens = [server.create_user(f"burst{t}") for t in range(THREADS)]
    port = server.port

    outcomes = {}  # key -> (thread, status, job id or None)
    lock = threading.Lock()
    acknowledged = threading.Semaphore(0)

    def submit(t):
        for n in range(PER_THREAD):
            key = f"t{t}-{n}"
            try:
                r = harness.request(port, "POST", "/v1/jobs", body=body_for(key), token=tokens[t],
                                    headers={"Idempotency-Key": key}, timeout=5)
                job_id = r.json().get("id") if r.status == 201 else None
            except (OSError, http.client.HTTPException, ValueError):
                # Unknown outcome: the server died before, during or after the commit.
                with lock:
                    outcomes[key] = (t, None, None)
                return
            with lock:
                outcomes[key] = (t, r.status, job_id)
            if r.status == 201:
                acknowledged.release()

    threads = [threading.Thread(target=submit, args=(t,), daemon=True) for t in range(THREADS)]
    for th in threads:
        th.start()
    # Kill once a good share of the burst is acknowledged (bounded wait).
    deadline = time.monotonic() + 30
    for _ in range(THREADS * PER_THREAD // 3):
        if not acknowledged.acquire(timeout=max(0.0, deadline - time.monotonic())):
            break
    server.kill9()
    for th in threads:
        th.join(timeout=30)
        assert not th.is_alive(), "a submitting thread hung after the kill"

    statuses = collections.Counter(s for _, s, _ in outcomes.values())
    print(f"burst before the kill: {dict(statuses)} (None: cut off by the kill)")
    assert statuses[201] > 0, statuses
    assert statuses[None] > 0, f"the kill came after the burst: {statuses}"
    assert set(statuses) <= {201, None}, f"unexpected answers during the burst: {statuses}"

    server.start()  # same store, same data dir
    by_name = collections.Counter()
    jobs = {}
    for job in server.all_jobs():
        by_name[job["name"]] += 1
        jobs[job["name"]] = job
    duplicates = [name for name, count in by_name.items() if count > 1]
    assert not duplicates, f"jobs stored twice: {duplicates[:10]}"
    for key, (t, status, job_id) in outcomes.items():
        if status == 201:
            assert key in jobs, f"{key} got 201 (job {job_id}) but is gone after the crash"
            assert jobs[key]["id"] == job_id
            assert jobs[key]["user"] == f"burst{t}"

    # Retry every attempted request with its key: committed ones replay with
    # the original id, lost ones are created now; no key yields two jobs.
    replayed = 0
    for key, (t, status, job_id) in sorted(outcomes.items()):
        r = harness.request(server.port, "POST", "/v1/jobs", body=body_for(key), token=tokens[t],
                            headers={"Idempotency-Key": key}, timeout=10)
        assert r.status == 201, f"{key}: {r}"
        if key in jobs:
            assert r.headers.get("idempotent-replayed") == "true", f"{key} was not replayed"
            assert r.json()["id"] == jobs[key]["id"]
            replayed += 1
        else:
            assert r.headers.get("idempotent-replayed") != "true", f"{key} replayed a lost job"
    assert replayed >= statuses[201]

    names = collections.Counter(j["name"] for j in server.all_jobs())
    assert set(names) == set(outcomes), "the store differs from the attempted keys"
    assert max(names.values()) == 1, "a retry created a duplicate"
