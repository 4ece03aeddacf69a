"""The policy's `tools:` section: what happens when a server's tools change, and rules for tool calls.

    tools:
      on_change: ask          # ask (default) | deny | allow: a changed or new tool of a known server
      pin: true               # false: no pinning at all (rules still apply)
      rules:
        - name: no-rm
          server: "files*"    # glob over the operator's name for the server (default: any)
          tool: "delete_*"    # glob over the tool's name (default: any)
          client: "intern-*"  # glob over the caller's name under `serve` (default: any caller)
          arguments: '"path":"/etc'   # regex over the arguments' canonical JSON (optional)
          action: prompt      # allow | deny | prompt
          message: deleting files needs a human

First matching rule wins; with none, a call is allowed. A `deny` rule without `arguments` hides the
tool from `tools/list` too; with `arguments` it refuses only the calls it matches. `why_not` is the
matching, shared by the proxy (services/tools.py) and `policy explain --call`.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from typing import Any, Literal, cast, get_args

from msgspec import Struct

from mcp_sampling_proxy.notation.vocabulary import ACTIONS, Action
from mcp_sampling_proxy.notation.yamlnodes import Node
from mcp_sampling_proxy.text.identity import normalise
from mcp_sampling_proxy.text.sanitize import one_line

OnChange = Literal["ask", "deny", "allow"]
ON_CHANGE: tuple[OnChange, ...] = get_args(OnChange)
TOOLS_KEYS = ("on_change", "pin", "rules")
RULE_KEYS = ("name", "server", "tool", "client", "arguments", "action", "message")


class ToolRule(Struct, frozen=True):
    """One `tools.rules` entry; an empty glob tuple matches anything."""

    name: str
    action: Action
    servers: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    clients: tuple[str, ...] = ()  # the caller's name under `serve` (a bearer token's name)
    arguments: re.Pattern[str] | None = None
    message: str | None = None
    line: int = 0


class ToolSettings(Struct, frozen=True):
    on_change: OnChange = "ask"
    pin: bool = True
    rules: tuple[ToolRule, ...] = ()


def _globs(node: Node) -> tuple[str, ...]:
    items = node.strings() if node.is_sequence() else [node.str()]
    if not items or any(not item for item in items):
        raise node.error(f'{node.label} needs a glob or a list of globs (e.g. "delete_*")')
    return tuple(items)


def _rule(node: Node, index: int) -> ToolRule:
    fields = node.mapping(RULE_KEYS)
    if "action" not in fields:
        raise node.error(f"tools rule {index + 1} needs an action: one of {', '.join(ACTIONS)}")
    return ToolRule(
        name=fields["name"].str() if "name" in fields else f"tools-rule-{index + 1}",
        action=cast(Action, fields["action"].choice(ACTIONS)),
        servers=_globs(fields["server"]) if "server" in fields else (),
        tools=_globs(fields["tool"]) if "tool" in fields else (),
        clients=_globs(fields["client"]) if "client" in fields else (),
        arguments=fields["arguments"].regex() if "arguments" in fields else None,
        message=fields["message"].str() if "message" in fields else None,
        line=node.node.start_mark.line + 1,
    )


def parse_tools(node: Node) -> ToolSettings:
    """The `tools:` section; errors name FILE:LINE:COL."""
    given = node.mapping(TOOLS_KEYS)
    rules: list[ToolRule] = []
    if "rules" in given:
        seen: set[str] = set()
        for index, rnode in enumerate(given["rules"].sequence()):
            rule = _rule(rnode, index)
            if rule.name in seen:
                raise rnode.error(f"tools rule name '{rule.name}' is used twice; names must be unique")
            seen.add(rule.name)
            rules.append(rule)
    return ToolSettings(
        on_change=cast(OnChange, given["on_change"].choice(ON_CHANGE)) if "on_change" in given else "ask",
        pin=given["pin"].bool() if "pin" in given else True,
        rules=tuple(rules),
    )


def _glob(value: str, patterns: tuple[str, ...], *, name: bool = False) -> bool:
    if not patterns:
        return True
    if name:  # a server's name: compared as `server:` rules compare it
        return any(fnmatch.fnmatchcase(normalise(value), normalise(p)) for p in patterns)
    return any(fnmatch.fnmatchcase(value, p) for p in patterns)


def canonical_arguments(arguments: Any) -> str:
    """What an `arguments` regex reads: the arguments as JSON, keys sorted, no spaces, with every absolute
    path in its normal form: `/home/../etc/passwd` is `/etc/passwd`, so a rule about paths outside /home
    (`"path":"/(?!home/)`) is not walked around with `..`, `.` or doubled slashes."""
    return json.dumps(
        _normal_paths(arguments if arguments is not None else {}),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


_UNNORMAL = re.compile(r"/\.{1,2}(?:/|$)|//")


def _normal_paths(value: Any) -> Any:
    """`value` with each string that is an absolute path (`/...`, `~/...`) normalised lexically."""
    if isinstance(value, str):
        if value.startswith(("/", "~/")) and _UNNORMAL.search(value):
            head = "~" if value.startswith("~/") else ""
            normal = posixpath.normpath(value[len(head) :])
            return head + ("/" + normal.lstrip("/") if normal.startswith("/") else normal)
        return value
    if isinstance(value, dict):
        return {key: _normal_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normal_paths(item) for item in value]
    return value


def why_not(
    rule: ToolRule,
    server: str,
    tool: str,
    arguments: Any = None,
    *,
    listing: bool = False,
    client: str | None = None,
) -> str | None:
    """Why `rule` does not decide this call (or, `listing`, this tool in a tools/list) by `client`;
    None when it does."""
    if not _glob(server, rule.servers, name=True):
        return f"server '{one_line(server, 80)}' does not match {', '.join(repr(p) for p in rule.servers)}"
    if not _glob(tool, rule.tools):
        return f"tool '{one_line(tool, 80)}' does not match {', '.join(repr(p) for p in rule.tools)}"
    if rule.clients:
        patterns = ", ".join(repr(p) for p in rule.clients)
        if client is None:
            return f"no client name (only `serve` with tokens names its caller), so client does not match {patterns}"
        if not _glob(client, rule.clients, name=True):
            return f"client '{one_line(client, 80)}' does not match {patterns}"
    if rule.arguments is not None:
        if listing:
            return "it has an arguments condition, which only a call can meet"
        text = canonical_arguments(arguments)
        if rule.arguments.search(text) is None:
            return f"the arguments {one_line(text, 120)} do not match /{rule.arguments.pattern}/"
    return None
