"""The REST API contract (docs/fleet-api.md) as data: every file in
scenarios/*.yaml runs against a server on SQLite and one on PostgreSQL.

A scenario file:

    users:                      # created by the admin in the scenario's own tenant
      alice: {team: ml}         # role: user (default) | team_admin | platform_admin
      eve: {tenant: other}      # another tenant (per scenario)
    steps:
      - as: alice               # user alias, `admin`, `agent`, or `nobody` (no token)
        method: POST
        path: /v1/jobs
        body: {name: x, command: ["true"]}   # JSON; or raw_body: "text"; or huge_body: BYTES;
                                             # or raw_bytes: "\xff" (latin-1, for bad UTF-8)
        headers: {Idempotency-Key: k1}       # a null value drops a default header
        auth: "Basic abc"       # raw Authorization header instead of the alias's token
        repeat: 3               # ${i} is the repetition index
        save: {job: id, where: "header:location"}   # variables from the response
        collect: {ids: id}      # append to a list variable
        expect:
          status: 201           # or a list of acceptable codes
          content_type: application/json
          headers: {location: "/v1/jobs/${job}"}
          json:                 # dotted paths (list indices are numbers)
            state: PENDING      # a plain value means equals
            errors.0.field: {contains: gpus}
            id: {exists: true}
      - mark: before            # remembers every job id in the store (via the API, as admin)
      - store: {unchanged_since: before}          # no job created or removed since the mark
      - store: {new_jobs_since: before, count: 2}
      - store: {job: "${job}", json: {state: PENDING}}  # the job as the admin sees it

Matchers: equals, not_equals, exists, contains (substring, list element, or
dict subset), length, one_of, gte. `${name}` substitutes saved variables
(`${ids.0}` indexes a list); a string that is only `${name}` keeps the value's
type. Unplaceable work is the point: the server's only node is a drained
8xH200 node, so submitted jobs stay PENDING.
"""

import itertools
import json
import re
import urllib.parse
from pathlib import Path

import pytest
import yaml

import harness
from conftest import BACKENDS, require_fleet

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))
_uid = itertools.count(1)
_VAR = re.compile(r"\$\{([A-Za-z0-9_.]+)\}")
_MISSING = object()


@pytest.fixture(scope="module", params=BACKENDS)
def scenario_server(request, tmp_path_factory):
    """One server per backend for all scenario files (each gets its own tenant)."""
    require_fleet()
    work = tmp_path_factory.mktemp(f"fleet-{request.param}")
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_cluster").new_database()
    else:
        url = f"sqlite:{work}/f.db"
    server = harness.Server(url, work)
    try:
        server.start()
        agent_token = server.agent_token_file.read_text().strip()
        gpus = [{"index": i, "model": "H200", "memory_mb": 143771, "uuid": f"fake-h200-gpu{i}"}
                for i in range(8)]
        r = server.call("POST", "/v1/agent/register",
                        {"name": "fake-h200", "pool": "default", "labels": {}, "cpus": 64,
                         "memory_mb": 524288, "instance": "scenario", "gpus": gpus},
                        token=agent_token)
        assert r.status == 200, r
        server.admin("POST", "/v1/nodes/fake-h200:drain")
        server.agent_token = agent_token
        yield server
    finally:
        server.stop()


def lookup(value, path):
    """`value` at dotted `path`, or _MISSING."""
    for part in str(path).split(".") if path != "" else []:
        if isinstance(value, list):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                return _MISSING
        elif isinstance(value, dict):
            if part not in value:
                return _MISSING
            value = value[part]
        else:
            return _MISSING
    return value


def substitute(value, variables, quote=False):
    """`${name}` replaced in strings (URL-quoted in paths when `quote`)."""
    if isinstance(value, str):
        whole = _VAR.fullmatch(value)
        if whole and not quote:
            found = lookup(variables, whole.group(1))
            assert found is not _MISSING, f"unknown variable {value}"
            return found

        def one(m):
            found = lookup(variables, m.group(1))
            assert found is not _MISSING, f"unknown variable {m.group(0)}"
            return urllib.parse.quote(str(found), safe="") if quote else str(found)

        return _VAR.sub(one, value)
    if isinstance(value, list):
        return [substitute(v, variables) for v in value]
    if isinstance(value, dict):
        return {substitute(k, variables): substitute(v, variables) for k, v in value.items()}
    return value


def check(actual, matcher, where):
    if not isinstance(matcher, dict) or not (
            set(matcher) <= {"equals", "not_equals", "exists", "contains", "length", "one_of",
                             "gte"}):
        matcher = {"equals": matcher}
    for kind, want in matcher.items():
        if kind == "exists":
            assert (actual is not _MISSING) == bool(want), f"{where}: exists={want}, got {actual!r}"
            continue
        assert actual is not _MISSING, f"{where}: missing (wanted {kind} {want!r})"
        if kind == "equals":
            assert actual == want, f"{where}: {actual!r} != {want!r}"
        elif kind == "not_equals":
            assert actual != want, f"{where}: {actual!r} == {want!r}"
        elif kind == "one_of":
            assert actual in want, f"{where}: {actual!r} not in {want!r}"
        elif kind == "length":
            assert len(actual) == want, f"{where}: length {len(actual)} != {want}"
        elif kind == "gte":
            assert actual >= want, f"{where}: {actual!r} < {want!r}"
        elif kind == "contains":
            if isinstance(actual, str):
                ok = str(want) in actual
            elif isinstance(actual, list):
                ok = want in actual or (isinstance(want, dict) and any(
                    isinstance(a, dict) and all(a.get(k) == v for k, v in want.items())
                    for a in actual))
            elif isinstance(actual, dict) and isinstance(want, dict):
                ok = all(actual.get(k) == v for k, v in want.items())
            else:
                ok = False
            assert ok, f"{where}: {actual!r} does not contain {want!r}"


def response_value(response, path):
    if str(path).startswith("header:"):
        return response.headers.get(path[len("header:"):].lower(), _MISSING)
    return lookup(response.json(), path)


class Runner:
    def __init__(self, server, doc, uid):
        self.server = server
        self.doc = doc
        self.vars = {"uid": uid}
        self.tokens = {"admin": server.admin_token, "agent": server.agent_token, "nobody": None}
        for alias, spec in (doc.get("users") or {}).items():
            spec = spec or {}
            tenant = f"s{uid}-{spec.get('tenant', 'main')}"
            self.tokens[alias] = server.create_user(alias, tenant=tenant,
                                                    team=spec.get("team", "team"),
                                                    role=spec.get("role", "user"))

    def run(self):
        for n, step in enumerate(self.doc["steps"]):
            label = step.get("name", f"step {n}")
            try:
                self.step(step)
            except AssertionError as e:
                raise AssertionError(f"{label}: {e}\nstep: {json.dumps(step)[:600]}") from None

    def step(self, step):
        if "mark" in step:
            self.vars["mark:" + step["mark"]] = set(self.server.all_job_ids())
            return
        if "store" in step:
            return self.store_check(substitute(step["store"], self.vars))
        for i in range(step.get("repeat", 1)):
            self.vars["i"] = i
            self.request(step)

    def store_check(self, spec):
        if "unchanged_since" in spec:
            before = self.vars["mark:" + spec["unchanged_since"]]
            now = set(self.server.all_job_ids())
            assert now == before, f"jobs changed: added {sorted(now - before)}, " \
                                  f"removed {sorted(before - now)}"
        if "new_jobs_since" in spec:
            before = self.vars["mark:" + spec["new_jobs_since"]]
            now = set(self.server.all_job_ids())
            assert before <= now, f"jobs removed: {sorted(before - now)}"
            assert len(now - before) == spec["count"], f"new jobs: {sorted(now - before)}"
        if "job" in spec:
            job = self.server.job(spec["job"])
            for path, matcher in spec.get("json", {}).items():
                check(lookup(job, path), matcher, f"store job {spec['job']} {path}")

    def request(self, step):
        alias = step.get("as", "admin")
        assert alias in self.tokens, f"unknown user alias {alias}"
        headers = dict(substitute(step.get("headers") or {}, self.vars))
        if "auth" in step:
            headers["Authorization"] = step["auth"]
        raw = None
        body = None
        if "body" in step:
            body = substitute(step["body"], self.vars)
        elif "raw_body" in step:
            raw = substitute(step["raw_body"], self.vars)
        elif "raw_bytes" in step:  # each character one byte (latin-1): invalid UTF-8
            raw = step["raw_bytes"].encode("latin-1")
        elif "huge_body" in step:
            size = int(step["huge_body"])
            raw = '{"name": "huge", "command": ["true"], "labels": {"pad": "' + \
                  "x" * size + '"}}'
        path = substitute(step["path"], self.vars, quote=True)
        r = harness.request(self.server.port, step.get("method", "GET"), path, body=body,
                            raw=raw, token=self.tokens[alias], headers=headers)
        expect = step.get("expect") or {}
        status = substitute(expect.get("status"), self.vars)
        if status is not None:
            ok = r.status in status if isinstance(status, list) else r.status == status
            assert ok, f"status {r.status}, expected {status}: {r.body[:800]!r}"
        # Saved values may appear in the same step's expectations.
        for var, path_ in (step.get("save") or {}).items():
            value = response_value(r, path_)
            assert value is not _MISSING, f"cannot save {var}: no {path_} in {r!r}"
            self.vars[var] = value
        for var, path_ in (step.get("collect") or {}).items():
            value = response_value(r, path_)
            assert value is not _MISSING, f"cannot collect {var}: no {path_} in {r!r}"
            self.vars.setdefault(var, []).append(value)
        expect = substitute(expect, self.vars)
        if "content_type" in expect:
            assert r.content_type == expect["content_type"], \
                f"content type {r.content_type!r}, expected {expect['content_type']!r}"
        for name, matcher in (expect.get("headers") or {}).items():
            check(r.headers.get(name.lower(), _MISSING), matcher, f"header {name}")
        for path_, matcher in (expect.get("json") or {}).items():
            check(lookup(r.json(), path_), matcher, f"json {path_}")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_api_scenario(scenario_server, scenario):
    doc = yaml.safe_load(scenario.read_text())
    Runner(scenario_server, doc, next(_uid)).run()


def test_every_scenario_parses():
    """Keeps a broken file from silently collecting nothing."""
    assert SCENARIOS, "no scenario files"
    for path in SCENARIOS:
        doc = yaml.safe_load(path.read_text())
        assert isinstance(doc.get("steps"), list) and doc["steps"], path.name

