"""Stage-in of job inputs end to end: `ferry server`, two agents and a real
S3 server (SeaweedFS) filled by rclone. Datasets are registered through the
API with manifests of SHA-256 digests; jobs declare them as inputs, agents
fetch them into their node cache and the tasks read them read-only under
$FERRY_INPUTS_DIR. Counted bytes (the agent's /metrics and the jobs' `staged`
events) prove what came from the network and what from the cache."""

import hashlib
import http.server
import json
import os
import subprocess
import threading

import pytest

import harness
from harness import events, port_metric as metric
import s3server

pytestmark = pytest.mark.skipif(s3server.missing() is not None,
                                reason=s3server.missing() or "")


@pytest.fixture
def s3(tmp_path):
    server = s3server.SeaweedS3(tmp_path).start()
    yield server
    server.stop(grace=2)


def blob(n, seed):
    return bytes((seed + i * 7) % 251 for i in range(n))


def manifest(objects):
    return [{"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for path, data in sorted(objects.items())]


def register(server, name, source, objects, expect=(201,)):
    r = server.call("POST", "/v1/datasets", {"name": name, "source": source,
                                              "objects": manifest(objects)})
    assert r.status in expect, r
    return r.json()


def submit(server, inputs, gpu_model, command, name="reader"):
    r = server.call("POST", "/v1/jobs", {"name": name, "command": ["sh", "-c", command],
                                         "gpus_per_task": 1, "gpu_models": [gpu_model],
                                         "inputs": inputs, "max_retries": 0})
    assert r.status == 201, r
    return r.json()["id"]


READ_TREE = ('cd "$FERRY_INPUTS_DIR" && find . -type f -o -type l | sort | xargs sha256sum && '
             '( (echo x > train/a.bin) 2>/dev/null && echo WRITABLE || echo READONLY )')


def test_inputs_fetched_once_then_served_from_the_node_cache(fleet, s3, tmp_path):
    objects = {"a.bin": blob(300_000, 1), "sub/b.bin": blob(1_000_000, 2), "c.txt": b"labels\n"}
    s3.mkbucket("lake")
    for path, data in objects.items():
        s3.put("lake", f"imagenet/v1/{path}", data)
    total = sum(len(d) for d in objects.values())
    # A second input over plain HTTP, checked by its digest.
    vocab = b"the quick brown fox\n"
    web = tmp_path / "web"
    web.mkdir()
    (web / "vocab.txt").write_bytes(vocab)
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(web))  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    server = fleet.server()
    config = s3.storage_config(tmp_path / "storage.yaml", buckets=["lake"])
    port_a = harness.free_port()
    fleet.agent(server, "node-a", gpus="1xH200",
                extra_args=["--storage-config", config, "--metrics-listen", f"127.0.0.1:{port_a}"])
    fleet.agent(server, "node-b", gpus="1xA100", extra_args=["--storage-config", config])
    version = register(server, "imagenet", "s3://lake/imagenet/v1/", objects)
    assert version["version"] == 1 and version["objects"] == 3 and version["bytes"] == total
    # The same manifest again is the same version, not a new one.
    again = register(server, "imagenet", "s3://lake/imagenet/v1/", objects, expect=(200,))
    assert again["version"] == 1 and again["digest"] == version["digest"]

    inputs = [{"name": "train", "dataset": "imagenet"},
              {"name": "vocab", "uri": f"http://127.0.0.1:{httpd.server_port}/vocab.txt",
               "sha256": hashlib.sha256(vocab).hexdigest()}]
    first = submit(server, inputs, "H200", READ_TREE)
    job = server.wait_state(first, ["SUCCEEDED", "FAILED"], timeout=60)
    assert job["state"] == "SUCCEEDED", (job, server.logs(first))
    out = "".join(c["data"] for c in server.logs(first))
    for path, data in objects.items():
        assert f"{hashlib.sha256(data).hexdigest()}  ./train/{path}" in out, out
    assert f"{hashlib.sha256(vocab).hexdigest()}  ./vocab/vocab.txt" in out
    assert "READONLY" in out and "WRITABLE" not in out
    # Reproducibility: the job names the exact version and manifest it read.
    spec_input = job["spec"]["inputs"][0]
    assert spec_input["version"] == 1 and spec_input["manifest_digest"] == version["digest"]
    assert events(server, first, "staging_started")
    staged = events(server, first, "staged")[0]["message"]
    assert "2 inputs, 4 objects" in staged and "0 B from the node cache" in staged, staged

    second = submit(server, inputs[:1], "H200", READ_TREE)
    assert server.wait_state(second, ["SUCCEEDED", "FAILED"], timeout=60)["state"] == "SUCCEEDED"
    staged = events(server, second, "staged")[0]["message"]
    assert "0 B fetched" in staged, staged
    # Counted bytes: the dataset crossed the network once.
    dataset_and_vocab = total + len(vocab)
    assert metric(port_a, "ferry_agent_cache_fetched_bytes_total") == dataset_and_vocab
    assert metric(port_a, "ferry_agent_cache_hit_bytes_total") == total
    assert metric(port_a, "ferry_agent_cache_misses_total") == 4
    assert metric(port_a, "ferry_agent_cache_hits_total") == 3
    assert metric(port_a, "ferry_agent_cache_pinned_bytes") == 0  # both jobs ended
    httpd.shutdown()


def test_a_tampered_object_fails_the_job_staging_failed(fleet, s3, tmp_path):
    s3.mkbucket("lake")
    objects = {"weights.bin": blob(50_000, 3)}
    s3.put("lake", "model/weights.bin", objects["weights.bin"])
    server = fleet.server()
    config = s3.storage_config(tmp_path / "storage.yaml")
    fleet.agent(server, "node-a", gpus="1xH200", extra_args=["--storage-config", config])
    register(server, "model", "s3://lake/model/", objects)
    # Someone replaces the object after its manifest was registered.
    s3.put("lake", "model/weights.bin", blob(50_000, 4))
    job_id = submit(server, [{"name": "m", "dataset": "model"}], "H200", "echo should-not-run")
    job = server.wait_state(job_id, ["SUCCEEDED", "FAILED"], timeout=90)
    assert job["state"] == "FAILED" and job["reason"] == "STAGING_FAILED", job
    failure = [e for e in server.admin("GET", f"/v1/jobs/{job_id}/events")["events"]
               if e.get("reason") == "STAGING_FAILED"]
    assert failure and "refused: its sha256 is " + hashlib.sha256(blob(50_000, 4)).hexdigest() \
        in failure[0]["message"], failure
    assert "ferry-test-secret-key" not in str(failure)
    assert not any("should-not-run" in c["data"] for c in server.logs(job_id))
    # The GPU is free again.
    node = server.admin("GET", "/v1/nodes/node-a")
    assert all(g.get("job_id") is None for g in node["gpus"]), node


def test_an_agent_killed_mid_download_resumes_it(fleet, s3, tmp_path):
    s3.mkbucket("lake")
    big = os.urandom(32 << 20)
    s3.put("lake", "ckpt/big.bin", big)
    server = fleet.server(extra_args=["--lease-ms", "2000", "--rate", "0"])
    # 4 MiB/s per download (after a first burst the socket buffers hold):
    # the 32 MiB object takes several seconds.
    config = s3.storage_config(tmp_path / "storage.yaml", extra=["max_bytes_per_second: 4M"])
    port = harness.free_port()
    args = ["--storage-config", config, "--metrics-listen", f"127.0.0.1:{port}",
            "--sync-wait-ms", "500"]
    agent = fleet.agent(server, "node-a", gpus="1xH200", extra_args=args)
    register(server, "big", "s3://lake/ckpt/", {"big.bin": big})
    job_id = server.admin("POST", "/v1/jobs", {
        "name": "resume", "gpus_per_task": 1, "max_retries": 2,
        "inputs": [{"name": "d", "dataset": "big"}],
        "command": ["sh", "-c", 'sha256sum "$FERRY_INPUTS_DIR/d/big.bin"']})["id"]
    partial_dir = agent.work_dir / "cache" / "partial"

    def partial_bytes():
        return sum(p.stat().st_size for p in partial_dir.rglob("*") if p.is_file())

    harness.wait_for(lambda: partial_bytes() >= 12 << 20, 30, "12 MiB of the download on disk")
    agent.proc.kill9_leader()
    kept = partial_bytes()
    assert 0 < kept < len(big)
    # No entry was made from the cut download.
    assert not list((agent.work_dir / "cache" / "objects").rglob("*.bin"))
    assert all(not p.is_file() for p in (agent.work_dir / "cache" / "objects").rglob("*"))

    fleet.agent(server, "node-a", gpus="1xH200", extra_args=args)
    job = server.wait_job(job_id, lambda j: j["state"] in ("SUCCEEDED", "FAILED"), 60,
                          "the requeued attempt to end")
    assert job["state"] == "SUCCEEDED", job
    assert job["attempt"] == 2 and job["attempts"][0]["state"] == "LOST", job
    out = "".join(c["data"] for c in server.logs(job_id))
    assert hashlib.sha256(big).hexdigest() in out, out
    # The restarted agent continued the download: what it had is not fetched again.
    resumed = metric(port, "ferry_agent_cache_resumed_bytes_total")
    fetched = metric(port, "ferry_agent_cache_fetched_bytes_total")
    assert resumed >= kept - (1 << 20), (resumed, kept)  # flushed bytes at the kill
    assert resumed + fetched == len(big), (resumed, fetched)


def test_eviction_under_a_small_quota(fleet, s3, tmp_path):
    s3.mkbucket("lake")
    one = {"x.bin": blob(1 << 20, 5)}
    two = {"y.bin": blob(1 << 20, 6)}
    s3.put("lake", "one/x.bin", one["x.bin"])
    s3.put("lake", "two/y.bin", two["y.bin"])
    server = fleet.server()
    config = s3.storage_config(tmp_path / "storage.yaml")
    port = harness.free_port()
    fleet.agent(server, "node-a", gpus="1xH200",
                extra_args=["--storage-config", config, "--cache-quota", "1536K",
                            "--metrics-listen", f"127.0.0.1:{port}"])
    register(server, "one", "s3://lake/one/", one)
    register(server, "two", "s3://lake/two/", two)
    for name in ("one", "two", "one"):
        job_id = submit(server, [{"name": "d", "dataset": name}], "H200", "ls -l $FERRY_INPUTS_DIR/d")
        job = server.wait_state(job_id, ["SUCCEEDED", "FAILED"], timeout=60)
        assert job["state"] == "SUCCEEDED", job
    assert metric(port, "ferry_agent_cache_evictions_total") == 2
    assert metric(port, "ferry_agent_cache_fetched_bytes_total") == 3 << 20
    assert metric(port, "ferry_agent_cache_bytes") == 1 << 20
    assert metric(port, "ferry_agent_cache_quota_bytes") == 1536 << 10


def test_a_node_without_credentials_for_the_bucket_fails_clearly(fleet, s3, tmp_path):
    s3.mkbucket("lake")
    objects = {"f": b"data"}
    s3.put("lake", "d/f", objects["f"])
    server = fleet.server()
    # This node's endpoint serves only another tenant.
    config = s3.storage_config(tmp_path / "storage.yaml", tenants=["someone-else"])
    fleet.agent(server, "node-a", gpus="1xH200", extra_args=["--storage-config", config])
    register(server, "d", "s3://lake/d/", objects)
    job_id = submit(server, [{"name": "d", "dataset": "d"}], "H200", "true")
    job = server.wait_state(job_id, ["SUCCEEDED", "FAILED"], timeout=90)
    assert job["state"] == "FAILED" and job["reason"] == "STAGING_FAILED", job
    message = [e for e in server.admin("GET", f"/v1/jobs/{job_id}/events")["events"]
               if e.get("reason") == "STAGING_FAILED"][0]["message"]
    assert "may not read bucket lake" in message, message


def test_jobs_go_to_the_node_whose_cache_holds_their_data(fleet, s3, tmp_path):
    s3.mkbucket("lake")
    objects = {"a.bin": blob(2_000_000, 3), "b.bin": blob(500_000, 4)}
    for path, data in objects.items():
        s3.put("lake", f"corpus/{path}", data)
    total = sum(len(d) for d in objects.values())
    server = fleet.server(extra_args=["--rate", "0"])
    config = s3.storage_config(tmp_path / "storage.yaml")
    # Two alike nodes: nothing but their caches tells them apart.
    for name in ("node-a", "node-b"):
        fleet.agent(server, name, gpus="1xH200", extra_args=["--storage-config", config])
    digest = register(server, "corpus", "s3://lake/corpus/", objects)["digest"]
    inputs = [{"name": "d", "dataset": "corpus"}]

    def node_of(job_id):
        job = server.wait_state(job_id, ["SUCCEEDED", "FAILED"], timeout=60)
        assert job["state"] == "SUCCEEDED", (job, server.logs(job_id))
        return job["attempts"][-1]["placement"][0]["node"]

    def both_free():
        gpus = server.admin("GET", "/v1/gpus")["gpus"]
        return len(gpus) == 2 and not any(g["allocated"] for g in gpus)

    # A blocker without inputs shows where the ordinary rule puts a job when
    # both nodes are free; while it runs, the first reader can only go to
    # the other node, and stages the data there.
    blocker = submit(server, [], "H200", "sleep 600", name="blocker")
    running = server.wait_state(blocker, ["RUNNING"], timeout=30)
    ordinary = running["placement"][0]["node"]
    holder = "node-b" if ordinary == "node-a" else "node-a"
    first = submit(server, inputs, "H200", 'cat "$FERRY_INPUTS_DIR"/d/* | wc -c')
    assert node_of(first) == holder
    assert "0 B from the node cache" in events(server, first, "staged")[0]["message"]
    server.admin("POST", f"/v1/jobs/{blocker}:cancel", {})
    server.wait_state(blocker, ["CANCELLED"], timeout=30)
    harness.wait_for(both_free, 30, "both GPUs free")

    # The holder's agent reports what its cache holds: the whole dataset,
    # under the admin's tenant.
    def held(node):
        cache = server.admin("GET", f"/v1/nodes/{node}")["cache"] or {}
        return {(i["tenant"], i["digest"]): i["bytes"] for i in cache.get("inputs", [])}

    harness.wait_for(lambda: held(holder).get(("default", digest)) == total, 40,
                     "the holder's cache report")
    assert held(ordinary) == {}

    # With both nodes free, every reader of the dataset goes to the holder,
    # and finds everything there.
    for n in range(3):
        job_id = submit(server, inputs, "H200", 'cat "$FERRY_INPUTS_DIR"/d/* | wc -c',
                        name=f"again-{n}")
        assert node_of(job_id) == holder, n
        assert "0 B fetched" in events(server, job_id, "staged")[0]["message"]
        harness.wait_for(both_free, 30, "both GPUs free")
    # A job without inputs still goes where the ordinary rule puts it.
    plain = submit(server, [], "H200", "true", name="plain")
    assert node_of(plain) == ordinary

    # Hit ratio: fetched once, served three times from the cache.
    def ratio():
        return (server.admin("GET", f"/v1/nodes/{holder}")["cache"] or {}).get("hit_ratio")

    harness.wait_for(lambda: ratio() == 0.75, 40, "the holder's hit ratio")
    listed = harness.cli(server, "nodes")
    assert listed.returncode == 0, listed.stderr
    row = [line for line in listed.stdout.splitlines() if line.startswith(holder)][0]
    assert "75%" in row, listed.stdout
    # Another tenant sees the cache's size, not which data it holds.
    other = server.create_user("gil", tenant="globex")
    seen = server.call("GET", f"/v1/nodes/{holder}", token=other).json()["cache"]
    assert seen["bytes"] >= total and seen["inputs"] == [], seen


CHECKPOINTING = r'''
f="$FERRY_CHECKPOINT_DIR/step"
s=$(cat "$f" 2>/dev/null || echo 0)
echo "attempt=$FERRY_ATTEMPT node=$FERRY_NODE start=$s"
if [ "$FERRY_ATTEMPT" -ge 2 ]; then exit 0; fi
while true; do
  s=$((s+1)); echo $s > "$f.tmp" && mv "$f.tmp" "$f"; sleep 0.2
done
'''


def test_a_lost_attempt_resumes_from_its_checkpoint_on_the_other_node(fleet, s3, tmp_path):
    s3.mkbucket("ckpt")
    server = fleet.server(extra_args=["--lease-ms", "2000", "--rate", "0"])
    config = s3.storage_config(tmp_path / "storage.yaml")
    args = ["--storage-config", config, "--sync-wait-ms", "500"]
    a = fleet.agent(server, "node-a", gpus="1xH200", extra_args=args)
    job_id = server.admin("POST", "/v1/jobs", {
        "name": "trainer", "gpus_per_task": 1, "max_retries": 2,
        "checkpoint": {"uri": "s3://ckpt/runs/", "interval_seconds": 10},
        "command": ["sh", "-c", CHECKPOINTING]})["id"]
    server.wait_state(job_id, "RUNNING", timeout=30)
    key = f"s3:ckpt/runs/{job_id}/task-0/MANIFEST.json"

    def manifest():
        try:
            text = s3.rclone("cat", key, timeout=20)  # empty when it is not there yet
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return None
        return json.loads(text) if text else None

    first = harness.wait_for(manifest, 40, "the first periodic checkpoint")
    assert first["attempt"] == 1 and first["seq"] >= 1
    [step] = [f for f in first["files"] if f["path"] == "step"]
    saved = int(s3.rclone("cat", f"s3:ckpt/runs/{job_id}/task-0/objects/{step['sha256']}"))
    assert saved > 0

    fleet.agent(server, "node-b", gpus="1xH200", extra_args=args)
    a.proc.kill9_leader()
    job = server.wait_job(job_id, lambda j: j["state"] in ("SUCCEEDED", "FAILED"), 60,
                          "attempt 2 to end")
    assert job["state"] == "SUCCEEDED", job
    assert job["attempts"][0]["state"] == "LOST"
    assert job["placement"][0]["node"] == "node-b"
    out = "".join(c["data"] for c in server.logs(job_id))
    resumed = [line for line in out.splitlines() if line.startswith("attempt=2")]
    assert resumed, out
    start = int(resumed[0].split("start=")[1])
    # At least what the manifest held when we looked (later periodic rounds may add more).
    assert start >= saved, (start, saved)
    staged = [e["message"] for e in events(server, job_id, "staged")]
    assert any("restored checkpoint" in m for m in staged), staged


def test_the_last_checkpoint_is_written_before_the_job_ends(fleet, s3, tmp_path):
    s3.mkbucket("ckpt")
    server = fleet.server()
    config = s3.storage_config(tmp_path / "storage.yaml")
    fleet.agent(server, "node-a", gpus="1xH200", extra_args=["--storage-config", config])
    job_id = server.admin("POST", "/v1/jobs", {
        "name": "writer", "gpus_per_task": 1,
        "checkpoint": {"uri": "s3://ckpt/final/"},
        "command": ["sh", "-c", 'mkdir -p "$FERRY_CHECKPOINT_DIR/sub" && '
                    'echo weights > "$FERRY_CHECKPOINT_DIR/sub/model.bin"']})["id"]
    job = server.wait_state(job_id, ["SUCCEEDED", "FAILED"], timeout=60)
    assert job["state"] == "SUCCEEDED", job
    # SUCCEEDED is reported only after the upload: the manifest is there now.
    manifest = json.loads(s3.rclone("cat", f"s3:ckpt/final/{job_id}/task-0/MANIFEST.json"))
    assert [f["path"] for f in manifest["files"]] == ["sub/model.bin"]
    digest = hashlib.sha256(b"weights\n").hexdigest()
    assert manifest["files"][0]["sha256"] == digest
    assert s3.rclone("cat", f"s3:ckpt/final/{job_id}/task-0/objects/{digest}") == b"weights\n"
    # A spec naming a bad checkpoint URI is refused at submission.
    r = server.call("POST", "/v1/jobs", {"name": "bad", "command": ["true"],
                                         "checkpoint": {"uri": "s3://ckpt/no-slash"}})
    assert r.status == 422 and "checkpoint.uri" in r.body.decode(), r
