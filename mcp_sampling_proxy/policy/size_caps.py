"""Size caps on a `sampling/createMessage` request, checked before any approval or LLM call.

Pure: no I/O, no clock, no configuration loading. `check_caps` either returns the params
(possibly a copy with `maxTokens` clamped, plus notes saying so) or raises
`RpcError(INVALID_PARAMS, ...)` naming the cap and the offending value. It is written to run on
unvalidated input too (before the strict validation, which walks every block of a huge
request): shapes it does not recognise are left for validation to reject.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp_sampling_proxy.notation.vocabulary import GiB, KiB, MiB
from mcp_sampling_proxy.protocol.content import walk_blocks
from mcp_sampling_proxy.protocol.jsonrpc import INVALID_PARAMS, RpcError

DEFAULT_MAX_MESSAGES = 256
DEFAULT_MAX_TEXT_BYTES = 1 * MiB
DEFAULT_MAX_MEDIA_BYTES = 8 * MiB
DEFAULT_MAX_REQUEST_BYTES = 16 * MiB
DEFAULT_MAX_TOOLS = 128

MEDIA_TYPES = ("image", "audio")


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


@dataclass
class CapsOutcome:
    params: Mapping[str, Any]  # the request to go on with: the original, or a copy with maxTokens lowered
    notes: list[str] = field(default_factory=list)  # what was changed, for the log and the audit record


def check_caps(params: Mapping[str, Any], caps: SizeCapsLike, *, request_bytes: int | None = None) -> CapsOutcome:
    """Apply every size cap to a sampling request's params.

    `request_bytes` is the request's size as received (e.g. the length of its line on the wire);
    without it the params are serialised once to measure them. Raises RpcError(-32602) on the
    first cap exceeded, in this order: whole request, message count, tool count, system prompt,
    each content block (text, then media) in document order, then maxTokens (deny).
    """
    if caps.max_request_bytes is not None:
        size = request_bytes if request_bytes is not None else serialized_size(params)
        if size > caps.max_request_bytes:
            _refuse(
                f"the request is {size:,} bytes; the limit is {format_bytes(caps.max_request_bytes)}",
                "max_request_bytes",
            )
    messages = params.get("messages")
    if caps.max_messages is not None and isinstance(messages, list) and len(messages) > caps.max_messages:
        _refuse(f"the request holds {len(messages):,} messages; the limit is {caps.max_messages:,}", "max_messages")
    tools = params.get("tools")
    if caps.max_tools is not None and isinstance(tools, list) and len(tools) > caps.max_tools:
        _refuse(f"the request offers {len(tools):,} tools; the limit is {caps.max_tools:,}", "max_tools")

    system = params.get("systemPrompt")
    if isinstance(system, str):
        _check_text("systemPrompt", system, caps)
    for where, block in walk_blocks(params):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            _check_text(f"{where} text block", block["text"], caps)
        elif kind in MEDIA_TYPES and isinstance(block.get("data"), str):
            _check_media(f"{where} {kind} block", block["data"], caps)
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            if isinstance(resource.get("text"), str):
                _check_text(f"{where} resource text", resource["text"], caps)
            if isinstance(resource.get("blob"), str):
                _check_media(f"{where} resource blob", resource["blob"], caps)

    notes: list[str] = []
    max_tokens = params.get("maxTokens")
    cap = caps.max_tokens
    if cap is not None and isinstance(max_tokens, int) and _is_int(max_tokens) and max_tokens > cap:
        if caps.max_tokens_action == "clamp":
            params = {**params, "maxTokens": cap}
            notes.append(f"maxTokens {max_tokens:,} lowered to {cap:,} (limits.max_tokens)")
        else:
            _refuse(f"maxTokens is {max_tokens:,}; the limit is {cap:,}", "max_tokens")
    return CapsOutcome(params, notes)


def text_bytes(text: str) -> int:
    """UTF-8 size of text (lone surrogates from JSON escapes count as 3 bytes, as encoded)."""
    return len(text.encode("utf-8", "surrogatepass"))


def b64_decoded_size(data: str) -> int | None:
    """Decoded size of padded standard base64, from its length alone; None when the length or
    padding cannot be valid base64. The characters themselves are not checked (the provider
    or the adapter decodes them); this only has to be right about the size, in O(1)."""
    length = len(data)
    if length % 4:
        return None
    if data.endswith("==="):
        return None
    padding = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
    return length // 4 * 3 - padding


def serialized_size(params: Any) -> int:
    """Bytes of params as compact JSON (as jsonrpc.dumps writes them)."""
    try:
        text = json.dumps(params, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:
        raise RpcError(INVALID_PARAMS, "Invalid params: nested too deeply") from None
    return len(text.encode("utf-8", "surrogatepass"))


def format_bytes(n: int) -> str:
    """A byte count as people write limits: '1 GiB', '1 MiB', '512 KiB', else '1,500,000 bytes'."""
    if n >= GiB and n % GiB == 0:
        return f"{n // GiB:,} GiB"
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB:,} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB:,} KiB"
    return f"{n:,} bytes"


def _check_text(where: str, text: str, caps: SizeCapsLike) -> None:
    limit = caps.max_text_bytes
    if limit is None or len(text) * 4 <= limit:  # a character is at most 4 UTF-8 bytes: skip encoding
        return
    size = text_bytes(text)
    if size > limit:
        _refuse(f"{where} is {size:,} bytes; the limit is {format_bytes(limit)}", "max_text_bytes")


def _check_media(where: str, data: str, caps: SizeCapsLike) -> None:
    size = b64_decoded_size(data)
    if size is None:
        why = f"its length {len(data):,} is not a multiple of 4" if len(data) % 4 else "it ends in ==="
        raise RpcError(INVALID_PARAMS, f"request refused: {where} data is not valid base64: {why}")
    limit = caps.max_media_bytes
    if limit is not None and size > limit:
        _refuse(f"{where} is {size:,} bytes decoded; the limit is {format_bytes(limit)}", "max_media_bytes")


def _refuse(what: str, cap: str) -> None:
    raise RpcError(INVALID_PARAMS, f"request refused: {what} (limits.{cap})")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
