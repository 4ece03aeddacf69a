"""A JSONC scanner that records where each value sits in the text, and JSON rendered in a file's own style.

Comments and trailing commas are accepted (VS Code's `mcp.json` allows both, Gemini CLI strips
comments). Our own on purpose: no Python library round-trips JSON with comments and trailing
commas (json5/commentjson-style parsers drop the comments on writing)."""

from __future__ import annotations

import json
import re
from typing import Any

from msgspec import Struct

from mcp_sampling_proxy.hosts.registry import ConfigError


class JNode(Struct):
    start: int
    end: int
    value: Any
    members: dict[str, JMember] | None = None  # objects


class JMember(Struct):
    key_start: int
    node: JNode


class _SyntaxProblem(Exception):
    def __init__(self, problem: str, pos: int):
        super().__init__(problem)
        self.problem = problem
        self.pos = pos


_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORDS = (("true", True), ("false", False), ("null", None))


class _Jsonc:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def fail(self, problem: str, pos: int | None = None) -> _SyntaxProblem:
        pos = self.pos if pos is None else pos
        if pos >= len(self.text):
            problem = f"unexpected end of file: {problem}"
        return _SyntaxProblem(problem, pos)

    def at(self, char: str) -> bool:
        return self.text.startswith(char, self.pos)

    def skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif text.startswith("//", self.pos):
                newline = text.find("\n", self.pos)
                self.pos = n if newline < 0 else newline + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.fail("unterminated /* comment")
                self.pos = end + 2
            else:
                return

    def document(self) -> JNode:
        node = self.value()
        self.skip()
        if self.pos < len(self.text):
            raise self.fail(f"unexpected {_describe(self.text[self.pos])} after the end of the JSON document")
        return node

    def value(self) -> JNode:
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail("expected a value")
        c, start = self.text[self.pos], self.pos
        if c == "{":
            return self.object()
        if c == "[":
            return self.array()
        if c == '"':
            return self._string_node()
        match = _NUMBER.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            literal = match.group()
            number: Any = float(literal) if any(ch in literal for ch in ".eE") else int(literal)
            return JNode(start, self.pos, number)
        for word, value in _WORDS:
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return JNode(start, self.pos, value)
        raise self.fail(f"unexpected {_describe(c)}: expected a value")

    def _string_node(self) -> JNode:
        start = self.pos
        value = self.string()
        return JNode(start, self.pos, value)

    def string(self) -> str:
        try:
            value, end = json.decoder.scanstring(self.text, self.pos + 1, True)  # type: ignore[attr-defined]
        except json.JSONDecodeError as exc:
            message = exc.msg
            if message.startswith("Unterminated string"):
                message = "unterminated string"
            elif message.startswith("Invalid control character"):
                message = "a control character (such as a raw line break) inside a string: write it as \\n"
            elif message.startswith("Invalid \\escape"):
                message = "invalid escape in a string"
            raise self.fail(message, exc.pos) from None
        self.pos = end
        return str(value)

    def object(self) -> JNode:
        start = self.pos
        self.pos += 1
        members: dict[str, JMember] = {}
        value: dict[str, Any] = {}
        while True:
            self.skip()
            if self.at("}"):
                self.pos += 1
                break
            if not self.at('"'):
                raise self.fail("expected a string key" + ("" if members else " or '}'"))
            key_start = self.pos
            key = self.string()
            self.skip()
            if not self.at(":"):
                raise self.fail(f"expected ':' after the key {json.dumps(key)}")
            self.pos += 1
            node = self.value()
            members[key] = JMember(key_start, node)
            value[key] = node.value
            self.skip()
            if self.at(","):
                self.pos += 1
            elif self.at("}"):
                self.pos += 1
                break
            else:
                raise self.fail("expected ',' or '}' after an object member")
        return JNode(start, self.pos, value, members=members)

    def array(self) -> JNode:
        start = self.pos
        self.pos += 1
        items: list[Any] = []
        while True:
            self.skip()
            if self.at("]"):
                self.pos += 1
                break
            items.append(self.value().value)
            self.skip()
            if self.at(","):
                self.pos += 1
            elif self.at("]"):
                self.pos += 1
                break
            else:
                raise self.fail("expected ',' or ']' after an array item")
        return JNode(start, self.pos, items)


def _describe(char: str) -> str:
    return repr(char) if char.isprintable() else f"character U+{ord(char):04X}"


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def parse_jsonc(text: str, where: str = "<text>") -> JNode:
    """Parse JSON with comments and trailing commas, keeping each value's span."""
    try:
        return _Jsonc(text).document()
    except _SyntaxProblem as exc:
        line, col = _line_col(text, exc.pos)
        raise ConfigError(f"{where}:{line}:{col}: {exc.problem}") from None
    except RecursionError:  # a config nested thousands deep (any checked-out project may hold one)
        raise ConfigError(f"{where}: nested too deeply to read as an MCP config") from None


# -- rendering values in a file's own style ------------------------------------------------------------


def line_indent(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    match = re.match(r"[ \t]*", text[start:pos])
    return match.group() if match else ""


def indent_unit(text: str) -> str:
    """The file's indentation step (the first indented line's), else two spaces."""
    match = re.search(r"\n([ \t]+)\S", text)
    if not match:
        return "  "
    return "\t" if match.group(1).startswith("\t") else match.group(1)


def newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def render_json(value: Any, *, unit: str, base: str, newline: str, multiline: bool) -> str:
    if not multiline or not isinstance(value, dict | list) or not value:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return json.dumps(value, ensure_ascii=False, indent=unit).replace("\n", newline + base)


# -- documents ----------------------------------------------------------------------------------------
