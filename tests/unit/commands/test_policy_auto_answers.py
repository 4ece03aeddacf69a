"""`policy check` names a bad `elicitation.auto_answers` entry where it is; `policy explain` shows what an
entry would answer a form, or why it would not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.auto_answer_forms import CONFIRM, CONFIRM_ENTRY, SECRET
from helpers.support import write_policy

from mcp_sampling_proxy.commands import policy as policy_cmd


def policy(tmp_path: Path, entries: str) -> str:
    return f"audit:\n  path: {tmp_path / 'audit.jsonl'}\nelicitation:\n  auto_answers:\n{entries}"


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
