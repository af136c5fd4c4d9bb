"""The CLI's connection flags before the command (`ferry --token-file F
jobs`, as docs/fleet-server.md writes it), and their precedence."""

import os
import subprocess

import harness


def run(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    return subprocess.run([harness.FERRY, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=30)


def test_connection_flags_before_the_command(fleet):
    server = fleet.server("sqlite")
    token_file = server.data_dir / "admin.token"
    result = run("--server", server.url, "--token-file", token_file, "whoami")
    assert result.returncode == 0, result.stderr
    assert "admin" in result.stdout
    # A bad token in front, the right one after the command: the command's flags win.
    result = run("--server", server.url, "--token", "fy_wrong", "whoami", "--token",
                 server.admin_token)
    assert result.returncode == 0, result.stderr
    # Only the bad one: refused by the server, not silently replaced.
    result = run("--server", server.url, "--token", "fy_wrong", "whoami")
    assert result.returncode == 1
    assert "401" in result.stderr, result.stderr
    # No token anywhere: a usage error that names the ways to give one.
    result = run("--server", server.url, "jobs")
    assert result.returncode == 2
    assert "--token-file" in result.stderr
