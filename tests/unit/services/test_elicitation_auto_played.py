"""`elicitation.auto_answers` played in memory (tests/helpers/playbook.py): which forms an entry answers
when nobody can be asked, and which it never does (a form asking for secrets, URL mode, content that does
not fit), with the audit record each leaves. The real relay and services between a host without forms and
a server the test plays, named as the proxy would name the kitchen-sink server whose `elicit_form` asks.
The headless run through the proxy as a process: tests/e2e/test_elicitation_auto.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.auto_answer_forms import CONFIRM, CONFIRM_ENTRY, SECRET
from helpers.playbook import Playbook
from structlog.testing import capture_logs

from mcp_sampling_proxy.commands import audit as audit_cmd

pytestmark = pytest.mark.anyio
SERVER = "kitchen_sink_server"


def policy(entries: str, extra: str = "") -> str:
    return f"elicitation:\n  auto_answers:\n{entries}{extra}"


async def ask(
    tmp_path: Path, text: str, request: dict[str, Any], tool: str = "elicit_form"
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """What the server gets for one elicitation inside a call of `tool`, nobody to ask: its result, the
    one audit record (the log's chain checked first), and what the proxy logged."""
    with capture_logs() as logs:
        async with Playbook(tmp_path, text, name=SERVER) as play:
            await play.handshake({})  # an SDK host without callbacks declares no capabilities
            answer = await play.elicit(request, tool=tool)
    assert audit_cmd.main(["verify", str(play.audit_path)]) == 0
    (record,) = play.audit()
    return answer["result"], record, str(logs)


def form(schema: dict[str, Any], message: str = "Deploy to staging?") -> dict[str, Any]:
    return {"mode": "form", "message": message, "requestedSchema": schema}


@pytest.mark.parametrize(
    ("message", "tool_glob"),
    [("Delete every file?", "elicit_*"), ("Deploy to staging?", "deploy")],
    ids=["other-message", "other-tool"],
)
async def test_a_form_the_entry_does_not_name_is_not_answered(tmp_path: Path, message: str, tool_glob: str) -> None:
    entry = CONFIRM_ENTRY.replace("elicit_*", tool_glob)
    result, record, _logs = await ask(tmp_path, policy(entry), form(CONFIRM, message))
    assert result == {"action": "decline"}
    assert (record["decision"], record["rule"]) == ("deny", "default")
    assert "auto-answer" not in record["reason"]


async def test_decline_and_cancel_entries(tmp_path: Path) -> None:
    entries = "    - {server: '*', message: Delete, action: cancel}\n"
    result, record, _logs = await ask(tmp_path, policy(entries), form(CONFIRM, "Delete all?"))
    assert result == {"action": "cancel"}
    assert (record["decision"], record["rule"]) == ("auto_answered", "auto-answer-1")


async def test_a_sensitive_form_is_never_auto_answered(tmp_path: Path) -> None:
    entry = "    - {name: yes-to-all, server: '*', action: accept, content: {confirm: true}}\n"
    # Even with sensitive forms allowed through to a human, the policy does not answer one.
    result, record, logs = await ask(tmp_path, policy(entry, "  sensitive_form: allow\n"), form(SECRET))
    assert result == {"action": "decline"}
    assert record["decision"] == "deny"
    assert "auto-answer 'yes-to-all' not used: the form asks for secrets" in record["reason"]
    assert "never auto-answered" in record["reason"]
    assert "auto-answer not used" in logs


async def test_a_sensitive_form_declined_by_sensitive_form_says_the_entry_was_not_used(tmp_path: Path) -> None:
    entry = "    - {name: yes-to-all, server: '*', action: accept, content: {confirm: true}, applies: always}\n"
    result, record, _logs = await ask(tmp_path, policy(entry), form(SECRET))
    assert result == {"action": "decline"}
    assert record["decision"] == "deny"
    assert "elicitation.sensitive_form" in record["reason"]
    assert "auto-answer 'yes-to-all' not used" in record["reason"]


async def test_content_that_does_not_fit_the_form_is_refused_with_a_clear_reason(tmp_path: Path) -> None:
    entry = "    - {name: sloppy, server: '*', action: accept, content: {confirm: 'yes please', extra: 1}}\n"
    result, record, logs = await ask(tmp_path, policy(entry), form(CONFIRM))
    assert result == {"action": "decline"}
    assert (record["decision"], record["rule"]) == ("error", "sloppy")
    assert "auto-answer 'sloppy' does not fit the form" in record["reason"]
    assert "'extra': not a field of this form" in record["reason"]
    assert "'confirm': not a boolean" in record["reason"]
    assert "does not fit the form" in logs


async def test_url_mode_is_never_auto_answered(tmp_path: Path) -> None:
    entry = "    - {name: any-url, server: '*', action: accept, applies: always}\n"
    request = {"mode": "url", "message": "Please sign in", "url": "https://example.com/login", "elicitationId": "e-1"}
    result, record, _logs = await ask(tmp_path, policy(entry, "  url_mode: true\n"), request, tool="elicit_url")
    assert result == {"action": "decline"}
    assert record["decision"] == "deny"
    assert "auto-answer 'any-url' not used: URL-mode elicitation is never auto-answered" in record["reason"]
