"""The remote (Streamable HTTP) servers in the hosts' configs, wrapped or not, for `doctor`'s login check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from msgspec import Struct

from mcp_sampling_proxy.hosts.entries import classify, is_wrapped, parse_proxy_args
from mcp_sampling_proxy.hosts.registry import HOSTS
from mcp_sampling_proxy.hosts.survey import survey

if TYPE_CHECKING:
    from mcp_sampling_proxy.hosts.survey import FileStatus


class RemoteEntry(Struct, frozen=True):
    host: str
    name: str
    url: str
    static_auth: bool  # an Authorization header of its own: OAuth does not apply


def remote_entries(statuses: Sequence[FileStatus] | None = None) -> list[RemoteEntry]:
    """The remote servers of the host configs `statuses` describe (`wrap.survey`; every host's by
    default), from the entries the survey read: the files are not read again."""
    if statuses is None:
        statuses = [status for host in HOSTS for status in survey(host)]
    found: dict[tuple[str, str], RemoteEntry] = {}
    for status in statuses:
        if not status.exists or status.error:
            continue
        for server in status.servers:
            remote = _remote(status.host, server.entry)
            if remote is not None:
                found.setdefault((server.name, remote[0]), RemoteEntry(status.host, server.name, *remote))
    return list(found.values())


def _remote(host: str, entry: object) -> tuple[str, bool] | None:
    if is_wrapped(entry):
        assert isinstance(entry, dict)
        args = parse_proxy_args(entry.get("args") or [])
        url = args.options.get("--url")
        auth = any(h.partition(":")[0].strip().lower() == "authorization" for h in args.headers)
        return (url, auth) if url else None
    kind = classify(host, entry)
    if kind.remote is None or kind.remote.transport != "http":
        return None
    return kind.remote.url, any(k.lower() == "authorization" for k in kind.remote.headers)
