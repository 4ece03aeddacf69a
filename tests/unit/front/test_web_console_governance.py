"""The governance as the web console's server gives it to the page, in process: each audit line's notes
(what the checks, the secret scan, the sampling checks and the tools: section recorded, each with the kind
the page styles), the per-server counts under the usage, and a tool call a `tools:` rule holds for a human
shown as its tool and its cleaned arguments. The real app through httpx's ASGI transport
(helpers/played_console.py); the real relay and services in memory for the tool call. The page drawing them
in Chromium: tests/e2e/test_governance_console.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from helpers.governance_log import write_governance_log
from helpers.playbook import Playbook
from helpers.played_console import PORT, TOKEN, played_page

from mcp_sampling_proxy.approval.console.client import ConsoleClient
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.front.web_console.app import WebConsole
from mcp_sampling_proxy.front.web_console.server import page_sources
from mcp_sampling_proxy.front.web_console.state import follow_audit

pytestmark = pytest.mark.anyio

POLICY = """\
approval:
  channels: [console]
  timeout: 60s
tools:
  pin: false
  rules:
    - name: ask-before-echo
      tool: echo
      action: prompt
rules:
  - name: allow-all
    action: allow
"""
# what the host asks the tool to echo: escapes, and a line dressed up as the proxy's own
ARGUMENT = "hello\x1b[2J\x1b]0;pwned\x07\nApproved by mcp-sampling-proxy"


async def test_audit_lines_and_usage_carry_what_the_governance_recorded(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    write_governance_log(audit)
    settings = parse_settings(POLICY + f"audit:\n  path: {audit}\n", str(tmp_path / "policy.yaml"))
    state = page_sources(settings, None).state
    web = WebConsole(state, ConsoleClient(tmp_path / "run", state.on_event), PORT, token=TOKEN)
    async with anyio.create_task_group() as tg:
        tg.start_soon(follow_audit, state, str(audit), 0.05)
        with anyio.fail_after(10):
            while state.audit_count == 0:
                await state.changed((state.version, 0), 10)
        transport = httpx.ASGITransport(app=web)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{PORT}") as page:
            listed = (await page.get(f"/{TOKEN}/api/audit")).json()
            usage = (await page.get(f"/{TOKEN}/api/usage")).json()
        tg.cancel_scope.cancel()
    notes = [(note["kind"], note["text"]) for line in listed["lines"] for note in line["notes"]]
    for expected in (
        ("check", "check pii-scan: allow"),
        ("refused", "check pii-scan: deny: the prompt holds a card number"),
        ("secret", "credentials in the LLM's answer: AWS Access Key (masked)"),
        ("secret", "credentials in the server's request: GitHub Token (refused)"),
        ("refused", "refused: unsolicited (no host request in flight)"),
        ("refused", "refused: over sampling.max_per_call"),
        ("tool", "tool call (tools rule: allow)"),
        ("tool", "tool call (tools rule: deny)"),
        ("tool", "tool call held: the tool changed since it was pinned"),
        ("tool", "tool call (tools rule: prompt)"),
        ("tool", "tool changed (description): held until accepted"),
        ("tool", "hidden from the host's tools/list"),
    ):
        assert expected in notes, (expected, notes)
    # no secret's value, and no text of the changed tool (the server's), reaches the page
    assert "id_rsa" not in json.dumps(listed) and "[REDACTED" not in json.dumps(
        [line["line"] for line in listed["lines"]]
    )
    [server] = usage["servers"]
    assert server["server"] == "notes"
    assert {k: v for k, v in server["tools"].items() if v} == {
        "calls_allowed": 2,
        "calls_denied": 1,
        "calls_held": 1,
        "hidden": 1,
        "changes": 1,
    }
    assert {k: v for k, v in server["refused"].items() if v} == {
        "unsolicited": 1,
        "max_per_call": 1,
        "checks": 1,
        "secrets": 1,
    }
    assert server["secrets_found"] == 2


async def test_a_tool_call_held_for_a_human_shows_the_tool_and_its_arguments(tmp_path: Path) -> None:
    """A tools: rule's prompt reaches the page as the tool and its arguments (indented JSON, controls as
    escapes, the forged line inside its JSON string), not as an empty sampling request; approving it runs it."""
    async with Playbook(tmp_path, POLICY, name="notes", console=True) as play, played_page(play) as page:
        await play.handshake({})

        def server(message: dict[str, Any]) -> list[dict[str, Any]]:
            if message.get("method") != "tools/call":
                return []
            text = message["params"]["arguments"]["text"]
            return [{"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": text}]}}]

        got = play.serve_with(server)
        answer: dict[str, Any] = {}

        async def call() -> None:
            answer.update(await play.host_asks("tools/call", {"name": "echo", "arguments": {"text": ARGUMENT}}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            question = await page.question("pending")
            assert (question["tool"], question["rule"], question["server"]) == ("echo", "ask-before-echo", "notes")
            assert question["tool_call"] == {
                "name": "echo",
                "arguments": '{\n  "text": "hello\\u001b[2J\\u001b]0;pwned\\u0007\\nApproved by mcp-sampling-proxy"\n}',
            }
            assert "request" not in question  # nothing to edit: no prompt
            assert got == []  # held: the server has not seen the call
            assert (await page.answer(question, action="approve")).status_code == 200
        assert answer["result"]["content"][0]["text"] == ARGUMENT
        [line] = await page.audit_lines()
        assert "approved by console" in line["line"] and "tools/call echo:" in line["line"]
        assert {"kind": "tool", "text": "tool call (tools rule: prompt)"} in line["notes"]
