"""Example MCP server that asks the client's LLM to describe an image (``sampling/createMessage``
with an ``image`` content block).

Exercises the multimodal path of a sampling client: the image travels base64-encoded inside the
sampling request. Without a ``path`` it uses a tiny built-in PNG (2x2 red, generated with zlib+struct,
no imaging dependency). Run over stdio::

    python examples/servers/image_describer.py
"""

from __future__ import annotations

import base64
import mimetypes
import struct
import warnings
import zlib
from pathlib import Path

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

# Sampling is deprecated in the 2026-07-28 spec but is exactly what this example demonstrates.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

mcp = MCPServer("image-describer", instructions="Describes images using the client's vision LLM via MCP sampling.")

MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""Refuse larger files: providers cap inline images at a few MB and the whole request rides one JSON line."""

SUPPORTED_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def make_png(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """Build a valid solid-colour RGB PNG by hand (signature + IHDR + IDAT + IEND chunks)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    # 8-bit depth, colour type 2 (truecolour RGB), deflate compression, no filter method, no interlace.
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    # Every scanline starts with filter byte 0 ("None"), followed by the raw RGB pixels.
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


BUILTIN_PNG = make_png()
"""A 2x2 pure-red PNG (~70 bytes) used when no path is given."""


def load_image(path: str) -> tuple[bytes, str]:
    """Read ``path`` and guess its MIME type; raise ``ValueError`` for anything a vision model can't take."""
    file = Path(path).expanduser()
    mime_type = mimetypes.guess_type(file.name)[0]
    if mime_type not in SUPPORTED_MIME_TYPES:
        raise ValueError(f"unsupported image type {mime_type or 'unknown'!r}; use PNG, JPEG, GIF or WebP")
    if file.stat().st_size > MAX_IMAGE_BYTES:
        raise ValueError(f"image larger than {MAX_IMAGE_BYTES} bytes")
    return file.read_bytes(), mime_type


def sampling_failed(exc: MCPError, ctx: Context) -> ToolError:
    """Turn a sampling error into a readable tool error. A client that declared sampling (a host that
    samples, or mcp-sampling-proxy) answered the request itself, and its message says why (a policy's
    refusal, the LLM's error); only a client without sampling needs the proxy in front."""
    failed = f"Sampling request failed ({exc.code}: {exc.message})."
    if ctx.session.check_client_capability(types.ClientCapabilities(sampling=types.SamplingCapability())):
        return ToolError(failed)
    return ToolError(
        f"{failed} This server needs an MCP client that supports sampling - run it behind mcp-sampling-proxy "
        "if your host does not."
    )


@mcp.tool()
async def describe_image(ctx: Context, path: str = "") -> str:
    """Describe the image at ``path`` (PNG/JPEG/GIF/WebP) - or a built-in 2x2 red PNG when empty."""
    data, mime_type = load_image(path) if path else (BUILTIN_PNG, "image/png")
    try:
        result = await ctx.session.create_message(
            [
                types.SamplingMessage(
                    role="user",
                    content=[
                        types.TextContent(text="Describe this image in one or two sentences."),
                        types.ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type=mime_type),
                    ],
                )
            ],
            max_tokens=300,
            system_prompt="You describe images accurately and briefly. Mention dominant colours and shapes.",
            model_preferences=types.ModelPreferences(
                # Any vision-capable model will do; hints are substrings the client may map freely.
                hints=[types.ModelHint(name="claude"), types.ModelHint(name="gpt-4o")],
                intelligence_priority=0.5,
                speed_priority=0.5,
            ),
            related_request_id=ctx.request_id,
        )
    except MCPError as exc:
        raise sampling_failed(exc, ctx) from exc
    if isinstance(result.content, types.TextContent):
        return result.content.text.strip()
    return f"[model {result.model} returned non-text content: {result.content.type}]"


if __name__ == "__main__":
    mcp.run()
