"""`doctor`'s start-up section says whether the proxies started from this shell are forked warm: off, no
runtime directory of the user's, a folder others could reach (a warning, with the fix), none running yet,
the warm server's process, or a warm server that makes each launch wait (stopped or hung: a warning, with
the command that ends it). In process: the warm server is a socket and a lock of this test's own."""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

from mcp_sampling_proxy.doctor.startup import check_startup
from mcp_sampling_proxy.system import warm_start

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm start is Linux's")


def said(environ: dict[str, str]) -> tuple[str, str, str]:
    (check,) = check_startup(environ).checks
    return check.status, check.text, check.fix


def test_each_state_of_the_warm_start_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "run" / "mcp-sampling-proxy"
    environ = {warm_start.RUNTIME_ENV: str(base)}
    status, text, _ = said({**environ, warm_start.ENV: "off"})
    assert status == "info" and "warm start: off (MCP_SAMPLING_PROXY_WARM_START=off)" in text

    status, text, _ = said(environ)  # nothing made yet: the next proxy makes it
    assert status == "info" and "none runs for this shell's interpreter yet" in text

    place = base / "warm"
    place.mkdir(parents=True, mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        monkeypatch.chdir(place)  # (a short address: the test's folder may lie deeper than a socket path's limit)
        server.bind(f"{warm_start.identity(environ)}.sock")
        server.listen(1)
        threading.Thread(target=say_ready, args=(server,), daemon=True).start()
        status, text, _ = said(environ)
        assert status == "ok" and f"(process {os.getpid()})" in text, text
        assert f"`kill {os.getpid()}` ends it, and leaves the proxies it forked running" in text, text

        place.chmod(0o755)
        status, text, fix = said(environ)
        assert status == "warn" and "not yours alone" in text and fix.startswith(f"chmod 700 {place}"), text


def say_ready(server: socket.socket) -> None:
    """A warm server's first word to each connection."""
    connection, _ = server.accept()
    with connection:
        connection.sendall(b"ready\n")


def test_a_warm_server_that_makes_each_launch_wait_is_a_warning_with_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped (SIGSTOP, a debugger) or hung, a warm server costs every launch a wait before it starts cold:
    one that listens and says nothing (READY_SECONDS each), one that holds its lock and never listens
    (WAIT_SECONDS each). A plain kill does not end a stopped process: the fix says -KILL, and names it."""
    monkeypatch.setattr(warm_start, "READY_SECONDS", 0.2)
    monkeypatch.setattr(warm_start, "WAIT_SECONDS", 0.2)
    environ = {warm_start.RUNTIME_ENV: str(tmp_path / "run" / "mcp-sampling-proxy")}
    place = tmp_path / "run" / "mcp-sampling-proxy" / "warm"
    place.mkdir(parents=True, mode=0o700)
    monkeypatch.chdir(place)  # (a short address: the test's folder may lie deeper than a socket path's limit)
    key = warm_start.identity(environ)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(f"{key}.sock")
        server.listen(1)  # the kernel takes the connection; nobody says "ready"
        status, text, fix = said(environ)
    assert status == "warn" and f"(process {os.getpid()}) does not answer" in text, text
    assert fix.startswith(f"`kill -KILL {os.getpid()}` ends it"), fix

    os.unlink(f"{key}.sock")
    with open(f"{key}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # alive, and never listens (no process shows a warm server's command line)
        status, text, fix = said(environ)
    assert status == "warn" and "(its process) has not started listening" in text, text
    assert fix.startswith(f"`pkill -KILL -x {warm_start.WARM_COMM}` ends it"), fix

    status, text, _ = said(environ)  # the lock let go: none runs
    assert status == "info" and "none runs for this shell's interpreter yet" in text, text
