"""The dashboard (docs/fleet-dashboard.md) in a real browser: the system's
Chromium driven by Playwright against a real `ferry server` with two agents.
It signs in with tokens, follows a job submitted from the CLI to RUNNING and
SUCCEEDED, reads a pending reason, cancels jobs from the page, drains a node,
checks that another tenant's user sees none of it, and that hostile names
and log lines stay text. Every page is screenshotted into
$FERRY_DASHBOARD_SCREENSHOTS (default: a pytest temporary directory)."""

import json
import os
import re
import urllib.parse
from pathlib import Path

import pytest

import harness

CHROMIUM = "/usr/bin/chromium"
CHART_JS = "/usr/share/javascript/chart.js/chart.min.js"

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK),
    reason=f"{CHROMIUM} is missing (Debian package chromium); the dashboard tests need a browser")

from playwright.sync_api import Error as PlaywrightError  # noqa: E402
from playwright.sync_api import expect, sync_playwright  # noqa: E402

ferry = harness.cli
TIMEOUT_MS = 30_000
expect.set_options(timeout=TIMEOUT_MS)
HOSTILE_NAMES = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    "训练-模型-🚀-ünïcødé-" + "é" * 20,
    "L" + "o" * 126 + "!",  # 128 code points, no space to wrap at
]


class Dashboard:
    """A server with agents node-a (4 × H200) and node-b (2 × H100), users of
    two tenants, and one Chromium; pages are opened per test."""

    def __init__(self, work_dir, shots):
        self.work_dir = work_dir
        self.shots = shots
        self.server = None
        self.agents = []
        self.playwright = None
        self.browser = None
        self.pages = []

    def start(self):
        self.server = harness.Server(f"sqlite:{self.work_dir}/fleet.db", self.work_dir,
                                     ["--rate", "0"]).start()
        for name, gpus in (("node-a", "4xH200"), ("node-b", "2xH100")):
            agent = harness.Agent(self.server, name, gpus, self.work_dir)
            self.agents.append(agent)
            agent.start()
            agent.wait_ready()
        self.ana = self.server.create_user("ana", tenant="acme", team="ml")
        self.gus = self.server.create_user("gus", tenant="globex", team="ops")
        self.playwright = sync_playwright().start()
        self.browser = self.playwright.chromium.launch(executable_path=CHROMIUM,
                                                       args=["--no-sandbox"])
        return self

    def stop(self):
        if self.browser:
            self.browser.close()
        if self.playwright:
            self.playwright.stop()
        for agent in self.agents:
            agent.stop()
        if self.server:
            self.server.stop()

    def page(self, server=None):
        """A page in a fresh browser context (its own sessionStorage) that
        records console errors, page errors, dialogs and failed requests."""
        context = self.browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.problems = []
        page.dialogs = []
        page.server = server or self.server
        # API refusals (401, 404) are answers the pages handle; the browser
        # logs each as "Failed to load resource". Anything else is a problem,
        # a Content-Security-Policy refusal ("Refused to ...") above all.
        page.on("console", lambda m: m.type == "error" and not m.text.startswith(
            "Failed to load resource") and page.problems.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
        page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
        page.on("response", lambda r: r.status >= 400 and "/ui/" in r.url and page.problems.append(
            f"{r.status} for {r.url}"))
        self.pages.append(page)
        return page

    def sign_in(self, page, token, retry_navigation=False):
        # `retry_navigation`: against a server starved of workers on
        # purpose, the browser's first load may land on a kept-alive socket
        # the server is just giving up (net::ERR_SOCKET_NOT_CONNECTED, which
        # Chromium does not retry itself); a user would reload.
        for attempt in range(3 if retry_navigation else 1):
            try:
                page.goto(page.server.url + "/ui/")
                break
            except PlaywrightError as e:
                if attempt == 2 or "net::ERR_" not in str(e):
                    raise
        page.fill("#token", token)
        page.click("#sign-in")
        expect(page.locator("#who")).to_be_visible()

    def open(self, page, hash_path):
        page.goto(page.server.url + "/ui/#/" + hash_path)

    def shot(self, page, name):
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def submit(self, *args, token):
        done = ferry(self.server, "submit", "--json", *args, token=token)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["id"]

    def cancel_all(self):
        for job in self.server.all_jobs():
            if job["state"] in ("PENDING", "ADMITTED", "RUNNING"):
                self.server.admin("POST", f"/v1/jobs/{job['id']}:cancel")
        for job in self.server.all_jobs():
            self.server.wait_state(job["id"], ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"))


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    if harness.fleet_missing():
        pytest.skip(harness.fleet_missing())
    shots = Path(os.environ.get("FERRY_DASHBOARD_SCREENSHOTS")
                 or tmp_path_factory.mktemp("dashboard-screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    d = Dashboard(tmp_path_factory.mktemp("dashboard"), shots)
    try:
        d.start()
        yield d
    finally:
        d.stop()


@pytest.fixture
def browser(dash):
    """The dashboard, with a check after each test that no page hit a script
    error, a Content-Security-Policy refusal, a failed dashboard file or a
    dialog, and that no job of the test is left running."""
    first = len(dash.pages)
    yield dash
    for page in dash.pages[first:]:
        assert page.dialogs == [], f"a dialog opened: {page.dialogs}"
        assert page.problems == [], "\n".join(page.problems)
        page.context.close()
    dash.cancel_all()


def job_badge(page):
    return page.locator("#job-head .badge")


def test_sign_in_refuses_a_bad_token_and_opens_the_overview(browser):
    page = browser.page()
    page.goto(browser.server.url + "/")  # / and /ui lead to the dashboard
    assert page.url == browser.server.url + "/ui/"
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", "fy_not-a-token")
    page.click("#sign-in")
    expect(page.locator("#login-message")).to_contain_text("does not accept")
    page.fill("#token", browser.server.admin_token)
    page.click("#sign-in")
    expect(page.locator("#who")).to_contain_text("admin")
    expect(page.locator("#stat-gpus .value")).to_have_text("6")
    expect(page.locator("#stat-nodes .value")).to_have_text("2 / 2")
    expect(page.locator("#pools")).to_contain_text("2 × H100, 4 × H200")
    expect(page.locator("#models")).to_contain_text("H200")
    expect(page.locator("#heatmap .heat-row")).to_have_count(2)
    expect(page.locator("#heatmap .gpu")).to_have_count(6)
    # The token is kept for the tab only, and a reload keeps the session.
    assert page.evaluate("sessionStorage.getItem('ferry.token')") == browser.server.admin_token
    assert page.evaluate("localStorage.length") == 0
    page.reload()
    expect(page.locator("#stat-gpus .value")).to_have_text("6")
    page.click("#sign-out")
    expect(page.locator("#login")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('ferry.token')") is None


def test_a_cli_job_goes_running_then_succeeded_on_its_page(browser):
    job_id = browser.submit("--name", "hello-job", "--gpus", "1", "--", "sh", "-c",
                            "echo started; sleep 5; echo finished", token=browser.ana)
    page = browser.page()
    browser.sign_in(page, browser.ana)
    browser.open(page, "jobs")
    link = page.locator("#jobs-table a.job-link", has_text=re.compile(rf"^{job_id}$"))
    expect(link).to_be_visible()
    link.click()
    assert page.url.endswith(f"#/jobs/{job_id}")
    expect(page.locator("#job-name")).to_have_text("hello-job")
    expect(job_badge(page)).to_have_text("RUNNING")
    expect(page.locator("#job-logs")).to_contain_text("started")
    expect(page.locator("#placement-table")).to_contain_text("node-")
    browser.shot(page, "job-running")
    expect(job_badge(page)).to_have_text("SUCCEEDED")
    expect(page.locator("#job-reason")).to_have_text("EXITED_ZERO")
    expect(page.locator("#job-logs")).to_contain_text("finished")
    expect(page.locator("#job-log-note")).to_contain_text("all of its output")
    events = page.locator("#events-table")
    for reason in ("SUBMITTED", "PLACED", "TASKS_STARTED", "EXITED_ZERO"):
        expect(events).to_contain_text(reason)
    expect(page.locator("#attempts-table")).to_contain_text("SUCCEEDED")
    expect(page.locator("#cancel-job")).to_have_count(0)  # nothing to cancel once it ended
    browser.shot(page, "job")


def test_a_pending_reason_shows_and_jobs_are_cancelled_from_the_page(browser):
    blocker = browser.submit("--name", "blocker", "--gpus", "4", "--gpu-model", "H200", "--",
                             "sleep", "600", token=browser.ana)
    browser.server.wait_state(blocker, "RUNNING")
    waiter = browser.submit("--name", "waiter", "--gpus", "4", "--gpu-model", "H200", "--",
                            "true", token=browser.ana)
    browser.server.wait_job(waiter, lambda j: j["reason"] == "NO_CAPACITY", 20, "NO_CAPACITY")
    page = browser.page()
    browser.sign_in(page, browser.ana)

    browser.open(page, "queues")
    pending = page.locator("#pending-table")
    expect(pending).to_contain_text("waiter")
    expect(pending).to_contain_text("NO_CAPACITY")
    expect(pending).to_contain_text("no free capacity")
    expect(page.locator("#team-table")).to_contain_text("acme/ml")
    browser.shot(page, "queues")

    browser.open(page, f"jobs/{waiter}")
    expect(job_badge(page)).to_have_text("PENDING")
    expect(page.locator("#job-reason")).to_have_text("NO_CAPACITY")
    expect(page.locator("#job-message")).to_contain_text("no free capacity")
    browser.shot(page, "job-pending")
    page.click("#cancel-job")
    page.click("#keep-job")  # the first click only asks
    assert browser.server.job(waiter)["state"] == "PENDING"
    page.click("#cancel-job")
    page.click("#confirm-cancel")
    expect(job_badge(page)).to_have_text("CANCELLED")
    assert browser.server.job(waiter)["reason"] == "CANCELLED_BY_USER"

    browser.open(page, f"jobs/{blocker}")
    expect(job_badge(page)).to_have_text("RUNNING")
    page.click("#cancel-job")
    page.click("#confirm-cancel")
    expect(job_badge(page)).to_have_text("CANCELLED")
    browser.server.wait_state(blocker, "CANCELLED")


def test_hostile_names_and_log_lines_render_as_text(browser):
    ids = []
    for name in HOSTILE_NAMES:
        ids.append(browser.submit("--name", name, "--label", "note=<b>bold</b>", "--", "sh", "-c",
                                  "echo '<img src=x onerror=alert(3)><script>alert(4)</script>'",
                                  token=browser.ana))
    for job_id in ids:
        browser.server.wait_state(job_id, "SUCCEEDED")
    page = browser.page()
    browser.sign_in(page, browser.ana)
    browser.open(page, "jobs")
    rows = page.locator("#jobs-table")
    for name in HOSTILE_NAMES:
        expect(rows.get_by_text(name, exact=True)).to_have_count(1)
    browser.shot(page, "jobs")
    # Nothing became markup: no image, no bold, no script beyond the dashboard's own.
    assert page.locator("main img, main b").count() == 0
    assert page.locator("script").count() == 3  # boot, Chart.js, app
    # A 128-character name without spaces wraps instead of widening the page.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    browser.open(page, f"jobs/{ids[0]}")
    expect(page.locator("#job-name")).to_have_text(HOSTILE_NAMES[0])
    expect(page.locator("#job-logs")).to_contain_text(
        "<img src=x onerror=alert(3)><script>alert(4)</script>")
    expect(page.locator("#job-details")).to_contain_text("note=<b>bold</b>")
    assert page.locator("main img, main b").count() == 0
    assert page.locator("script").count() == 3  # boot, Chart.js, app
    assert page.title().startswith(f"Job {ids[0]}")
    browser.open(page, f"jobs/{ids[2]}")
    expect(page.locator("#job-name")).to_have_text(HOSTILE_NAMES[2])
    # The filter takes hostile text too, and matches it as text.
    browser.open(page, "jobs")
    page.fill("#filter-name", "<script>")
    page.press("#filter-name", "Enter")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(1)
    page.fill("#filter-name", "")
    page.fill("#filter-label", "note=<b>bold</b>")
    page.press("#filter-label", "Enter")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(len(HOSTILE_NAMES))
    # A job page for something that is not a job id says so.
    browser.open(page, "jobs/<script>")
    expect(page.locator("#job-not-found")).to_be_visible()


def test_another_tenant_sees_none_of_it(browser):
    secret = browser.submit("--name", "acme-secret", "--gpus", "2", "--gpu-model", "H200", "--",
                            "sleep", "600", token=browser.ana)
    browser.server.wait_state(secret, "RUNNING")
    page = browser.page()
    browser.sign_in(page, browser.gus)
    expect(page.locator("#who")).to_contain_text("globex/ops")

    browser.open(page, "jobs")
    expect(page.locator("#jobs-table")).to_contain_text("No job matches.")
    expect(page.locator("#job-count")).to_contain_text("0 matching jobs")
    assert "acme" not in page.locator("main").inner_text()

    browser.open(page, f"jobs/{secret}")
    expect(page.locator("#job-not-found")).to_contain_text(f"Job {secret} was not found")
    assert "acme-secret" not in page.locator("main").inner_text()
    browser.shot(page, "job-not-found")

    browser.open(page, "overview")
    expect(page.locator("#stat-used .value")).to_have_text("2")  # the GPUs are in use...
    expect(page.locator("#stat-running .value")).to_have_text("0")  # ...by no job of his
    expect(page.locator("#heatmap .gpu.busy.other")).to_have_count(2)
    assert page.locator("#heatmap a").count() == 0  # no link to a job he cannot see

    browser.open(page, "queues")
    expect(page.locator("#team-table")).to_contain_text("No job is pending or running.")
    expect(page.locator("#quotas")).to_contain_text("platform admins")
    assert "acme" not in page.locator("main").inner_text()

    browser.open(page, "nodes")
    expect(page.locator("#nodes-table")).to_contain_text("node-a")
    assert page.locator("#nodes-table button").count() == 0  # no drain for a user
    expect(page.locator("#providers")).to_contain_text("platform admins")


def test_an_admin_drains_and_undrains_a_node_from_the_page(browser):
    page = browser.page()
    browser.sign_in(page, browser.server.admin_token)
    browser.open(page, "nodes")
    drain = page.locator("#nodes-table button[data-node='node-b']")
    expect(drain).to_have_text("Drain")
    drain.click()
    expect(page.locator("#node-message")).to_have_text("Drained node-b.")
    expect(drain).to_have_text("Undrain")
    assert browser.server.admin("GET", "/v1/nodes/node-b")["drain"] is True
    browser.open(page, "overview")
    expect(page.locator("#heatmap .gpu.drained")).to_have_count(2)
    browser.open(page, "nodes")
    # Each agent's input cache, as it reported it after registering: empty,
    # the default 10 GiB quota, no hit ratio before anything was staged.
    expect(page.locator("#nodes-table thead")).to_contain_text("Cache")
    cache_a = page.locator("#nodes-table tbody tr", has_text="node-a").locator("td.cache")
    expect(cache_a).to_have_text("0 B / 10.0 GiB")
    assert browser.server.admin("GET", "/v1/nodes/node-a")["cache"]["hit_ratio"] is None
    expect(page.locator("#cycles-table tbody tr").first).not_to_contain_text("no cycle")
    expect(page.locator("#scheduler")).to_contain_text("fifo")
    browser.shot(page, "nodes")
    page.locator("#nodes-table button[data-node='node-b']").click()
    expect(page.locator("#node-message")).to_have_text("Undrained node-b.")
    assert browser.server.admin("GET", "/v1/nodes/node-b")["drain"] is False


def test_the_overview_shows_use_by_pool_and_model_and_over_time(browser):
    ids = [browser.submit("--name", "train-h200", "--gpus", "3", "--gpu-model", "H200", "--",
                          "sleep", "600", token=browser.ana),
           browser.submit("--name", "eval-h100", "--gpus", "1", "--gpu-model", "H100", "--",
                          "sleep", "600", token=browser.ana)]
    for job_id in ids:
        browser.server.wait_state(job_id, "RUNNING")
    browser.submit("--name", "waits", "--gpus", "2", "--gpu-model", "H100", "--gpu-model", "H200",
                   "--", "true", token=browser.ana)
    page = browser.page()
    browser.sign_in(page, browser.server.admin_token)
    expect(page.locator("#stat-used .value")).to_have_text("4")
    expect(page.locator("#stat-free .value")).to_have_text("2")
    expect(page.locator("#stat-pending .value")).to_have_text("1")
    expect(page.locator("#stat-running .value")).to_have_text("2")
    expect(page.locator("#job-states [data-state=RUNNING]")).to_contain_text("2")
    expect(page.locator("#heatmap a.gpu.busy")).to_have_count(4)
    # The admin's heat map links each busy GPU to its job.
    href = page.locator("#heatmap a.gpu.busy").first.get_attribute("href")
    assert href in (f"#/jobs/{ids[0]}", f"#/jobs/{ids[1]}")
    # Some samples for the chart of use over time.
    # (Polled from here: the policy forbids the eval that wait_for_function uses.)
    harness.wait_for(lambda: page.evaluate(
        "JSON.parse(sessionStorage.getItem('ferry.samples') || '[]').length") >= 4, 30,
        "4 samples of GPU use", interval=0.5)
    if os.path.exists(CHART_JS):
        expect(page.locator(".chart canvas")).to_have_count(2)
    browser.shot(page, "overview")


def test_the_pages_are_served_with_a_strict_policy(dash):
    server = dash.server
    index = harness.request(server.port, "GET", "/ui/")
    assert index.status == 200
    assert index.content_type == "text/html"
    policy = index.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy and "unsafe" not in policy
    assert index.headers["x-content-type-options"] == "nosniff"
    assert index.headers["x-frame-options"] == "DENY"
    assert index.headers["referrer-policy"] == "no-referrer"
    assert b"<script>" not in index.body  # every script is a file
    script = harness.request(server.port, "GET", "/ui/app.js")
    assert script.status == 200 and script.content_type == "text/javascript"
    assert script.headers["x-content-type-options"] == "nosniff"
    assert harness.request(server.port, "GET", "/ui/style.css").content_type == "text/css"
    for path in ("/ui", "/"):
        moved = harness.request(server.port, "GET", path)
        assert moved.status == 302 and moved.headers["location"] == "/ui/", path
    # Only the embedded files are served: no path reaches the disk.
    for path in ("/ui/nope.js", "/ui/..", "/ui/%2e%2e%2fadmin.token", "/ui/../admin.token",
                 "/ui/vendor/nope.js", "/ui/vendor/..%2f..%2fadmin.token", "/ui/a/b"):
        missing = harness.request(server.port, "GET", path)
        assert missing.status == 404, (path, missing)
        assert missing.content_type == "application/problem+json", path
        assert b"fy_" not in missing.body
    assert harness.request(server.port, "POST", "/ui/", raw="{}").status == 405
    assert harness.request(server.port, "HEAD", "/ui/app.js").status == 200
    if os.path.exists(CHART_JS):
        chart = harness.request(server.port, "GET", "/ui/vendor/chart.js")
        assert chart.status == 200 and chart.content_type == "text/javascript"
        assert chart.body == Path(CHART_JS).read_bytes()
    # The files are public; the data behind them is not.
    assert harness.request(server.port, "GET", "/v1/jobs").status == 401


def test_without_chart_js_the_pages_work_and_draw_no_charts(dash, tmp_path):
    server = harness.Server(f"sqlite:{tmp_path}/nochart.db", tmp_path,
                            ["--rate", "0", "--ui-chart-js", str(tmp_path / "missing.js")])
    server.start()
    try:
        vendor = harness.request(server.port, "GET", "/ui/vendor/chart.js")
        assert vendor.status == 404
        assert "missing.js" not in vendor.body.decode()  # the path is for the server's log
        page = dash.page(server)
        dash.sign_in(page, server.admin_token)
        expect(page.locator("#stat-gpus .value")).to_have_text("0")
        expect(page.locator(".chart.no-chart").first).to_contain_text("libjs-chart.js")
        expect(page.locator("#heatmap, #stat-nodes")).not_to_have_count(0)
        assert page.locator("canvas").count() == 0
        # The one failure is the missing Chart.js (its 404, which the browser
        # also refuses to run as a script), and nothing else broke.
        assert page.problems[0] == f"404 for {server.url}/ui/vendor/chart.js", page.problems
        assert all("vendor/chart.js" in p for p in page.problems), page.problems
        page.context.close()
    finally:
        server.stop()
    assert "no Chart.js at" in server.proc.log()


def test_the_pages_survive_a_server_with_few_workers(dash, tmp_path):
    """With 2 workers, idle kept-alive connections are given up whenever a
    connection waits (raw_headers.h), often just as the browser reuses one:
    the pages retry such GETs, and reload when a module file failed."""
    server = harness.Server(f"sqlite:{tmp_path}/busy.db", tmp_path,
                            ["--rate", "0", "--threads", "2"])
    server.start()
    try:
        pages = [dash.page(server) for _ in range(3)]
        for page in pages:
            dash.sign_in(page, server.admin_token, retry_navigation=True)
        for name in ["queues", "jobs", "nodes", "overview"] * 2:
            for page in pages:
                dash.open(page, name)
            for page in pages:
                expect(page.locator("#status")).to_contain_text("Updated")
        for page in pages:
            assert page.dialogs == [] and page.problems == [], page.problems
            page.context.close()
    finally:
        server.stop()
