"""A `prompt` tools rule asks at the proxy's terminal, as a person sees it there (under a pty, through
`try`): the tool and its arguments, cleaned of escape sequences; y lets the call reach the server."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers.support import PY, ROOT, RawHost, proxy_command, proxy_env, write_policy
from helpers.terminal import PtySession, terminal_env, try_argv

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs a Linux pty")

RUGPULL = str(ROOT / "tests" / "fixtures" / "rugpull_server.py")
POLICY = "tools:\n  rules:\n    - {name: ask-before-delete, tool: delete_file, action: prompt}\n"


@pytest.mark.parametrize(("answer", "approved"), [("y", True), ("n", False)])
def test_a_tool_call_is_asked_at_the_terminal(tmp_path: Path, answer: str, approved: bool) -> None:
    policy = write_policy(tmp_path, POLICY)
    path = "/home/me/notes\x1b[2J.txt"
    session = PtySession(
        try_argv("--policy", policy, "--tool", "delete_file", "--args", json.dumps({"path": path}), "--", PY, RUGPULL),
        terminal_env(MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state")),
    )
    screen = session.read_until(b"Allow this request?")
    assert b"approval needed for server 'rugpull_server' (rule 'ask-before-delete')" in screen
    assert b"The host wants to call tool 'delete_file'" in screen
    assert b'"path": "/home/me/notes' in screen
    assert b"\x1b[2J" not in screen
    session.type(answer + "\n")
    session.finish()
    if approved:
        result = json.loads(session.output.split(b"result:")[1])
        assert result == {"called": "delete_file", "arguments": {"path": path}}
    else:
        assert b"not approved: rejected at the terminal" in session.output


def test_the_console_command_says_it_asks_about_a_tool_call(tmp_path: Path, dirs: dict[str, str]) -> None:
    """A proxy without a terminal (as Claude Desktop starts it); `mcp-sampling-proxy console` elsewhere."""
    policy = write_policy(tmp_path, "approval: {channels: [console]}\n" + POLICY)
    console = PtySession([PY, "-m", "mcp_sampling_proxy", "console"], terminal_env(**dirs))
    command = proxy_command(policy, "--name", "files", upstream=[PY, RUGPULL])
    with RawHost(command, proxy_env(**dirs), tmp_path / "stderr.log") as host:
        host.initialize()
        console.read_until(b"attached")
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "delete_file", "arguments": {"path": "/tmp/x"}},
            }
        )
        screen = console.read_until(b"Allow this request? [y]es once")
        console.type("y\n")
        response = host.wait_for(lambda m: m.get("id") == 5)
    os.kill(console.pid, 2)
    console.finish()
    assert b"tool call from server 'files'" in screen and b"(rule 'ask-before-delete')" in screen
    assert b'"path": "/tmp/x"' in screen
    assert json.loads(response["result"]["content"][0]["text"])["called"] == "delete_file"
