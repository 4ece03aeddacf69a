"""An HTTP external check on 127.0.0.1 for the tests: records each POST (headers and JSON body) and
answers the next scripted verdict (or raw bytes, or an HTTP status), stdlib only."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any


@dataclass
class Answer:
    status: int = 200
    body: bytes = b'{"verdict": "allow"}'
    location: str | None = None  # with a 3xx status: where it redirects
    delay: float = 0.0  # seconds before it answers: a slow check


class CheckServer:
    """`with CheckServer() as check: check.url ...`, serving until closed."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._answers: deque[Answer] = deque()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                with owner._lock:
                    owner.received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw))
                    )
                    answer = owner._answers.popleft() if owner._answers else Answer()
                time.sleep(answer.delay)
                self.send_response(answer.status)
                if answer.location:
                    self.send_header("location", answer.location)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/check"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def verdict(self, verdict: dict[str, Any]) -> None:
        """Answer the next POST with this verdict."""
        self.answer(Answer(body=json.dumps(verdict).encode()))

    def answer(self, answer: Answer) -> None:
        with self._lock:
            self._answers.append(answer)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> CheckServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
