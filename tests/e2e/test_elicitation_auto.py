"""Headless runs: `elicitation.auto_answers` answers a server's confirmation through the real proxy,
with nobody anywhere to ask (no terminal, no companion console, a host without elicitation)."""

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


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("message", "tool_glob"),
    [("Delete every file?", "elicit_*"), ("Deploy to staging?", "deploy")],
    ids=["other-message", "other-tool"],
)
async def test_a_form_the_entry_does_not_name_is_not_answered(
    tmp_path: Path, env: dict[str, str], message: str, tool_glob: str
) -> None:
    entry = CONFIRM_ENTRY.replace("elicit_*", tool_glob)
    result = await ask(tmp_path, env, policy(tmp_path, entry), CONFIRM, message)
    assert result == {"action": "decline", "data": None}
    (record,) = audit_records(tmp_path)
    assert (record["decision"], record["rule"]) == ("deny", "default")
    assert "auto-answer" not in record["reason"]


@pytest.mark.anyio
async def test_decline_and_cancel_entries(tmp_path: Path, env: dict[str, str]) -> None:
    entries = "    - {server: '*', message: Delete, action: cancel}\n"
    assert await ask(tmp_path, env, policy(tmp_path, entries), CONFIRM, "Delete all?") == {
        "action": "cancel",
        "data": None,
    }
    (record,) = audit_records(tmp_path)
    assert (record["decision"], record["rule"]) == ("auto_answered", "auto-answer-1")


@pytest.mark.anyio
async def test_a_sensitive_form_is_never_auto_answered(tmp_path: Path, env: dict[str, str]) -> None:
    entry = "    - {name: yes-to-all, server: '*', action: accept, content: {confirm: true}}\n"
    # Even with sensitive forms allowed through to a human, the policy does not answer one.
    text = policy(tmp_path, entry, "  sensitive_form: allow\n")
    result = await ask(tmp_path, env, text, SECRET, "Deploy to staging?")
    assert result == {"action": "decline", "data": None}
    (record,) = audit_records(tmp_path)
    assert record["decision"] == "deny"
    assert "auto-answer 'yes-to-all' not used: the form asks for secrets" in record["reason"]
    assert "never auto-answered" in record["reason"]
    assert "auto-answer not used" in (tmp_path / "stderr.log").read_text()


@pytest.mark.anyio
async def test_a_sensitive_form_declined_by_sensitive_form_says_the_entry_was_not_used(
    tmp_path: Path, env: dict[str, str]
) -> None:
    entry = "    - {name: yes-to-all, server: '*', action: accept, content: {confirm: true}, applies: always}\n"
    result = await ask(tmp_path, env, policy(tmp_path, entry), SECRET)
    assert result == {"action": "decline", "data": None}
    (record,) = audit_records(tmp_path)
    assert record["decision"] == "deny"
    assert "elicitation.sensitive_form" in record["reason"]
    assert "auto-answer 'yes-to-all' not used" in record["reason"]


@pytest.mark.anyio
async def test_content_that_does_not_fit_the_form_is_refused_with_a_clear_reason(
    tmp_path: Path, env: dict[str, str]
) -> None:
    entry = "    - {name: sloppy, server: '*', action: accept, content: {confirm: 'yes please', extra: 1}}\n"
    result = await ask(tmp_path, env, policy(tmp_path, entry), CONFIRM)
    assert result == {"action": "decline", "data": None}
    (record,) = audit_records(tmp_path)
    assert (record["decision"], record["rule"]) == ("error", "sloppy")
    assert "auto-answer 'sloppy' does not fit the form" in record["reason"]
    assert "'extra': not a field of this form" in record["reason"]
    assert "'confirm': not a boolean" in record["reason"]
    assert "does not fit the form" in (tmp_path / "stderr.log").read_text()


@pytest.mark.anyio
async def test_url_mode_is_never_auto_answered(tmp_path: Path, env: dict[str, str]) -> None:
    entry = "    - {name: any-url, server: '*', action: accept, applies: always}\n"
    path = write_policy(tmp_path, policy(tmp_path, entry, "  url_mode: true\n"))
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log") as host:
        result = tool_json(await host.call_tool("elicit_url", {"url": "https://example.com/login"}))
    assert result == {"action": "decline"}
    (record,) = audit_records(tmp_path)
    assert record["decision"] == "deny"
    assert "auto-answer 'any-url' not used: URL-mode elicitation is never auto-answered" in record["reason"]


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
