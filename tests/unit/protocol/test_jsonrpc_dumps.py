"""`jsonrpc.dumps`, which writes every message the relay rewrites or makes: orjson's bytes, and the
stdlib's where orjson refuses (integers past 64 bits, lone surrogates, non-string keys, deep nesting),
so that nothing a peer sent is changed on the way."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_sampling_proxy.protocol import jsonrpc

TEXT = st.text(st.characters(codec=None, exclude_categories=()))  # lone surrogates included
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**90), max_value=2**90)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=16,
)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)  # -0.0 stays -0.0
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@settings(max_examples=500, deadline=None, database=None)
@given(value=VALUES)
def test_what_is_written_reads_back_as_it_was(value: Any) -> None:
    """Any JSON value, read back by a parser that keeps big integers and surrogate escapes (the stdlib's):
    the same value, keys in the same order; compact, on one line."""
    written = jsonrpc.dumps({"jsonrpc": "2.0", "id": 1, "result": {"value": value}})
    assert b"\n" not in written
    assert same(json.loads(written)["result"]["value"], value)


def test_what_orjson_refuses_is_written_exactly_by_the_stdlib() -> None:
    message = {"id": 2**70, "text": "\ud800 lone", 1: "an int key"}
    assert jsonrpc.dumps(message) == b'{"id":1180591620717411303424,"text":"\\ud800 lone","1":"an int key"}'
    deep: Any = "end"
    for _ in range(300):  # past orjson's 254 levels
        deep = [deep]
    assert json.loads(jsonrpc.dumps(deep)) == deep
