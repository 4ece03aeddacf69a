"""Limits through the real proxy: a token budget kept across two proxy processes.

A rule's other limits (rate limits, size caps, max_tokens and model, a budget a refused approval leaves
untouched) are played in memory: tests/unit/services/test_sampling_limits_played.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy


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
