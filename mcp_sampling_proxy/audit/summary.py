"""Counting an audit log: per server (and per replica) the requests, what was allowed and denied, the
tokens, the median latency and the cost, and the tool and sampling-check decisions."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from msgspec import Struct, field

from mcp_sampling_proxy.audit.log_lines import InputError
from mcp_sampling_proxy.audit.records import is_decision
from mcp_sampling_proxy.audit.shown import TOOL_METHODS
from mcp_sampling_proxy.config.prices import UNPRICED, usd
from mcp_sampling_proxy.notation.units import DURATION_FORMS, parse_duration
from mcp_sampling_proxy.notation.vocabulary import ALLOWED_OUTCOMES as ALLOWED
from mcp_sampling_proxy.notation.vocabulary import REFUSED_OUTCOMES as DENIED


def parse_since(text: str, now: datetime | None = None) -> datetime:
    now = now or datetime.now(UTC)
    try:
        return now - timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    when = parse_ts(text)
    if when is None:
        raise InputError(f"--since {text!r} is neither a duration ({DURATION_FORMS}) nor an ISO 8601 time")
    return when


def parse_ts(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


UNSOLICITED = "unsolicited"  # the reason of a sampling request refused with no host request in flight


MAX_PER_CALL = "max_per_call"  # the limit of one refused past sampling.max_per_call


class ServerStats(Struct):
    requests: int = 0  # the server's sampling and elicitation requests
    allowed: int = 0
    denied: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0  # of the proxy's own LLM calls that were priced
    unpriced: int = 0  # LLM calls of the proxy whose model had no price (their cost is not in cost_micros)
    costed: int = 0  # records that say what they cost (logs of older versions have none)
    tool_calls_allowed: int = 0  # host tools/call a tools: rule allowed, or a human approved
    tool_calls_denied: int = 0  # ... a tools: rule refused, or a human refused (or nobody answered)
    tool_calls_held: int = 0  # ... refused because the tool changed since it was pinned
    tools_hidden: int = 0  # tools/list decisions that hid tools from the host (a deny rule, untrusted pins)
    tool_changes: int = 0  # pinned tools that changed, appeared or went (tool_change records)
    unsolicited: int = 0  # sampling refused: no host request in flight
    max_per_call: int = 0  # sampling refused: past sampling.max_per_call
    checks_denied: int = 0  # sampling refused by an external check (or its failure, with on_error: deny)
    secrets_found: int = 0  # requests whose prompt or answer held credentials (answer_secrets, prompt_secrets)
    secrets_denied: int = 0  # ... and were refused for it (sampling.on_secret: deny)
    latencies: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "allowed": self.allowed,
            "denied": self.denied,
            "errors": self.errors,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": usd(self.cost_micros),
            "unpriced": self.unpriced,
            "p50_latency_ms": p50(self.latencies),
            "tools": {
                "calls_allowed": self.tool_calls_allowed,
                "calls_denied": self.tool_calls_denied,
                "calls_held": self.tool_calls_held,
                "hidden": self.tools_hidden,
                "changes": self.tool_changes,
            },
            "refused": {
                "unsolicited": self.unsolicited,
                "max_per_call": self.max_per_call,
                "checks": self.checks_denied,
                "secrets": self.secrets_denied,
            },
            "secrets_found": self.secrets_found,
        }


def p50(values: list[int]) -> float | None:
    """The median (average of the middle two for an even count), None without values."""
    return statistics.median(values) if values else None


def summarize(records: Sequence[dict[str, Any]], since: datetime | None = None) -> dict[str, ServerStats]:
    """Per-server numbers. A request is counted once (by proxy_id, session and request_id) with the outcome
    of its last record (a response rejected on review follows its `allow` record); tokens add up
    over all records; latency is that of fulfilled requests (no error). The records of the tools:
    section (the host's tools/call and tools/list) are counted apart, each record once."""
    stats: dict[str, ServerStats] = {}
    outcome: dict[tuple[Any, ...], tuple[str, dict[str, Any]]] = {}
    for index, record in enumerate(records):
        if not is_decision(record):
            continue
        if since is not None:
            when = parse_ts(record.get("ts"))
            if when is None or when < since:
                continue
        server = str(record.get("server") or "?")
        entry = stats.setdefault(server, ServerStats())
        if record.get("method") in TOOL_METHODS:
            count_tool_decision(entry, record)
            continue
        entry.input_tokens += _int(record.get("input_tokens"))
        entry.output_tokens += _int(record.get("output_tokens"))
        cost = record.get("cost_usd")
        entry.costed += "price_as_of" in record
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            entry.cost_micros += round(cost * 1_000_000)
        elif record.get("price_as_of") == UNPRICED:
            entry.unpriced += 1
        if record.get("latency_ms") is not None and record.get("error") is None and record.get("provider"):
            entry.latencies.append(_int(record["latency_ms"]))
        request_id = record.get("request_id")
        # under serve, each session's server numbers its requests from 1: the session tells them apart
        key = (
            (server, record.get("proxy_id"), record.get("session"), json.dumps(request_id))
            if request_id is not None
            else (index,)
        )
        outcome[key] = (server, record)
    for server, record in outcome.values():
        entry = stats[server]
        entry.requests += 1
        decision = record.get("decision")
        if decision in DENIED:
            entry.denied += 1
        elif decision in ALLOWED and record.get("error") is None:
            entry.allowed += 1
        else:
            entry.errors += 1
        count_sampling_checks(entry, record)
    return dict(sorted(stats.items()))


def count_tool_decision(entry: ServerStats, record: dict[str, Any]) -> None:
    """One record of the tools: section: a call's fate, a listing that hid tools, or a pin change."""
    decision = record.get("decision")
    if record.get("tool_change") is not None:
        entry.tool_changes += 1
    elif record.get("method") == "tools/list":
        entry.tools_hidden += decision in DENIED
    elif decision in ALLOWED:
        entry.tool_calls_allowed += 1
    elif decision == "deny" and record.get("rule") is None:  # no rule refused it: its pin held it
        entry.tool_calls_held += 1
    elif decision in DENIED:
        entry.tool_calls_denied += 1


def count_sampling_checks(entry: ServerStats, record: dict[str, Any]) -> None:
    """What the sampling checks did to one request (its last record): refused it, or found credentials."""
    refused = record.get("decision") in DENIED
    secrets = bool(record.get("answer_secrets") or record.get("prompt_secrets"))
    entry.secrets_found += secrets
    if not refused:
        return
    checks = record.get("checks")
    if record.get("reason") == UNSOLICITED:
        entry.unsolicited += 1
    elif record.get("limit") == MAX_PER_CALL:
        entry.max_per_call += 1
    elif isinstance(checks, list) and any(
        isinstance(c, dict)
        and (c.get("verdict") == "deny" or (c.get("verdict") == "error" and c.get("on_error") != "allow"))
        for c in checks
    ):
        entry.checks_denied += 1
    elif secrets:
        entry.secrets_denied += 1


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def total_of(stats: dict[str, ServerStats]) -> ServerStats:
    total = ServerStats()
    for entry in stats.values():
        for name in SUMMED:
            setattr(total, name, getattr(total, name) + getattr(entry, name))
        total.latencies += entry.latencies
    return total


def by_replica(records: Sequence[dict[str, Any]], since: datetime | None) -> dict[str, ServerStats]:
    """The numbers of each `serve` replica that wrote records (`replica`), for the logs of several."""
    names = sorted({str(r["replica"]) for r in records if is_decision(r) and r.get("replica")})
    return {name: total_of(summarize([r for r in records if r.get("replica") == name], since)) for name in names}


TOOL_COLUMNS = ("tool_calls_allowed", "tool_calls_denied", "tool_calls_held", "tools_hidden", "tool_changes")


CHECK_COLUMNS = ("unsolicited", "max_per_call", "checks_denied", "secrets_denied", "secrets_found")


GOVERNANCE = (*TOOL_COLUMNS, *CHECK_COLUMNS)


SUMMED = (
    "requests",
    "allowed",
    "denied",
    "errors",
    "input_tokens",
    "output_tokens",
    "cost_micros",
    "unpriced",
    "costed",
    *GOVERNANCE,
)
