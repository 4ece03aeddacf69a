"""docs/getting-started.md's install without pipx or uv, run as written in a fresh copy of the checkout:
the virtual environment's command works, and `wrap` run from it writes its absolute path, which Claude
Desktop, whose PATH leads nowhere near the checkout, then starts.

pip resolves the dependencies from the wheels .ci/run downloads for this pyproject.toml's requirements
(the CI cache's `wheelhouse`, tests/helpers/wheelhouse.py) when they are there, else from the package
index: reading the index's pages was most of the install's CPU, and CI's own install of the checkout
reads them on every run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.npm_support import CACHE
from helpers.support import INITIALIZE_LINE, MINIMAL_SERVER, PY, ROOT
from helpers.wheelhouse import matching

GUIDE = (ROOT / "docs" / "getting-started.md").read_text()
LEFT_OUT = shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__", ".*_cache", "site", "dist", "build")


def wheelhouse() -> Path | None:
    """The dependencies' wheels .ci/run downloaded for this pyproject.toml's requirements, if it did."""
    return matching(CACHE / "wheelhouse", ROOT / "pyproject.toml")


def install_section() -> str:
    return GUIDE.split("## 2. Install", 1)[1].split("\n## ", 1)[0]


def sh_blocks(text: str) -> list[list[str]]:
    """The lines of each ```sh block, without comments."""
    blocks = [block.split("```", 1)[0] for block in text.split("```sh\n")[1:]]
    return [[line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()] for block in blocks]


def test_the_guide_says_what_to_do_when_pipx_puts_the_command_off_path() -> None:
    section = install_section()
    assert sh_blocks(section)[0] == ["pipx install ."]
    assert "`pipx ensurepath`" in section and "`~/.local/bin/mcp-sampling-proxy` runs it" in section


def test_the_venv_install_runs_as_written_and_hosts_find_it(tmp_path: Path) -> None:
    checkout = tmp_path / "mcp-sampling-proxy"
    shutil.copytree(ROOT, checkout, ignore=LEFT_OUT)
    venv_block = sh_blocks(install_section())[1]
    assert venv_block[0] == "python3 -m venv .venv && .venv/bin/pip install ."
    # the user's terminal: this test's HOME and XDG dirs, a PATH without the test's own environment
    own = str(Path(PY).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != own)
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_SAMPLING_PROXY_", "VIRTUAL_ENV"))}
    shell["PATH"] = path
    # pip's byte-compiling of every installed module (a sixth of the install's CPU) is no part of what is
    # checked here: the modules a run imports are compiled by that run. PIP_COMPILE=0, not PIP_NO_COMPILE=1,
    # which pip reads as --compile (a negative option's variable takes the value of its positive twin)
    shell["PIP_COMPILE"] = "0"
    wheels = wheelhouse()
    if wheels is not None:  # pip's own settings, as a user's pip.conf would give them: the commands are as written
        shell.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels))
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "Claude" / "claude_desktop_config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"mcpServers": {"notes": {"command": PY, "args": ["-c", MINIMAL_SERVER]}}}))

    script = "set -e\n" + "\n".join(venv_block) + "\nmcp-sampling-proxy wrap --host claude-desktop --all\n"
    done = subprocess.run(["sh", "-c", script], cwd=checkout, env=shell, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "No matching distribution found" in done.stderr:
        pytest.skip(f"pip could not reach a package index for the dependencies: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    entry = json.loads(config.read_text())["mcpServers"]["notes"]
    assert entry["command"] == str(checkout / ".venv" / "bin" / "mcp-sampling-proxy")

    desktop = {name: os.environ[name] for name in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR")}
    desktop["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    started = subprocess.run(
        [entry["command"], *entry["args"]],
        env=desktop,
        input=INITIALIZE_LINE,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert started.returncode == 0 and '"serverInfo"' in started.stdout, started.stderr
