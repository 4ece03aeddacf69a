"""Where the Python peers of the era tests live: hosts and servers on SDKs the proxy itself does not
use (`mcp` 1.x, FastMCP 3, FastMCP 4), each in a virtual environment of its own, which .ci/run
makes in the same cache directory as the npm parts (tests/helpers/npm_support.py). A peer that is missing
makes its tests skip, saying how to install it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.npm_support import CACHE, INSTALL_HINT

PEERS = CACHE / "py-peers"
SPECS = {"mcp1": "mcp==1.30.0", "fastmcp3": "fastmcp==3.4.11", "fastmcp4": "fastmcp==4.2.3"}
"""The peer environments and what each holds; .ci/run installs exactly these."""


def peer_python(name: str) -> str:
    """The interpreter of one peer environment, or skip naming it."""
    python = PEERS / name / "bin" / "python"
    stamp = PEERS / name / ".installed"
    if not python.is_file() or not stamp.is_file() or stamp.read_text().strip() != SPECS[name]:
        pytest.skip(f"the Python peer {name} ({SPECS[name]}) is not installed in {PEERS}: {INSTALL_HINT}")
    return str(python)


def peer_dir(name: str) -> Path:
    return PEERS / name
