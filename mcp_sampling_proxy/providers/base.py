"""Provider-neutral types shared by every LLM adapter.

Adapters receive the sampling request as the wire dict (camelCase keys, already validated
with the SDK's models by the caller) and return a `Completion` holding MCP content blocks,
so they never depend on a transport or on the SDK's session machinery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.protocol.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams


@dataclass
class Completion:
    """What a provider answered, already mapped to MCP terms."""

    content: list[dict[str, Any]]  # MCP content blocks: text / tool_use
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
