"""A rule's limits on sampling, played in memory (tests/helpers/playbook.py): its rate limit, the size
caps that refuse before any LLM call, its max_tokens and model, `tool: none`, and a budget a refused
approval leaves untouched. The real relay and services between a host without sampling and a server the
test plays, against a loopback LLM speaking the OpenAI wire format; limits keep their state in the test's
own state dir, as the proxy's do. A budget kept across proxy processes: tests/e2e/test_limits_e2e.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook

pytestmark = pytest.mark.anyio
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


def policy_text(base_url: str, rules: str, extra: str = "") -> str:
    return (
        "llm:\n  providers:\n    fake:\n      type: openai\n"
        f"      base_url: {base_url}\n      api_key_env: TEST_LLM_KEY\n"
        "      models: [gpt-small, gpt-large]\n" + extra + "rules:\n" + rules
    )


def prompt(text: str, max_tokens: int = 100) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens}


async def answers(tmp_path: Path, policy: str, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the server gets for each request, one host call each, from one proxy."""
    async with Playbook(tmp_path, policy) as play:
        await play.handshake({})  # an SDK host without callbacks declares no capabilities
        return [await play.sample(params) for params in requests]


async def test_third_request_under_two_per_minute_is_refused(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = "  - name: limited\n    action: allow\n    rate_limit: {requests: 2, per: 1m}\n"
    got = await answers(tmp_path, policy_text(llm.base_url, rules), [prompt(str(i)) for i in range(3)])
    assert [r["result"]["content"]["text"] for r in got[:2]] == ["echo: 0", "echo: 1"]
    error = got[2]["error"]
    assert error["code"] == -1
    assert "rate limit of rule 'limited'" in error["message"]
    assert "retry in" in error["message"]
    assert error["data"]["limit"] == "rate_limit"
    assert len(llm.requests) == 2


async def test_caps_refuse_before_any_llm_call(tmp_path: Path, llm: FakeLLMServer) -> None:
    extra = "limits:\n  max_text_bytes: 1KiB\n  max_tokens: 64\n  max_tokens_action: deny\n"
    rules = "  - name: all\n    action: allow\n"
    got = await answers(
        tmp_path, policy_text(llm.base_url, rules, extra), [prompt("x" * 2000), prompt("ok", max_tokens=100)]
    )
    assert got[0]["error"]["code"] == -32602
    assert "limits.max_text_bytes" in got[0]["error"]["message"]
    assert "2,000 bytes" in got[0]["error"]["message"]
    assert got[1]["error"]["code"] == -32602
    assert "max_tokens" in got[1]["error"]["message"]
    assert llm.requests == []


async def test_rule_limits_clamp_max_tokens_and_pin_the_model(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = (
        "  - name: images-to-large\n    when: {content: image}\n    action: allow\n    model: gpt-large\n"
        "  - name: small\n    action: allow\n    limits: {max_tokens: 32}\n"
    )
    image = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "what?"}, {"type": "image", "data": PNG, "mimeType": "image/png"}],
            }
        ],
        "maxTokens": 10,
    }
    await answers(tmp_path, policy_text(llm.base_url, rules), [prompt("plain", max_tokens=500), image])
    assert llm.requests[0].body["max_tokens"] == 32
    assert llm.requests[0].body["model"] == "gpt-small"
    assert llm.requests[1].body["model"] == "gpt-large"


async def test_tool_none_matches_requests_outside_a_tool_call(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = (
        "  - name: stray\n    when: {tool: none}\n    action: deny\n    message: no tool call in flight\n"
        "  - name: in-tool\n    when: {tool: 'sam*'}\n    action: allow\n"
    )
    (got,) = await answers(tmp_path, policy_text(llm.base_url, rules), [prompt("x")])
    assert got["result"]["content"]["text"] == "echo: x"


async def test_a_refused_approval_costs_no_budget(tmp_path: Path, llm: FakeLLMServer) -> None:
    # nobody can be asked (no terminal, console or host form), so the request is refused before any
    # LLM call; its worst-case reservation must be released, not charged
    asking = "  - name: budgeted\n    action: prompt\n    budget: {tokens: 300, per: 1d}\n"
    request = [prompt("a", max_tokens=150)]
    (refused,) = await answers(tmp_path, policy_text(llm.base_url, asking), request)
    assert "no approval channel is available" in refused["error"]["message"]
    allowing = "  - name: budgeted\n    action: allow\n    budget: {tokens: 300, per: 1d}\n"
    llm.reply_text("fits", usage=(10, 10))
    (allowed,) = await answers(tmp_path, policy_text(llm.base_url, allowing), request)
    assert allowed["result"]["content"]["text"] == "fits"  # 0 of 300 used, so 1 + 150 fits
