"""Whether an `elicitation.auto_answers` entry may answer this form, and with what.

The policy answering a form is a grant, so it is checked as closely as a human's answer: the
content must fit the form's schema (the same `validate_content` that checks an answer from the
companion console), and it is never given where a human must decide: a form that looks like it
asks for secrets (`secret_reasons`, the check behind `elicitation.sensitive_form`), or URL mode,
where the answer is what the user does in a browser. Pure: the caller answers, logs and audits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from msgspec import Struct

from mcp_sampling_proxy.approval.forms import FormError, parse_form, secret_reasons, validate_content
from mcp_sampling_proxy.config.auto_answers import AutoAnswer
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams

Kind = Literal["answer", "withheld", "misfit"]


class AutoVerdict(Struct, frozen=True):
    """`answer`: send `result`; `withheld`: the entry may not answer this request (`why`), which goes
    on as if no entry matched; `misfit`: its content does not fit the form (`why`), which is refused."""

    entry: AutoAnswer
    kind: Kind
    why: str
    result: dict[str, Any] | None = None


def first_match(
    entries: Sequence[AutoAnswer], server: str, tools_in_flight: tuple[str, ...], params: ElicitRequestParams
) -> AutoAnswer | None:
    """The first entry for this request (like rules: first match wins), or None."""
    message = params.get("message")
    text = message if isinstance(message, str) else ""
    return next((entry for entry in entries if entry.matches(server, tools_in_flight, text)), None)


def sensitive_note(entry: AutoAnswer, secrets: Sequence[str]) -> str:
    """Why `entry` does not answer a form that asks for secrets: for the log and the audit reason."""
    return (
        f"auto-answer '{entry.name}' not used: the form asks for secrets ({'; '.join(secrets)}), "
        "and sensitive forms are never auto-answered"
    )


def judge(entry: AutoAnswer, params: ElicitRequestParams, mode: str) -> AutoVerdict:
    """What `entry` may do with this request. For `accept`, call `forms.prepare()` first (off the
    event loop): checking the content loads jsonschema."""
    named = f"auto-answer '{entry.name}'"
    if mode == "url":
        return AutoVerdict(entry, "withheld", f"{named} not used: URL-mode elicitation is never auto-answered")
    try:
        form = parse_form(params.get("requestedSchema") or {})
    except FormError as exc:
        return AutoVerdict(entry, "withheld", f"{named} not used: unsupported form: {exc}")
    secrets = secret_reasons(form, str(params.get("message", "")))
    if secrets:
        return AutoVerdict(entry, "withheld", sensitive_note(entry, secrets))
    if entry.action != "accept":
        return AutoVerdict(entry, "answer", f"answered {entry.action} by {named}", {"action": entry.action})
    content = dict(entry.content)
    problems = validate_content(form, content)
    if problems:
        return AutoVerdict(
            entry,
            "misfit",
            f"{named} does not fit the form: {'; '.join(problems)}; "
            "correct its content in elicitation.auto_answers (mcp-sampling-proxy policy explain shows the form)",
        )
    return AutoVerdict(entry, "answer", f"accepted by {named}", {"action": "accept", "content": content})
