"""The key file `init` writes and the proxy reads (`api_key_file:`): what may go in it, what it holds,
and writing it as its owner's alone (mode 0600 from its first byte, in a private directory)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from mcp_sampling_proxy.config.atomic import write_atomic
from mcp_sampling_proxy.config.keys import read_key_file
from mcp_sampling_proxy.config.providers import ProviderConfig

_ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")
_QUOTES = ("'", '"')


def not_a_bare_key(key: str) -> str | None:
    """Why `key` is not a key alone, never quoting it; None when it is. A shell line copied whole
    (`OPENAI_API_KEY=sk-...`, `export ...`) or a quoted key would be stored as is and end in a bare 401
    at every request."""
    assignment = _ASSIGNMENT.match(key)
    if assignment:
        return (
            f"reads `{assignment.group(1)}=...`, a shell line: give the key alone (the part after '=', without quotes)"
        )
    if key[:1] in _QUOTES or key[-1:] in _QUOTES:
        return "is wrapped in quotes: give the key alone, without them"
    return None


def stored_key(path: Path) -> str | None:
    """The key a key file holds already (None: no such file), read and refused as the proxy would
    (KeySourceError: a file others can read, a link, an empty file...)."""
    if not os.path.lexists(path):
        return None
    return read_key_file(ProviderConfig(name="init", type="openai", api_key_file=str(path)))


def write_key_file(path: Path, key: str) -> None:
    """The key file: yours, mode 0600 from its first byte, in a private directory when one is made."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, (key + "\n").encode("utf-8"), mode=0o600)
