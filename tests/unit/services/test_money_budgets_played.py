"""Money on sampling, played in memory (tests/helpers/playbook.py): the cost each request is recorded at
(the shipped prices, the policy's own, cached input), a model without a price under a `usd` budget and
without one, and a host that samples with its own LLM. The real relay and services between a host and a
server the test plays, against a loopback LLM speaking the OpenAI or Anthropic wire format. A budget
through the proxy as a process, `audit summary`, and one budget shared on Redis:
tests/e2e/test_money_budgets.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook

pytestmark = pytest.mark.anyio
# gpt-4o-mini: $0.15 in, $0.60 out per million tokens.
USAGE = (1000, 1000)
PAID = "  - name: paid\n    action: allow\n    budget: {usd: 0.0016, per: 1d}\n"
OPEN = "  - name: open\n    action: allow\n"


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


def policy(base_url: str, rules: str, *, model: str = "gpt-4o-mini", extra: str = "", kind: str = "openai") -> str:
    return (
        f"llm:\n  providers:\n    fake:\n      type: {kind}\n"
        f"      base_url: {base_url}\n      api_key_env: TEST_LLM_KEY\n      models: [{model}]\n"
        f"{extra}rules:\n{rules}"
    )


def prompt(text: str, max_tokens: int = 100) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens}


async def sample(
    tmp_path: Path, text: str, params: dict[str, Any], host: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the server gets for one request, and its decision record. `host`: a host that samples, and
    answers so."""
    async with Playbook(tmp_path, text) as play:
        await play.handshake({"sampling": {}} if host is not None else {})
        answer = await play.sample(params, host=None if host is None else (lambda _: host))
        (record,) = [r for r in play.audit() if r.get("event") == "decision"]
    return answer, record


async def test_the_policys_price_changes_the_cost(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("dear", usage=USAGE)
    prices = "prices:\n  gpt-4o-mini: {input: 1, output: 2}\n"
    rules = "  - name: paid\n    action: allow\n    budget: {usd: 1, per: 1d}\n"
    answer, record = await sample(tmp_path, policy(llm.base_url, rules, extra=prices), prompt("x", 1000))
    assert answer["result"]["content"]["text"] == "dear"
    assert (record["cost_usd"], record["price_as_of"]) == (0.003, "policy")  # 1,000 x $1 + 1,000 x $2 per million


async def test_an_unpriced_model_under_a_usd_budget_is_refused_saying_how_to_price_it(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    answer, record = await sample(tmp_path, policy(llm.base_url, PAID, model="my-local-model"), prompt("x"))
    message = answer["error"]["message"]
    assert "usd budget of rule 'paid' cannot count this request" in message
    assert "model 'my-local-model' is not in the proxy's price table" in message
    assert "prices: {my-local-model: {input:" in message
    assert llm.requests == []
    assert record["decision"] == "deny"


async def test_an_unpriced_model_without_a_usd_budget_is_served_and_audited_as_unpriced(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    answer, record = await sample(tmp_path, policy(llm.base_url, OPEN, model="my-local-model"), prompt("x"))
    assert answer["result"]["content"]["text"] == "echo: x"
    assert (record["cost_usd"], record["price_as_of"]) == (None, "unpriced")


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


async def test_cached_input_is_charged_at_the_cached_price(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.enqueue(body=openai_cached)
    answer, record = await sample(tmp_path, policy(llm.base_url, OPEN), prompt("x"))
    assert answer["result"]["content"]["text"] == "cached"
    # 200 x $0.15 + 800 x $0.075 + 100 x $0.60 per million = 150 micro-dollars (uncached: 210)
    assert record["cost_usd"] == 0.00015


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
        text = policy(claude.base_url, OPEN, model="claude-sonnet-4-5", kind="anthropic")
        answer, record = await sample(tmp_path, text, prompt("x"))
    assert answer["result"]["content"]["text"] == "cached"
    # every input token counts (100 + 900 read from the cache); 100 x $3 + 900 x $0.30 + 10 x $15 per million
    assert (record["input_tokens"], record["cost_usd"]) == (1000, 0.00072)


async def test_a_host_that_samples_is_not_held_to_the_proxys_prices(tmp_path: Path, llm: FakeLLMServer) -> None:
    """Under a usd budget, a request the host answers with its own LLM is not the proxy's money: an unpriced
    model of ours does not refuse it (with fallback_on_host_error our LLM may be called, and it would)."""
    host = {"result": {"role": "assistant", "content": {"type": "text", "text": "from host"}, "model": "host-model"}}
    text = policy(llm.base_url, PAID, model="my-local-model")
    answer, record = await sample(tmp_path, text, prompt("x"), host=host)
    assert answer["result"]["content"]["text"] == "from host"
    assert llm.requests == []
    assert (record["provider"], "cost_usd" in record) == ("host", False)
