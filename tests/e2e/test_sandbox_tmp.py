"""A server that lives under /tmp still starts in the default sandbox, whose /tmp is private.

A checkout or a virtual environment under /tmp is common (a CI clone, a scratch project). The
sandbox gives the server an empty /tmp, so the proxy makes the directory its command names
reachable again: the whole top entry under /tmp, since a venv's `python` is a symlink whose
`pyvenv.cfg` and `lib/` sit beside it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.support import KITCHEN_SINK, ROOT, proxy_command, proxy_env, sdk_host, tool_text

RUGPULL_SERVER = ROOT / "tests" / "fixtures" / "rugpull_server.py"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed: no sandbox to test"),
]


@pytest.fixture
def tmp_venv() -> Iterator[Path]:
    """A virtual environment directly under /tmp that sees this environment's packages (the SDK)."""
    top = Path(tempfile.mkdtemp(prefix="msp-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(top / "venv")], check=True)
        site = next((top / "venv" / "lib").glob("python3*/site-packages"))
        (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
        shutil.copy(KITCHEN_SINK, top / "server.py")
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


async def test_a_server_in_a_venv_under_tmp_starts_sandboxed(tmp_venv: Path, tmp_path: Path) -> None:
    errlog = tmp_path / "proxy.log"
    upstream = [str(tmp_venv / "venv" / "bin" / "python"), str(tmp_venv / "server.py")]
    async with sdk_host(proxy_command(None, upstream=upstream), proxy_env(), errlog) as client:
        result = await client.call_tool("echo", {"text": "from under /tmp"})
    assert "from under /tmp" in tool_text(result)
    assert "server sandboxed" in errlog.read_text()


async def test_a_relative_command_through_a_link_to_another_tmp_entry_starts_sandboxed(tmp_path: Path) -> None:
    """A checkout under /tmp whose `.venv` links a virtual environment in another /tmp entry (a clone
    sharing a venv), the server started from the checkout as `.venv/bin/python server.py`: the sandbox
    keeps in sight the /tmp entry the link leads to, as well as the checkout. (A server of the standard
    library alone, so that nothing else it imports lies where this checkout's packages lie.)"""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    venv = Path(tempfile.mkdtemp(prefix="msp-venv-", dir="/tmp"))
    checkout = Path(tempfile.mkdtemp(prefix="msp-checkout-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv / "venv")], check=True)
        (checkout / ".venv").symlink_to(venv / "venv")
        shutil.copy(RUGPULL_SERVER, checkout / "server.py")
        command = proxy_command(None, upstream=[".venv/bin/python", "server.py"])
        params = StdioServerParameters(command=command[0], args=command[1:], env=proxy_env(), cwd=str(checkout))
        errlog = tmp_path / "proxy.log"
        with open(errlog, "a", encoding="utf-8") as log_file:
            async with Client(stdio_client(params, errlog=log_file), mode="legacy") as client:
                result = await client.call_tool("echo", {"text": "through the link"})
        assert "through the link" in tool_text(result), errlog.read_text()
        assert "server sandboxed" in errlog.read_text()
    finally:
        shutil.rmtree(checkout, ignore_errors=True)
        shutil.rmtree(venv, ignore_errors=True)
