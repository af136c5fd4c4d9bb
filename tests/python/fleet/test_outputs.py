"""Job outputs end to end on a shared file system (file://): each task's
$FERRY_OUTPUTS_DIR starts empty and is uploaded once when the task ends,
content-addressed with MANIFEST.json written last, before the task's exit
reaches the server; an upload that cannot happen is named in the job's
timeline."""

import hashlib
import json

import harness


def manifest(root, job_id, task):
    return json.loads((root / str(job_id) / f"task-{task}" / "MANIFEST.json").read_text())


def test_each_task_uploads_its_outputs_once_when_it_ends(fleet, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    storage = tmp_path / "storage.yaml"
    storage.write_text(json.dumps({"file_roots": [str(store)]}))
    server = fleet.server()
    agent = fleet.agent(server, "node-a", gpus="2xH200",
                        extra_args=["--storage-config", str(storage)])
    script = ('test -z "$(ls -A "$FERRY_OUTPUTS_DIR")" || echo NOT-EMPTY; '
              'mkdir -p "$FERRY_OUTPUTS_DIR/eval" && '
              'echo "rank $FERRY_TASK_INDEX" > "$FERRY_OUTPUTS_DIR/eval/score.txt" && '
              'echo same > "$FERRY_OUTPUTS_DIR/common.txt"')
    job = server.admin("POST", "/v1/jobs", {
        "name": "outputs", "tasks": 2, "gpus_per_task": 1, "max_retries": 0,
        "command": ["sh", "-c", script],
        "outputs": {"uri": f"file://{store}/runs/"}})
    done = server.wait_state(job["id"], ["SUCCEEDED", "FAILED"], timeout=60)
    assert done["state"] == "SUCCEEDED", (done, server.logs(job["id"]))
    assert done["spec"]["outputs"] == {"uri": f"file://{store}/runs/"}
    out = "".join(c["data"] for c in server.logs(job["id"]))
    assert "NOT-EMPTY" not in out, out
    # The exit was reported after the upload: both manifests exist now.
    for task in (0, 1):
        m = manifest(store / "runs", job["id"], task)
        assert m["attempt"] == 1 and m["task"] == task
        files = {f["path"]: f for f in m["files"]}
        assert set(files) == {"eval/score.txt", "common.txt"}, files
        score = f"rank {task}\n".encode()
        assert files["eval/score.txt"]["sha256"] == hashlib.sha256(score).hexdigest()
        objects = store / "runs" / str(job["id"]) / f"task-{task}" / "objects"
        assert (objects / files["eval/score.txt"]["sha256"]).read_bytes() == score
    # The node keeps no copy once uploaded.
    harness.wait_for(lambda: not any((agent.work_dir / "outputs").iterdir()), 10,
                     "the outputs directories removed")

    # Outputs the node may not write: the job still ends by its exit code,
    # and its timeline says what was not kept.
    refused = server.admin("POST", "/v1/jobs", {
        "name": "nowhere", "gpus_per_task": 1, "max_retries": 0,
        "command": ["sh", "-c", 'echo x > "$FERRY_OUTPUTS_DIR/x"'],
        "outputs": {"uri": f"file://{tmp_path}/elsewhere/"}})
    ended = server.wait_state(refused["id"], ["SUCCEEDED", "FAILED"], timeout=60)
    assert ended["state"] == "SUCCEEDED", ended
    exited = [e for e in server.admin("GET", f"/v1/jobs/{refused['id']}/events")["events"]
              if e["type"] == "task_exited"]
    assert exited and "outputs upload failed" in exited[0]["message"], exited
    assert "the files stay in" not in exited[0]["message"]


def test_bad_outputs_are_refused_at_submission(fleet):
    server = fleet.server()
    for outputs, detail in [({"uri": "s3://bucket/no-slash"}, "must end in '/'"),
                            ({"uri": "https://h/p/"}, "must be an s3:// or file:/// URI"),
                            ({}, "is required"),
                            ({"uri": "s3://b/p/", "every": 3}, "unknown field"),
                            ("s3://b/p/", "must be an object")]:
        r = server.call("POST", "/v1/jobs", {"name": "x", "command": ["true"],
                                             "outputs": outputs})
        assert r.status == 422, (outputs, r)
        assert detail in r.body.decode(), (outputs, r)
