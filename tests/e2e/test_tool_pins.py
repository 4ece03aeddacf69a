"""Tool pinning through the real proxy: a server that changes a tool after the host has seen it (a rug
pull) has that tool held until a human accepts it with `mcp-sampling-proxy tools accept`. Here what needs
the proxy as a process: a forged pins file (its stderr), what `doctor` and `tools list` read of the files
it leaves (they run in process), a 2026 host on the real wire. What is held, what the host and the audit
are told, and `tools list/diff/accept`, played in memory: tests/unit/services/test_tool_pins_played.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.support import PY, CommandRun, RawHost, proxy_command, proxy_env, run_subcommand, write_policy

ROOT = Path(__file__).resolve().parents[2]
RUGPULL = str(ROOT / "tests" / "fixtures" / "rugpull_server.py")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return proxy_env(
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"), MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state")
    )


def rugpull_proxy(tmp_path: Path, policy: str = "", *server_args: str) -> list[str]:
    path = write_policy(tmp_path, f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n{policy}")
    return proxy_command(path, "--name", "rug", upstream=[PY, RUGPULL, *server_args])


def in_process(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *argv: str) -> CommandRun:
    """A subcommand run in this process (no process of its own: the proxy's files are what it reads), with
    the proxy's state and runtime dirs."""
    for name in ("MCP_SAMPLING_PROXY_RUNTIME_DIR", "MCP_SAMPLING_PROXY_STATE_DIR"):
        monkeypatch.setenv(name, env[name])
    return run_subcommand(list(argv))


def listed(host: RawHost) -> dict[str, str]:
    """The tools the host sees: name -> description."""
    response = host.request("tools/list", {})
    return {tool["name"]: tool["description"] for tool in response["result"]["tools"]}


def call(host: RawHost, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return host.request("tools/call", {"name": tool, "arguments": arguments or {}})


def test_a_forged_pins_file_holds_every_tool(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with RawHost(rugpull_proxy(tmp_path), env, tmp_path / "e1.log") as host:
        host.initialize()
        assert len(listed(host)) == 3
    pins = tmp_path / "state" / "tools.json"
    data = json.loads(pins.read_text())
    for server in data["sealed"]["servers"].values():  # the server re-pins its own tool, by hand
        server["tools"]["fetch"]["digest"] = "0" * 64
    pins.write_text(json.dumps(data))

    with RawHost(rugpull_proxy(tmp_path), env, tmp_path / "e2.log") as host:
        host.initialize()
        assert listed(host) == {}
        refused = call(host, "echo")
        assert "cannot be trusted" in refused["error"]["message"]
    assert "tool pins cannot be trusted" in (tmp_path / "e2.log").read_text()
    shown = in_process(monkeypatch, env, "tools", "list")
    assert shown.returncode == 1
    assert "the pins cannot be trusted" in shown.stderr
    assert "seal does not match" in shown.stderr

    pins.write_text("")  # emptied: not first sight either
    with RawHost(rugpull_proxy(tmp_path), env, tmp_path / "e3.log") as host:
        host.initialize()
        assert listed(host) == {}


def test_doctor_names_the_servers_with_held_tools(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with RawHost(rugpull_proxy(tmp_path, "", "--after", "1"), env, tmp_path / "e.log") as host:
        host.initialize()
        listed(host)
        listed(host)
    doctor = in_process(monkeypatch, env, "doctor")
    assert "tools held for server 'rug' (changed or new since pinned): fetch" in doctor.stdout
    assert "mcp-sampling-proxy tools diff rug" in doctor.stdout


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "1"},
}


def test_a_2026_host_gets_the_same_hold(tmp_path: Path, env: dict[str, str]) -> None:
    """A 2026-07-28 host lists tools with plain requests (no handshake); the proxy bridges to the
    handshake-era server and holds the changed tool all the same."""
    with RawHost(rugpull_proxy(tmp_path, "", "--after", "1"), env, tmp_path / "stderr.log") as host:

        def names() -> set[str]:
            response = host.request("tools/list", {"_meta": MODERN_META})
            assert response["result"]["resultType"] == "complete"
            return {tool["name"] for tool in response["result"]["tools"]}

        assert names() == {"echo", "fetch", "delete_file"}
        assert names() == {"echo", "delete_file"}
        refused = host.request("tools/call", {"name": "fetch", "arguments": {"url": "x"}, "_meta": MODERN_META})
        assert "mcp-sampling-proxy tools accept rug fetch" in refused["error"]["message"]
