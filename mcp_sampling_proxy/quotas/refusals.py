"""A limit's answer: a reservation held, or a refusal that says which limit, why and when to retry.

The records and the refusals' wording shared by the limits kept in this process and in files
(limiters.py) and those shared on Redis (redis_store.py), so both say the same thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

RESERVATION_TTL = 15 * 60.0  # seconds a reservation counts before it is presumed abandoned


@dataclass(frozen=True)
class Refusal:
    """A request a limit turned away."""

    limit: str  # which limit, as the rule writes it: "rate_limit" | "concurrent" | "budget"
    retry_after: float  # seconds until a retry can succeed; 0 when unknown or never (see permanent)
    message: str  # for the server: names the rule, the limit and when to retry
    key: str = ""
    permanent: bool = False  # the request can never pass this limit as it is (budget smaller than it)


@dataclass(frozen=True)
class Reservation:
    """Tokens set aside for one request in progress; settle or cancel it exactly once."""

    key: str
    id: str
    tokens: int
    per: float
    expires: float


def _label(kind: str, key: str, rule: str | None) -> str:
    return f"{kind} of rule '{rule}'" if rule is not None else f"{kind} '{key}'"


def rate_refusal(key: str, requests: int, per: float, retry_after: float, rule: str | None) -> Refusal:
    noun = "request" if requests == 1 else "requests"
    return Refusal(
        "rate_limit",
        retry_after,
        f"{_label('rate limit', key, rule)} exceeded: {requests} {noun} per {format_period(per)}; "
        f"retry in {format_wait(retry_after)}",
        key,
    )


def state_file_refusal(path: Path, error: OSError, key: str, *, tampered: bool = False) -> Refusal:
    """The refusal when the budgets file cannot be used; `tampered`: its seal did not verify."""
    if tampered:
        return Refusal(
            "state",
            0.0,
            f"the token budget's state file {path} was not written by mcp-sampling-proxy ({error}); budgeted "
            "requests are refused rather than trust it. If you changed or replaced it yourself, remove it (the "
            "budgets start again from zero); `mcp-sampling-proxy doctor` checks it",
            key=key,
        )
    return Refusal(
        "state",
        0.0,
        f"the token budget's state file {path} could not be used ({error}); the request is refused rather "
        "than run past its budget. Check the state directory (`mcp-sampling-proxy doctor`), or look for a "
        "process holding the file's lock",
        key=key,
    )


def concurrency_refusal(key: str, limit: int, active: int, rule: str | None) -> Refusal:
    noun = "request is" if active == 1 else "requests are"
    return Refusal(
        "concurrent",
        0.0,
        f"{_label('concurrency limit', key, rule)} reached: {active} {noun} already in progress "
        f"(concurrent: {limit}); retry when one finishes",
        key,
    )


def budget_refusal(
    key: str,
    limit: int,
    per: float,
    worst: int,
    used: int,
    reserved: int,
    resets_in: float,
    rule: str | None,
    *,
    too_small: bool,
) -> Refusal:
    """A budget's refusal: too small for the request ever, or exhausted until the window resets."""
    name = _label("token budget", key, rule)
    if too_small:
        return Refusal(
            "budget",
            0.0,
            f"{name} is too small for this request: it may need up to {worst:,} tokens (input estimate "
            f"plus maxTokens) and the budget is {limit:,} tokens per {format_period(per)}; "
            "lower maxTokens or raise the budget",
            key,
            permanent=True,
        )
    held = f" and {reserved:,} reserved by requests in progress" if reserved else ""
    left = max(0, limit - used - reserved)
    resets_in = max(0.0, resets_in)
    return Refusal(
        "budget",
        resets_in,
        f"{name} exhausted: {used:,} of {limit:,} tokens used{held} in this "
        f"{format_period(per)} window; {left:,} left and this request may need up to "
        f"{worst:,}; resets in {format_wait(resets_in)}",
        key,
    )


def format_period(seconds: float) -> str:
    """A limit's period as a policy would write it: '1d', '12h', '1m', '90s'."""
    if seconds == int(seconds):
        whole = int(seconds)
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if whole >= size and whole % size == 0:
                return f"{whole // size}{unit}"
        return f"{whole}s"
    return f"{seconds:g}s"


def format_wait(seconds: float) -> str:
    """A wait, rounded up, in its two largest units: '41 s', '2 min 5 s', '3 h 12 min', '2 d 4 h'."""
    secs = max(0, math.ceil(round(seconds, 6)))
    if secs < 60:
        return f"{secs} s"
    if secs < 3600:
        minutes, rest = divmod(secs, 60)
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    minutes = math.ceil(secs / 60)
    if minutes < 24 * 60:
        hours, rest = divmod(minutes, 60)
        return f"{hours} h" + (f" {rest} min" if rest else "")
    hours = math.ceil(minutes / 60)
    days, rest = divmod(hours, 24)
    return f"{days} d" + (f" {rest} h" if rest else "")
