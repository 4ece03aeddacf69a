"""`policy explain` (run in process) shows a rule's usd budget and the price it counts the chosen model at."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.support import run_subcommand, write_policy

from mcp_sampling_proxy.config.prices import AS_OF

PARAMS = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 1000}


def explain(tmp_path: Path, model: str, extra: str = "") -> str:
    policy = (
        f"llm:\n  providers:\n    openai:\n      type: openai\n      models: [{model}]\n{extra}"
        "rules:\n  - name: paid\n    action: allow\n    budget: {tokens: 50000, usd: 5, per: 1d}\n"
    )
    request = tmp_path / "request.json"
    request.write_text(json.dumps(PARAMS), encoding="utf-8")
    done = run_subcommand(["policy", "explain", write_policy(tmp_path, policy), "--request", str(request)], check=True)
    return done.stdout


def test_explain_shows_the_usd_budget_and_the_shipped_price(tmp_path: Path) -> None:
    out = explain(tmp_path, "gpt-4o-mini")
    assert "  budget: 50000 tokens and $5.00 per 1d" in out
    assert (
        f"  price: gpt-4o-mini: $0.15 input, $0.60 output, cached input $0.075 per million tokens (the shipped "
        f"table, list prices as of {AS_OF}); this request may cost up to $0.0006" in out
    )


def test_explain_shows_the_policys_price(tmp_path: Path) -> None:
    out = explain(tmp_path, "gpt-4o-mini", "prices:\n  gpt-4o-mini: {input: 1, output: 2}\n")
    assert "  price: gpt-4o-mini: $1.00 input, $2.00 output per million tokens (the policy's prices:)" in out


def test_explain_says_an_unpriced_model_is_refused_and_how_to_price_it(tmp_path: Path) -> None:
    out = explain(tmp_path, "my-local-model")
    assert "  price: my-local-model is unpriced, so the usd budget refuses the request; price it in the policy: " in out
    assert "prices: {my-local-model: {input: ..., output: ...}}" in out
