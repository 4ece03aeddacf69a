"""What a companion console accepts from a proxy socket: every field checked for type and size.

Anything on a socket may come from a hostile peer (a planted socket, a confused process), so a
message that does not fit is dropped with a log line instead of crashing the console, and no
field reaches the screen or the dialogue without passing through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Required, TypedDict, cast

from mcp_sampling_proxy.protocol.wire_types import JsonObject

MAX_LINE = 16 * 1024 * 1024
_NAME = 512  # server, host, tool and rule names
_ID = 64
_TEXT = 1024 * 1024  # summaries and messages (the proxy clips what it composes)
_URL = 16 * 1024

# per type: field -> (accepted types, required, size limit for strings)
_FIELDS: dict[str, dict[str, tuple[tuple[type, ...], bool, int]]] = {
    "hello": {
        "pid": ((int,), True, 0),
        "server": ((str, type(None)), False, _NAME),
        "host": ((str, type(None)), False, _NAME),
    },
    "pending": {
        "id": ((str,), True, _ID),
        "server": ((str, type(None)), False, _NAME),
        "host": ((str, type(None)), False, _NAME),
        "tool": ((str, type(None)), False, _NAME),
        "rule": ((str, type(None)), False, _NAME),
        "summary": ((str,), True, _TEXT),
        "params": ((dict,), True, 0),
        "edit": ((str, type(None)), False, 16),
        "quorum": ((dict, type(None)), False, 0),  # {"needed": int, "approved_by": [str]} under approval.quorum
        "notes": ((list, type(None)), False, 0),  # [str]: what the governance found before asking
    },
    "review": {
        "id": ((str,), True, _ID),
        "server": ((str, type(None)), False, _NAME),
        "tool": ((str, type(None)), False, _NAME),
        "summary": ((str,), False, _TEXT),
        "prompt_edited_by": ((str, type(None)), False, _NAME),
        "result": ((dict,), True, 0),
        "edit": ((str, type(None)), False, 16),
    },
    "elicit": {
        "id": ((str,), True, _ID),
        "mode": ((str,), True, 8),
        "server": ((str, type(None)), False, _NAME),
        "host": ((str, type(None)), False, _NAME),
        "tool": ((str, type(None)), False, _NAME),
        "message": ((str, type(None)), False, _TEXT),
        "schema": ((dict, type(None)), False, 0),
        "url": ((str, type(None)), False, _URL),
    },
    "resolved": {"id": ((str,), True, _ID), "how": ((str, type(None)), False, 16)},
}


class ConsoleMessage(TypedDict, total=False):
    """A message between a proxy and its consoles: a question (`pending`, `review`, `elicit`), `hello` or
    `resolved`. From a socket, only as `validate` passed it: the fields `_FIELDS` names for its type,
    each of the type checked there (the JSON objects' contents are the proxy's, shown through checks).
    `type` is in every message (an event without one holds an empty message: `client.Event`)."""

    type: str
    id: str
    pid: int
    server: str | None
    host: str | None
    tool: str | None
    rule: str | None
    summary: str
    params: JsonObject  # the server's request
    edit: str | None  # what an edit replaces: prompt | text (a proxy from before: the whole request)
    quorum: JsonObject | None  # {"needed": int, "approved_by": [str]}
    notes: list[object] | None
    prompt_edited_by: str | None
    result: JsonObject  # the LLM's answer, for review
    mode: str  # elicit: form | url
    message: str | None
    schema: JsonObject | None
    url: str | None
    how: str | None  # resolved: answered | expired | withdrawn


class ConsoleReply(TypedDict, total=False):
    """A console's answer to a question: `decision` (to `pending`), `review` or `elicit`."""

    type: Required[str]
    id: Required[str]
    approve: bool  # decision
    scope: str  # decision: once | session | always
    approver: str  # decision: the name the person gave
    prompt: str  # decision: the edited prompt's text
    params: Mapping[str, object]  # decision, to a proxy from before `edit`: the whole edited request
    accept: bool  # review
    text: str  # review: the replacement answer's text
    result: Mapping[str, object]  # review, to a proxy from before `edit`: the whole replacement result
    action: str  # elicit: accept | decline | cancel
    content: Mapping[str, object]  # elicit: the form's answers


class BadMessage(ValueError):
    """Why a message from a proxy socket was dropped (safe to log: no raw server text)."""


def validate(message: Any) -> ConsoleMessage:
    """The message if every field has the expected type and size; BadMessage otherwise."""
    if not isinstance(message, dict):
        raise BadMessage(f"expected a JSON object, got {type(message).__name__}")
    kind = message.get("type")
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise BadMessage("unknown message type")
    for name, (types, required, limit) in _FIELDS[kind].items():
        if name not in message:
            if required:
                raise BadMessage(f"{kind}: missing '{name}'")
            continue
        value = message[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise BadMessage(f"{kind}: '{name}' has the wrong type ({type(value).__name__})")
        if isinstance(value, str) and limit and len(value) > limit:
            raise BadMessage(f"{kind}: '{name}' is too long ({len(value)} characters)")
    if kind == "elicit" and message["mode"] not in ("form", "url"):
        raise BadMessage("elicit: unknown mode")
    if kind == "hello" and message["pid"] <= 0:
        raise BadMessage("hello: bad pid")
    return cast(ConsoleMessage, message)  # every field its type names is checked above
