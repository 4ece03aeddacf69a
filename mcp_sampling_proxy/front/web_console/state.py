"""What the web console knows: the proxies attached, their open questions, the audit log's last records.

All of it lives on the event loop that talks to the proxies and serves the page, so it needs no lock:
the console client's events change it, the audit follower adds records, and the page's requests read
it. What could block that loop is done in a worker thread: reading the budgets (a file, or Redis over
the network) and reading the audit log. A change bumps `version` and wakes the event streams; a new
audit record only counts (the pages fetch the lines they show).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import anyio
import anyio.to_thread

from mcp_sampling_proxy.approval.console.client import Event
from mcp_sampling_proxy.approval.console.messages import ConsoleMessage
from mcp_sampling_proxy.audit.follow import Follower
from mcp_sampling_proxy.audit.log_lines import InputError
from mcp_sampling_proxy.audit.notes import governance_notes
from mcp_sampling_proxy.audit.records import is_decision, parse_object
from mcp_sampling_proxy.audit.shown import format_record
from mcp_sampling_proxy.audit.summary import parse_since, parse_ts, summarize
from mcp_sampling_proxy.config.dirs import home_relative
from mcp_sampling_proxy.front.web_console import views
from mcp_sampling_proxy.quotas.refusals import USD, BudgetUse
from mcp_sampling_proxy.text.sanitize import one_line

KEEP_RECORDS = 20_000

Budgets = dict[str, BudgetUse]  # by budget key (rule@server)


class AttachedProxy(TypedDict):
    """A proxy the console is attached to, as its hello named it (cleaned for the page)."""

    pid: str
    server: str
    host: str


class WebState:
    """What the page shows; changed and read on the event loop only."""

    def __init__(
        self,
        facts: views.PolicyFacts,
        read_budgets: Callable[[], Budgets],
        audit_path: str | None,
        read_spend: Callable[[], Budgets] | None = None,
    ):
        self.facts = facts
        self.read_budgets = read_budgets  # the local budgets file, or the shared ones on Redis (blocking)
        self.read_spend = read_spend or dict  # the usd budgets, likewise (micro-dollars)
        self.audit_path = audit_path
        self.version = 0
        self.proxies: dict[str, AttachedProxy] = {}
        self.questions: dict[str, tuple[Path, ConsoleMessage]] = {}
        self.notices: deque[str] = deque(maxlen=20)
        self.records: deque[dict[str, Any]] = deque(maxlen=KEEP_RECORDS)
        self.audit_count = 0
        self.audit_error: str | None = None
        self._waiting: set[anyio.Event] = set()  # the event streams waiting for a change
        self._snapshot: tuple[int, dict[str, Any]] | None = None  # (version, what snapshot() made for it)
        self._snapshotting = anyio.Lock()

    def _bump(self) -> None:
        self.version += 1
        self.wake()

    def wake(self) -> None:
        """Wake every event stream waiting for a change."""
        for waiting in self._waiting:
            waiting.set()
        self._waiting.clear()

    async def changed(self, seen: tuple[int, int], timeout: float) -> None:
        """Return once (version, audit count) differs from `seen`, or after `timeout` seconds."""
        if (self.version, self.audit_count) != seen:
            return
        woken = anyio.Event()
        self._waiting.add(woken)
        try:
            with anyio.move_on_after(timeout):
                await woken.wait()
        finally:
            self._waiting.discard(woken)

    def on_event(self, event: Event) -> None:
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

    def take(self, key: str) -> tuple[Path, ConsoleMessage] | None:
        """Claim a pending question: of two answers racing (two tabs), only the first gets it."""
        found = self.questions.pop(key, None)
        if found is not None:
            self._bump()
        return found

    async def budgets(self) -> tuple[Budgets, Budgets]:
        """The token budgets' windows and the usd ones, read in a worker thread (Redis may be slow)."""
        budgets = await anyio.to_thread.run_sync(self.read_budgets)
        spend = await anyio.to_thread.run_sync(self.read_spend) if self.facts.usd_budgets else {}
        return budgets, spend

    async def snapshot(self) -> dict[str, Any]:
        """What the page shows now; made once per state version, whatever the number of pages
        (a flooding server changes the state often: each change costs one snapshot, not one per page)."""
        async with self._snapshotting:
            cached = self._snapshot
            if cached is not None and cached[0] == self.version:
                return cached[1]
            budgets, spend = await self.budgets()
            version = self.version  # (what changed while the budgets were read is in this snapshot)
            made = {
                "version": version,
                "proxies": sorted(self.proxies.values(), key=lambda p: p["pid"]),
                "notices": list(self.notices),
                "questions": [
                    views.question_view(
                        key,
                        path.stem,
                        message,
                        views.request_limits(message, self.facts, budgets, spend)
                        if message["type"] == "pending"
                        else {},
                    )
                    for key, (path, message) in self.questions.items()
                ],
                "audit": {"path": self.audit_path, "error": self.audit_error},
            }
            self._snapshot = (version, made)
            return made

    def add_records(self, records: list[dict[str, Any]], error: str | None) -> None:
        """New audit records are a count for the pages (they fetch the lines they show); only a
        change of the log's error changes the state."""
        self.records.extend(records)
        self.audit_count += len(records)
        if error != self.audit_error:
            self.audit_error = error
            self._bump()
        elif records:
            self.wake()


async def follow_audit(state: WebState, path: str, poll: float = 0.5) -> None:
    """The audit log's last records, then every record appended (audit/follow.py: rotation,
    truncation, bounded memory whatever the file holds), read in a worker thread until cancelled."""
    follower = Follower(path, last=KEEP_RECORDS)

    def read() -> tuple[list[dict[str, Any]], str | None]:
        records: list[dict[str, Any]] = []
        try:
            for line in follower.read():
                if isinstance(line, bytes) and (record := parse_object(line)) is not None:
                    records.append(record)
        except FileNotFoundError:
            return records, f"{path} does not exist yet (it appears with the first decision)"
        except OSError as exc:
            return records, f"cannot read {path}: {exc.strerror or exc}"
        return records, None

    try:
        while True:
            state.add_records(*await anyio.to_thread.run_sync(read))
            await anyio.sleep(poll)
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
    lines = []
    for record in reversed(state.records):
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


async def usage_view(state: WebState, query: dict[str, list[str]]) -> dict[str, Any]:
    """Per-server requests and tokens from the audit log, and the budgets' windows against their limits."""
    since_text = (query.get("since") or [""])[0].strip()
    try:
        since = parse_since(since_text) if since_text else None
    except InputError as exc:
        return {"error": str(exc), "servers": [], "budgets": []}
    records = list(state.records)
    servers = [{"server": one_line(name, 120), **stats.as_dict()} for name, stats in summarize(records, since).items()]
    oldest = next((r.get("ts") for r in records if isinstance(r.get("ts"), str)), None)
    # The page says what the counts cover: the console keeps the last KEEP_RECORDS records, not the whole log
    covers = {"records": len(records), "since": one_line(oldest, 40) if oldest else None, "kept": KEEP_RECORDS}
    budgets = await anyio.to_thread.run_sync(state.read_budgets)
    spend = await anyio.to_thread.run_sync(state.read_spend)
    return {
        "servers": servers,
        "budgets": views.budget_rows(budgets, state.facts) + views.budget_rows(spend, state.facts, USD),
        "no_budgets": views.no_budgets_text(state.facts),
        "policy": shown_path(state.facts.source),
        "covers": covers,
    }
