"""One upstream shared by many sessions (`serve --shared-upstream`): the multiplexer between them.

Each session's relay talks to a `Branch`, which looks to it like an upstream of its own (the runtime's
`Upstream`: attach, send, wait, stop). The branches' lines meet the one real upstream here, which
keeps their traffic apart:

- a session's request goes to the server under a private id (`mux-N`), and its answer comes back
  under the session's own id, of its own type (`7` stays `7`, `"7"` stays `"7"`); a
  `notifications/cancelled` names the private id, and a `_meta.progressToken` is made private too, so
  the server's progress reaches the session that asked for it, with the token it chose;
- the server is initialized once: the first `initialize` goes to it, and every later one is answered
  with the first one's result (and its `notifications/initialized` is not passed on);
- a request of the server's (sampling, elicitation, roots) goes to the session whose request it belongs
  to: the one whose request's event stream carried it (an HTTP upstream says so), else the only
  session with a request in flight. When several are, the wire does not say whose it is, and the
  server gets an error rather than another caller's LLM, budget or approval. `ping` is answered here;
- the server's other notifications (list changes, log messages) go to every session;
- when the server exits, every session's relay hears it (as if its own server had exited), and when
  a session ends its requests still at the server are cancelled; the server keeps running.

There is no isolation between the sessions: what one caller leaves in the server, the next one sees.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Protocol

import anyio
from msgspec import Struct, field

from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.relay.core import peek_id

log = get_logger("mcp_sampling_proxy.relay.multiplex")

PRIVATE_PREFIX = "mux-"
CANCELLED = "notifications/cancelled"
AMBIGUOUS = (
    "the shared server asked while several callers had requests in flight, and the wire does not say whose "
    "request it belongs to; it was refused (serve without --shared-upstream gives each caller a server of its own)"
)


class Shared(Protocol):
    """The one real upstream (runtime.py's `Upstream`: transport/stdio.py or transport/http.py)."""

    label: str

    async def attach(self, on_line: Any, on_eof: Any, *, max_line: int = ..., on_oversize: Any = None) -> None: ...
    def send(self, line: bytes) -> None: ...
    async def wait(self, timeout: float) -> int | None: ...
    async def stop(self, grace: float, term_wait: float = ...) -> int | None: ...
    def describe_end(self, code: int | None) -> str: ...


class _Request(Struct):
    """A session's request at the server, under a private id."""

    branch: Branch
    original: Any  # the id the session gave it
    method: str
    token: str | None = None  # its private progress token, when it asked for progress
    original_token: Any = None  # the token the session chose


def _key(value: Any) -> tuple[str, Any]:
    """An id as a dict key that keeps `7` and `"7"` apart."""
    return (type(value).__name__, value)


class Multiplexer:
    """The shared upstream and the sessions' branches on it."""

    def __init__(self, upstream: Shared):
        self.upstream = upstream
        self.label = upstream.label
        self._branches: list[Branch] = []
        self._requests: dict[str, _Request] = {}  # private id -> the session's request
        self._tokens: dict[str, _Request] = {}  # private progress token -> the request that asked
        self._asked: dict[tuple[str, Any], Branch] = {}  # the server's request id -> the session it went to
        self._initialized: dict[str, Any] | None = None  # the server's initialize result, once it came
        self._initializing: str | None = None  # the private id of the one initialize at the server
        self._init_waiting: list[tuple[Branch, Any]] = []  # initializes waiting for that result
        self._initialized_sent = False
        self._ids = itertools.count(1)
        self.ended = anyio.Event()  # the server is gone
        self._max_line = 0

    async def start(self, *, max_line: int) -> None:
        """Attach to the server: from here on its lines are routed to the branches."""
        self._max_line = max_line
        await self.upstream.attach(self._from_server, self._server_ended, max_line=max_line, on_oversize=self._oversize)

    def branch(self) -> Branch:
        """A new session's upstream."""
        return Branch(self)

    @property
    def sessions(self) -> int:
        return len(self._branches)

    async def stop(self, grace: float) -> int | None:
        """Stop the server (serve is stopping)."""
        return await self.upstream.stop(grace)

    # -- a session's lines ---------------------------------------------------------------------------
    def from_branch(self, branch: Branch, line: bytes) -> None:
        try:
            msg = jsonrpc.parse_exact(line) if jsonrpc.has_long_integers(line) else jsonrpc.parse(line)
        except ValueError as exc:
            log.warning("a session's message for the shared server is not JSON; dropped", error=str(exc))
            return
        if not isinstance(msg, dict):
            log.warning("a session sent the shared server a batch, which cannot be shared; dropped")
            return
        method = msg.get("method")
        if not isinstance(method, str):  # an answer to a request of the server's
            if self._asked.get(_key(msg.get("id"))) is branch:
                del self._asked[_key(msg.get("id"))]
                self.upstream.send(line)
            else:
                log.debug("a session answered a request the server did not ask it; dropped", id=msg.get("id"))
            return
        if "id" in msg:
            self._request(branch, msg)
            return
        if method == "notifications/initialized":
            if self._initialized_sent:
                return  # the server was initialized by the first session
            self._initialized_sent = True
        elif method == "notifications/cancelled":
            params = jsonrpc.as_object(msg.get("params"))
            private = branch.pending.get(_key(params.get("requestId")))
            if private is None:
                return  # answered already, or never sent
            line = jsonrpc.dumps({**msg, "params": {**params, "requestId": private}})
        self.upstream.send(line)

    def _request(self, branch: Branch, msg: dict[str, Any]) -> None:
        if msg["method"] == "initialize":
            if self._initialized is not None:
                branch.deliver({"jsonrpc": "2.0", "id": msg["id"], "result": self._initialized})
                return
            self._init_waiting.append((branch, msg["id"]))
            if self._initializing is not None:
                return  # the first session's initialize is at the server: its result answers this one too
        private = f"{PRIVATE_PREFIX}{next(self._ids)}"
        request = _Request(branch, msg["id"], msg["method"])
        params = jsonrpc.as_object(msg.get("params"))
        meta = params.get("_meta")
        if isinstance(meta, dict) and "progressToken" in meta:
            request.token, request.original_token = private, meta["progressToken"]
            self._tokens[private] = request
            msg = {**msg, "params": {**params, "_meta": {**meta, "progressToken": private}}}
        if msg["method"] == "initialize":
            self._initializing = private
        else:
            self._requests[private] = request
            branch.pending[_key(msg["id"])] = private
        self.upstream.send(jsonrpc.dumps({**msg, "id": private}))

    # -- the server's lines --------------------------------------------------------------------------
    def _from_server(self, line: bytes) -> None:
        try:
            msg = jsonrpc.parse_exact(line) if jsonrpc.has_long_integers(line) else jsonrpc.parse(line)
        except ValueError as exc:
            log.warning("the shared server wrote a line that is not JSON; dropped", error=str(exc), size=len(line))
            return
        for member in msg if isinstance(msg, list) else [msg]:
            if isinstance(member, dict):
                self._server_message(member, line if member is msg else jsonrpc.dumps(member))

    def _server_message(self, msg: dict[str, Any], line: bytes) -> None:
        method = msg.get("method")
        if not isinstance(method, str):
            self._answer(msg)
            return
        params = jsonrpc.as_object(msg.get("params"))
        if "id" in msg:
            self._server_request(msg, line)
        elif method == "notifications/progress":
            token = params.get("progressToken")
            request = self._tokens.get(token) if isinstance(token, str) else None
            if request is not None:
                request.branch.deliver({**msg, "params": {**params, "progressToken": request.original_token}})
        elif method == "notifications/cancelled":  # the server withdrew a request of its own
            branch = self._asked.pop(_key(params.get("requestId")), None)
            if branch is not None:
                branch.deliver_line(line)
        else:
            for branch in list(self._branches):
                branch.deliver_line(line)

    def _answer(self, msg: dict[str, Any]) -> None:
        """The server's answer to a session's request: to that session, under its own id."""
        private = msg.get("id")
        if not isinstance(private, str):
            log.debug("the shared server answered a request no session sent; dropped", id=private)
            return
        if private == self._initializing:
            self._initialize_answered(msg)
            return
        request = self._requests.pop(private, None)
        if request is None:
            log.debug("the shared server answered a request no session waits for; dropped", id=private)
            return
        self._done(request, private)
        request.branch.deliver({**msg, "id": request.original})

    def _initialize_answered(self, msg: dict[str, Any]) -> None:
        self._tokens.pop(self._initializing or "", None)
        self._initializing = None
        waiting, self._init_waiting = self._init_waiting, []
        if isinstance(msg.get("result"), dict):
            self._initialized = msg["result"]
        for branch, original in waiting:  # a refusal goes to every waiting session; the next one tries again
            branch.deliver({**msg, "id": original})

    def _done(self, request: _Request, private: str) -> None:
        if request.token is not None:
            self._tokens.pop(request.token, None)
        if request.branch.pending.get(_key(request.original)) == private:
            del request.branch.pending[_key(request.original)]

    def _server_request(self, msg: dict[str, Any], line: bytes) -> None:
        if msg["method"] == "ping":
            self.upstream.send(jsonrpc.response(msg["id"], {}))
            return
        branch = self._owner()
        if branch is None:
            log.warning("the shared server's request was refused: whose it is is unknown", method=msg["method"])
            self.upstream.send(jsonrpc.error_response(msg["id"], jsonrpc.INTERNAL_ERROR, AMBIGUOUS))
            return
        self._asked[_key(msg["id"])] = branch
        branch.deliver_line(line)

    def _owner(self) -> Branch | None:
        """The session a request of the server's belongs to: the one whose request's stream carried it
        (an HTTP upstream's `related_request`), else the one session with requests in flight."""
        related = getattr(self.upstream, "related_request", None)
        if isinstance(related, str) and related in self._requests:
            return self._requests[related].branch
        busy = {id(request.branch): request.branch for request in self._requests.values()}
        if len(busy) == 1:
            return next(iter(busy.values()))
        if not busy and len(self._branches) == 1:
            return self._branches[0]  # unsolicited, but there is only one session to ask
        return None

    def _oversize(self, size: int, head: bytes, tail: bytes) -> None:
        """A server line over the limit (dropped unread): whoever waits for it gets an error."""
        log.error("the shared server sent a message larger than the limit; dropped", size=size, limit=self._max_line)
        found, private = peek_id(head, tail)
        request = self._requests.pop(private, None) if found and isinstance(private, str) else None
        text = (
            f"upstream server '{self.label}' sent a message of {size} bytes, over the proxy's limit of "
            f"{self._max_line} bytes (--max-message-bytes)"
        )
        if request is not None:
            self._done(request, private)
            request.branch.deliver(
                {"jsonrpc": "2.0", "id": request.original, "error": {"code": jsonrpc.INTERNAL_ERROR, "message": text}}
            )
        elif found and b'"method"' in head:
            self.upstream.send(jsonrpc.error_response(private, jsonrpc.INVALID_REQUEST, text))

    def _server_ended(self) -> None:
        self.ended.set()
        for branch in list(self._branches):
            branch.server_ended()

    # -- a session's end -----------------------------------------------------------------------------
    def detach(self, branch: Branch) -> None:
        """A session ended: its requests still at the server are cancelled, and the server's requests to
        it are answered with an error; the server keeps running for the others."""
        if branch in self._branches:
            self._branches.remove(branch)
        if self.ended.is_set():
            return
        for private in list(branch.pending.values()):
            request = self._requests.pop(private, None)
            if request is not None:
                self._done(request, private)
                cancel = {"requestId": private, "reason": "the caller's session ended"}
                self.upstream.send(jsonrpc.dumps({"jsonrpc": "2.0", "method": CANCELLED, "params": cancel}))
        for key, asked in list(self._asked.items()):
            if asked is branch:
                del self._asked[key]
                self.upstream.send(jsonrpc.error_response(key[1], jsonrpc.INTERNAL_ERROR, "the caller's session ended"))
        self._init_waiting = [(waiting, original) for waiting, original in self._init_waiting if waiting is not branch]


class Branch(Struct, eq=False):
    """One session's view of the shared upstream: what its relay sends and receives as if the server were
    its own (runtime.py's `Upstream`)."""

    mux: Multiplexer
    label: str = ""  # the shared server's
    pending: dict[tuple[str, Any], str] = field(default_factory=dict)  # the session's id -> the private id
    reader: Any = None  # nothing to pause: the server's reader is shared
    writer: Any = None
    _on_line: Callable[[bytes], None] | None = None
    _on_eof: Callable[[], None] | None = None
    _detached: bool = False

    def __post_init__(self) -> None:
        self.label = self.mux.label

    async def attach(
        self,
        on_line: Callable[[bytes], None],
        on_eof: Callable[[], None],
        *,
        max_line: int | None = None,
        on_oversize: Any = None,
    ) -> None:
        self._on_line, self._on_eof = on_line, on_eof
        self.mux._branches.append(self)
        if self.mux.ended.is_set():
            self.server_ended()

    def send(self, line: bytes) -> None:
        if not self._detached and not self.mux.ended.is_set():
            self.mux.from_branch(self, line)

    def deliver(self, msg: dict[str, Any]) -> None:
        self.deliver_line(jsonrpc.dumps(msg))

    def deliver_line(self, line: bytes) -> None:
        if self._on_line is not None and not self._detached:
            self._on_line(line)

    def server_ended(self) -> None:
        if self._on_eof is not None and not self._detached:
            self._on_eof()

    async def wait(self, timeout: float) -> int | None:
        """The shared server's exit code once it ended; None while it runs (it is not this session's to end)."""
        if not self.mux.ended.is_set():
            return None
        return await self.mux.upstream.wait(timeout)

    async def stop(self, grace: float, term_wait: float = 2.0) -> int | None:
        """Leave the shared server (it keeps running for the other sessions)."""
        self._detached = True
        self.mux.detach(self)
        return await self.wait(0) if self.mux.ended.is_set() else None

    def describe_end(self, code: int | None) -> str:
        if not self.mux.ended.is_set():
            return "is shared and keeps running"
        return self.mux.upstream.describe_end(code)
