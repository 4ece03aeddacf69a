"""The per-request HTTP headers of a 2026-era request (SEP-2243): `Mcp-Name`, and `Mcp-Param-*` for the
arguments a tool's input schema marks with `x-mcp-header`, so gateways can route without reading bodies.

Written here rather than taken from the SDK, whose module loads the whole `mcp` package (half a second
on every start of a `--url` proxy). The rules are the transport spec's: a header value is sent as it is
when it is visible ASCII without edge spaces, else as `=?base64?<UTF-8 in base64>?=`; a marked property
must be reachable from the schema's root through `properties` alone, be a string, integer or boolean,
and name an HTTP token unique (ignoring case) in the schema, or the tool gets no such headers.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

NAME_BEARING_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
MARK = "x-mcp-header"
PREFIX = "Mcp-Param-"
_VISIBLE = re.compile(r"[\x20-\x7e]*")
_WRAPPED = re.compile(r"=\?base64\?.*\?=")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_MARKABLE = ("string", "integer", "boolean")
# keywords whose values are schemas, off the `properties` chain (a mark under them is misplaced)
_ONE = (
    "items",
    "contains",
    "unevaluatedItems",
    "additionalProperties",
    "propertyNames",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
)
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_NAMED = ("patternProperties", "dependentSchemas", "$defs", "definitions")

HeaderMap = dict[tuple[str, ...], str]  # property path from the root -> header token


def encode_header_value(value: str) -> str:
    """`value` as an HTTP header carries it without loss."""
    if _VISIBLE.fullmatch(value) and value == value.strip() and not _WRAPPED.fullmatch(value):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def _positions(schema: Any) -> Iterator[tuple[tuple[str, ...] | None, dict[str, Any]]]:
    """Every schema position with its `properties` path (None once off that chain); no `$ref` is followed."""
    todo: list[tuple[tuple[str, ...] | None, Any]] = [((), schema)]
    while todo:
        path, node = todo.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                todo.extend(((*path, name) if path is not None else None, sub) for name, sub in value.items())
            elif key in _ONE:
                todo.append((None, value))
            elif key in _MANY and isinstance(value, list):
                todo.extend((None, sub) for sub in value)
            elif key in _NAMED and isinstance(value, dict):
                todo.extend((None, sub) for sub in value.values())


def header_map(schema: dict[str, Any]) -> HeaderMap:
    """The marked properties of a tool's input schema; empty when any mark breaks the rules."""
    found: HeaderMap = {}
    seen: set[str] = set()
    for path, node in _positions(schema):
        if MARK not in node:
            continue
        token = node[MARK]
        if (
            not path
            or not isinstance(token, str)
            or not _TOKEN.fullmatch(token)
            or node.get("type") not in _MARKABLE
            or token.lower() in seen
        ):
            return {}
        seen.add(token.lower())
        found[path] = token
    return found


def param_headers(marks: HeaderMap, arguments: dict[str, Any]) -> dict[str, str]:
    """The `Mcp-Param-*` headers of one call: each marked argument that is present, as text."""
    headers: dict[str, str] = {}
    for path, token in marks.items():
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int | float) and value is not None:
            try:
                text = str(value)
            except ValueError:  # an integer too long to print
                continue
        else:
            continue
        headers[PREFIX + token] = encode_header_value(text)
    return headers
