"""Prefetch while pending, end to end: `ferry server`, two agents and a real
S3 server (SeaweedFS). A job that waits for a GPU has a node held for it (a
backfill reservation or a drain); that node's agent fetches the job's inputs
into its cache while the job is still PENDING, so when the GPU frees the job
finds everything in the cache. Counted bytes (the agents' /metrics and the
`prefetched` and `staged` events) prove where the bytes came from and when."""

import tarfile
import time

import pytest

import harness
from harness import events, port_metric as metric
import s3server
from test_code import tar_gz, upload
from test_staging import blob, register, s3  # noqa: F401 (s3: the SeaweedFS fixture)

pytestmark = pytest.mark.skipif(s3server.missing() is not None,
                                reason=s3server.missing() or "")


def submit(server, name, command, inputs=(), max_runtime=None, code=None):
    body = {"name": name, "command": ["sh", "-c", command], "gpus_per_task": 1,
            "gpu_models": ["H200"], "inputs": list(inputs), "max_retries": 0}
    if max_runtime is not None:
        body["max_runtime_seconds"] = max_runtime
    if code is not None:
        body["code"] = code
    r = server.call("POST", "/v1/jobs", body)
    assert r.status == 201, r
    return r.json()["id"]


def start_fleet(fleet, s3, tmp_path, extra_server_args=()):
    server = fleet.server(extra_args=["--rate", "0", *extra_server_args])
    config = s3.storage_config(tmp_path / "storage.yaml")
    ports = {}
    for name in ("node-a", "node-b"):
        ports[name] = harness.free_port()
        fleet.agent(server, name, gpus="1xH200",
                    extra_args=["--storage-config", config,
                                "--metrics-listen", f"127.0.0.1:{ports[name]}"])
    return server, ports


def corpus(s3):
    s3.mkbucket("lake")
    objects = {"a.bin": blob(3_000_000, 5), "b.bin": blob(700_000, 6)}
    for path, data in objects.items():
        s3.put("lake", f"corpus/{path}", data)
    return objects, sum(len(d) for d in objects.values())


def test_a_waiting_job_finds_its_inputs_already_on_its_reserved_node(fleet, s3, tmp_path):
    objects, total = corpus(s3)
    server, ports = start_fleet(fleet, s3, tmp_path)
    register(server, "corpus", "s3://lake/corpus/", objects)
    # Both GPUs busy: one job that never declares an end, one that declares
    # it ends within 10 minutes. A job blocked behind them gets a backfill
    # reservation on the second one's node.
    unlimited = submit(server, "unlimited", "sleep 600")
    server.wait_state(unlimited, ["RUNNING"], timeout=30)
    bounded = submit(server, "bounded", "sleep 600", max_runtime=600)
    server.wait_state(bounded, ["RUNNING"], timeout=30)
    held = server.job(bounded)["placement"][0]["node"]
    other = "node-b" if held == "node-a" else "node-a"

    reader = submit(server, "reader", 'cat "$FERRY_INPUTS_DIR"/d/* | wc -c',
                    inputs=[{"name": "d", "dataset": "corpus"}])
    harness.wait_for(lambda: events(server, reader, "prefetched"), 30, "the prefetched event")
    job = server.job(reader)
    assert job["state"] == "PENDING", job
    explanation = job["explanation"]
    assert explanation["held_nodes"] == [held], explanation
    assert explanation["planned_start"] is not None, explanation
    note = events(server, reader, "prefetched")[0]
    assert note["actor"] == f"agent:{held}", note
    assert f"prefetched on {held} while the job waits" in note["message"], note
    assert "1 input, 2 objects" in note["message"] and "0 B from the node cache" in note["message"]
    # The bytes crossed the network to the held node only, and stay pinned
    # there (safe from eviction) while the job waits.
    assert metric(ports[held], "ferry_agent_cache_fetched_bytes_total") == total
    assert metric(ports[other], "ferry_agent_cache_fetched_bytes_total") == 0
    assert metric(ports[held], "ferry_agent_cache_pinned_bytes") == total

    # The GPU frees: the reader runs on the held node and downloads nothing.
    server.admin("POST", f"/v1/jobs/{bounded}:cancel", {})
    done = server.wait_state(reader, ["SUCCEEDED", "FAILED"], timeout=60)
    assert done["state"] == "SUCCEEDED", (done, server.logs(reader))
    assert done["attempts"][-1]["placement"][0]["node"] == held
    out = "".join(c["data"] for c in server.logs(reader))
    assert str(total) in out, out
    staged = events(server, reader, "staged")[0]["message"]
    assert "0 B fetched" in staged, staged
    assert metric(ports[held], "ferry_agent_cache_fetched_bytes_total") == total
    assert metric(ports[held], "ferry_agent_cache_hit_bytes_total") == total
    # The timeline: prefetched while PENDING, before the admission.
    timeline = server.admin("GET", f"/v1/jobs/{reader}/events")["events"]
    kinds = [e["type"] if e["type"] != "state" else e["state"] for e in timeline]
    assert kinds.index("prefetched") < kinds.index("ADMITTED") < kinds.index("staged"), kinds
    harness.wait_for(lambda: metric(ports[held], "ferry_agent_cache_pinned_bytes") == 0, 30,
                     "pins released after the job")
    server.admin("POST", f"/v1/jobs/{unlimited}:cancel", {})


def test_a_cancelled_waiting_job_gives_its_prefetch_pins_back(fleet, s3, tmp_path):
    objects, total = corpus(s3)
    server, ports = start_fleet(fleet, s3, tmp_path)
    register(server, "corpus", "s3://lake/corpus/", objects)
    # Both GPUs held by jobs without a max runtime: no start can be planned,
    # and the blocked job drains a node (held for it all the same).
    blockers = [submit(server, f"blocker-{i}", "sleep 600") for i in range(2)]
    for job_id in blockers:
        server.wait_state(job_id, ["RUNNING"], timeout=30)
    reader = submit(server, "reader", "true", inputs=[{"name": "d", "dataset": "corpus"}])
    harness.wait_for(lambda: events(server, reader, "prefetched"), 30, "the prefetched event")
    held = server.job(reader)["explanation"]["held_nodes"]
    assert len(held) == 1, held
    assert metric(ports[held[0]], "ferry_agent_cache_pinned_bytes") == total
    server.admin("POST", f"/v1/jobs/{reader}:cancel", {})
    server.wait_state(reader, ["CANCELLED"], timeout=30)
    harness.wait_for(lambda: metric(ports[held[0]], "ferry_agent_cache_pinned_bytes") == 0, 30,
                     "the prefetch pins released")
    # The bytes stay cached (just no longer pinned).
    assert metric(ports[held[0]], "ferry_agent_cache_bytes") >= total
    for job_id in blockers:
        server.admin("POST", f"/v1/jobs/{job_id}:cancel", {})


def test_prefetch_is_off_with_a_window_of_zero(fleet, s3, tmp_path):
    objects, total = corpus(s3)
    server, ports = start_fleet(fleet, s3, tmp_path, ["--prefetch-window-s", "0"])
    register(server, "corpus", "s3://lake/corpus/", objects)
    blockers = [submit(server, f"blocker-{i}", "sleep 600", max_runtime=600) for i in range(2)]
    for job_id in blockers:
        server.wait_state(job_id, ["RUNNING"], timeout=30)
    reader = submit(server, "reader", "true", inputs=[{"name": "d", "dataset": "corpus"}])
    harness.wait_for(lambda: server.job(reader)["explanation"] is not None, 30,
                     "the reader's explanation")
    # Still held (a reservation), but nothing is fetched ahead.
    assert len(server.job(reader)["explanation"]["held_nodes"]) == 1
    harness.wait_for(lambda: all(metric(p, "ferry_agent_cache_pinned_bytes") == 0
                                 for p in ports.values()), 5, "no pins")
    time.sleep(2)
    assert not events(server, reader, "prefetched")
    assert all(metric(p, "ferry_agent_cache_fetched_bytes_total") == 0 for p in ports.values())
    for job_id in blockers:
        server.admin("POST", f"/v1/jobs/{job_id}:cancel", {})


def test_a_waiting_job_finds_its_code_bundle_already_on_its_reserved_node(fleet, s3, tmp_path):
    server, ports = start_fleet(fleet, s3, tmp_path)
    script = tarfile.TarInfo("main.sh")
    script.mode = 0o755
    bundle = tar_gz([(script, b"echo code-ran-$((6 * 7))\n" + b"#" * 200_000 + b"\n")])
    r = upload(server, bundle)
    assert r.status == 201, r
    digest = r.json()["digest"]
    unlimited = submit(server, "unlimited", "sleep 600")
    server.wait_state(unlimited, ["RUNNING"], timeout=30)
    bounded = submit(server, "bounded", "sleep 600", max_runtime=600)
    server.wait_state(bounded, ["RUNNING"], timeout=30)
    held = server.job(bounded)["placement"][0]["node"]
    other = "node-b" if held == "node-a" else "node-a"

    # No inputs: only the code bundle is there to fetch ahead.
    coder = submit(server, "coder", 'sh "$FERRY_CODE_DIR"/main.sh', code={"bundle": digest})
    harness.wait_for(lambda: events(server, coder, "prefetched"), 30, "the prefetched event")
    assert server.job(coder)["state"] == "PENDING"
    note = events(server, coder, "prefetched")[0]["message"]
    assert f"prefetched on {held} while the job waits" in note, note
    assert f"code bundle {digest[:19]}" in note and "fetched)" in note, note
    assert metric(ports[held], "ferry_agent_cache_fetched_bytes_total") == len(bundle)
    assert metric(ports[other], "ferry_agent_cache_fetched_bytes_total") == 0
    assert metric(ports[held], "ferry_agent_cache_pinned_bytes") == len(bundle)

    server.admin("POST", f"/v1/jobs/{bounded}:cancel", {})
    done = server.wait_state(coder, ["SUCCEEDED", "FAILED"], timeout=60)
    assert done["state"] == "SUCCEEDED", (done, server.logs(coder))
    assert done["attempts"][-1]["placement"][0]["node"] == held
    assert "code-ran-42" in "".join(c["data"] for c in server.logs(coder))
    # Staging unpacked the bundle from the cache: no second download.
    staged = events(server, coder, "staged")[0]["message"]
    assert "from the node cache" in staged, staged
    assert metric(ports[held], "ferry_agent_cache_fetched_bytes_total") == len(bundle)
    server.admin("POST", f"/v1/jobs/{unlimited}:cancel", {})
