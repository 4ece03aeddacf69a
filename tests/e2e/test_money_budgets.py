"""Money budgets through the real proxy: a `usd` budget reserved at the worst case and settled on the
usage the loopback LLM reports, the cost in the audit and in `audit summary`, and one budget shared on
Redis by two proxies. The cost of single requests (the policy's prices, cached input, unpriced models, a
host that samples) is played in memory: tests/unit/services/test_money_budgets_played.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import proxy_command, proxy_env, run_subcommand, sdk_host, tool_json, write_policy

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

    # the audit log read back by `audit summary`, in process: a file is all it reads
    summary = run_subcommand(["audit", "summary", str(tmp_path / "audit.jsonl")], check=True).stdout
    header, *rows = summary.splitlines()
    assert "cost" in header
    assert rows[-1].startswith("total") and rows[-1].split()[-1] == "$0.0015", summary
    summary_json = json.loads(run_subcommand(["audit", "summary", "--json", str(tmp_path / "audit.jsonl")]).stdout)
    assert summary_json["total"]["cost_usd"] == 0.0015
    assert summary_json["total"]["unpriced"] == 0


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
