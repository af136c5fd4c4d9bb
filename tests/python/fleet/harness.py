"""Processes and HTTP for the fleet tests: `ferry server` on SQLite or a
throwaway PostgreSQL cluster, `ferry agent` with declared GPUs, and a small
stdlib client. Every wait is bounded; every process runs in its own process
group and is killed with it."""

import glob
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FERRY = os.environ.get("FERRY_BIN", str(REPO / "build" / "release" / "bin" / "ferry"))
PG_TEST_SERVER = REPO / "scripts" / "pg-test-server"


class Timeout(AssertionError):
    pass


def wait_for(predicate, timeout, what, interval=0.05):
    """Polls `predicate` until it returns a truthy value (returned) or `timeout` s pass."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
        time.sleep(interval)


_support = {}


def fleet_missing():
    """Why the fleet commands cannot be tested, or None when they can."""
    if "reason" not in _support:
        reason = None
        if not os.access(FERRY, os.X_OK):
            reason = f"{FERRY} is not built (make build, or set FERRY_BIN)"
        else:
            for command in ("server", "agent"):
                try:
                    done = subprocess.run([FERRY, command, "--help"], capture_output=True,
                                          timeout=20)
                except subprocess.TimeoutExpired:
                    reason = f"`ferry {command} --help` did not finish"
                    break
                if done.returncode != 0:
                    reason = f"{FERRY} has no `{command}` command"
                    break
        _support["reason"] = reason
    return _support["reason"]


def pg_bin():
    """The directory with initdb/pg_ctl/createdb, or None."""
    candidates = [os.environ.get("PG_BIN", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for c in candidates:
        if c and all(os.access(os.path.join(c, b), os.X_OK) for b in ("initdb", "pg_ctl", "createdb")):
            return c
    return None


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-cased names
        self.body = body
        self._json = None

    @property
    def content_type(self):
        return self.headers.get("content-type", "").split(";")[0].strip()

    def json(self):
        if self._json is None:
            self._json = json.loads(self.body.decode() or "null")
        return self._json

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


def request(port, method, path, body=None, raw=None, token=None, headers=None, timeout=15):
    """One HTTP request on a fresh connection. `body` is JSON-encoded; `raw`
    (bytes or str) is sent as is. `token` None sends no Authorization."""
    h = {}
    if body is not None:
        raw = json.dumps(body)
    if raw is not None:
        if isinstance(raw, str):
            raw = raw.encode()
        h["Content-Type"] = "application/json"
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    for k, v in (headers or {}).items():
        # An explicit None drops a default header.
        for existing in [e for e in h if e.lower() == k.lower()]:
            del h[existing]
        if v is not None:
            h[k] = str(v)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=raw, headers=h)
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        conn.close()


class Proc:
    """A child process in its own process group, logging to a file."""

    def __init__(self, args, log_path, cwd=None, env=None):
        self.args = [str(a) for a in args]
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.env = env
        self.popen = None

    def start(self):
        log = open(self.log_path, "ab")
        try:
            self.popen = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=self.cwd, env=self.env,
                                          start_new_session=True)
        finally:
            log.close()
        return self

    @property
    def pid(self):
        return self.popen.pid

    def running(self):
        return self.popen is not None and self.popen.poll() is None

    def kill9(self):
        """SIGKILL to the whole group (the process and anything it started)."""
        if self.popen is None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def kill9_leader(self):
        """SIGKILL to the process alone; its children (tasks) live on."""
        if self.popen is None:
            return
        try:
            os.kill(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait(timeout=10)

    def stop(self, grace=10):
        """SIGTERM, then SIGKILL to the group after `grace` seconds."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(timeout=grace)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        self.kill9()

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def wait_for_port_file(proc, port_file, timeout):
    """The port a `ferry server --port 0 --port-file F` wrote; fails with its log if it exits."""

    def port():
        if not proc.running():
            raise AssertionError(f"ferry server exited ({proc.popen.returncode}):\n"
                                 + proc.log()[-3000:])
        try:
            text = port_file.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    return wait_for(port, timeout, "the server's port file")


class Server:
    """`ferry server` on `store_url`, on a free port."""

    def __init__(self, store_url, work_dir, extra_args=(), name="server"):
        self.store_url = store_url
        self.work_dir = Path(work_dir)
        self.data_dir = self.work_dir / f"{name}-data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port_file = self.work_dir / f"{name}.port"
        self.extra_args = list(extra_args)
        self.name = name
        self.proc = None
        self.port = None
        self.admin_token = None
        self.agent_token_file = self.data_dir / "agent.token"

    def start(self, timeout=30):
        if self.port_file.exists():
            self.port_file.unlink()
        self.proc = Proc([FERRY, "server", "--store", self.store_url, "--port", "0",
                          "--port-file", self.port_file, "--data-dir", self.data_dir,
                          *self.extra_args], self.work_dir / f"{self.name}.log").start()

        self.port = wait_for_port_file(self.proc, self.port_file, timeout)

        def ready():
            try:
                return request(self.port, "GET", "/readyz", timeout=5).status == 200
            except OSError:
                return False

        wait_for(ready, timeout, "GET /readyz = 200")
        self.admin_token = (self.data_dir / "admin.token").read_text().strip()
        return self

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def call(self, method, path, body=None, token=None, **kw):
        return request(self.port, method, path, body=body,
                       token=self.admin_token if token is None else token, **kw)

    def admin(self, method, path, body=None, expect=(200, 201, 204)):
        r = self.call(method, path, body)
        assert r.status in expect, f"{method} {path}: {r}"
        return r.json() if r.body else None

    def create_user(self, name, tenant="default", team="default", role="user"):
        return self.admin("POST", "/v1/admin/users",
                          {"tenant": tenant, "team": team, "name": name, "role": role})["token"]

    def job(self, job_id):
        return self.admin("GET", f"/v1/jobs/{job_id}")

    def wait_job(self, job_id, predicate, timeout, what):
        box = {}

        def check():
            box["job"] = self.job(job_id)
            return predicate(box["job"])

        try:
            wait_for(check, timeout, f"job {job_id}: {what}", interval=0.1)
        except Timeout as e:
            raise Timeout(f"{e}\njob: {json.dumps(box.get('job'))[:2000]}") from None
        return box["job"]

    def wait_state(self, job_id, states, timeout=20):
        states = {states} if isinstance(states, str) else set(states)
        return self.wait_job(job_id, lambda j: j["state"] in states, timeout,
                             f"state in {sorted(states)}")

    def logs(self, job_id):
        r = self.admin("GET", f"/v1/jobs/{job_id}/logs?limit=1000")
        return r["chunks"]

    def all_jobs(self):
        """Every job in the store (the admin sees all tenants), through the API."""
        jobs, token = [], None
        for _ in range(10_000):
            path = "/v1/jobs?page_size=500"
            if token:
                path += "&page_token=" + urllib.parse.quote(token, safe="")
            page = self.admin("GET", path)
            jobs += page["jobs"]
            token = page.get("next_page_token")
            if not token:
                return jobs
        raise AssertionError("paging did not end")

    def all_job_ids(self):
        return [j["id"] for j in self.all_jobs()]

    def kill9(self):
        self.proc.kill9()

    def stop(self):
        if self.proc:
            self.proc.stop()


class Agent:
    """`ferry agent` with declared GPUs (NVML ignored unless `ignore_nvml` is
    False; `env` replaces the agent's environment, e.g. to point
    LD_LIBRARY_PATH at a stand-in libnvidia-ml.so.1)."""

    def __init__(self, server, name, gpus, work_dir, extra_args=(), env=None, ignore_nvml=True):
        self.server = server
        self.name = name
        self.gpus = gpus
        self.work_dir = Path(work_dir) / f"agent-{name}"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.extra_args = list(extra_args)
        self.env = env
        self.ignore_nvml = ignore_nvml
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        nvml = ["--ignore-nvml"] if self.ignore_nvml else []
        self.proc = Proc([FERRY, "agent", "--server", self.server.url, "--token-file",
                          self.server.agent_token_file, "--name", self.name, "--gpus", self.gpus,
                          *nvml, "--work-dir", self.work_dir, *self.extra_args],
                         self.work_dir.parent / f"agent-{self.name}.{self.starts}.log",
                         env=self.env).start()
        return self

    def wait_ready(self, timeout=20):
        def ready():
            if not self.proc.running():
                raise AssertionError(f"agent {self.name} exited:\n{self.proc.log()[-3000:]}")
            r = self.server.call("GET", f"/v1/nodes/{urllib.parse.quote(self.name)}")
            return r.status == 200 and r.json()["state"] == "READY"

        wait_for(ready, timeout, f"node {self.name} READY")
        return self

    def stop(self):
        if self.proc:
            self.proc.stop()


class PgCluster:
    """A throwaway PostgreSQL cluster (scripts/pg-test-server) with one
    database per store."""

    def __init__(self):
        # Short and reachable by user `postgres` (pytest's tmp dirs are 0700).
        self.dir = tempfile.mkdtemp(prefix="fypg-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.cluster = os.path.join(self.dir, "c")
        self.url = None
        self.count = 0

    def start(self, timeout=90):
        done = subprocess.run([str(PG_TEST_SERVER), "start", self.cluster], capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"pg-test-server start failed:\n{done.stderr}")
        self.url = done.stdout.strip().splitlines()[-1]
        return self

    def new_database(self):
        """A fresh, empty database; returns its libpq URL."""
        self.count += 1
        name = f"ferry{self.count}"
        port = open(os.path.join(self.cluster, "port")).read().strip()
        args = [os.path.join(pg_bin(), "createdb"), "-h", self.cluster, "-p", port, "-U",
                "postgres", name]
        if os.getuid() == 0:
            args = ["runuser", "-u", "postgres", "--"] + args
        done = subprocess.run(args, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise AssertionError(f"createdb failed: {done.stderr}")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self):
        try:
            subprocess.run([str(PG_TEST_SERVER), "stop", self.cluster], capture_output=True,
                           timeout=60)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def process_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cli(server, *args, token=None, timeout=30):
    """Runs the `ferry` CLI against `server` (as its admin unless `token`);
    the connection flags go before a `--` command."""
    args = list(args)
    cut = args.index("--") if "--" in args else len(args)
    connection = ["--server", server.url, "--token", token or server.admin_token]
    return subprocess.run([FERRY, *args[:cut], *connection, *args[cut:]],
                          capture_output=True, text=True, timeout=timeout)


def port_metric(port, name):
    """The value of the unlabelled series `name` on the /metrics page at `port`."""
    text = request(port, "GET", "/metrics").body.decode()
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def events(server, job_id, kind):
    """The events of one type in a job's timeline, oldest first."""
    return [e for e in server.admin("GET", f"/v1/jobs/{job_id}/events")["events"]
            if e["type"] == kind]


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_ports(pid):
    """The TCP ports process `pid` listens on (from /proc: its socket inodes
    in /proc/net/tcp and tcp6 in state LISTEN)."""
    inodes = set()
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def prometheus_missing():
    """Why Prometheus tests cannot run, or None when they can."""
    if PROMETHEUS is None or PROMTOOL is None:
        return "prometheus and promtool are not installed (scripts/setup installs Debian's prometheus)"
    return None


class Prometheus:
    """A real Prometheus scraping `scrape_configs` every second (rules from
    `rule_files` evaluated every second), queried through its HTTP API."""

    def __init__(self, work_dir, scrape_configs, rule_files=()):
        self.work_dir = Path(work_dir)
        self.port = free_port()
        self.config = self.work_dir / "prometheus.yml"
        self.config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(f) for f in rule_files],
            "scrape_configs": scrape_configs,
        }))
        self.proc = None

    def start(self):
        check = subprocess.run([PROMTOOL, "check", "config", str(self.config)],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.proc = Proc([PROMETHEUS, f"--config.file={self.config}",
                          f"--storage.tsdb.path={self.work_dir / 'prometheus-data'}",
                          f"--web.listen-address=127.0.0.1:{self.port}"],
                         self.work_dir / "prometheus.log").start()
        return self

    def query(self, expr):
        """The result vector of an instant query; None while Prometheus is not answering."""
        if not self.proc.running():
            raise AssertionError("prometheus exited:\n" + self.proc.log()[-3000:])
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": expr}))
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                body = json.load(reply)
        except OSError:
            return None
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr):
        """The first sample's value of `expr`, or None when there is none."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def stop(self):
        if self.proc:
            self.proc.stop()


def metric(server, name):
    """The value of one sample (`name` with its labels, as the text format
    writes them) in the server's /metrics, or None when absent."""
    text = server.call("GET", "/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None
