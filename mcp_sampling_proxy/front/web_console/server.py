"""`console --web` running: what the page reads besides the proxies, and one event loop for all of it.

The console client (the proxies' sockets), the audit log's follower and the page's server (uvicorn, as
`serve` runs it: front/http_server.py) are tasks of one event loop; nothing waits in a thread of its own
but a blocking read (budgets, the audit file) or the browser being opened. SIGINT and SIGTERM stop the
server, which ends the event streams; then the other tasks are cancelled, the proxies see their console
go, and `run()` returns.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import threading
import webbrowser
from collections.abc import Callable, Mapping

import anyio
import h11
from msgspec import Struct, field
from uvicorn.protocols.http.h11_impl import H11Protocol

from mcp_sampling_proxy.config.settings import Settings, resolve_state
from mcp_sampling_proxy.front.http_server import (
    Server,
    head_deadline,
    listening_socket,
    server_config,
    survive_signal_replay,
)
from mcp_sampling_proxy.front.web_console import views
from mcp_sampling_proxy.front.web_console.app import MAX_BODY, WebConsole, response_headers
from mcp_sampling_proxy.front.web_console.state import Budgets, WebState, follow_audit
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.quotas import redis_store
from mcp_sampling_proxy.quotas.limiters import BUDGETS_FILE
from mcp_sampling_proxy.quotas.refusals import USD
from mcp_sampling_proxy.quotas.state import state_dir
from mcp_sampling_proxy.system.event_loop import has_uvloop

HOST = "127.0.0.1"  # the page is for this machine only


class PageSources(Struct):
    """What the page shows besides the proxies: the policy's limits, the budgets, the audit log."""

    state: WebState
    warnings: list[str] = field(default_factory=list)  # what cannot be shown, and why


def page_sources(settings: Settings | None, audit: str | None, environ: Mapping[str, str] = os.environ) -> PageSources:
    """The page's state for a policy (None: none found) and an audit log (None: the policy's)."""
    budgets_file = state_dir() / BUDGETS_FILE
    read_budgets: Callable[[], Budgets] = functools.partial(views.read_budgets, budgets_file)
    read_spend: Callable[[], Budgets] = functools.partial(views.read_budgets, budgets_file, unit=USD)
    facts = views.PolicyFacts()
    warnings = []
    if settings is not None:
        facts = views.policy_facts(settings)
        audit = audit or settings.audit_path
        try:
            shared = resolve_state(settings.state, environ)
        except PolicyError as exc:  # e.g. url_env is the proxies' variable, not set in this shell
            warnings.append(f"the shared budgets cannot be shown: {exc}")
            shared = None
        if shared is not None and shared.backend == "redis" and shared.url:  # what every proxy shares on Redis
            read_budgets = functools.partial(redis_store.read_budgets, shared.url, shared.prefix)
            read_spend = functools.partial(redis_store.read_budgets, shared.url, shared.prefix, unit=USD)
    return PageSources(WebState(facts, read_budgets, audit, read_spend), warnings)


def listen(port: int) -> socket.socket:
    """The page's socket on 127.0.0.1:`port` (0: a free one), listening; OSError when it cannot be had."""
    return listening_socket(HOST, port)


def page_server(web: WebConsole) -> Server:
    """uvicorn serving the page as `serve` serves its endpoint, with a deadline for each request's head
    (a connection that sends nothing is closed after `web.socket_timeout`); its stop ends the event streams."""
    config = server_config(
        web,
        host=HOST,
        port=web.port,
        http=_protocol(web.socket_timeout),
        server_header=False,  # the app names itself
        log_level="error",  # a peer's malformed request is not news on the console's stderr; a failure is
    )
    return Server(config, web.stop)


def _protocol(head_timeout: float) -> type[H11Protocol]:
    """HTTP/1.1 with a deadline for each request's head, and a Content-Length that is not a number
    refused as a body the console does not take (413, in the app's words), not as uvicorn's bare 400."""

    class Protocol(head_deadline(head_timeout)):  # type: ignore[misc]
        def send_400_response(self, msg: str) -> None:
            problem = sys.exception()  # (called while uvicorn handles h11's error)
            if not (isinstance(problem, h11.RemoteProtocolError) and "Content-Length" in str(problem)):
                super().send_400_response(msg)
                return
            body = json.dumps({"error": f"the body must be 1 to {MAX_BODY} bytes"}).encode()
            headers = [*response_headers("application/json", len(body)), (b"connection", b"close")]
            response = h11.Response(status_code=413, headers=headers, reason=b"Content Too Large")
            for event in (response, h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return Protocol


def run(web: WebConsole, listener: socket.socket, *, open_browser: bool) -> None:
    """Serve the page and talk to the proxies until SIGINT or SIGTERM."""
    anyio.run(_serve, web, listener, open_browser, backend="asyncio", backend_options={"use_uvloop": has_uvloop()})


async def _serve(web: WebConsole, listener: socket.socket, open_browser: bool) -> None:
    server = page_server(web)
    survive_signal_replay(server)
    async with anyio.create_task_group() as tg:
        tg.start_soon(web.client.run)
        if web.state.audit_path:
            tg.start_soon(follow_audit, web.state, web.state.audit_path)
        if open_browser:  # (a browser's start can take seconds, and nothing waits for it)
            threading.Thread(target=webbrowser.open, args=(web.url,), daemon=True).start()
        await server.serve(sockets=[listener])
        tg.cancel_scope.cancel()
