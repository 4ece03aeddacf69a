"""Builders shared by the adapter tests: a fast-failing provider config and MCP request pieces."""

from __future__ import annotations

from typing import Any

from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def fast_config(base_url: str, *, name: str, kind: str, env: str, model: str, **overrides: Any) -> ProviderConfig:
    """Short timeouts and backoff, so failure paths take milliseconds."""
    values: dict[str, Any] = {
        "name": name,
        "type": kind,
        "base_url": base_url,
        "api_key_env": env,
        "models": (ModelSpec(model),),
        "connect_timeout": 1.0,
        "read_timeout": 2.0,
        "max_attempts": 3,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
    }
    values.update(overrides)
    return ProviderConfig(**values)


def user(content: Any) -> dict[str, Any]:
    """A user message; a bare string is shorthand for one text block."""
    return {"role": "user", "content": {"type": "text", "text": content} if isinstance(content, str) else content}
