"""A validator's verdict is read strictly: anything but one well-formed verdict object is a failed check."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.services.sampling.checks import CheckFailed, Verdict, parse_verdict


@pytest.mark.parametrize(
    ("raw", "verdict"),
    [
        (b'{"verdict": "allow"}', Verdict("allow", None, None)),
        (b'{"version": 1, "verdict": "deny", "reason": "card number"}\n', Verdict("deny", "card number", None)),
        (b'{"verdict": "modify", "text": ""}', Verdict("modify", None, "")),
    ],
)
def test_a_well_formed_verdict_is_read(raw: bytes, verdict: Verdict) -> None:
    assert parse_verdict(raw) == verdict


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"", "answered something that is not one JSON verdict: 'nothing'"),
        (b'{"verdict": "allow"}\n{"verdict": "deny"}', "answered something that is not one JSON verdict"),
        (b'["allow"]', "answered a JSON list, not a verdict object"),
        (b'{"verdict": "allow", "verdict": "deny"}', "answered something that is not one JSON verdict"),
        (b'{"verdict": "ALLOW"}', "its verdict 'ALLOW' is not one of allow, deny, modify"),
        (b'{"verdict": "allow", "confidence": 0.9}', "its verdict has unknown keys ('confidence')"),
        (b'{"version": 2, "verdict": "allow"}', "its verdict is version 2; this proxy speaks 1"),
        (b'{"version": true, "verdict": "allow"}', "its verdict is version True"),
        (b'{"verdict": "deny", "reason": 7}', "its reason is not a string"),
        (b'{"verdict": "modify"}', "its modify verdict has no text"),
        (b'{"verdict": "deny", "text": "x"}', "its deny verdict has a text"),
    ],
)
def test_anything_else_is_a_failed_check(raw: bytes, why: str) -> None:
    with pytest.raises(CheckFailed) as failed:
        parse_verdict(raw)
    assert str(failed.value).startswith(why)
