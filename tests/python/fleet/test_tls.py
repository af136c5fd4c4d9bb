"""`ferry server` over HTTPS (--tls-cert/--tls-key) with real agents and the
CLI: a job runs end to end over https (submit, logs -f, status), the local
cloud provider starts agents that reach the server over https with the CA,
and every way of getting it wrong fails with an error that says what is wrong:
an untrusted certificate, a certificate for another host, plain HTTP on the
TLS port, HTTPS to a plain server, and bad certificate or key files.

The certificates come from the `openssl` command: a test CA, a server
certificate for 127.0.0.1 and localhost, one for another host name, and a
second CA with its own server certificate."""

import http.client
import itertools
import json
import os
import shutil
import socket as socket_module
import ssl
import subprocess
from pathlib import Path

import pytest

import harness

AGENT_ARGS = ["--cpus", "4", "--memory-mb", "8192", "--sync-wait-ms", "500"]
_serials = itertools.count(1000)


def openssl(*args, cwd):
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, f"openssl {' '.join(args)}:\n{done.stderr}"


def make_ca(directory, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
            "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return directory / f"{name}.pem"


def make_cert(directory, name, ca, san, cn=None):
    """A server certificate `name`.pem / `name`.key signed by CA `ca` with
    subjectAltName `san` and common name `cn` (default `name`)."""
    (directory / f"{name}.ext").write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn or name}",
            cwd=directory)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-set_serial", str(next(_serials)), "-days", "2",
            "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=directory)
    return directory / f"{name}.pem", directory / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if harness.fleet_missing():
        pytest.skip(harness.fleet_missing())
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = tmp_path_factory.mktemp("pki")
    p = {"dir": d, "ca": make_ca(d, "test-ca"), "other_ca": make_ca(d, "other-ca")}
    p["cert"], p["key"] = make_cert(d, "server", "test-ca", "IP:127.0.0.1,DNS:localhost")
    p["wrong_cert"], p["wrong_key"] = make_cert(d, "elsewhere", "test-ca",
                                                "DNS:elsewhere.example")
    # The address only in the common name: with a subjectAltName present it does not count.
    p["cn_cert"], p["cn_key"] = make_cert(d, "cn-only", "test-ca", "DNS:elsewhere.example",
                                          cn="127.0.0.1")
    p["other_cert"], p["other_key"] = make_cert(d, "other-server", "other-ca",
                                                "IP:127.0.0.1,DNS:localhost")
    return p


def https_request(port, method, path, ca, token=None, body=None, host="127.0.0.1", timeout=15):
    """One request over TLS, trusting only `ca`; returns (status, parsed JSON or None)."""
    context = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    raw = None
    if body is not None:
        raw = json.dumps(body)
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=raw, headers=headers)
        r = conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None)
    finally:
        conn.close()


class TlsServer:
    """`ferry server` with --tls-cert/--tls-key on a free port."""

    def __init__(self, work_dir, name, cert, key, ca, extra_args=()):
        self.work_dir = Path(work_dir)
        self.name = name
        self.data_dir = self.work_dir / f"{name}-data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port_file = self.work_dir / f"{name}.port"
        self.ca = ca
        self.args = [harness.FERRY, "server", "--store", f"sqlite:{self.work_dir}/{name}.db",
                     "--port", "0", "--port-file", self.port_file, "--data-dir", self.data_dir,
                     "--rate", "0", "--lease-ms", "3000", *extra_args]
        if cert:
            self.args += ["--tls-cert", cert, "--tls-key", key]
        self.proc = None
        self.port = None

    def start(self, timeout=30):
        self.proc = harness.Proc(self.args, self.work_dir / f"{self.name}.log").start()

        self.port = harness.wait_for_port_file(self.proc, self.port_file, timeout)
        self.admin_token = (self.data_dir / "admin.token").read_text().strip()
        self.agent_token_file = self.data_dir / "agent.token"
        return self

    @property
    def url(self):
        return f"https://127.0.0.1:{self.port}"

    def api(self, method, path, body=None):
        status, data = https_request(self.port, method, path, self.ca, self.admin_token, body)
        assert status in (200, 201), f"{method} {path}: {status} {data}"
        return data

    def wait_state(self, job_id, states, timeout=30):
        states = {states} if isinstance(states, str) else set(states)
        return harness.wait_for(
            lambda: (lambda j: j if j["state"] in states else None)(
                self.api("GET", f"/v1/jobs/{job_id}")),
            timeout, f"job {job_id} in {sorted(states)}", interval=0.1)

    def stop(self):
        if self.proc:
            self.proc.stop()


@pytest.fixture
def procs():
    started = []
    yield started
    for p in reversed(started):
        p.stop()


def tls_server(procs, tmp_path, pki, name="tls", cert=None, key=None, extra_args=()):
    server = TlsServer(tmp_path, name, cert or pki["cert"], key or pki["key"], pki["ca"],
                       extra_args)
    procs.append(server)
    return server.start()


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("FERRY_SERVER", "FERRY_TOKEN", "FERRY_TOKEN_FILE", "FERRY_CA_FILE",
                        "SSL_CERT_FILE", "SSL_CERT_DIR")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def cli(*args, env=None, timeout=60):
    return subprocess.run([harness.FERRY, *map(str, args)], capture_output=True, text=True,
                          env=env if env is not None else clean_env(), timeout=timeout)


def test_a_job_runs_end_to_end_over_https(procs, tmp_path, pki):
    server = tls_server(procs, tmp_path, pki)
    assert "listening on https://" in server.proc.log()
    agent = harness.Proc([harness.FERRY, "agent", "--server", server.url, "--ca-file", pki["ca"],
                          "--token-file", server.agent_token_file, "--name", "tls-a",
                          "--gpus", "2xH200", "--ignore-nvml", "--work-dir", tmp_path / "agent",
                          *AGENT_ARGS], tmp_path / "agent.log").start()
    procs.append(agent)

    def ready():
        if not agent.running():
            raise AssertionError(f"the agent exited:\n{agent.log()[-3000:]}")
        nodes = server.api("GET", "/v1/nodes")["nodes"]
        return any(n["name"] == "tls-a" and n["state"] == "READY" for n in nodes)

    harness.wait_for(ready, 20, "node tls-a READY over https")

    # The CLI by environment, with the host name of the certificate's DNS entry.
    env = clean_env(FERRY_SERVER=f"https://localhost:{server.port}", FERRY_CA_FILE=pki["ca"],
                    FERRY_TOKEN=server.admin_token)
    submitted = cli("submit", "--json", "--gpus", "1", "--name", "over-tls", "--", "sh", "-c",
                    "echo hello over tls; sleep 1; echo on $FERRY_NODE; echo oops >&2", env=env)
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)["id"]

    # logs -f long-polls until the job has finished and all output is in.
    logs = cli("logs", job, "-f", env=env)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == "hello over tls\non tls-a\n", logs.stdout
    assert "oops" in logs.stderr

    # The CLI by flags, against the IP address entry.
    status = cli("status", job, "--json", "--server", server.url, "--ca-file", pki["ca"],
                 "--token", server.admin_token)
    assert status.returncode == 0, status.stderr
    done = json.loads(status.stdout)
    assert done["state"] == "SUCCEEDED", done
    assert [p["node"] for p in done["placement"]] == ["tls-a"]
    # The connection flags before the command.
    nodes = cli("--server", server.url, "--ca-file", pki["ca"], "--token", server.admin_token,
                "nodes")
    assert nodes.returncode == 0 and "tls-a" in nodes.stdout, nodes.stderr


def test_an_untrusted_certificate_is_refused_with_a_verification_error(procs, tmp_path, pki):
    server = tls_server(procs, tmp_path, pki)
    base = ["jobs", "--server", server.url, "--token", server.admin_token]

    # No CA file: the system's CAs do not know the test CA.
    no_ca = cli(*base)
    assert no_ca.returncode == 1, no_ca
    assert "TLS certificate verification failed" in no_ca.stderr, no_ca.stderr
    assert "unable to get local issuer certificate" in no_ca.stderr, no_ca.stderr
    assert "FERRY_CA_FILE" in no_ca.stderr, no_ca.stderr

    # Another CA, by flag and by environment.
    other = cli(*base, "--ca-file", pki["other_ca"])
    assert other.returncode == 1, other
    assert "TLS certificate verification failed" in other.stderr, other.stderr
    assert str(pki["other_ca"]) in other.stderr, other.stderr
    by_env = cli(*base, env=clean_env(FERRY_CA_FILE=pki["other_ca"]))
    assert by_env.returncode == 1 and "verification failed" in by_env.stderr, by_env.stderr

    # An agent with the wrong CA never registers and says why.
    agent = harness.Proc([harness.FERRY, "agent", "--server", server.url, "--ca-file",
                          pki["other_ca"], "--token-file", server.agent_token_file, "--name",
                          "untrusting", "--gpus", "1xH200", "--ignore-nvml", "--work-dir",
                          tmp_path / "agent", *AGENT_ARGS], tmp_path / "agent.log").start()
    procs.append(agent)
    harness.wait_for(lambda: "TLS certificate verification failed" in agent.log(), 20,
                     "the agent to report the failed verification")
    assert server.api("GET", "/v1/nodes")["nodes"] == []

    # The same server is fine with the right CA.
    good = cli(*base, "--ca-file", pki["ca"])
    assert good.returncode == 0, good.stderr


def test_a_certificate_for_another_host_fails_hostname_verification(procs, tmp_path, pki):
    server = tls_server(procs, tmp_path, pki, "elsewhere", pki["wrong_cert"], pki["wrong_key"])
    for host in ("127.0.0.1", "localhost"):
        done = cli("whoami", "--server", f"https://{host}:{server.port}", "--ca-file", pki["ca"],
                   "--token", server.admin_token)
        assert done.returncode == 1, done
        assert "TLS certificate verification failed" in done.stderr, done.stderr
        assert f"does not match host '{host}'" in done.stderr, done.stderr
    # Python's TLS stack agrees: the chain is fine, the name is not.
    with pytest.raises(ssl.SSLCertVerificationError, match="match|mismatch"):
        https_request(server.port, "GET", "/healthz", pki["ca"])


def test_a_common_name_does_not_stand_in_for_the_subject_alt_name(procs, tmp_path, pki):
    server = tls_server(procs, tmp_path, pki, "cn-only", pki["cn_cert"], pki["cn_key"])
    done = cli("whoami", "--server", server.url, "--ca-file", pki["ca"], "--token",
               server.admin_token)
    assert done.returncode == 1, done
    assert "does not match host '127.0.0.1'" in done.stderr, done.stderr


def test_plain_http_to_the_tls_port_fails(procs, tmp_path, pki):
    server = tls_server(procs, tmp_path, pki)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        harness.request(server.port, "GET", "/healthz", timeout=10)
    done = cli("jobs", "--server", f"http://127.0.0.1:{server.port}", "--token",
               server.admin_token)
    assert done.returncode == 1, done
    assert "cannot reach" in done.stderr and "https://" in done.stderr, done.stderr


def test_https_to_a_plain_server_fails_the_handshake(procs, tmp_path, pki):
    plain = TlsServer(tmp_path, "plain", None, None, pki["ca"])
    procs.append(plain)
    plain.start()
    assert harness.request(plain.port, "GET", "/healthz").status == 200
    done = cli("jobs", "--server", f"https://127.0.0.1:{plain.port}", "--ca-file", pki["ca"],
               "--token", plain.admin_token)
    assert done.returncode == 1, done
    assert "TLS handshake" in done.stderr and "http://" in done.stderr, done.stderr


def test_the_cli_and_agent_refuse_unusable_ca_files(tmp_path, pki):
    missing = tmp_path / "missing.pem"
    done = cli("jobs", "--server", "https://127.0.0.1:1", "--ca-file", missing, "--token", "t")
    assert done.returncode == 2, done
    assert f"cannot read CA file {missing}: No such file or directory" in done.stderr
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    done = cli("jobs", "--server", "https://127.0.0.1:1", "--token", "t",
               env=clean_env(FERRY_CA_FILE=not_pem))
    assert done.returncode == 2, done
    assert "holds no PEM certificate" in done.stderr, done.stderr
    # The agent stops at once instead of retrying forever.
    done = cli("agent", "--server", "https://127.0.0.1:1", "--ca-file", not_pem, "--token", "t",
               "--name", "n", "--work-dir", tmp_path / "agent", timeout=30)
    assert done.returncode == 1, done
    assert "holds no PEM certificate" in done.stderr, done.stderr


@pytest.mark.parametrize("case", ["cert_only", "key_only", "missing_cert", "missing_key",
                                  "not_pem", "mismatch"])
def test_the_server_refuses_bad_tls_files(tmp_path, pki, case):
    missing = tmp_path / "missing.pem"
    not_pem = tmp_path / "garbage.pem"
    not_pem.write_text("not a certificate\n")
    args = {
        "cert_only": (["--tls-cert", pki["cert"]], "--tls-cert needs --tls-key"),
        "key_only": (["--tls-key", pki["key"]], "--tls-key needs --tls-cert"),
        "missing_cert": (["--tls-cert", missing, "--tls-key", pki["key"]],
                         f"cannot read TLS certificate file {missing}: No such file"),
        "missing_key": (["--tls-cert", pki["cert"], "--tls-key", missing],
                        f"cannot read TLS key file {missing}: No such file"),
        "not_pem": (["--tls-cert", not_pem, "--tls-key", pki["key"]],
                    f"cannot load the TLS certificate from {not_pem}"),
        "mismatch": (["--tls-cert", pki["cert"], "--tls-key", pki["other_key"]],
                     f"the TLS private key in {pki['other_key']} does not match the "
                     f"certificate in {pki['cert']}"),
    }[case]
    store = tmp_path / "never.db"
    done = cli("server", "--store", f"sqlite:{store}", "--port", "0", "--data-dir",
               tmp_path / "data", *args[0], timeout=30)
    assert done.returncode == 1, done
    assert args[1] in done.stderr, done.stderr
    assert not store.exists(), "the server opened its store before checking the TLS files"


CLOUD_CONFIG = """
pools:
  - name: burst
    cloud: true
    provider: local
    provisioning_delay_s: 0.2
    max_nodes: 1
    idle_timeout_s: 60
    node: {gpu_model: H100, gpus: 2, cpus: 2, memory_mb: 4096}
providers:
  - name: local
    type: local
    params:
      name_prefix: tls
      stop_timeout_s: "2"
"""


def test_the_local_provider_starts_agents_that_verify_the_server(procs, tmp_path, pki):
    config = tmp_path / "scheduler.yaml"
    config.write_text(CLOUD_CONFIG)
    server = tls_server(procs, tmp_path, pki, extra_args=[
        "--scheduler-config", config, "--ca-file", pki["ca"]])
    status, created = https_request(server.port, "POST", "/v1/jobs", pki["ca"],
                                    server.admin_token,
                                    {"name": "burst", "gpus_per_task": 2,
                                     "command": ["sh", "-c", "echo cloud on $FERRY_NODE"]})
    assert status == 201, created
    done = server.wait_state(created["id"], ("SUCCEEDED", "FAILED"), timeout=60)
    assert done["state"] == "SUCCEEDED", done
    node = done["placement"][0]["node"]
    assert node.startswith("tls-burst-"), done["placement"]
    log = (server.data_dir / "cloud-nodes" / node / "agent.log").read_text()
    assert f"with https://127.0.0.1:{server.port}" in log, log
    chunks = server.api("GET", f"/v1/jobs/{created['id']}/logs")["chunks"]
    assert "".join(c["data"] for c in chunks) == f"cloud on {node}\n"


def test_an_empty_idempotency_key_is_refused_over_https(procs, tmp_path, pki):
    """The TLS listener keeps the raw request heads too: an empty key is a 400,
    and the kept-alive connection goes on serving a real key and its replay."""
    from test_submission_checks import submission  # the same raw requests as over plain HTTP

    server = tls_server(procs, tmp_path, pki)
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    raw = socket_module.create_connection(("127.0.0.1", server.port), timeout=15)
    replies = []
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        stream = sock.makefile("rb")
        for request in (submission(server.admin_token, b"Idempotency-Key:\r\n"),
                        submission(server.admin_token, b"Idempotency-Key: k-1\r\n"),
                        submission(server.admin_token, b"Idempotency-Key: k-1\r\n")):
            sock.sendall(request)
            status = int(stream.readline().split()[1])
            length = 0
            while (line := stream.readline().strip()):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            replies.append((status, json.loads(stream.read(length) or b"null")))
    assert replies[0][0] == 400, replies[0]
    assert "Idempotency-Key" in replies[0][1]["detail"]
    assert replies[1][0] == 201 and replies[2][0] == 201
    assert replies[1][1]["id"] == replies[2][1]["id"]
    jobs = server.api("GET", "/v1/jobs")["jobs"]
    assert len(jobs) == 1
