"""One walk over a sampling request: every size, type, string and token the later stages read.

A request used to be walked once per question: serialised for its size, walked for the caps,
walked for the policy's facts, walked again for the token bound (and again for its dollar
split), with `json.dumps` of its tools each time. The survey answers all of them in one pass over
the params the relay parsed, with the size of the bytes it read: the size caps (size_caps.py),
the facts a rule tests (conditions.py) and the budget's worst case (token_bound.py) read the
survey, not the request.

It runs on unvalidated input (the caps refuse an oversized request before the strict validation
walks it): shapes it does not recognise are skipped, for validation to reject. `Outline` holds
what can be read without walking, so that the whole-request and count caps are checked before the
walk starts. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from msgspec import Struct

from mcp_sampling_proxy.policy.token_bound import (
    AUDIO_BYTES_PER_TOKEN,
    BLOCK_OVERHEAD,
    MESSAGE_OVERHEAD,
    REQUEST_OVERHEAD,
    TOOLS_OVERHEAD,
    block_tokens,
    json_bytes,
)
from mcp_sampling_proxy.protocol.content import b64_decoded_size, text_bytes, walk_blocks
from mcp_sampling_proxy.protocol.jsonrpc import INVALID_PARAMS, RpcError

MEDIA_TYPES = ("image", "audio")


class Outline(Struct, frozen=True):
    """What a request's params tell without walking them: its size as received and its counts."""

    request_bytes: int
    message_count: int | None  # None: `messages` is not a list (validation refuses it)
    tool_count: int | None  # None: no list of tools
    max_tokens: int | None  # None: no usable integer (validation refuses it)

    @classmethod
    def of(cls, params: Mapping[str, Any], request_bytes: int | None = None) -> Outline:
        """`request_bytes` is the request's size as it came (the length of its line); without it
        the params are serialised once to measure them."""
        messages, tools, wanted = params.get("messages"), params.get("tools"), params.get("maxTokens")
        return cls(
            request_bytes if request_bytes is not None else serialized_size(params),
            len(messages) if isinstance(messages, list) else None,
            len(tools) if isinstance(tools, list) else None,
            wanted if isinstance(wanted, int) and not isinstance(wanted, bool) else None,
        )


class Sized(Struct, frozen=True):
    """One piece of text or media the LLM would read, where it sits, and its size."""

    where: str  # as an error names it: "systemPrompt", "messages[0].content[1] image block"
    media: bool
    size: int | None  # text: UTF-8 bytes; media: decoded bytes (None: its base64 cannot be valid)
    length: int  # characters as sent


class WorstCase(Struct, frozen=True):
    """The most tokens a request can cost: its input (an upper bound) and its output (maxTokens)."""

    input_tokens: int
    output_tokens: int

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Survey(Struct, frozen=True):
    """A request's outline and what one walk of its content found."""

    outline: Outline
    sized: tuple[Sized, ...]  # in document order: the system prompt, then each block's text and media
    content_types: frozenset[str]  # text, image, audio, tool_use, tool_result, ...; tools if offered
    texts: tuple[str, ...]  # every string the LLM gets (what a rule's `text:` searches)
    counted_tokens: int  # the token bound of the text and audio (sized in the walk anyway)
    uncounted: tuple[dict[str, Any], ...]  # the blocks whose bound needs decoding or encoding
    tools: tuple[Any, ...]  # the tools offered (their bound is their JSON)

    @property
    def input_tokens(self) -> int:
        """The token bound of the input. What costs work to bound (an image's header, a tool call's
        input and the tools as JSON) is counted here, not in the walk: a request under no budget
        never pays for it."""
        tokens = self.counted_tokens + sum(block_tokens(block) for block in self.uncounted)
        return tokens + (TOOLS_OVERHEAD + json_bytes(list(self.tools)) if self.tools else 0)

    def worst_case(self, max_tokens: int | None = None) -> WorstCase:
        """The worst case at `max_tokens` (a cap may have lowered it), else at what was asked."""
        output = self.outline.max_tokens if max_tokens is None else max_tokens
        return WorstCase(self.input_tokens, max(0, output or 0))


def survey(params: Mapping[str, Any], outline: Outline | None = None) -> Survey:
    """Walk `params` once (see the module docstring); `outline` when the caller has it already."""
    outline = outline or Outline.of(params)
    sized: list[Sized] = []
    types: set[str] = set()
    texts: list[str] = []
    uncounted: list[dict[str, Any]] = []
    tokens = REQUEST_OVERHEAD + MESSAGE_OVERHEAD * (outline.message_count or 0)
    system = params.get("systemPrompt")
    if isinstance(system, str):
        size = text_bytes(system)
        sized.append(Sized("systemPrompt", False, size, len(system)))
        tokens += size
        if system:
            texts.append(system)
    for where, block in walk_blocks(params):
        kind = block.get("type")
        tokens += BLOCK_OVERHEAD
        if isinstance(kind, str):
            types.add(kind)
        if kind == "tool_result":  # its blocks are walked on their own
            texts.extend(_strings({k: v for k, v in block.items() if k != "content"}))
        else:
            texts.extend(_strings(block))
        if kind == "text" and isinstance(block.get("text"), str):
            size = text_bytes(block["text"])
            sized.append(Sized(f"{where} text block", False, size, len(block["text"])))
            tokens += size
        elif kind in MEDIA_TYPES and isinstance(block.get("data"), str):
            data = block["data"]
            decoded = b64_decoded_size(data)
            sized.append(Sized(f"{where} {kind} block", True, decoded, len(data)))
            if kind == "audio":
                tokens += math.ceil((decoded if decoded is not None else len(data)) / AUDIO_BYTES_PER_TOKEN)
            else:
                uncounted.append(block)
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            for field, media in (("text", False), ("blob", True)):
                value = resource.get(field)
                if isinstance(value, str):
                    decoded = b64_decoded_size(value) if media else text_bytes(value)
                    sized.append(Sized(f"{where} resource {field}", media, decoded, len(value)))
                    tokens += text_bytes(value) if media else (decoded or 0)
        else:
            uncounted.append(block)
    tools = params.get("tools")
    offered = tuple(tools) if isinstance(tools, list) else ()
    if offered:
        types.add("tools")
        texts.extend(_strings(tools))
    return Survey(outline, tuple(sized), frozenset(types), tuple(texts), tokens, tuple(uncounted), offered)


def serialized_size(params: Any) -> int:
    """Bytes of params as compact JSON (as jsonrpc.dumps writes them)."""
    try:
        text = json.dumps(params, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:
        raise RpcError(INVALID_PARAMS, "Invalid params: nested too deeply") from None
    return len(text.encode("utf-8", "surrogatepass"))


_NOT_TEXT = frozenset({"type", "id", "toolUseId", "mimeType"})  # what a block is, not what it says
_DATA = frozenset({"input", "structuredContent", "inputSchema", "outputSchema", "arguments"})  # keys are words too


def _strings(value: object, limit: int = 64) -> list[str]:
    """Every string in `value`, except the base64 data of media and a block's bookkeeping (type, id),
    and the keys of free-form data (a tool call's input, structured content, a tool's schema): what
    reaches the LLM as text."""
    found: list[str] = []
    todo: list[tuple[object, int, bool]] = [(value, 0, False)]
    while todo:
        item, depth, keys_count = todo.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict) and depth < limit:
            media = item.get("type") in MEDIA_TYPES
            for key, sub in item.items():
                if not keys_count and (key in _NOT_TEXT or (media and key == "data")):
                    continue
                if keys_count:
                    found.append(str(key))
                todo.append((sub, depth + 1, keys_count or key in _DATA))
        elif isinstance(item, list) and depth < limit:
            todo.extend((sub, depth + 1, keys_count) for sub in reversed(item))
    return found
