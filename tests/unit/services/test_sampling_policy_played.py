"""The policy's word on a sampling request, played in memory (tests/helpers/playbook.py): a deny rule's
message, nobody to ask, no LLM to answer, and the audit record of an allowed request. The real relay and
services between a host without sampling and a server the test plays, named as the proxy would name the
kitchen-sink server of tests/e2e/test_sampling.py; a loopback LLM speaking the OpenAI wire format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import openai_policy

pytestmark = pytest.mark.anyio
KEY = "sk-test-key-never-logged-0123456789"
PROMPT = {"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}], "maxTokens": 100}
SERVER = "kitchen_sink_server"


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", KEY)


async def sample(tmp_path: Path, policy: str) -> dict[str, Any]:
    async with Playbook(tmp_path, policy, name=SERVER) as play:
        await play.handshake({})  # an SDK host without callbacks declares nothing
        return await play.sample(PROMPT)


async def test_deny_rule_refuses_with_code_minus_one_and_its_message(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = (
        "rules:\n  - name: no-sinks\n    when: {server: kitchen*}\n    action: deny\n"
        "    message: kitchen servers may not sample\n  - name: rest\n    action: allow\n"
    )
    answer = await sample(tmp_path, openai_policy(llm.base_url, rules=rules))
    assert answer["error"] == {"code": -1, "message": "kitchen servers may not sample"}
    assert llm.requests == []


async def test_no_rule_and_no_terminal_denies_and_says_how_to_fix(tmp_path: Path, llm: FakeLLMServer) -> None:
    error = (await sample(tmp_path, openai_policy(llm.base_url, rules="")))["error"]
    assert error["code"] == -1
    assert "no approval channel" in error["message"]
    assert "action: allow" in error["message"]
    assert llm.requests == []


async def test_no_provider_and_no_terminal_says_how_to_configure(tmp_path: Path) -> None:
    error = (await sample(tmp_path, "rules: [{name: all, action: allow}]\n"))["error"]
    assert "OPENAI_API_KEY" in error["message"]
    assert "llm.providers" in error["message"]


async def test_audit_record_per_decision_without_the_key(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = "rules:\n  - name: no-big\n    when: {server: nobody}\n    action: deny\n  - name: ok\n    action: allow\n"
    llm.reply_text("audited", usage=(21, 4))
    async with Playbook(tmp_path, openai_policy(llm.base_url, rules=rules), name=SERVER) as play:
        await play.handshake({})  # an SDK host without callbacks declares nothing
        await play.sample(PROMPT)
        (record,) = play.audit()
        text = play.audit_path.read_text()
        mode = play.audit_path.stat().st_mode & 0o777
    assert KEY not in text
    assert (record["decision"], record["rule"], record["server"], record["tool"]) == ("allow", "ok", SERVER, "sample")
    assert record["provider"] == "fake"
    assert (record["input_tokens"], record["output_tokens"]) == (21, 4)
    assert record["stop_reason"] == "endTurn"
    assert oct(mode) == "0o600"
