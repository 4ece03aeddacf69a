"""Tool pins: what each server's tools looked like when first seen, so a later change (a rug pull) shows.

A server can change a tool's description or schema after the user has come to trust it: the host's
LLM then reads new instructions under an old name. On first sight the proxy records a digest of each
tool (name, title, description, input and output schema, annotations; canonical JSON, SHA-256) in
`tools.json` in the state directory, keyed by the server's identity: the operator's name for it AND
its command or URL, so two hosts that call different servers by one name do not share pins. A later
list with a changed or new tool holds that tool (the caller hides it and refuses its calls) until a
human accepts it (`mcp-sampling-proxy tools accept`), or, with `on_change: allow`, re-pins it.

The file is sealed like the budgets (quotas/integrity.py): a server that could write it must not be
able to pin its own new tools. A file whose seal does not verify, or that cannot be read, is never
taken for "first sight" (that would let a server re-pin itself by spoiling it): every tool is held
and the reason given. A file that vanishes while a proxy runs is treated the same way by that proxy.
The file is bounded: at most MAX_TOOLS pinned (and as many held) per server, and kept copies of the
tools (for `tools diff`) only up to MAX_COPY_BYTES per server; past that, digests only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TypedDict, TypeVar
from urllib.parse import urlsplit, urlunsplit

from msgspec import Struct, field

from mcp_sampling_proxy.quotas.integrity import KEY_FILE, canonical, start_anew
from mcp_sampling_proxy.quotas.state import StateFile
from mcp_sampling_proxy.text.identity import normalise

T = TypeVar("T")

PINS_FILE = "tools.json"
SEAL_KIND = "tools"  # the seal's kind (quotas/integrity.py): a budgets or approval seal never fits
PINNED_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons")
# what pins of version 1 covered: before `icons` (a remote SVG the host fetches and shows) was pinned too
V1_FIELDS = PINNED_FIELDS[:-1]
PIN_VERSION = 2
MAX_TOOLS = 500  # tools pinned per server (and held changes kept per server)
MAX_VIEWS = 16  # client views remembered per server (see `_see`); past it, a new view's new tools are held
MAX_COPY_BYTES = 256 * 1024  # kept copies of tools per server, for `tools diff`; past it digests only
MAX_ONE_COPY = 64 * 1024  # one tool's kept copy at most
MAX_TARGET = 2000  # characters of a command line or URL kept in the file

ChangeKind = Literal["changed", "new", "removed"]
# A tool as a server lists it (its name checked to be a string; the rest is the server's, unchecked).
ListedTool = Mapping[str, object]


class Pin(TypedDict, total=False):
    """One tool's pin (or its held version, in `pending`), as `tools.json` keeps it."""

    digest: str  # tool_digest() of the pinned fields
    fields: dict[str, str]  # one digest per pinned field, to say which changed
    at: str  # when pinned (UTC ISO 8601)
    v: int  # PIN_VERSION; absent in a pin of version 1 (before icons were pinned)
    copy: dict[str, object]  # the pinned fields themselves, while the server's copies fit MAX_COPY_BYTES
    accepted: bool  # pinned by `tools accept` (or re-pinned by a version that pins more)
    gone: str  # when the tool went from its view's list
    kind: ChangeKind  # pending only: changed or new


class ServerPins(TypedDict, total=False):
    """One server's entry in `tools.json`, under its identity's key."""

    name: str
    target: str
    at: str
    tools: dict[str, Pin]  # pinned
    pending: dict[str, Pin]  # held until a human accepts them
    views: dict[str, list[str]]  # client view (client_view) -> the tool names it was shown


class PinsDocument(TypedDict, total=False):
    """`tools.json`."""

    servers: dict[str, ServerPins]


class ServerIdentity(Struct, frozen=True):
    """Who the pins belong to: the operator's name for the server and what it runs (command or URL)."""

    name: str
    target: str

    @property
    def key(self) -> str:
        text = f"{normalise(self.name)}\0{self.shown_target}"
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    @property
    def shown_target(self) -> str:
        """The command or URL as the file keeps it for `tools list`: a URL without its user, query and
        fragment, which may hold a token (and a token that changes must not make the server new to its pins)."""
        try:
            parts = urlsplit(self.target)
            if parts.scheme in ("http", "https") and parts.hostname:
                port = f":{parts.port}" if parts.port else ""
                return urlunsplit((parts.scheme, parts.hostname + port, parts.path, "", ""))[:MAX_TARGET]
        except ValueError:  # a port that is not a number: not shown as a URL
            pass
        return self.target[:MAX_TARGET]


class ToolChange(Struct, frozen=True):
    """One tool that differs from its pin (or is new, or gone), first noticed now."""

    tool: str
    kind: ChangeKind
    fields: tuple[str, ...]  # which of PINNED_FIELDS differ
    old_digest: str | None
    new_digest: str | None
    old: Mapping[str, object] | None  # the pinned copy, when kept
    new: Mapping[str, object] | None  # the copy now, when kept


class Sighting(Struct, frozen=True):
    """What one tools/list showed against the pins."""

    held: frozenset[str]  # tools to hide and refuse until accepted
    changes: tuple[ToolChange, ...] = ()  # changes first noticed in this list (each gets an audit record)
    problem: str | None = None  # the pins cannot be trusted: every tool is held, for this reason
    first_sight: bool = False
    over_cap: tuple[str, ...] = ()  # tools held because the server has more than MAX_TOOLS


class PinnedServer(Struct, frozen=True):
    """One server's pins as `tools list` shows them."""

    key: str
    name: str
    target: str
    tools: dict[str, Pin] = field(default_factory=dict)
    pending: dict[str, Pin] = field(default_factory=dict)


def pinned_view(tool: ListedTool) -> dict[str, object]:
    """The parts of a tool that are pinned (a change to anything else, e.g. `_meta`, is not a change)."""
    return {key: tool[key] for key in PINNED_FIELDS if key in tool}


def tool_digest(tool: ListedTool) -> str:
    return hashlib.sha256(canonical(pinned_view(tool))).hexdigest()


def v1_digest(tool: ListedTool) -> str:
    """The digest a pin of version 1 holds (without `icons`)."""
    return hashlib.sha256(canonical({key: tool[key] for key in V1_FIELDS if key in tool})).hexdigest()


def field_digests(tool: ListedTool) -> dict[str, str]:
    return {key: hashlib.sha256(canonical(value)).hexdigest() for key, value in pinned_view(tool).items()}


def changed_fields(old: dict[str, str] | None, new: dict[str, str]) -> tuple[str, ...]:
    old = old or {}
    return tuple(key for key in PINNED_FIELDS if old.get(key) != new.get(key))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _copy_bytes(entries: Iterable[Pin]) -> int:
    return sum(len(canonical(e["copy"])) for e in entries if isinstance(e, dict) and isinstance(e.get("copy"), dict))


class ToolPins:
    """The sealed pins file (`tools.json`), read and changed under its lock (quotas/state.py)."""

    def __init__(self, path: Path):
        # sealed: a file this proxy saw, or the ledger names, that is gone is tampering, not a first sight
        self.file: StateFile[PinsDocument] = StateFile(path, sealed=SEAL_KIND)

    @property
    def path(self) -> Path:
        return self.file.path

    def see(
        self,
        identity: ServerIdentity,
        tools: Sequence[ListedTool],
        on_change: str,
        *,
        complete: bool,
        fresh: bool,
        view: str = "",
    ) -> Sighting:
        """Compare one tools/list page with the pins, pin on first sight, and record what changed.

        `complete`: the page is the whole list (removed tools can be told); `fresh`: a later page of a
        list whose first page was this server's first sight (pinned as first sight too); `view`: what of
        the client decides which tools a server lists (its era and capabilities: `client_view`). Never
        raises: pins that cannot be read or trusted hold every tool, with the reason."""
        names = [str(t["name"]) for t in tools]
        try:
            return self.file.update(lambda data: _see(data, identity, tools, on_change, complete, fresh, view))
        except OSError as exc:
            return Sighting(held=frozenset(names), problem=_why(self.file.path, exc))

    def servers(self) -> list[PinnedServer]:
        """Every server's pins (raises OSError / TamperedState when the file cannot be trusted)."""
        servers = self.file.read().get("servers")
        entries = servers.items() if isinstance(servers, dict) else ()
        return [_server(key, entry) for key, entry in entries if isinstance(entry, dict)]

    def pinned(self, identity: ServerIdentity, tool: str) -> str | None:
        """The digest `tool` of this server is pinned at now (None: not pinned, or the pins cannot be read)."""
        try:
            servers = self.file.read().get("servers")
        except OSError:
            return None
        entry = servers.get(identity.key) if isinstance(servers, dict) else None
        pins = entry.get("tools") if isinstance(entry, dict) else None
        pin = pins.get(tool) if isinstance(pins, dict) else None
        digest = pin.get("digest") if isinstance(pin, dict) else None
        return digest if isinstance(digest, str) else None

    def accept(self, name: str, tool: str | None) -> list[tuple[PinnedServer, str]]:
        """Pin the held version of `tool` (every held tool when None) of the servers called `name`."""

        def take(data: PinsDocument) -> list[tuple[PinnedServer, str]]:
            done: list[tuple[PinnedServer, str]] = []
            for key, entry in _servers(data).items():
                if not isinstance(entry, dict) or normalise(str(entry.get("name"))) != normalise(name):
                    continue
                pending, pins = _table(entry, "pending"), _table(entry, "tools")
                for tool_name in [t for t in list(pending) if tool is None or t == tool]:
                    held = pending.pop(tool_name)
                    if len(pins) >= MAX_TOOLS and tool_name not in pins:
                        continue
                    pins[tool_name] = {**held, "at": _now(), "accepted": True}
                    pins[tool_name].pop("kind", None)
                    done.append((_server(key, entry), tool_name))
                _trim_copies(entry)
            return done

        return self.file.update(take)

    def forget(self, name: str) -> int:
        """Drop every pin of the servers called `name` (their next list is first sight); how many servers."""

        def drop(data: PinsDocument) -> int:
            servers = _servers(data)
            gone = [
                k
                for k, e in servers.items()
                if isinstance(e, dict) and normalise(str(e.get("name"))) == normalise(name)
            ]
            for key in gone:
                del servers[key]
            return len(gone)

        return self.file.update(drop)


def _why(path: Path, exc: OSError) -> str:
    return (
        f"the tool pins in {path} cannot be trusted ({exc}); every tool is held. "
        f"See `mcp-sampling-proxy tools list`; to pin anew, {start_anew(path)}"
    )


def _servers(data: PinsDocument) -> dict[str, ServerPins]:
    servers = data.get("servers")
    if not isinstance(servers, dict):
        servers = data["servers"] = {}
    return servers


def _table(entry: ServerPins, name: Literal["tools", "pending"]) -> dict[str, Pin]:
    table = entry.get(name)
    if not isinstance(table, dict):
        table = entry[name] = {}
    return table


def _views(entry: ServerPins) -> dict[str, list[str]]:
    views = entry.get("views")
    if not isinstance(views, dict):
        views = entry["views"] = {}
    return views


def _server(key: str, entry: ServerPins) -> PinnedServer:
    return PinnedServer(
        key,
        str(entry.get("name")),
        str(entry.get("target")),
        dict(tools) if isinstance(tools := entry.get("tools"), dict) else {},
        dict(pending) if isinstance(pending := entry.get("pending"), dict) else {},
    )


def _record(tool: ListedTool, kept: int) -> Pin:
    """A pin (or held version) of `tool`: digests, and a copy while the server's copies stay small."""
    view = pinned_view(tool)
    record: Pin = {
        "digest": tool_digest(tool),
        "fields": field_digests(tool),
        "at": _now(),
        "v": PIN_VERSION,
    }
    size = len(canonical(view))
    if size <= MAX_ONE_COPY and kept + size <= MAX_COPY_BYTES:
        record["copy"] = view
    return record


def _trim_copies(entry: ServerPins) -> None:
    """Drop kept copies (held ones first) until the server's copies fit MAX_COPY_BYTES."""
    tables = [_table(entry, "pending"), _table(entry, "tools")]
    while _copy_bytes([*tables[0].values(), *tables[1].values()]) > MAX_COPY_BYTES:
        for table in tables:
            with_copy = [v for v in table.values() if isinstance(v, dict) and "copy" in v]
            if with_copy:
                del with_copy[0]["copy"]
                break
        else:
            return


def client_view(era: str | None, capabilities: Mapping[str, object]) -> str:
    """What of a client a server may list its tools by: the era and the capabilities it declares (a tool
    offered only to clients with roots, elicitation or the 2026 era is not a rug pull when another host of
    the same user, without them, saw the list first)."""
    declared = []
    for key, value in sorted(capabilities.items()):
        declared.append(key)
        if isinstance(value, dict) and key == "elicitation":
            declared += [f"{key}.{mode}" for mode in sorted(value) if mode in ("form", "url")]
    return f"{era or 'handshake'}:{','.join(declared)}"


def _see(
    data: PinsDocument,
    identity: ServerIdentity,
    tools: Sequence[ListedTool],
    on_change: str,
    complete: bool,
    fresh: bool,
    view: str = "",
) -> Sighting:
    """One list against the pins. A tool is pinned once, whichever client saw it; a changed one is held for
    every client. Each client view keeps the names it was shown: a tool new to a view seen before is held
    as new, but the first list of a view never seen is that view's first sight (its tools pinned as they
    are), and a tool missing from one view's list is not removed from another's."""
    servers = _servers(data)
    entry = servers.get(identity.key)
    first = not isinstance(entry, dict)
    if not isinstance(entry, dict):
        entry = servers[identity.key] = {"name": identity.name, "target": identity.shown_target, "at": _now()}
    pins, pending = _table(entry, "tools"), _table(entry, "pending")
    views = _views(entry)
    if not first and not views and pins:  # pinned by a version without views: what it saw was this view's
        views[view] = sorted(pins)
    seen_names = views.get(view)
    new_view = not isinstance(seen_names, list) and len(views) < MAX_VIEWS
    shown = set(seen_names) if isinstance(seen_names, list) else set()
    kept = _copy_bytes([*pins.values(), *pending.values()])
    held: set[str] = set()
    changes: list[ToolChange] = []
    over: list[str] = []
    for tool in tools:
        name = str(tool["name"])
        digest = tool_digest(tool)
        pin = pins.get(name)
        if isinstance(pin, dict) and pin.get("digest") == digest:
            pending.pop(name, None)  # changed and changed back: nothing is held
            pin.pop("gone", None)
            shown.add(name)
            continue
        if isinstance(pin, dict) and pin.get("v") is None and pin.get("digest") == v1_digest(tool):
            # pinned by a version that did not pin icons, and the same in all it did pin: pinned anew, icons too
            kept -= len(canonical(pin["copy"])) if "copy" in pin else 0
            pins[name] = {**_record(tool, kept), **({"accepted": True} if pin.get("accepted") else {})}
            kept += len(canonical(pins[name]["copy"])) if "copy" in pins[name] else 0
            pending.pop(name, None)
            shown.add(name)
            continue
        if first or fresh or (new_view and pin is None):
            if len(pins) >= MAX_TOOLS:
                held.add(name)
                over.append(name)
                continue
            pins[name] = record = _record(tool, kept)
            kept += len(canonical(record.get("copy"))) if "copy" in record else 0
            shown.add(name)
            continue
        old = pin if isinstance(pin, dict) else None
        new = _record(tool, kept)
        change = ToolChange(
            name,
            "changed" if old is not None else "new",
            changed_fields(old.get("fields") if old is not None else None, new["fields"]),
            old.get("digest") if old is not None else None,
            digest,
            old.get("copy") if old is not None else None,
            pinned_view(tool),
        )
        if on_change == "allow" and (old is not None or len(pins) < MAX_TOOLS):
            pins[name] = new
            pending.pop(name, None)
            changes.append(change)
            shown.add(name)
            continue
        held.add(name)
        before = pending.get(name)
        if isinstance(before, dict) and before.get("digest") == digest:
            continue  # held already, recorded when it was first seen
        changes.append(change)
        if name in pending or len(pending) < MAX_TOOLS:
            pending[name] = {**new, "kind": change.kind}
        else:
            over.append(name)
    listed = {str(t["name"]) for t in tools}
    if complete and not first and not fresh and not new_view:
        for name in sorted(shown - listed):  # gone from this view's list (another view's tools are its own)
            pin = pins.get(name)
            if isinstance(pin, dict) and not pin.get("gone"):
                pin["gone"] = _now()
                changes.append(ToolChange(name, "removed", (), pin.get("digest"), None, pin.get("copy"), None))
    if isinstance(seen_names, list) or new_view:
        views[view] = sorted((shown & listed) | (shown if not complete else set()))[:MAX_TOOLS]
    _trim_copies(entry)
    return Sighting(frozenset(held), tuple(changes), None, first or fresh or new_view, tuple(over))


def trust_problem(pins: ToolPins) -> str | None:
    """Why the pins file cannot be trusted, or None (no file yet counts as fine). Makes no key."""
    if not pins.path.exists():
        return None
    if not (pins.path.parent / KEY_FILE).exists():
        return f"{pins.path} exists but there is no sealing key ({KEY_FILE}) to check it with"
    try:
        pins.servers()
    except OSError as exc:
        return str(exc)
    return None
