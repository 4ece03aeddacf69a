"""A true upper bound of the tokens one sampling request can cost, for budget reservations.

The request's survey (survey.py) adds up these per-block bounds in its one walk.

A budget reserves a request's worst case before the LLM call, so that requests running at once
(from one proxy or many) can never settle to more than the budget. The old estimate (bytes / 4)
was an average for English text: CJK text takes about one token per character (3 UTF-8 bytes),
so concurrent CJK requests settled 20 % over a shared budget. The bound here holds for any text:

- text: byte-level BPE tokenizers (OpenAI, Anthropic, Llama, ...) never produce more tokens
  than the UTF-8 bytes they read, so every byte the model reads counts as one token (system
  prompt, text blocks, text inside tool results, tool_use inputs and structured content as
  JSON, tool definitions as JSON), plus a fixed overhead per request, message and block for the
  chat template's own tokens, and one for the provider's tool-use system prompt.
- images: the larger of Anthropic's (w * h / 750, at most 1,600) and OpenAI's high-detail tiles
  (85 + 170 per 512 px tile after fitting 2048 px and 768 px on the short side), with w and h
  read from the PNG, GIF, WebP or JPEG header; an image whose size cannot be read counts as
  1,600, which is at least either formula gives for any size.
- audio: one token per 16 decoded bytes (8 kbit/s audio is 1,000 bytes a second, 62 tokens;
  models charge about 10 a second).
- output: maxTokens.

Models that bill images with a multiplier (gpt-4o-mini counts an image as ~33 times the tiles)
exceed the image bound; their real usage is still what the budget is charged when they settle.
"""

from __future__ import annotations

import binascii
import json
import math
from typing import Any

from mcp_sampling_proxy.protocol.content import b64_decoded_size, text_bytes

REQUEST_OVERHEAD = 32  # tokens the chat template adds once (priming, system role)
MESSAGE_OVERHEAD = 8  # per message (role markers, separators)
BLOCK_OVERHEAD = 8  # per content block (tool call wrappers, image markers)
TOOLS_OVERHEAD = 600  # the provider's tool-use system prompt (Anthropic: up to ~530 tokens)
IMAGE_MAX_TOKENS = 1600  # any image, under both formulas; also the bound for an unreadable header
AUDIO_BYTES_PER_TOKEN = 16
_HEADER_BYTES = 64 * 1024  # of decoded image data searched for the size (JPEG EXIF can be large)


def block_tokens(block: dict[str, Any]) -> int:
    """Upper bound of one content block's input tokens (its own text; nested blocks separately)."""
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return text_bytes(block["text"])
    if kind == "image":
        data = block.get("data")
        size = image_size(data) if isinstance(data, str) else None
        return IMAGE_MAX_TOKENS if size is None else image_tokens(*size)
    if kind == "audio" and isinstance(block.get("data"), str):
        decoded = b64_decoded_size(block["data"])
        return math.ceil((decoded if decoded is not None else len(block["data"])) / AUDIO_BYTES_PER_TOKEN)
    if kind == "tool_use":
        return json_bytes(block.get("input", {})) + text_bytes(str(block.get("name", "")))
    if kind == "tool_result":
        return json_bytes(block["structuredContent"]) if block.get("structuredContent") is not None else 0
    if kind == "resource" and isinstance(block.get("resource"), dict):
        resource = block["resource"]
        return sum(text_bytes(resource[f]) for f in ("text", "blob") if isinstance(resource.get(f), str))
    return 0


def image_tokens(width: int, height: int) -> int:
    """The larger of Anthropic's and OpenAI's (high detail) token count for a w x h image."""
    if width <= 0 or height <= 0:
        return IMAGE_MAX_TOKENS
    anthropic = min(IMAGE_MAX_TOKENS, math.ceil(width * height / 750))
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    openai = 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)
    return min(IMAGE_MAX_TOKENS, max(anthropic, openai))


def image_size(data: str) -> tuple[int, int] | None:
    """(width, height) from the header of base64 PNG, GIF, WebP or JPEG data; None when unknown."""
    prefix = data[: _HEADER_BYTES // 3 * 4]
    try:
        head = binascii.a2b_base64(prefix[: len(prefix) // 4 * 4])
    except (binascii.Error, ValueError):
        return None
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 24:
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        return _webp_size(head)
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(head)
    return None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        return int.from_bytes(head[26:28], "little") & 0x3FFF, int.from_bytes(head[28:30], "little") & 0x3FFF
    if chunk == b"VP8L" and head[20:21] == b"\x2f":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    """Walk the marker segments to the first start-of-frame (SOF0..SOF15 but DHT, JPG, DAC)."""
    pos = 2
    while pos + 9 <= len(head):
        if head[pos] != 0xFF:
            return None
        marker = head[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(head[pos + 7 : pos + 9], "big"), int.from_bytes(head[pos + 5 : pos + 7], "big")
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            pos += 2
            continue
        pos += 2 + int.from_bytes(head[pos + 2 : pos + 4], "big")
    return None


def json_bytes(value: Any) -> int:
    """UTF-8 bytes of `value` as compact JSON: what a model reads of a tool's input or schema."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return len(text.encode("utf-8", "surrogatepass"))
