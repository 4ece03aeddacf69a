"""A usd budget in the state file: micro-dollars in their own `spend` mapping, beside (never mixed with) the
token budget of the same rule and server, and refusals that speak dollars. The same on a real Redis:
tests/e2e/test_state_redis.py."""

from __future__ import annotations

from pathlib import Path

from mcp_sampling_proxy.quotas.limiters import TokenBudget, usd_micros
from mcp_sampling_proxy.quotas.refusals import USD, Refusal, Reservation, budget_refusal

T0 = 86400.0 * 20000 + 3600  # 01:00 UTC: a 1d window resets in 23 h


def test_usd_and_token_budgets_of_one_key_are_kept_apart(tmp_path: Path) -> None:
    path = tmp_path / "budgets.json"
    tokens, money = TokenBudget(path, durable=False), TokenBudget(path, durable=False, unit=USD)
    token_hold = tokens.reserve("r@s", 1000, 86400, 900, now=T0)
    money_hold = money.reserve("r@s", usd_micros(5), 86400, usd_micros(4.5), now=T0)
    assert isinstance(token_hold, Reservation) and isinstance(money_hold, Reservation)
    assert money_hold.unit == USD
    money.settle(money_hold, usd_micros(0.25), now=T0 + 1)
    tokens.settle(token_hold, 300, now=T0 + 1)
    assert (money.status("r@s", 86400, now=T0 + 2).used, tokens.status("r@s", 86400, now=T0 + 2).used) == (
        250_000,
        300,
    )
    refused = money.reserve("r@s", usd_micros(5), 86400, usd_micros(4.8), now=T0 + 3, rule="r")
    assert isinstance(refused, Refusal)
    assert refused.message == (
        "usd budget of rule 'r' exhausted: $0.25 of $5.00 spent in this 1d window; $4.75 left and this request "
        "may cost up to $4.80; resets in 23 h"
    )


def test_refusals_speak_dollars() -> None:
    exhausted = budget_refusal("r@s", 5_000_000, 86400, 610, 4_999_500, 0, 60.0, "paid", too_small=False, unit=USD)
    assert exhausted.message == (
        "usd budget of rule 'paid' exhausted: $5.00 of $5.00 spent in this 1d window; $0.0005 left and this "
        "request may cost up to $0.00061; resets in 1 min"
    )
    assert exhausted.retry_after == 60.0
    too_small = budget_refusal("r@s", 100_000, 3600, 600_000, 0, 0, 60.0, "paid", too_small=True, unit=USD)
    assert too_small.permanent
    assert too_small.message.startswith(
        "usd budget of rule 'paid' is too small for this request: it may cost up to $0.60 (input estimate plus "
        "maxTokens, at the model's price) and the budget is $0.10 per 1h; lower maxTokens or raise the budget"
    )


def test_dollars_become_exact_micro_dollars() -> None:
    assert [usd_micros(d) for d in (5, 0.1, 0.0016, 19.99)] == [5_000_000, 100_000, 1_600, 19_990_000]
