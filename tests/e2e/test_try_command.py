"""`mcp-sampling-proxy try` as a server author runs it: what it says when the command is wrong, and its
summary of the proxy's log lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fakes.llm_server import FakeLLMServer
from helpers.support import EXAMPLES, PROXY, PY, proxy_env, write_policy


def run_try(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, "try", *args], env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL
    )


def test_a_command_not_on_path_is_named_with_what_to_give_instead(tmp_path: Path) -> None:
    """It ended on "error: Connection closed" after the proxy's advice to fix a host config there is none of."""
    done = run_try("--", "no-such-server", env=proxy_env())
    assert done.returncode == 2
    assert "command 'no-such-server' not found on PATH" in done.stderr
    assert "-- .venv/bin/python server.py" in done.stderr  # what to give instead
    assert "Connection closed" not in done.stdout + done.stderr
    assert "host config" not in done.stdout + done.stderr


def test_a_proxy_that_ends_at_start_is_said_as_such(tmp_path: Path) -> None:
    """A policy the proxy refuses: its error is shown, then what happened, not the SDK's "Connection closed"."""
    policy = write_policy(tmp_path, "rules:\n  - name: all\n    acton: allow\n")
    done = run_try("--no-terminal", "--policy", policy, "--", PY, str(EXAMPLES / "echo.py"), env=proxy_env())
    assert done.returncode == 1
    assert "acton" in done.stderr  # the proxy's own error, with the key it did not know
    assert "error: the proxy or the server ended before the session was done" in done.stdout
    assert "Connection closed" not in done.stdout


def test_the_log_summary_prints_no_python_none(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("A summary.")
    policy = write_policy(tmp_path, "rules:\n  - name: all\n    action: allow\n")
    done = run_try(
        "--policy",
        policy,
        "--tool",
        "summarize",
        "--args",
        json.dumps({"text": "Some text to summarize."}),
        "--",
        PY,
        str(EXAMPLES / "summarizer.py"),
        env=proxy_env(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="sk-local"),
    )
    assert done.returncode == 0, done.stderr
    assert "proxy: request (server=summarizer, " in done.stderr  # a line that held server_reported=None
    assert [line for line in done.stderr.splitlines() if "None" in line] == []


# a server in raw JSON lines: two pages of tools, and a call that first asks the host for its roots
PAGED_ASKING_SERVER = """
import json, sys
def send(message):
    print(json.dumps(message), flush=True)
for line in sys.stdin:
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": request_id, "result": {"protocolVersion": "2025-11-25",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "paged", "version": "1"}}})
    elif method == "tools/list":
        cursor = (message.get("params") or {}).get("cursor")
        page = {"tools": [{"name": "second", "inputSchema": {"type": "object"}}]} if cursor else {
            "tools": [{"name": "first", "inputSchema": {"type": "object"}}], "nextCursor": "page-2"}
        send({"jsonrpc": "2.0", "id": request_id, "result": page})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "asking"}})
        send({"jsonrpc": "2.0", "id": "roots-1", "method": "roots/list"})
        answer = json.loads(sys.stdin.readline())
        text = "host said: " + answer["error"]["message"]
        send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})
"""


def test_try_reads_every_page_of_tools_and_refuses_what_it_cannot_answer(tmp_path: Path) -> None:
    """`try` is a host without roots, sampling or forms: a server's request for one is refused at once (the
    call goes on), its notifications are let go, and a tool list in pages is read to its end."""
    server = tmp_path / "paged.py"
    server.write_text(PAGED_ASKING_SERVER, encoding="utf-8")
    policy = write_policy(tmp_path, "sandbox: off\n")
    done = run_try(
        "--no-terminal",
        "--policy",
        policy,
        "--tool",
        "second",
        "--",
        PY,
        str(server),
        env=proxy_env(HOME=str(tmp_path)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tools: first, second" in done.stdout
    assert "result:\nhost said: mcp-sampling-proxy try has no 'roots/list'" in done.stdout
