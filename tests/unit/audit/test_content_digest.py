"""Content digests and the chain's record hashes are taken from the same canonical bytes however they are
made: orjson where its text is the same, the stdlib encoder where it would differ (small floats, what JSON
from the wire cannot hold). A hash made otherwise than `verify` makes it breaks the chain."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_sampling_proxy.audit.recorder import SMALL_RECORD_NODES, SMALL_RECORD_TEXT, _is_small
from mcp_sampling_proxy.audit.records import canonical, digest, record_hash

ODD = [
    {"text": "".join(chr(i) for i in range(0x100)) + "\u2028\u2029\ufeff\U0001f600 / \\ \" '"},
    {"floats": [0.1, -0.0, 1e15, 1e16, 1.5e300, 1e-4, 1e-5, 3.2e-9, 5e-324, 123.456]},
    {"big": 2**70, "negative": -(2**65)},
    {1: "an int key", 2: {"z": 1, "a": 2}},
    {"lone": "\ud800"},
    {"words": "e-5 and 0.00001 as text"},
]


def canonical_digest(value: Any) -> dict[str, Any]:
    data = canonical(value)
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.mark.parametrize("value", ODD)
def test_a_digest_is_of_the_canonical_bytes_whatever_the_value_holds(value: Any) -> None:
    assert digest(value) == canonical_digest(value)


def test_floats_of_every_size_digest_as_their_canonical_text() -> None:
    rng = random.Random(7)
    for exponent in range(-320, 300, 3):
        value = {"messages": [{"x": rng.random() * 10.0**exponent, "y": -rng.random() * 10.0**exponent}]}
        assert digest(value) == canonical_digest(value), value


def test_a_request_is_small_below_both_bounds_and_not_above_either() -> None:
    request = {"messages": [{"role": "user", "content": {"type": "text", "text": "hello " * 20}}], "maxTokens": 50}
    assert _is_small(request)
    assert not _is_small({"text": "x" * SMALL_RECORD_TEXT})
    assert not _is_small({"many": [0] * SMALL_RECORD_NODES})
    assert _is_small({"lone": "\ud800"})  # text JSON cannot carry as it is still counts as text
    assert not _is_small({"lone": "\ud800", "many": [0] * SMALL_RECORD_NODES})


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)  # past 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None, database=None)
@given(record=st.dictionaries(st.text(max_size=10), JSON, max_size=8), extra=JSON)
def test_a_record_hash_and_a_digest_are_of_the_canonical_bytes(record: dict[str, Any], extra: Any) -> None:
    """Any JSON a record or a content can hold (hypothesis draws them): the same bytes as `canonical`."""
    record = {**record, "hash": "not hashed", "extra": extra}
    unhashed = {k: v for k, v in record.items() if k != "hash"}
    assert record_hash(record) == hashlib.sha256(canonical(unhashed)).hexdigest()
    if not isinstance(extra, str):  # a string's digest is of its UTF-8 text
        assert digest(extra) == canonical_digest(extra)
