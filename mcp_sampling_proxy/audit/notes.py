"""What the governance recorded in a decision record, as short labelled lines for people.

The web console puts them under each audit line, and the proxy hands the ones it has before asking a
human (the checks a sampling request passed, credentials masked in it) to the approval channels. Every
text is one cleaned line (`one_line`): a check's reason comes from the operator's validator, a tool's
name from the server, and neither may pass for the proxy's own words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from mcp_sampling_proxy.notation.vocabulary import REFUSED_OUTCOMES
from mcp_sampling_proxy.text.sanitize import one_line

MAX_NOTES = 12  # notes of one record


class Note(TypedDict):
    kind: str  # tool | check | refused | secret: what the page styles it as
    text: str


def _s(value: Any, limit: int = 512) -> str:
    return one_line(str(value if value is not None else ""), limit)


def governance_notes(record: Mapping[str, Any]) -> list[Note]:
    """What the governance recorded in one decision record, as short labelled notes for its audit line:
    the external checks (name, verdict, reason), credentials found (their types, never the values), a
    sampling check's refusal, and what a tools: decision was. Each `kind` is a label the page styles;
    each `text` one cleaned line (a check's reason comes from the operator's validator, a tool's name
    from the server)."""
    notes: list[Note] = []
    refused = record.get("decision") in REFUSED_OUTCOMES
    method = record.get("method")
    if method == "tools/call":
        if refused and record.get("rule") is None and record.get("decision") == "deny":
            notes.append({"kind": "tool", "text": "tool call held: the tool changed since it was pinned"})
        else:
            notes.append({"kind": "tool", "text": f"tool call (tools rule: {_s(record.get('action') or '?', 20)})"})
    elif method == "tools/list":
        change = record.get("tool_change")
        if isinstance(change, dict):
            fields = change.get("fields")
            named = ", ".join(_s(f, 40) for f in fields[:10]) if isinstance(fields, list) else ""
            fate = "held until accepted" if refused else "re-pinned" if change.get("kind") != "removed" else "unpinned"
            kind = _s(change.get("kind") or "changed", 20)
            notes.append({"kind": "tool", "text": f"tool {kind}{f' ({named})' if named else ''}: {fate}"})
        elif refused:
            notes.append({"kind": "tool", "text": "hidden from the host's tools/list"})
    if record.get("reason") == "unsolicited" and refused:
        notes.append({"kind": "refused", "text": "refused: unsolicited (no host request in flight)"})
    elif record.get("unsolicited") is True:
        notes.append({"kind": "check", "text": "unsolicited, allowed by sampling.allow_unsolicited"})
    if record.get("limit") == "max_per_call":
        notes.append({"kind": "refused", "text": "refused: over sampling.max_per_call"})
    checks = record.get("checks")
    for check in checks[:MAX_NOTES] if isinstance(checks, list) else []:
        if not isinstance(check, dict):
            continue
        text = f"check {_s(check.get('name'), 60)}: {_s(check.get('verdict'), 10)}"
        if check.get("stage") == "answer":
            text += " (on the answer)"
        if check.get("reason"):
            text += f": {_s(check['reason'], 200)}"
        bad = check.get("verdict") == "deny" or (check.get("verdict") == "error" and check.get("on_error") != "allow")
        notes.append({"kind": "refused" if bad else "check", "text": text})
    for key, where in (("prompt_secrets", "the server's request"), ("answer_secrets", "the LLM's answer")):
        types = record.get(key)
        if not isinstance(types, list) or not types:
            continue
        if refused:
            fate = "refused"
        elif key == "answer_secrets" and record.get("original_answer_sha256") and not record.get("answer_edited_by"):
            fate = "masked"
        else:
            fate = "masked unless sampling.on_secret is allow"
        named = ", ".join(_s(t, 60) for t in types[:MAX_NOTES])
        notes.append({"kind": "secret", "text": f"credentials in {where}: {named} ({fate})"})
    return notes[:MAX_NOTES]
