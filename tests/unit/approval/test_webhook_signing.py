"""The webhook answer's checks (approval/webhook_signing.py) for what the end-to-end tests do not reach:
a stale or future timestamp, a missing one, a body that is not an answer, a name too long."""

from __future__ import annotations

import json
import time

import pytest

from mcp_sampling_proxy.approval.webhook_signing import BadAnswer, signed_headers, verify_answer

SECRET = b"shared"
DIGEST = "d" * 64


def body(**fields: object) -> bytes:
    answer = {"request_id": "r1", "request_sha256": DIGEST, "decision": "approve", "approver": "alice", **fields}
    return json.dumps(answer).encode()


def check(raw: bytes, headers: dict[str, str], now: float | None = None) -> str:
    return verify_answer(SECRET, headers, raw, request_id="r1", digest=DIGEST, now=now).approver


def test_a_good_answer_passes() -> None:
    raw = body()
    assert check(raw, signed_headers(SECRET, raw)) == "alice"


@pytest.mark.parametrize("skew", [-301, 301])
def test_an_answer_signed_over_five_minutes_away_is_refused(skew: int) -> None:
    raw = body()
    headers = signed_headers(SECRET, raw, now=time.time() + skew)
    with pytest.raises(BadAnswer, match="more than 300 s from now"):
        check(raw, headers)


def test_an_answer_without_a_timestamp_is_refused() -> None:
    raw = body()
    headers = signed_headers(SECRET, raw)
    del headers["X-MCP-Sampling-Proxy-Timestamp"]
    with pytest.raises(BadAnswer, match="no X-MCP-Sampling-Proxy-Timestamp"):
        check(raw, headers)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"[1, 2]", "not a JSON object"),
        (b"yes", "not JSON"),
        (body(decision="maybe"), "neither approve nor deny"),
        (body(approver="x" * 65), "not a name of 1 to 64 characters"),
        (body(approver="   "), "not a name of 1 to 64 characters"),
    ],
)
def test_a_signed_body_that_is_no_answer_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(BadAnswer, match=why):
        check(raw, signed_headers(SECRET, raw))
