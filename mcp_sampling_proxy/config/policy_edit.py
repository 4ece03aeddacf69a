"""Add servers' sandbox profiles to a policy file's text, keeping everything else byte for byte.

`wrap` writes the `sandbox.servers` entry of each server it knows (config/sandbox_profiles.py) into the
policy the wrapped servers will use. The policy is the user's file, with their comments and layout, so
the edit is textual: a line `NAME: {...}` under `servers:` (made under `sandbox:`, or a new `sandbox:`
section at the end), indented as its neighbours are. An entry the user already wrote is kept as it is.
The result is parsed again and must give each added server the grants of its profile, or nothing changes.
"""

from __future__ import annotations

import json
import re

from msgspec import Struct

from mcp_sampling_proxy.notation.yamlnodes import PolicyError


class Edited(Struct, frozen=True):
    """The new text, the servers whose entry was added, and those that had one already (kept)."""

    text: str
    added: tuple[str, ...]
    kept: tuple[str, ...]


class CannotEdit(ValueError):
    """The policy's `sandbox:` cannot take entries here (`sandbox: off` on one line): the message says so."""


_TOP_KEY = re.compile(r"^(?P<key>[A-Za-z_][\w-]*)\s*:(?P<rest>.*)$")


def add_profiles(text: str, entries: list[tuple[str, str]], where: str = "policy") -> Edited:
    """`text` with a `sandbox.servers` entry for each (name, flow mapping) it does not have yet."""
    from mcp_sampling_proxy.config.settings import parse_settings  # (settings imports this module's layer)

    before = parse_settings(text, where) if text.strip() else None
    existing = set(before.sandbox.servers) if before is not None else set()
    fresh = [(name, flow) for name, flow in entries if name not in existing]
    kept = tuple(name for name, _ in entries if name in existing)
    if not fresh:
        return Edited(text, (), kept)
    lines = [f"{_key(name)}: {flow}" for name, flow in fresh]
    edited = _insert(text, lines)
    try:
        after = parse_settings(edited, where)
    except PolicyError as exc:  # pragma: no cover - a profile the grammar refuses is a bug of ours
        raise CannotEdit(f"the edited policy would not parse ({exc}); add the entries by hand") from None
    for name, flow in fresh:
        alone = parse_settings(f"sandbox:\n  servers:\n    {_key(name)}: {flow}\n", where).sandbox.servers[name]
        got = after.sandbox.servers.get(name)
        network_differs = "network" in flow and got is not None and got.network != alone.network
        if got is None or not set(alone.write) <= set(got.write) or network_differs:
            raise CannotEdit(f"the entry for {name!r} would not read as written; add it by hand")
    return Edited(edited, tuple(name for name, _ in fresh), kept)


def _insert(text: str, lines: list[str]) -> str:
    """The lines placed under `sandbox:` / `servers:`, made where missing."""
    newline = "\r\n" if "\r\n" in text else "\n"
    rows = text.splitlines(keepends=True)
    if rows and not rows[-1].endswith(("\n", "\r")):
        rows[-1] += newline
    sandbox = _top_level(rows, "sandbox")
    if sandbox is None:
        block = ["sandbox:", "  servers:", *(f"    {line}" for line in lines)]
        gap = [newline] if rows and rows[-1].strip() else []
        return "".join([*rows, *gap, *(line + newline for line in block)])
    value = _TOP_KEY.match(rows[sandbox].rstrip("\r\n"))
    assert value is not None
    rest = value["rest"].split("#", 1)[0].strip()
    if rest:
        raise CannotEdit(
            f"the policy says `sandbox: {rest}` on one line; write the servers' entries under sandbox.servers by hand"
        )
    end = _block_end(rows, sandbox)
    children = [i for i in range(sandbox + 1, end) if rows[i].strip() and not rows[i].lstrip().startswith("#")]
    indent = _indent(rows[children[0]]) if children else "  "
    servers = next((i for i in children if rows[i].strip().startswith("servers:") and _indent(rows[i]) == indent), None)
    if servers is None:
        block = [f"{indent}servers:", *(f"{indent}  {line}" for line in lines)]
        return "".join([*rows[: sandbox + 1], *(line + newline for line in block), *rows[sandbox + 1 :]])
    if rows[servers].split(":", 1)[1].split("#", 1)[0].strip():
        raise CannotEdit("the policy writes sandbox.servers on one line; add the servers' entries there by hand")
    inner_end = _block_end(rows, servers)
    entries = [i for i in range(servers + 1, inner_end) if rows[i].strip() and not rows[i].lstrip().startswith("#")]
    child = _indent(rows[entries[0]]) if entries else indent + "  "
    at = (entries[-1] + 1) if entries else servers + 1
    while at < inner_end and _indent(rows[at]) > child and rows[at].strip():  # the last entry's own lines
        at += 1
    return "".join([*rows[:at], *(child + line + newline for line in lines), *rows[at:]])


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}  # YAML 1.1 reads these as values


def _key(name: str) -> str:
    """A server's name as a YAML key: plain when YAML reads it back as that string, else quoted."""
    return name if _PLAIN.fullmatch(name) and name.lower() not in _WORDS else json.dumps(name)


def _top_level(rows: list[str], key: str) -> int | None:
    for index, row in enumerate(rows):
        match = _TOP_KEY.match(row.rstrip("\r\n"))
        if match and match["key"] == key:
            return index
    return None


def _block_end(rows: list[str], start: int) -> int:
    """The first row after `start` indented no deeper than it (comments and blank rows do not end it)."""
    depth = len(_indent(rows[start]))
    for index in range(start + 1, len(rows)):
        row = rows[index]
        if row.strip() and not row.lstrip().startswith("#") and len(_indent(row)) <= depth:
            return index
    return len(rows)


def _indent(row: str) -> str:
    return row[: len(row) - len(row.lstrip(" "))]
