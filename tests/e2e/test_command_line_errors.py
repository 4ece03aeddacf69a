"""The command line's mistakes as a user makes them, with the real command: a mistyped option or
subcommand is answered with the one meant, and a port in use with what to do, which then works. (A
subcommand's mistyped options, each command's whole line: tests/unit/commands/test_parsing.py.)"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.serving import token_file
from helpers.support import MINIMAL_SERVER, PROXY, PY, proxy_env


def command(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, *argv], env=proxy_env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--polcy", "policy.yaml", "--", PY, "server.py"],
            "mcp-sampling-proxy: error: unrecognized arguments: --polcy; --polcy: did you mean --policy?",
        ),
        (
            ["doctr"],
            "mcp-sampling-proxy: error: unknown command 'doctr': did you mean `mcp-sampling-proxy doctor`? (a "
            "server's command line goes after '--')",
        ),
    ],
    ids=["proxy", "doctr"],
)
def test_a_mistyped_option_or_command_names_the_one_meant(argv: list[str], said: str) -> None:
    done = command(*argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == said


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


def listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_serve_on_a_port_in_use_says_what_to_do_and_that_works(tmp_path: Path, taken_port: int) -> None:
    server = tmp_path / "server.py"
    server.write_text(MINIMAL_SERVER)
    argv = ["serve", "--token-file", token_file(tmp_path), "--", PY, str(server)]
    done = command(argv[0], "--listen", f"127.0.0.1:{taken_port}", *argv[1:])
    assert done.returncode == 2
    said = done.stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        rf"mcp-sampling-proxy: error: cannot listen on 127\.0\.0\.1:{taken_port}: another program listens on port "
        rf"{taken_port} \(`ss -ltnp 'sport = :{taken_port}'` shows which\); stop it, or choose another port: "
        r"--listen (127\.0\.0\.1:(\d+)) is free now",
        said,
    )
    assert match, said
    # the advice, followed
    process = subprocess.Popen(
        [*PROXY, argv[0], "--listen", match[1], *argv[1:]], env=proxy_env(), stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None and not listens(int(match[2])):
            time.sleep(0.05)
        assert listens(int(match[2])), process.stderr.read() if process.stderr else ""
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)


def test_the_web_console_on_a_port_in_use_says_what_to_do_and_that_works(taken_port: int) -> None:
    done = command("console", "--web", "--no-open", "--port", str(taken_port))
    assert done.returncode == 1
    said = done.stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        rf"mcp-sampling-proxy console: error: cannot listen on 127\.0\.0\.1:{taken_port}: another program listens "
        rf"on port {taken_port} \(`ss -ltnp 'sport = :{taken_port}'` shows which\); stop it, or choose another "
        r"port: --port (\d+) is free now \(--port 0 picks a free one\)",
        said,
    )
    assert match, said
    process = subprocess.Popen(
        [*PROXY, "console", "--web", "--no-open", "--port", match[1]],
        env=proxy_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith(f"http://127.0.0.1:{match[1]}/")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)
