"""A webhook approval receiver on 127.0.0.1, written for the tests the way a chat bot or an on-call tool
would write one: it checks the proxy's signature on each approval request with the shared secret and
answers in the response, signed, with what the test scripted (approve or deny, by whom), or with a forged
or replayed answer.

It signs with its own few lines of `hmac` (not the proxy's module), as a receiver written from the docs
would, so a change of the proxy's format shows here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer. `forge`: "mac" signs with another secret; "digest" names other params;
    "replay" sends back, byte for byte, the signed answer given to the first request."""

    decision: str = "approve"
    approver: str = "alice"
    forge: str | None = None
    hold: threading.Event | None = None  # wait for it before answering (a person still deciding)


@dataclass
class Received:
    body: dict[str, Any]
    raw: bytes
    headers: dict[str, str]
    signature_ok: bool


@dataclass
class Receiver:
    secret: bytes
    replies: list[Reply] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    url: str = ""
    _first_answer: tuple[bytes, dict[str, str]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sign(self, body: bytes, secret: bytes | None = None) -> dict[str, str]:
        timestamp = str(int(time.time()))
        mac = hmac.new(secret or self.secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
        return {"X-MCP-Sampling-Proxy-Timestamp": timestamp, "X-MCP-Sampling-Proxy-Signature": f"sha256={mac}"}

    def answer(self, raw: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
        timestamp = headers.get("x-mcp-sampling-proxy-timestamp", "")
        expected = hmac.new(self.secret, timestamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
        ok = hmac.compare_digest(headers.get("x-mcp-sampling-proxy-signature", ""), f"sha256={expected}")
        request = json.loads(raw)
        with self._lock:
            self.received.append(Received(request, raw, headers, ok))
            reply = self.replies.pop(0) if self.replies else Reply("deny", "nobody-scripted")
        if reply.hold is not None:
            reply.hold.wait(30)
        if not ok:  # a receiver refuses what it cannot verify
            return b'{"error": "bad signature"}', {}
        if reply.forge == "replay" and self._first_answer is not None:
            return self._first_answer
        answer = {
            "request_id": request["request_id"],
            "request_sha256": "0" * 64 if reply.forge == "digest" else request["request_sha256"],
            "decision": reply.decision,
            "approver": reply.approver,
        }
        body = json.dumps(answer).encode()
        signed = self.sign(body, b"not-the-shared-secret" if reply.forge == "mac" else None)
        if self._first_answer is None:
            self._first_answer = (body, signed)
        return body, signed


@contextmanager
def webhook_receiver(secret: bytes, replies: list[Reply] | None = None) -> Iterator[Receiver]:
    receiver = Receiver(secret, list(replies or []))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body, headers = receiver.answer(raw, {k.lower(): v for k, v in self.headers.items()})
            self.send_response(200 if headers else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/approve"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        for reply in receiver.replies:  # let a held answer go, so the server can stop
            if reply.hold is not None:
                reply.hold.set()
        server.shutdown()
        server.server_close()
