"""Edits a person makes at an approval: the prompt before the LLM sees it, the answer before the
server does. An edit travels as text only; these apply it and keep every other block in place."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from mcp_sampling_proxy.protocol.wire_types import CallToolParams, CreateMessageParams
from mcp_sampling_proxy.text.sanitize import strip_controls


def result_text(result: dict[str, Any]) -> str:
    content = result.get("content")
    blocks = content if isinstance(content, list) else [content]
    return "\n".join(str(b.get("text", f"[{b.get('type')}]")) for b in blocks if isinstance(b, dict))


def text_of(content: Any) -> str | None:
    """The text blocks of a message's or a result's content, joined (None when it has none)."""
    blocks = content if isinstance(content, list) else [content]
    texts = [str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(texts) if texts else None


def replace_text(content: Any, text: str) -> Any:
    """`content` (one block or a list) with its text replaced by `text` and every other block kept
    in place: one text block where the first one was (first, when there was none). An image sent
    with the prompt, a tool call in an answer: an edit of the words must not drop them."""
    block = {"type": "text", "text": text}
    if isinstance(content, dict) and content.get("type") == "text":
        return block
    blocks = copy.deepcopy(content if isinstance(content, list) else [content] if isinstance(content, dict) else [])
    first = next((i for i, b in enumerate(blocks) if isinstance(b, dict) and b.get("type") == "text"), 0)
    kept = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "text")]
    kept.insert(min(first, len(kept)), block)
    return kept


def with_text(result: dict[str, Any], text: str) -> dict[str, Any]:
    """The result with its text replaced by an operator's edit (its other blocks kept)."""
    edited = copy.deepcopy(result)
    edited["content"] = replace_text(result.get("content"), text)
    return edited


def last_user(params: Mapping[str, Any]) -> int | None:
    messages = params.get("messages")
    if not isinstance(messages, list):
        return None
    return next(
        (
            i
            for i in range(len(messages) - 1, -1, -1)
            if isinstance(messages[i], dict) and messages[i].get("role") == "user"
        ),
        None,
    )


def prompt_not_editable(params: Mapping[str, Any]) -> str | None:
    """Why the prompt of this request cannot be edited, or None when it can."""
    index = last_user(params)
    if index is None:
        return "the request has no user message"
    content = params["messages"][index].get("content")
    blocks = content if isinstance(content, list) else [content]
    if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
        return "its last user message holds tool results, which may not be mixed with text"
    return None


def kept_blocks(params: Mapping[str, Any]) -> list[str]:
    """The types of the non-text blocks an edit of the prompt keeps ("image", "audio", ...)."""
    index = last_user(params)
    content = params["messages"][index].get("content") if index is not None else None
    blocks = content if isinstance(content, list) else [content]
    return [strip_controls(str(b.get("type"))) for b in blocks if isinstance(b, dict) and b.get("type") != "text"]


def with_prompt(params: CreateMessageParams | CallToolParams, text: str) -> CreateMessageParams:
    """The request with the text of its last user message replaced by an operator's edit; the
    message's images, audio and other blocks stay where they were. ValueError when the prompt
    cannot be edited (`prompt_not_editable`: a tool call has no user message)."""
    why = prompt_not_editable(params)
    index = last_user(params)
    # (`"messages" not in params` never adds a refusal, as `index` is then None: it tells mypy which request it is)
    if why is not None or index is None or "messages" not in params:
        raise ValueError(f"the prompt cannot be edited: {why}")
    edited = copy.deepcopy(params)
    message = edited["messages"][index]
    message["content"] = replace_text(message.get("content"), text)
    return edited
