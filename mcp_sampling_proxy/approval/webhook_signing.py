"""The webhook channel's wire format: the signed approval request the proxy POSTs, and the signed answer it
accepts (docs/guides/approvals.md shows both and a receiver).

Both directions are signed the same way, with the secret the proxy and the receiver share:
`X-MCP-Sampling-Proxy-Signature: sha256=HEX`, HMAC-SHA256 over `TIMESTAMP.BODY` (the decimal Unix time of
`X-MCP-Sampling-Proxy-Timestamp`, a dot, then the raw body bytes), so neither a changed body nor an old
timestamp passes. The answer is bound to one request: it must repeat the request's `request_id` (fresh for
every request, so an answer recorded for one cannot be replayed for another) and its `request_sha256`
(the digest of the exact params that will run).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any, Literal

from msgspec import Struct

SIGNATURE_HEADER = "X-MCP-Sampling-Proxy-Signature"
TIMESTAMP_HEADER = "X-MCP-Sampling-Proxy-Timestamp"
REQUEST_ID_HEADER = "X-MCP-Sampling-Proxy-Request-Id"
MAX_SKEW = 300  # s; an answer signed further from now than this (either way) is refused
MAX_APPROVER = 64  # characters of an approver's name
Decision = Literal["approve", "deny"]


def canonical(value: Any) -> bytes:
    """The bytes `request_sha256` digests: JSON with sorted keys, no spaces, UTF-8 (the audit log's
    `content.request.sha256` is the same digest of the same params)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return text.encode("utf-8", "surrogatepass")


def request_sha256(params: Any) -> str:
    return hashlib.sha256(canonical(params)).hexdigest()


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The header value: `sha256=` and the hex HMAC-SHA256 of `TIMESTAMP.BODY`."""
    return "sha256=" + hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()


def signed_headers(secret: bytes, body: bytes, now: float | None = None) -> dict[str, str]:
    timestamp = str(int(time.time() if now is None else now))
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(secret, timestamp, body)}


class BadAnswer(ValueError):
    """Why an answer is refused (safe to log and audit: it never holds the secret)."""


class Answer(Struct, frozen=True):
    decision: Decision
    approver: str


def verify_answer(
    secret: bytes,
    headers: Any,
    body: bytes,
    *,
    request_id: str,
    digest: str,
    now: float | None = None,
) -> Answer:
    """The receiver's answer when its signature, time and binding to this request hold; BadAnswer otherwise."""
    timestamp = headers.get(TIMESTAMP_HEADER) or ""
    given = headers.get(SIGNATURE_HEADER) or ""
    if not timestamp.isascii() or not timestamp.isdigit():
        raise BadAnswer(f"it has no {TIMESTAMP_HEADER} header (Unix seconds)")
    if not hmac.compare_digest(given.encode("ascii", "replace"), signature(secret, timestamp, body).encode("ascii")):
        raise BadAnswer(f"its {SIGNATURE_HEADER} does not match (not signed with the shared secret, or changed)")
    if abs((time.time() if now is None else now) - int(timestamp)) > MAX_SKEW:
        raise BadAnswer(f"it was signed at {timestamp}, more than {MAX_SKEW} s from now")
    try:
        answer = json.loads(body)
    except ValueError:
        raise BadAnswer("its body is not JSON") from None
    if not isinstance(answer, dict):
        raise BadAnswer("its body is not a JSON object")
    if answer.get("request_id") != request_id:
        raise BadAnswer("it answers another request (its request_id is not this request's)")
    if answer.get("request_sha256") != digest:
        raise BadAnswer("its request_sha256 is not the digest of what would run")
    decision = answer.get("decision")
    if decision not in ("approve", "deny"):
        raise BadAnswer("its decision is neither approve nor deny")
    approver = answer.get("approver")
    if not isinstance(approver, str) or not approver.strip() or len(approver) > MAX_APPROVER:
        raise BadAnswer(f"its approver is not a name of 1 to {MAX_APPROVER} characters")
    return Answer(decision, approver.strip())
