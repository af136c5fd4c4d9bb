"""`GET /metrics` scraped by a real Prometheus: the test starts Prometheus
(Debian's `prometheus`) with a scrape job for a `ferry server` that runs a
job on an agent, then asks Prometheus' HTTP API for the series the server
exports (docs/fleet-metrics.md). Also: only platform admins may scrape, and
`promtool check metrics` accepts the text."""

import subprocess

import pytest

import harness

PROMTOOL = harness.PROMTOOL
needs_prometheus = pytest.mark.skipif(harness.prometheus_missing() is not None,
                                      reason=str(harness.prometheus_missing()))


def scrape(server, token):
    return harness.request(server.port, "GET", "/metrics", token=token)


@pytest.fixture
def busy_server(fleet):
    # The store-backed gauges counted in the background, often enough for the test.
    server = fleet.server("sqlite", extra_args=["--rate", "0", "--metrics-refresh-ms", "200"])
    fleet.agent(server, "gpu-a", "2xH200", ["--sync-wait-ms", "500"])
    done = server.admin("POST", "/v1/jobs", {"name": "ok", "command": ["true"],
                                             "gpus_per_task": 1})["id"]
    server.wait_state(done, "SUCCEEDED")
    # Needs more GPUs than the node has free while a long job holds one.
    long_job = server.admin("POST", "/v1/jobs", {"name": "long", "command": ["sleep", "60"],
                                                 "gpus_per_task": 1})["id"]
    server.wait_state(long_job, "RUNNING")
    server.admin("POST", "/v1/jobs", {"name": "waits", "command": ["true"], "gpus_per_task": 2})
    return server


@needs_prometheus
def test_prometheus_scrapes_the_server(busy_server, tmp_path):
    server = busy_server
    token_file = tmp_path / "scrape.token"
    token_file.write_text(server.admin_token)
    prometheus = harness.Prometheus(tmp_path, [{
        "job_name": "ferry-server",
        "metrics_path": "/metrics",
        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
    }]).start()
    try:
        query, value = prometheus.query, prometheus.value
        harness.wait_for(lambda: value('up{job="ferry-server"}') == 1, 60,
                         "Prometheus to scrape the server")
        assert value('ferry_jobs{state="SUCCEEDED",tenant="default"}') == 1
        assert value('ferry_jobs{state="RUNNING",tenant="default"}') == 1
        harness.wait_for(lambda: value('sum(ferry_pending_jobs{tenant="default"})') == 1, 30,
                         "the pending job in Prometheus")
        pending = query("ferry_pending_jobs")
        assert pending[0]["metric"]["reason"] not in ("", "SUBMITTED"), pending
        assert value('ferry_nodes{state="READY"}') == 1
        assert value('sum(ferry_gpus)') == 2
        assert value('ferry_gpus_free') == 1
        # The running job holds the other GPU, seen by pool, tenant and team.
        assert value('ferry_gpus_allocated{pool="default",tenant="default",team="default"}') == 1
        assert value('ferry_pool_jobs{state="RUNNING",tenant="default"}') == 1
        assert value('sum(ferry_http_requests_total{route="/v1/jobs",method="POST",code="2xx"})') == 3
        assert value('sum(ferry_http_requests_total{route="/v1/agent/sync"})') >= 1
        assert value("ferry_scheduler_placements_total") >= 2
        assert value("ferry_scheduler_cycle_duration_seconds_count") >= 1
        # A histogram Prometheus can take quantiles of.
        assert value("histogram_quantile(0.99, sum by (le) "
                     "(ferry_http_request_duration_seconds_bucket))") is not None
        assert value("ferry_zero_copy_exports_total") is not None  # process telemetry
    finally:
        prometheus.stop()


@needs_prometheus
def test_the_text_passes_promtool_and_needs_an_admin(busy_server):
    server = busy_server
    reply = scrape(server, server.admin_token)
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    lint = subprocess.run([PROMTOOL, "check", "metrics"], input=reply.body, capture_output=True)
    # promtool exits non-zero only for errors; its lint remarks go to stdout.
    assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()
    assert lint.stdout.decode().strip() == "", lint.stdout.decode()

    user = server.create_user("viewer")
    assert scrape(server, user).status == 403
    assert scrape(server, None).status == 401
    assert scrape(server, "not-a-token").status == 401


@needs_prometheus
def test_shipped_rules_pass_promtool_and_their_unit_tests():
    rules = harness.REPO / "deploy" / "prometheus"
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules / "ferry-rules.yml")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run([PROMTOOL, "test", "rules", "ferry-rules.test.yml"], cwd=rules,
                          capture_output=True, text=True)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert "SUCCESS" in unit.stdout
