"""`wrap` as a host then uses it: a wrapped entry of Claude Desktop and of Continue starts the real server
behind the proxy, and `wrap --help` reads whole."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers.support import EXAMPLES, PY, proxy_env, sdk_host, write_policy
from helpers.wrapping import servers_of

from mcp_sampling_proxy.commands.cli import main as cli_main


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Backups go to the state dir: the test's own."""
    monkeypatch.setenv("MCP_SAMPLING_PROXY_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def policy(tmp_path: Path) -> str:
    return write_policy(tmp_path, "rules:\n  - name: all\n    action: allow\n")


@pytest.mark.anyio
async def test_a_wrapped_claude_desktop_entry_starts_the_server(tmp_path: Path, policy: str) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "summarizer": {"command": PY, "args": [str(EXAMPLES / "summarizer.py")], "env": {"EXAMPLE": "1"}}
                }
            },
            indent=2,
        )
    )
    assert cli_main(["wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy]) == 0
    entry = json.loads(path.read_text())["mcpServers"]["summarizer"]
    assert entry["command"].endswith("mcp-sampling-proxy") and os.path.isabs(entry["command"])
    env = {**proxy_env(), **entry["env"]}
    async with sdk_host([entry["command"], *entry["args"]], env, tmp_path / "stderr.log") as client:
        tools = await client.list_tools()
    assert "summarize" in {tool.name for tool in tools.tools}


@pytest.mark.anyio
async def test_a_wrapped_continue_entry_starts_the_server(tmp_path: Path, policy: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "name: test\nversion: 0.0.1\nschema: v1\nmcpServers:\n  - name: summarizer  # example\n"
        f"    command: {json.dumps(PY)}\n    args:\n      - {json.dumps(str(EXAMPLES / 'summarizer.py'))}\n"
        "    env:\n      EXAMPLE: '1'\n"
    )
    assert cli_main(["wrap", "--host", "continue", "--config", str(path), "--all", "--policy", policy]) == 0
    entry = servers_of("continue", path)["summarizer"]
    assert entry["command"].endswith("mcp-sampling-proxy") and os.path.isabs(entry["command"])
    env = {**proxy_env(), **entry["env"]}
    async with sdk_host([entry["command"], *entry["args"]], env, tmp_path / "stderr.log") as client:
        tools = await client.list_tools()
    assert "summarize" in {tool.name for tool in tools.tools}


def test_wrap_help_ends_in_whole_sentences() -> None:

    done = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "wrap", "--help"], capture_output=True, text=True, timeout=30
    )
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.endswith("."), last  # it used to stop mid-sentence, at "entries are found by their name:"
