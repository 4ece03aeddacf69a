"""The adapters' HTTP client (providers/llm_http.py) does on purpose what the library would not: a proxy the
environment names is used (unless NO_PROXY names the host), ~/.netrc is never read, the CA store is certifi's
or the one SSL_CERT_FILE names, and what fails says what failed."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import certifi
import orjson
import pytest
from fakes.llm_server import FakeLLMServer

from mcp_sampling_proxy.providers.llm_http import LlmHttp, Reply, Timeouts, TransportFailure, shown_url, verified_tls

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_proxy_variables")]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as srv:
        yield srv


def client(base_url: str, headers: dict[str, str] | None = None) -> LlmHttp:
    return LlmHttp(headers or {}, Timeouts(connect=2, read=2), tls=True, proxy_for=base_url)


async def test_a_call_goes_through_the_proxy_the_environment_names(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With HTTP_PROXY set, the request goes to the proxy, as an absolute URL (the fake LLM stands in for a
    forward proxy: it records the request line's target)."""
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    http = client("http://llm.example/v1")
    reply = await http.post("http://llm.example/v1/chat/completions", orjson.dumps({"model": "m"}))
    await http.aclose()
    assert server.last.path == "http://llm.example/v1/chat/completions"
    assert reply.status == 404  # the stand-in has no route for it: what matters is where it went


async def test_no_proxy_names_a_host_reached_directly(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("NO_PROXY", "llm.invalid")
    http = client("http://llm.invalid/v1")
    with pytest.raises(TransportFailure) as failed:
        await http.get("http://llm.invalid/v1/models")
    await http.aclose()
    assert (failed.value.kind, failed.value.reason) == ("connect", "host name not found")
    assert server.requests == []


async def test_a_socks_proxy_is_refused_with_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
    http = client("http://127.0.0.2:9/v1")
    with pytest.raises(TransportFailure) as failed:
        await http.get("http://127.0.0.2:9/v1/models")
    await http.aclose()
    assert failed.value.kind == "refused to send" and not failed.value.retryable
    assert failed.value.reason == "the environment's socks5 proxy cannot be used: name an HTTP one"


async def test_netrc_passwords_never_go_to_a_provider(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A keyless provider (a local model server) gets no Authorization header from ~/.netrc: aiohttp's
    trust_env would add the password it lists for the host."""
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine 127.0.0.1 login someone password netrc-secret-123\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(netrc))
    http = client(server.base_url)
    reply = await http.get(f"{server.base_url}/models")
    await http.aclose()
    assert reply.status == 200
    assert "authorization" not in server.last.headers


async def test_the_reply_holds_what_error_messages_need(server: FakeLLMServer) -> None:
    server.reply_error(429, "slow down", retry_after=3)
    http = client(server.base_url, {"authorization": "Bearer sk-held-here-0123456789"})
    sent = orjson.dumps({"model": "m", "messages": []})
    reply = await http.post(f"{server.base_url}/chat/completions", sent)
    await http.aclose()
    assert (reply.status, reply.is_success, reply.headers["Retry-After"]) == (429, False, "3")
    assert reply.json()["error"]["message"] == "slow down"
    assert reply.sent == sent and reply.sent_headers["authorization"] == "Bearer sk-held-here-0123456789"
    assert reply.url == f"{server.base_url}/chat/completions"


def test_a_reply_is_read_as_the_standard_library_reads_json() -> None:
    """Integers past 64 bits exact (orjson alone makes them floats), NaN read (strict JSON refuses it)."""
    reply = Reply(200, {}, b'{"usage": {"total_tokens": 123456789012345678901234567890}}', "http://x", b"", {})
    assert reply.json()["usage"]["total_tokens"] == 123456789012345678901234567890
    assert str(Reply(200, {}, b'{"logprob": NaN}', "http://x", b"", {}).json()["logprob"]) == "nan"
    with pytest.raises(ValueError):
        Reply(502, {}, b"<html>Bad Gateway</html>", "http://x", b"", {}).json()


async def test_a_closed_client_sends_nothing(server: FakeLLMServer) -> None:
    http = client(server.base_url)
    await http.aclose()
    with pytest.raises(TransportFailure) as failed:
        await http.get(f"{server.base_url}/models")
    assert failed.value.kind == "refused to send"
    assert server.requests == []


def test_https_is_checked_against_certifi_or_the_store_ssl_cert_file_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    default = verified_tls()
    assert default.verify_mode == ssl.CERT_REQUIRED and default.check_hostname
    assert len(default.get_ca_certs()) > 50  # certifi's store
    bundle = Path(certifi.where()).read_text()
    one = tmp_path / "one-ca.pem"
    one.write_text(bundle[: bundle.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")] + "\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(one))
    assert len(verified_tls().get_ca_certs()) == 1


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"", "the server closed the connection before its answer (ServerDisconnectedError)"),
        (b"NOT HTTP AT ALL\r\n\r\n", "a malformed HTTP answer: "),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}", "the answer's body was cut short or malformed"),
    ],
    ids=["closed", "garbled", "cut-short"],
)
async def test_a_broken_answer_is_named_without_the_url_s_secrets_or_the_headers(
    answer: bytes, reason: str, tmp_path: Path
) -> None:
    """What a broken endpoint earns goes to the server as the error's text: it says what broke, and never
    holds the URL's query nor a header's value (aiohttp's own messages and reprs hold them)."""

    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    listening = await asyncio.start_server(broken, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/models?key=query-secret"
    http = client(url, {"authorization": "Bearer sk-header-secret-0123456789"})
    with pytest.raises(TransportFailure) as failed:
        await http.get(url)
    await http.aclose()
    listening.close()
    assert failed.value.kind == "network" and failed.value.retryable
    assert failed.value.reason.startswith(reason)
    text = f"{failed.value} {failed.value.reason} {failed.value.__cause__!r} {failed.value.__context__!r}"
    assert not any(secret in text for secret in ("query-secret", "sk-header-secret")), text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pw@api.example.com:8443/v1/chat?key=zzz#frag", "https://api.example.com:8443/v1/chat"),
        ("localhost:11434/v1/models", "localhost:11434/v1/models"),  # no scheme: shown as written
        ("user:pw@host/x?key=1", "host/x"),
        ("http://user:pw@host/a://b", "http://host/a://b"),
        ("http://[::1", "http://[::1"),  # not a URL: still shown, never an error
    ],
)
def test_a_url_is_shown_without_user_info_query_or_fragment(url: str, shown: str) -> None:
    assert shown_url(url) == shown


async def test_a_redirect_is_not_followed(server: FakeLLMServer) -> None:
    """A provider's 3xx is its answer (the adapters make it an error naming the status): the key is never
    sent on to where the redirect points."""
    elsewhere = f"{server.base_url}/models"
    server.enqueue(status=307, body={"error": "moved"}, headers={"location": elsewhere})
    http = client(server.base_url, {"authorization": "Bearer sk-held-here-0123456789"})
    reply = await http.post(f"{server.base_url}/chat/completions", b"{}")
    await http.aclose()
    assert reply.status == 307 and not reply.is_success
    assert [request.path for request in server.requests] == ["/v1/chat/completions"]


BIG = 64 * 1024 * 1024  # what the hostile endpoint would send: far past the cap


@pytest.mark.parametrize("how", ["announced", "chunked", "compressed"])
async def test_an_answer_past_the_cap_is_refused_and_not_read_on(how: str) -> None:
    """Whatever answers at a provider's URL cannot fill the proxy's memory: past the cap (its Content-Length
    saying so, a chunked stream that goes on, or a small gzip body that unpacks past it) the call fails
    with what happened, is not retried, and the rest is left unread."""
    cap = 64 * 1024
    sent = 0
    done = asyncio.Event()

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await reader.readuntil(b"\r\n\r\n")
        piece = b"0" * 65536
        try:
            if how == "compressed":
                import gzip

                body = gzip.compress(b"0" * (4 * cap))  # about 300 bytes on the wire
                head = f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n"
                writer.write(head.encode() + body)
                sent = len(body)
                await writer.drain()
                return
            if how == "announced":
                writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n".encode())
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                piece = b"10000\r\n" + piece + b"\r\n"
            while sent < BIG:
                writer.write(piece)
                await writer.drain()
                sent += len(piece)
        except ConnectionError:
            pass
        finally:
            writer.close()
            done.set()

    listening = await asyncio.start_server(flood, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1/chat/completions"
    http = LlmHttp({}, Timeouts(connect=2, read=5), tls=True, proxy_for=url, max_answer=cap)
    with pytest.raises(TransportFailure) as failed:
        await http.post(url, b"{}")
    await http.aclose()
    await asyncio.wait_for(done.wait(), 10)
    listening.close()
    assert failed.value.kind == "too large" and not failed.value.retryable
    assert failed.value.reason.startswith("the answer is larger than 64 KiB"), failed.value.reason
    assert sent < BIG // 2, sent  # the proxy stopped reading: the flood stopped with it
