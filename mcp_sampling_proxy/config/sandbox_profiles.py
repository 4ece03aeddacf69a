"""Sandbox profiles for common servers: the `sandbox.servers` entry `wrap` suggests for each it wraps.

The sandbox's default leaves files and the network as the server would see them directly (servers
work unchanged); a profile narrows that to what the server is known to need: the filesystem server
writes only the directories it was given, the fetch server needs the network and none of your keys'
directories, the everything server needs neither. docs/sandbox.md has the table these come from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

HOME_READ_ONLY = '"~"'  # quoted: a bare ~ is YAML's null


def _package(word: str) -> str:
    """An npm or PyPI package name without its version: @scope/name@1.2 -> @scope/name, name==1 -> name."""
    word = word.split("==", 1)[0]
    if word.startswith("@"):
        scope, _, rest = word[1:].partition("/")
        return "@" + scope + "/" + rest.split("@", 1)[0]
    return word.split("@", 1)[0]


# where a package runner keeps its downloads: writable, or it cannot start the server under a read-only home
RUNNER_CACHES = {"npx": ["~/.npm"], "uvx": ["~/.cache/uv"], "uv": ["~/.cache/uv"], "pipx": ["~/.local/pipx"]}


def profile(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """The suggested entry (YAML flow mapping) for the server `argv` starts, or None when none is known."""
    found = _known(argv, env)
    if found is None:
        return None
    caches = RUNNER_CACHES.get(os.path.basename(argv[0]), []) if argv else []
    if caches:  # (and the network, to fetch the package)
        found = found.replace(", network: false", "")
        found = (
            found.replace("write: [", f"write: [{', '.join(caches)}, ", 1)
            if "write: [" in found
            else found[:-1] + f", write: [{', '.join(caches)}]}}"
        )
    return found


def _known(argv: Sequence[str], env: Mapping[str, str] | None) -> str | None:
    for index, word in enumerate(argv):
        name = _package(os.path.basename(word) if not word.startswith("@") else word)
        rest = [arg for arg in argv[index + 1 :] if not arg.startswith("-")]
        if name in ("@modelcontextprotocol/server-filesystem", "mcp-server-filesystem") and rest:
            return f"{{read: [{HOME_READ_ONLY}], write: [{', '.join(json.dumps(d) for d in rest)}]}}"
        if name in ("@modelcontextprotocol/server-memory", "mcp-server-memory"):
            memory = (env or {}).get("MEMORY_FILE_PATH")
            if memory:
                return f"{{read: [{HOME_READ_ONLY}], write: [{json.dumps(os.path.dirname(memory) or '.')}]}}"
            return None  # its file is in its own package directory: wherever npx put it
        if name in ("mcp-server-fetch", "@modelcontextprotocol/server-fetch"):
            return f"{{read: [{HOME_READ_ONLY}], hide: [~/.ssh, ~/.gnupg, ~/.aws]}}"
        if name in ("@modelcontextprotocol/server-everything", "mcp-server-everything"):
            return f"{{read: [{HOME_READ_ONLY}], network: false}}"
    return None
