"""Headless runs: `elicitation.auto_answers` answers a server's confirmation through the real proxy,
with nobody anywhere to ask (no terminal, no companion console, a host without elicitation).

The forms an entry does not answer, and why, are played in memory:
tests/unit/services/test_elicitation_auto_played.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy

from mcp_sampling_proxy.audit.shown import format_record
from mcp_sampling_proxy.commands import audit as audit_cmd
from mcp_sampling_proxy.commands import policy as policy_cmd

CONFIRM = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Proceed?"}},
    "required": ["confirm"],
}
SECRET = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}, "password": {"type": "string", "title": "Your password"}},
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
    "      server: kitchen*\n"
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


def test_policy_check_names_a_bad_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        "elicitation:\n  auto_answers:\n"
        "    - {server: '*', action: decline, content: {confirm: true}}\n"
        "    - {action: accept}\n"
        "    - {server: '*', action: accept, content: {confirm: {nested: 1}}}\n"
        "    - {server: '*', action: acept}\n"
    )
    path = write_policy(tmp_path, text)
    assert policy_cmd.main(["check", path]) == 1
    err = capsys.readouterr().err
    assert f"{path}:3:" in err and "content: goes with action: accept, not decline" in err
    assert f"{path}:4:" in err and "auto-answer 2 needs server:" in err
    assert f"{path}:5:" in err and "must be text, a number, true/false or a list of texts" in err
    assert f"{path}:6:" in err and "did you mean 'accept'" in err


def test_policy_explain_shows_the_auto_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_policy(tmp_path, policy(tmp_path, CONFIRM_ENTRY))
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"message": "Deploy to staging?", "requestedSchema": CONFIRM}))
    args = ["explain", path, "--request", str(request), "--server", "kitchen_sink_server", "--tool", "elicit_form"]
    assert policy_cmd.main(args) == 0
    out = capsys.readouterr().out
    assert "auto_answers: 'confirm-deploys' matches: when nobody can be asked, the server gets " in out
    assert '{"action": "accept", "content": {"confirm": true}}' in out
    request.write_text(json.dumps({"message": "Deploy to staging?", "requestedSchema": SECRET}))
    assert policy_cmd.main(args) == 0
    assert "auto-answer 'confirm-deploys' not used: the form asks for secrets" in capsys.readouterr().out
