"""What the wrap tests share, in process and as a command: the host config fixtures, the command run in
process, and the server entries of a host's file."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from mcp_sampling_proxy.commands.cli import main as cli_main
from mcp_sampling_proxy.hosts.config_files import load_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "host_configs"
SERVERS_KEY = {"vscode": "servers", "codex": "mcp_servers", "zed": "context_servers"}


def copy_fixture(tmp_path: Path, name: str) -> Path:
    target = tmp_path / "cfg" / name
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(FIXTURES / name, target)
    return target


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def servers_of(host: str, path: Path) -> dict[str, Any]:
    doc = load_config(path, host)
    return doc.servers(
        doc.tables()[0]
        if path.name.endswith("settings.json") and host == "vscode"
        else (SERVERS_KEY.get(host, "mcpServers"),)
    )
