"""Validate a `sampling/createMessage` request into a typed `SamplingRequest`, and describe it.

Validation is `wire_checks` (strict: what the SDK's models accept in strict mode, without loading
pydantic) plus the tool_use/tool_result pairing rules of 2025-11-25. What travels on through the
pipeline is a `SamplingRequest`: typed fields, which every decision reads (the policy's facts,
the caps' clamp, the model choice, the route), and the wire dict they were read from, which is
what gets sent (forwarding to the host stays byte-exact; the adapters translate from it through
the one content walker).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, cast

from msgspec import Struct
from msgspec.structs import replace

from mcp_sampling_proxy.protocol import wire_checks, wire_types
from mcp_sampling_proxy.protocol.content import as_blocks
from mcp_sampling_proxy.protocol.jsonrpc import INVALID_PARAMS, RpcError
from mcp_sampling_proxy.protocol.wire_types import (
    CreateMessageParams,
    SamplingContent,
    SamplingMessage,
    Tool,
    ToolChoice,
)
from mcp_sampling_proxy.text.sanitize import strip_controls

# (the server as shown, quoted: Session.server_label; tool call) of the sampling request being served,
# for consoles that show it.
REQUEST_ORIGIN: ContextVar[tuple[str, str | None]] = ContextVar("request_origin", default=("'server'", None))


def check_params(check: wire_checks.Check, params: Any, method: str) -> dict[str, Any]:
    """`params` when `check` passes; else RpcError(-32602) naming the field."""
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, f"Invalid params for {method}: params must be an object")
    try:
        check(params, "")
    except wire_checks.Invalid as exc:
        raise RpcError(INVALID_PARAMS, f"Invalid params for {method}: {exc.where or 'params'}: {exc.message}") from None
    return params  # (the shapes nest a fixed few levels deep: no input makes the checks recurse far)


class ModelHint(Struct, frozen=True):
    name: str | None


class ModelPreferences(Struct, frozen=True):
    """The request's `modelPreferences`, checked (priorities are numbers, hint names strings)."""

    hints: tuple[ModelHint, ...] | None = None
    cost_priority: float | None = None
    speed_priority: float | None = None
    intelligence_priority: float | None = None

    @classmethod
    def from_wire(cls, prefs: wire_types.ModelPreferences | None) -> ModelPreferences | None:
        if prefs is None:
            return None
        hints = prefs.get("hints")
        return cls(
            None if hints is None else tuple(ModelHint(h.get("name")) for h in hints),
            prefs.get("costPriority"),
            prefs.get("speedPriority"),
            prefs.get("intelligencePriority"),
        )


class CreateMessage(Struct, frozen=True):
    """The typed fields of a checked request that decisions read (names as in the SDK's model)."""

    messages: list[SamplingMessage]
    max_tokens: int
    model_preferences: ModelPreferences | None = None
    system_prompt: str | None = None
    include_context: str | None = None
    temperature: float | None = None
    stop_sequences: list[str] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None

    @classmethod
    def from_wire(cls, params: CreateMessageParams) -> CreateMessage:
        """From params `wire_checks.CREATE_MESSAGE` passed."""
        return cls(
            params["messages"],
            params["maxTokens"],
            ModelPreferences.from_wire(params.get("modelPreferences")),
            params.get("systemPrompt"),
            params.get("includeContext"),
            params.get("temperature"),
            params.get("stopSequences"),
            params.get("tools"),
            params.get("toolChoice"),
        )


class SamplingRequest(Struct, frozen=True):
    """A validated `sampling/createMessage` request. Only `validate` makes one, so holding one
    means the request is well-formed."""

    typed: CreateMessage  # what decisions read
    wire: CreateMessageParams  # the params as the server sent them: what is sent on

    @property
    def max_tokens(self) -> int:
        return self.typed.max_tokens

    @property
    def hint_names(self) -> tuple[str, ...]:
        """modelPreferences.hints[].name, in order, empty names left out."""
        prefs = self.typed.model_preferences
        return tuple(h.name for h in (prefs.hints or ()) if h.name) if prefs else ()

    @property
    def offers_tools(self) -> bool:
        """True when the request hands the LLM tools (or a tool choice) to use."""
        return bool(self.typed.tools) or self.typed.tool_choice is not None

    def with_max_tokens(self, max_tokens: int) -> SamplingRequest:
        """The same request asking for `max_tokens` (a cap lowered it)."""
        if max_tokens == self.typed.max_tokens:
            return self
        return SamplingRequest(replace(self.typed, max_tokens=max_tokens), {**self.wire, "maxTokens": max_tokens})


def validate(params: Any) -> SamplingRequest:
    """A valid `sampling/createMessage` request, tool_use/tool_result pairing included; raises
    RpcError(-32602) naming the field otherwise."""
    checked = check_params(wire_checks.CREATE_MESSAGE, params, "sampling/createMessage")
    # the one place the server's JSON becomes a typed request: CREATE_MESSAGE accepted its shape
    wire = cast(CreateMessageParams, checked)
    check_tool_pairing(wire["messages"])
    return SamplingRequest(CreateMessage.from_wire(wire), wire)


def blocks(message: SamplingMessage) -> list[SamplingContent]:
    """A message's content as a list (the spec allows a single block or a list)."""
    content: list[SamplingContent] = as_blocks(message.get("content"))
    return [block for block in content if isinstance(block, dict)]


def check_tool_pairing(messages: list[SamplingMessage]) -> None:
    """Every tool_use is answered by a matching tool_result in the next message, which holds
    only tool results (else -32602, as the spec requires)."""
    for index, message in enumerate(messages):
        content = blocks(message)
        results = [b for b in content if b.get("type") == "tool_result"]
        if results and len(results) != len(content):
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params for sampling/createMessage: messages.{index} mixes tool_result with other "
                "content; a tool-result message may hold only tool_result blocks",
            )
        uses = {b.get("id") for b in content if b.get("type") == "tool_use"}
        if not uses:
            continue
        following = blocks(messages[index + 1]) if index + 1 < len(messages) else []
        answered = {b.get("toolUseId") for b in following if b.get("type") == "tool_result"}
        if answered != uses:
            missing = sorted(str(u) for u in uses - answered)
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params for sampling/createMessage: tool_use {', '.join(missing) or '(ids)'} in "
                f"messages.{index} is not answered by matching tool_result blocks in messages.{index + 1}",
            )
    first = blocks(messages[0]) if messages else []
    if any(b.get("type") == "tool_result" for b in first):
        raise RpcError(
            INVALID_PARAMS,
            "Invalid params for sampling/createMessage: messages.0 holds tool_result without a preceding tool_use",
        )


def content_types(params: CreateMessageParams) -> set[str]:
    """Content types present in the request, plus 'tools' when tools are offered."""
    found: set[str] = {b.get("type", "?") for m in params.get("messages", []) for b in blocks(m)}
    if params.get("tools"):
        found.add("tools")
    return found


def describe(params: CreateMessageParams, *, server: str, tool: str | None, max_text: int = 2000) -> str:
    """A sanitised, human-readable summary for a console (approval or manual reply). `server` is the
    server as shown, already quoted (Session.server_label: `'notes' (which calls itself "x")`)."""
    lines = [
        f"Server {strip_controls(server)} asks for an LLM completion"
        + (f" (during tool call '{strip_controls(tool)}')" if tool else " (no host request in flight)")
    ]
    prefs = params.get("modelPreferences") or {}
    hints = [str(h["name"]) for h in prefs.get("hints") or [] if isinstance(h, dict) and h.get("name")]
    if hints:
        lines.append(f"  model hints: {strip_controls(', '.join(hints))}")
    lines.append(f"  max tokens: {params.get('maxTokens')}")
    if params.get("tools"):
        names = ", ".join(strip_controls(str(t.get("name"))) for t in params["tools"] or [])
        lines.append(f"  tools offered to the model: {names}")
    system = params.get("systemPrompt")
    if system:
        lines.append("  system: " + _clip(strip_controls(system), max_text))
    for message in params.get("messages", []):
        for block in blocks(message):
            lines.append(f"  {message.get('role', '?')}: " + _clip(_render_block(block), max_text))
    return "\n".join(lines)


def _render_block(block: SamplingContent | wire_types.ContentBlock) -> str:
    kind = block.get("type")
    if kind == "text":
        return strip_controls(str(block.get("text", "")))
    if kind in ("image", "audio"):
        size = len(str(block.get("data", ""))) * 3 // 4
        return f"[{kind} {strip_controls(str(block.get('mimeType', '?')))}, {size} bytes]"
    if kind == "tool_use":
        return f"[tool_use {strip_controls(str(block.get('name')))} {strip_controls(str(block.get('input')))}]"
    if kind == "tool_result" and block["type"] == "tool_result":  # (the same test, which mypy narrows by)
        inner = " ".join(_render_block(b) for b in block.get("content") or [])
        return f"[tool_result {strip_controls(str(block.get('toolUseId')))}: {inner}]"
    return f"[{strip_controls(str(kind))} block]"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"
