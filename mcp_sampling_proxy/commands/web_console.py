"""`mcp-sampling-proxy console --web`: the companion console as a page on 127.0.0.1.

The proxies are reached exactly as the terminal console reaches them (`ConsoleClient`: the same
sockets, peer checks and validated messages); this module only serves what they say to a browser
and carries the human's answers back. The standard library's threaded `http.server` is enough for
one user on loopback and adds no dependency; the event loop that talks to the proxies runs in the
main thread, and request threads reach it through an anyio `BlockingPortal`.

Who may use the page: whoever holds the URL. The server listens on 127.0.0.1 only, every request
(the page, its script, the event stream, the API) must carry the random token in its path
(compared in constant time), the Host header must be 127.0.0.1:PORT or localhost:PORT (a DNS
rebinding page has its own host name there), an Origin header, when sent, must be this server's,
nothing changes state on GET, and POSTs must be `application/json` (a cross-site form cannot send
that without a CORS preflight, which this server never grants). Responses carry a strict
Content-Security-Policy: scripts and styles from this origin only, images only as data: URLs.
"""

from __future__ import annotations

import functools
import hmac
import json
import os
import secrets
import sys
import threading
import time
import webbrowser
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.from_thread

from mcp_sampling_proxy.approval import edits
from mcp_sampling_proxy.approval.channels import person_of
from mcp_sampling_proxy.approval.console.client import (
    ConsoleClient,
    Event,
    decision_reply,
    elicit_reply,
    review_reply,
)
from mcp_sampling_proxy.approval.forms import FormError, parse_form, validate_content
from mcp_sampling_proxy.approval.url_safety import analyze_url
from mcp_sampling_proxy.audit.follow import Follower
from mcp_sampling_proxy.audit.log_lines import InputError
from mcp_sampling_proxy.audit.notes import governance_notes
from mcp_sampling_proxy.audit.records import is_decision, parse_object
from mcp_sampling_proxy.audit.shown import format_record
from mcp_sampling_proxy.audit.summary import parse_since, parse_ts, summarize
from mcp_sampling_proxy.commands import web_view
from mcp_sampling_proxy.config.dirs import home_relative
from mcp_sampling_proxy.config.paths import policy_or_default
from mcp_sampling_proxy.config.settings import load_settings, resolve_state
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.quotas import redis_store
from mcp_sampling_proxy.quotas.limiters import BUDGETS_FILE
from mcp_sampling_proxy.quotas.refusals import USD
from mcp_sampling_proxy.quotas.state import state_dir
from mcp_sampling_proxy.services.elicitation import open_url
from mcp_sampling_proxy.system.listening import listen_failure
from mcp_sampling_proxy.text.sanitize import one_line

log = get_logger("mcp_sampling_proxy.web_console")

STATIC = {
    "": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "style.css": ("style.css", "text/css; charset=utf-8"),
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
MAX_BODY = 4 * 1024 * 1024
KEEP_RECORDS = 20_000
EVENT_INTERVAL = 0.1  # s; the least time between two events to one page
SOCKET_TIMEOUT = 60.0  # s; longer than the event stream's 15 s keep-alive
SCOPES = ("once", "session", "always")
MAX_NAME = 64  # characters of the name a person gives on the page


class WebState:
    """What the page shows, shared between the event loop (proxies) and the request threads."""

    def __init__(
        self,
        facts: web_view.PolicyFacts,
        read_budgets: Callable[[], dict[str, dict[str, Any]]],
        audit_path: str | None,
        read_spend: Callable[[], dict[str, dict[str, Any]]] | None = None,
    ):
        self.facts = facts
        self.read_budgets = read_budgets  # the local budgets file, or the shared ones on Redis
        self.read_spend = read_spend or dict  # the usd budgets, likewise (micro-dollars)
        self.audit_path = audit_path
        self.changed = threading.Condition()
        self.version = 0
        self.proxies: dict[str, dict[str, Any]] = {}
        self.questions: dict[str, tuple[Path, dict[str, Any]]] = {}
        self.notices: deque[str] = deque(maxlen=20)
        self.records: deque[dict[str, Any]] = deque(maxlen=KEEP_RECORDS)
        self.audit_count = 0
        self.audit_error: str | None = None
        self._snapshot: tuple[int, dict[str, Any]] | None = None  # (version, what snapshot() made for it)
        self._snapshotting = threading.Lock()

    def _bump(self) -> None:
        self.version += 1
        self.changed.notify_all()

    def on_event(self, event: Event) -> None:
        with self.changed:
            pid = event.path.stem
            if event.kind == "attached":
                self.proxies[pid] = {
                    "pid": pid,
                    "server": one_line(str(event.message.get("server") or ""), 120),
                    "host": one_line(str(event.message.get("host") or ""), 120),
                }
            elif event.kind == "question":
                self.questions[f"{pid}:{event.message['id']}"] = (event.path, event.message)
            elif event.kind == "resolved":
                self.questions.pop(f"{pid}:{event.message['id']}", None)
            elif event.kind == "detached":
                self.proxies.pop(pid, None)
                for key in [k for k, (path, _) in self.questions.items() if path == event.path]:
                    del self.questions[key]
            elif event.kind == "refused":
                self.notices.append(f"ignoring {one_line(str(event.path))}: {event.why}")
            self._bump()

    def take(self, key: str) -> tuple[Path, dict[str, Any]] | None:
        with self.changed:
            found = self.questions.pop(key, None)
            if found is not None:
                self._bump()
            return found

    def snapshot(self) -> dict[str, Any]:
        """What the page shows now; made once per state version, whatever the number of pages
        (a flooding server changes the state often: each change costs one snapshot, not one per page)."""
        with self._snapshotting:
            with self.changed:
                version = self.version
            cached = self._snapshot
            if cached is not None and cached[0] == version:
                return cached[1]
            budgets = self.read_budgets()
            spend = self.read_spend() if self.facts.usd_budgets else {}
            with self.changed:
                questions = list(self.questions.items())
                proxies = sorted(self.proxies.values(), key=lambda p: p["pid"])
                notices = list(self.notices)
                version = self.version
                audit = {"path": self.audit_path, "error": self.audit_error}
            made = {
                "version": version,
                "proxies": proxies,
                "notices": notices,
                "questions": [
                    web_view.question_view(
                        key,
                        path.stem,
                        message,
                        web_view.request_limits(message, self.facts, budgets, spend)
                        if message["type"] == "pending"
                        else {},
                    )
                    for key, (path, message) in questions
                ],
                "audit": audit,
            }
            self._snapshot = (version, made)
            return made

    def add_records(self, records: list[dict[str, Any]], error: str | None) -> None:
        """New audit records are a count for the pages (they fetch the lines they show); only a
        change of the log's error changes the state."""
        with self.changed:
            self.records.extend(records)
            self.audit_count += len(records)
            if error != self.audit_error:
                self.audit_error = error
                self._bump()
            elif records:
                self.changed.notify_all()


def follow_audit(state: WebState, path: str, stop: threading.Event, poll: float = 0.5) -> None:
    """The audit log's last records, then every record appended (audit/follow.py: rotation,
    truncation, bounded memory whatever the file holds)."""
    follower = Follower(path, last=KEEP_RECORDS)
    try:
        while not stop.is_set():
            error = None
            records: list[dict[str, Any]] = []
            try:
                for line in follower.read():
                    if isinstance(line, bytes) and (record := parse_object(line)) is not None:
                        records.append(record)
            except FileNotFoundError:
                error = f"{path} does not exist yet (it appears with the first decision)"
            except OSError as exc:
                error = f"cannot read {path}: {exc.strerror or exc}"
            state.add_records(records, error)
            stop.wait(poll)
    finally:
        follower.close()


def audit_view(state: WebState, query: dict[str, list[str]]) -> dict[str, Any]:
    """The latest audit lines matching the page's filters (server, tool, decision, since)."""

    def arg(name: str) -> str:
        return (query.get(name) or [""])[0].strip()

    server, tool, decision, since_text = arg("server"), arg("tool"), arg("decision"), arg("since")
    count = min(int(arg("n")) if arg("n").isascii() and arg("n").isdigit() else 200, 2000)
    since = None
    if since_text:
        try:
            since = parse_since(since_text)
        except InputError as exc:
            return {"error": str(exc), "lines": []}
    with state.changed:
        records = list(state.records)
    lines = []
    for record in reversed(records):
        if not is_decision(record):
            continue
        if server and str(record.get("server") or "") != server:
            continue
        if tool and str(record.get("tool") or "") != tool:
            continue
        if decision and str(record.get("decision") or "") != decision:
            continue
        if since is not None and ((when := parse_ts(record.get("ts"))) is None or when < since):
            continue
        lines.append(
            {
                "line": format_record(record),
                "decision": one_line(str(record.get("decision") or ""), 20),
                # approved or allowed, then failed (the LLM refused the key, the host's answer was broken)
                "failed": bool(record.get("error")),
                "server": one_line(str(record.get("server") or ""), 120),
                "tool": one_line(str(record.get("tool") or ""), 120),
                "notes": governance_notes(record),
            }
        )
        if len(lines) >= count:
            break
    return {"lines": lines, "path": shown_path(state.audit_path), "error": state.audit_error}


def shown_path(path: str | None) -> str | None:
    """A file's path as the page shows it: under the home directory as `~/...`, as a person types it."""
    return None if path is None else home_relative(Path(path))


def usage_view(state: WebState, query: dict[str, list[str]]) -> dict[str, Any]:
    """Per-server requests and tokens from the audit log, and the budgets' windows against their limits."""
    since_text = (query.get("since") or [""])[0].strip()
    try:
        since = parse_since(since_text) if since_text else None
    except InputError as exc:
        return {"error": str(exc), "servers": [], "budgets": []}
    with state.changed:
        records = list(state.records)
    servers = [{"server": one_line(name, 120), **stats.as_dict()} for name, stats in summarize(records, since).items()]
    oldest = next((r.get("ts") for r in records if isinstance(r.get("ts"), str)), None)
    # The page says what the counts cover: the console keeps the last KEEP_RECORDS records, not the whole log
    covers = {"records": len(records), "since": one_line(oldest, 40) if oldest else None, "kept": KEEP_RECORDS}
    return {
        "servers": servers,
        "budgets": web_view.budget_rows(state.read_budgets(), state.facts)
        + web_view.budget_rows(state.read_spend(), state.facts, USD),
        "no_budgets": web_view.no_budgets_text(state.facts),
        "policy": shown_path(state.facts.source),
        "covers": covers,
    }


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class WebConsole:
    """The HTTP side: checks every request, serves the page and the API, sends answers to proxies."""

    def __init__(
        self,
        state: WebState,
        client: ConsoleClient,
        portal: anyio.from_thread.BlockingPortal,
        port: int = 0,
        token: str | None = None,
        socket_timeout: float = SOCKET_TIMEOUT,
    ):
        self.state = state
        self.client = client
        self.portal = portal
        self.token = token or secrets.token_urlsafe(32)
        self.socket_timeout = socket_timeout
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.token}/"

    def check(self, method: str, path: str, headers: Any) -> str:
        """The path below the token, when the request may be served; Refused otherwise."""
        host = headers.get("Host", "")
        if host not in (f"127.0.0.1:{self.port}", f"localhost:{self.port}"):
            raise Refused(421, "wrong Host header: open the page at the URL `console --web` printed")
        origin = headers.get("Origin")
        if origin is not None and origin not in (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}"):
            raise Refused(403, "requests from other sites are refused")
        if headers.get("Sec-Fetch-Site") not in (None, "same-origin", "none"):
            raise Refused(403, "requests from other sites are refused")
        parts = urlsplit(path).path.split("/", 2)  # "", TOKEN, rest
        given = parts[1] if len(parts) > 1 else ""
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise Refused(403, "this page needs the token in the URL that `mcp-sampling-proxy console --web` printed")
        if len(parts) < 3:
            raise Refused(404, "not found")
        if method == "POST":
            media = headers.get("Content-Type", "").split(";")[0].strip().lower()
            if media != "application/json":
                raise Refused(415, "POST needs Content-Type: application/json")
        return parts[2]

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """Apply a human's answer from the page to a pending question; Refused when it cannot be."""
        key = body.get("key")
        if not isinstance(key, str):
            raise Refused(400, "missing 'key'")
        with self.state.changed:
            found = self.state.questions.get(key)
        if found is None:
            raise Refused(409, "this request is no longer pending (answered elsewhere, withdrawn or timed out)")
        path, message = found
        reply = self._reply(message, body)  # checks the answer; no side effect yet
        # Claim the question once: of two answers racing (two tabs), only the first is sent.
        if self.client.is_resolved(path, message["id"]) or self.state.take(key) is None:
            raise Refused(409, "answered elsewhere or timed out meanwhile; your answer was not used")
        if message["type"] == "elicit" and message.get("mode") == "url" and reply.get("action") == "accept":
            open_url(message.get("url") or "")  # only for the answer that was used
        if not self.portal.call(self.client.send, path, reply):
            raise Refused(410, "the proxy is gone")
        return {"ok": True}

    def _reply(self, message: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        action = body.get("action")
        text = body.get("text")
        if text is not None and not isinstance(text, str):
            raise Refused(400, "'text' must be a string")
        if message["type"] == "pending":
            approver = self._approver(message, body.get("approver"), action)
            if action == "deny":
                return decision_reply(message, None, None, approver)
            scope = body.get("scope", "once")
            if action != "approve" or scope not in SCOPES:
                raise Refused(400, "answer a request with action approve (scope once, session or always) or deny")
            if text is not None and message.get("quorum"):
                raise Refused(400, "under a quorum every approver must see what runs: approve it unedited, or deny it")
            if text is not None:
                why = edits.prompt_not_editable(message.get("params") or {})
                if why is not None:
                    raise Refused(400, f"this prompt cannot be edited: {why}")
                scope = "once"  # an edited prompt is approved once, as on the terminal
            return decision_reply(message, scope, text, approver)
        if message["type"] == "review":
            if action not in ("send", "reject"):
                raise Refused(400, "answer a review with action send or reject")
            return review_reply(message, action == "send", text if action == "send" else None)
        return elicit_reply(message, self._elicitation(message, action, body.get("content")))

    @staticmethod
    def _approver(message: dict[str, Any], name: Any, action: Any) -> str | None:
        """The name the person gave on the page (kept per browser tab): a convenience that tells approvers
        apart under a quorum on a page only the URL's holder can open, not authentication."""
        if name is not None and (not isinstance(name, str) or len(name) > MAX_NAME):
            raise Refused(400, f"'approver' must be a name of at most {MAX_NAME} characters")
        given: str = one_line(name, MAX_NAME).strip() if isinstance(name, str) else ""
        quorum = message.get("quorum")
        if not isinstance(quorum, dict) or action != "approve":
            return given or None
        needed = quorum.get("needed")
        if not given:
            raise Refused(400, f"this request needs {needed} different approvers: enter your name at the top first")
        approved_by = quorum.get("approved_by")
        if isinstance(approved_by, list) and any(
            isinstance(who, str) and person_of(who) == person_of(f"console:{given}") for who in approved_by
        ):  # on this page or through another channel (a webhook approver of the same name)
            raise Refused(409, f"{given} approved this already; it needs an approval from someone else")
        return given

    @staticmethod
    def _elicitation(message: dict[str, Any], action: Any, content: Any) -> dict[str, Any]:
        if action in ("decline", "cancel"):
            return {"action": action}
        if message["mode"] == "url":
            if action != "open":
                raise Refused(400, "answer a link with action open, decline or cancel")
            url = message.get("url") or ""
            if not analyze_url(url).ok:
                raise Refused(400, "this URL is not safe to open; decline it")
            return {"action": "accept"}  # opened by `answer` once the question is claimed
        if action != "accept":
            raise Refused(400, "answer a form with action accept (with content), decline or cancel")
        try:
            form = parse_form(message.get("schema") or {})
        except FormError as exc:
            raise Refused(400, f"this form cannot be answered: {exc}; decline it") from None
        if not isinstance(content, dict):
            raise Refused(400, "'content' must be an object")
        content = {k: v for k, v in content.items() if v is not None}
        problems = validate_content(form, content)
        if problems:
            raise Refused(422, "; ".join(problems))
        return {"action": "accept", "content": content}

    def events(self) -> Iterator[bytes]:
        """The event stream: a state event now and whenever something changes, keep-alives between."""
        seen = -1
        audit = -1
        while True:
            with self.state.changed:
                if (self.state.version, self.state.audit_count) == (seen, audit):
                    self.state.changed.wait(15.0)
                version, count = self.state.version, self.state.audit_count
            if (version, count) == (seen, audit):
                yield b": keep-alive\n\n"
                continue
            if version != seen:
                seen = version
                yield b"event: state\ndata: " + json.dumps(self.state.snapshot()).encode() + b"\n\n"
            if count != audit:
                audit = count
                yield b"event: audit\ndata: " + json.dumps({"count": count}).encode() + b"\n\n"
            time.sleep(EVENT_INTERVAL)  # a burst of changes becomes one event per interval, not one per change


def _handler(console: WebConsole) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "mcp-sampling-proxy"
        sys_version = ""
        # A peer that connects and sends nothing (or stops reading the event stream) gives its
        # thread back after this long, instead of holding it for ever
        timeout = console.socket_timeout

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the request line holds the URL's token: never logged

        def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in {**_SECURITY_HEADERS, **(extra or {})}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, value: Any) -> None:
            self._send(status, json.dumps(value).encode(), "application/json")

        def _refuse(self, exc: Refused) -> None:
            self._json(exc.status, {"error": str(exc)})

        def do_GET(self) -> None:
            try:
                rest = console.check("GET", self.path, self.headers)
            except Refused as exc:
                return self._refuse(exc)
            route, query = rest, parse_qs(urlsplit(self.path).query)
            if route in STATIC:
                name, content_type = STATIC[route]
                body = resources.files("mcp_sampling_proxy.commands").joinpath("web", name).read_bytes()
                return self._send(200, body, content_type)
            if route == "api/state":
                return self._json(200, console.state.snapshot())
            if route == "api/audit":
                return self._json(200, audit_view(console.state, query))
            if route == "api/usage":
                return self._json(200, usage_view(console.state, query))
            if route == "api/events":
                return self._stream()
            return self._json(404, {"error": "not found"})

        def _stream(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            for name, value in _SECURITY_HEADERS.items():
                self.send_header(name, value)
            self.end_headers()
            try:
                for chunk in console.events():
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:  # the page went away
                return

        def do_POST(self) -> None:
            try:
                rest = console.check("POST", self.path, self.headers)
                if rest != "api/answer":
                    raise Refused(404, "not found")
                declared = self.headers.get("Content-Length") or "0"
                length = int(declared) if declared.isascii() and declared.isdigit() else -1
                if not 0 < length <= MAX_BODY:
                    raise Refused(413, f"the body must be 1 to {MAX_BODY} bytes")
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    raise Refused(400, "the body is not JSON") from None
                if not isinstance(body, dict):
                    raise Refused(400, "the body must be a JSON object")
                self._json(200, console.answer(body))
            except Refused as exc:
                self._refuse(exc)

        def _other(self) -> None:
            self._json(405, {"error": "method not allowed"})

        do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _other

    return Handler


_SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def default_policy() -> str | None:
    """The user's policy when it sits where `init` writes it (see config.paths)."""
    return policy_or_default(None)[0]


def serve(directory: Path, *, port: int, open_browser: bool, policy: str | None, audit: str | None) -> int:
    """Run the web console until Ctrl-C; the first line on stdout is the URL with its token."""
    facts = web_view.PolicyFacts()
    budgets_file = state_dir() / BUDGETS_FILE
    read_budgets: Callable[[], dict[str, dict[str, Any]]] = functools.partial(web_view.read_budgets, budgets_file)
    read_spend: Callable[[], dict[str, dict[str, Any]]] = functools.partial(
        web_view.read_budgets, budgets_file, unit=USD
    )
    given = policy
    policy = policy or default_policy()
    settings = None
    if policy:
        try:
            settings = load_settings(policy)
        except PolicyError as exc:
            if given:  # the file the user named: say what is wrong with it
                print(f"mcp-sampling-proxy console: error: {exc}", file=sys.stderr)
                return 2
            # the default policy only feeds the budgets shown: approvals must not wait for a fix
            print(
                f"mcp-sampling-proxy console: warning: the default policy cannot be read, so no budgets or "
                f"limits are shown: {exc}",
                file=sys.stderr,
            )
    if settings is not None:
        facts = web_view.policy_facts(settings)
        audit = audit or settings.audit_path
        try:
            shared = resolve_state(settings.state, os.environ)
        except PolicyError as exc:  # e.g. url_env is the proxies' variable, not set in this shell
            print(f"mcp-sampling-proxy console: warning: the shared budgets cannot be shown: {exc}", file=sys.stderr)
            shared = None
        if shared is not None and shared.backend == "redis" and shared.url:  # what every proxy shares on Redis
            read_budgets = functools.partial(redis_store.read_budgets, shared.url, shared.prefix)
            read_spend = functools.partial(redis_store.read_budgets, shared.url, shared.prefix, unit=USD)
    state = WebState(facts, read_budgets, audit, read_spend)
    stop = threading.Event()

    async def run() -> None:
        client = ConsoleClient(directory, state.on_event)
        async with anyio.from_thread.BlockingPortal() as portal:
            try:
                web = WebConsole(state, client, portal, port)
            except OSError as exc:
                problem = listen_failure("127.0.0.1", port, exc, lambda free: f"--port {free}")
                print(f"mcp-sampling-proxy console: error: {problem} (--port 0 picks a free one)", file=sys.stderr)
                return
            print(web.url, flush=True)
            print(
                f"mcp-sampling-proxy console: serving approvals for the proxies in {directory} at the URL above "
                f"(audit: {audit or 'none; pass --audit FILE'}; Ctrl-C to quit)",
                file=sys.stderr,
                flush=True,
            )
            threading.Thread(target=web.httpd.serve_forever, name="web-console", daemon=True).start()
            if audit:
                threading.Thread(target=follow_audit, args=(state, audit, stop), name="audit", daemon=True).start()
            if open_browser:
                threading.Thread(target=webbrowser.open, args=(web.url,), daemon=True).start()
            await client.run()

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        stop.set()
        print(
            "console closed: pending requests go to each proxy's next approval channel, or are denied",
            file=sys.stderr,
            flush=True,
        )
        os._exit(0)  # request threads may be blocked on a stream; the proxies see the sockets close
    return 1
