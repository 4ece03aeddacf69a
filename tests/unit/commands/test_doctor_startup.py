"""`doctor`'s start-up section says whether the proxies started from this shell are forked warm: off, no
runtime directory of the user's, a folder others could reach (a warning, with the fix), none running yet, or
the warm server's process. In process: the warm server is a listening socket of this test's own."""

from __future__ import annotations

import os
import socket
import sys
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
        status, text, _ = said(environ)
        assert status == "ok" and f"(process {os.getpid()})" in text, text
        assert f"`kill {os.getpid()}` ends it, and leaves the proxies it forked running" in text, text

        place.chmod(0o755)
        status, text, fix = said(environ)
        assert status == "warn" and "not yours alone" in text and fix.startswith(f"chmod 700 {place}"), text
