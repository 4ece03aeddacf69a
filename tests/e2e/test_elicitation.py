"""Elicitation through the real proxy: an SDK host that answers forms, and the form at the terminal.

What the relay and the elicitation service decide (nobody to ask, rules, rate limits, the companion
console's answers, URL mode, the audit) is played in memory: tests/unit/services/test_elicitation_played.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.support import PY, proxy_command, proxy_env, sdk_host, tool_json, write_policy


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return proxy_env(
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"), MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state")
    )


async def elicit(
    tmp_path: Path, env: dict[str, str], policy: str, tool: str, args: dict[str, Any], **client: Any
) -> Any:
    path = write_policy(tmp_path, policy)
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log", **client) as host:
        return tool_json(await host.call_tool(tool, args))


@pytest.mark.anyio
async def test_host_with_elicitation_answers_it(tmp_path: Path, env: dict[str, str]) -> None:
    from mcp_types import ElicitResult

    async def host_form(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"name": "Ada"})

    result = await elicit(tmp_path, env, "", "elicit_name", {}, elicitation_callback=host_form)
    assert result == {"action": "accept", "data": {"name": "Ada"}}


# -- format checks (jsonschema's FormatChecker) through the real proxy ----------------------------

FORMATTED = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Email"},
        "born": {"type": "string", "format": "date", "title": "Birthday"},
        "when": {"type": "string", "format": "date-time", "title": "Meeting"},
        "site": {"type": "string", "format": "uri", "title": "Homepage"},
    },
    "required": ["email", "born"],
}


@pytest.mark.skipif(sys.platform != "linux", reason="needs a Linux pty")
def test_terminal_form_re_asks_a_bad_email_date_date_time_and_url(tmp_path: Path) -> None:
    from helpers.support import SMALL_SERVER
    from helpers.terminal import PtySession, terminal_env, try_argv

    session = PtySession(
        try_argv(
            "--tool",
            "elicit_form",
            "--args",
            json.dumps({"schema_json": json.dumps(FORMATTED)}),
            "--",
            PY,
            SMALL_SERVER,
        ),
        terminal_env(),
    )
    session.read_until(b"[a]nswer the form")
    session.type("a\n")
    steps = [
        (b"Email* (email)", "ada@example", b"not a valid email; expected an email address like name@example.com"),
        (b"Email* (email)", "ada@example.com", None),
        (b"Birthday* (date)", "2023-02-29", b"not a valid date; expected a date like 2025-03-01"),
        (b"Birthday* (date)", "1815-12-10", None),
        (b"Meeting (date-time)", "1815-12-10 08:00", b"not a valid date-time; expected a date and time with offset"),
        (b"Meeting (date-time)", "1815-12-10T08:00:00+01:00", None),
        (b"Homepage (uri)", "example.com", b"not a valid uri; expected a URL like https://example.com/"),
        (b"Homepage (uri)", "https://example.com/ada", None),
    ]
    for prompt, text, complaint in steps:
        session.read_until(prompt)
        asked = session.output.count(prompt)
        session.type(text + "\n")
        if complaint is not None:
            session.read_until(complaint)
            deadline = time.monotonic() + 30
            while session.output.count(prompt) == asked and time.monotonic() < deadline:
                session._read(0.5)
            assert session.output.count(prompt) == asked + 1  # the same field, asked again
    assert session.finish() == 0
    result = json.loads(session.output.split(b"result:")[1].strip().decode())
    assert result == {
        "action": "accept",
        "data": {
            "email": "ada@example.com",
            "born": "1815-12-10",
            "when": "1815-12-10T08:00:00+01:00",
            "site": "https://example.com/ada",
        },
    }
