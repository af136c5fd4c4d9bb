"""The CLI's admin and job commands against a real server: revoking a user
cuts their token off at once, cancelling a finished job says so and exits 1,
drain/undrain show the node's new state, and job names default to the script
rather than the interpreter."""

import json

import harness


ferry = harness.cli  # the CLI against `server`, as its admin unless token= says


def test_revoked_user_gets_401_at_once(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    ana = server.create_user("ana", tenant="acme", team="ml")
    server.create_user("bob", tenant="acme", team="ml")
    # ana's token works, and the server has it in its token cache now.
    who = ferry(server, "whoami", token=ana)
    assert who.returncode == 0, who.stderr
    assert who.stdout.strip() == "ana (user) in acme/ml"

    listed = ferry(server, "admin", "user", "list", "--tenant", "acme")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "TENANT", "TEAM", "NAME", "ROLE", "TOKENS", "AGE"]
    assert [line.split()[1:6] for line in lines[1:]] == [["acme", "ml", "ana", "user", "1"],
                                                          ["acme", "ml", "bob", "user", "1"]]
    everyone = json.loads(ferry(server, "admin", "user", "list", "--json").stdout)
    assert {u["name"] for u in everyone["users"]} == {"admin", "agent", "ana", "bob"}

    revoked = ferry(server, "admin", "user", "revoke", "ana", "--tenant", "acme")
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.strip() == ("revoked 1 token of ana in acme/ml; "
                                      "they are refused from now on")
    # At once, not after the token cache's 5 seconds.
    assert server.call("GET", "/v1/whoami", token=ana).status == 401
    refused = ferry(server, "whoami", token=ana)
    assert refused.returncode == 1
    assert "401" in refused.stderr, refused.stderr
    assert server.call("GET", "/v1/jobs", token=ana).status == 401

    again = json.loads(ferry(server, "admin", "user", "revoke", "ana", "--tenant", "acme",
                             "--json").stdout)
    assert again["revoked_tokens"] == 0
    assert again["user"]["active_tokens"] == 0

    missing = ferry(server, "admin", "user", "revoke", "zed", "--tenant", "acme")
    assert missing.returncode == 1
    assert "no user 'zed' in tenant 'acme'" in missing.stderr, missing.stderr
    self_revoke = ferry(server, "admin", "user", "revoke", "admin")
    assert self_revoke.returncode == 1
    assert "your own tokens" in self_revoke.stderr, self_revoke.stderr
    assert ferry(server, "whoami").returncode == 0
    # Only platform admins see or revoke users.
    bob = server.create_user("bob2", tenant="acme", team="ml", role="team_admin")
    denied = ferry(server, "admin", "user", "list", token=bob)
    assert denied.returncode == 1
    assert "403" in denied.stderr, denied.stderr
    unknown_tenant = ferry(server, "admin", "user", "list", "--tenant", "nosuch")
    assert unknown_tenant.returncode == 1
    assert "no tenant 'nosuch'" in unknown_tenant.stderr


def test_cancelling_a_finished_job_exits_1(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    fleet.agent(server, "gpu-a", gpus="1xH200")
    done = json.loads(ferry(server, "submit", "--json", "--", "true").stdout)
    server.wait_state(done["id"], "SUCCEEDED")
    refused = ferry(server, "cancel", str(done["id"]))
    assert refused.returncode == 1
    assert refused.stderr.strip() == (f"ferry: job {done['id']} has already finished "
                                      "(SUCCEEDED); nothing to cancel")
    assert refused.stdout == ""
    assert server.job(done["id"])["state"] == "SUCCEEDED"

    # A job that cannot start (more GPUs than are free) is cancelled: exit 0.
    waiting = json.loads(ferry(server, "submit", "--json", "--gpus", "1", "--tasks", "1",
                               "--", "sleep", "600").stdout)
    server.wait_state(waiting["id"], "RUNNING")
    pending = json.loads(ferry(server, "submit", "--json", "--gpus", "1", "--", "true").stdout)
    cancelled = ferry(server, "cancel", str(pending["id"]))
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"job {pending['id']}: CANCELLED (CANCELLED_BY_USER)"
    running = ferry(server, "cancel", str(waiting["id"]))
    assert running.returncode == 0, running.stderr
    server.wait_state(waiting["id"], "CANCELLED")
    twice = ferry(server, "cancel", str(pending["id"]), "--json")
    assert twice.returncode == 1
    assert json.loads(twice.stdout)["state"] == "CANCELLED"
    assert "has already finished (CANCELLED); nothing to cancel" in twice.stderr
    # The API itself stays idempotent.
    assert server.call("POST", f"/v1/jobs/{pending['id']}:cancel", body={}).status == 200
    assert ferry(server, "cancel", "999999").returncode == 1


def test_drain_and_undrain_print_the_new_state(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    fleet.agent(server, "gpu-a", gpus="2xH200")
    drained = ferry(server, "drain", "gpu-a")
    assert drained.returncode == 0, drained.stderr
    assert drained.stdout.strip() == ("node gpu-a: READY,DRAIN "
                                      "(no new work is placed on it; running jobs go on)")
    assert server.admin("GET", "/v1/nodes/gpu-a")["drain"] is True
    nodes = ferry(server, "nodes")
    assert "READY,DRAIN" in nodes.stdout
    undrained = ferry(server, "undrain", "gpu-a", "--json")
    assert undrained.returncode == 0, undrained.stderr
    assert json.loads(undrained.stdout)["drain"] is False
    assert ferry(server, "undrain", "gpu-a").stdout.strip() == "node gpu-a: READY (takes new work)"

    missing = ferry(server, "drain", "gpu-z")
    assert missing.returncode == 1
    assert "no node gpu-z" in missing.stderr, missing.stderr
    user = server.create_user("ana")
    denied = ferry(server, "drain", "gpu-a", token=user)
    assert denied.returncode == 1
    assert "403" in denied.stderr
    assert server.admin("GET", "/v1/nodes/gpu-a")["drain"] is False


def test_job_names_default_to_the_script(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    named = {}
    for key, args in [("train", ["--", "python", "train.py", "--epochs", "3"]),
                      ("module", ["--", "python3", "-m", "pkg.evaluate"]),
                      ("torchrun", ["--", "torchrun", "--nproc_per_node", "8", "ddp.py"]),
                      ("dataflow", ["--dataflow", "examples/sensor/dataflow.yml"]),
                      ("explicit", ["--name", "mine", "--", "python", "train.py"])]:
        done = ferry(server, "submit", "--json", *args)
        assert done.returncode == 0, done.stderr
        named[key] = json.loads(done.stdout)["name"]
    assert named == {"train": "train", "module": "evaluate", "torchrun": "ddp",
                     "dataflow": "sensor", "explicit": "mine"}


def test_a_revoked_user_gets_a_new_token(fleet):
    server = fleet.server("sqlite", extra_args=["--rate", "0"])
    old = server.create_user("ana", tenant="acme", team="ml")
    assert ferry(server, "admin", "user", "revoke", "ana", "--tenant", "acme").returncode == 0
    issued = ferry(server, "admin", "user", "token", "ana", "--tenant", "acme")
    assert issued.returncode == 0, issued.stderr
    new = issued.stdout.strip()
    assert new.startswith("fy_") and new != old
    assert "shown once" in issued.stderr
    assert ferry(server, "whoami", token=new).stdout.strip() == "ana (user) in acme/ml"
    assert server.call("GET", "/v1/whoami", token=old).status == 401  # the old one stays revoked
    users = json.loads(ferry(server, "admin", "user", "list", "--tenant", "acme", "--json").stdout)
    assert [u["active_tokens"] for u in users["users"] if u["name"] == "ana"] == [1]
    # Rotation: a second token, both valid until the old one is revoked.
    second = ferry(server, "admin", "user", "token", "ana", "--tenant", "acme").stdout.strip()
    assert ferry(server, "whoami", token=second).returncode == 0
    assert ferry(server, "whoami", token=new).returncode == 0
    missing = ferry(server, "admin", "user", "token", "zed", "--tenant", "acme")
    assert missing.returncode == 1 and "no user 'zed'" in missing.stderr, missing.stderr
    # Only platform admins may issue tokens.
    denied = ferry(server, "admin", "user", "token", "ana", "--tenant", "acme", token=new)
    assert denied.returncode == 1 and "403" in denied.stderr, denied.stderr
