"""A host started from the desktop (Claude Desktop) starts the proxy with the session's short PATH, not your
shell's: a server command found only in ~/.local/bin works in the terminal and fails under the host. Each test
builds that environment (PATH=/usr/local/bin:/usr/bin:/bin, the test's HOME and XDG dirs, no terminal),
starts the host config's entry in it as the host does, and checks that `doctor` and `wrap`, run from the
user's shell, say what will happen there."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers.support import INITIALIZE_LINE, MINIMAL_SERVER, PY, UNCONFINED, proxy_env, write_policy

DESKTOP_PATH = "/usr/local/bin:/usr/bin:/bin"  # what Claude Desktop's proxy gets on Linux
PROXY_SCRIPT = str(Path(PY).parent / "mcp-sampling-proxy")  # the installed command, as wrap writes it
# what a desktop session gives every app besides PATH: the test's own home and directories
SESSION_VARS = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR")


@pytest.fixture
def home() -> Path:
    """The test's home (tests/conftest.py), with a server installed where pipx puts commands: ~/.local/bin."""
    home = Path(os.environ["HOME"])
    (home / ".local" / "bin").mkdir(parents=True)
    server = home / ".local" / "share" / "userpath.py"
    server.parent.mkdir(parents=True)
    server.write_text(MINIMAL_SERVER)
    command = home / ".local" / "bin" / "userpath"
    command.write_text(f"#!/bin/sh\nexec {PY} {server}\n")
    command.chmod(0o755)
    return home


@pytest.fixture
def policy(tmp_path: Path) -> str:
    """No sandbox: these tests are about finding the command (the sandbox's private /tmp would hide the
    test's home from the server)."""
    return write_policy(tmp_path, UNCONFINED)


def config_file() -> Path:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "Claude" / "claude_desktop_config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def shell_env(home: Path) -> dict[str, str]:
    """The user's terminal: ~/.local/bin on PATH, as ~/.profile puts it there."""
    return proxy_env(PATH=f"{home / '.local' / 'bin'}{os.pathsep}{os.environ['PATH']}")


def desktop_env() -> dict[str, str]:
    """What Claude Desktop gives the proxy it starts: the session's variables, its short PATH, none of the
    shell's exports."""
    return {**{name: os.environ[name] for name in SESSION_VARS}, "PATH": DESKTOP_PATH}


def command(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`mcp-sampling-proxy ARGV` typed in the user's terminal."""
    return subprocess.run(
        [PROXY_SCRIPT, *argv], env=shell_env(home), capture_output=True, text=True, timeout=120, cwd=home
    )


def start_as_host(entry: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The entry started as a host starts it, without a terminal, sent an initialize."""
    return subprocess.run(
        [entry["command"], *entry["args"]],
        env=env,
        input=INITIALIZE_LINE,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
        cwd="/",
    )


def entry_of(path: Path, name: str) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(path.read_text())["mcpServers"][name]
    return entry


def wrapped_line(out: str, name: str) -> list[str]:
    return [line.strip() for line in out.split("\nwrapped servers\n", 1)[1].splitlines() if f"'{name}'" in line]


def test_doctor_judges_a_desktop_hosts_command_with_the_desktop_path(home: Path, policy: str) -> None:
    """The entry works from the terminal and exits 127 under Claude Desktop; doctor, run from that
    terminal, used to pass it (`✓ ... upstream ~/.local/bin/userpath`)."""
    path = config_file()
    path.write_text(
        json.dumps(
            {"mcpServers": {"notes": {"command": PROXY_SCRIPT, "args": ["--policy", policy, "--", "userpath"]}}},
            indent=2,
        )
    )
    entry = entry_of(path, "notes")
    from_terminal = start_as_host(entry, shell_env(home))
    assert from_terminal.returncode == 0 and '"serverInfo"' in from_terminal.stdout, from_terminal.stderr
    from_desktop = start_as_host(entry, desktop_env())
    assert from_desktop.returncode == 127
    assert "command 'userpath' not found on PATH" in from_desktop.stderr

    doctor = command(home, "doctor")
    assert doctor.returncode == 1, doctor.stdout
    lines = wrapped_line(doctor.stdout, "notes")
    assert not any("upstream" in line and line.startswith("✓") for line in lines), lines
    problem = next(line for line in lines if line.startswith("✗"))
    assert problem.startswith(
        "✗ Claude Desktop 'notes': Claude Desktop will not find the server command 'userpath': it is not on the "
        "PATH Claude Desktop starts servers with"
    )
    assert f"PATH={DESKTOP_PATH}" in problem and "only your shell finds it, at ~/.local/bin/userpath" in problem
    fix = doctor.stdout.split(problem, 1)[1].splitlines()[1].strip()
    assert fix.startswith(f"fix: write its absolute path {home}/.local/bin/userpath in the entry: run ")
    assert "`mcp-sampling-proxy unwrap --host claude-desktop" in fix and "then wrap it again" in fix

    # the fix doctor gives: unwrap gives back the bare command; wrapping that again writes its absolute
    # path, which the host then starts and doctor passes (the next test wraps such an entry)
    assert command(home, "unwrap", "--host", "claude-desktop", "--all").returncode == 0
    assert entry_of(path, "notes") == {"command": "userpath"}


def test_wrap_writes_the_absolute_path_of_a_command_the_desktop_host_would_not_find(home: Path, policy: str) -> None:
    """`wrap` used to write the bare name, say "wrapped" and exit 0, and Claude Desktop then could not start
    the server. A command only the shell finds is written as its absolute path (and wrap says so); one
    nobody finds is wrapped with a warning that the host will not find it; one the host finds is left as
    it is; `unwrap` gives the file back byte for byte. ('notes' is the entry as `unwrap` gives it back in
    the test above: this is the end of doctor's fix too.)"""
    path = config_file()
    path.write_text(
        "{\n"
        '  "mcpServers": {\n'
        '    "notes": { "command": "userpath", "args": [] },\n'
        '    "ghost": { "command": "mcp-server-ghost" },\n'
        '    "shell": { "command": "sh", "args": ["-c", "exec python3 -V"] }\n'
        "  }\n"
        "}\n"
    )
    original = path.read_bytes()

    wrap = command(home, "wrap", "--host", "claude-desktop", "--all", "--policy", policy)
    assert wrap.returncode == 0, wrap.stderr
    absolute = f"{home}/.local/bin/userpath"
    assert (
        f"notes  wrapped: userpath; 'userpath' written as {absolute} (Claude Desktop would not find it on the PATH "
        f"it starts servers with, {DESKTOP_PATH})" in wrap.stdout
    )
    assert (
        "warning: Claude Desktop will not find the server command 'mcp-server-ghost': it is on neither the PATH "
        f"it starts servers with ({DESKTOP_PATH}) nor yours; install it, or write its absolute path in the entry"
    ) in wrap.stdout
    assert entry_of(path, "notes")["args"][-2:] == ["--", absolute]
    assert entry_of(path, "ghost")["args"][-2:] == ["--", "mcp-server-ghost"]
    assert entry_of(path, "shell")["args"][-3:] == ["sh", "-c", "exec python3 -V"]  # on the desktop PATH too

    started = start_as_host(entry_of(path, "notes"), desktop_env())
    assert started.returncode == 0 and '"serverInfo"' in started.stdout, started.stderr
    doctor = command(home, "doctor")
    assert f"✓ Claude Desktop 'notes': upstream {absolute}" in wrapped_line(doctor.stdout, "notes")
    assert any(line.startswith("✗ Claude Desktop 'ghost'") for line in wrapped_line(doctor.stdout, "ghost"))

    assert command(home, "unwrap", "--host", "claude-desktop", "--all").returncode == 0
    assert path.read_bytes() == original
