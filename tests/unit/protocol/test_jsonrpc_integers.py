"""Integers past 64 bits: `parse` (orjson) reads them as floats, so a message that is encoded again is read
again exactly (`parse_keeping_integers`) when `has_long_integers` says it may hold one."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.protocol import jsonrpc

BIG = 123456789012345678901234


@pytest.mark.parametrize(
    ("line", "long"),
    [
        (b'{"id":1,"result":{"n":1234567890123456789}}', True),  # 19 digits: past what every reader keeps
        (b'{"id":1,"result":{"n":123456789012345678}}', False),  # 18
        (b'{"id":1,"result":{"n":-99999999999999999999}}', True),
        (b'{"id":1,"result":{"text":"call 12345678901234567890 now"}}', True),  # in a string: read again anyway
        (b'{"id":1,"result":{"x":1.5e300,"y":0.000000000000000001}}', False),  # digits split by the point
        (b'{"id":1,"result":{"n":123456789 012345678}}', False),  # split by a space
        (b"", False),
    ],
)
def test_a_run_of_19_digits_is_what_marks_a_line(line: bytes, long: bool) -> None:
    assert jsonrpc.has_long_integers(line) is long


def test_a_line_read_to_be_encoded_again_keeps_its_integers_exact() -> None:
    line = b'{"jsonrpc":"2.0","id":7,"result":{"n":%d,"small":2}}' % BIG
    assert jsonrpc.parse(line)["result"]["n"] != BIG  # the fast reading
    kept = jsonrpc.parse_keeping_integers(line)
    assert kept["result"] == {"n": BIG, "small": 2}
    assert str(BIG).encode() in jsonrpc.dumps(kept)
    with pytest.raises(ValueError):
        jsonrpc.parse_keeping_integers(b'{"n": NaN}')  # still strict
