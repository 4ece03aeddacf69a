"""A `prompt` tools rule asks at the proxy's terminal, as a person sees it there (under a pty, through
`try`): the tool and its arguments, cleaned of escape sequences; y lets the call reach the server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers.support import PY, ROOT, write_policy
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
