"""Fixtures for the fleet tests: servers on SQLite or PostgreSQL, agents, and
the cleanup that reaps every process they started."""

import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import harness  # noqa: E402

BACKENDS = ["sqlite", "postgresql"]


def require_fleet():
    reason = harness.fleet_missing()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_cluster():
    """One PostgreSQL cluster for the session; each store gets its own database."""
    require_fleet()
    if harness.pg_bin() is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl, createdb) not found; "
                    "install postgresql-15 or set PG_BIN to run the PostgreSQL variants")
    cluster = harness.PgCluster()
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


class Fleet:
    """Starts servers and agents for one test and stops them all afterwards."""

    def __init__(self, request, work_dir):
        self._request = request
        self.work_dir = work_dir
        self.servers = []
        self.agents = []
        self.task_pid_files = []
        self._count = 0

    def store_url(self, backend):
        if backend == "sqlite":
            self._count += 1
            return f"sqlite:{self.work_dir}/f{self._count}.db"
        assert backend == "postgresql", backend
        return self._request.getfixturevalue("pg_cluster").new_database()

    def server(self, backend="sqlite", extra_args=(), store_url=None):
        self._count += 1
        server = harness.Server(store_url or self.store_url(backend), self.work_dir, extra_args,
                                name=f"server{self._count}")
        self.servers.append(server)
        return server.start()

    def agent(self, server, name, gpus="4xH200", extra_args=(), ready=True):
        agent = harness.Agent(server, name, gpus, self.work_dir, extra_args)
        self.agents.append(agent)
        agent.start()
        return agent.wait_ready() if ready else agent

    def close(self):
        for agent in self.agents:
            agent.stop()
        for server in self.servers:
            server.stop()
        # Tasks orphaned by a killed agent wrote their pid; end their groups.
        for path in self.task_pid_files:
            try:
                pids = [int(p) for p in open(path).read().split()]
            except (OSError, ValueError):
                continue
            for pid in pids:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


@pytest.fixture
def fleet(request, tmp_path):
    require_fleet()
    f = Fleet(request, tmp_path)
    yield f
    f.close()
