"""Which servers of which host config files are wrapped: what `wrap --list` shows and `doctor` checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from mcp_sampling_proxy.hosts.config_files import load_config
from mcp_sampling_proxy.hosts.entries import classify, is_wrapped
from mcp_sampling_proxy.hosts.registry import HOSTS, VSCODE_SETTINGS_TABLE, ConfigError, config_files, config_path
from mcp_sampling_proxy.hosts.wrapping import describe_upstream


class ServerStatus(Struct):
    name: str
    table: tuple[str, ...]
    wrapped: bool
    kind: str  # stdio | http | sse | invalid
    detail: str
    entry: Any = None  # the entry as the file holds it (what `doctor` checks)


class FileStatus(Struct):
    host: str
    scope: str
    path: Path
    exists: bool
    error: str | None = None
    servers: list[ServerStatus] = field(default_factory=list)


def _has_vscode_settings_servers(path: Path) -> bool:
    try:
        doc = load_config(path, "vscode")
    except ConfigError:
        return path.is_file()  # a broken settings.json is worth reporting
    return bool(doc.servers(VSCODE_SETTINGS_TABLE))


def survey(
    host: str, scope: str | None = None, config: str | None = None, project_dir: str | None = None
) -> list[FileStatus]:
    """The host's config files (or `config`) and the state of each server entry in them."""
    spec = HOSTS[host]
    if config:
        files = [("given", Path(os.path.expanduser(config)))]
    else:
        scopes = [scope] if scope else [s for s in spec.scopes if s != "local"]
        files = [(s, Path(str(config_path(host, s, project_dir=project_dir)))) for s in scopes]
        if host == "vscode" and scope in (None, "user"):  # each VS Code profile has its own mcp.json
            profiles = Path(str(config_path(host, "user"))).parent / "profiles"
            files += [(f"profile {p.parent.name}", p) for p in sorted(profiles.glob("*/mcp.json"))]
    if host == "continue":  # the project's folder of server files: each file
        files = [(s, f) for s, p in files for f in (config_files(p) if p.is_dir() else [p])]
    out = []
    for scope_name, path in dict((str(p), (s, p)) for s, p in files).values():
        if scope_name == "settings" and not config and not _has_vscode_settings_servers(path):
            continue  # settings.json is there for every VS Code user; only list it when it holds servers
        status = FileStatus(host, scope_name, path, path.is_file())
        out.append(status)
        if not status.exists:
            continue
        try:
            doc = load_config(path, host)
            for table in doc.tables():
                for name, entry in doc.servers(table).items():
                    status.servers.append(
                        ServerStatus(
                            name,
                            table,
                            is_wrapped(entry),
                            classify(host, entry).kind,
                            describe_upstream(host, entry),
                            entry,
                        )
                    )
        except ConfigError as exc:
            status.error = str(exc)
    return out
