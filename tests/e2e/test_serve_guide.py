"""docs/guides/serve.md followed as written, from a fresh clone, with the guide's own commands.

The clone is made with `git clone` of this checkout (with its uncommitted changes laid over, so the
test checks what is being worked on). Its `.venv` is this run's virtual environment, linked rather than
installed again (a minute of pip on a busy machine), with the clone first on PYTHONPATH so the clone's
code is what runs: the one step of the guide not run as written is the README's install. The guide's
port is swapped for a free one; every other word runs verbatim: the token line, `serve` in the first
terminal, the curl session in the second. What curl prints must be what the guide shows.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.support import ROOT, free_port, proxy_env

GUIDE = Path("docs") / "guides" / "serve.md"
PORT = "127.0.0.1:8765"


def block(guide: str, marker: str, language: str) -> str:
    """The code block right after `<!-- marker -->` in the guide."""
    return guide.split(f"<!-- {marker} -->\n```{language}\n", 1)[1].split("```", 1)[0]


def fresh_clone(dest: Path) -> Path:
    """`git clone` of this checkout, its uncommitted changes (tracked and new files) laid over it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("the checkout is not a git repository (or git is missing): nothing to clone")
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], check=True, timeout=120)
    changed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--modified", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for name in filter(None, changed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests run outside a virtual environment: no .venv to give the clone")
    (dest / ".venv").symlink_to(sys.prefix)
    return dest


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    return fresh_clone(tmp_path / "mcp-sampling-proxy")


@pytest.fixture
def terminal_env(clone: Path) -> dict[str, str]:
    """The user's shell in the clone (HOME and the XDG dirs are the test's own): the clone's code first."""
    return proxy_env(PYTHONPATH=str(clone))


@pytest.fixture
def first_terminal(clone: Path, terminal_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """The guide's first terminal, run verbatim but for the port: (the port, serve's output)."""
    guide = (clone / GUIDE).read_text()
    port = str(free_port())
    output = clone.parent / "serve.log"
    make_token, start = block(guide, "serve start", "sh").strip().splitlines()
    subprocess.run(["bash", "-e", "-c", make_token], cwd=clone, env=terminal_env, check=True, timeout=30)
    with open(output, "wb") as out:
        serve = subprocess.Popen(
            ["bash", "-c", start.replace(PORT, f"127.0.0.1:{port}")],
            cwd=clone,
            env=terminal_env,
            stdout=out,
            stderr=out,
            start_new_session=True,  # Ctrl-C reaches the whole foreground group: serve and its server
        )
    try:
        deadline = time.monotonic() + 30
        while serve.poll() is None and time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", int(port))) == 0:
                    break
            time.sleep(0.1)
        else:
            raise AssertionError(f"serve did not listen: {output.read_text()}")
        yield port, output
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(20) == 0, output.read_text()


def test_the_guides_session_runs_as_written_from_a_fresh_clone(
    clone: Path, terminal_env: dict[str, str], first_terminal: tuple[str, Path]
) -> None:
    port, output = first_terminal
    guide = (clone / GUIDE).read_text()
    script = block(guide, "transcript", "sh").replace(PORT, f"127.0.0.1:{port}")
    shown = block(guide, "transcript output", "text")
    done = subprocess.run(
        ["bash", "-e", "-c", script], cwd=clone, env=terminal_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert list(map(event_id, done.stdout.splitlines())) == list(map(event_id, shown.splitlines()))
    assert '"client":"alice"' in output.read_text() or "client=alice" in output.read_text()


def test_the_whole_token_line_gets_a_401_naming_the_part_to_send(clone: Path, first_terminal: tuple[str, Path]) -> None:
    port, _output = first_terminal
    line = (clone / "tokens").read_text().strip()
    token = line.split(":", 1)[1]
    url = f"http://127.0.0.1:{port}/mcp"
    headers = {"Accept": "application/json, text/event-stream"}
    opening = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    whole = httpx.post(url, json=opening, headers={**headers, "Authorization": f"Bearer {line}"}, timeout=20)
    wrong = httpx.post(url, json=opening, headers={**headers, "Authorization": f"Bearer {token}x"}, timeout=20)
    assert whole.status_code == 401 and wrong.status_code == 401
    assert "send only the part after the colon" in whole.json()["error"]["message"]
    assert "part after the colon" not in wrong.json()["error"]["message"]  # a wrong token is not helped along


def test_every_server_command_in_the_guide_names_a_shipped_file(clone: Path) -> None:
    guide = (clone / GUIDE).read_text()
    commands = re.findall(r"mcp-sampling-proxy serve [^\n]*?(?:\\\n[^\n]*?)*? -- ([^\n]+)", guide)
    assert commands, "the guide starts no server"
    for command in commands:
        python, *words = command.split()
        assert python == ".venv/bin/python", command  # the README's venv, which has the SDK the server needs
        assert [word for word in words if word.endswith(".py") and not (clone / word).is_file()] == [], command


def event_id(line: str) -> str:
    """An SSE event id is the session's random prefix and a number: the prefix differs each run (and an
    empty `data:` line ends in a space the page does not keep)."""
    return re.sub(r"^id: [0-9a-f]{16}-", "id: PREFIX-", line).rstrip()
