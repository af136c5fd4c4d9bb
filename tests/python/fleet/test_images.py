"""Jobs in container images end to end: a real registry (Debian's
`docker-registry`, the distribution project's server) on loopback, a tiny
image built from local files only (busybox-static in an imported tarball,
no base image from any hub), pushed with podman; then `ferry server`
resolves the job's image to its manifest digest at submission and the
agent runs the task with `podman run` by that digest, pulling it into its
own image store.

The tests run podman as root (they run as root here). Rootless podman as the
agent's own user is tested too when the sandbox allows it (a user with
subordinate id ranges and newuidmap); the reason is in the skip message
otherwise.

Two things of this sandbox (not of Ferry) are set through CONTAINERS_CONF,
which podman reads from the agent's environment: crun refuses the hybrid
cgroup v1/v2 layout, so the runtime is runc; and root here lacks
CAP_SYS_RESOURCE, so podman's default rlimits (above the current ones) cannot
be set and the containers get the limits the tests run with instead."""

import json
import os
import pwd
import resource
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import harness


def missing():
    for tool, package in (("podman", "podman"), ("docker-registry", "docker-registry"),
                          ("busybox", "busybox-static")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}; scripts/setup installs it)"
    return None


pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def containers_conf(path):
    """The sandbox's podman settings (module docstring); none of Ferry's."""
    lines = ["[containers]"]
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)
    limit = lambda v, cap: cap if v == resource.RLIM_INFINITY else min(v, cap)  # noqa: E731
    lines.append(f'default_ulimits = ["nofile={limit(nofile[0], 1 << 20)}:'
                 f'{limit(nofile[1], 1 << 20)}", "nproc={limit(nproc[0], 4096)}:'
                 f'{limit(nproc[1], 4096)}"]')
    lines += ["[engine]", 'events_logger = "file"', 'cgroup_manager = "cgroupfs"']
    if shutil.which("runc"):
        lines.append('runtime = "runc"')
    path.write_text("\n".join(lines) + "\n")
    return path


def podman_env(tmp_path, name, conf):
    """An environment with its own podman image store under tmp_path."""
    root = tmp_path / f"podman-{name}"
    (root / "run").mkdir(parents=True, exist_ok=True)
    storage = root / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{root}/graph"\n'
                       f'runroot = "{root}/run"\n')
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(conf)
    env["CONTAINERS_STORAGE_CONF"] = str(storage)
    return env


class Registry:
    """docker-registry on a free loopback port, its data in a temp dir."""

    def __init__(self, tmp_path):
        self.port = harness.free_port()
        self.dir = tmp_path / "registry"
        self.dir.mkdir()
        config = self.dir / "config.yml"
        config.write_text("version: 0.1\n"
                          "log:\n  level: warn\n"
                          f"storage:\n  filesystem:\n    rootdirectory: {self.dir}/data\n"
                          f"http:\n  addr: 127.0.0.1:{self.port}\n")
        self.proc = harness.Proc(["docker-registry", "serve", config], self.dir / "registry.log")

    def start(self):
        self.proc.start()

        def ready():
            if not self.proc.running():
                raise AssertionError("docker-registry exited:\n" + self.proc.log()[-2000:])
            try:
                return harness.request(self.port, "GET", "/v2/", timeout=2).status == 200
            except OSError:
                return False

        harness.wait_for(ready, 20, "the registry's GET /v2/")
        return self

    @property
    def host(self):
        return f"localhost:{self.port}"

    def stop(self):
        self.proc.stop(grace=5)


@pytest.fixture
def registry(tmp_path):
    r = Registry(tmp_path).start()
    yield r
    r.stop()


def build_image(tmp_path, env, ref):
    """A busybox image from a tarball (no base image, no network), pushed to ref."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(shutil.which("busybox"), rootfs / "bin" / "busybox")
    for applet in ("sh", "cat", "echo", "ls", "sleep", "touch", "id"):
        os.symlink("busybox", rootfs / "bin" / applet)
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "ferry-image").write_text("built for test_images\n")
    tarball = tmp_path / "rootfs.tar"
    subprocess.run(["tar", "-C", rootfs, "-cf", tarball, "."], check=True)
    run = lambda *args: subprocess.run(["podman", *args], env=env, capture_output=True,  # noqa
                                       text=True, timeout=120)
    done = run("import", "--change", "ENV PATH=/bin", str(tarball), ref)
    assert done.returncode == 0, done.stderr
    done = run("push", "--tls-verify=false", ref)
    assert done.returncode == 0, done.stderr


def manifest_digest(registry, repository, tag):
    accept = ("application/vnd.oci.image.manifest.v1+json, "
              "application/vnd.docker.distribution.manifest.v2+json")
    r = harness.request(registry.port, "HEAD", f"/v2/{repository}/manifests/{tag}",
                        headers={"Accept": accept})
    assert r.status == 200, r
    return r.headers["docker-content-digest"]


def containers_named(env, prefix):
    done = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], env=env,
                          capture_output=True, text=True, timeout=60)
    return [n for n in done.stdout.split() if n.startswith(prefix)]


def start_agent(fleet, server, name, env, extra_args=()):
    agent = harness.Agent(server, name, "1xH200", fleet.work_dir, list(extra_args), env=env)
    fleet.agents.append(agent)
    return agent.start().wait_ready()


def submit(server, spec, expect=(201,)):
    r = server.call("POST", "/v1/jobs", spec)
    assert r.status in expect, r
    return r


def test_a_job_runs_in_an_image_from_the_registry_by_digest(fleet, registry, tmp_path):
    conf = containers_conf(tmp_path / "containers.conf")
    ref = f"{registry.host}/ferry-test:1"
    build_image(tmp_path, podman_env(tmp_path, "builder", conf), ref)
    digest = manifest_digest(registry, "ferry-test", "1")

    # A dataset on a shared directory: the task reads it read-only in the container.
    data = tmp_path / "data"
    data.mkdir()
    (data / "hello.txt").write_text("hello from the inputs\n")
    storage = tmp_path / "storage.yaml"
    storage.write_text(f"file_roots: [{tmp_path}]\n")
    server = fleet.server(extra_args=["--stop-grace-ms", "2000"])
    agent_env = podman_env(tmp_path, "agent", conf)
    start_agent(fleet, server, "node-a", agent_env, ["--storage-config", storage])
    r = harness.cli(server, "dataset", "create", "greetings", "--source", f"file://{data}/",
                    "--from-dir", data)
    assert r.returncode == 0, r.stderr

    work = tmp_path / "work"
    work.mkdir()
    script = ("cat /etc/ferry-image; cat $FERRY_INPUTS_DIR/greetings/hello.txt; "
              "echo job=$FERRY_JOB_ID task=$FERRY_TASK_INDEX lr=$LR gpus=[$CUDA_VISIBLE_DEVICES]; "
              "touch $FERRY_INPUTS_DIR/greetings/x 2>/dev/null && echo WRITABLE || echo READONLY; "
              "echo written > result.txt; exit 3")
    job_id = submit(server, {"name": "in-image", "command": ["sh", "-c", script],
                             "image": ref, "working_dir": str(work), "env": {"LR": "0.5"},
                             "gpus_per_task": 1,
                             "inputs": [{"name": "greetings", "dataset": "greetings"}]}
                    ).json()["id"]
    job = server.wait_state(job_id, ["SUCCEEDED", "FAILED"], timeout=120)
    out = "".join(c["data"] for c in server.logs(job_id))
    assert job["state"] == "FAILED" and job["reason"] == "EXITED_NONZERO", (job, out)
    assert job["exit_code"] == 3, job
    # Reproducibility: the job names the digest it ran.
    assert job["spec"]["image"] == ref and job["spec"]["image_digest"] == digest, job["spec"]
    # The pull was staging, before the task started: the timeline shows it apart.
    staged = [e["message"] for e in harness.events(server, job_id, "staged")]
    assert staged and f"@{digest} pulled in" in staged[0], staged
    assert "built for test_images" in out, out
    assert "hello from the inputs" in out, out
    assert f"job={job_id} task=0 lr=0.5 gpus=[0]" in out, out  # declared GPU 0, no CDI
    assert "READONLY" in out and "WRITABLE" not in out, out
    assert (work / "result.txt").read_text() == "written\n"
    status = harness.cli(server, "status", str(job_id))
    assert f"image      {ref} ({digest})" in status.stdout, status.stdout
    # The agent pulled it by digest into its own store, and left no container.
    images = subprocess.run(["podman", "images", "--digests", "--format", "{{.Digest}}"],
                            env=agent_env, capture_output=True, text=True, timeout=60).stdout
    assert digest in images, images
    assert containers_named(agent_env, f"ferry-{job_id}-") == []

    # Through the CLI (--image), a job that succeeds.
    r = harness.cli(server, "submit", "--image", ref, "--name", "cli", "--json", "--",
                    "sh", "-c", "echo from-cli")
    assert r.returncode == 0, r.stderr
    cli_job = json.loads(r.stdout)
    assert cli_job["spec"]["image_digest"] == digest
    done = server.wait_state(cli_job["id"], ["SUCCEEDED", "FAILED"], timeout=60)
    assert done["state"] == "SUCCEEDED" and done["exit_code"] == 0, done
    assert "from-cli" in "".join(c["data"] for c in server.logs(cli_job["id"]))


def test_a_cancelled_container_task_stops_and_leaves_no_container(fleet, registry, tmp_path):
    conf = containers_conf(tmp_path / "containers.conf")
    ref = f"{registry.host}/ferry-test:1"
    build_image(tmp_path, podman_env(tmp_path, "builder", conf), ref)
    server = fleet.server(extra_args=["--stop-grace-ms", "2000"])
    agent_env = podman_env(tmp_path, "agent", conf)
    start_agent(fleet, server, "node-a", agent_env)
    # One task that ends on SIGTERM, one that ignores it (SIGKILL after the grace).
    polite = submit(server, {"name": "polite", "command": ["sleep", "300"], "image": ref}).json()
    stubborn = submit(server, {"name": "stubborn", "image": ref, "command": [
        "sh", "-c", "trap '' TERM; echo armed; while true; do sleep 1; done"]}).json()
    for job in (polite, stubborn):
        server.wait_state(job["id"], "RUNNING", timeout=120)
    harness.wait_for(lambda: "armed" in "".join(c["data"] for c in server.logs(stubborn["id"])),
                     60, "the stubborn task's trap")
    started = time.monotonic()
    for job in (polite, stubborn):
        server.admin("POST", f"/v1/jobs/{job['id']}:cancel")
    for job in (polite, stubborn):
        assert server.wait_state(job["id"], "CANCELLED", timeout=60)["state"] == "CANCELLED"
    assert time.monotonic() - started < 40
    harness.wait_for(lambda: not containers_named(agent_env, f"ferry-{polite['id']}-") and
                     not containers_named(agent_env, f"ferry-{stubborn['id']}-"),
                     60, "both containers gone")


def test_unknown_images_and_unreachable_registries_are_refused(fleet, registry, tmp_path):
    conf = containers_conf(tmp_path / "containers.conf")
    build_image(tmp_path, podman_env(tmp_path, "builder", conf), f"{registry.host}/ferry-test:1")
    server = fleet.server()
    r = submit(server, {"name": "x", "command": ["true"],
                        "image": f"{registry.host}/ferry-test:nope"}, expect=(422,))
    problem = r.json()
    assert problem["errors"][0]["field"] == "image", problem
    assert "no image" in problem["errors"][0]["detail"], problem
    r = submit(server, {"name": "x", "command": ["true"],
                        "image": f"{registry.host}/no-such-repo:1"}, expect=(422,))
    assert r.json()["errors"][0]["field"] == "image"
    # Not a reference at all: refused before any registry is asked.
    r = submit(server, {"name": "x", "command": ["true"], "image": "ubuntu:22.04"},
               expect=(422,))
    assert "must name its registry" in r.json()["errors"][0]["detail"]
    # A registry that does not answer: 503, try again later.
    closed = harness.free_port()
    r = submit(server, {"name": "x", "command": ["true"],
                        "image": f"127.0.0.1:{closed}/ferry-test:1"}, expect=(503,))
    assert "cannot be reached" in r.json()["detail"], r.json()
    assert r.headers.get("retry-after") == "30"
    # No job was stored for any of them.
    assert server.all_job_ids() == []


ROOTLESS_USER = "ferry-rootless"


def rootless_missing():
    """Why rootless podman cannot be tested here, or None."""
    if os.geteuid() != 0:
        return "the rootless test creates its user as root; the tests run as another user"
    for tool in ("newuidmap", "newgidmap", "useradd"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package uidmap/passwd)"
    return None


def ensure_rootless_user():
    try:
        entry = pwd.getpwnam(ROOTLESS_USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", ROOTLESS_USER],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(ROOTLESS_USER)
    for path in ("/etc/subuid", "/etc/subgid"):
        text = Path(path).read_text() if Path(path).exists() else ""
        if not any(line.startswith(ROOTLESS_USER + ":") for line in text.splitlines()):
            with open(path, "a") as f:
                f.write(f"{ROOTLESS_USER}:300000:65536\n")
    return entry


def test_the_agent_runs_rootless_podman_as_its_own_user(fleet, registry, tmp_path):
    reason = rootless_missing()
    if reason:
        pytest.skip(reason)
    user = ensure_rootless_user()
    ref = f"{registry.host}/ferry-test:1"
    build_image(tmp_path, podman_env(tmp_path, "builder",
                                     containers_conf(tmp_path / "containers.conf")), ref)
    # The agent's files live where its user may read and write (pytest's
    # temporary directories are root's alone).
    home = Path(f"/tmp/ferry-rootless-{os.getpid()}-{time.monotonic_ns()}")
    home.mkdir(mode=0o755)
    conf = containers_conf(home / "containers.conf")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": user.pw_dir,
           "USER": ROOTLESS_USER, "XDG_RUNTIME_DIR": str(home / "run"),
           "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(home / "storage.conf")}
    try:
        os.chmod(conf, 0o644)
        (home / "run").mkdir()
        storage = home / "storage.conf"
        storage.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{home}/graph"\n'
                           f'runroot = "{home}/run/containers"\n')
        for path in [home, home / "run", storage]:
            os.chown(path, user.pw_uid, user.pw_gid)
        os.chmod(home / "run", 0o700)
        # Can rootless podman run anything at all here? If not, say why.
        probe = subprocess.run(["podman", "info", "--format", "{{.Host.Security.Rootless}}"],
                               env=env, capture_output=True, text=True, timeout=120,
                               user=user.pw_uid, group=user.pw_gid, cwd=home)
        if probe.returncode != 0 or probe.stdout.strip() != "true":
            pytest.skip("rootless podman does not work in this sandbox: " +
                        (probe.stderr.strip().splitlines() or ["podman info failed"])[-1])
        server = fleet.server()
        token = home / "agent.token"
        shutil.copy2(server.data_dir / "agent.token", token)
        os.chown(token, user.pw_uid, user.pw_gid)
        work_dir = home / "agent"
        work_dir.mkdir()
        os.chown(work_dir, user.pw_uid, user.pw_gid)
        proc = harness.Proc(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                             "--init-groups", harness.FERRY, "agent", "--server", server.url,
                             "--token-file", token, "--name", "rootless", "--gpus", "1xH200",
                             "--ignore-nvml", "--work-dir", work_dir],
                            home / "agent.log", env=env)
        agent = harness.Agent(server, "rootless", "1xH200", tmp_path)
        agent.proc = proc
        fleet.agents.append(agent)
        proc.start()
        agent.wait_ready(timeout=30)
        job_id = submit(server, {"name": "rootless", "image": ref, "command": [
            "sh", "-c", "echo uid=$(id -u); echo written > out.txt; echo done"]}).json()["id"]
        job = server.wait_state(job_id, ["SUCCEEDED", "FAILED"], timeout=120)
        out = "".join(c["data"] for c in server.logs(job_id))
        assert job["state"] == "SUCCEEDED", (job, out, proc.log()[-3000:])
        # Root in the container is the agent's own user outside it.
        assert "uid=0\n" in out, out
        assert (work_dir / "out.txt").stat().st_uid == user.pw_uid
    finally:
        subprocess.run(["podman", "unshare", "rm", "-rf", str(home / "graph")],
                       env=env, capture_output=True, timeout=120,
                       user=user.pw_uid, group=user.pw_gid, cwd="/")
        shutil.rmtree(home, ignore_errors=True)


def test_a_waiting_job_has_its_image_pulled_on_its_reserved_node(fleet, registry, tmp_path):
    # Prefetch while pending (docs/fleet-staging.md): the node held for a
    # blocked job pulls its image before the job is admitted.
    conf = containers_conf(tmp_path / "containers.conf")
    ref = f"{registry.host}/ferry-ahead:1"
    build_image(tmp_path, podman_env(tmp_path, "builder", conf), ref)
    digest = manifest_digest(registry, "ferry-ahead", "1")
    server = fleet.server(extra_args=["--rate", "0"])
    envs = {}
    for name in ("node-a", "node-b"):
        envs[name] = podman_env(tmp_path, name, conf)
        start_agent(fleet, server, name, envs[name])

    def images(name):
        return subprocess.run(["podman", "images", "--digests", "--format", "{{.Digest}}"],
                              env=envs[name], capture_output=True, text=True, timeout=60).stdout

    blocker = {"command": ["sleep", "600"], "gpus_per_task": 1, "max_retries": 0}
    unlimited = submit(server, {"name": "unlimited", **blocker}).json()["id"]
    server.wait_state(unlimited, ["RUNNING"], timeout=30)
    bounded = submit(server, {"name": "bounded", "max_runtime_seconds": 600,
                              **blocker}).json()["id"]
    server.wait_state(bounded, ["RUNNING"], timeout=30)
    held = server.job(bounded)["placement"][0]["node"]
    other = "node-b" if held == "node-a" else "node-a"

    waiting = submit(server, {"name": "in-image", "command": ["cat", "/etc/ferry-image"],
                              "image": ref, "gpus_per_task": 1, "max_retries": 0}).json()["id"]
    harness.wait_for(lambda: harness.events(server, waiting, "prefetched"), 90,
                     "the prefetched event")
    assert server.job(waiting)["state"] == "PENDING"
    note = harness.events(server, waiting, "prefetched")[0]["message"]
    assert f"prefetched on {held} while the job waits" in note, note
    assert f"@{digest} pulled in" in note, note
    assert digest in images(held), images(held)
    assert digest not in images(other), images(other)

    server.admin("POST", f"/v1/jobs/{bounded}:cancel", {})
    job = server.wait_state(waiting, ["SUCCEEDED", "FAILED"], timeout=120)
    out = "".join(c["data"] for c in server.logs(waiting))
    assert job["state"] == "SUCCEEDED", (job, out)
    assert job["attempts"][-1]["placement"][0]["node"] == held
    assert "built for test_images" in out, out
    server.admin("POST", f"/v1/jobs/{unlimited}:cancel", {})


def test_a_restarted_agent_removes_the_containers_a_killed_one_left(fleet, registry, tmp_path):
    conf = containers_conf(tmp_path / "containers.conf")
    ref = f"{registry.host}/ferry-left:1"
    build_image(tmp_path, podman_env(tmp_path, "builder", conf), ref)
    server = fleet.server()
    env = podman_env(tmp_path, "agent", conf)
    agent = start_agent(fleet, server, "node-a", env)
    job_id = submit(server, {"name": "long", "command": ["sleep", "600"], "image": ref,
                             "gpus_per_task": 1, "max_retries": 0}).json()["id"]
    server.wait_state(job_id, ["RUNNING"], timeout=120)
    harness.wait_for(lambda: containers_named(env, f"ferry-{job_id}-"), 30, "the container")
    agent.proc.kill9()  # the agent's group; the container lives on under conmon
    time.sleep(1)
    assert containers_named(env, f"ferry-{job_id}-"), "the container should outlive the agent"
    agent.start().wait_ready()
    harness.wait_for(lambda: not containers_named(env, f"ferry-{job_id}-"), 60,
                     "the leftover container removed")
    harness.wait_for(lambda: "removed 1 container(s) an earlier agent of this node left"
                     in agent.proc.log(), 10, "the agent's note of the removal")
    # A clean start after that finds no marker and calls no podman for it.
    agent.stop()
    agent.start().wait_ready()
    assert "an earlier agent" not in agent.proc.log()
