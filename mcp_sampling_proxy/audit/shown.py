"""One audit record as one line a person reads (`audit tail`, the web console): every value from the
record, which may come from a server, stripped of control characters."""

from __future__ import annotations

from typing import Any

from mcp_sampling_proxy.audit.records import is_decision
from mcp_sampling_proxy.config.prices import UNPRICED, format_usd
from mcp_sampling_proxy.notation.vocabulary import REFUSED_OUTCOMES as DENIED
from mcp_sampling_proxy.text.sanitize import one_line


def printable(value: Any, limit: int = 120) -> str:
    """A value from a record as one line of at most `limit` characters, control characters removed."""
    return one_line(str(value), limit)


TOOL_METHODS = ("tools/call", "tools/list")  # the records of tools.rules and tool pins


def format_record(record: dict[str, Any]) -> str:
    """One human-readable line; everything from the record is stripped of control characters."""
    ts = printable(record.get("ts", "?"), 40)
    event = record.get("event", "decision")
    if event == "seal":
        return (
            f"{ts}  -- seal: {printable(record.get('torn_bytes'))} bytes after the last record sealed "
            f"({printable(record.get('reason', ''))}; proxy {printable(record.get('proxy_id'))})"
        )
    if not is_decision(record):
        return f"{ts}  -- {printable(event)} record"
    parts = [ts, printable(record.get("server") or "?", 40)]
    if record.get("client"):  # the caller, under serve
        parts.append(f"client={printable(record['client'], 40)}")
    if record.get("replica"):  # which serve replica wrote it (several behind a balancer)
        parts.append(f"replica={printable(record['replica'], 60)}")
    if record.get("method") in TOOL_METHODS:  # a decision on the host's tool call itself, not a sampling in it
        parts.append(f"{record['method']} {printable(record.get('tool') or '?', 40)}:")
    elif record.get("tool"):
        parts.append(f"tool={printable(record['tool'], 40)}")
    if record.get("method") == "elicitation/create":
        parts.append(elicitation_outcome(record))
        return "  ".join(parts)
    decision = printable(record.get("decision") or "?", 20)
    if record.get("approver") and decision in ("approved", "rejected", "timeout"):
        decision += f" by {printable(record['approver'], 40)}"
        named = record.get("approved_by")
        if isinstance(named, list) and named and named != [record["approver"]]:  # a quorum, named approvers
            decision += f" [{printable(', '.join(str(n) for n in named), 200)}]"
    if record.get("rule"):
        decision += f" (rule {printable(record['rule'], 40)})"
    parts.append(decision)
    for key, what in (("prompt_edited_by", "prompt"), ("answer_edited_by", "answer")):
        if record.get(key):
            parts.append(f"{what} edited by {printable(record[key], 20)}")
    checks = record.get("checks")  # external checks, in the order they ran: "checks scan allow, dlp deny"
    if isinstance(checks, list) and checks:
        ran = [
            f"{printable(c.get('name'), 40)} {printable(c.get('verdict'), 10)}"
            for c in checks[:8]
            if isinstance(c, dict)
        ]
        parts.append("checks " + ", ".join(ran))
    if record.get("provider") or record.get("model"):
        parts.append(f"{printable(record.get('provider') or '?', 30)}/{printable(record.get('model') or '?', 60)}")
    if record.get("input_tokens") is not None or record.get("output_tokens") is not None:
        parts.append(f"{printable(record.get('input_tokens'))}+{printable(record.get('output_tokens'))} tokens")
    if isinstance(record.get("cost_usd"), int | float) and not isinstance(record.get("cost_usd"), bool):
        parts.append(format_usd(round(record["cost_usd"] * 1_000_000)))
    elif record.get("price_as_of") == UNPRICED:
        parts.append("unpriced")
    if record.get("latency_ms") is not None:
        parts.append(f"{printable(record['latency_ms'])} ms")
    if record.get("stop_reason"):
        parts.append(printable(record["stop_reason"], 30))
    if record.get("error"):
        parts.append(f"error: {printable(record['error'], 200)}")
    elif record.get("decision") in (*DENIED, "error") and record.get("reason"):
        parts.append(f"reason: {printable(record['reason'], 200)}")
    return "  ".join(parts)


ELICITATION_ACTIONS = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}


def elicitation_outcome(record: dict[str, Any]) -> str:
    """What the server was answered and who or what decided it. An elicitation's `decision` says
    how the policy ended (a non-interactive decline is `deny` even under an allow rule), so the
    answer (`action`) and the reason are what tell the story: "declined (nobody can be asked ...)"."""
    action = record.get("action")
    approver = record.get("approver")
    if action is None:
        text = f"no answer from {printable(approver, 20)}" if approver else "no answer"
    else:
        text = ELICITATION_ACTIONS.get(action, printable(action, 20))
        if approver:
            text += f" by {printable(approver, 20)}"
    details = []
    if not approver and record.get("reason"):
        details.append(printable(record["reason"], 200))
    if record.get("rule"):
        details.append(f"rule {printable(record['rule'], 40)}")
    return f"{text} ({'; '.join(details)})" if details else text
