"""Codex's config.toml: read with `tomllib`, edited with `tomlkit`, which keeps comments, quoting and layout."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
import tomlkit.items

from mcp_sampling_proxy.hosts.documents import ConfigDoc, in_place_edit, same_data
from mcp_sampling_proxy.hosts.registry import ConfigError


class TomlDoc(ConfigDoc):
    """Codex's config.toml, edited with tomlkit (style-preserving: comments, key order, quoting, the
    layout of values it does not touch); tomllib reads the data and checks every edit."""

    def __init__(self, path: Path, host: str, text: str):
        super().__init__(path, host, text)
        self.data = self._parse(self.text)

    def _parse(self, text: str) -> dict[str, Any]:
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            message = str(exc)
            match = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
            if match:
                message = message[: match.start()]
                raise ConfigError(f"{self.path}:{match.group(1)}:{match.group(2)}: {message}") from None
            match = re.search(r"\s*\(at end of document\)$", message)
            if match:
                line = text.count("\n") + 1
                raise ConfigError(f"{self.path}:{line}:1: {message[: match.start()]} (at the end)") from None
            raise ConfigError(f"{self.path}: {message}") from None

    def _document(self) -> tomlkit.TOMLDocument:
        try:
            document = tomlkit.parse(self.text)
        except tomlkit.exceptions.TOMLKitError as exc:  # tomllib accepted it: a tomlkit limitation
            raise ConfigError(f"{self.path}: cannot edit this TOML in place ({exc})") from None
        if document.as_string() != self.text:
            raise ConfigError(f"{self.path}: this TOML does not survive a round trip through tomlkit; nothing written")
        return document

    def _item(self, document: tomlkit.TOMLDocument, table: tuple[str, ...], name: str) -> Any:
        node: Any = document
        for key in (*table, name):
            node = node[key]
        if not isinstance(node, tomlkit.items.Table | tomlkit.items.InlineTable):
            raise ConfigError(
                f"{self.path}: server '{name}' is not written as a [{'.'.join((*table, name))}] table "
                "or an inline table, which is all this tool edits; move it into its own table"
            )
        return node

    def entry_text(self, table: tuple[str, ...], name: str) -> str:
        """The entry's text as the file holds it: a table's body (below its header) or an inline table."""
        return str(self._item(self._document(), table, name).as_string())

    def entry_span(self, table: tuple[str, ...], name: str) -> tuple[int, int]:
        body = self.entry_text(table, name)
        start = self.text.find(body)
        if start < 0 or self.text.find(body, start + 1) >= 0:
            raise ConfigError(
                f"{self.path}: cannot tell where server '{name}' is written (its text is not in one "
                "place, or appears twice)"
            )
        return start, start + len(body)

    def _replace(self, table: tuple[str, ...], name: str, old: dict[str, Any], new: dict[str, Any]) -> str:
        document = self._document()
        item = self._item(document, table, name)
        added, in_place = in_place_edit(old, new, has_command="command" in old)
        if in_place:
            for key in old:
                if same_data(new[key], old[key]):
                    continue
                if not _reshape_array(item[key], old[key], new[key]):
                    item[key] = _toml_like(new[key], item[key])
            if added:
                container = item.value if isinstance(item, tomlkit.items.Table) else item
                container._insert_after("command", "args", _toml_like(new["args"], None))
        else:  # the entry's shape changes: its keys are written anew, in order, under the same header
            for key in list(item.keys()):
                del item[key]
            for key, value in new.items():
                item[key] = value
        return str(document.as_string())


def _reshape_array(array: Any, old: Any, new: Any) -> bool:
    """Turn the array `old` into `new` in place when one ends with the other (wrap puts the proxy's
    arguments in front, unwrap takes them off), so its items keep their layout and indentation."""
    if not (isinstance(array, tomlkit.items.Array) and isinstance(old, list) and isinstance(new, list)):
        return False
    if len(new) >= len(old) and same_data(new[len(new) - len(old) :], old):
        for value in reversed(new[: len(new) - len(old)]):
            array.insert(0, value)
        return True
    if len(new) < len(old) and same_data(old[len(old) - len(new) :], new):
        for _ in range(len(old) - len(new)):
            array.pop(0)
        return True
    return False


def _toml_like(value: Any, old: Any) -> Any:
    """`value` as a tomlkit item; a list replacing a multi-line array stays multi-line."""
    if isinstance(value, list):
        array = tomlkit.array()
        array.extend(value)
        text = old.as_string() if isinstance(old, tomlkit.items.Array) else ""
        if "\n" in text:
            array.multiline(True)
        return array
    return value


# -- writing ------------------------------------------------------------------------------------------
