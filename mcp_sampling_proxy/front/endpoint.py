"""The Streamable HTTP front (`serve`): a wrapped stdio server as an MCP endpoint at `/mcp`.

Each client session (an `initialize` POST without `Mcp-Session-Id`) gets a server process of its
own and a relay of its own, wired as the stdio proxy wires its one (runtime.py: the same services,
policy, approvals, audit and telemetry), with the host's side an HTTP session (front/http_session.py:
POST with SSE answers, the GET stream, DELETE, resuming with Last-Event-ID). Sessions never
share a server (unless `--shared-upstream`): one client cannot see another's state through it. What
is shared: the LLM adapters, the audit log, telemetry and the companion console.

Sessions are capped (503 past the cap) and end after an idle period (no request in flight and no
GET stream open), and when their server exits; each end stops the
session's server. Stopping `serve` ends every session and server; a killed `serve` takes the
servers with it (their parent-death signal and group guard, transport/stdio.py).

Each session keeps its recent SSE events (front/event_store.py, bounded, cleared at its end), so a
client whose connection dropped resumes its streams with `Last-Event-ID`.

Callers present a bearer token (front/tokens.py) when any is configured; the token's name
is the session's `client`, written into its audit records. Or, with `--oauth-issuer`, an OAuth access
token of an external authorization server, for this resource (front/resource_oauth.py); then its
subject is the `client`. A session answers only the client that opened it.

2026-07-28 requests have no session: each POST is one request answered in its body, a
`subscriptions/listen` with an SSE stream of its notifications (front/http_host.py `StatelessHost`),
by a "lane" per caller (a server and relay of the caller's own, ended when idle like a session), whose
relay speaks the 2026 era to the caller (relay/bridge.py).

The server is a command (one process per session) or a Streamable HTTP URL (`--url`: one upstream
HTTP session per client session, transport/http.py). With `--shared-upstream`, every session and lane
shares one (relay/multiplex.py keeps their messages apart), started with the first session and
stopped with `serve`; a shared server that exits is started again for the next session.
"""

from __future__ import annotations

import os
import shlex
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
from msgspec import Struct, field
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_sampling_proxy.approval.console.server import ConsoleServer
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.config.child_env import child_environment
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.front.event_store import EventLimits, SessionEventStore
from mcp_sampling_proxy.front.http_host import Emit, StatelessHost, Streamed, event_stream, json_answer
from mcp_sampling_proxy.front.http_server import Server, server_config, survive_signal_replay
from mcp_sampling_proxy.front.http_session import PROTOCOL_VERSION_HEADER, SESSION_ID_HEADER, HttpSession
from mcp_sampling_proxy.front.request_checks import (
    HEAD,
    RequestChecks,
    accepts,
    body_of,
    head_of,
    json_error,
    limit_body,
)
from mcp_sampling_proxy.front.tokens import Tokens
from mcp_sampling_proxy.log import Throttle, get_logger
from mcp_sampling_proxy.protocol import capabilities, eras, jsonrpc
from mcp_sampling_proxy.protocol.names import PROTOCOL_VERSION_META
from mcp_sampling_proxy.quotas.limiters import Limiters, shared_state
from mcp_sampling_proxy.relay.core import Relay
from mcp_sampling_proxy.relay.multiplex import Branch, Multiplexer
from mcp_sampling_proxy.relay.session import Session
from mcp_sampling_proxy.runtime import (
    Caller,
    Life,
    Services,
    Upstream,
    _approvals_store,
    _start_telemetry,
    _tool_pins,
    build_adapters,
    build_services,
    live,
    own_children,
    start_egress,
    warm_up,
)
from mcp_sampling_proxy.services.sampling.adapters import AdapterPool
from mcp_sampling_proxy.system.addresses import is_loopback
from mcp_sampling_proxy.system.hardening import end_strays, reap_orphans_forever
from mcp_sampling_proxy.transport.http import HttpUpstream
from mcp_sampling_proxy.transport.sandbox import Plan
from mcp_sampling_proxy.transport.stdio import SpawnError, StdioUpstream, spawn

if TYPE_CHECKING:  # its module loads the `mcp` SDK's OAuth parts: only with --oauth-issuer (commands/serve.py)
    from mcp_sampling_proxy.front.resource_oauth import ResourceGuard

log = get_logger("mcp_sampling_proxy.front.endpoint")

ENDPOINT = "/mcp"
HEALTH = "/healthz"  # for balancers and probes: no token, says only "ok"
END_GRACE = 2.0  # s a session's server gets after EOF before SIGTERM, when its session ends


class FrontOptions(Struct, frozen=True):
    host: str
    port: int
    command: list[str]
    name: str
    tokens: Tokens
    max_sessions: int = 16
    idle_timeout: float = 600.0
    max_message_bytes: int = 64 * 1024 * 1024
    sandbox: Plan | None = None  # how each server is contained (transport/sandbox.py)
    hidden: frozenset[str] = frozenset()  # variables no server inherits (the LLM keys)
    url: str | None = None  # a Streamable HTTP server instead of `command` (--url)
    headers: dict[str, str] = field(default_factory=dict)  # sent to `url` (--header)
    shared: bool = False  # one upstream for every session and lane (--shared-upstream)
    oauth: ResourceGuard | None = None  # callers bring OAuth access tokens instead of `tokens`
    replica: str | None = None  # this serve's name among several behind a balancer: every audit record's `replica`
    allowed_hosts: tuple[str, ...] = ()  # more Host values that name this endpoint on loopback (--allow-host)
    events: EventLimits = field(default_factory=EventLimits)  # what a session keeps for resuming (Last-Event-ID)

    @property
    def target(self) -> str:
        """The server's command line or URL: with `name`, whose tool pins these are."""
        return self.url if self.url is not None else shlex.join(self.command)


class _Served(Caller, kw_only=True):
    """One client session: its HTTP, its server, its relay."""

    http: HttpSession


class _Lane(Caller, kw_only=True):
    """One caller's 2026-07-28 requests (stateless: no session to hang a server on): a server of its
    own per caller, kept while requests come, ended after the idle timeout like a session."""

    link: StatelessHost = field(default_factory=StatelessHost)
    ready: anyio.Event = field(default_factory=anyio.Event)
    last_used: float = field(default_factory=time.monotonic)


class Front:
    """The ASGI app at `/mcp` and the sessions behind it."""

    def __init__(self, settings: Settings, options: FrontOptions, start_upstream: Callable[[], Upstream] | None = None):
        """`start_upstream`: where every session's, lane's and shared server (and a 2026 second leg) comes
        from; by default a process of `options.command`, or an HTTP session to `options.url`. Another source
        (a server played in memory) runs the same sessions without a process."""
        self.settings = settings
        self.options = options
        self._start_upstream = start_upstream or self._start_server
        self.sessions: dict[str, _Served] = {}
        self.lanes: dict[str | None, _Lane] = {}  # by caller: 2026-07-28 requests
        self._tg: anyio.abc.TaskGroup | None = None
        self._shared: Multiplexer | None = None  # --shared-upstream: the one upstream, once started
        # every server process (and its group guard) a session, lane or shared upstream runs now: what `serve`,
        # their subreaper, must neither collect as an orphan nor end as a stray
        self._children: set[int] = set()
        self._sharing = anyio.Lock()
        self.adapters: AdapterPool = build_adapters(settings, None)
        self.offered = capabilities.offers(
            capabilities.offered_sampling(
                route=settings.sampling.route,
                tools=settings.sampling.advertise_tools and self.adapters.can_use_tools,
            ),
            capabilities.offered_elicitation(route=settings.elicitation.route, url_mode=settings.elicitation.url_mode),
        )
        self.audit = AuditLog.from_settings(settings, stamp={"replica": options.replica} if options.replica else None)
        self.console = ConsoleServer(lambda: options.name, lambda: "HTTP clients")
        self._approvals = _approvals_store()
        self._limits = Limiters(shared=shared_state(settings.state))
        self._pins = _tool_pins(settings)
        resource = options.oauth.settings.resource if options.oauth else None
        self._checks = _checks(options.host, options.port, resource, options.allowed_hosts)
        self._refusals = Throttle(burst=10, window=60.0)
        self.app = limit_body(self._handle, options.max_message_bytes)

    # -- HTTP ----------------------------------------------------------------------------------
    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        head = head_of(scope)
        path = scope["path"]
        if path == HEALTH and scope["method"] in ("GET", "HEAD"):
            await _healthy()(scope, receive, send)
            return
        guard = self.options.oauth
        if guard is not None and guard.publishes(path):  # RFC 9728: how to get a token
            await guard.metadata(scope, receive, send)
            return
        if path.rstrip("/") != ENDPOINT:
            await json_error(404, f"Not Found: the MCP endpoint is {ENDPOINT}")(scope, receive, send)
            return
        if guard is not None:
            client = await guard.admit(scope, receive, send, lambda why: self._note_refusal(scope, why))
            if client is None:
                return
        else:
            client, refusal = self._authenticate(scope, head)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        version = head.get(PROTOCOL_VERSION_HEADER)
        if version in eras.MODERN_VERSIONS and SESSION_ID_HEADER not in head:
            answer = await self._stateless(client, scope, head, version)
            await answer(scope, receive, send)
            return
        if version is not None and version not in eras.HANDSHAKE_VERSIONS:
            await _unsupported_version(scope, version)(scope, receive, send)
            return
        is_post = scope["method"] == "POST"
        session_id = head.get(SESSION_ID_HEADER)
        if session_id is None:
            if not is_post:
                await json_error(400, "Bad Request: no Mcp-Session-Id; open a session with an initialize POST")(
                    scope, receive, send
                )
                return
            refused = (
                self._checks.refusal(head, is_post=True) or _not_acceptable(head) or _not_an_opening(body_of(scope))
            )
            if refused is not None:  # answered before a server is started for it
                await refused(scope, receive, send)
                return
            await self._open(client, scope, receive, send)  # (limit_body's `receive` gives the body again)
            return
        served = self.sessions.get(session_id)
        if served is None or served.client != client:  # another caller's session looks like no session
            # a rebound page naming a session it guessed is refused as one without, not told 404
            refused = self._checks.refusal(head, is_post=is_post)
            await (refused or json_error(404, "Not Found: no such session (it ended, or expired): initialize again"))(
                scope, receive, send
            )
            return
        refused = self._checks.refusal(head, is_post=is_post)
        if refused is not None:
            await refused(scope, receive, send)
            return
        resume = head.get("last-event-id")
        if scope["method"] == "GET" and resume is not None and not served.http.events.holds(resume):
            if served.http.events.was_get_streams(resume):  # its missed events are gone: the stream goes on
                log.warning("a GET stream resumed after events no longer kept", session=session_id[:8])
                scope = _without(scope, b"last-event-id")
                head = head_of(scope)
            else:
                await json_error(
                    400,
                    "Bad Request: cannot resume after that Last-Event-ID (not this session's, or no longer "
                    "kept): send the request again",
                )(scope, receive, send)
                return
        await served.http.handle(scope, receive, send, head)
        if served.http.terminated:
            served.end("the client ended the session (DELETE)")

    def _authenticate(self, scope: Scope, head: dict[str, str]) -> tuple[str | None, JSONResponse | None]:
        """(the client's name, None), or (None, the 401 to answer) when a token is needed and wrong."""
        tokens = self.options.tokens
        if not tokens.required:
            return None, None
        scheme, _, presented = head.get("authorization", "").partition(" ")
        client = tokens.identify(presented.strip()) if scheme.lower() == "bearer" else None
        if client is None:
            self._note_refusal(scope, "no valid token")
            if scheme.lower() == "bearer" and tokens.is_whole_line(presented.strip()):
                message = (
                    "Unauthorized: that is a whole line of --token-file (NAME:TOKEN); send only the part after "
                    "the colon: 'Authorization: Bearer TOKEN'"
                )
            else:
                message = "Unauthorized: send 'Authorization: Bearer TOKEN' with a token of --token-file"
            response = json_error(401, message)
            response.headers["WWW-Authenticate"] = 'Bearer realm="mcp-sampling-proxy"'
            return None, response
        return client, None

    def _note_refusal(self, scope: Scope, why: str) -> None:
        held = self._refusals.admit()  # a caller guessing tokens must not bury the log
        if held is not None:
            log.warning("refused an HTTP request: " + why, peer=_peer(scope), unlogged=held or None)

    async def _open(self, client: str | None, scope: Scope, receive: Receive, send: Send) -> None:
        """A new session: its server, its relay, then its transport answers the opening request."""
        if self._full():
            log.warning("refused a new session: at the cap", sessions=len(self.sessions), client=client)
            await self._at_cap()(scope, receive, send)
            return
        try:
            upstream = await self._upstream()
        except SpawnError as exc:
            log.error("cannot start the server for a new session", error=str(exc))
            await json_error(502, f"Bad Gateway: {exc}")(scope, receive, send)
            return
        session_id = uuid.uuid4().hex
        http = HttpSession(
            session_id,
            lambda message: _owner(served.relay, message),
            SessionEventStore(self.options.events),
            self.options.idle_timeout,
        )
        session = Session(name_override=self.options.name, client=client, served=uuid.uuid4().hex[:12])
        served = _Served(http=http, upstream=upstream, client=client, session=session)
        self.sessions[session_id] = served
        log.info("session opened", session=session_id[:8], client=client, **_where(upstream))
        assert self._tg is not None
        await self._tg.start(self._run, session_id, served)
        if served.relay is None:  # it failed as it started (logged): nothing answers the client
            await json_error(502, "Bad Gateway: the session could not start; see serve's log")(scope, receive, send)
            return
        if await http.handle(scope, receive, send) >= 400:
            served.end("the opening request was refused")

    def _at_cap(self) -> JSONResponse:
        return json_error(503, f"Service Unavailable: {self.options.max_sessions} sessions are open (--max-sessions)")

    def _full(self) -> bool:
        return len(self.sessions) + len(self.lanes) >= self.options.max_sessions

    # -- 2026-07-28: stateless requests ----------------------------------------------------------
    async def _stateless(self, client: str | None, scope: Scope, head: dict[str, str], version: str) -> ASGIApp:
        """One 2026-07-28 request, answered in the POST's body by the caller's lane."""
        if scope["method"] != "POST":
            return json_error(405, "Method Not Allowed: a 2026-07-28 request is a POST (there is no GET stream)")
        refused = self._checks.refusal(head, is_post=True)  # Host, Origin, Content-Type
        if refused is not None:
            return refused
        try:
            message = jsonrpc.parse_keeping_integers(body_of(scope))  # encoded again for the lane
        except ValueError as exc:
            return json_error(400, f"Parse error: {exc}", jsonrpc.PARSE_ERROR)
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return json_error(400, "Bad Request: the body must be one JSON-RPC request or notification")
        named = head.get("mcp-method")
        if named is not None and named != message["method"]:
            return json_error(400, f"Bad Request: Mcp-Method {named[:80]!r} does not name the body's method")
        refusal = eras.http_refusal(message, version) if jsonrpc.usable_id(message.get("id")) else None
        if refusal is not None:  # refused before a server is started for it
            status, error = refusal
            return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "error": error}, status_code=status)
        lane = self.lanes.get(client)
        if lane is not None and lane.ended.is_set():  # ending (its server exited, or idle): the next one starts
            del self.lanes[client]
            lane = None
        if lane is None:
            if self._full():
                return self._at_cap()
            try:
                lane = await self._open_lane(client)
            except SpawnError as exc:
                return json_error(502, f"Bad Gateway: {exc}")
        if not lane.ready.is_set():  # its server is starting (another request opened the lane)
            with anyio.fail_after(30):
                await lane.ready.wait()
        assert lane.relay is not None
        lane.last_used = time.monotonic()
        if "id" not in message:
            lane.relay.from_host_message(message, jsonrpc.dumps(message))
            return Response(status_code=202)
        if not jsonrpc.usable_id(message["id"]):
            return json_error(400, "Bad Request: a request needs a string or integer id")
        listens = message["method"] == "subscriptions/listen"  # a stream, unless the server refuses it at once
        streams = listens or "text/event-stream" in head.get("accept", "")
        try:
            if streams:  # progress and log messages as the server sends them, when there are any
                opening = lane.link.listen if listens else lane.link.call
                streamed = await opening(message, lane.relay.from_host_message)
                if streamed.rest is not None:
                    return _call_stream(lane, streamed)
                answer = streamed.first
            else:
                answer = await lane.link.exchange(message, lane.relay.from_host_message)
        finally:
            lane.last_used = time.monotonic()
        not_found = jsonrpc.as_object(answer.get("error")).get("code") == jsonrpc.METHOD_NOT_FOUND
        status = 404 if not_found else 200  # SEP-2575: 404 for no such method
        # written by orjson (JSONResponse's stdlib encoder took a tenth of serve's CPU for a request)
        return json_answer(jsonrpc.dumps(answer), status)

    async def _open_lane(self, client: str | None) -> _Lane:
        upstream = await self._upstream()
        existing = self.lanes.get(client)
        if existing is not None and not existing.ended.is_set():  # opened by another request while this one waited
            await upstream.stop(0)
            self._children.difference_update(own_children(upstream))
            return existing
        session = Session(name_override=self.options.name, client=client, served=uuid.uuid4().hex[:12])
        lane = _Lane(upstream=upstream, client=client, session=session)
        self.lanes[client] = lane
        log.info("2026-07-28 caller's server started", client=client, **_where(upstream))
        assert self._tg is not None
        self._tg.start_soon(self._run_lane, lane)
        return lane

    async def _run_lane(self, lane: _Lane) -> None:
        async def opened(relay: Relay, tg: anyio.abc.TaskGroup) -> None:
            relay.answers_to_host = lane.link.take  # its answers as messages: it puts the caller's ids back
            lane.ready.set()
            tg.start_soon(self._expire_lane, lane)

        async def closing(_code: int | None, description: str | None) -> None:
            if description is not None:
                log.error(f"the server of 2026-07-28 caller {lane.client!r} {description}")
                lane.link.close(f"upstream server '{self.options.name}' {description}")
            else:
                lane.link.close(f"the server's session ended: {lane.why}")

        async def forget() -> None:
            lane.link.close("serve is stopping")
            if self.lanes.get(lane.client) is lane:
                del self.lanes[lane.client]

        life = self._life(lane, lane.link.send, opened, closing, forget)
        code = await self._live(lane, life, f"2026-07-28 caller {lane.client!r}", another=None, keepalive_seconds=0.0)
        log.info(
            "2026-07-28 caller's server ended",
            client=lane.client,
            reason=lane.why,
            server_exit=lane.upstream.describe_end(code),
        )

    async def _expire_lane(self, lane: _Lane) -> None:
        idle = self.options.idle_timeout
        while True:
            await anyio.sleep(min(idle / 4, 5.0))
            if lane.link.in_flight == 0 and time.monotonic() - lane.last_used >= idle:
                lane.end(f"idle for {idle:g} s (--idle-timeout)")
                return

    def _services(self) -> Services:
        return build_services(
            self.settings,
            self.adapters,
            self.audit,
            None,
            self.console,
            self.offered,
            approvals_store=self._approvals,
            tool_pins=self._pins,
            server_target=self.options.target,  # as the stdio proxy names it: the same pins
            limits=self._limits,  # rate and concurrency limits count per serve, not per session
        )

    # -- the upstream ----------------------------------------------------------------------------
    async def _upstream(self) -> Upstream:
        """A new session's (or lane's) upstream: a server of its own, or a branch of the shared one."""
        if not self.options.shared:
            return self._start_upstream()
        async with self._sharing:
            if self._shared is None or self._shared.ended.is_set():
                if self._shared is not None:  # it exited: reap it, and start another for this session
                    await self._shared.stop(0)
                    self._children.difference_update(own_children(self._shared.upstream))
                shared = Multiplexer(self._start_upstream())
                await shared.start(max_line=self.options.max_message_bytes)
                assert self._tg is not None
                start_egress(
                    self._tg, shared.upstream, self.settings, self.options.name, self._services(), self.audit, None
                )
                self._shared = shared
                log.info("shared server started", **_where(shared.upstream))
            return self._shared.branch()

    def _start_server(self) -> Upstream:
        """A server process (SpawnError when it cannot start), or an HTTP session to --url."""
        if self.options.url is not None:
            return HttpUpstream(self.options.url, dict(self.options.headers))
        process = spawn(
            self.options.command, child_environment(os.environ, set(self.options.hidden)), sandbox=self.options.sandbox
        )
        upstream = StdioUpstream(
            process, self.options.name, self.options.sandbox.notes() if self.options.sandbox else None
        )
        self._children.update(own_children(upstream))  # at once: no orphan reaping comes in between
        return upstream

    # -- one session ---------------------------------------------------------------------------
    async def _run(
        self, session_id: str, served: _Served, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        http = served.http
        started: list[bool] = []

        async def opened(relay: Relay, _tg: anyio.abc.TaskGroup) -> None:
            http.attach(relay.from_host)
            reader = served.upstream.reader
            if reader is not None:  # a client that reads slower than the server writes holds the server back
                http.on_pause, http.on_resume = reader.pause, reader.resume
            started.append(True)
            task_status.started()

        async def closing(_code: int | None, description: str | None) -> None:
            if description is not None:
                log.error(f"the server of session {session_id[:8]} {description}", client=served.client)
            http.close()
            with anyio.move_on_after(2.0):  # the last answers (upstream_gone's errors) go out
                await http.drained.wait()

        async def forget() -> None:
            if not started:  # it failed as it started: the opening request is answered so (Front._open)
                task_status.started()
            self.sessions.pop(session_id, None)
            await http.terminate()

        life = self._life(served, http.send, opened, closing, forget)
        code = await self._live(
            served, life, f"session {session_id[:8]}", another=self._start_upstream, idle=http.idle_scope
        )
        http.events.clear()
        log.info(
            "session ended",
            session=session_id[:8],
            client=served.client,
            reason=served.why,
            server_exit=served.upstream.describe_end(code),
        )

    def _life(
        self,
        caller: Caller,
        to_host: Callable[[bytes], None],
        opened: Callable[[Relay, anyio.abc.TaskGroup], Awaitable[None]],
        closing: Callable[[int | None, str | None], Awaitable[None]],
        forget: Callable[[], Awaitable[None]],
    ) -> Life:
        """A session's or a lane's life (runtime.live): its server and second process get END_GRACE."""

        async def stop(_why: str) -> int | None:
            return await caller.upstream.stop(END_GRACE)

        return Life(to_host, opened, stop, lambda _why: END_GRACE, closing=closing, forget=forget)

    async def _live(
        self,
        caller: Caller,
        life: Life,
        label: str,
        *,
        another: Callable[[], Upstream] | None,
        keepalive_seconds: float | None = None,
        idle: anyio.CancelScope | None = None,
    ) -> int | None:
        """runtime.live for one caller of this serve; a failure ends that caller only (logged), never the others."""
        try:
            return await live(
                caller,
                life,
                self._services(),
                self.settings,
                self.audit,
                self.options.name,
                self.options.max_message_bytes,
                another=another,
                children=self._children,
                keepalive_seconds=keepalive_seconds,
                idle=idle,
                idle_reason=f"idle for {self.options.idle_timeout:g} s (--idle-timeout)",
            )
        except Exception:
            log.exception(f"{label} failed; ending it", client=caller.client)
            return caller.exit_status  # (stopped all the same)

    # -- the process ---------------------------------------------------------------------------
    async def serve(self, listener: socket.socket) -> None:
        """Listen until SIGTERM or SIGINT; then end every session and its server, and what they left
        behind. `serve` is the subreaper of its servers' orphans (commands/serve.py): it collects those
        that exit while it runs, and ends those still running when it stops, as the stdio proxy does at
        its end (in the sandbox they end with their server's PID namespace already)."""
        warm_up(self.adapters)
        telemetry = _start_telemetry(self.settings, self.audit)
        config = server_config(self.app, host=self.options.host, port=self.options.port)
        server = Server(config, self._end_sessions)
        try:
            async with self.running():
                log.info(
                    "serving",
                    url=f"http://{_netloc(self.options.host, self.options.port)}{ENDPOINT}",
                    server=self.options.name,
                    replica=self.options.replica,
                    tokens=len(self.options.tokens.callers),
                    oauth_resource=self.options.oauth.settings.resource if self.options.oauth else None,
                    max_sessions=self.options.max_sessions,
                    idle_timeout=self.options.idle_timeout,
                )
                survive_signal_replay(server)
                assert self._tg is not None
                self._tg.start_soon(reap_orphans_forever, self._children)
                await server.serve(sockets=[listener])
            with anyio.CancelScope(shield=True):
                ended = await end_strays(self._children)
            if ended:
                log.info("ended processes the servers left behind (outside their process groups)", count=ended)
        finally:
            if telemetry is not None:
                await anyio.to_thread.run_sync(telemetry.shutdown)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """What the app's sessions run in (their task group, the companion console's socket) while the body
        runs; then every session and server ended, and what they shared closed. `serve` listens inside it;
        tests drive the app in process inside it."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await tg.start(self.console.serve)
                yield
                self.end_all("serve is stopping")
                tg.cancel_scope.cancel()
        finally:
            if self._shared is not None:
                with anyio.CancelScope(shield=True):
                    code = await self._shared.stop(END_GRACE)
                log.info("shared server ended", server_exit=self._shared.upstream.describe_end(code))
            await self.adapters.aclose()
            await self._limits.aclose()
            if self.options.oauth is not None:
                await self.options.oauth.aclose()
            self.audit.close()

    async def _end_sessions(self) -> None:
        """Before uvicorn waits for connections to close: end the sessions, and so their SSE streams."""
        self.end_all("serve is stopping")
        for served in list(self.sessions.values()):
            await served.http.terminate()

    def end_all(self, reason: str) -> None:
        for served in list(self.sessions.values()):
            served.end(reason)
        for lane in list(self.lanes.values()):
            lane.end(reason)


def _where(upstream: object) -> dict[str, Any]:
    """What a log line says of a session's server: its pid, its URL, or that it is shared."""
    if isinstance(upstream, StdioUpstream):
        return {"server_pid": upstream.process.pid}
    if isinstance(upstream, HttpUpstream):
        return {"server_url": upstream.url}
    return {"shared": True} if isinstance(upstream, Branch) else {}


def _owner(relay: Relay | None, message: dict[str, Any]) -> Any:
    """The host request a message for the host belongs to (see front/http_session.py), or None."""
    if relay is None:
        return None
    inflight = relay.session.inflight
    token = jsonrpc.as_object(message.get("params")).get("progressToken")
    if token is not None:
        for host_id, request in inflight.items():
            if request.progress is not None and request.progress.token == token:
                return host_id
    if not inflight:
        return None
    return min(inflight.items(), key=lambda item: item[1].started)[0]


def _healthy() -> Response:
    """What a balancer's health check gets while serve listens: nothing about sessions, callers or the server."""
    return Response("ok\n", media_type="text/plain", headers={"Cache-Control": "no-store"})


def _not_acceptable(head: dict[str, str]) -> JSONResponse | None:
    """The 406 a session's transport answers a POST that does not accept both JSON and an event stream,
    given before a server is started for a session that could not be used."""
    takes_json, takes_events = accepts(head)
    if takes_json and takes_events:
        return None
    return json_error(406, "Not Acceptable: Client must accept both application/json and text/event-stream")


def _not_an_opening(body: bytes) -> JSONResponse | None:
    """The 400 for a POST without Mcp-Session-Id that is not an initialize (None when it is one)."""
    try:
        message = jsonrpc.parse(body)
    except ValueError as exc:
        return json_error(400, f"Parse error: {exc}", jsonrpc.PARSE_ERROR)
    message = jsonrpc.as_object(message)
    if message.get("method") == "initialize" and "id" in message:
        return None
    meta = jsonrpc.as_object(jsonrpc.as_object(message.get("params")).get("_meta"))
    version = meta.get(PROTOCOL_VERSION_META)
    if isinstance(version, str) and version in eras.MODERN_VERSIONS:
        return json_error(400, f"Bad Request: a {version} request needs the header MCP-Protocol-Version: {version}")
    return json_error(400, "Bad Request: no Mcp-Session-Id; open a session with an initialize POST")


def _without(scope: Scope, header: bytes) -> Scope:
    """The request without one header (and without the headers `head_of` read, which held it)."""
    kept = {key: value for key, value in scope.items() if key != HEAD}
    return {**kept, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != header]}


def _checks(host: str, port: int, resource: str | None = None, allowed: tuple[str, ...] = ()) -> RequestChecks:
    """On loopback (any of 127.0.0.0/8, ::1, localhost), Host and Origin must name this endpoint: a web
    page's DNS-rebinding cannot reach it. An OAuth resource URL names it too (a TLS proxy in front of a
    loopback `serve` passes its Host on), and so does each `--allow-host` (a balancer on this machine)."""
    if not is_loopback(host):
        return RequestChecks()
    names = list(dict.fromkeys([_netloc(host, port), f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]))
    names += [name for name in allowed if name not in names]
    origins = [f"http://{name}" for name in names]
    if resource is not None:
        public = urlsplit(resource)
        names.append(public.netloc)
        origins.append(f"{public.scheme}://{public.netloc}")
    return RequestChecks(tuple(names), tuple(origins), rebinding=True)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


def _call_stream(lane: _Lane, streamed: Streamed) -> ASGIApp:
    """A 2026-07-28 request whose server sent something before its answer (a call's progress, a
    subscriptions/listen's acknowledgement): the rest as an SSE stream."""

    async def produce(emit: Emit) -> None:
        try:
            await streamed.drain(emit)
        finally:
            lane.last_used = time.monotonic()

    return event_stream(produce)


def _unsupported_version(scope: Scope, version: str) -> JSONResponse:
    """SEP-2575's UnsupportedProtocolVersionError (400, -32022) with the request's id: `supported` lists
    what a caller can ask for without a handshake (as server/discover does), `requested` echoes it."""
    try:
        message = jsonrpc.parse(body_of(scope))
    except ValueError:
        message = None
    request_id = message.get("id") if isinstance(message, dict) and jsonrpc.usable_id(message.get("id")) else None
    text = (
        f"Bad Request: unsupported MCP-Protocol-Version {version[:40]!r}; this endpoint serves "
        f"{', '.join((*eras.HANDSHAKE_VERSIONS, *eras.MODERN_VERSIONS))}"
    )
    data = {"supported": list(eras.MODERN_VERSIONS), "requested": version[:40]}
    error = {"code": eras.UNSUPPORTED_PROTOCOL_VERSION, "message": text, "data": data}
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}, status_code=400)
