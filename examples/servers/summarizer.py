"""Example MCP server that summarizes text by asking the *client's* LLM (``sampling/createMessage``).

It has no model or API key of its own - that is the point of sampling, and the reason it needs
mcp-sampling-proxy in front of hosts that don't implement sampling. Run directly over stdio::

    python examples/servers/summarizer.py
"""

from __future__ import annotations

import warnings

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

# Sampling is deprecated in the 2026-07-28 spec but is exactly what this example demonstrates.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

mcp = MCPServer("summarizer", instructions="Summarizes text using the client's LLM via MCP sampling.")

SYSTEM_PROMPT = (
    "You are a precise summarizer. Reply with the summary only: no preamble, no headings, no quotes. "
    "Keep the facts of the source and never add new ones."
)

MODEL_PREFERENCES = types.ModelPreferences(
    # Hints are substrings matched in order; the client may map them to any provider's model.
    hints=[types.ModelHint(name="claude"), types.ModelHint(name="gpt")],
    # Summaries are cheap, latency-sensitive work: favour a fast, inexpensive model.
    cost_priority=0.6,
    speed_priority=0.8,
    intelligence_priority=0.3,
)


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
async def summarize(text: str, ctx: Context, max_words: int = 50) -> str:
    """Summarize ``text`` in at most ``max_words`` words using the client's LLM."""
    if not text.strip():
        return ""
    try:
        result = await ctx.session.create_message(
            [
                types.SamplingMessage(
                    role="user",
                    content=types.TextContent(text=f"Summarize the following in at most {max_words} words:\n\n{text}"),
                )
            ],
            max_tokens=300,
            system_prompt=SYSTEM_PROMPT,
            temperature=0.2,
            model_preferences=MODEL_PREFERENCES,
            related_request_id=ctx.request_id,
        )
    except MCPError as exc:
        raise sampling_failed(exc, ctx) from exc
    if isinstance(result.content, types.TextContent):
        return result.content.text.strip()
    # A client may legally answer with an image/audio block; say so rather than failing opaquely.
    return f"[model {result.model} returned non-text content: {result.content.type}]"


if __name__ == "__main__":
    mcp.run()
