"""A host request in flight, and how the proxy asks a 2026-era host something during one.

A handshake-era host answers requests the proxy (or the server) sends it mid-call. A 2026-07-28
host answers nothing unasked: the only way to put a question to it is to answer one of its own
pending requests with `resultType: "input_required"` and wait for the retry, which comes under a
new id with the answers in `inputResponses` and the `requestState` echoed. So a host request is
one logical call whose host-side id can change, round by round, while the server keeps knowing
it under the id it was sent with (`upstream_id`). `HostRequest` is that call; `ask` is one round.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import anyio
from msgspec import Struct, field

from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.wire_types import JsonRpcRequest, JsonRpcResponse
from mcp_sampling_proxy.relay.keepalive import Progress, usable_token

ROUND_KEY = "mcp-sampling-proxy"  # the inputRequests key of the proxy's own question in a round

# The tools that could own the embedded request being answered: in the 2026 era exactly the
# retried request's tool (none for prompts/get and resources/read), whatever else is in flight.
# services/input_required.py sets it while it answers a round; Session.tool_candidates reads it (None
# outside a round).
ORIGIN_TOOLS: ContextVar[tuple[str, ...] | None] = ContextVar("origin_tools", default=None)


class HostRequest(Struct, eq=False):
    """One request of the host's, from its arrival to its final answer."""

    method: str
    tool: str | None  # the tool name for tools/call
    started: float
    message: JsonRpcRequest | None = None  # kept for methods a 2026-era server may answer with input_required
    progress: Progress | None = None  # its `_meta.progressToken` and what the host was sent on it (keep-alive)
    host_id: Any = None  # the id the host waits on now: a round the proxy asks in moves it to the retry's id
    upstream_id: Any = None  # the id the server knows this request under (None: not sent to the server)
    held: bool = True  # the host waits for an answer to `host_id` (False while a round of ours is out)
    resolving: Any = None  # the task answering the server's input_required rounds for it (relay/core.py)
    final: JsonRpcResponse | None = None  # the server's answer, kept while a round of ours is out (sent on the retry)
    sampling_requests: int = 0  # the server's sampling requests under it so far (sampling.max_per_call)
    cursor: Any = None  # tools/list: the page asked for (None: the first), for the tool pins (services/tools.py)
    _turn: anyio.Lock | None = None  # one round of ours at a time
    _back: anyio.Event | None = None  # set when the host holds a new id for us

    @classmethod
    def of(cls, msg: JsonRpcRequest, retryable: frozenset[str] | tuple[str, ...]) -> HostRequest:
        method = msg["method"]
        params = jsonrpc.as_object(msg.get("params"))
        tool = params.get("name") if method == "tools/call" else None
        token = jsonrpc.as_object(params.get("_meta")).get("progressToken")
        return cls(
            method,
            tool if isinstance(tool, str) else None,
            time.monotonic(),
            msg if method in retryable else None,
            Progress(token) if usable_token(token) else None,
            host_id=msg["id"],
            upstream_id=msg["id"],
            cursor=params.get("cursor") if method == "tools/list" else None,
        )

    def turn(self) -> anyio.Lock:
        if self._turn is None:
            self._turn = anyio.Lock()
        return self._turn

    async def wait_held(self) -> None:
        while not self.held:
            if self._back is None:
                self._back = anyio.Event()
            await self._back.wait()

    def back(self, host_id: Any, progress_token: Any) -> None:
        """The host retried under `host_id`: it waits on that id now."""
        self.host_id = host_id
        self.held = True
        if usable_token(progress_token) and (self.progress is None or self.progress.token != progress_token):
            self.progress = Progress(progress_token)
        if self._back is not None:
            self._back.set()
            self._back = None


# The host request a server request (or an input_required round the proxy answers) belongs to,
# while the proxy serves it: a question for a 2026-era host is asked in that request's round.
CURRENT_CALL: ContextVar[HostRequest | None] = ContextVar("mcp_sampling_proxy_current_call", default=None)


class _Asked(Struct):
    call: HostRequest
    key: str
    done: anyio.Event = field(default_factory=anyio.Event)
    response: dict[str, Any] = field(default_factory=dict)


class HostRounds:
    """The proxy's own input_required rounds to a 2026-era host, by the requestState they carry."""

    def __init__(self, to_host: Callable[[bytes], None], rekey: Callable[[HostRequest, Any], None]):
        self._to_host = to_host
        self._rekey = rekey  # the relay moves its tables to the call's new host id
        self._asked: dict[str, _Asked] = {}
        self._expired: set[str] = set()  # rounds given up on (their asker was cancelled): a late retry is refused

    def __bool__(self) -> bool:
        return bool(self._asked or self._expired)

    async def ask(self, call: HostRequest, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Put one request to the host inside `call`; its response ({"result": ...} or {"error": ...}).

        Waits for the host to hold an id of the call's (a round of the server's or ours may be out),
        answers that id with the round, and waits for the retry that carries its requestState."""
        async with call.turn():
            await call.wait_held()
            state = f"{ROUND_KEY}:{secrets.token_hex(12)}"
            asked = self._asked[state] = _Asked(call, ROUND_KEY)
            call.held = False
            self._to_host(
                jsonrpc.response(
                    call.host_id,
                    {
                        "resultType": "input_required",
                        "requestState": state,
                        "inputRequests": {ROUND_KEY: {"method": method, "params": params}},
                    },
                )
            )
            try:
                await asked.done.wait()
            finally:
                if self._asked.pop(state, None) is not None:
                    self._expired.add(state)
            return asked.response

    def take_retry(self, msg: JsonRpcRequest) -> bool:
        """A host request retrying one of our rounds: note the answer, move the call to its id.
        False when `msg` is not such a retry."""
        params = jsonrpc.as_object(msg.get("params"))
        state = params.get("requestState")
        if not isinstance(state, str) or not state.startswith(ROUND_KEY):
            return False
        asked = self._asked.pop(state, None)
        if asked is None:
            if state in self._expired:
                self._expired.discard(state)
                self._to_host(
                    jsonrpc.error_response(
                        msg["id"],
                        jsonrpc.INVALID_REQUEST,
                        "Invalid Request: the proxy's question in this round was "
                        "withdrawn (it timed out or the server gave up); call again",
                    )
                )
                return True
            return False
        call = asked.call
        self._rekey(call, msg["id"])
        call.back(msg["id"], jsonrpc.as_object(params.get("_meta")).get("progressToken"))
        responses = params.get("inputResponses")
        answer = responses.get(asked.key) if isinstance(responses, dict) else None
        if isinstance(answer, dict):
            asked.response = {"result": answer}
        else:
            asked.response = {
                "error": RpcError(
                    jsonrpc.INVALID_PARAMS,
                    "the host retried without answering the proxy's question (inputResponses has no answer for it)",
                ).to_dict()
            }
        asked.done.set()
        return True
