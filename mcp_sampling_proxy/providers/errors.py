"""Turn provider failures into messages a server author can act on.

The text travels back to the MCP server (an untrusted party) and into logs, so it is short,
free of control characters, and never contains the API key even when the provider echoes it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mcp_sampling_proxy.config.keys import provider_key
from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.log import known_secrets
from mcp_sampling_proxy.providers.base import LLMError, UnsupportedContentError
from mcp_sampling_proxy.providers.llm_http import Reply, shown_url
from mcp_sampling_proxy.text.redact import CONFIGURED_KEY, KeyRuns, mask
from mcp_sampling_proxy.text.sanitize import one_line

DETAIL_LIMIT = 300
REDACTED = "[redacted]"
_SECRET_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")
# Key-shaped tokens (sk-..., sk-ant-..., sk-proj-...), even partially masked ones.
_KEY_LIKE = re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_*.\-]{8,}")


def safe_url(url: str) -> str:
    """The URL without user-info, query or fragment (either may carry a credential), nor a final slash."""
    return shown_url(url).rstrip("/")


def unsupported(config: ProviderConfig, content_type: str, where: str, why: str = "") -> UnsupportedContentError:
    """The request holds something this provider cannot take; we refuse rather than drop it."""
    message = f"provider '{config.name}' ({config.type}) cannot take content type '{content_type}' in {where}"
    return UnsupportedContentError(f"{message}: {why}" if why else message, provider=config.name)


def unsupported_role(config: ProviderConfig, role: Any, where: str) -> UnsupportedContentError:
    return UnsupportedContentError(
        f"provider '{config.name}' ({config.type}) cannot take role '{role}' in {where}", provider=config.name
    )


def http_error(provider: ProviderConfig, response: Reply, *, model: str | None = None) -> LLMError:
    """An LLMError for a non-2xx answer: status, a hint for the usual causes, the provider's words."""
    status = response.status
    hint = _hint(provider, response, status, model)
    secrets = _secrets(provider, response)
    # Scrub before and after flattening: removing control characters could re-join a key.
    detail = _scrub(one_line(_scrub(_provider_message(response), secrets), DETAIL_LIMIT), secrets)
    message = f"provider '{provider.name}' answered {status}"
    if hint:
        message += f": {hint}"
    if detail:
        message += f" ({detail})"
    return LLMError(message, provider=provider.name, status=status)


def _hint(provider: ProviderConfig, response: Reply, status: int, model: str | None) -> str:
    env = provider.api_key_env
    held = "api_key_file" if provider.api_key_file else "api_key_command" if provider.api_key_command else None
    if status == 401:
        if held:
            return f"check the key from {held}"
        if not env:
            return "no api_key_env configured for this provider"
        return f"check {env}" if provider_key(provider) else f"{env} is not set"  # (withheld ones count)
    if status == 403:
        holder = f"the key from {held}" if held else env
        return f"access denied, check {holder} and its permissions" if holder else "access denied"
    if status == 404:
        model = model or _requested_model(response)
        what = f"model '{one_line(model, 100)}' or endpoint" if model else "endpoint"
        return f"{what} {_request_url(response, provider)} not found, check the model name and base_url"
    if status == 429:
        return "rate limited, retries exhausted"
    if status == 529:
        return "overloaded, retries exhausted"
    if status in (500, 502, 503, 504):
        return "provider error, retries exhausted"
    if status == 413:
        return "request too large"
    return ""


def _provider_message(response: Reply) -> str:
    """The provider's own explanation from the usual JSON error shapes, else short plain text."""
    try:
        body: Any = response.json()
    except (ValueError, UnicodeDecodeError):
        text = response.text.strip()
        return "" if text.startswith("<") else text  # HTML error pages are noise
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, str):
            return err  # Ollama / llama.cpp: {"error": "..."}
        if isinstance(err, dict):
            message = err.get("message") or err.get("detail") or ""
            if isinstance(message, str) and message:
                kind = err.get("type") if body.get("type") == "error" else None  # Anthropic
                return f"{kind}: {message}" if isinstance(kind, str) and kind else message
        detail = body.get("detail")  # FastAPI-based servers (vLLM)
        if isinstance(detail, str):
            return detail
        if detail is not None:
            return json.dumps(detail)
    return ""


def _secrets(provider: ProviderConfig, response: Reply) -> list[str]:
    found = list(known_secrets())  # every key the proxy holds: the error text goes to the server
    key = provider_key(provider)  # from the environment (withheld once read), a file or a command
    if key:
        found.append(key)
    found += [v for v in provider.headers.values() if v]
    sent = {name.lower(): value for name, value in response.sent_headers.items()}
    for name in _SECRET_HEADERS:
        value = sent.get(name)
        if value:
            found.append(value)
            if value.lower().startswith("bearer "):
                found.append(value[7:].strip())
    # Longest first so a key is removed whole before any prefix of it.
    return sorted({s for s in found if s.strip()}, key=len, reverse=True)


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    # Any 8-character run of a key, not just the whole key: providers echo keys minus a few characters.
    text = KeyRuns(secrets).scrub(text)[0].replace(mask(CONFIGURED_KEY), REDACTED)
    return _KEY_LIKE.sub(REDACTED, text)


def _requested_model(response: Reply) -> str | None:
    try:
        model = json.loads(response.sent or b"{}").get("model")
    except (ValueError, AttributeError):
        return None
    return model if isinstance(model, str) else None


def _request_url(response: Reply, provider: ProviderConfig) -> str:
    url = response.url or provider.base_url
    return safe_url(url) if url else "(unknown)"
