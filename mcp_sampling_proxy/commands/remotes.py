"""The remote (Streamable HTTP) servers in the hosts' configs, wrapped or not, for `doctor`'s login check."""

from __future__ import annotations

from dataclasses import dataclass

from mcp_sampling_proxy.hosts.config_files import HOSTS, ConfigDoc, ConfigError, classify, is_wrapped, parse_proxy_args


@dataclass(frozen=True)
class RemoteEntry:
    host: str
    name: str
    url: str
    static_auth: bool  # an Authorization header of its own: OAuth does not apply


def remote_entries() -> list[RemoteEntry]:
    from mcp_sampling_proxy.commands.wrap import survey

    found: dict[tuple[str, str], RemoteEntry] = {}
    for host in HOSTS:
        for status in survey(host):
            if not status.exists or status.error:
                continue
            try:
                doc = ConfigDoc.load(status.path, host)
            except ConfigError:
                continue
            for table in doc.tables():
                for name, entry in doc.servers(table).items():
                    remote = _remote(host, entry)
                    if remote is not None:
                        found.setdefault((name, remote[0]), RemoteEntry(host, name, *remote))
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
