"""JSON and JSONC host config files, edited in place at the positions the JSONC scanner recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp_sampling_proxy.hosts.documents import ConfigDoc, in_place_edit, same_data
from mcp_sampling_proxy.hosts.jsonc import JMember, indent_unit, line_indent, newline_of, parse_jsonc, render_json
from mcp_sampling_proxy.hosts.registry import ConfigError


class JsonDoc(ConfigDoc):
    def __init__(self, path: Path, host: str, text: str):
        super().__init__(path, host, text)
        self.root = parse_jsonc(self.text, str(path))
        if not isinstance(self.root.value, dict):
            raise ConfigError(f"{path}:1:1: the file must hold a JSON object")
        self.data = self.root.value

    def _parse(self, text: str) -> dict[str, Any]:
        value: dict[str, Any] = parse_jsonc(text, str(self.path)).value
        return value

    def servers(self, table: tuple[str, ...]) -> dict[str, Any]:
        if (
            self.host == "continue"
            and table == ("mcpServers",)
            and "mcpServers" not in self.data
            and ("command" in self.data or "url" in self.data)
        ):
            raise ConfigError(
                f"{self.path}: holds one server without a name (Continue's single-server JSON), which "
                'this tool does not edit; write it as {"mcpServers": {"NAME": {...}}}'
            )
        return super().servers(table)

    def _member(self, path: tuple[str, ...]) -> JMember:
        node, member = self.root, None
        for key in path:
            if node.members is None or key not in node.members:
                raise ConfigError(f"{self.path}: no {'.'.join(path)}")
            member = node.members[key]
            node = member.node
        assert member is not None
        return member

    def entry_span(self, table: tuple[str, ...], name: str) -> tuple[int, int]:
        node = self._member((*table, name)).node
        return node.start, node.end

    def _replace(self, table: tuple[str, ...], name: str, old: dict[str, Any], new: dict[str, Any]) -> str:
        text = self.text
        entry = self._member((*table, name))
        members = entry.node.members or {}
        newline, unit = newline_of(text), indent_unit(text)
        entry_multiline = "\n" in text[entry.node.start : entry.node.end]
        added, in_place = in_place_edit(old, new, has_command="command" in members)
        if not in_place:  # the entry's shape changes: write it anew in the file's style
            base = line_indent(text, entry.key_start)
            rendered = render_json(new, unit=unit, base=base, newline=newline, multiline=entry_multiline)
            return text[: entry.node.start] + rendered + text[entry.node.end :]
        edits: list[tuple[int, int, str]] = []
        for key, member in members.items():
            if key in new and not same_data(new[key], old[key]):
                node = member.node
                multiline = "\n" in text[node.start : node.end]
                base = line_indent(text, member.key_start)
                edits.append(
                    (
                        node.start,
                        node.end,
                        render_json(new[key], unit=unit, base=base, newline=newline, multiline=multiline),
                    )
                )
        if added:
            command = members["command"]
            base = line_indent(text, command.key_start)
            separator = f",{newline}{base}" if entry_multiline else ", "
            rendered = render_json(new["args"], unit=unit, base=base, newline=newline, multiline=entry_multiline)
            edits.append((command.node.end, command.node.end, f'{separator}"args": {rendered}'))
        for start, end, replacement in sorted(edits, reverse=True):
            text = text[:start] + replacement + text[end:]
        return text
