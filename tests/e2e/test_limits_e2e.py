"""Limits through the real proxy: rate limits, budgets across restarts, size caps, overrides, review."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def policy_text(base_url: str, rules: str, extra: str = "") -> str:
    return (
        "llm:\n  providers:\n    fake:\n      type: openai\n"
        f"      base_url: {base_url}\n      api_key_env: TEST_LLM_KEY\n"
        "      models: [gpt-small, gpt-large]\n" + extra + "rules:\n" + rules
    )


async def calls(
    tmp_path: Path, policy: str, arguments: list[tuple[str, dict[str, Any]]], state: Path | None = None
) -> list[Any]:
    env = proxy_env(
        TEST_LLM_KEY="k",
        MCP_SAMPLING_PROXY_STATE_DIR=str(state or tmp_path / "state"),
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
    )
    path = write_policy(tmp_path, policy)
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log") as client:
        return [tool_json(await client.call_tool(tool, args)) for tool, args in arguments]


@pytest.mark.anyio
async def test_third_request_under_two_per_minute_is_refused(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = "  - name: limited\n    action: allow\n    rate_limit: {requests: 2, per: 1m}\n"
    prompts = [("sample", {"prompt": str(i)}) for i in range(3)]
    results = await calls(tmp_path, policy_text(llm.base_url, rules), prompts)
    assert [r.get("content", {}).get("text") for r in results[:2]] == ["echo: 0", "echo: 1"]
    error = results[2]["error"]
    assert error["code"] == -1
    assert "rate limit of rule 'limited'" in error["message"]
    assert "retry in" in error["message"]
    assert error["data"]["limit"] == "rate_limit"
    assert len(llm.requests) == 2


@pytest.mark.anyio
async def test_budget_survives_a_restart(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = "  - name: budgeted\n    action: allow\n    budget: {tokens: 300, per: 1d}\n"
    policy = policy_text(llm.base_url, rules)
    llm.reply_text("one", usage=(100, 100))
    first = await calls(tmp_path, policy, [("sample", {"prompt": "a", "max_tokens": 50})])
    assert first[0]["content"]["text"] == "one"
    # a new proxy process: 200 of 300 tokens are already spent, and this request may need 1 + 150
    second = await calls(tmp_path, policy, [("sample", {"prompt": "b", "max_tokens": 150})])
    error = second[0]["error"]
    assert "token budget of rule 'budgeted' exhausted" in error["message"]
    assert "200 of 300 tokens used" in error["message"]
    assert len(llm.requests) == 1


@pytest.mark.anyio
async def test_caps_refuse_before_any_llm_call(tmp_path: Path, llm: FakeLLMServer) -> None:
    extra = "limits:\n  max_text_bytes: 1KiB\n  max_tokens: 64\n  max_tokens_action: deny\n"
    rules = "  - name: all\n    action: allow\n"
    results = await calls(
        tmp_path,
        policy_text(llm.base_url, rules, extra),
        [
            ("sample", {"prompt": "x" * 2000}),
            ("sample", {"prompt": "ok", "max_tokens": 100}),
        ],
    )
    assert results[0]["error"]["code"] == -32602
    assert "limits.max_text_bytes" in results[0]["error"]["message"]
    assert "2,000 bytes" in results[0]["error"]["message"]
    assert results[1]["error"]["code"] == -32602
    assert "max_tokens" in results[1]["error"]["message"]
    assert llm.requests == []


@pytest.mark.anyio
async def test_rule_limits_clamp_max_tokens_and_pin_the_model(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = (
        "  - name: images-to-large\n    when: {content: image}\n    action: allow\n    model: gpt-large\n"
        "  - name: small\n    action: allow\n    limits: {max_tokens: 32}\n"
    )
    raw = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "what?"}, {"type": "image", "data": PNG, "mimeType": "image/png"}],
            }
        ],
        "maxTokens": 10,
    }
    await calls(
        tmp_path,
        policy_text(llm.base_url, rules),
        [
            ("sample", {"prompt": "plain", "max_tokens": 500}),
            ("sample_raw", {"params_json": json.dumps(raw)}),
        ],
    )
    assert llm.requests[0].body["max_tokens"] == 32
    assert llm.requests[0].body["model"] == "gpt-small"
    assert llm.requests[1].body["model"] == "gpt-large"


@pytest.mark.anyio
async def test_tool_none_matches_requests_outside_a_tool_call(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = (
        "  - name: stray\n    when: {tool: none}\n    action: deny\n    message: no tool call in flight\n"
        "  - name: in-tool\n    when: {tool: 'sam*'}\n    action: allow\n"
    )
    results = await calls(tmp_path, policy_text(llm.base_url, rules), [("sample", {"prompt": "x"})])
    assert results[0]["content"]["text"] == "echo: x"


@pytest.mark.anyio
async def test_a_refused_approval_costs_no_budget(tmp_path: Path, llm: FakeLLMServer) -> None:
    # nobody can be asked (no terminal, console or host form), so the request is refused before any
    # LLM call; its worst-case reservation must be released, not charged
    asking = "  - name: budgeted\n    action: prompt\n    budget: {tokens: 300, per: 1d}\n"
    request = [("sample", {"prompt": "a", "max_tokens": 150})]
    refused = await calls(tmp_path, policy_text(llm.base_url, asking), request)
    assert "no approval channel is available" in refused[0]["error"]["message"]
    allowing = "  - name: budgeted\n    action: allow\n    budget: {tokens: 300, per: 1d}\n"
    llm.reply_text("fits", usage=(10, 10))
    allowed = await calls(tmp_path, policy_text(llm.base_url, allowing), request)
    assert allowed[0]["content"]["text"] == "fits"  # 0 of 300 used, so 1 + 150 fits
