"""Run one proxy session: host stdio on one side, the upstream on the other, until either ends; and what
every front shares to do so: the services wired (`build_services`), the relay built (`open_relay`), a
session's life (`live`, which `serve` lives each client session by too).

Lifecycle rules: host EOF, SIGTERM, SIGINT or SIGHUP stop the upstream gracefully (stdin closed, then
SIGTERM, then SIGKILL of its process group) and exit 0; when the upstream ends on its own,
every open host request gets an error naming the exit status and the proxy exits non-zero.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import anyio.abc
from msgspec import Struct, field

from mcp_sampling_proxy import __version__
from mcp_sampling_proxy.approval.approver import Approver
from mcp_sampling_proxy.approval.console.server import ConsoleServer
from mcp_sampling_proxy.approval.form_prompts import ElicitationConsoles
from mcp_sampling_proxy.approval.memory import ApprovalMemory
from mcp_sampling_proxy.approval.registry import ChannelNeeds, build_channels
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.config.keys import provider_key
from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import capabilities, jsonrpc
from mcp_sampling_proxy.protocol.names import ELICITATION_COMPLETE, ELICITATION_CREATE, SAMPLING_CREATE
from mcp_sampling_proxy.protocol.wire_types import JsonRpcRequest
from mcp_sampling_proxy.quotas.limiters import Limiters, shared_state
from mcp_sampling_proxy.quotas.state import Approvals, StateFile, approvals_file, state_dir
from mcp_sampling_proxy.quotas.tool_pins import PINS_FILE, ToolPins
from mcp_sampling_proxy.relay.core import Relay, peek_id
from mcp_sampling_proxy.relay.ports import Ports
from mcp_sampling_proxy.relay.session import Session
from mcp_sampling_proxy.services.elicitation.service import ElicitationService
from mcp_sampling_proxy.services.input_required import InputResolver
from mcp_sampling_proxy.services.network import NetworkGate
from mcp_sampling_proxy.services.sampling.adapters import AdapterPool
from mcp_sampling_proxy.services.sampling.service import SamplingService
from mcp_sampling_proxy.services.tools import ToolGate
from mcp_sampling_proxy.system.event_loop import has_uvloop
from mcp_sampling_proxy.system.hardening import end_strays, reap_orphans_forever
from mcp_sampling_proxy.system.stop_signals import STOP_SIGNALS, absorb_one, take_held
from mcp_sampling_proxy.system.terminal import Terminal
from mcp_sampling_proxy.transport.egress import serve_egress
from mcp_sampling_proxy.transport.framing import DEFAULT_MAX_LINE, LineReader, open_line_reader, open_line_writer
from mcp_sampling_proxy.transport.stdio import egress_listener, exit_status_for, guard_pid

log = get_logger("mcp_sampling_proxy")


class RunOptions(Struct, frozen=True):
    name: str | None = None
    use_terminal: bool = True
    max_message_bytes: int = DEFAULT_MAX_LINE
    target: str = ""  # the server's command line or URL: with `name`, whose tool pins these are
    another: Callable[[], Upstream] | None = None  # starts a second connection to the server (ModernLeg)


class Upstream(Protocol):
    """The server's side: a child process (transport/stdio.py) or a Streamable HTTP URL (transport/http.py)."""

    label: str

    @property
    def reader(self) -> Any: ...  # its line reader, for back-pressure (None: none to pause)

    @property
    def writer(self) -> Any: ...  # its line writer, for back-pressure (None: none)

    async def attach(self, on_line: Any, on_eof: Any, *, max_line: int = ..., on_oversize: Any = None) -> None: ...
    def send(self, line: bytes) -> None: ...
    async def wait(self, timeout: float) -> int | None: ...
    async def stop(self, grace: float, term_wait: float = ...) -> int | None: ...
    def describe_end(self, code: int | None) -> str: ...


class Services(Struct, frozen=True):
    """What answers the server for one session, wired: the relay's ports, and the approver and limiters
    that the sandbox's network gate and the session's end use too."""

    ports: Ports
    approver: Approver
    limiters: Limiters


def build_services(
    settings: Settings,
    adapters: AdapterPool,
    audit: AuditLog,
    terminal: Terminal | None,
    console: ConsoleServer,
    offered: capabilities.Offers,
    approvals_store: Any = None,
    tool_pins: Any = None,
    server_target: str = "",
    limits: Limiters | None = None,
) -> Services:
    """The services behind the relay's ports, wired as the proxy runs them (tests run the same wiring).
    `tool_pins`: the pins store (quotas/tool_pins.py; None: no pinning); `server_target`: the server's
    command line or URL, which with its name says whose pins they are; `limits`: the process's limiters
    when it runs more than this session (`serve`), which this one's share."""
    approver = Approver(
        build_channels(settings.approval.channels, ChannelNeeds(terminal, console, settings.approval.webhook)),
        timeout=settings.approval.timeout,
        memory=ApprovalMemory(store=approvals_store),
        quorum=settings.approval.quorum,
    )
    max_in_hand = 2 * (settings.sampling.max_concurrent + settings.sampling.max_queued)
    if limits is not None:
        limiters = limits.sharing(max_in_hand)
    else:
        limiters = Limiters(shared=shared_state(settings.state), max_in_hand=max_in_hand)
    sampling = SamplingService(settings, adapters, approver, audit, limiters)
    elicitation = ElicitationService(
        settings, ElicitationConsoles(settings.approval.channels, terminal, console), audit, limiters
    )
    tools = ToolGate(settings.tools, approver, audit, tool_pins, server_target)
    routes = {"sampling": settings.sampling.route, "elicitation": settings.elicitation.route}

    def rewrite_host_request(message: JsonRpcRequest, _session: Session) -> bool:
        return capabilities.rewrite_request(message, offered, routes)

    ports = Ports(
        answers={SAMPLING_CREATE: sampling.answer, ELICITATION_CREATE: elicitation.answer},
        rewrite_host_request=rewrite_host_request,
        inputs=InputResolver(sampling, elicitation, settings.max_input_rounds),
        tools=tools,
        notifications={ELICITATION_COMPLETE: elicitation.forward_notification},
    )
    return Services(ports, approver, limiters)


def start_egress(
    tg: anyio.abc.TaskGroup,
    upstream: object,
    settings: Settings,
    name: str,
    services: Services,
    audit: AuditLog,
    relay: Relay | None,
) -> None:
    """The sandboxed server's way out (transport/egress.py), judged by its network grant (services/network.py),
    when its sandbox made one. Without a relay (a server `serve` shares between sessions) nobody can be
    asked: a host its grant does not list is refused."""
    process = getattr(upstream, "process", None)
    listener = egress_listener(process) if process is not None else None
    if listener is None:
        return
    session = relay.session if relay is not None else Session(name_override=name)
    notes = getattr(upstream, "notes", None)
    gate = NetworkGate(settings.sandbox.for_server(name), services.approver, audit, session, notes)
    gate.relay = relay
    tg.start_soon(serve_egress, listener, gate.judge, gate.refused)


class ModernLeg:
    """A second connection to the server, in the 2026 era, opened at a relay's first need (relay/core.py's
    `SecondLeg`): another process of the same command under the same sandbox, or sessionless requests
    to the same URL. It lives as long as the session."""

    def __init__(
        self,
        start: Callable[[], Upstream],
        tg: anyio.abc.TaskGroup,
        settings: Settings,
        name: str,
        services: Services,
        audit: AuditLog,
        relay: Relay,
        max_line: int,
        children: set[int],
    ):
        self._start, self._tg, self._settings, self._name = start, tg, settings, name
        self._services, self._audit, self._relay, self._max_line = services, audit, relay, max_line
        self._children = children  # the processes the orphan reaper leaves alone: this one's join them
        self.upstream: Upstream | None = None

    async def open(
        self, on_line: Callable[[bytes], None], on_end: Callable[[], None]
    ) -> Callable[[bytes], None] | None:
        try:
            upstream = self._start()
        except Exception as exc:  # it could not start (its error says why): the call gets the server's refusal
            log.warning("could not open a 2026-07-28 connection to the server", error=str(exc))
            return None
        self._children.update(own_children(upstream))
        await upstream.attach(on_line, on_end, max_line=self._max_line)
        start_egress(self._tg, upstream, self._settings, self._name, self._services, self._audit, self._relay)
        self.upstream = upstream
        log.info("opened a second connection to the server, in the 2026-07-28 era", server=upstream.label)
        return upstream.send

    async def close(self, grace: float) -> None:
        """Stop the second process. What it left behind is its front's to end, with every process the
        front still runs spared (a `serve` runs other sessions' servers beside it)."""
        if self.upstream is not None:
            await self.upstream.stop(grace)
            self._children.difference_update(own_children(self.upstream))


async def open_relay(
    tg: anyio.abc.TaskGroup,
    to_host: Callable[[bytes], None],
    upstream: Upstream,
    services: Services,
    settings: Settings,
    session: Session,
    audit: AuditLog,
    name: str,
    max_line: int,
    *,
    another: Callable[[], Upstream] | None,
    children: set[int],
    on_upstream_end: Callable[[], None],
    keepalive_seconds: float | None = None,
) -> tuple[Relay, ModernLeg | None]:
    """A session's relay between its host (`to_host`) and its server, as every front builds it: the
    services' ports, the server's 2026 second leg when `another` can start one, the server's lines
    read into the relay, and a sandboxed server's way out. `keepalive_seconds`: the policy's unless
    given (0: a caller answered in JSON has no stream to keep alive)."""
    relay = Relay(
        to_host,
        upstream.send,
        services.ports,
        tg,
        session,
        keepalive_seconds=settings.sampling.keepalive_seconds if keepalive_seconds is None else keepalive_seconds,
        era=settings.era,
    )
    modern = None
    if another is not None:
        modern = relay.second_leg = ModernLeg(another, tg, settings, name, services, audit, relay, max_line, children)
    await upstream.attach(
        relay.from_upstream,
        on_upstream_end,
        max_line=max_line,
        on_oversize=lambda size, head, tail: relay.upstream_oversize(size, head, tail, max_line),
    )
    start_egress(tg, upstream, settings, name, services, audit, relay)
    return relay, modern


UPSTREAM = "upstream"  # why a session ended when its server ended on its own


class Caller(Struct, kw_only=True):
    """One host's session with one server, as every front keeps it: the server, the relay once built, why
    the session ended (the first reason wins), and the server's exit status once it is stopped."""

    upstream: Upstream
    session: Session
    client: str | None = None
    relay: Relay | None = None
    exit_status: int | None = None
    reason: list[str] = field(default_factory=list)
    ended: anyio.Event = field(default_factory=anyio.Event)

    def end(self, reason: str) -> None:
        if not self.reason:
            self.reason.append(reason)
        self.ended.set()

    @property
    def why(self) -> str:
        return self.reason[0] if self.reason else ""


async def _nothing(*_args: Any) -> None:
    return None


class Life(Struct, frozen=True):
    """What a front does at each point of a session's life (`live`): the stdio proxy for its one host,
    `serve` for each client session and 2026-07-28 lane."""

    to_host: Callable[[bytes], None]
    opened: Callable[[Relay, anyio.abc.TaskGroup], Awaitable[None]]  # the host side wired to the relay
    stop: Callable[[str], Awaitable[int | None]]  # the server stopped, given why the session ended; its exit
    leg_grace: Callable[[str], float]  # seconds the server's second process gets, given why
    # before the relay cancels what is open, when the session ends for another reason than its server's end
    settle: Callable[[Relay, str], Awaitable[None]] = _nothing
    # the host side's last words: (the server's exit status, how it ended), or (None, None) for another end
    closing: Callable[[int | None, str | None], Awaitable[None]] = _nothing
    forget: Callable[[], Awaitable[None]] = _nothing  # the front's tables, before the server is stopped


async def live(
    caller: Caller,
    life: Life,
    services: Services,
    settings: Settings,
    audit: AuditLog,
    name: str,
    max_line: int,
    *,
    another: Callable[[], Upstream] | None,
    children: set[int],
    keepalive_seconds: float | None = None,
    idle: anyio.CancelScope | None = None,
    idle_reason: str = "",
) -> int | None:
    """One session's life, for every front alike. Its relay is built (`open_relay`) and `life.opened`
    wires the host side. When the session ends, the relay is told: its server's own end (every open host
    request learns how), or, after `life.settle`, another end (every open request cancelled); then
    `life.closing`. Whatever happened (a failure is raised on to the front), `life.forget`, and the server
    and its second process are stopped and their pids forgotten. `idle`: cancelled once the session idled
    out (`idle_reason` then says so). Returns the server's exit status."""
    modern: ModernLeg | None = None
    try:
        with idle or anyio.CancelScope() as watched:
            async with anyio.create_task_group() as tg:
                relay, modern = await open_relay(
                    tg,
                    life.to_host,
                    caller.upstream,
                    services,
                    settings,
                    caller.session,
                    audit,
                    name,
                    max_line,
                    another=another,
                    children=children,
                    on_upstream_end=lambda: caller.end(UPSTREAM),
                    keepalive_seconds=keepalive_seconds,
                )
                caller.relay = relay
                await life.opened(relay, tg)
                await caller.ended.wait()
                exit_status, description = None, None
                if caller.why == UPSTREAM:
                    exit_status, description = await upstream_ended(relay, caller.upstream)
                else:
                    await life.settle(relay, caller.why)
                    relay.cancel_all()
                await life.closing(exit_status, description)
                tg.cancel_scope.cancel()
        if watched.cancelled_caught:
            caller.end(idle_reason)
    except Exception as exc:
        caller.end(f"failed: {exc}")
        raise
    finally:
        with anyio.CancelScope(shield=True):
            caller.end("stopped")  # (when nothing else ended it: cancelled from outside)
            await life.forget()
            if caller.relay is not None:
                caller.relay.cancel_all()
            caller.exit_status = await life.stop(caller.why)
            children.difference_update(own_children(caller.upstream))
            if modern is not None:
                await modern.close(life.leg_grace(caller.why))
    return caller.exit_status


async def upstream_ended(relay: Relay, upstream: Upstream) -> tuple[int | None, str]:
    """The server ended on its own: its exit status and how it ended, every open host request told so."""
    code = await upstream.wait(2.0)
    description = upstream.describe_end(code)
    relay.upstream_gone(description)
    return code, description


def claim_stdio() -> tuple[int, int]:
    """Keep private copies of the protocol fds and point 0/1 at /dev/null and stderr, so a
    stray print or a library reading stdin can never corrupt the wire."""
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return in_fd, out_fd


def build_adapters(settings: Settings, terminal: Terminal | None) -> AdapterPool:
    providers = list(settings.providers)
    if not providers and terminal is not None:
        providers = [ProviderConfig(name="console", type="console", models=(ModelSpec("console"),))]
        log.info("no LLM provider configured: sampling replies are typed at this terminal (console provider)")
    elif not providers:
        log.warning(
            "no LLM provider configured and no terminal: sampling requests will get an error",
            fix="set OPENAI_API_KEY or ANTHROPIC_API_KEY, or add llm.providers to the policy file",
        )
    for provider in providers:
        key_missing = provider.api_key_env and not provider_key(provider)
        log.info(
            "LLM provider",
            provider=provider.name,
            type=provider.type,
            base_url=provider.base_url,
            models=[m.name for m in provider.models],
            source=settings.source,
        )
        if key_missing:
            log.warning(
                f"{provider.api_key_env} is not set; provider '{provider.name}' will likely be refused",
                provider=provider.name,
            )
    return AdapterPool(providers, terminal)


async def run_session(upstream: Upstream, settings: Settings, options: RunOptions) -> int:
    in_fd, out_fd = claim_stdio()
    terminal = Terminal.open() if options.use_terminal else None
    adapters = build_adapters(settings, terminal)
    # once the host's start is over: a first sampling request finds it done
    call_off_warm_up = warm_up(adapters, delay=WARM_UP_DELAY)
    offered = capabilities.offers(
        capabilities.offered_sampling(
            route=settings.sampling.route, tools=settings.sampling.advertise_tools and adapters.can_use_tools
        ),
        capabilities.offered_elicitation(route=settings.elicitation.route, url_mode=settings.elicitation.url_mode),
    )
    audit = AuditLog.from_settings(settings)
    telemetry = _start_telemetry(settings, audit)
    session = Session(name_override=options.name)
    console = ConsoleServer(lambda: session.server_name, lambda: session.host_name)
    services = build_services(
        settings,
        adapters,
        audit,
        terminal,
        console,
        offered,
        approvals_store=_approvals_store(),
        tool_pins=_tool_pins(settings),
        server_target=options.target,
    )
    host_out = await open_line_writer(out_fd)

    caller = Caller(upstream=upstream, session=session)
    hurry = anyio.Event()  # asked again while stopping (an SDK host's SIGTERM after EOF): stop the server now

    asked: dict[str, float] = {}  # when each stop signal last came

    def on_signal(name: str) -> None:
        now = time.monotonic()
        if now - asked.get(name, -SAME_ASK_SECONDS) < SAME_ASK_SECONDS:
            return  # one ask, come twice: a proxy forked warm gets a `pkill -f` both directly and from its launch
        asked[name] = now
        if caller.reason:
            hurry.set()
        caller.end(name)

    # from the start of the session: a host that gives up while the proxy starts (its SIGTERM) gets the
    # same orderly stop as later, not the default action's sudden death
    loop = _asyncio_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, signal.Signals(sig).name)
    for name in take_held():  # those that came while the proxy started (system/stop_signals.py)
        on_signal(name)

    def oversize(size: int, head: bytes, tail: bytes) -> None:
        found, request_id = peek_id(head, tail)
        log.error(
            "host sent a message larger than the limit; dropped",
            size=size,
            limit=options.max_message_bytes,
            request_id=request_id,
        )
        host_out.write_line(
            jsonrpc.error_response(
                request_id if found else None,
                jsonrpc.INVALID_REQUEST,
                f"message of {size} bytes exceeds the proxy's limit of {options.max_message_bytes} bytes "
                "(--max-message-bytes)",
            )
        )

    readers: list[LineReader] = []

    async def opened(relay: Relay, _tg: anyio.abc.TaskGroup) -> None:
        host_reader = LineReader(
            relay.from_host, lambda: caller.end(HOST_EOF), max_line=options.max_message_bytes, on_oversize=oversize
        )
        readers.append(host_reader)
        await open_line_reader(in_fd, host_reader)
        _wire_backpressure(host_out, host_reader, upstream)
        host_out.closed.add_done_callback(lambda _: caller.end("host closed stdout"))

    async def settle(relay: Relay, reason: str) -> None:
        log.info("shutting down", reason=reason)
        call_off_warm_up()
        readers[0].pause()
        if reason == HOST_EOF:
            await _let_answers_come(relay, settings.shutdown_timeout, hurry)

    async def closing(code: int | None, description: str | None) -> None:
        if description is not None:
            log.error(f"upstream server {description}", exit_code=code)

    async def stop(why: str) -> int | None:
        if why == UPSTREAM:
            return await upstream.stop(0)
        if why not in ENDS_ASKED:  # a failure: the server must not outlive it
            return await upstream.stop(1.0)
        code = await _stop_upstream(upstream, settings.shutdown_timeout, hurry)
        log.info("upstream stopped", exit_code=code)
        return code

    def leg_grace(why: str) -> float:
        return settings.shutdown_timeout if why in ENDS_ASKED else 0.0 if why == UPSTREAM else 1.0

    life = Life(host_out.write_line, opened, stop, leg_grace, settle=settle, closing=closing)
    exit_code = 0
    children = own_children(upstream)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(console.serve)
            tg.start_soon(reap_orphans_forever, children)
            code = await live(
                caller,
                life,
                services,
                settings,
                audit,
                options.name or session.server_name,
                options.max_message_bytes,
                another=options.another,
                children=children,
            )
            if caller.why == UPSTREAM:
                exit_code = exit_status_for(code)
            await _end_strays(upstream)
            with anyio.move_on_after(2.0):
                await host_out.close()
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            absorb_one()  # what is left (closing the audit log, the clients) must not die of a late second ask
            tg.cancel_scope.cancel()
    except BaseException:
        # A bug must not leave the server running (one that ignores EOF would outlive us): `live` stopped it
        # (and its second process); what it left behind goes too.
        log.exception("proxy failed; stopping the upstream server")
        with anyio.CancelScope(shield=True):
            await upstream.stop(1.0)
            await _end_strays(upstream)
        raise
    call_off_warm_up()
    await adapters.aclose()
    await services.limiters.aclose()
    audit.close()
    if telemetry is not None:
        await anyio.to_thread.run_sync(telemetry.shutdown)
    if terminal is not None:
        terminal.close()
    return exit_code


HOST_EOF = "host closed stdin"
# the ends a host or the user asks for: the server gets its graceful stop (a failure's is a second; its own end, none)
ENDS_ASKED = frozenset({HOST_EOF, "host closed stdout", *(signal.Signals(sig).name for sig in STOP_SIGNALS)})
HURRIED_TERM_WAIT = 0.5  # s a server gets after SIGTERM once the host asked twice (SDK hosts SIGKILL at 2 s)
SAME_ASK_SECONDS = 0.2  # s within which the same stop signal again is the same ask, not a second one


async def _let_answers_come(relay: Relay, grace: float, hurry: anyio.Event) -> None:
    """After the host's EOF, give the requests it sent first up to `grace` to be answered before the
    server gets its EOF, as the server would have had directly; the host asking again ends the wait."""
    with anyio.move_on_after(grace):
        async with anyio.create_task_group() as tg:

            async def hurried() -> None:
                await hurry.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(hurried)
            await relay.answered()
            tg.cancel_scope.cancel()


async def _stop_upstream(upstream: Upstream, grace: float, hurry: anyio.Event) -> int | None:
    """Stop the server gracefully (EOF, `grace`, SIGTERM, SIGKILL), unless the host asks again meanwhile:
    SDK hosts close stdin, wait 2 s, then SIGTERM and 2 s later SIGKILL the proxy. Asked again, the proxy
    stops waiting and ends the server now, so it exits (and says so) before the host kills it."""
    stopped: list[int | None] = []
    async with anyio.create_task_group() as tg:

        async def graceful() -> None:
            stopped.append(await upstream.stop(grace))
            tg.cancel_scope.cancel()

        async def hurried() -> None:
            await hurry.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(graceful)
        tg.start_soon(hurried)
    if stopped:
        return stopped[0]
    log.info("asked again to stop: ending the upstream server now")
    return await upstream.stop(0, term_wait=HURRIED_TERM_WAIT)


def _start_telemetry(settings: Settings, audit: AuditLog) -> Any:
    """OpenTelemetry export of every audit record, when the policy or OTEL_* variables ask for it."""
    if not settings.telemetry.configured and not any(k.startswith("OTEL_EXPORTER_OTLP") for k in os.environ):
        return None  # the common case: nothing to import
    from mcp_sampling_proxy.telemetry import start_telemetry  # start-up: only with telemetry on (OpenTelemetry)

    telemetry = start_telemetry(settings.telemetry, os.environ, __version__)
    if telemetry is not None:
        audit.add_observer(telemetry.observe)
    return telemetry


WARM_UP_SWITCH_INTERVAL = 0.0005  # s; while the warm-up imports, the relay waits at most this for the GIL
WARM_UP_DELAY = 2.0  # s after a stdio proxy's start: past a host's start of its servers, and its first calls


def warm_up(adapters: AdapterPool, *, delay: float = 0.0) -> Callable[[], None]:
    """Make the HTTP providers' adapters (importing aiohttp, whose import loads the system's CA store
    twice, and for an HTTPS provider certifi's: ~150-200 ms of CPU, which the first sampling request
    otherwise waits for) off the main thread, `delay` seconds from now. A stdio proxy waits
    WARM_UP_DELAY: a host starts its servers together, and at once asks each for its tools, so that
    every proxy's warm-up at start (five proxies: 0.75 s of CPU on the host's cores) delayed every
    server's answers (five servers of 30 ms on 2 cores, to their tools/list: +110-140 ms, bench/
    host_start.py); most sessions never sample, and a user's first request comes later. (Run during
    calls, it held the interpreter while they waited: the host's first 500 calls had a p99 of 11 ms
    instead of 1.5 ms; the calls that overlap it now wait at most the lowered switch interval.) Nothing
    else is warmed: requests are checked without pydantic (protocol/wire_checks.py), and a proxy without
    an HTTP provider never loads aiohttp (~4 MB). Returns what calls it off, for a session that ends
    first (a host's start that went no further makes no client)."""
    names = [p.name for p in adapters.configs if p.kind.http]
    called_off = threading.Event()
    if not names:
        return called_off.set

    def work() -> None:
        if called_off.wait(delay):
            return
        switch = sys.getswitchinterval()
        sys.setswitchinterval(WARM_UP_SWITCH_INTERVAL)
        try:
            for name in names:
                adapters.get(name)
        except Exception:  # pragma: no cover - the first request makes it again and reports the problem
            pass
        finally:
            sys.setswitchinterval(switch)

    threading.Thread(target=work, name="warm-up", daemon=True).start()
    return called_off.set


def _approvals_store() -> StateFile[Approvals] | None:
    """`always` approvals, shared by the user's proxies (None when the state dir is unusable)."""
    try:
        return approvals_file(state_dir() / "approvals.json")
    except OSError as exc:
        log.warning("cannot use the state directory; 'always' approvals last for this session only", error=str(exc))
        return None


def _tool_pins(settings: Settings) -> Any:
    """The tool pins (`tools.json` beside the approvals), or None when pinning is off or impossible."""
    if not settings.tools.pin:
        return None
    try:
        return ToolPins(state_dir() / PINS_FILE)
    except OSError as exc:
        log.warning("cannot use the state directory; tools are not pinned", error=str(exc))
        return None


async def _end_strays(upstream: Upstream) -> None:
    """What the server started and left outside its process group ends with the proxy too."""
    ended = await end_strays(own_children(upstream))
    if ended:
        log.info("ended processes the server left behind (outside its process group)", count=ended)


def own_children(upstream: object) -> set[int]:
    """Children the orphan reaper must leave alone: the upstream is waited for by its Popen, and its
    group guard by `GroupGuard.stand_down` (which kills it by pid: a pid reaped here could be reused)."""
    process = getattr(upstream, "process", None)
    if process is None:
        return set()
    guard = guard_pid(process)
    return {process.pid} if guard is None else {process.pid, guard}


def _wire_backpressure(host_out: Any, host_reader: LineReader, upstream: Upstream) -> None:
    """A slow reader on one side pauses the source on the other, instead of buffering forever."""
    if upstream.reader is not None:
        host_out.on_pause = upstream.reader.pause
        host_out.on_resume = upstream.reader.resume
    if upstream.writer is not None:
        upstream.writer.on_pause = host_reader.pause
        upstream.writer.on_resume = host_reader.resume


def _asyncio_loop() -> Any:
    return asyncio.get_running_loop()


def run(upstream: Upstream, settings: Settings, options: RunOptions) -> int:
    try:
        return anyio.run(
            run_session, upstream, settings, options, backend="asyncio", backend_options={"use_uvloop": has_uvloop()}
        )
    except KeyboardInterrupt:  # pragma: no cover - signals are handled inside
        return 130
    finally:
        absorb_one()  # (a session that failed: the loop's close took its handlers)
        sys.stderr.flush()
