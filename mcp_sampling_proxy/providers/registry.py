"""The adapter for each provider type (config/providers.py's KINDS), made when a provider is first used.

Every adapter's module is imported only then: a proxy whose policy names no provider of a type does not
pay for its module at start, and one without an HTTP provider never loads aiohttp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.providers.base import Adapter
from mcp_sampling_proxy.providers.typed_reply import TypedReplyAdapter


def _openai(config: ProviderConfig, _terminal: Any) -> Adapter:
    from mcp_sampling_proxy.providers.openai import OpenAIAdapter  # start-up: aiohttp, ~200 ms; openai only

    return OpenAIAdapter(config)


def _anthropic(config: ProviderConfig, _terminal: Any) -> Adapter:
    from mcp_sampling_proxy.providers.anthropic import AnthropicAdapter  # start-up: aiohttp, ~200 ms; anthropic only

    return AnthropicAdapter(config)


def _command(config: ProviderConfig, _terminal: Any) -> Adapter:
    from mcp_sampling_proxy.providers.command import CommandAdapter  # start-up: ~25 ms, only for a command provider

    return CommandAdapter(config)


def _console(config: ProviderConfig, terminal: Any) -> Adapter:
    return TypedReplyAdapter(config, terminal)


FACTORIES: dict[str, Callable[[ProviderConfig, Any], Adapter]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "command": _command,
    "console": _console,
}


def make_adapter(config: ProviderConfig, terminal: Any = None) -> Adapter:
    """The adapter for `config` (the console provider types at `terminal`)."""
    return FACTORIES[config.type](config, terminal)
