"""send_with_retries and http_error over real loopback HTTP, with an injected sleep so tests stay fast."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import orjson
import pytest
from fakes.llm_server import FakeLLMServer
from structlog.testing import capture_logs

from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.providers.base import LLMError
from mcp_sampling_proxy.providers.errors import http_error
from mcp_sampling_proxy.providers.llm_http import LlmHttp, Reply, Timeouts
from mcp_sampling_proxy.providers.retry import RETRY_STATUSES, backoff_delay, send_with_retries

pytestmark = pytest.mark.anyio

KEY = "sk-retry-secret-0123456789"
ENV = "FAKE_RETRY_KEY"


def config(base_url: str | None = None, **overrides: Any) -> ProviderConfig:
    values: dict[str, Any] = {
        "name": "openai",
        "type": "openai",
        "base_url": base_url,
        "api_key_env": ENV,
        "max_attempts": 3,
        "backoff_base": 0.5,
        "backoff_max": 30.0,
        "read_timeout": 2.0,
        "connect_timeout": 1.0,
    }
    values.update(overrides)
    return ProviderConfig(**values)


class Sleeps(list[float]):
    """An injected sleep that records the delay instead of waiting."""

    async def __call__(self, delay: float) -> None:
        self.append(delay)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as srv:
        yield srv


def llm_http(read: float = 2.0, connect: float = 2.0) -> LlmHttp:
    """The adapters' client, with the key in its headers, for a provider on loopback."""
    return LlmHttp({"authorization": f"Bearer {KEY}"}, Timeouts(connect, read), tls=True, proxy_for="http://127.0.0.1")


@pytest.fixture
async def client() -> AsyncIterator[LlmHttp]:
    http = llm_http()
    yield http
    await http.aclose()


def poster(client: LlmHttp, server: FakeLLMServer) -> Callable[[], Awaitable[Reply]]:
    url = f"{server.base_url}/chat/completions"
    return lambda: client.post(url, orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))


# -- retries ---------------------------------------------------------------------------------------


async def test_429_retry_after_seconds_then_success(server: FakeLLMServer, client: LlmHttp) -> None:
    server.reply_error(429, "slow down", retry_after=7)
    sleeps = Sleeps()
    response = await send_with_retries(poster(client, server), config(), sleep=sleeps)
    assert response.status == 200
    assert len(server.requests) == 2
    assert sleeps == [7.0]


async def test_retry_after_is_capped_at_backoff_max(server: FakeLLMServer, client: LlmHttp) -> None:
    server.reply_error(503, "busy", retry_after=3600)
    sleeps = Sleeps()
    await send_with_retries(poster(client, server), config(backoff_max=4.0), sleep=sleeps)
    assert sleeps == [4.0]


async def test_retry_after_http_date(server: FakeLLMServer, client: LlmHttp) -> None:
    future = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)
    past = format_datetime(datetime.now(UTC) - timedelta(hours=1), usegmt=True)
    server.reply_error(429, "later", retry_after=future)
    server.reply_error(429, "later", retry_after=past)
    sleeps = Sleeps()
    response = await send_with_retries(poster(client, server), config(backoff_max=9.0), sleep=sleeps)
    assert response.status == 200
    assert sleeps == [9.0, 0.0]


async def test_retry_after_ms(server: FakeLLMServer, client: LlmHttp) -> None:
    server.enqueue(status=429, body={"error": {"message": "x"}}, headers={"retry-after-ms": "250"})
    sleeps = Sleeps()
    await send_with_retries(poster(client, server), config(), sleep=sleeps)
    assert sleeps == [0.25]


async def test_exponential_backoff_with_equal_jitter(server: FakeLLMServer, client: LlmHttp) -> None:
    server.reply_error(503, "busy")
    server.reply_error(502, "bad gateway")
    sleeps = Sleeps()
    response = await send_with_retries(poster(client, server), config(), sleep=sleeps, rng=lambda: 0.0)
    assert response.status == 200
    assert sleeps == [0.25, 0.5]  # half of 0.5 * 2**attempt
    server.reply_error(503, "busy")
    server.reply_error(503, "busy")
    sleeps.clear()
    await send_with_retries(poster(client, server), config(), sleep=sleeps, rng=lambda: 1.0)
    assert sleeps == [0.5, 1.0]


def test_backoff_is_capped() -> None:
    cfg = config(backoff_base=10.0, backoff_max=15.0)
    assert [backoff_delay(cfg, n, lambda: 1.0) for n in range(3)] == [10.0, 15.0, 15.0]
    assert [backoff_delay(cfg, n, lambda: 0.0) for n in range(3)] == [5.0, 7.5, 7.5]


@pytest.mark.parametrize("status", sorted(RETRY_STATUSES))
async def test_retryable_statuses(server: FakeLLMServer, client: LlmHttp, status: int) -> None:
    server.reply_error(status, "transient")
    response = await send_with_retries(poster(client, server), config(), sleep=Sleeps())
    assert response.status == 200
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_statuses_are_not_retried(server: FakeLLMServer, client: LlmHttp, status: int) -> None:
    server.reply_error(status, "no")
    sleeps = Sleeps()
    response = await send_with_retries(poster(client, server), config(), sleep=sleeps)
    assert response.status == status
    assert len(server.requests) == 1
    assert sleeps == []


async def test_exhausted_status_returns_last_response(server: FakeLLMServer, client: LlmHttp) -> None:
    for _ in range(4):
        server.reply_error(500, "boom")
    sleeps = Sleeps()
    response = await send_with_retries(poster(client, server), config(max_attempts=4), sleep=sleeps)
    assert response.status == 500
    assert len(server.requests) == 4
    assert len(sleeps) == 3
    assert str(http_error(config(), response)) == (
        "provider 'openai' answered 500: provider error, retries exhausted (boom)"
    )


async def test_retries_are_logged_without_secrets(
    server: FakeLLMServer, client: LlmHttp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEY)
    server.reply_error(429, "slow", retry_after=1)
    with capture_logs() as logs:
        await send_with_retries(poster(client, server), config(), sleep=Sleeps())
    assert logs == [
        {
            "event": "llm_retry",
            "log_level": "warning",
            "provider": "openai",
            "attempt": 1,
            "max_attempts": 3,
            "delay": 1.0,
            "status": 429,
        }
    ]
    assert KEY not in repr(logs)


async def test_read_timeout_exhausted(server: FakeLLMServer) -> None:
    server.enqueue(delay=2.0)
    server.enqueue(delay=2.0)
    sleeps = Sleeps()
    cfg = config(server.base_url, read_timeout=0.1, max_attempts=2)
    client = llm_http(read=cfg.read_timeout, connect=cfg.connect_timeout)
    with pytest.raises(LLMError) as info, capture_logs() as logs:
        await send_with_retries(poster(client, server), cfg, sleep=sleeps)
    await client.aclose()
    assert info.value.message == "provider 'openai' timed out after 2 attempts (read timeout 0.1s)"
    assert info.value.provider == "openai"
    assert len(sleeps) == 1
    assert logs[0]["error"] == "read timeout"


async def test_timeout_then_success(server: FakeLLMServer) -> None:
    server.enqueue(delay=2.0)
    client = llm_http(read=0.1)
    response = await send_with_retries(poster(client, server), config(), sleep=Sleeps())
    await client.aclose()
    assert response.status == 200
    assert len(server.requests) == 2


async def test_connection_refused(client: LlmHttp) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    sleeps = Sleeps()
    with pytest.raises(LLMError) as info:
        await send_with_retries(lambda: client.get(f"{base}/models"), config(base), sleep=sleeps)
    assert info.value.message == (f"provider 'openai' unreachable at {base}: connection refused after 3 attempts")
    assert len(sleeps) == 2


async def test_an_answer_past_the_cap_fails_at_once(server: FakeLLMServer) -> None:
    """A provider answering more than the client takes is not asked again: it would answer the same."""
    server.enqueue(body={"choices": [], "padding": "x" * 4096})
    client = LlmHttp({}, Timeouts(2, 2), tls=True, proxy_for="http://127.0.0.1", max_answer=1024)
    sleeps = Sleeps()
    with pytest.raises(LLMError) as info:
        await send_with_retries(poster(client, server), config(server.base_url), sleep=sleeps)
    await client.aclose()
    assert info.value.message.startswith(
        f"provider 'openai' failed at {server.base_url} after 1 attempt: the answer is larger than 1 KiB; "
    ), info.value.message
    assert sleeps == [] and len(server.requests) == 1


# -- http_error ------------------------------------------------------------------------------------


def response(status: int, body: Any = None, *, text: str | None = None, request_key: str | None = KEY) -> Reply:
    """A provider's answer as the adapters' client gives it, to a request carrying `request_key`."""
    headers = {"authorization": f"Bearer {request_key}"} if request_key else {}
    url = "https://user:pw@api.example.com/v1/chat/completions?key=zzz"
    answer = text.encode() if text is not None else orjson.dumps(body)
    return Reply(status, {}, answer, url, orjson.dumps({"model": "gpt-x"}), headers)


def test_http_error_openai_body_and_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, KEY)
    err = http_error(config(), response(401, {"error": {"message": "Incorrect API key provided", "type": "x"}}))
    assert err.message == f"provider 'openai' answered 401: check {ENV} (Incorrect API key provided)"
    assert (err.status, err.provider) == (401, "openai")


def test_http_error_anthropic_body() -> None:
    body = {"type": "error", "error": {"type": "permission_error", "message": "not allowed"}}
    err = http_error(config(name="claude", type="anthropic"), response(403, body))
    assert err.message == (
        f"provider 'claude' answered 403: access denied, check {ENV} and its permissions "
        "(permission_error: not allowed)"
    )


def test_http_error_never_contains_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, KEY)
    echo = {"error": {"message": f"key {KEY} and Bearer {KEY} and masked sk-proj-****abcd1234 rejected"}}
    err = http_error(config(), response(401, echo))
    assert KEY not in err.message
    assert "abcd1234" not in err.message
    assert err.message == (
        f"provider 'openai' answered 401: check {ENV} (key [redacted] and [redacted] and masked [redacted] rejected)"
    )


def test_http_error_scrubs_key_from_request_header_even_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    secret = "plain-local-token-xyz"
    err = http_error(config(), response(400, {"error": f"bad token {secret}"}, request_key=secret))
    assert err.message == "provider 'openai' answered 400 (bad token [redacted])"


def test_http_error_truncates_and_strips_controls() -> None:
    body = {"error": {"message": "\x1b[31mred\x1b[0m line\nnext\x07 " + "x" * 1000}}
    err = http_error(config(), response(400, body))
    detail = err.message.split(" (", 1)[1]
    assert detail.startswith("red line next x")
    assert len(detail) <= 301
    assert not any(ord(c) < 32 for c in err.message)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            404,
            {"error": "model 'gpt-x' not found"},  # Ollama's shape
            "provider 'openai' answered 404: model 'gpt-x' or endpoint https://api.example.com/v1/chat/completions "
            "not found, check the model name and base_url (model 'gpt-x' not found)",
        ),
        (
            429,
            {"error": {"message": "Rate limit reached"}},
            "provider 'openai' answered 429: rate limited, retries exhausted (Rate limit reached)",
        ),
        (
            422,
            {"detail": [{"msg": "field required"}]},
            'provider \'openai\' answered 422 ([{"msg": "field required"}])',
        ),
        (401, {}, "provider 'openai' answered 401: FAKE_RETRY_KEY is not set"),
    ],
)
def test_http_error_hints(monkeypatch: pytest.MonkeyPatch, status: int, body: dict[str, Any], expected: str) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert http_error(config(), response(status, body)).message == expected


def test_http_error_plain_text_and_html_bodies() -> None:
    assert http_error(config(), response(502, text="upstream connect error")).message == (
        "provider 'openai' answered 502: provider error, retries exhausted (upstream connect error)"
    )
    assert http_error(config(), response(502, text="<html><body>Bad Gateway</body></html>")).message == (
        "provider 'openai' answered 502: provider error, retries exhausted"
    )


def test_http_error_without_api_key_env() -> None:
    err = http_error(config(api_key_env=None), response(401, {"error": {"message": "auth required"}}))
    assert err.message == "provider 'openai' answered 401: no api_key_env configured for this provider (auth required)"


async def test_url_without_scheme_fails_at_once(client: LlmHttp) -> None:
    sleeps = Sleeps()
    with pytest.raises(LLMError) as info:
        await send_with_retries(lambda: client.get("localhost:11434/v1/models"), config(), sleep=sleeps)
    assert info.value.message.startswith("provider 'openai' has an unusable base_url: ")
    assert "localhost:11434/v1/models" in info.value.message
    assert sleeps == []
