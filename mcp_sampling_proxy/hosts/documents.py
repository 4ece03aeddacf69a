"""One host config file and edits of single server entries, whatever its format (json_doc, toml_doc,
yaml_doc implement the formats; config_files.load_config picks one).

An edit replaces only the text of the values that change, inside the one server entry, so comments,
indentation, key order and everything else stay as they were; after every edit the new text is parsed
again and must equal the expected document exactly, or nothing is written."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mcp_sampling_proxy.hosts.registry import HOSTS, VSCODE_SETTINGS_TABLE, ConfigError


def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _with_value(data: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of `data` with the value at `path` replaced."""
    copy = dict(data)
    if len(path) == 1:
        copy[path[0]] = value
    else:
        copy[path[0]] = _with_value(copy[path[0]], path[1:], value)
    return copy


def same_data(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True must not pass)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_data(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_data(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _order_after_insert(keys: list[str], added: list[str]) -> list[str]:
    """The key order an in-place edit produces: `args`, when added, goes right after `command`."""
    out: list[str] = []
    for key in keys:
        out.append(key)
        if key == "command" and "args" in added:
            out.append("args")
    return out


class ConfigDoc:
    """One host config file: its text, its data, and edits of single server entries."""

    BOM = "\ufeff"

    def __init__(self, path: Path, host: str, text: str):
        self.path = path
        self.host = host
        self.bom = text.startswith(self.BOM)
        self.text = text[1:] if self.bom else text
        self.data: dict[str, Any] = {}

    def encode(self, text: str) -> bytes:
        return ((self.BOM if self.bom else "") + text).encode("utf-8")

    def with_text(self, text: str) -> ConfigDoc:
        """The same file after an edit."""
        return type(self)(self.path, self.host, (self.BOM if self.bom else "") + text)

    def servers(self, table: tuple[str, ...]) -> dict[str, Any]:
        found = _get(self.data, table)
        if found is None:
            return {}
        if not isinstance(found, dict):
            raise ConfigError(f"{self.path}: {'.'.join(table)} is not an object of server entries")
        return found

    def tables(self) -> list[tuple[str, ...]]:
        """The tables of server entries this file holds (Claude Code's user file: also per project)."""
        spec = HOSTS[self.host]
        found: list[tuple[str, ...]] = [(spec.servers_key,)]
        if self.host == "vscode" and isinstance(_get(self.data, VSCODE_SETTINGS_TABLE), dict):
            found = [VSCODE_SETTINGS_TABLE]
        if self.host == "claude-code" and isinstance(self.data.get("projects"), dict):
            for project, settings in self.data["projects"].items():
                if (
                    isinstance(settings, dict)
                    and isinstance(settings.get(spec.servers_key), dict)
                    and settings[spec.servers_key]
                ):
                    found.append(("projects", project, spec.servers_key))
        return found

    # what a format implements
    def entry_span(self, table: tuple[str, ...], name: str) -> tuple[int, int]:
        raise NotImplementedError

    def _replace(self, table: tuple[str, ...], name: str, old: dict[str, Any], new: dict[str, Any]) -> str:
        raise NotImplementedError

    def _parse(self, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def _expected(self, table: tuple[str, ...], name: str, value: Any) -> dict[str, Any]:
        """The data once the entry is `value`."""
        return _with_value(self.data, (*table, name), value)

    # shared
    def entry_text(self, table: tuple[str, ...], name: str) -> str:
        start, end = self.entry_span(table, name)
        return self.text[start:end]

    def replace_entry(self, table: tuple[str, ...], name: str, new: dict[str, Any]) -> str:
        """The file's text with the entry set to `new`, changing as little text as possible."""
        old = self.servers(table)[name]
        text = self._replace(table, name, old, new)
        return self._checked(text, table, name, new)

    def restore_entry_text(self, table: tuple[str, ...], name: str, entry_text: str, expected: Any) -> str:
        """The file's text with the entry's text put back as it was (it must mean `expected`)."""
        start, end = self.entry_span(table, name)
        return self._checked(self.text[:start] + entry_text + self.text[end:], table, name, expected)

    def _checked(self, text: str, table: tuple[str, ...], name: str, value: Any) -> str:
        try:
            got = self._parse(text)
        except ConfigError as exc:
            raise ConfigError(f"{self.path}: editing '{name}' would break the file ({exc}); nothing written") from None
        if not same_data(got, self._expected(table, name, value)):
            raise ConfigError(
                f"{self.path}: editing '{name}' in place did not give the expected result "
                "(an unusual layout?); nothing written"
            )
        return text


def in_place_edit(old: dict[str, Any], new: dict[str, Any], *, has_command: bool) -> tuple[list[str], bool]:
    """The keys `new` adds, and whether the entry can be edited value by value (what wrap and unwrap
    do: values change, `args` may be added after `command`, the order stays) instead of written anew."""
    added = [k for k in new if k not in old]
    in_place = (
        all(k in new for k in old)
        and set(added) <= {"args"}
        and (not added or has_command)
        and list(new) == _order_after_insert(list(old), added)
    )
    return added, in_place


def read_text(path: Path) -> str:
    """A config file's text, or a ConfigError that says what is wrong with the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
