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
