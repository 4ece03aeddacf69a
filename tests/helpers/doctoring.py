"""What the doctor tests share, in process and as a command: a home and state of the test's own (the
fixture `environment`, which their modules use for every test), the command run in process, a port
nothing listens on, and a loopback LLM. Its fixtures are the suite's (tests/conftest.py: pytest_plugins)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer

from mcp_sampling_proxy.commands.cli import main as cli_main


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No real keys, no terminal, and home/state/runtime dirs of the test's own."""
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "ANTHROPIC_", "MCP_SAMPLING_PROXY_", "TEST_LLM_")):
            monkeypatch.delenv(name)
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MCP_SAMPLING_PROXY_NO_TERMINAL", "1")
    monkeypatch.setenv("MCP_SAMPLING_PROXY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MCP_SAMPLING_PROXY_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.chdir(tmp_path)
    return home


def doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli_main(["doctor", *argv])
    out, err = capsys.readouterr()
    assert not err
    return code, out


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def openai_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server
