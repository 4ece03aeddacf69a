"""What a model's tokens cost: the price table shipped with the proxy, the policy's `prices:` over it.

A `usd` budget (a rule's `budget: {usd: 5, per: 1d}`) and the audit's `cost_usd` need a price per
model. The table below holds the list prices of common OpenAI and Anthropic models as published on
`AS_OF`, in USD per million tokens: input, output, and cached input (what the provider charges for
input it read from its prompt cache). Prices change: the policy's `prices:` section overrides any
of them and prices models the table does not know (config/price_grammar.py reads it).

Matching a model name: exactly (case-insensitive), or a name in the table followed by a snapshot
suffix (`gpt-4o-2024-08-06`, `claude-sonnet-4-5-20250929`, `claude-sonnet-4-5@20250929`,
`claude-3-5-haiku-latest`), the longest such name winning. A plain prefix is not enough: `gpt-5-pro`
costs twelve times `gpt-5`, and must not be priced as it. A model with no price is "unpriced": a
`usd` budget refuses it (it could not count what it spends) unless the policy prices it.

List prices only: the batch and priority tiers, regional endpoints and long-context surcharges (Claude
Sonnet past 200K input tokens) are not modelled; price them in the policy where they apply.

The shipped table prices only providers that speak the vendors' HTTP APIs (`openai`, `anthropic`); a
`command` provider (a CLI on a subscription, or billed on its own meter) and the console are
unpriced unless the policy prices their model.

Amounts are counted in micro-dollars (1e-6 USD), whole numbers, so the budgets' state (a JSON file,
Redis's integer counters) adds them exactly; a price times tokens is exactly micro-dollars, as the
prices are per million tokens. Costs are rounded up, never down.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from decimal import Decimal

from msgspec import Struct

AS_OF = "2025-11-24"  # the date the shipped prices were the vendors' list prices
POLICY = "policy"  # a price's source when the policy's prices: section gave it
UNPRICED = "unpriced"  # what the audit says of a model without a price

# A snapshot or alias after a model name: -2024-08-06, -20250929, @20250929, -0613, -latest
_SNAPSHOT = re.compile(r"(?:[-@](?:\d{4}-\d{2}-\d{2}|\d{8}|\d{4}|latest))?")


class Price(Struct, frozen=True):
    """USD per million tokens of one model; `as_of`: the table's date, or "policy"."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None  # None: cached input is charged as input
    as_of: str = AS_OF

    def cost_micros(self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> int:
        """Micro-dollars, rounded up, for `input_tokens` (of which `cached_input_tokens` were read
        from the provider's cache) and `output_tokens`."""
        cached = min(max(0, cached_input_tokens), max(0, input_tokens))
        cached_rate = self.input if self.cached_input is None else self.cached_input
        fresh = max(0, input_tokens) - cached
        return math.ceil(fresh * self.input + cached * cached_rate + max(0, output_tokens) * self.output)


def _p(input: str, output: str, cached_input: str | None) -> Price:
    return Price(Decimal(input), Decimal(output), None if cached_input is None else Decimal(cached_input))


# USD per million tokens: input, output, cached input (OpenAI: cached input; Anthropic: cache reads)
SHIPPED: dict[str, Price] = {
    # OpenAI
    "gpt-5": _p("1.25", "10.00", "0.125"),
    "gpt-5-mini": _p("0.25", "2.00", "0.025"),
    "gpt-5-nano": _p("0.05", "0.40", "0.005"),
    "gpt-4.1": _p("2.00", "8.00", "0.50"),
    "gpt-4.1-mini": _p("0.40", "1.60", "0.10"),
    "gpt-4.1-nano": _p("0.10", "0.40", "0.025"),
    "gpt-4o": _p("2.50", "10.00", "1.25"),
    "gpt-4o-mini": _p("0.15", "0.60", "0.075"),
    "gpt-4o-2024-05-13": _p("5.00", "15.00", None),  # the first gpt-4o snapshot kept its launch price
    "o1": _p("15.00", "60.00", "7.50"),
    "o3": _p("2.00", "8.00", "0.50"),
    "o4-mini": _p("1.10", "4.40", "0.275"),
    "o3-mini": _p("1.10", "4.40", "0.55"),
    # Anthropic
    "claude-opus-4-5": _p("5.00", "25.00", "0.50"),
    "claude-opus-4-1": _p("15.00", "75.00", "1.50"),
    "claude-opus-4": _p("15.00", "75.00", "1.50"),
    "claude-sonnet-4-5": _p("3.00", "15.00", "0.30"),
    "claude-sonnet-4": _p("3.00", "15.00", "0.30"),
    "claude-3-7-sonnet": _p("3.00", "15.00", "0.30"),
    "claude-haiku-4-5": _p("1.00", "5.00", "0.10"),
    "claude-3-5-haiku": _p("0.80", "4.00", "0.08"),
}


class PriceTable(Struct, frozen=True):
    """The policy's prices over the shipped ones. `lookup` finds a model's price, or None."""

    policy: tuple[tuple[str, Price], ...] = ()  # (model name as the policy writes it, price), in order

    def lookup(self, model: str, *, shipped: bool = True) -> Price | None:
        """The price of `model`: the policy's first, then (when `shipped`) the table's."""
        return _lookup(self.policy, model, shipped)


@functools.lru_cache(maxsize=256)
def _lookup(policy: tuple[tuple[str, Price], ...], model: str, shipped: bool) -> Price | None:
    """PriceTable.lookup's answer, kept: each sampling request asks it twice (its budget, then its cost),
    and a walk of the shipped table costs ~10 us; a session asks for a few models only."""
    found = _match(model, policy)
    if found is None and shipped:
        found = _match(model, SHIPPED.items())
    return found


def _match(model: str, entries: Iterable[tuple[str, Price]]) -> Price | None:
    """The price whose name is `model`, or the longest whose name `model` is plus a snapshot suffix."""
    wanted = model.strip().lower()
    best: tuple[int, Price] | None = None
    for name, price in entries:
        key = name.lower()
        if wanted.startswith(key) and _SNAPSHOT.fullmatch(wanted[len(key) :]) and (best is None or len(key) > best[0]):
            best = (len(key), price)
    return None if best is None else best[1]


def usd(micros: int | float) -> float:
    """Micro-dollars as dollars, for records (six decimals: nothing is lost)."""
    return round(micros / 1_000_000, 6)


def format_usd(micros: int | float) -> str:
    """Dollars for people: $4.20, $0.0123, $0.000045 (cents unless the amount is below them)."""
    dollars = micros / 1_000_000
    if dollars == 0 or abs(dollars) >= 0.1:
        return f"${dollars:,.2f}"
    return "$" + f"{dollars:.6f}".rstrip("0").rstrip(".")
