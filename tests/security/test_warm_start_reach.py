"""The warm start server forks every later proxy and holds each launch's environment (its keys) until it
does: a sandboxed server forked by it must not reach its socket, and a process of the same user must not
read its memory. Run as an ordinary user (as root the test drops to `nobody`: /proc refuses root nothing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.support import MINIMAL_SERVER, RawHost, proxy_env, write_policy
from helpers.unprivileged import KEY, unprivileged_python
from helpers.warm import end_warm_servers, warm_servers

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed: no sandbox"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm start is Linux's"),
    pytest.mark.usefixtures("among_others_as_nobody"),
]

# what a sandboxed server would try: the socket by its path (the runtime directory is the user's, its name
# well known), any socket under the runtime directory, and the warm server's process
RAIDER = (
    """import json, os, socket, sys
out, sock_path, run, warm_pid = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
report = {}
connection = socket.socket(socket.AF_UNIX)
try:
    connection.connect(sock_path)
    report["connect"] = "connected: " + connection.recv(64).decode("latin-1")
except OSError as exc:
    report["connect"] = type(exc).__name__
try:
    report["run"] = [os.path.join(d, n) for d, _, names in os.walk(run) for n in names]
except OSError as exc:
    report["run"] = type(exc).__name__
report["warm_pid"] = os.path.exists(f"/proc/{warm_pid}/cmdline") and open(f"/proc/{warm_pid}/cmdline").read()
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump(report, f)
"""
    + MINIMAL_SERVER
)


def owned_by_the_user(*paths: Path) -> None:
    for path in paths:
        path.mkdir(mode=0o700)
        if os.geteuid() == 0:
            os.chown(path, 65534, 65534)


@pytest.fixture
def run_dir(open_tmp: Path) -> Iterator[Path]:
    run = open_tmp / "run"
    try:
        yield run
    finally:
        end_warm_servers(run)


def test_a_sandboxed_server_cannot_reach_the_warm_server_nor_anyone_read_it(open_tmp: Path, run_dir: Path) -> None:
    prefix, pythonpath = unprivileged_python() if os.geteuid() == 0 else ([sys.executable], {})
    home, state, out = open_tmp / "home", open_tmp / "state", open_tmp / "out"
    owned_by_the_user(home, state, run_dir)
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    raider = open_tmp / "raider.py"
    raider.write_text(RAIDER)
    raider.chmod(0o644)
    policy = write_policy(open_tmp, f"sandbox:\n  mode: required\n  write: [{out}]\nrules: []\n")
    os.chmod(policy, 0o644)
    env = proxy_env(
        HOME=str(home),
        XDG_STATE_HOME=str(state),
        XDG_RUNTIME_DIR=str(run_dir),
        MCP_SAMPLING_PROXY_WARM_START="auto",
        TEST_LLM_KEY=KEY,
        **pythonpath,
    )
    proxy = [*prefix, "-P", "-m", "mcp_sampling_proxy", "--policy", policy, "--log-format", "json", "--no-terminal"]
    python = prefix[-1]

    with RawHost([*proxy, "--", python, "-c", MINIMAL_SERVER], env, open_tmp / "first.log", cwd=open_tmp) as host:
        host.initialize()
        host.close_stdin()
        host.wait()
    deadline = time.monotonic() + 20
    while not (sockets := list((run_dir / "mcp-sampling-proxy" / "warm").glob("*.sock"))):
        assert time.monotonic() < deadline, (open_tmp / "first.log").read_text()
        time.sleep(0.05)
    (warm,) = warm_servers(run_dir)

    command = [*proxy, "--", python, str(raider), str(out), str(sockets[0]), str(run_dir), str(warm)]
    with RawHost(command, env, open_tmp / "raid.log", cwd=open_tmp) as host:
        host.initialize()
        host.close_stdin()
        host.wait()
    log = (open_tmp / "raid.log").read_text()
    assert "started warm" in log and "server sandboxed" in log, log
    report = json.loads((out / "report.json").read_text())
    assert report["connect"] in ("FileNotFoundError", "PermissionError"), report  # not there for it
    assert report["run"] in ([], "FileNotFoundError", "PermissionError"), report
    assert report["warm_pid"] is False, report  # its own process namespace

    # unconfined, the same user cannot read the warm server's memory or environment: it is non-dumpable
    peek = (
        "import sys\n"
        "for name in ('environ', 'mem', 'maps'):\n"
        "    try:\n"
        f"        open('/proc/{warm}/' + name, 'rb').read(1)\n"
        "        print(name, 'read')\n"
        "    except OSError as exc:\n"
        "        print(name, type(exc).__name__)\n"
    )
    seen = subprocess.run([*prefix, "-c", peek], capture_output=True, text=True, timeout=30, check=True).stdout
    assert "read" not in seen, seen
