"""MCP hosts' config files: which document class reads each (`load_config`), and the record that lets
`unwrap` restore an entry byte for byte.

The parts: `registry` (which hosts, where their files are, where the entries sit), `entries` (what an
entry is: local or remote, wrapped or not), `jsonc` (a JSONC scanner that keeps positions), and one
document class per format over `documents.ConfigDoc`: `json_doc` (JSON and JSONC: an edit replaces only
the text of the values that change), `toml_doc` (Codex: `tomlkit` keeps comments and layout) and
`yaml_doc` (Continue: spliced at the positions PyYAML reports). After every edit the new text is parsed
again and must equal the expected document exactly, or nothing is written.

Restoring exactly. What `unwrap` needs to restore an entry byte for byte is kept in a record file
in the state dir (`STATE_DIR/wrapped/HASH-FILENAME.json`, mode 0600, one record per host, file,
table and server; older versions kept it beside the config), not in the entry itself: hosts
validate their entries (VS Code's `mcp.json` schema has `additionalProperties: false`, Codex's TOML
schema denies unknown fields), so an extra marker key would be flagged or rejected. Whether an
entry is wrapped is read from the entry (its command is the proxy), so a lost record only costs
exactness: `unwrap` then rebuilds the entry from the proxy's arguments.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mcp_sampling_proxy.config.atomic import write_atomic
from mcp_sampling_proxy.config.dirs import state_dir
from mcp_sampling_proxy.hosts.documents import ConfigDoc, read_text
from mcp_sampling_proxy.hosts.json_doc import JsonDoc
from mcp_sampling_proxy.hosts.registry import HOSTS, ConfigError
from mcp_sampling_proxy.hosts.toml_doc import TomlDoc
from mcp_sampling_proxy.hosts.yaml_doc import YamlDoc

# -- the sidecar --------------------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str], host: str) -> ConfigDoc:
    """A host's config file, as the document class of its format."""
    path = Path(path)
    text = read_text(path)
    cls: type[ConfigDoc] = JsonDoc
    if HOSTS[host].format == "toml":
        cls = TomlDoc
    elif HOSTS[host].format == "yaml" and path.suffix.lower() != ".json":
        cls = YamlDoc
    return cls(path, host, text)


SIDECAR_NAME = ".mcp-sampling-proxy.json"  # where older versions kept the record: beside the config


def record_path(config: Path) -> Path:
    """`STATE_DIR/wrapped/HASH-FILENAME.json`: the record of one config file (HASH of its absolute
    path). Not beside the config: in a project folder such as `.vscode/` it would end up in version
    control, and it may hold secrets copied from the config's `env`."""
    folder = state_dir(create=False) / "wrapped"  # made when a record is saved (not by --dry-run)
    absolute = os.path.abspath(config)
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", config.name)
    return folder / f"{hashlib.sha256(absolute.encode()).hexdigest()[:16]}-{name}.json"


class Sidecar:
    """The record of one config: the original text of each entry `wrap` changed, so `unwrap` can
    restore it exactly. Kept in the state dir (`record_path`); a record an older version left
    beside the config is read, and this config's records are moved there on the next save (that
    file holds the records of every config in its folder: the others stay in it)."""

    def __init__(self, config: Path):
        self.config = config
        self.path = record_path(config)
        self.legacy = config.with_name(SIDECAR_NAME)
        self.records = self._read(self.path)
        legacy = self._read(self.legacy)
        self._legacy_others = [r for r in legacy if r.get("file") != config.name]
        self._from_legacy = len(legacy) != len(self._legacy_others)
        held = {self._record_key(r) for r in self.records}
        self.records += [r for r in legacy if r.get("file") == config.name and self._record_key(r) not in held]

    @classmethod
    def _read(cls, path: Path) -> list[dict[str, Any]]:
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        return cls._parse(path, raw)

    @staticmethod
    def _record_key(record: dict[str, Any]) -> tuple[Any, ...]:
        table = record.get("table")
        return (
            record.get("host"),
            record.get("file"),
            tuple(table) if isinstance(table, list) else table,
            record.get("server"),
        )

    @staticmethod
    def _parse(path: Path, raw: str) -> list[dict[str, Any]]:
        try:
            data = json.loads(raw)
            records = data["records"]
            if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                f"{path}: not a record file written by mcp-sampling-proxy wrap; move it away and try again"
            ) from None
        return records

    def _key(self, host: str, table: tuple[str, ...], server: str) -> tuple[Any, ...]:
        return host, self.config.name, tuple(table), server

    def find(self, host: str, table: tuple[str, ...], server: str) -> dict[str, Any] | None:
        key = self._key(host, table, server)
        return next((record for record in self.records if self._record_key(record) == key), None)

    def put(self, host: str, table: tuple[str, ...], server: str, **fields: Any) -> None:
        self.remove(host, table, server)
        self.records.append(
            {
                "host": host,
                "file": self.config.name,
                "table": list(table),
                "server": server,
                "wrapped_at": datetime.now(UTC).isoformat(timespec="seconds"),
                **fields,
            }
        )

    def remove(self, host: str, table: tuple[str, ...], server: str) -> None:
        key = self._key(host, table, server)
        self.records = [r for r in self.records if self._record_key(r) != key]

    def save(self) -> None:
        """Write this config's records (first, so a failure loses nothing), then take them out of
        an older version's shared file beside the config."""
        if self.records:
            state_dir()  # created 0700 when missing
        self._write(self.path, self.records, config=os.path.abspath(self.config))
        if self._from_legacy:
            self._write(self.legacy, self._legacy_others)
            self._from_legacy = False

    @staticmethod
    def _write(path: Path, records: list[dict[str, Any]], **extra: Any) -> None:
        if not records:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        document = {
            "note": "written by `mcp-sampling-proxy wrap`: the original text of each server entry it changed, so "
            "`mcp-sampling-proxy unwrap` can restore it exactly; may hold secrets from the config",
            "version": 1,
            **extra,
            "records": records,
        }
        text = json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n"
        path.parent.mkdir(mode=0o700, exist_ok=True)
        write_atomic(path, text.encode("utf-8"), mode=0o600)
