"""A limit's answer: a reservation held, or a refusal that says which limit, why and when to retry.

The records and the refusals' wording shared by the limits kept in this process and in files
(limiters.py) and those shared on Redis (redis_store.py), so both say the same thing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TypedDict

from msgspec import Struct

from mcp_sampling_proxy.config.prices import format_usd
from mcp_sampling_proxy.quotas.integrity import start_anew

TOKENS = "tokens"  # a budget counted in tokens
USD = "usd"  # a budget counted in money: amounts are micro-dollars (config/prices.py)
RESERVATION_TTL = 15 * 60.0  # seconds a reservation counts before it is presumed abandoned


class Refusal(Struct, frozen=True):
    """A request a limit turned away."""

    limit: str  # which limit, as the rule writes it: "rate_limit" | "concurrent" | "budget"
    retry_after: float  # seconds until a retry can succeed; 0 when unknown or never (see permanent)
    message: str  # for the server: names the rule, the limit and when to retry
    key: str = ""
    permanent: bool = False  # the request can never pass this limit as it is (budget smaller than it)


class Reservation(Struct, frozen=True):
    """An amount set aside for one request in progress; settle or cancel it exactly once. `tokens` is
    the amount in the budget's `unit`: tokens, or micro-dollars for a `usd` budget."""

    key: str
    id: str
    tokens: int
    per: float
    expires: float
    unit: str = TOKENS


class BudgetUse(TypedDict):
    """One budget's current window, read for a console to show (from the file or from Redis)."""

    used: int  # 0 once the window ended
    reserved: int  # held by requests in flight (reservations not yet expired)
    per: float  # the window's length, seconds
    resets_at: float | None  # None once the window ended


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


def state_file_refusal(path: Path, error: OSError, key: str, *, tampered: bool = False, gone: bool = False) -> Refusal:
    """The refusal when the budgets file cannot be used; `tampered`: its seal did not verify; `gone`: a
    proxy wrote it and it is not there (error says so, and how to start anew)."""
    if gone:
        return Refusal(
            "state",
            0.0,
            f"the token budget's state file cannot be trusted: {error}; budgeted requests are refused rather "
            "than start again from zero; `mcp-sampling-proxy doctor` checks it",
            key=key,
        )
    if tampered:
        return Refusal(
            "state",
            0.0,
            f"the token budget's state file {path} was not written by mcp-sampling-proxy ({error}); budgeted "
            f"requests are refused rather than trust it. If you changed or replaced it yourself, {start_anew(path)} "
            "(the budgets start again from zero); `mcp-sampling-proxy doctor` checks it",
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


def amount(value: int, unit: str) -> str:
    """An amount of a budget's unit for people: '1,234 tokens', '$4.20'."""
    return format_usd(value) if unit == USD else f"{value:,} tokens"


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
    unit: str = TOKENS,
) -> Refusal:
    """A budget's refusal: too small for the request ever, or exhausted until the window resets.
    Amounts are in `unit` (micro-dollars for a usd budget)."""
    money = unit == USD
    name = _label("usd budget" if money else "token budget", key, rule)
    period = format_period(per)
    if too_small:
        need = (
            f"it may cost up to {amount(worst, unit)} (input estimate plus maxTokens, at the model's price)"
            if money
            else f"it may need up to {worst:,} tokens (input estimate plus maxTokens)"
        )
        return Refusal(
            "budget",
            0.0,
            f"{name} is too small for this request: {need} and the budget is {amount(limit, unit)} per {period}; "
            "lower maxTokens or raise the budget",
            key,
            permanent=True,
        )
    held = (
        f" and {format_usd(reserved) if money else f'{reserved:,}'} reserved by requests in progress"
        if reserved
        else ""
    )
    left = max(0, limit - used - reserved)
    resets_in = max(0.0, resets_in)
    if money:
        return Refusal(
            "budget",
            resets_in,
            f"{name} exhausted: {amount(used, unit)} of {amount(limit, unit)} spent{held} in this {period} window; "
            f"{amount(left, unit)} left and this request may cost up to {amount(worst, unit)}; "
            f"resets in {format_wait(resets_in)}",
            key,
        )
    return Refusal(
        "budget",
        resets_in,
        f"{name} exhausted: {used:,} of {limit:,} tokens used{held} in this "
        f"{period} window; {left:,} left and this request may need up to "
        f"{worst:,}; resets in {format_wait(resets_in)}",
        key,
    )


def unpriced_refusal(key: str, rule: str | None, provider: str, model: str, *, command: bool) -> Refusal:
    """A usd budget cannot count what a model without a price spends: refused, saying how to price it."""
    why = (
        f"provider '{provider}' runs a command, whose spending the proxy cannot price by itself"
        if command
        else f"model '{model}' is not in the proxy's price table"
    )
    return Refusal(
        "budget",
        0.0,
        f"{_label('usd budget', key, rule)} cannot count this request: {why}. Price it in the policy "
        f"(USD per million tokens): prices: {{{model}: {{input: 0.15, output: 0.6}}}} (the numbers from "
        "your provider's price list; cached_input is optional), or let a token budget govern this rule instead",
        key,
        permanent=True,
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
