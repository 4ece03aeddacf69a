"""Sandbox profiles for common servers: the `sandbox.servers` entry `wrap` writes for each it knows.

The sandbox grants, it does not exempt: by default a server writes nothing of yours but its own data
directory (and a package runner's cache of its own, which the sandbox adds itself), sees none of your
secrets, and reaches public hosts through the proxy. A profile grants what the server is known to need,
and takes away what it is known not to: the filesystem server writes the directories it was given, the
memory server its file, the everything server needs no network, the fetch server the public web. A
server that needs no network but is started by a package runner (npx, uvx) still reaches the runner's
registry: its own cache starts empty (config/runners.py).
docs/sandbox.md has the table these come from; an unknown server gets the safe default.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence

from mcp_sampling_proxy.config.runners import runner_of

# a package's directory inside node_modules, in a command that starts its script directly
_NODE_MODULES = re.compile(r"node_modules/(@[^/]+/[^/]+|[^/@.][^/]*)/")


def _package(word: str) -> str:
    """An npm or PyPI package name without its version: @scope/name@1.2 -> @scope/name, name==1 -> name;
    a script inside node_modules -> its package."""
    found = _NODE_MODULES.search(word.replace(os.sep, "/"))
    if found:
        return found[1]
    word = word.split("==", 1)[0]
    if word.startswith("@"):
        scope, _, rest = word[1:].partition("/")
        return "@" + scope + "/" + rest.split("@", 1)[0]
    return os.path.basename(word).split("@", 1)[0]


def profile(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """The entry (a YAML flow mapping) for the server `argv` starts, or None when none is known."""
    runner = runner_of(argv)
    offline = "false" if runner is None else "[" + ", ".join(runner.registry) + "]"  # no network but its packages
    for index, word in enumerate(argv):
        name = _package(word)
        rest = [arg for arg in argv[index + 1 :] if not arg.startswith("-")]
        if name in ("@modelcontextprotocol/server-filesystem", "mcp-server-filesystem") and rest:
            directories = ", ".join(json.dumps(os.path.abspath(os.path.expanduser(d))) for d in rest)
            return f"{{write: [{directories}], network: {offline}}}"
        if name in ("@modelcontextprotocol/server-memory", "mcp-server-memory"):
            memory = (env or {}).get("MEMORY_FILE_PATH")
            if memory:
                folder = os.path.dirname(os.path.abspath(os.path.expanduser(memory)))
                return f"{{write: [{json.dumps(folder)}], network: {offline}}}"
            return f"{{network: {offline}}}"  # its file is in its own package directory: the runner's cache
        if name in ("mcp-server-fetch", "@modelcontextprotocol/server-fetch"):
            return "{network: true}"  # the public web, through the proxy; a list of hosts narrows it
        if name in ("@modelcontextprotocol/server-everything", "mcp-server-everything"):
            return f"{{network: {offline}}}"
    return None
