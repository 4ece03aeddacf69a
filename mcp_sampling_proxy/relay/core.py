"""The relay: every message passes between host and upstream as the original bytes.

It parses each line only to route it, keeps per-direction order (lines are handled
synchronously as they arrive), and steps in only at its ports (relay/ports.py): host requests it
rewrites (the capabilities the proxy serves), server requests it has a handler for (sampling,
elicitation), `input_required` rounds it answers, tool lists and calls it screens (pins, tool
rules), and server notifications it holds back. It knows nothing about LLMs or policy (a contract
in pyproject.toml keeps it so). When the two legs speak different protocol eras, the era bridge
(relay/bridge.py) translates; when they speak the same one, nothing is.
"""

from __future__ import annotations

import functools
import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol, cast

import anyio
import anyio.abc
from msgspec import Struct, field

from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import eras, jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.names import (
    CLIENT_CAPS_META,
    CLIENT_INFO_META,
    PROTOCOL_VERSION_META,
    SERVER_INFO_META,
)
from mcp_sampling_proxy.protocol.wire_types import (
    ErrorObject,
    JsonObject,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcResponse,
)
from mcp_sampling_proxy.relay.bridge import CHANGED, DONE, HANDSHAKE, EraBridge
from mcp_sampling_proxy.relay.calls import CURRENT_CALL, HostRequest, HostRounds
from mcp_sampling_proxy.relay.keepalive import Waiting, same_token, serving
from mcp_sampling_proxy.relay.ports import InputRounds, Ports, ServerRequest, ToolScreen
from mcp_sampling_proxy.relay.session import Session
from mcp_sampling_proxy.text.sanitize import one_line

log = get_logger("mcp_sampling_proxy.relay.core")

Send = Callable[[bytes], None]
NEGOTIATION = ("initialize", "server/discover")
RETRYABLE = frozenset({"tools/call", "prompts/get", "resources/read"})  # may get `input_required` (2026-07-28)
ROOTS_LIST = "roots/list"
_WAITING_FOR = {"sampling/createMessage": "waiting for sampling", "elicitation/create": "waiting for an answer"}


class _Stash(Struct):
    done: anyio.Event = field(default_factory=anyio.Event)
    answers: dict[str, Any] = field(default_factory=dict)
    error: ErrorObject | None = None
    call: HostRequest | None = None  # the host request the split round belongs to


class _Resolving(Struct):
    scope: anyio.CancelScope
    current_id: Any = None  # the private id of the retry now at the server
    send: Send | None = None  # where the retries go: the 2026 connection of a call run again there (None: upstream)


class SecondLeg(Protocol):
    """Opens a second connection to the same server, in the 2026 era, for calls a handshake session
    cannot carry (runtime.py's ModernLeg): its send, or None when it cannot be opened."""

    async def open(self, on_line: Send, on_end: Callable[[], None]) -> Send | None: ...


class _Served(Struct):
    scope: anyio.CancelScope
    raw: bytes = b""  # the request as the server sent it: what the host gets when it is forwarded
    at_host: bool = False  # forwarded to the host, which must hear about a cancellation


class Relay:
    def __init__(
        self,
        to_host: Send,
        to_upstream: Send,
        ports: Ports,
        task_group: anyio.abc.TaskGroup,
        session: Session | None = None,
        keepalive_seconds: float = 0.0,
        era: str = "auto",
    ):
        self._to_host = to_host
        self._to_upstream = to_upstream
        self._ports = ports
        self._tg = task_group
        self.session = session or Session()
        self._keepalive_seconds = keepalive_seconds  # progress to the host while a served request waits; 0: off
        self._served: dict[Any, _Served] = {}
        self._awaiting_host: dict[Any, Callable[[JsonRpcResponse], None]] = {}
        self._awaiting_upstream: dict[Any, Callable[[JsonRpcResponse], None]] = {}
        self._stash: dict[str, _Stash] = {}  # requestState -> the proxy's answers for a split request
        self._moved: dict[Any, HostRequest] = {}  # upstream id -> a host request whose host id has moved on
        self._held: list[tuple[Any, bytes | None]] | None = None  # host messages waiting for the eras to settle
        self._screening: dict[Any, anyio.CancelScope] = {}  # host tools/calls waiting for the tool rules
        self.bridge = EraBridge(era, self)
        self.rounds = HostRounds(self._to_host, self._rekey)
        self.closed = False
        self.second_leg: SecondLeg | None = None  # set by a session that can open one (runtime.py, front/endpoint.py)
        # set by a host that takes the final answers to its requests as messages (the HTTP front's 2026 lane,
        # which reads each to put its caller's id back): not encoded here to be parsed there again
        self.answers_to_host: Callable[[dict[str, Any]], None] | None = None
        self._modern: Send | None = None  # the 2026 connection, while open
        self._modern_tried = False  # opened once a session at most: a server cannot make the proxy start it again
        self._modern_opening = anyio.Lock()
        self._modern_ids: set[Any] = set()  # ids of the requests waiting on the 2026 connection

    # -- host -> upstream ------------------------------------------------------------------
    def from_host(self, line: bytes) -> None:
        """One line from the host. Whatever it holds, the relay keeps running: a line that is not
        a JSON-RPC message gets an error (when it has an id to answer) or is dropped with a log line."""
        try:
            msg = jsonrpc.parse(line)
        except ValueError as exc:
            log.warning("host sent a line that is not JSON", error=str(exc), size=len(line))
            found, request_id = peek_id(line[:1024], line[-256:])
            self._to_host(
                jsonrpc.error_response(request_id if found else None, jsonrpc.PARSE_ERROR, f"Parse error: {exc}")
            )
            return
        if isinstance(msg, list):  # a JSON-RPC batch (2025-03-26 only): each member on its own
            if not msg:
                self._to_host(jsonrpc.error_response(None, jsonrpc.INVALID_REQUEST, "Invalid Request: empty batch"))
            for member in msg:
                self._guarded(self._host_message, member, None, self._to_host)
            return
        self._guarded(self._host_message, msg, line, self._to_host)

    def from_host_message(self, msg: dict[str, Any], line: bytes) -> None:
        """One host message its host has already read (`line`, its encoding): as `from_host`, not parsed again."""
        self._guarded(self._host_message, msg, line, self._to_host)

    def _guarded(
        self, handle: Callable[[Any, bytes | None], None], msg: Any, line: bytes | None, reply_to: Send
    ) -> None:
        """Contain a failure to one message: log it, answer its request (to its sender) if it had one, go on."""
        try:
            handle(msg, line)
        except Exception as exc:
            log.exception("failed to relay a message; it was dropped", error=str(exc))
            request_id = msg.get("id") if isinstance(msg, dict) else None
            if isinstance(msg, dict) and isinstance(msg.get("method"), str) and jsonrpc.usable_id(request_id):
                reply_to(
                    jsonrpc.error_response(request_id, jsonrpc.INTERNAL_ERROR, f"mcp-sampling-proxy failed: {exc}")
                )

    def _host_message(self, msg: Any, line: bytes | None) -> None:
        problem = envelope_problem(msg)
        if problem is not None:
            log.warning("host sent an invalid JSON-RPC message", problem=problem)
            if not isinstance(msg, dict) or not ("result" in msg or "error" in msg):  # not a response: say so
                request_id = msg.get("id") if isinstance(msg, dict) and jsonrpc.usable_id(msg.get("id")) else None
                self._to_host(
                    jsonrpc.error_response(request_id, jsonrpc.INVALID_REQUEST, f"Invalid Request: {problem}")
                )
            return
        if line is None and (line := _encode(msg)) is None:
            self._to_host(
                jsonrpc.error_response(
                    msg.get("id") if "method" in msg else None,
                    jsonrpc.INVALID_REQUEST,
                    "Invalid Request: nested too deeply to forward",
                )
            )
            return
        if self._held is not None:  # the eras are being settled: in order, after that
            self._held.append((msg, line))
            return
        method = msg.get("method")
        if method is None:  # a response to a server request (or to one of ours)
            waiter = self._awaiting_host.pop(msg["id"], None)
            if waiter is not None:
                waiter(msg)
            else:
                self._to_upstream(line)
            return
        if "id" in msg:
            if self.bridge.undecided and self.bridge.opens(msg):
                self._held = []
                self._tg.start_soon(self._negotiate, msg, line)
                return
            self._host_request(msg, line)
            return
        if self.bridge.translating and self.bridge.host_notification(msg):
            return
        if method == "notifications/cancelled":
            params = msg.get("params")
            request_id = params.get("requestId") if isinstance(params, dict) else None
            if jsonrpc.usable_id(request_id) and (screening := self._screening.pop(request_id, None)) is not None:
                screening.cancel()  # never reached the server
                return
            if jsonrpc.usable_id(request_id):
                request = self.session.inflight.pop(request_id, None)
                if request is not None and request.upstream_id != request_id:
                    self._moved.pop(request.upstream_id, None)
                resolving = request.resolving if request is not None else None
                if resolving is not None:  # translate to the retry's id, which is what the server knows
                    resolving.scope.cancel()
                    if resolving.current_id is not None:
                        (resolving.send or self._to_upstream)(
                            jsonrpc.dumps({**msg, "params": {**params, "requestId": resolving.current_id}})
                        )
                    return
                if request is not None and request.upstream_id != request_id:
                    self._to_upstream(jsonrpc.dumps({**msg, "params": {**params, "requestId": request.upstream_id}}))
                    return
        self._to_upstream(line)

    def _host_request(self, msg: JsonRpcRequest, line: bytes, screened: bool = False) -> None:
        tools = self._ports.tools
        if not screened and msg["method"] == "tools/call" and tools and tools.needs_screening(msg, self.session):
            scope = self._screening[msg["id"]] = anyio.CancelScope()
            self._tg.start_soon(self._screen_tool_call, msg, line, scope)
            return
        params = msg.get("params")
        if self.rounds and self.rounds.take_retry(msg):  # the answer to a question of the proxy's
            return
        if isinstance(params, dict) and "inputResponses" in params and self._ports.inputs is not None:
            self._ports.inputs.host_answered(params, self.session)
        state = params.get("requestState") if isinstance(params, dict) else None
        if self._stash and isinstance(state, str) and state in self._stash:
            self._tg.start_soon(self._merge_and_forward, msg, self._stash.pop(state))
            return
        changed = False
        if self.bridge.translating:
            outcome = self.bridge.host_request(msg)
            if outcome == DONE:
                return
            changed = outcome == CHANGED
        request = self._note_host_request(msg)
        if self._ports.rewrite_host_request(msg, self.session) or changed:
            rewritten = msg
            if jsonrpc.has_long_integers(line):  # read as floats: rewrite an exact reading instead
                rewritten = jsonrpc.parse_exact(line)
                if changed:
                    self.bridge.host_request(rewritten)
                self._ports.rewrite_host_request(rewritten, self.session)
            if request.upstream_id != msg["id"]:
                rewritten = {**rewritten, "id": request.upstream_id}
            encoded = _encode(rewritten)
            if encoded is None:
                self._forget(request)
                self._to_host(
                    jsonrpc.error_response(
                        msg["id"], jsonrpc.INVALID_REQUEST, "Invalid Request: nested too deeply to forward"
                    )
                )
                return
            line = encoded
        elif request.upstream_id != msg["id"]:
            line = jsonrpc.dumps({**msg, "id": request.upstream_id})
        self._to_upstream(line)

    async def _screen_tool_call(self, msg: JsonRpcRequest, line: bytes, scope: anyio.CancelScope) -> None:
        """A tools/call the tool rules hold (a human asked, or a refusal): on to the server, or refused."""
        refusal: ErrorObject | None = None
        with scope:
            try:
                refusal = None if self._ports.tools is None else await self._ports.tools.screen_call(msg, self)
            except Exception as exc:
                log.exception("failed to check a tool call")
                refusal = {"code": jsonrpc.INTERNAL_ERROR, "message": f"mcp-sampling-proxy failed: {exc}"}
        if self._screening.get(msg["id"]) is scope:
            del self._screening[msg["id"]]
        if scope.cancel_called or self.closed:
            return
        if refusal is not None:
            self._to_host(jsonrpc.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": refusal}))
            return
        self._guarded(functools.partial(self._host_request, screened=True), msg, line, self._to_host)

    async def _negotiate(self, msg: JsonRpcRequest, line: bytes | None) -> None:
        """Settle the server leg's era for the host request that opened the session, then handle
        what the host sent meanwhile, in order."""
        try:
            handle_first = await self.bridge.negotiate(msg)
        except Exception as exc:
            log.exception("failed to settle the protocol era")
            self.answer_host(
                msg["id"], error={"code": jsonrpc.INTERNAL_ERROR, "message": f"mcp-sampling-proxy failed: {exc}"}
            )
            handle_first = False
        self._release([(msg, line)] if handle_first else [])

    def _release(self, first: list[tuple[Any, bytes | None]]) -> None:
        """Handle the host messages held while the eras were settled, in the order they came."""
        held, self._held = first + (self._held or []), None
        for message, raw in held:
            if self._held is not None:  # settling again: the rest waits, still in order
                self._held.append((message, raw))
                continue
            self._guarded(self._host_message, message, raw, self._to_host)

    def _forward_host_request(self, msg: JsonRpcRequest) -> HostRequest:
        request = self._note_host_request(msg)
        self._ports.rewrite_host_request(msg, self.session)
        self._to_upstream(jsonrpc.dumps({**msg, "id": request.upstream_id}))
        return request

    def _note_host_request(self, msg: JsonRpcRequest) -> HostRequest:
        method = msg["method"]
        params = jsonrpc.as_object(msg.get("params"))
        request = HostRequest.of(msg, RETRYABLE)
        if msg["id"] in self._moved:  # the server still knows another request under this id: send it under another
            request.upstream_id = self.new_id()
            self._moved[request.upstream_id] = request
        self.session.inflight[msg["id"]] = request
        if method == "initialize":
            self.note_host_initialize(msg)
        else:
            self.note_host_meta(jsonrpc.as_object(params.get("_meta")))
        return request

    def note_host_meta(self, meta: dict[str, Any]) -> None:
        """Who the host is and what it can do, from a 2026-era request's `_meta` (it travels per request)."""
        version = meta.get(PROTOCOL_VERSION_META)
        if version:
            self.session.protocol_version = version
            self.session.host_info = jsonrpc.as_object(meta.get(CLIENT_INFO_META)) or self.session.host_info
            caps = meta.get(CLIENT_CAPS_META)
            if isinstance(caps, dict):
                self.session.host_capabilities = caps

    def note_host_initialize(self, msg: Mapping[str, Any]) -> None:
        """Who the host is and what it can do, from its initialize (handshake era)."""
        params = jsonrpc.as_object(msg.get("params"))
        self.session.host_info = jsonrpc.as_object(params.get("clientInfo"))
        self.session.host_capabilities = jsonrpc.as_object(params.get("capabilities"))
        self.session.protocol_version = params.get("protocolVersion")

    def _rekey(self, request: HostRequest, host_id: Any) -> None:
        """The host retried one of the proxy's rounds under `host_id`: the request waits there now."""
        if self.session.inflight.get(request.host_id) is request:
            del self.session.inflight[request.host_id]
        self.session.inflight[host_id] = request
        if request.upstream_id is not None and request.upstream_id != host_id:
            self._moved[request.upstream_id] = request
        if request.final is not None:  # the server answered while the round was out
            final, request.final = request.final, None
            self._tg.start_soon(self._deliver_final, request, final)

    async def _deliver_final(self, request: HostRequest, response: JsonRpcResponse) -> None:
        await anyio.sleep(0)  # after the retry that moved the request has been handled
        self._finish(request, response)

    def _forget(self, request: HostRequest) -> None:
        if self.session.inflight.get(request.host_id) is request:
            del self.session.inflight[request.host_id]
        if self._moved.get(request.upstream_id) is request:
            del self._moved[request.upstream_id]

    def _finish(self, request: HostRequest, response: JsonRpcResponse) -> None:
        """The final answer to a host request: to the id the host waits on now (once it holds one)."""
        if not request.held:
            request.final = response
            return
        self._forget(request)
        answer = {**response, "id": request.host_id}
        if self.answers_to_host is not None:
            self.answers_to_host(answer)
        else:
            self._to_host(jsonrpc.dumps(answer))

    # -- the bridge's own messages (relay/bridge.py) ----------------------------------------------
    def answer_host(
        self, host_id: Any, result: Mapping[str, object] | None = None, error: ErrorObject | JsonObject | None = None
    ) -> None:
        """Answer a host request here (the bridge's local answers; `error`: the proxy's, or a peer's passed on)."""
        request = self.session.inflight.get(host_id)
        if request is not None:
            self._forget(request)
        body = {"error": error} if error is not None else {"result": result if result is not None else {}}
        self._to_host(jsonrpc.dumps({"jsonrpc": "2.0", "id": host_id, **body}))

    def answer_upstream(self, request_id: Any, result: dict[str, Any]) -> None:
        self._to_upstream(jsonrpc.response(request_id, result))

    def send_host_notification(self, method: str, params: dict[str, Any]) -> None:
        self._to_host(jsonrpc.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    def notify_upstream(self, method: str, params: JsonObject | None) -> None:
        message: JsonRpcNotification = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._to_upstream(jsonrpc.dumps(message))

    async def request_upstream(
        self, method: str, params: dict[str, Any], timeout: float | None = None
    ) -> JsonRpcResponse:
        """A request of the proxy's own to the server; its response ({} when none came in `timeout`)."""
        request_id = self.new_id()
        line = jsonrpc.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        with anyio.move_on_after(timeout if timeout is not None else float("inf")):
            return await _exchange(self._awaiting_upstream, request_id, self._to_upstream, line)
        self._awaiting_upstream[request_id] = _ignore  # a late answer is the proxy's, not the host's
        return {}

    def start_upstream_request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request of the proxy's own whose answer nobody waits for; its id."""
        request_id = self.new_id()
        self._awaiting_upstream[request_id] = _ignore
        self._to_upstream(jsonrpc.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
        return request_id

    def rewrite_for_upstream(self, message: JsonRpcRequest) -> None:
        """What the ports add to a host request (capabilities), applied to one the proxy makes."""
        self._ports.rewrite_host_request(message, self.session)

    def note_server_result(self, result: Mapping[str, object]) -> None:
        """The server's initialize result (or one the bridge built): its name, version and protocol."""
        self._note_server({"result": result})

    def note_modern_server(self, result: dict[str, Any]) -> None:
        self._note_modern_server({"result": result})

    # -- upstream -> host ------------------------------------------------------------------
    def from_upstream(self, line: bytes) -> None:
        """One line from the server. Every line is parsed (there is no envelope shortcut: a line
        that looked like a response could carry a method), and only JSON-RPC objects go on."""
        try:
            msg = jsonrpc.parse(line)
        except ValueError as exc:
            log.warning(
                "upstream wrote a line that is not JSON; dropped",
                size=len(line),
                error=str(exc),
                start=one_line(line[:80].decode("utf-8", "replace"), 80),
            )
            self._undeliverable(
                line[:1024],
                line[-256:],
                jsonrpc.PARSE_ERROR,
                f"upstream server '{self.session.server_name}' sent a message that is not valid JSON ({exc})",
            )
            return
        if isinstance(msg, list):  # a batch (2025-03-26 only): each member is routed (and inspected) alone
            for member in msg:
                self._guarded(self._upstream_message, member, None, self._to_upstream)
            return
        self._guarded(self._upstream_message, msg, line, self._to_upstream)

    def _upstream_message(self, msg: Any, line: bytes | None) -> None:
        problem = envelope_problem(msg)
        if problem is not None:
            log.warning("upstream sent an invalid JSON-RPC message; dropped", problem=problem)
            if isinstance(msg, dict) and "method" in msg and "id" in msg:  # a request: tell the server
                request_id = msg.get("id") if jsonrpc.usable_id(msg.get("id")) else None
                self._to_upstream(
                    jsonrpc.error_response(request_id, jsonrpc.INVALID_REQUEST, f"Invalid Request: {problem}")
                )
            return
        if line is None and (line := _encode(msg)) is None:
            log.warning("upstream sent a batch member nested too deeply to forward; dropped")
            return
        method = msg.get("method")
        if method is None:
            self._upstream_response(msg, line)
            return
        if "id" in msg:
            if msg["id"] in self._awaiting_host or msg["id"] in self._served:
                # the host's answer would go to the request waiting there (a proxy approval form's, or the
                # server's own earlier one), and the earlier one's end would drop the later one's waiter
                log.warning("upstream sent a request under an id already in use; refused", method=one_line(method, 80))
                self._to_upstream(
                    jsonrpc.error_response(
                        msg["id"],
                        jsonrpc.INVALID_REQUEST,
                        "Invalid Request: id already in use by a request the proxy or the host is still answering",
                    )
                )
                return
            if self.bridge.translating and self.bridge.server_request(msg):
                return
            if method in self._ports.answers or (method == ROOTS_LIST and self.bridge.host_era == "modern"):
                self._start_serving(msg, line)
                return
            if self.bridge.host_era == "modern":  # a 2026 host takes no requests: only rounds of its calls
                self._to_upstream(
                    jsonrpc.error_response(
                        msg["id"],
                        jsonrpc.METHOD_NOT_FOUND,
                        f"Method not found: {one_line(method, 80)} (the host speaks "
                        "2026-07-28, which has no requests from the server)",
                    )
                )
                return
        elif method == "notifications/cancelled":
            if self._cancel_served(msg):
                return
        elif method == "notifications/progress":
            line = self._server_progress(msg, line)
        elif (passes := self._ports.notifications.get(method)) is not None and not passes(msg):
            return
        if self.bridge.translating:
            instead = self.bridge.server_notification(msg)
            if instead is not None:
                for each in instead:
                    self._to_host(each)
                return
        self._to_host(line)

    def _upstream_response(self, msg: JsonRpcResponse, line: bytes) -> None:
        waiter = self._awaiting_upstream.pop(msg["id"], None)
        if waiter is not None:
            waiter(msg)
            return
        request = self.session.inflight.get(msg["id"])
        if request is None or request.upstream_id != msg["id"]:
            request = self._moved.get(msg["id"])
        if request is not None and request.message is not None and self._resolve_input(msg, request):
            return
        if request is not None and self._runs_again_in_modern(msg, request):
            self._tg.start_soon(self._run_again_in_modern, request, msg, line)
            return
        if request is not None and request.method in NEGOTIATION:
            if "result" in msg:
                self._note_server(msg)
            else:  # not ready: say why, not "ready"
                error = jsonrpc.as_object(msg.get("error"))
                (log.warning if request.method == "initialize" else log.info)(
                    "upstream answered the handshake with an error", method=request.method, error=error.get("message")
                )
                if request.method == "initialize" and self.bridge.fallback_pending:
                    self.bridge.fallback_pending = False
                    self._held = []
                    self._tg.start_soon(self._initialize_refused, request, error)
                    return
                if request.method == "initialize" and self.bridge.setting == HANDSHAKE:  # pinned: say by what
                    said = one_line(str(error.get("message") or "refused"), 500)
                    self.answer_host(
                        request.host_id,
                        error={
                            **error,
                            "message": f"{said} (upstream.era is 'handshake' in the policy, so the proxy speaks "
                            "only the handshake era to this server; if it speaks only 2026-07-28, set "
                            "upstream.era: auto)",
                        },
                    )
                    return
        elif not self.session.server_info:
            self._note_modern_server(msg)
        if request is not None and request.method == "initialize":
            self.bridge.fallback_pending = False
        if request is None:
            self._to_host(line)
            return
        listed = request.method == "tools/list" and isinstance(msg.get("result"), dict)
        if listed and (tools := self._ports.tools) is not None and tools.active:
            self._tg.start_soon(self._screen_tool_list, tools, msg, line, request)
            return
        self._deliver(msg, line, request)

    async def _screen_tool_list(
        self, tools: ToolScreen, msg: JsonRpcResponse, line: bytes, request: HostRequest
    ) -> None:
        """A tools/list result through the pins and tool rules (off the relay's path), then to the host:
        as the server sent it when nothing is left out."""
        listed = jsonrpc.as_object(msg.get("result"))  # an object: `_upstream_response` checked
        try:
            params = {} if request.cursor is None else {"cursor": request.cursor}
            asked: JsonRpcRequest = {"jsonrpc": "2.0", "id": request.host_id, "method": "tools/list", "params": params}
            result = await tools.screen_list(asked, listed, self.session)
        except Exception as exc:
            log.exception("failed to check a tools/list result")
            msg = {
                "jsonrpc": "2.0",
                "id": msg["id"],
                "error": {"code": jsonrpc.INTERNAL_ERROR, "message": f"mcp-sampling-proxy failed: {exc}"},
            }
            line = jsonrpc.dumps(msg)
        else:
            if result is not listed:
                msg = {**msg, "result": _kept_tools(line, listed, result)}
                line = jsonrpc.dumps(msg)
        if not self.closed:
            self._deliver(msg, line, request)

    def _deliver(self, msg: JsonRpcResponse, line: bytes, request: HostRequest) -> None:
        """The server's answer to a host request, to the host (completed for a 2026 host). `line` is `msg`
        as the server wrote it (or as the relay rewrote it): an answer encoded again is read from it
        exactly when it holds integers past 64 bits, which `msg` holds as floats."""
        if self.bridge.host_era == "modern":  # whatever the server speaks: a result as a 2026 host requires it
            completed = self.bridge.server_result(_exact(msg, line), request)
            if completed is not None:
                self._finish(request, completed)
                return
        if request.host_id == msg["id"] and request.held:
            self._forget(request)
            self._to_host(line)
            return
        self._finish(request, _exact(msg, line))

    async def _initialize_refused(self, request: HostRequest, error: JsonObject) -> None:
        try:
            await self.bridge.initialize_refused(request.host_id, request, error)
        except Exception as exc:
            log.exception("failed to bridge to a 2026-only server")
            self.answer_host(
                request.host_id, error={"code": jsonrpc.INTERNAL_ERROR, "message": f"mcp-sampling-proxy failed: {exc}"}
            )
        self._forget(request)
        self._release([])

    def upstream_oversize(self, size: int, head: bytes, tail: bytes, limit: int) -> None:
        """The server wrote a line over the size limit (dropped unread): answer whoever waits for it."""
        log.error("upstream sent a message larger than the limit; dropped", size=size, limit=limit)
        self._undeliverable(
            head,
            tail,
            jsonrpc.INVALID_REQUEST,
            f"upstream server '{self.session.server_name}' sent a message of {size} bytes, over "
            f"the proxy's limit of {limit} bytes (--max-message-bytes)",
        )

    def _undeliverable(self, head: bytes, tail: bytes, code: int, text: str) -> None:
        """A server line the relay cannot pass on: whoever waits for it gets an error instead of silence
        (the host, when it answers a host request; the server, when it is a request of the server's)."""
        found, message_id = peek_id(head, tail)
        if not found:
            return
        # Both checks, not either: a result may mention "method" in its first bytes, and a host request
        # waiting for this id must not be left without an answer because of it.
        request = self._moved.get(message_id) or self.session.inflight.get(message_id)
        if request is not None:
            self._finish(
                request,
                {"jsonrpc": "2.0", "id": message_id, "error": {"code": jsonrpc.INTERNAL_ERROR, "message": text}},
            )
        if b'"method"' in head:
            self._to_upstream(jsonrpc.error_response(message_id, code, text))

    def _note_server(self, msg: JsonRpcResponse) -> None:
        result = jsonrpc.as_object(msg.get("result"))
        self.session.server_info = jsonrpc.as_object(result.get("serverInfo")) or self.session.server_info
        version = result.get("protocolVersion")
        if isinstance(version, str):
            self.session.protocol_version = version
        log.info(
            "upstream ready",
            server=self.session.server_name,
            server_reported=self.session.server_reported_if_different,
            protocol=self.session.protocol_version,
            host=self.session.host_name or None,
        )

    def _note_modern_server(self, msg: JsonRpcResponse) -> None:
        """2026-era servers name themselves in each result's _meta, not in an initialize result."""
        meta = jsonrpc.as_object(jsonrpc.as_object(msg.get("result")).get("_meta"))
        info = jsonrpc.as_object(meta.get(SERVER_INFO_META))
        if info:
            self.session.server_info = info

    def _cancel_served(self, msg: JsonRpcNotification) -> bool:
        params = jsonrpc.as_object(msg.get("params"))
        request_id = params.get("requestId")
        served = self._served.get(request_id) if jsonrpc.usable_id(request_id) else None
        if served is None:
            return False
        served.scope.cancel()
        if served.at_host and self.bridge.host_era != "modern":
            self._to_host(jsonrpc.dumps(msg))
        log.info("server cancelled a request the proxy was serving", request_id=params.get("requestId"))
        return True

    # -- serving server requests -------------------------------------------------------------
    def _start_serving(self, msg: JsonRpcRequest, line: bytes) -> None:
        request_id = msg["id"]
        served = _Served(anyio.CancelScope(), raw=line)
        self._served[request_id] = served
        self._tg.start_soon(self._serve, msg, served)

    def _owner(self) -> HostRequest | None:
        """The host request a server request belongs to in the handshake era, where the wire does not
        say: the only call in flight, else the oldest (what a 2026 host is asked in)."""
        calls = [request for request in self.session.inflight.values() if request.method in RETRYABLE]
        return min(calls, key=lambda request: request.started) if calls else None

    def owning_request(self) -> HostRequest | None:
        """The host request the server request being served belongs to: the call whose round carries
        it (2026 era) or the one it is taken to belong to (`_owner`), else the oldest host request of
        any method in flight; None when none is: the server asked unsolicited."""
        call = CURRENT_CALL.get()
        if call is not None:
            return call
        pending = self.session.inflight.values()
        return min(pending, key=lambda request: request.started) if pending else None

    async def _serve(self, msg: JsonRpcRequest, served: _Served) -> None:
        request_id = msg["id"]
        reply: bytes | None = None
        # Handshake era: the request belongs to one of the tools/calls in flight now (which one, the
        # wire does not say): each of them that asked for progress is kept alive while it waits.
        owners = [
            request
            for request in self.session.inflight.values()
            if request.method == "tools/call" and request.progress is not None
        ]
        token = CURRENT_CALL.set(self._owner())
        try:
            with served.scope, self._keeping_alive(owners, _WAITING_FOR.get(str(msg.get("method")), "waiting")):
                try:
                    answer = self._ports.answers.get(str(msg.get("method")))
                    if answer is None:  # roots/list for a 2026 host (_upstream_message lets no other through)
                        result = await self.roots_from_host(msg)
                    else:
                        result = await answer(self.server_request(msg, served.raw))
                    reply = jsonrpc.response(request_id, result)
                except RpcError as exc:
                    reply = jsonrpc.error_response(request_id, exc.code, exc.message, exc.data)
                except Exception as exc:
                    log.exception("failed to serve server request", method=msg.get("method"))
                    reply = jsonrpc.error_response(
                        request_id, jsonrpc.INTERNAL_ERROR, f"mcp-sampling-proxy failed: {exc}"
                    )
        finally:
            CURRENT_CALL.reset(token)
            self._served.pop(request_id, None)
            self._awaiting_host.pop(request_id, None)
        if reply is not None and not served.scope.cancel_called and not self.closed:
            self._to_upstream(reply)

    async def roots_from_host(self, msg: JsonRpcRequest) -> JsonObject:
        """roots/list for a server whose host cannot take it as a request (2026) or whose round asks
        it (the proxy answers 2026 rounds for a handshake host): the host is asked, if it has roots."""
        if not isinstance(self.session.host_capabilities.get("roots"), dict):
            raise RpcError(jsonrpc.METHOD_NOT_FOUND, "Method not found: the host does not offer roots")
        response = await self.forward_to_host(msg)
        if "error" in response:
            raise RpcError.from_error(response["error"])
        return jsonrpc.as_object(response.get("result"))

    async def forward_to_host(self, msg: JsonRpcRequest, *, as_received: bool = True) -> JsonObject:
        """Send a server request to the host; return the host's response.

        A handshake-era host gets it as a request under its own id (`as_received`: `msg` is the
        request as the server sent it, so its bytes go on untouched; False when the proxy changed
        it: a clamped maxTokens, an edited prompt). A 2026-era host gets it in an input_required
        round of the call it belongs to."""
        if self.bridge.host_era == "modern":
            return await self._ask_in_call(str(msg["method"]), _for_modern_host(msg))
        served = self._served.get(msg["id"])
        raw = None
        if served is not None:
            served.at_host = True
            raw = served.raw if as_received else None
        request_id = msg["id"] if served is not None else self.new_id()
        if self.bridge.server_era == "modern" and msg.get("method") == "elicitation/create":
            msg = _with_elicitation_id(msg)
            raw = None
        if raw is None and (raw := _encode({**msg, "id": request_id})) is None:
            raise RpcError(jsonrpc.INVALID_PARAMS, "Invalid params: nested too deeply to forward to the host")
        try:
            return _unchecked(await self._ask_host(request_id, raw))
        finally:
            if served is not None:
                served.at_host = False

    async def request_host(self, method: str, params: JsonObject) -> JsonObject:
        """A request the proxy itself sends to the host (e.g. an approval form).

        Its id is random (`new_id`), and a server request under an id waiting here is refused
        (`_upstream_message`), so the host's answer is this request's; it never reaches the upstream.
        A 2026-era host is asked in an input_required round of the call the request belongs to."""
        if self.bridge.host_era == "modern":
            return await self._ask_in_call(method, params)
        request_id = self.new_id()
        line = jsonrpc.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        try:
            return _unchecked(await self._ask_host(request_id, line))
        except anyio.get_cancelled_exc_class():
            self._to_host(
                jsonrpc.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": "no longer needed"},
                    }
                )
            )
            raise

    async def _ask_in_call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        call = CURRENT_CALL.get()
        if call is None:
            raise RpcError(
                jsonrpc.INTERNAL_ERROR,
                f"the host speaks 2026-07-28, where it can be asked ({method}) "
                "only during one of its own requests, and none is in flight",
            )
        return await self.rounds.ask(call, method, params)

    async def _ask_host(self, request_id: Any, line: bytes) -> JsonRpcResponse:
        return await _exchange(self._awaiting_host, request_id, self._to_host, line)

    @staticmethod
    def new_id() -> str:
        """An id for a request of the proxy's own, random each time: a server sees some of them (a
        2026-era retry goes to it under one) and must not be able to name the next (see `_upstream_message`)."""
        return f"mcp-sampling-proxy:{secrets.token_hex(12)}"

    def server_request(self, message: JsonRpcRequest, raw: bytes = b"") -> ServerRequest:
        """A server request as the `answers` port takes it: owned by the host request it belongs to now."""
        return ServerRequest(message, raw, self.session, self.owning_request(), self)

    # -- 2026-07-28: input_required results -------------------------------------------------------
    def _input_rounds(self) -> InputRounds:
        """The rounds port; only `_resolve_input`, which has checked it is there, starts what asks."""
        if self._ports.inputs is None:
            raise RuntimeError("no input rounds port")
        return self._ports.inputs

    def _resolve_input(self, msg: JsonRpcResponse, request: HostRequest, send: Send | None = None) -> bool:
        """Take over an `input_required` result whose requests the proxy answers itself (`send`: the
        connection it came on, when not the upstream's)."""
        result = msg.get("result")
        if not isinstance(result, dict) or result.get("resultType") != "input_required":
            return False
        inputs = self._ports.inputs
        if inputs is None:
            return False
        keys = inputs.owned_keys(result, self.session, request.message)
        requests = result.get("inputRequests") or {}
        if keys is None or not isinstance(requests, dict):
            return False
        if keys != set(requests) and self.bridge.host_era != "handshake":
            if keys:
                self._hand_to_host(request, result, requests, keys)
                return True
            shown = inputs.host_asked(result, request.message, self.session)
            if shown is result:
                return False
            self._finish(request, {**msg, "result": shown})
            return True
        resolving = _Resolving(anyio.CancelScope(), send=send)
        request.resolving = resolving
        self._tg.start_soon(self._resolve, request, result, resolving)
        return True

    def _hand_to_host(
        self, request: HostRequest, result: dict[str, Any], requests: dict[str, Any], keys: set[str]
    ) -> None:
        """A round the host takes part in (the first, or a later one): the host gets only its own
        requests, never the ones the proxy keeps (sampling the policy or a limit refuses is among
        them). The proxy answers those meanwhile and merges them into the host's retry, which it
        recognises by the echoed requestState; without one they are left out, and the server asks
        for them again (a round the proxy then answers whole)."""
        state = result.get("requestState")
        if keys and isinstance(state, str):
            stash = _Stash(call=request)
            self._stash[state] = stash
            self._tg.start_soon(self._answer_owned, requests, keys, stash, request)
        filtered = {**result, "inputRequests": {k: v for k, v in requests.items() if k not in keys}}
        if self._ports.inputs is not None:
            filtered = self._ports.inputs.host_asked(filtered, request.message, self.session)
        host_id = request.host_id
        self._forget(request)
        request.held = False  # until the host retries (_merge_and_forward): a question of ours waits for that
        self._to_host(jsonrpc.dumps({"jsonrpc": "2.0", "id": host_id, "result": filtered}))

    async def _answer_owned(
        self, requests: dict[str, Any], keys: set[str], stash: _Stash, request: HostRequest
    ) -> None:
        token = CURRENT_CALL.set(request)
        try:
            for key in sorted(keys):
                stash.answers[key] = await self._input_rounds().answer(key, requests[key], self, request.message)
        except RpcError as exc:
            stash.error = exc.to_dict()
        except Exception as exc:
            log.exception("failed to answer an input request")
            stash.error = {"code": jsonrpc.INTERNAL_ERROR, "message": f"mcp-sampling-proxy failed: {exc}"}
        finally:
            CURRENT_CALL.reset(token)
            stash.done.set()

    async def _merge_and_forward(self, msg: JsonRpcRequest, stash: _Stash) -> None:
        """The host's retry of a split request: add the proxy's answers, then send it on. While the
        proxy's answers are still being made the retry is the call the host waits on: a question
        of the proxy's for a 2026 host (an approval form) is asked in it."""
        call = stash.call
        if call is not None:
            call.upstream_id = None
            self.session.inflight[msg["id"]] = call
            call.back(
                msg["id"], jsonrpc.as_object(jsonrpc.as_object(msg.get("params")).get("_meta")).get("progressToken")
            )
        await stash.done.wait()
        host_id = call.host_id if call is not None else msg["id"]
        if call is not None:
            await call.wait_held()
            host_id = call.host_id
            self._forget(call)
        if stash.error is not None:
            self._to_host(jsonrpc.dumps({"jsonrpc": "2.0", "id": host_id, "error": stash.error}))
            return
        params = msg["params"]
        answers = jsonrpc.as_object(params.get("inputResponses"))
        params["inputResponses"] = {**answers, **stash.answers}
        retried = self._forward_host_request({**msg, "id": host_id} if host_id != msg["id"] else msg)
        if call is not None:  # the same logical call: its sampling count goes on (sampling.max_per_call)
            retried.sampling_requests = call.sampling_requests

    async def _resolve(self, request: HostRequest, result: dict[str, Any], resolving: _Resolving) -> None:
        reply: dict[str, Any] | None = None
        # Kept alive only while the proxy answers the input requests (InputResolver sets the status),
        # not while the server works on the retry: a hung server must still time out.
        token = CURRENT_CALL.set(request)
        try:
            with resolving.scope, self._keeping_alive([request] if request.progress is not None else [], None):
                try:
                    assert request.message is not None  # only calls kept for their rounds get one (HostRequest.of)
                    reply = await self._input_rounds().resolve(request.message, result, self, resolving)
                except RpcError as exc:
                    reply = {"error": exc.to_dict()}
                except Exception as exc:
                    log.exception("failed to resolve input_required")
                    reply = {"error": {"code": jsonrpc.INTERNAL_ERROR, "message": f"mcp-sampling-proxy failed: {exc}"}}
        finally:
            CURRENT_CALL.reset(token)
        request.resolving = None
        if reply is not None and not resolving.scope.cancel_called and not self.closed:
            owned = reply.pop("owned", None)
            if owned is not None:  # a later round the host takes part in: split it as the first
                later = reply["result"]
                await request.wait_held()
                self._hand_to_host(request, later, later["inputRequests"], owned)
                return
            await request.wait_held()
            self._finish(request, _response(request.host_id, reply))

    async def retry_upstream(self, message: JsonRpcRequest, params: JsonObject, resolving: _Resolving) -> JsonObject:
        """Send the original request again under a new private id; return the server's response."""
        request_id = resolving.current_id = self.new_id()
        line = jsonrpc.dumps({"jsonrpc": "2.0", "id": request_id, "method": message["method"], "params": params})
        if resolving.send is None:
            return _unchecked(await _exchange(self._awaiting_upstream, request_id, self._to_upstream, line))
        return _unchecked(await self._exchange_modern(request_id, line, resolving.send))

    # -- calls run again over a 2026 connection ---------------------------------------------------
    def _runs_again_in_modern(self, msg: JsonRpcResponse, request: HostRequest) -> bool:
        """A dual-era server refused a call on the handshake connection because the call asks for input
        by an `input_required` result, which only 2026-07-28 carries (FastMCP 4 asks for sampling only
        that way, and for elicitation by a request of its own only on a handshake connection: the host
        must have both). With `upstream.era` pinned, the pin decides instead."""
        return (
            self.second_leg is not None
            and request.message is not None
            and self.bridge.setting == "auto"
            and self.bridge.host_era == HANDSHAKE
            and self.session.server_era == HANDSHAKE
            and eras.needs_input_rounds(msg.get("error"))
        )

    async def _run_again_in_modern(self, request: HostRequest, refused: JsonRpcResponse, line: bytes) -> None:
        """Run the call once more over the 2026 connection, where the proxy answers its rounds. The
        server re-enters such a tool from the top on every round (SEP-2322): the refused attempt was
        its first round. The host gets the final result, or the refusal when no 2026 connection opens."""
        send = await self._modern_connection()
        message = request.message
        if send is None or message is None or self.closed:
            self._deliver(refused, line, request)
            return
        params = dict(jsonrpc.as_object(message.get("params")))
        session = self.session
        eras.stamp_meta(params, eras.request_meta(eras.MODERN, session.host_info, session.host_capabilities))
        message = {**message, "params": params}
        self._ports.rewrite_host_request(message, session)  # the capabilities the proxy serves
        request.message = message
        resolving = request.resolving = _Resolving(anyio.CancelScope(), current_id=self.new_id(), send=send)
        answer: JsonRpcResponse = {}
        with resolving.scope:
            answer = await self._exchange_modern(
                resolving.current_id, jsonrpc.dumps({**message, "id": resolving.current_id}), send
            )
        request.resolving = None
        if resolving.scope.cancel_called or self.closed:
            return
        if eras.era_refused(answer.get("error")):  # it does not speak 2026-07-28 after all: as directly
            self._deliver(refused, line, request)
            return
        log.info(
            "ran a call again over a 2026-07-28 connection: the server asks for its input only there",
            method=request.method,
            tool=request.tool,
        )
        if self._resolve_input(answer, request, send):
            return
        self._deliver(answer, jsonrpc.dumps(answer), request)

    async def _modern_connection(self) -> Send | None:
        async with self._modern_opening:
            if self._modern is None and not self._modern_tried and self.second_leg is not None:
                self._modern_tried = True
                self._modern = await self.second_leg.open(self._from_modern, self._modern_ended)
            return self._modern

    async def _exchange_modern(self, request_id: Any, line: bytes, send: Send) -> JsonRpcResponse:
        self._modern_ids.add(request_id)
        try:
            return await _exchange(self._awaiting_upstream, request_id, send, line)
        finally:
            self._modern_ids.discard(request_id)

    def _from_modern(self, line: bytes) -> None:
        """A line from the 2026 connection: answers to the calls run there, their progress and logs."""
        try:
            msg = jsonrpc.parse(line)
        except ValueError as exc:
            log.warning("the server's 2026 connection wrote a line that is not JSON; dropped", error=str(exc))
            return
        if not isinstance(msg, dict):
            return
        method, request_id = msg.get("method"), msg.get("id")
        if method is None:
            if jsonrpc.usable_id(request_id) and request_id in self._modern_ids:
                waiter = self._awaiting_upstream.pop(request_id, None)
                if waiter is not None:
                    waiter(cast(JsonRpcResponse, msg))  # no method, a usable id: a response
        elif "id" in msg:  # a 2026 server sends no requests
            if self._modern is not None:
                self._modern(
                    jsonrpc.error_response(
                        request_id if jsonrpc.usable_id(request_id) else None,
                        jsonrpc.METHOD_NOT_FOUND,
                        "Method not found: this connection speaks 2026-07-28, which has no requests from the server",
                    )
                )
        elif method in ("notifications/progress", "notifications/message"):
            self._guarded(self._upstream_message, msg, line, self._to_upstream)

    def _modern_ended(self) -> None:
        """The 2026 connection closed: the calls waiting on it get an error (it is not opened again)."""
        self._modern = None
        for request_id in list(self._modern_ids):
            waiter = self._awaiting_upstream.pop(request_id, None)
            if waiter is not None:
                why = f"upstream server '{self.session.server_name}' closed its 2026-07-28 connection"
                waiter({"jsonrpc": "2.0", "id": request_id, "error": {"code": jsonrpc.UPSTREAM_EXITED, "message": why}})

    # -- progress keep-alive (see relay/keepalive.py) ---------------------------------------------
    @contextmanager
    def _keeping_alive(self, owners: list[HostRequest], status: str | None) -> Iterator[None]:
        """While the block runs, send the owners' progress tokens a notification every
        `keepalive_seconds` (while a status is set), for as long as each owner is in flight."""
        if not owners or self._keepalive_seconds <= 0:
            yield
            return
        with serving(status) as waiting:
            scope = anyio.CancelScope()
            self._tg.start_soon(self._keep_alive, owners, waiting, scope)
            try:
                yield
            finally:
                scope.cancel()

    async def _keep_alive(self, owners: list[HostRequest], waiting: Waiting, scope: anyio.CancelScope) -> None:
        with scope:
            while True:
                await anyio.sleep(self._keepalive_seconds)
                if self.closed:
                    return
                status = waiting.status
                if status is None:
                    continue
                for request in owners:
                    if (
                        request.progress is not None
                        and request.held
                        and self.session.inflight.get(request.host_id) is request
                    ):
                        self._to_host(
                            jsonrpc.dumps(
                                {
                                    "jsonrpc": "2.0",
                                    "method": "notifications/progress",
                                    "params": request.progress.keepalive(status),
                                }
                            )
                        )

    def _server_progress(self, msg: JsonRpcNotification, line: bytes) -> bytes:
        """Note the server's progress on a host token; raise it when it would fall below a keep-alive."""
        params = jsonrpc.as_object(msg.get("params"))
        token = params.get("progressToken")
        for request in self.session.inflight.values():
            if request.progress is not None and same_token(request.progress.token, token):
                raised = request.progress.from_server(params)
                if raised is None:
                    return line
                log.debug(
                    "server progress raised above the proxy's keep-alive",
                    value=params.get("progress"),
                    raised_to=raised,
                )
                return jsonrpc.dumps({**msg, "params": {**params, "progress": raised}})
        return line

    # -- end of session ------------------------------------------------------------------------
    async def answered(self) -> None:
        """Return once every host request so far has its answer (or the server is gone): a host that
        closes its stdin may still read, and a server told "EOF" at once can drop what it was doing.
        Return at once, too, while the proxy serves the server itself (an LLM call, a question for the
        host): work for a host that has left is cut off at shutdown, as it always was."""
        while not self.closed and (
            self._held is not None or any(request.held for request in self.session.inflight.values())
        ):
            if self._served or self.rounds:
                return
            await anyio.sleep(0.01)

    @property
    def waiting_on_peers(self) -> bool:
        """True while a request the proxy serves, resolves or negotiates still waits for a peer."""
        return (
            bool(self._served)
            or self._held is not None
            or bool(self.rounds)
            or any(r.resolving is not None for r in [*self.session.inflight.values(), *self._moved.values()])
        )

    def upstream_gone(self, description: str) -> None:
        """Answer every open host request with an error that says the server is gone."""
        self.closed = True
        for request_id, request in list(self.session.inflight.items()):
            if not request.held:  # answered with a round of the proxy's: the host waits on nothing here
                continue
            self._to_host(
                jsonrpc.error_response(
                    request_id,
                    jsonrpc.UPSTREAM_EXITED,
                    f"upstream server '{self.session.server_name}' {description} before answering {request.method}",
                )
            )
        self.session.inflight.clear()
        self._moved.clear()
        self.cancel_all()

    def cancel_all(self) -> None:
        for screening in list(self._screening.values()):
            screening.cancel()
        for served in list(self._served.values()):
            served.scope.cancel()
        for request in list(self.session.inflight.values()) + list(self._moved.values()):
            if request.resolving is not None:
                request.resolving.scope.cancel()


def _exact(msg: JsonRpcResponse, line: bytes) -> JsonRpcResponse:
    """`msg`, read again from `line` with every integer exact when `line` holds some past 64 bits."""
    return cast(JsonRpcResponse, jsonrpc.parse_exact(line)) if jsonrpc.has_long_integers(line) else msg


def _kept_tools(line: bytes, listed: dict[str, Any], shown: dict[str, Any]) -> dict[str, Any]:
    """The tools/list result the host gets, read exactly from the server's line when it holds integers
    past 64 bits (which `parse` reads as floats: a schema's `maximum` must not change on the way)."""
    if not jsonrpc.has_long_integers(line):
        return shown
    left_out = {t.get("name") for t in listed["tools"] if isinstance(t, dict)} - {
        t.get("name") for t in shown["tools"] if isinstance(t, dict)
    }
    exact = jsonrpc.as_object(jsonrpc.as_object(jsonrpc.parse_exact(line)).get("result"))
    tools = exact.get("tools")
    if not isinstance(tools, list):
        return shown
    return {**exact, "tools": [t for t in tools if not (isinstance(t, dict) and t.get("name") in left_out)]}


def _unchecked(response: JsonRpcResponse) -> JsonObject:
    """A peer's response as the ports take it: a JSON object the service that reads it checks (the same
    object, not a copy)."""
    return cast(JsonObject, response)


def _response(host_id: Any, reply: JsonObject) -> JsonRpcResponse:
    """The response to a host request from a port's {"result": ...} or {"error": ...}."""
    response: JsonRpcResponse = {"jsonrpc": "2.0", "id": host_id}
    if "result" in reply:
        response["result"] = reply["result"]
    if "error" in reply:
        response["error"] = reply["error"]
    return response


def _ignore(_response: JsonRpcResponse) -> None:
    """The waiter of a request of the proxy's whose answer does not matter (it must not reach the host)."""


def _for_modern_host(msg: JsonRpcRequest) -> JsonObject:
    """A handshake server's request as a 2026 host takes it in a round: a URL elicitation loses its
    `elicitationId` (the round's retry is its end; the id and its completion notice do not exist)."""
    params = jsonrpc.as_object(msg.get("params"))
    if msg.get("method") == "elicitation/create" and "elicitationId" in params:
        params = {k: v for k, v in params.items() if k != "elicitationId"}
    return params


def _with_elicitation_id(msg: JsonRpcRequest) -> JsonRpcRequest:
    """A 2026 server's URL elicitation as a handshake host takes it: with the `elicitationId` URL
    mode requires there (the retry of the round ends it; no completion notice is sent)."""
    params = jsonrpc.as_object(msg.get("params"))
    if params.get("mode") != "url" or "elicitationId" in params:
        return msg
    return {**msg, "params": {**params, "elicitationId": secrets.token_hex(16)}}


# When a line is too large to keep, only its ends are: enough to find the id it answers.
_HEAD_ID = re.compile(
    rb'\A\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"(?:[^"\\]|\\.)*"\s*,)*\s*"id"\s*:\s*'
    rb'(-?\d+|"(?:[^"\\]|\\.)*")\s*[,}]'
)
_TAIL_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*\Z')


def peek_id(head: bytes, tail: bytes) -> tuple[bool, Any]:
    """(True, id) when the first or last bytes of an (oversized) message name its id, else (False, None).

    Matches the two layouts SDKs write: id near the start (Python) or as the final key
    (TypeScript, where `"id": X}` closes the top-level object)."""
    for pattern, part in ((_HEAD_ID, head), (_TAIL_ID, tail)):
        found = pattern.search(part)
        if found is not None:
            try:
                value = jsonrpc.parse(found.group(1))
            except ValueError:
                continue
            if jsonrpc.usable_id(value):
                return True, value
    return False, None


def envelope_problem(msg: Any) -> str | None:
    """What makes `msg` unroutable as a JSON-RPC 2.0 message, or None when it is fine."""
    if not isinstance(msg, dict):
        return f"expected a JSON object, got {type(msg).__name__}"
    if msg.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "method" in msg:
        if not isinstance(msg["method"], str):
            return "method must be a string"
        if "id" in msg and not jsonrpc.usable_id(msg["id"]):
            return "id must be a string or an integer"
        return None
    if "id" not in msg or not (jsonrpc.usable_id(msg["id"]) or (msg["id"] is None and "error" in msg)):
        return "a response needs a string or integer id"  # (null only for an error about an unreadable request)
    if "result" not in msg and "error" not in msg:
        return "a message needs a method, a result or an error"
    return None


async def _exchange(
    waiters: dict[Any, Callable[[JsonRpcResponse], None]], request_id: Any, send: Send, line: bytes
) -> JsonRpcResponse:
    """Send a request and wait for its response, which the reader hands over through `waiters`."""
    done = anyio.Event()
    answer: JsonRpcResponse = {}

    def resolve(response: JsonRpcResponse) -> None:
        answer.update(response)
        done.set()

    waiters[request_id] = resolve
    send(line)
    try:
        await done.wait()
    finally:
        waiters.pop(request_id, None)
    return answer


def _encode(msg: Any) -> bytes | None:
    """A parsed message as bytes again (batch members, rewritten requests); None when it is nested
    deeper than the encoder can go (strict JSON allows 1024 levels, the encoder fewer)."""
    try:
        return jsonrpc.dumps(msg)
    except RecursionError:
        return None
