"""`wrap` names every server after its host config key by default (`--name`), so policy rules match the name
the user gave it, never the name a server reports of itself (tests/security/test_security_identity.py: a
server that calls itself `summarizer` gets no `summarizer` rule)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.support import run_subcommand


def test_wrap_names_every_server_after_its_host_config_key(tmp_path: Path) -> None:
    config = tmp_path / "claude_desktop_config.json"
    config.write_text(json.dumps({"mcpServers": {"summarizer": {"command": "uvx", "args": ["summarizer-mcp"]}}}))
    done = run_subcommand(["wrap", "--host", "claude-desktop", "--config", str(config), "--all"])
    assert done.returncode == 0, done.stderr
    args = json.loads(config.read_text())["mcpServers"]["summarizer"]["args"]
    assert args[args.index("--name") + 1] == "summarizer"
