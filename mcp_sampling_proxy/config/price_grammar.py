"""The policy's `prices:` section: USD per million tokens per model, over the shipped table.

    prices:
      gpt-4o-mini: {input: 0.15, output: 0.6, cached_input: 0.075}
      my-local-model: {input: 0, output: 0}

`input` and `output` are required (a price missing one would count that half as free);
`cached_input` is optional (cached input is then charged as input). Numbers are read as written
(decimal, not binary floating point), so 0.15 per million tokens is exactly 0.15 micro-dollars each.
"""

from __future__ import annotations

from decimal import Decimal

from mcp_sampling_proxy.config.prices import POLICY, Price, PriceTable
from mcp_sampling_proxy.notation.yamlnodes import Node

PRICE_KEYS = ("input", "output", "cached_input")
EXAMPLE = "e.g. prices: {gpt-4o-mini: {input: 0.15, output: 0.6, cached_input: 0.075}}, USD per million tokens"


def parse_prices(node: Node) -> PriceTable:
    """The `prices:` mapping of model name to price."""
    entries: list[tuple[str, Price]] = []
    for model, entry in node.mapping().items():
        given = entry.mapping(PRICE_KEYS)
        missing = [key for key in ("input", "output") if key not in given]
        if missing:
            raise entry.error(f"{entry.label} needs {' and '.join(missing)} ({EXAMPLE})")
        cached = _dollars(given["cached_input"]) if "cached_input" in given else None
        entries.append((model, Price(_dollars(given["input"]), _dollars(given["output"]), cached, as_of=POLICY)))
    return PriceTable(tuple(entries))


def _dollars(node: Node) -> Decimal:
    """A price: a number of at least 0, as the policy writes it (0.1 stays 0.1, not 0.1000000000000000055)."""
    return Decimal(str(node.number(minimum=0)))
