"""Size caps on a `sampling/createMessage` request, checked before any approval or LLM call.

Pure: no I/O, no clock, no configuration loading. The caps read the request's survey
(survey.py), not the request: `check_outline` refuses an oversized request before it is walked,
and `apply_caps` either returns the maxTokens to go on with (lowered to the cap, with a note
saying so) or raises `RpcError(INVALID_PARAMS, ...)` naming the cap and the offending value. They
run on unvalidated input too (before the strict validation, which walks every block of a huge
request): shapes they do not recognise are left for validation to reject.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from msgspec import Struct

from mcp_sampling_proxy.notation.vocabulary import GiB, KiB, MiB
from mcp_sampling_proxy.policy.survey import Outline, Sized, Survey, survey
from mcp_sampling_proxy.protocol.jsonrpc import INVALID_PARAMS, RpcError

DEFAULT_MAX_MESSAGES = 256
DEFAULT_MAX_TEXT_BYTES = 1 * MiB
DEFAULT_MAX_MEDIA_BYTES = 8 * MiB
DEFAULT_MAX_REQUEST_BYTES = 16 * MiB
DEFAULT_MAX_TOOLS = 128


class SizeCapsLike(Protocol):
    """What `check_caps` reads; config's `SizeLimits` has the same field names.

    Read-only properties so that frozen dataclasses satisfy it. None means "no cap"
    (the documented default for `max_tokens` only; the others default to the constants above).
    """

    @property
    def max_messages(self) -> int | None: ...
    @property
    def max_text_bytes(self) -> int | None: ...
    @property
    def max_media_bytes(self) -> int | None: ...
    @property
    def max_request_bytes(self) -> int | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def max_tokens_action(self) -> str: ...  # "clamp" | "deny"
    @property
    def max_tools(self) -> int | None: ...


class CapsOutcome(Struct, frozen=True):
    max_tokens: int | None  # maxTokens to go on with: as asked, or lowered to the cap (None: none usable)
    notes: tuple[str, ...] = ()  # what was changed, for the log and the audit record


def check_outline(outline: Outline, caps: SizeCapsLike) -> None:
    """The caps read without walking the request (the whole request, the message and tool
    counts): checked before the survey walks it."""
    if caps.max_request_bytes is not None and outline.request_bytes > caps.max_request_bytes:
        _refuse(
            f"the request is {outline.request_bytes:,} bytes; the limit is {format_bytes(caps.max_request_bytes)}",
            "max_request_bytes",
        )
    messages = outline.message_count
    if caps.max_messages is not None and messages is not None and messages > caps.max_messages:
        _refuse(f"the request holds {messages:,} messages; the limit is {caps.max_messages:,}", "max_messages")
    tools = outline.tool_count
    if caps.max_tools is not None and tools is not None and tools > caps.max_tools:
        _refuse(f"the request offers {tools:,} tools; the limit is {caps.max_tools:,}", "max_tools")


def apply_caps(surveyed: Survey, caps: SizeCapsLike) -> CapsOutcome:
    """Every size cap on a surveyed request. Raises RpcError(-32602) on the first cap exceeded, in
    this order: whole request, message count, tool count, system prompt, each content block (text,
    then media) in document order, then maxTokens (deny); a clamped maxTokens comes back with a note."""
    check_outline(surveyed.outline, caps)
    for part in surveyed.sized:
        if part.media:
            _check_media(part, caps)
        elif caps.max_text_bytes is not None and part.size is not None and part.size > caps.max_text_bytes:
            _refuse(
                f"{part.where} is {part.size:,} bytes; the limit is {format_bytes(caps.max_text_bytes)}",
                "max_text_bytes",
            )
    wanted, cap = surveyed.outline.max_tokens, caps.max_tokens
    if cap is not None and wanted is not None and wanted > cap:
        if caps.max_tokens_action != "clamp":
            _refuse(f"maxTokens is {wanted:,}; the limit is {cap:,}", "max_tokens")
        return CapsOutcome(cap, (f"maxTokens {wanted:,} lowered to {cap:,} (limits.max_tokens)",))
    return CapsOutcome(wanted)


def check_caps(params: Mapping[str, Any], caps: SizeCapsLike, *, request_bytes: int | None = None) -> CapsOutcome:
    """`apply_caps` on params not surveyed yet (`request_bytes`: their size as received)."""
    outline = Outline.of(params, request_bytes)
    check_outline(outline, caps)
    return apply_caps(survey(params, outline), caps)


def format_bytes(n: int) -> str:
    """A byte count as people write limits: '1 GiB', '1 MiB', '512 KiB', else '1,500,000 bytes'."""
    if n >= GiB and n % GiB == 0:
        return f"{n // GiB:,} GiB"
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB:,} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB:,} KiB"
    return f"{n:,} bytes"


def _check_media(part: Sized, caps: SizeCapsLike) -> None:
    if part.size is None:
        why = f"its length {part.length:,} is not a multiple of 4" if part.length % 4 else "it ends in ==="
        raise RpcError(INVALID_PARAMS, f"request refused: {part.where} data is not valid base64: {why}")
    limit = caps.max_media_bytes
    if limit is not None and part.size > limit:
        _refuse(f"{part.where} is {part.size:,} bytes decoded; the limit is {format_bytes(limit)}", "max_media_bytes")


def _refuse(what: str, cap: str) -> None:
    raise RpcError(INVALID_PARAMS, f"request refused: {what} (limits.{cap})")
