"""`ferry dataset create|list|show` and `ferry submit --input` against a real
server: manifests computed from a directory register as versions, the same
manifest again changes nothing, another tenant sees none of it, and job
inputs (flags and job files) are resolved and recorded in the job."""

import hashlib
import json

import harness


ferry = harness.cli  # the CLI against `server`, as its admin unless token= says


def make_tree(root):
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"hello\n")
    (root / "sub" / "b.bin").write_bytes(bytes(range(256)) * 10)
    return {
        "a.txt": hashlib.sha256(b"hello\n").hexdigest(),
        "sub/b.bin": hashlib.sha256(bytes(range(256)) * 10).hexdigest(),
    }


def test_create_list_show_and_tenant_isolation(fleet, tmp_path):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    digests = make_tree(tmp_path / "data")
    token = server.create_user("ana", tenant="acme")

    created = ferry(server, "dataset", "create", "demo", "--source", "s3://lake/demo/",
                    "--from-dir", str(tmp_path / "data"), "--json", token=token)
    assert created.returncode == 0, created.stderr
    version = json.loads(created.stdout)
    assert version["version"] == 1
    assert version["objects"] == 2
    assert version["bytes"] == 6 + 2560

    again = ferry(server, "dataset", "create", "demo", "--source", "s3://lake/demo/",
                  "--from-dir", str(tmp_path / "data"), token=token)
    assert again.returncode == 0, again.stderr
    assert "demo@1" in again.stdout and "unchanged" in again.stdout

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"objects": [
        {"path": "only.bin", "size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}]}))
    second = ferry(server, "dataset", "create", "demo", "--source", "s3://lake/demo/",
                   "--manifest", str(manifest), token=token)
    assert second.returncode == 0, second.stderr
    assert "demo@2: 1 object," in second.stdout

    listed = json.loads(ferry(server, "dataset", "list", "--json", token=token).stdout)
    assert [(d["name"], d["latest_version"]) for d in listed["datasets"]] == [("demo", 2)]
    shown = json.loads(ferry(server, "dataset", "show", "demo@1", "--json", token=token).stdout)
    assert {o["path"]: o["sha256"] for o in shown["manifest"]} == digests
    table = ferry(server, "dataset", "show", "demo", token=token)
    assert table.returncode == 0, table.stderr
    assert "VERSION" in table.stdout and "s3://lake/demo/" in table.stdout

    # Another tenant: nothing listed, and the name is unknown to it.
    other = server.create_user("gil", tenant="globex")
    assert json.loads(ferry(server, "dataset", "list", "--json", token=other).stdout) == {
        "datasets": []}
    hidden = ferry(server, "dataset", "show", "demo", token=other)
    assert hidden.returncode == 1
    assert "404" in hidden.stderr, hidden.stderr


def test_bad_manifests_and_usage_errors(fleet, tmp_path):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    make_tree(tmp_path / "data")
    no_slash = ferry(server, "dataset", "create", "demo", "--source", "s3://lake/demo",
                     "--from-dir", str(tmp_path / "data"))
    assert no_slash.returncode == 1
    assert "source" in no_slash.stderr, no_slash.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"path": "../up", "size": 1, "sha256": "0" * 64}]))
    refused = ferry(server, "dataset", "create", "demo", "--source", "s3://lake/demo/",
                    "--manifest", str(bad))
    assert refused.returncode == 1
    assert "objects[0].path" in refused.stderr, refused.stderr
    both = ferry(server, "dataset", "create", "demo", "--source", "s3://lake/demo/",
                 "--manifest", str(bad), "--from-dir", str(tmp_path / "data"))
    assert both.returncode == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ferry(server, "dataset", "create", "demo", "--source", "s3://lake/demo/",
                 "--from-dir", str(empty)).returncode == 2
    assert ferry(server, "dataset", "show", "demo@zero").returncode == 2
    assert json.loads(ferry(server, "dataset", "list", "--json").stdout) == {"datasets": []}


def test_submit_inputs_from_flags_and_job_files(fleet, tmp_path):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    make_tree(tmp_path / "data")
    assert ferry(server, "dataset", "create", "demo", "--source", "file:///srv/demo/",
                 "--from-dir", str(tmp_path / "data")).returncode == 0
    vocab = hashlib.sha256(b"vocab").hexdigest()

    done = ferry(server, "submit", "--json", "--input", "train=demo",
                 "--input", f"vocab=https://h/vocab.txt#sha256={vocab}", "--", "true")
    assert done.returncode == 0, done.stderr
    spec = server.job(json.loads(done.stdout)["id"])["spec"]
    assert spec["inputs"][0]["dataset"] == "demo"
    assert spec["inputs"][0]["version"] == 1
    assert spec["inputs"][0]["objects"] == 2
    assert spec["inputs"][0]["manifest_digest"].startswith("sha256:")
    assert spec["inputs"][1] == {"name": "vocab", "uri": "https://h/vocab.txt", "sha256": vocab,
                                 "mode": "copy", "bytes": 0, "objects": 1}
    assert spec["datasets"] == ["demo"]

    job_file = tmp_path / "job.yaml"
    job_file.write_text("name: from-file\ncommand: [true]\ninputs:\n"
                        "  - name: train\n    dataset: demo\n    version: 1\n")
    from_file = ferry(server, "submit", "--json", str(job_file))
    assert from_file.returncode == 0, from_file.stderr
    assert server.job(json.loads(from_file.stdout)["id"])["spec"]["inputs"][0]["version"] == 1

    unknown = ferry(server, "submit", "--input", "train=demo@5", "--", "true")
    assert unknown.returncode == 1
    assert "has no version 5" in unknown.stderr, unknown.stderr
    streamed = tmp_path / "stream.yaml"
    streamed.write_text("name: s\ncommand: [true]\ninputs:\n"
                        "  - {name: train, dataset: demo, mode: stream}\n")
    refused = ferry(server, "submit", str(streamed))
    assert refused.returncode == 1
    assert 'mode "stream" is not implemented' in refused.stderr, refused.stderr
    assert ferry(server, "submit", "--input", "vocab=https://h/v.txt", "--", "true").returncode == 2
