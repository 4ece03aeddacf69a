"""Approvals that outlive one request: "for this session" in memory, "always" per server and tool in
the user's state directory (`approvals.json`), each entry sealed so a server cannot plant one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio
from msgspec import Struct, field

from mcp_sampling_proxy.approval.channels import ApprovalScope
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.quotas.integrity import entry_is_sealed as check
from mcp_sampling_proxy.quotas.integrity import load_key, sealed_entry
from mcp_sampling_proxy.quotas.state import Approvals, StateFile
from mcp_sampling_proxy.text.identity import normalise

log = get_logger("mcp_sampling_proxy.approval.memory")


class ApprovalMemory(Struct):
    """Approvals that outlive one request: this session's, and `always` ones in a state file."""

    session: set[tuple[str, str]] = field(default_factory=set)
    store: StateFile[Approvals] | None = None  # None: `always` kept in memory only
    forged: set[tuple[str, str]] = field(default_factory=set)  # unsealed `always` entries found (ignored)

    def remembers(self, server: str, tool: str | None) -> ApprovalScope | None:
        key = _key(server, tool)
        if key in self.session:
            return "session"
        if self.store is not None:  # read every time: `approvals revoke` takes effect in running proxies
            try:
                entries = always_entries(self.store.read())
                seal = self._seal_key()
            except OSError as exc:
                log.warning("cannot read remembered approvals", error=str(exc))
                return None
            matching = [entry for entry in entries if always_key(entry) == key]
            if any(entry_is_sealed(seal, APPROVAL, entry) for entry in matching):
                return "always"
            if matching and key not in self.forged:
                self.forged.add(key)
                log.warning(
                    "a remembered approval was not written by a proxy (its seal does not match): ignored",
                    server=key[0],
                    tool=key[1] or None,
                    file=str(self.store.path),
                    fix="`mcp-sampling-proxy approvals list` shows it; revoke it, and approve again if you meant it",
                )
        return None

    def ignored(self, server: str, tool: str | None) -> bool:
        """True when a remembered approval for this was found unsealed (and ignored)."""
        return _key(server, tool) in self.forged

    def _seal_key(self) -> bytes:
        """The proxy's sealing key (quotas/integrity.py; held from start, before the server runs): read each
        time, so a key replaced under this proxy is refused (KeyChanged), never trusted."""
        assert self.store is not None  # asked only with a store
        return load_key(self.store.path.parent)

    async def recall(self, server: str, tool: str | None) -> ApprovalScope | None:
        """`remembers`, with the shared file read in a worker thread: its lock is shared with the
        user's other proxies (and within the server's reach), and the event loop must not wait on it."""
        if self.store is None or _key(server, tool) in self.session:
            return self.remembers(server, tool)
        return await anyio.to_thread.run_sync(self.remembers, server, tool)

    async def keep(
        self, server: str, tool: str | None, scope: str, rule: str | None = None, channel: str | None = None
    ) -> None:
        """`remember`, off the event loop when it writes the shared file."""
        if scope == "always" and self.store is not None:
            await anyio.to_thread.run_sync(self.remember, server, tool, scope, rule, channel)
        else:
            self.remember(server, tool, scope, rule, channel)

    def remember(
        self, server: str, tool: str | None, scope: str, rule: str | None = None, channel: str | None = None
    ) -> None:
        """`always` goes to the store only (so a revoke reaches this proxy too), with the rule that
        asked, when and on which channel, for `mcp-sampling-proxy approvals list`."""
        key = _key(server, tool)
        if scope == "always" and self.store is not None:
            try:
                entry = sealed_entry(
                    self._seal_key(),
                    APPROVAL,
                    {
                        "server": key[0],
                        "tool": key[1],
                        "rule": rule,
                        "channel": channel,
                        "at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
                    },
                )

                def add(data: Approvals) -> None:
                    entries = data["always"] = [
                        old
                        for old in always_entries(data)  # an unsealed one is replaced
                        if always_key(old) != key
                    ]
                    entries.append(entry)

                self.store.update(add)
                self.forged.discard(key)
                return
            except OSError as exc:
                log.warning("cannot remember the approval beyond this session", error=str(exc))
        self.session.add(key)


APPROVAL = "approval"  # the seal's kind for a remembered approval (quotas/integrity.py)


def entry_is_sealed(key: bytes, kind: str, entry: Any) -> bool:
    return check(key, kind, entry)


def always_entries(data: Approvals) -> list[object]:
    """The stored `always` approvals; none when the file holds something else there."""
    entries = data.get("always")
    return entries if isinstance(entries, list) else []


def always_key(entry: object) -> tuple[str, str] | None:
    """(server, tool) of a stored `always` approval: {"server", "tool", ...}, or an older [server, tool]."""
    if isinstance(entry, dict):
        server, tool = entry.get("server"), entry.get("tool")
    elif isinstance(entry, list) and len(entry) == 2:
        server, tool = entry
    else:
        return None
    return (server, tool) if isinstance(server, str) and isinstance(tool, str) else None


def _key(server: str, tool: str | None) -> tuple[str, str]:
    """Remembered approvals are keyed by the operator's name for the server (never the name it
    reports, which it could borrow), normalised as `server:` rules compare it."""
    return normalise(server), tool or ""
