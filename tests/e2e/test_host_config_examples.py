"""examples/host-configs/README.md followed on Linux as a user follows it: the Claude Desktop example put
where the README says the Linux app reads it, its placeholders replaced, the key in the key file the README
advises (`init --key-file`), nothing in the entry's env. `doctor` finds the file and passes the entry, key
included, and the entry started as Claude Desktop starts it (the session's short PATH, none of the shell's
variables) serves the summarizer's tools."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PROXY, PY, ROOT, sdk_host

KEY = "sk-host-config-examples-0123456789"
EXAMPLES = ROOT / "examples" / "host-configs"
README = (EXAMPLES / "README.md").read_text()
INIT = "init --key-file ~/.config/mcp-sampling-proxy/openai.key"  # what the README says writes key file and policy
PROXY_SCRIPT = str(Path(PY).parent / "mcp-sampling-proxy")


def where_it_goes(example: str, system: str) -> str:
    """The path the README's table gives for `example` on `system` ("Linux", "macOS", "Windows")."""
    row = next(line for line in README.splitlines() if line.startswith(f"| `{example}` |"))
    found = re.search(rf"{system}[^`|]*`([^`]+)`", row.split(" | ")[2])
    assert found, f"the README gives no {system} path for {example}: {row}"
    return found[1]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, *args], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


@pytest.mark.anyio
async def test_the_claude_desktop_example_followed_on_linux(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    session = {"HOME": str(home), "USER": "me", "LOGNAME": "me", "LANG": "C.UTF-8", "SHELL": "/bin/sh"}
    session["XDG_RUNTIME_DIR"] = os.environ["XDG_RUNTIME_DIR"]
    shell = {**session, "PATH": os.environ["PATH"], "OPENAI_API_KEY": KEY}  # the terminal, with the key exported
    desktop = {**session, "PATH": "/usr/local/bin:/usr/bin:/bin"}  # what Claude Desktop gives the proxy

    with FakeLLMServer("openai", api_key=KEY, models=("gpt-4o-mini",)) as llm:
        assert f"mcp-sampling-proxy {INIT}" in README
        init = cli(shell, *INIT.split(), "--yes", "--llm", "openai", "--base-url", llm.base_url)
        assert init.returncode == 0, init.stderr
        policy = home / ".config" / "mcp-sampling-proxy" / "policy.yaml"

        path = Path(where_it_goes("claude_desktop_config.json", "Linux").replace("~", str(home), 1))
        path.parent.mkdir(parents=True)
        text = (EXAMPLES / "claude_desktop_config.json").read_text()
        for placeholder, value in (
            ("/ABSOLUTE/PATH/TO/mcp-sampling-proxy", PROXY_SCRIPT),
            ("/ABSOLUTE/PATH/TO/policy.yaml", str(policy)),
            ("/ABSOLUTE/PATH/TO/python", PY),
            ("/ABSOLUTE/PATH/TO/examples/", f"{ROOT / 'examples'}/"),
        ):
            text = text.replace(placeholder, value)
        assert "/ABSOLUTE/PATH/TO/" not in text
        path.write_text(text)
        entry: dict[str, Any] = json.loads(text)["mcpServers"]["summarizer"]
        assert "env" not in entry  # the key is in no host's file

        doctor = cli(shell, "doctor")
        assert doctor.returncode == 0, doctor.stdout
        assert f"Claude Desktop (user) {path}: 1 of 1 servers wrapped" in doctor.stdout
        assert (
            "✓ Claude Desktop 'summarizer': provider 'openai' key from its key file "
            "~/.config/mcp-sampling-proxy/openai.key, read by the proxy itself" in doctor.stdout
        )
        assert "✗" not in doctor.stdout

    async with sdk_host([entry["command"], *entry["args"]], desktop, tmp_path / "stderr.log") as client:
        tools = await client.list_tools()
    assert "summarize" in {tool.name for tool in tools.tools}
