"""Retrying provider calls: transient failures (rate limits, overload, network) are retried with
capped exponential backoff so one hiccup does not fail a server's sampling request, while the
attempt budget keeps a dead provider from stalling it for long.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import anyio
import orjson
import structlog

from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.protocol.wire_types import JsonObject
from mcp_sampling_proxy.providers.base import LLMError
from mcp_sampling_proxy.providers.errors import http_error, safe_url
from mcp_sampling_proxy.providers.llm_http import LlmHttp, Reply, TransportFailure
from mcp_sampling_proxy.text.sanitize import one_line

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})

Sleep = Callable[[float], Awaitable[Any]]


def backoff_delay(config: ProviderConfig, attempt: int, rng: Callable[[], float] = random.random) -> float:
    """Equal jitter: half the exponential step is guaranteed, half is random, so retries from
    many sessions spread out without ever retrying immediately. `attempt` counts from 0."""
    step = min(config.backoff_max, config.backoff_base * 2**attempt)
    return float(step / 2 + rng() * step / 2)


def retry_after(response: Reply, *, now: float | None = None) -> float | None:
    """Seconds the provider asked us to wait (`retry-after-ms`, `Retry-After` seconds or
    HTTP-date), or None when it did not say (or said something unparseable)."""
    millis = response.headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def describe_transport_error(config: ProviderConfig, failure: TransportFailure, attempts: int, url: str) -> str:
    """A message a server author can act on; never includes headers (they carry the key)."""
    name, tries = config.name, f"{attempts} attempt{'s' if attempts != 1 else ''}"
    if failure.kind == "connect timeout":
        return f"provider '{name}' timed out after {tries} (connect timeout {config.connect_timeout}s)"
    if failure.kind == "read timeout":
        return f"provider '{name}' timed out after {tries} (read timeout {config.read_timeout}s)"
    if failure.kind == "connect":
        return f"provider '{name}' unreachable at {url}: {one_line(failure.reason, 200)} after {tries}"
    return f"provider '{name}' failed at {url} after {tries}: {one_line(failure.reason, 200)}"


async def send_with_retries(
    send: Callable[[], Awaitable[Reply]],
    config: ProviderConfig,
    *,
    sleep: Sleep = anyio.sleep,
    rng: Callable[[], float] = random.random,
    url: str | None = None,
) -> Reply:
    """Call `send` until it yields a non-retryable response or `config.max_attempts` is used up.

    Returns the last response when attempts run out on an HTTP status (the caller turns it into
    an error with `http_error`); raises LLMError when they run out on a network error or timeout.
    `url` names the endpoint in that error (defaults to `config.base_url`). Deterministic
    failures (a URL without http(s)://, a request the client refuses to send) are not retried.
    """
    attempts = max(1, config.max_attempts)
    for attempt in range(attempts):
        last = attempt + 1 >= attempts
        try:
            response = await send()
        except TransportFailure as exc:
            if exc.kind == "bad url":
                raise LLMError(
                    f"provider '{config.name}' has an unusable base_url: {one_line(exc.reason, 200)}",
                    provider=config.name,
                ) from exc
            if last or not exc.retryable:
                where = _where(url or config.base_url)
                tried = attempt + 1
                raise LLMError(describe_transport_error(config, exc, tried, where), provider=config.name) from exc
            delay = backoff_delay(config, attempt, rng)
            _log_retry(config, attempt + 1, attempts, delay, error=exc.kind)
            await sleep(delay)
            continue
        if response.status not in RETRY_STATUSES or last:
            return response
        asked = retry_after(response)
        delay = min(config.backoff_max, asked) if asked is not None else backoff_delay(config, attempt, rng)
        _log_retry(config, attempt + 1, attempts, delay, status=response.status)
        await sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


async def post_json(
    http: LlmHttp, url: str, payload: Mapping[str, object], config: ProviderConfig, *, model: str
) -> JsonObject:
    """POST with retries; a non-2xx or non-JSON answer becomes an LLMError (a JSON object is returned
    unchecked: the adapter's `parse_response` reads it)."""
    # `url` as given: it is made safe (no user-info, query) only when an error names it
    body = orjson.dumps(payload)  # a request's numbers and text are JSON's (the MCP request was checked)
    response = await send_with_retries(lambda: http.post(url, body), config, url=url)
    if not response.is_success:
        raise http_error(config, response, model=model)
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise LLMError(
            f"provider '{config.name}' answered {response.status} with a body that is not a JSON object",
            provider=config.name,
            status=response.status,
        )
    return data


def _where(url: str | None) -> str:
    return safe_url(url) if url else "(unknown url)"


def _log_retry(config: ProviderConfig, attempt: int, attempts: int, delay: float, **why: Any) -> None:
    structlog.get_logger("mcp_sampling_proxy.providers").warning(
        "llm_retry",
        provider=config.name,
        attempt=attempt,
        max_attempts=attempts,
        delay=round(delay, 3),
        **why,
    )
