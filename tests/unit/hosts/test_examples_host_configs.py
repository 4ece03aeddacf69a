"""The host config examples do what their README says: every path they name is absolute (GUI hosts start
servers with a minimal PATH and an unknown working directory), and each is the host's valid JSON with
the proxy in front of the summarizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.support import ROOT

EXAMPLES = sorted((ROOT / "examples" / "host-configs").glob("*.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_path_an_example_names_is_absolute(path: Path) -> None:
    config = json.loads(path.read_text())
    servers = config.get("mcpServers") or config.get("servers")
    entry = servers["summarizer"]
    args = entry["args"]
    assert entry["command"].startswith("/ABSOLUTE/PATH/TO/"), entry["command"]
    assert entry["command"].endswith("mcp-sampling-proxy")
    server = args[args.index("--") + 1 :]
    assert server[0].startswith("/ABSOLUTE/PATH/TO/") and server[1].startswith("/ABSOLUTE/PATH/TO/"), server
    assert args[args.index("--policy") + 1].startswith("/ABSOLUTE/PATH/TO/")
