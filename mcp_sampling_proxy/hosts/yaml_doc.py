"""Continue's YAML config files (`~/.continue/config.yaml`, `.continue/mcpServers/*.yaml`), edited in place.

Continue keeps servers as a LIST under `mcpServers:`, each item a mapping with a `name` (see
docs.continue.dev, "config.yaml reference" and "MCP"); the rest of this tool wants a table of entries
by key, so `servers()` maps each item's name to the item (the `name` stays in the entry).

Why by hand: no Python YAML library writes a file back with its comments and layout byte for byte
(PyYAML drops comments; ruamel.yaml re-emits and changes quoting, spacing and indentation of lines
it did not touch). So, like the JSONC editor, an edit replaces only the text of the values that
change, at the positions PyYAML's composed nodes report (`start_mark` / `end_mark` `.index`), and
writes new values as JSON-style flow scalars and sequences, which YAML reads the same way. Every
edit is parsed again and must give exactly the expected data, or nothing is written. What cannot be
edited safely that way is refused with FILE:LINE: anchors and aliases in `mcpServers` (one value
shared by several places), merge keys, a name used twice, an item without a name, a key repeated
inside an entry. Items that reference a hub block (`- uses: owner/block`) have no command of their
own here and are left out.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mcp_sampling_proxy.hosts.documents import ConfigDoc, in_place_edit, same_data
from mcp_sampling_proxy.hosts.jsonc import newline_of
from mcp_sampling_proxy.hosts.registry import ConfigError

SERVERS_KEY = "mcpServers"
# PyYAML (YAML 1.1) reads these plain words as booleans or null: a key spelled so must be quoted
_SPECIAL_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", ""}
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# characters PyYAML rejects in a stream, or reads as line breaks inside a quoted scalar
_UNSAFE_CHAR = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def yaml_string(value: str) -> str:
    """A double-quoted YAML scalar for `value` (a JSON string, which YAML reads the same way)."""
    return _UNSAFE_CHAR.sub(_escape, json.dumps(value, ensure_ascii=False))


def yaml_flow(value: Any) -> str:
    """`value` as a one-line JSON-style YAML flow value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        if "." not in mantissa:  # PyYAML's float needs a dot ("1e+20" would read as a string)
            mantissa += ".0"
        if e and exponent[0] not in "+-":
            exponent = "+" + exponent
        return mantissa + (e + exponent if e else "")
    if isinstance(value, str):
        return yaml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(yaml_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ConfigError("cannot write a mapping with non-string keys")
        return "{" + ", ".join(f"{yaml_string(k)}: {yaml_flow(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write a {type(value).__name__} value ({value!r}) back to YAML")


def yaml_key(key: str) -> str:
    if _PLAIN_KEY.fullmatch(key) and key.lower() not in _SPECIAL_WORDS:
        return key
    return yaml_string(key)


def tight_end(text: str, node: Node) -> int:
    """Where `node`'s own text ends. PyYAML's end mark of a block collection lies at the next token,
    past trailing blank lines and comments (and a block scalar's ends after its line breaks)."""
    if isinstance(node, MappingNode | SequenceNode) and not node.flow_style and node.value:
        last = node.value[-1]
        return tight_end(text, last[1] if isinstance(last, tuple) else last)
    end = node.end_mark.index
    if isinstance(node, ScalarNode):
        while end > node.start_mark.index and text[end - 1] in " \t\r\n":
            end -= 1
    return end


class YamlDoc(ConfigDoc):
    """One Continue YAML file: `mcpServers` is a list of entries identified by their `name`."""

    def __init__(self, path: Path, host: str, text: str):
        super().__init__(path, host, text)
        self.data = self._parse(self.text)
        try:
            self.root = yaml.compose(self.text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:  # _parse read it: not expected
            raise self._error(exc) from None
        except RecursionError:
            raise ConfigError(f"{self.path}: nested too deeply to read as an MCP config") from None
        self._items: dict[str, tuple[MappingNode, int]] | None = None

    # -- reading --------------------------------------------------------------------------------------

    def _error(self, exc: yaml.YAMLError) -> ConfigError:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"{context}, {problem}" if context else str(problem)
        if mark is None:
            return ConfigError(f"{self.path}: {message}")
        return ConfigError(f"{self.path}:{mark.line + 1}:{mark.column + 1}: {message}")

    def _parse(self, text: str) -> dict[str, Any]:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise self._error(exc) from None
        except RecursionError:  # a file nested thousands deep (any checked-out project may hold one)
            raise ConfigError(f"{self.path}: nested too deeply to read as an MCP config") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ConfigError(f"{self.path}:1:1: the file must hold a YAML mapping (name:, mcpServers:, ...)")
        return data

    def _line(self, node: Node) -> str:
        return f"{self.path}:{node.start_mark.line + 1}"

    def _servers_pair(self) -> tuple[ScalarNode, Node, int] | None:
        """The `mcpServers` key node, its value node, and where the pair's text ends (the next
        top-level key, or the end of the file)."""
        if not isinstance(self.root, MappingNode):
            return None
        pairs = self.root.value
        found = [i for i, (key, _) in enumerate(pairs) if isinstance(key, ScalarNode) and key.value == SERVERS_KEY]
        if not found:
            return None
        if len(found) > 1:
            raise ConfigError(
                f"{self._line(pairs[found[1]][0])}: a second {SERVERS_KEY}: key; YAML keeps only one "
                "of them, so merge the two lists"
            )
        i = found[0]
        end = pairs[i + 1][0].start_mark.index if i + 1 < len(pairs) else len(self.text)
        return pairs[i][0], pairs[i][1], end

    def _refuse_shared_values(self, start: int, end: int) -> None:
        """Anchors and aliases in the `mcpServers` text: an edit there could change other places."""
        try:
            for event in yaml.parse(self.text, Loader=yaml.SafeLoader):
                mark = event.start_mark
                if mark is None or not start <= mark.index < end:
                    continue
                anchor = getattr(event, "anchor", None)
                if anchor:  # an anchor (&name) or an alias (*name)
                    raise ConfigError(
                        f"{self.path}:{mark.line + 1}: {SERVERS_KEY} uses a YAML anchor or alias "
                        f"(&{anchor} / *{anchor}), a value shared with other places; "
                        "this tool does not edit shared values: write the value out in each place"
                    )
        except yaml.YAMLError as exc:
            raise self._error(exc) from None

    def _index(self) -> dict[str, tuple[MappingNode, int]]:
        """name -> (the item's node, its position in the list); every check that makes editing unsafe."""
        if self._items is not None:
            return self._items
        items: dict[str, tuple[MappingNode, int]] = {}
        pair = self._servers_pair()
        if pair is not None:
            key, value, end = pair
            self._refuse_shared_values(key.start_mark.index, end)
            if isinstance(value, ScalarNode) and value.tag.endswith(":null"):
                self._items = items
                return items
            if not isinstance(value, SequenceNode):
                raise ConfigError(
                    f"{self._line(value)}: {SERVERS_KEY} is not a list of server entries "
                    "(Continue's form: '- name: NAME' items with command/args or url)"
                )
            data = self.data.get(SERVERS_KEY)
            assert isinstance(data, list) and len(data) == len(value.value)
            for position, (node, entry) in enumerate(zip(value.value, data, strict=True)):
                if not isinstance(node, MappingNode) or not isinstance(entry, dict):
                    raise ConfigError(f"{self._line(node)}: an item of {SERVERS_KEY} is not a mapping")
                keys = [k.value for k, _ in node.value if isinstance(k, ScalarNode)]
                if len(keys) != len(node.value) or "<<" in keys:
                    raise ConfigError(
                        f"{self._line(node)}: an entry of {SERVERS_KEY} uses a merge key (<<) or a "
                        "complex key; this tool does not edit those: write the keys out"
                    )
                repeated = sorted({k for k in keys if keys.count(k) > 1})
                if repeated:
                    raise ConfigError(
                        f"{self._line(node)}: the key {repeated[0]!r} appears twice in this entry "
                        "(YAML keeps the last one); remove one"
                    )
                if "name" not in entry:
                    if "uses" in entry:
                        continue  # a hub block (`uses: owner/block`): nothing local to wrap
                    raise ConfigError(
                        f"{self._line(node)}: an entry of {SERVERS_KEY} has no name: Continue needs one (name: NAME)"
                    )
                name = entry["name"]
                if not isinstance(name, str):
                    raise ConfigError(f"{self._line(node)}: the entry's name {name!r} is not a string; quote it")
                if name in items:
                    first = items[name][0]
                    raise ConfigError(
                        f"{self._line(node)}: a second server named {name!r} (the first is at line "
                        f"{first.start_mark.line + 1}); this tool finds entries by name: rename one"
                    )
                items[name] = (node, position)
        self._items = items
        return items

    def servers(self, table: tuple[str, ...]) -> dict[str, Any]:
        if table != (SERVERS_KEY,):
            return {}
        items = self._index()
        data: list[Any] = self.data.get(SERVERS_KEY) or []
        return {name: data[position] for name, (_, position) in items.items()}

    def _item(self, name: str) -> MappingNode:
        return self._index()[name][0]

    # -- editing --------------------------------------------------------------------------------------

    def _expected(self, table: tuple[str, ...], name: str, value: Any) -> dict[str, Any]:
        position = self._index()[name][1]
        items = list(self.data[SERVERS_KEY])
        items[position] = value
        return {**self.data, SERVERS_KEY: items}

    def entry_span(self, table: tuple[str, ...], name: str) -> tuple[int, int]:
        node = self._item(name)
        return node.start_mark.index, tight_end(self.text, node)

    def _replace(self, table: tuple[str, ...], name: str, old: dict[str, Any], new: dict[str, Any]) -> str:
        text, item = self.text, self._item(name)
        newline = newline_of(text)
        members = {key.value: (key, value) for key, value in item.value}
        indent = " " * item.start_mark.column
        added, in_place = in_place_edit(old, new, has_command="command" in members)
        edits: list[tuple[int, int, str]] = []
        if in_place:
            for key, (_, node) in members.items():
                if not same_data(new[key], old[key]):
                    edits.append(self._value_edit(node, old[key], new[key], newline))
            if added:
                position = tight_end(text, members["command"][1])
                separator = ", " if item.flow_style else newline + indent
                edits.append((position, position, f"{separator}args: {yaml_flow(new['args'])}"))
        elif item.flow_style:
            edits.append((item.start_mark.index, item.end_mark.index, yaml_flow(new)))
        else:  # the entry's shape changes: its keys are written anew; unchanged pairs keep their text
            lines = []
            for key, value in new.items():
                if key in members and same_data(old.get(key), value):
                    key_node, value_node = members[key]
                    lines.append(text[key_node.start_mark.index : tight_end(text, value_node)])
                else:
                    lines.append(f"{yaml_key(key)}: {yaml_flow(value)}")
            edits.append((item.start_mark.index, tight_end(text, item), (newline + indent).join(lines)))
        for start, end, replacement in sorted(edits, reverse=True):
            text = text[:start] + replacement + text[end:]
        return text

    def _value_edit(self, node: Node, old: Any, new: Any, newline: str) -> tuple[int, int, str]:
        """The edit that turns `node` (holding `old`) into `new`. A block list that gains items in front
        (wrap) or loses them (unwrap) keeps its layout: one `- item` line each, at the list's column."""
        text = self.text
        if (
            isinstance(node, SequenceNode)
            and not node.flow_style
            and isinstance(old, list)
            and isinstance(new, list)
            and new
        ):
            column = node.start_mark.column
            dash = node.start_mark.index
            if len(new) > len(old) and same_data(new[len(new) - len(old) :], old):
                lines = "".join(f"- {yaml_flow(v)}{newline}{' ' * column}" for v in new[: len(new) - len(old)])
                return dash, dash, lines
            if len(new) < len(old) and same_data(old[len(old) - len(new) :], new):
                first_kept = node.value[len(old) - len(new)]
                line_start = text.rfind("\n", 0, first_kept.start_mark.index) + 1
                kept_dash = line_start + column
                if text[kept_dash : kept_dash + 1] == "-" and text[line_start:kept_dash].strip() == "":
                    return dash, kept_dash, ""
        return node.start_mark.index, tight_end(text, node), yaml_flow(new)
