"""A real loopback HTTP server speaking the OpenAI Chat Completions or Anthropic Messages wire format.

Tests drive the adapters over actual sockets (timeouts, refused connections, keep-alive and
cancellation behave as in production) without any network access or API key. Only the stdlib
is used so the file also runs as a standalone process:

    python tests/fakes/llm_server.py --kind openai --port 0    # first stdout line: base_url
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# model names the real OpenAI API treats as reasoning models (see _unsupported)
REASONING_MODEL = re.compile(r"^(o[1-9]|gpt-5)", re.IGNORECASE)
_AZURE_DEPLOYMENT_PATH = re.compile(r"^/openai/deployments/[^/]+/chat/completions$")

Body = dict[str, Any] | Callable[["RecordedRequest"], dict[str, Any]] | None


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or None
    query: str = ""  # the raw query string (Azure's api-version)


@dataclass
class ScriptedReply:
    status: int = 200
    body: Body = None  # None: the default echo reply when status is 200, else an empty body
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None  # a non-JSON body, sent as is
    drip: float = 0.0  # > 0: send the body one byte every `drip` seconds (a provider that never stalls a read)


class FakeLLMServer:
    """`FakeLLMServer(kind="openai"|"anthropic")`: serving from construction until `close()`."""

    def __init__(
        self,
        kind: str = "openai",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: tuple[str, ...] | None = None,
        api_key: str | None = None,
    ):
        if kind not in ("openai", "anthropic"):
            raise ValueError(f"kind must be 'openai' or 'anthropic', not {kind!r}")
        self.kind = kind
        self.models = models or (("fake-gpt-4o-mini",) if kind == "openai" else ("fake-claude-sonnet",))
        self.api_key = api_key  # when set, requests without it get a 401 in the provider's format
        self.requests: list[RecordedRequest] = []
        self.default_delay = 0.0  # seconds before each unscripted completion answer
        self.held: threading.Event | None = None  # when given, completions are answered once it is set
        # "echo" (default: word counts) | "chars": prompt tokens = characters of all text read, output
        # tokens = max_tokens; a realistic bound for CJK text (about one token per character)
        self.usage_mode = "echo"
        self.open_now = 0  # completion requests being answered right now
        self.max_open = 0  # the most ever answered at once
        self._queue: deque[ScriptedReply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._httpd = _Server((host, port), _Handler)
        self._httpd.owner = self
        self.port = self._httpd.server_address[1]
        root = f"http://{host}:{self.port}"
        self.base_url = f"{root}/v1" if kind == "openai" else root
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-llm", daemon=True
        )
        self._thread.start()

    # -- scripting -----------------------------------------------------------------------------

    def enqueue(
        self,
        status: int = 200,
        body: Body = None,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        *,
        raw: bytes | None = None,
        drip: float = 0.0,
    ) -> None:
        """Answer the next completion request exactly like this (FIFO)."""
        with self._lock:
            self._queue.append(ScriptedReply(status, body, dict(headers or {}), delay, raw, drip))

    def reply_text(
        self,
        text: str,
        *,
        model: str | None = None,
        finish: str | None = None,
        usage: tuple[int, int] | None = (11, 7),
        delay: float = 0.0,
        drip: float = 0.0,
    ) -> None:
        """A plain text answer; `finish` is the provider's own finish/stop reason."""
        self.enqueue(body=lambda req: self._text_body(req, text, model, finish, usage), delay=delay, drip=drip)

    def reply_tool_call(
        self,
        name: str | None,
        arguments: dict[str, Any] | str,
        *,
        id: str | None = "call_1",
        text: str | None = None,
        model: str | None = None,
        finish: str | None = None,
    ) -> None:
        """A tool call (OpenAI `arguments` may be a raw string, to test bad JSON; a None id or name is left out)."""
        self.enqueue(body=lambda req: self._tool_body(req, name, arguments, id, text, model, finish))

    def reply_error(self, status: int, message: str, retry_after: float | str | None = None) -> None:
        """An error in the provider's JSON error format, optionally with Retry-After."""
        headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
        self.enqueue(status=status, body=self._error_body(status, message), headers=headers)

    @property
    def last(self) -> RecordedRequest:
        return self.requests[-1]

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop promptly: cut scripted delays short and drop open keep-alive connections."""
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- wire formats --------------------------------------------------------------------------

    def _model(self, request: RecordedRequest, model: str | None) -> str:
        if model:
            return model
        asked = request.body.get("model") if isinstance(request.body, dict) else None
        return asked or self.models[0]

    def _text_body(
        self,
        request: RecordedRequest,
        text: str,
        model: str | None,
        finish: str | None,
        usage: tuple[int, int] | None,
    ) -> dict[str, Any]:
        model = self._model(request, model)
        if self.kind == "openai":
            body: dict[str, Any] = {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text, "refusal": None},
                        "logprobs": None,
                        "finish_reason": finish or "stop",
                    }
                ],
                "system_fingerprint": "fp_fake",
            }
            if usage:
                body["usage"] = {
                    "prompt_tokens": usage[0],
                    "completion_tokens": usage[1],
                    "total_tokens": usage[0] + usage[1],
                }
            return body
        body = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": finish or "end_turn",
            "stop_sequence": None,
        }
        if usage:
            body["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
        return body

    def _tool_body(
        self,
        request: RecordedRequest,
        name: str | None,
        arguments: dict[str, Any] | str,
        call_id: str | None,
        text: str | None,
        model: str | None,
        finish: str | None,
    ) -> dict[str, Any]:
        body = self._text_body(request, text or "", model, finish, (20, 9))
        if self.kind == "openai":
            args = arguments if isinstance(arguments, str) else json.dumps(arguments)
            message = body["choices"][0]["message"]
            message["content"] = text
            function = {"name": name, "arguments": args} if name is not None else {"arguments": args}
            call = {"id": call_id, "type": "function", "function": function}
            message["tool_calls"] = [{k: v for k, v in call.items() if v is not None}]
            body["choices"][0]["finish_reason"] = finish or "tool_calls"
        else:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
            blocks.append({k: v for k, v in block.items() if v is not None})
            body["content"] = blocks
            body["stop_reason"] = finish or "tool_use"
        return body

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        if self.kind == "openai":
            kind = {401: "invalid_request_error", 429: "requests", 404: "invalid_request_error"}
            error = {
                "message": message,
                "type": kind.get(status, "server_error"),
                "param": None,
                "code": None,
            }
            return {"error": error}
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
            529: "overloaded_error",
        }
        return {"type": "error", "error": {"type": kind.get(status, "api_error"), "message": message}}

    def _default_reply(self, request: RecordedRequest) -> dict[str, Any]:
        """Echo the last user text, so tests and benchmarks get a deterministic answer."""
        text = _last_user_text(request.body)
        if self.usage_mode == "chars":
            body = request.body if isinstance(request.body, dict) else {}
            read = sum(len(_text_of(m.get("content"))) for m in _messages(body)) + len(str(body.get("system") or ""))
            out = body.get("max_tokens") or body.get("max_completion_tokens") or 1
            return self._text_body(request, f"echo: {text}", None, None, (read, int(out)))
        words = sum(len(str(m.get("content", "")).split()) for m in _messages(request.body))
        return self._text_body(request, f"echo: {text}", None, None, (max(1, words), 2 + len(text.split())))

    def _models_body(self) -> dict[str, Any]:
        if self.kind == "openai":
            data = [{"id": m, "object": "model", "created": 1700000000, "owned_by": "fake"} for m in self.models]
            return {"object": "list", "data": data}
        data = [
            {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in self.models
        ]
        return {"data": data, "has_more": False, "first_id": self.models[0], "last_id": self.models[-1]}

    # -- request handling (runs on the server's threads) --------------------------------------

    def _handle(self, handler: _Handler, method: str) -> None:
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path, _, query = handler.path.partition("?")
        request = RecordedRequest(method, path, {k.lower(): v for k, v in handler.headers.items()}, body, query)
        with self._lock:
            self.requests.append(request)
        completion_path = "/v1/chat/completions" if self.kind == "openai" else "/v1/messages"
        if self.kind == "openai" and _AZURE_DEPLOYMENT_PATH.match(path):
            completion_path = path  # Azure OpenAI: /openai/deployments/NAME/chat/completions?api-version=...
        if self.api_key and not self._authorized(request):
            reply = ScriptedReply(401, self._error_body(401, "invalid api key"))
        elif method == "GET" and path == "/v1/models":
            reply = ScriptedReply(200, self._models_body())
        elif method == "POST" and path == completion_path and (refusal := self._unsupported(request)):
            reply = refusal
        elif method == "POST" and path == completion_path:
            with self._lock:
                reply = self._queue.popleft() if self._queue else ScriptedReply(delay=self.default_delay)
                self.open_now += 1
                self.max_open = max(self.max_open, self.open_now)
            try:
                held = self.held
                while held is not None and not held.wait(0.05) and not self._closing.is_set():
                    pass  # open, and held: what a slow LLM looks like for as long as the test wants
                self._answer(handler, request, reply)
            finally:
                with self._lock:
                    self.open_now -= 1
            return
        else:
            reply = ScriptedReply(404, self._error_body(404, f"no route for {method} {path}"))
        self._answer(handler, request, reply)

    def _answer(self, handler: _Handler, request: RecordedRequest, reply: ScriptedReply) -> None:
        if reply.delay and self._closing.wait(reply.delay):
            handler.close_connection = True
            return  # closing: drop the request unanswered
        self._send(handler, request, reply)

    def _unsupported(self, request: RecordedRequest) -> ScriptedReply | None:
        """What OpenAI answers when a reasoning model (o1, o3, o4-mini, gpt-5...) gets `max_tokens` or
        a temperature other than its default 1: a 400 with the real messages and codes."""
        body = request.body if isinstance(request.body, dict) else {}
        if self.kind != "openai" or not REASONING_MODEL.match(str(body.get("model", "")).rsplit("/", 1)[-1]):
            return None
        if "max_tokens" in body:
            error = {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
                "type": "invalid_request_error",
                "param": "max_tokens",
                "code": "unsupported_parameter",
            }
        elif "temperature" in body and body["temperature"] != 1:
            error = {
                "message": f"Unsupported value: 'temperature' does not support {body['temperature']} with "
                "this model. Only the default (1) value is supported.",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "unsupported_value",
            }
        else:
            return None
        return ScriptedReply(400, {"error": error})

    def _authorized(self, request: RecordedRequest) -> bool:
        if self.kind == "openai":
            return (
                request.headers.get("authorization") == f"Bearer {self.api_key}"
                or request.headers.get("api-key") == self.api_key
            )  # Azure OpenAI's key header
        return request.headers.get("x-api-key") == self.api_key

    def _send(self, handler: _Handler, request: RecordedRequest, reply: ScriptedReply) -> None:
        if reply.raw is not None:
            payload, ctype = reply.raw, "text/plain; charset=utf-8"
        else:
            body = reply.body
            if callable(body):
                body = body(request)
            elif body is None and reply.status == 200:
                body = self._default_reply(request)
            payload, ctype = (json.dumps(body).encode() if body is not None else b""), "application/json"
        handler.send_response(reply.status)
        handler.send_header("content-type", ctype)
        handler.send_header("content-length", str(len(payload)))
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        if not reply.drip:
            handler.wfile.write(payload)
            return
        handler.wfile.flush()
        for index in range(len(payload)):  # a slow-loris answer: every read gets a byte in time
            if self._closing.wait(reply.drip):
                handler.close_connection = True
                return
            handler.wfile.write(payload[index : index + 1])
            handler.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hanging up mid-answer (timeouts, cancellation) are expected here


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real providers do
    disable_nagle_algorithm = True  # headers and body go out separately; avoid 40 ms delayed-ACK stalls
    server: _Server

    def setup(self) -> None:
        super().setup()
        owner = self.server.owner
        with owner._lock:
            owner._sockets.add(self.connection)

    def finish(self) -> None:
        owner = self.server.owner
        with owner._lock:
            owner._sockets.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        try:
            self.server.owner._handle(self, method)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _messages(body: Any) -> list[dict[str, Any]]:
    messages = body.get("messages") if isinstance(body, dict) else None
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _last_user_text(body: Any) -> str:
    for message in reversed(_messages(body)):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", action="append", help="model id to report (repeatable)")
    parser.add_argument("--api-key", help="answer 401 unless this key is sent")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = FakeLLMServer(
        args.kind, port=args.port, models=tuple(args.model) if args.model else None, api_key=args.api_key
    )
    print(server.base_url, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
