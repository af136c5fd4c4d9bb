"""A job's code end to end: `ferry submit --workdir` packs and uploads a
directory (POST /v1/code), the agent fetches the bundle through its node
cache and unpacks it read-only as the task's working directory; a git
commit is cloned by the agent. Bundles are per tenant, hostile archives are
refused, and counted bytes prove a second job reads the bundle from the
cache."""

import hashlib
import io
import json
import re
import subprocess
import tarfile

import harness
from harness import events, port_metric as metric

SCRIPT = """#!/bin/sh
echo "cwd=$(pwd)"
echo "code=$FERRY_CODE_DIR"
cat conf/settings.txt
if [ -e .git ]; then echo HAS-GIT; else echo NO-GIT; fi
if touch new-file 2>/dev/null; then echo WRITABLE; else echo READONLY; fi
"""


def output(server, job_id):
    return "".join(c["data"] for c in server.logs(job_id))


def make_workdir(path, settings="lr=0.1\n"):
    path.mkdir()
    (path / "run.sh").write_text(SCRIPT)
    (path / "run.sh").chmod(0o755)
    (path / "conf").mkdir()
    (path / "conf" / "settings.txt").write_text(settings)
    (path / ".git").mkdir()
    (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return path


def submit_workdir(server, workdir, *flags):
    done = harness.cli(server, "submit", "--workdir", str(workdir), "--name", "code",
                       "--max-retries", "0", *flags, "--", "./run.sh")
    assert done.returncode == 0, done.stderr
    job_id = int(re.search(r"^job (\d+) ", done.stdout, re.M).group(1))
    return job_id, done.stderr


def tar_gz(entries):
    """A gzip'd tar archive from (TarInfo, bytes) pairs."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in entries:
            info.size = len(data) if info.isfile() else 0
            archive.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buffer.getvalue()


def upload(server, data, token=None, content_type="application/gzip"):
    return harness.request(server.port, "POST", "/v1/code", raw=data,
                           token=token or server.admin_token,
                           headers={"Content-Type": content_type})


def test_a_workdir_runs_read_only_and_a_second_job_reads_it_from_the_cache(fleet, tmp_path):
    server = fleet.server()
    port = harness.free_port()
    agent = fleet.agent(server, "node-a", gpus="1xH200",
                        extra_args=["--metrics-listen", f"127.0.0.1:{port}"])
    workdir = make_workdir(tmp_path / "project")
    first, said = submit_workdir(server, workdir)
    assert "uploaded" in said, said
    job = server.wait_state(first, ["SUCCEEDED", "FAILED"], timeout=60)
    assert job["state"] == "SUCCEEDED", (job, output(server, first))
    out = output(server, first)
    code_dir = str(agent.work_dir / "code" / f"{first}-1")
    assert f"cwd={code_dir}" in out and f"code={code_dir}" in out, out
    assert "lr=0.1" in out and "NO-GIT" in out and "READONLY" in out, out
    # The job records exactly which bundle it ran.
    code = job["spec"]["code"]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", code["bundle"]), code
    assert code["bytes"] > 0
    assert "fetched" in events(server, first, "staged")[0]["message"]
    fetched = metric(port, "ferry_agent_cache_fetched_bytes_total")
    assert fetched == code["bytes"]

    # The same tree again (touched, but unchanged): the same digest, not
    # uploaded again, and served from the node cache.
    (workdir / "conf" / "settings.txt").write_text("lr=0.1\n")
    second, said = submit_workdir(server, workdir)
    assert "already on the server" in said, said
    job2 = server.wait_state(second, ["SUCCEEDED", "FAILED"], timeout=60)
    assert job2["state"] == "SUCCEEDED", job2
    assert job2["spec"]["code"]["bundle"] == code["bundle"]
    assert "from the node cache" in events(server, second, "staged")[0]["message"]
    assert metric(port, "ferry_agent_cache_fetched_bytes_total") == fetched
    assert metric(port, "ferry_agent_cache_hit_bytes_total") == code["bytes"]
    # The trees of ended attempts are gone.
    harness.wait_for(lambda: not any((agent.work_dir / "code").iterdir()), 20,
                     "the code trees removed")

    # A changed tree is a new bundle.
    (workdir / "conf" / "settings.txt").write_text("lr=0.2\n")
    third, said = submit_workdir(server, workdir)
    assert "uploaded" in said
    job3 = server.wait_state(third, ["SUCCEEDED", "FAILED"], timeout=60)
    assert job3["spec"]["code"]["bundle"] != code["bundle"]
    assert "lr=0.2" in output(server, third)


def test_bundles_are_per_tenant_and_hostile_archives_are_refused(fleet, tmp_path):
    server = fleet.server(extra_args=["--max-code-bundle-bytes", "65536"])
    good = tar_gz([(tarfile.TarInfo("main.py"), b"print(1)\n")])
    r = upload(server, good)
    assert r.status == 201, r
    digest = r.json()["digest"]
    assert digest == "sha256:" + hashlib.sha256(good).hexdigest()
    assert r.json()["files"] == 1 and r.headers["location"] == f"/v1/code/{digest}"
    assert upload(server, good).status == 200  # content-addressed: the same again
    assert server.call("GET", f"/v1/code/{digest}").json()["bytes"] == len(good)

    # Another tenant does not see it, and cannot run it.
    other = server.create_user("eve", tenant="other")
    assert server.call("GET", f"/v1/code/{digest}", token=other).status == 404
    r = server.call("POST", "/v1/jobs", {"name": "x", "command": ["true"],
                                         "code": {"bundle": digest}}, token=other)
    assert r.status == 422 and "no code bundle" in r.body.decode(), r
    # Its own upload of the same bytes is its own bundle.
    assert upload(server, good, token=other).status == 201

    def refused(data, what, status=422, **kw):
        r = upload(server, data, **kw)
        assert r.status == status, (what, r)
        return r.body.decode()

    dotdot = tarfile.TarInfo("../escape.sh")
    assert "a path with '..'" in refused(tar_gz([(dotdot, b"x")]), "dot-dot")
    absolute = tarfile.TarInfo("/etc/cron.d/x")
    assert "absolute path" in refused(tar_gz([(absolute, b"x")]), "absolute")
    link = tarfile.TarInfo("l")
    link.type, link.linkname = tarfile.SYMTYPE, "../../etc"
    assert "points outside" in refused(tar_gz([(link, b"")]), "escaping link")
    device = tarfile.TarInfo("dev")
    device.type = tarfile.CHRTYPE
    assert "not a file, directory or link" in refused(tar_gz([(device, b"")]), "device")
    assert "not a" in refused(b"not an archive", "text")
    assert "truncated" in refused(good[: len(good) // 2], "truncated")
    refused(good, "content type", status=415, content_type="application/json")
    refused(b"\0" * 70000, "too large", status=413)
    # Nothing refused was stored.
    stored = list((server.data_dir / "code").rglob("*.tar.gz"))
    assert len(stored) == 2, stored

    # The agents' download route: not for users (platform admins may act as
    # agents), and only for a placed job that names the bundle.
    hexdigest = digest[len("sha256:"):]
    agent_token = server.agent_token_file.read_text().strip()
    r = harness.request(server.port, "GET", f"/v1/agent/code/sha256:{hexdigest}?job=1",
                        token=server.create_user("bob"))
    assert r.status == 403, r
    r = harness.request(server.port, "GET", f"/v1/agent/code/sha256:{hexdigest}?job=1",
                        token=agent_token)
    assert r.status == 404, r

    # Bad specs are refused with the field named.
    for code, field in [({"bundle": "sha256:xyz"}, "code.bundle"),
                        ({"bundle": digest, "git": "https://x/y"}, "code.git"),
                        ({"git": "https://example.com/r.git", "commit": "main"}, "code.commit"),
                        ({"git": "--upload-pack=evil", "commit": "a" * 40}, "code.git"),
                        ({"git": "https://example.com/r.git"}, "code.commit")]:
        r = server.call("POST", "/v1/jobs", {"name": "x", "command": ["true"], "code": code})
        assert r.status == 422, (code, r)
        assert field in [e["field"] for e in r.json()["errors"]], (code, r.json())


def git(*args, cwd):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   cwd=cwd, check=True, capture_output=True)


def test_a_git_commit_is_cloned_by_the_agent(fleet, tmp_path):
    roots = tmp_path / "repos"
    repo = roots / "model"
    repo.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "conf").mkdir()
    (repo / "run.sh").write_text(SCRIPT)
    (repo / "run.sh").chmod(0o755)
    (repo / "conf" / "settings.txt").write_text("version one\n")
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "one", cwd=repo)
    first = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                           text=True, check=True).stdout.strip()
    (repo / "conf" / "settings.txt").write_text("version two\n")
    git("commit", "-q", "-am", "two", cwd=repo)

    storage = tmp_path / "storage.yaml"
    storage.write_text(json.dumps({"file_roots": [str(roots)]}))
    server = fleet.server()
    fleet.agent(server, "node-a", gpus="1xH200", extra_args=["--storage-config", str(storage)])

    def run(url, commit):
        r = server.call("POST", "/v1/jobs", {"name": "git", "command": ["./run.sh"],
                                             "max_retries": 0,
                                             "code": {"git": url, "commit": commit}})
        assert r.status == 201, r
        return server.wait_state(r.json()["id"], ["SUCCEEDED", "FAILED"], timeout=60)

    job = run(f"file://{repo}", first)
    assert job["state"] == "SUCCEEDED", (job, output(server, job["id"]))
    out = output(server, job["id"])
    # Exactly the commit asked for, not the branch's head; no .git; read-only.
    assert "version one" in out and "NO-GIT" in out and "READONLY" in out, out
    assert "cloned" in events(server, job["id"], "staged")[0]["message"]

    unknown = run(f"file://{repo}", "0" * 40)
    assert unknown["state"] == "FAILED" and unknown["reason"] == "STAGING_FAILED", unknown
    failure = [e for e in server.admin("GET", f"/v1/jobs/{unknown['id']}/events")["events"]
               if e.get("reason") == "STAGING_FAILED"][0]["message"]
    assert "git checkout" in failure, failure

    # A repository outside the node's file roots is not read.
    outside = tmp_path / "elsewhere"
    subprocess.run(["cp", "-r", str(repo), str(outside)], check=True)
    refused = run(f"file://{outside}", first)
    assert refused["state"] == "FAILED" and refused["reason"] == "STAGING_FAILED", refused
    failure = [e for e in server.admin("GET", f"/v1/jobs/{refused['id']}/events")["events"]
               if e.get("reason") == "STAGING_FAILED"][0]["message"]
    assert "not under a file root" in failure, failure
