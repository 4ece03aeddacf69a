"""Headless runs: `elicitation.auto_answers` answers a server's confirmation through the real proxy,
with nobody anywhere to ask (no terminal, no companion console, a host without elicitation).

The forms an entry does not answer, and why, are played in memory:
tests/unit/services/test_elicitation_auto_played.py; `policy check` and `policy explain` of the entries:
tests/unit/commands/test_policy_auto_answers.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy

from mcp_sampling_proxy.audit.shown import format_record
from mcp_sampling_proxy.commands import audit as audit_cmd

CONFIRM = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Proceed?"}},
    "required": ["confirm"],
}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return proxy_env(
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"), MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state")
    )


def policy(tmp_path: Path, entries: str, extra: str = "") -> str:
    return f"audit:\n  path: {tmp_path / 'audit.jsonl'}\nelicitation:\n  auto_answers:\n{entries}{extra}"


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "audit.jsonl"
    assert audit_cmd.main(["verify", str(log)]) == 0
    return [json.loads(line) for line in log.read_text().splitlines()]


async def ask(
    tmp_path: Path, env: dict[str, str], text: str, schema: dict[str, Any], message: str = "Deploy to staging?"
) -> Any:
    path = write_policy(tmp_path, text)
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log") as host:
        return tool_json(await host.call_tool("elicit_form", {"schema_json": json.dumps(schema), "message": message}))


CONFIRM_ENTRY = (
    "    - name: confirm-deploys\n"
    "      server: small*\n"
    "      tool: elicit_*\n"
    "      message: '^Deploy to '\n"
    "      action: accept\n"
    "      content: {confirm: true}\n"
)


@pytest.mark.anyio
async def test_a_headless_confirmation_is_answered_by_policy_and_audited(tmp_path: Path, env: dict[str, str]) -> None:
    result = await ask(tmp_path, env, policy(tmp_path, CONFIRM_ENTRY), CONFIRM)
    assert result == {"action": "accept", "data": {"confirm": True}}
    (record,) = audit_records(tmp_path)
    assert (record["decision"], record["rule"], record["action"]) == ("auto_answered", "confirm-deploys", "accept")
    assert record["reason"] == "accepted by auto-answer 'confirm-deploys'"
    assert record["content"]["response"]["sha256"]  # what the server was answered is in the chain too
    line = format_record(record)
    assert "accepted (accepted by auto-answer 'confirm-deploys'; rule confirm-deploys)" in line
