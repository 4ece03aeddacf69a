"""Backups of host config files, all in one place: `STATE_DIR/backups/`.

`wrap` and `unwrap` copy a config there before they change it, instead of leaving `FILE.bak-*`
files beside it (inside project folders such as `.vscode/` they would end up in version control).
Each backup is two files: `ID` (the bytes as they were, mode 0600: configs hold keys in `env`)
and `ID.meta` (JSON: the host, the config's absolute path, when and why it was taken). The ID reads
`YYYYMMDDTHHMMSS-HOST-FILENAME`, so `ls` alone shows what is what; `unwrap --list-backups` lists
them and `unwrap --from-backup ID` puts one back.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from msgspec import Struct

from mcp_sampling_proxy.config.atomic import write_atomic
from mcp_sampling_proxy.hosts.registry import ConfigError
from mcp_sampling_proxy.quotas.state import state_dir

_ID = re.compile(r"[0-9]{8}T[0-9]{6}(?:-[0-9]+)?-[A-Za-z0-9._-]+")


def backup_dir(environ: dict[str, str] | None = None) -> Path:
    """`STATE_DIR/backups`, created 0700 (the state dir's own rules pick STATE_DIR)."""
    path = state_dir(environ) / "backups"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


class Backup(Struct, frozen=True):
    id: str
    host: str
    path: str  # the config's absolute path
    taken: str  # ISO time, local
    reason: str  # "wrap" | "unwrap" | "from-backup"
    size: int
    file: Path  # where the copy is


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "config"


def take(host: str, path: Path, data: bytes, reason: str, now: datetime | None = None) -> Backup:
    """Store `data` (the file as it was) as a new backup; never overwrites an older one."""
    folder = backup_dir()
    when = now or datetime.now()
    stem = f"{when.strftime('%Y%m%dT%H%M%S')}"
    tail = f"{_safe(host)}-{_safe(path.name)}"
    counter = 0
    while True:
        ident = f"{stem}-{tail}" if counter == 0 else f"{stem}-{counter}-{tail}"
        try:
            fd = os.open(folder / ident, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            counter += 1
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    meta = {
        "host": host,
        "path": os.path.abspath(path),
        "taken": when.isoformat(timespec="seconds"),
        "reason": reason,
        "size": len(data),
    }
    write_atomic(folder / f"{ident}.meta", (json.dumps(meta, indent=2) + "\n").encode("utf-8"), mode=0o600)
    return _from_meta(folder / ident, meta)


def _from_meta(file: Path, meta: dict[str, Any]) -> Backup:
    return Backup(
        file.name,
        str(meta.get("host", "?")),
        str(meta.get("path", "?")),
        str(meta.get("taken", "?")),
        str(meta.get("reason", "?")),
        int(meta.get("size", 0) or 0),
        file,
    )


def listing() -> list[Backup]:
    """Every backup, oldest first (IDs sort by time)."""
    folder = backup_dir()
    out = []
    for meta_file in sorted(folder.glob("*.meta")):
        data_file = meta_file.with_suffix("")
        if not _ID.fullmatch(data_file.name) or not data_file.is_file():
            continue
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict):
            out.append(_from_meta(data_file, meta))
    return out


def find(ident: str) -> Backup:
    """The backup named `ident` (a unique prefix will do); a ConfigError says what exists."""
    found = listing()
    exact = [b for b in found if b.id == ident]
    matches = exact or [b for b in found if b.id.startswith(ident)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ConfigError(
            f"no backup '{ident}' in {backup_dir()} (`mcp-sampling-proxy unwrap --list-backups` lists them)"
        )
    raise ConfigError(
        f"'{ident}' matches {len(matches)} backups ({', '.join(b.id for b in matches[:5])}); give the whole ID"
    )
