"""The one walker over a sampling request's content blocks, and the sizes of what they hold.

The spec lets a message's `content` be one block or a list, and a `tool_result` block holds blocks
of its own. The request's survey (policy/survey.py: size caps, the policy's facts, the token
bound), the approval text and the adapters all read blocks through here, so they agree on which
blocks a request holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def as_blocks(content: Any) -> list[Any]:
    """A message's content as a list: one block or a list of them; None holds none."""
    if content is None:
        return []
    return content if isinstance(content, list) else [content]


def walk_blocks(params: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every content block of every message, with where it is, in document order, including
    the blocks inside tool_result blocks (which follow their tool_result).

    Paths look like `messages[3].content[1]`, `messages[0].content` (a single block, not a
    list) and `messages[2].content[0].content[1]` (inside a tool_result).
    """
    messages = params.get("messages")
    if not isinstance(messages, list):
        return
    for index, message in enumerate(messages):
        if isinstance(message, dict):
            yield from _blocks_of(message.get("content"), f"messages[{index}].content", depth=0)


def _blocks_of(content: Any, where: str, depth: int) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(content, dict):
        items: list[tuple[str, Any]] = [(where, content)]
    elif isinstance(content, list):
        items = [(f"{where}[{i}]", block) for i, block in enumerate(content)]
    else:
        return
    for path, block in items:
        if not isinstance(block, dict):
            continue
        yield path, block
        if block.get("type") == "tool_result" and depth < 4:  # nesting is one level in the spec; stay bounded
            yield from _blocks_of(block.get("content"), f"{path}.content", depth + 1)


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
