"""Provider-neutral types shared by every LLM adapter.

Adapters receive the sampling request as the wire dict (camelCase keys, already validated
with the SDK's models by the caller) and return a `Completion` holding MCP content blocks,
so they never depend on a transport or on the SDK's session machinery.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from msgspec import Struct

from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.protocol.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams, JsonObject, TextContent, ToolUseContent

# A provider's answer is at most this long, over HTTP or from a CLI: a chat completion is kilobytes, and
# what answers instead (a wrong base_url, a hostile endpoint, a small gzip body that unpacks to gigabytes, a
# runaway CLI) must not fill the proxy's memory.
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class Completion(Struct):
    """What a provider answered, already mapped to MCP terms."""

    content: list[TextContent | ToolUseContent]  # MCP content blocks
    model: str  # the model name the provider reports
    stop_reason: str  # endTurn | stopSequence | maxTokens | toolUse | provider's own value
    input_tokens: int | None = None  # every input token, those read from the provider's cache included
    output_tokens: int | None = None
    cached_input_tokens: int | None = None  # of input_tokens, those read from the cache (a lower price)


class LLMError(Exception):
    """A sampling request the provider could not fulfil; `message` is safe to show the server."""

    code = INTERNAL_ERROR

    def __init__(self, message: str, *, provider: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.status = status


class UnsupportedContentError(LLMError):
    """The request carries something this provider cannot take (never dropped silently)."""

    code = INVALID_PARAMS


class Adapter(Protocol):
    """What the sampling service needs from a provider."""

    config: ProviderConfig

    @property
    def supports_tools(self) -> bool: ...

    async def complete(self, params: CreateMessageParams, model: str) -> Completion:
        """Fulfil one `sampling/createMessage` (params as on the wire) with `model`."""
        ...

    async def aclose(self) -> None: ...


def tool_use_block(provider: str, call_id: object, name: object, arguments: JsonObject) -> ToolUseContent:
    """The MCP `tool_use` block for a provider's tool call. A call without a tool name cannot be run
    (an error the server sees, not a block it would choke on); one without an id gets one, since the
    server answers each call with a `tool_result` that names its id (some local servers send none)."""
    if not isinstance(name, str) or not name:
        raise LLMError(f"provider '{provider}' returned a tool call without a tool name", provider=provider)
    if not isinstance(call_id, str) or not call_id:
        call_id = f"call_{uuid.uuid4().hex[:24]}"
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
