"""The price table: matching model names (snapshots, aliases, never a bare prefix), the policy's
prices over the shipped ones, costs in micro-dollars, and the `prices:` section's mistakes."""

from __future__ import annotations

from decimal import Decimal

import pytest

from mcp_sampling_proxy.config.prices import AS_OF, POLICY, SHIPPED, Price, PriceTable, format_usd
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError

TABLE = PriceTable()


@pytest.mark.parametrize(
    ("model", "priced_as"),
    [
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("GPT-4o-Mini", "gpt-4o-mini"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),  # a dated snapshot: its model's price, not gpt-4o's
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),  # not claude-sonnet-4's
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),  # Vertex AI's spelling
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("o3-2025-04-16", "o3"),
        ("gpt-4o-2024-05-13", "gpt-4o-2024-05-13"),  # a snapshot with a price of its own: the longest name wins
        ("o1-2024-12-17", "o1"),
    ],
)
def test_a_model_and_its_snapshots_have_its_price(model: str, priced_as: str) -> None:
    assert TABLE.lookup(model) == SHIPPED[priced_as]


@pytest.mark.parametrize("model", ["gpt-5-pro", "gpt-4o-audio-preview", "o3-pro", "llama3", "gpt-4o-minix", ""])
def test_a_longer_name_is_not_priced_as_its_prefix(model: str) -> None:
    assert TABLE.lookup(model) is None


def test_the_policys_price_comes_first_and_prices_what_the_table_does_not_know() -> None:
    ours = Price(Decimal("1"), Decimal("2"), as_of=POLICY)
    table = PriceTable((("gpt-4o-mini", ours), ("my-local-model", Price(Decimal(0), Decimal(0), as_of=POLICY))))
    assert table.lookup("gpt-4o-mini-2024-07-18") == ours
    assert table.lookup("gpt-4o") == SHIPPED["gpt-4o"]
    assert table.lookup("my-local-model") is not None
    # a command provider: the policy's prices only
    assert table.lookup("gpt-4o", shipped=False) is None
    assert table.lookup("gpt-4o-mini", shipped=False) == ours


def test_costs_are_exact_micro_dollars_rounded_up() -> None:
    mini = SHIPPED["gpt-4o-mini"]
    assert mini.as_of == AS_OF
    assert mini.cost_micros(1000, 1000) == 750  # 1,000 x 0.15 + 1,000 x 0.60, no float error
    assert mini.cost_micros(1, 0) == 1  # 0.15 micro-dollars rounds up, never down to free
    # 800 of 1,000 input tokens read from the cache: 200 x 0.15 + 800 x 0.075 + 100 x 0.60
    assert mini.cost_micros(1000, 100, cached_input_tokens=800) == 150
    # no cached price: cached input is charged as input
    assert Price(Decimal(1), Decimal(2)).cost_micros(10, 1, cached_input_tokens=5) == 12


def test_amounts_read_as_people_write_them() -> None:
    assert [format_usd(n) for n in (0, 750, 1_500, 100_000, 4_200_000, 1_234_560_000)] == [
        "$0.00",
        "$0.00075",
        "$0.0015",
        "$0.10",
        "$4.20",
        "$1,234.56",
    ]


def test_the_prices_section_is_read_as_written() -> None:
    settings = parse_settings(
        "prices:\n  gpt-4o-mini: {input: 0.1, output: 0.3, cached_input: 0.05}\n  free-model: {input: 0, output: 0}\n",
        "policy.yaml",
    )
    price = settings.prices.lookup("gpt-4o-mini")
    assert price == Price(Decimal("0.1"), Decimal("0.3"), Decimal("0.05"), as_of=POLICY)
    assert price.cost_micros(10, 10) == 4
    assert settings.prices.lookup("free-model") == Price(Decimal(0), Decimal(0), as_of=POLICY)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("prices:\n  m: {input: 1}\n", "policy.yaml:2:6: prices.m needs output (e.g. prices: {gpt-4o-mini: {input:"),
        ("prices:\n  m: {input: -1, output: 1}\n", "policy.yaml:2:14: prices.m.input must be between 0 and inf"),
        ("prices:\n  m: {input: 1, output: 1, cache: 1}\n", "unknown key 'cache' in prices.m"),
        ("prices:\n  m: {input: cheap, output: 1}\n", "prices.m.input must be a number, got 'cheap'"),
        (
            "rules:\n  - name: r\n    action: allow\n    budget: {usd: 0, per: 1d}\n",
            "rules[0].budget.usd must be more than 0 dollars",
        ),
        (
            "rules:\n  - name: r\n    action: allow\n    budget: {usd: 5}\n",
            "needs per (e.g. budget: {usd: 5, per: 1d})",
        ),
        ("rules:\n  - name: r\n    action: allow\n    budget: {per: 1d}\n", "rules[0].budget needs tokens or usd"),
    ],
)
def test_mistakes_name_the_place_and_what_to_write(text: str, error: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_settings(text, "policy.yaml")
    assert error in str(caught.value)


def test_a_rule_may_have_a_token_and_a_usd_budget() -> None:
    settings = parse_settings(
        "rules:\n  - name: r\n    action: allow\n    budget: {tokens: 1000, usd: 2.5, per: 12h}\n", "policy.yaml"
    )
    budget = settings.rules[0].budget
    assert budget is not None and (budget.tokens, budget.usd, budget.per) == (1000, 2.5, 43200.0)
