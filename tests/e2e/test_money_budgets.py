"""Money budgets through the real proxy: a `usd` budget reserved at the worst case and settled on the
usage the loopback LLM reports, the cost in the audit and in `audit summary`, the policy's prices,
an unpriced model refused, and one budget shared on Redis by two proxies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PROXY, proxy_command, proxy_env, sdk_host, tool_json, write_policy
from mcp.types import CreateMessageResult, TextContent

from mcp_sampling_proxy.config.prices import AS_OF

# gpt-4o-mini: $0.15 in, $0.60 out per million tokens. 1,000 + 1,000 tokens cost $0.00075 (750 micro-dollars);
# a request with maxTokens 1,000 may cost up to 600 for its output plus its input bound, about 9 more.
USAGE = (1000, 1000)
BIG = {"max_tokens": 1000}


def policy(base_url: str, rules: str, *, model: str = "gpt-4o-mini", extra: str = "") -> str:
    return (
        "llm:\n  providers:\n    fake:\n      type: openai\n"
        f"      base_url: {base_url}\n      api_key_env: TEST_LLM_KEY\n      models: [{model}]\n"
        f"audit:\n  path: audit.jsonl\n{extra}rules:\n{rules}"
    )


PAID = "  - name: paid\n    action: allow\n    budget: {usd: 0.0016, per: 1d}\n"


async def calls(tmp_path: Path, text: str, prompts: list[dict[str, Any]], name: str = "a") -> list[Any]:
    env = proxy_env(
        TEST_LLM_KEY="k",
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / name / "state"),
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / name / "run"),
    )
    path = write_policy(tmp_path, text, f"{name}.yaml")
    async with sdk_host(proxy_command(path), env, tmp_path / f"{name}.stderr.log") as client:
        return [tool_json(await client.call_tool("sample", args)) for args in prompts]


def decisions(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("event") == "decision"]


@pytest.mark.anyio
async def test_a_usd_budget_lets_two_requests_through_and_stops_the_third(tmp_path: Path, llm: FakeLLMServer) -> None:
    for _ in range(3):
        llm.reply_text("paid for", usage=USAGE)
    results = await calls(tmp_path, policy(llm.base_url, PAID), [{"prompt": str(i), **BIG} for i in range(3)])
    assert [r.get("content", {}).get("text") for r in results[:2]] == ["paid for", "paid for"]
    error = results[2]["error"]
    assert error["data"]["limit"] == "budget"
    assert "usd budget of rule 'paid' exhausted: $0.0015 of $0.0016 spent in this 1d window" in error["message"]
    assert "$0.0001 left and this request may cost up to $0.0006" in error["message"]
    assert "resets in" in error["message"]
    assert len(llm.requests) == 2

    records = decisions(tmp_path)
    assert [(r["decision"], r.get("cost_usd"), r.get("price_as_of")) for r in records] == [
        ("allow", 0.00075, AS_OF),
        ("allow", 0.00075, AS_OF),
        ("deny", None, None),
    ]
    assert records[2]["limit"] == "budget"

    summary = subprocess.run(
        [*PROXY, "audit", "summary", str(tmp_path / "audit.jsonl")], capture_output=True, text=True, check=True
    ).stdout
    header, *rows = summary.splitlines()
    assert "cost" in header
    assert rows[-1].startswith("total") and rows[-1].split()[-1] == "$0.0015", summary
    summary_json = json.loads(
        subprocess.run(
            [*PROXY, "audit", "summary", "--json", str(tmp_path / "audit.jsonl")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert summary_json["total"]["cost_usd"] == 0.0015
    assert summary_json["total"]["unpriced"] == 0


@pytest.mark.anyio
async def test_the_policys_price_changes_the_cost(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("dear", usage=USAGE)
    prices = "prices:\n  gpt-4o-mini: {input: 1, output: 2}\n"
    rules = "  - name: paid\n    action: allow\n    budget: {usd: 1, per: 1d}\n"
    results = await calls(tmp_path, policy(llm.base_url, rules, extra=prices), [{"prompt": "x", **BIG}])
    assert results[0]["content"]["text"] == "dear"
    record = decisions(tmp_path)[0]
    assert (record["cost_usd"], record["price_as_of"]) == (0.003, "policy")  # 1,000 x $1 + 1,000 x $2 per million


@pytest.mark.anyio
async def test_an_unpriced_model_under_a_usd_budget_is_refused_saying_how_to_price_it(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    results = await calls(tmp_path, policy(llm.base_url, PAID, model="my-local-model"), [{"prompt": "x"}])
    message = results[0]["error"]["message"]
    assert "usd budget of rule 'paid' cannot count this request" in message
    assert "model 'my-local-model' is not in the proxy's price table" in message
    assert "prices: {my-local-model: {input:" in message
    assert llm.requests == []
    assert decisions(tmp_path)[0]["decision"] == "deny"


@pytest.mark.anyio
async def test_an_unpriced_model_without_a_usd_budget_is_served_and_audited_as_unpriced(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    rules = "  - name: open\n    action: allow\n"
    results = await calls(tmp_path, policy(llm.base_url, rules, model="my-local-model"), [{"prompt": "x"}])
    assert results[0]["content"]["text"] == "echo: x"
    record = decisions(tmp_path)[0]
    assert (record["cost_usd"], record["price_as_of"]) == (None, "unpriced")


@pytest.mark.anyio
async def test_one_usd_budget_is_shared_by_two_proxies_on_redis(
    tmp_path: Path, redis_url: str, llm: FakeLLMServer
) -> None:
    for _ in range(3):
        llm.reply_text("paid for", usage=USAGE)
    state = f"state:\n  backend: redis\n  url: {redis_url}\n  prefix: 'money:'\n"
    text = policy(llm.base_url, PAID, extra=state)
    first = await calls(tmp_path, text, [{"prompt": "a", **BIG}, {"prompt": "b", **BIG}], name="one")
    assert [r["content"]["text"] for r in first] == ["paid for", "paid for"]
    # another proxy, its own state directory (as on another machine): the same $0.0015 already spent
    second = await calls(tmp_path, text, [{"prompt": "c", **BIG}], name="two")
    assert "usd budget of rule 'paid' exhausted: $0.0015 of $0.0016 spent" in second[0]["error"]["message"]
    assert len(llm.requests) == 2


def openai_cached(request: Any) -> dict[str, Any]:
    """An OpenAI answer that read 800 of its 1,000 prompt tokens from the prompt cache."""
    return {
        "id": "chatcmpl-cached",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "cached"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 1000,
            "completion_tokens": 100,
            "total_tokens": 1100,
            "prompt_tokens_details": {"cached_tokens": 800},
        },
    }


@pytest.mark.anyio
async def test_cached_input_is_charged_at_the_cached_price(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.enqueue(body=openai_cached)
    rules = "  - name: open\n    action: allow\n"
    results = await calls(tmp_path, policy(llm.base_url, rules), [{"prompt": "x"}])
    assert results[0]["content"]["text"] == "cached"
    # 200 x $0.15 + 800 x $0.075 + 100 x $0.60 per million = 150 micro-dollars (uncached: 210)
    assert decisions(tmp_path)[0]["cost_usd"] == 0.00015


@pytest.mark.anyio
async def test_anthropic_cache_reads_count_as_input_at_the_cached_price(tmp_path: Path) -> None:
    with FakeLLMServer("anthropic") as claude:
        claude.enqueue(
            body={
                "id": "msg_cached",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "text", "text": "cached"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 100, "cache_read_input_tokens": 900, "output_tokens": 10},
            }
        )
        text = (
            "llm:\n  providers:\n    claude:\n      type: anthropic\n"
            f"      base_url: {claude.base_url}\n      api_key_env: TEST_LLM_KEY\n      models: [claude-sonnet-4-5]\n"
            "audit:\n  path: audit.jsonl\nrules:\n  - name: open\n    action: allow\n"
        )
        results = await calls(tmp_path, text, [{"prompt": "x"}])
    assert results[0]["content"]["text"] == "cached"
    record = decisions(tmp_path)[0]
    # every input token counts (100 + 900 read from the cache); 100 x $3 + 900 x $0.30 + 10 x $15 per million
    assert (record["input_tokens"], record["cost_usd"]) == (1000, 0.00072)


async def host_sampling(context: Any, params: Any) -> CreateMessageResult:
    return CreateMessageResult(role="assistant", content=TextContent(text="from host"), model="host-model")


@pytest.mark.anyio
async def test_a_host_that_samples_is_not_held_to_the_proxys_prices(tmp_path: Path, llm: FakeLLMServer) -> None:
    """Under a usd budget, a request the host answers with its own LLM is not the proxy's money: an unpriced
    model of ours does not refuse it (with fallback_on_host_error our LLM may be called, and it would)."""
    env = proxy_env(
        TEST_LLM_KEY="k",
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
    )
    path = write_policy(tmp_path, policy(llm.base_url, PAID, model="my-local-model"))
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log", sampling_callback=host_sampling) as client:
        result = tool_json(await client.call_tool("sample", {"prompt": "x"}))
    assert result["content"]["text"] == "from host"
    assert llm.requests == []
    record = decisions(tmp_path)[0]
    assert (record["provider"], "cost_usd" in record) == ("host", False)
