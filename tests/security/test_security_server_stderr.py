"""The server's stderr passes through the proxy's, tagged `[upstream NAME]`, and so reaches the
terminal of whoever runs the proxy (`try`, a shell) or reads its log: escape sequences and control
characters in it must not reach that terminal (set its title, write the clipboard, clear the
screen), nor forge a line that looks like the proxy's own."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from helpers.support import PROXY, PY, RawHost, proxy_env

HOSTILE = (
    "\x1b]0;PWNED-TITLE\x07hello \x1b[31mred\x1b[0m\r[mcp-sampling-proxy] forged\u2028second "
    "\x1b]52;c;cHduZWQ=\x07tab\there\n"
)
SERVER = (
    "import sys\n"
    f"sys.stderr.write({HOSTILE!r}); sys.stderr.flush()\n"
    "sys.stdin.read()\n"
)  # until the proxy closes its stdin


def test_a_servers_stderr_loses_escape_sequences_and_stays_on_its_line(tmp_path: Path) -> None:
    with RawHost([*PROXY, "--name", "loud", "--", PY, "-c", SERVER], proxy_env(), tmp_path / "stderr.log") as host:
        deadline = time.monotonic() + 30
        while "hello" not in (tmp_path / "stderr.log").read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.05)
        host.close_stdin()
        host.wait()
    raw = (tmp_path / "stderr.log").read_bytes()
    server_lines = [line for line in raw.split(b"\n") if b"hello" in line or b"second" in line]
    assert server_lines == [b"[upstream loud] hello red[mcp-sampling-proxy] forged second tab\there"]
    for byte in (b"\x1b", b"\x07", b"\r"):
        assert byte not in raw


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (.ci/run installs it)")
def test_on_a_terminal_the_server_cannot_set_its_title(tmp_path: Path) -> None:
    """As a person running the proxy in a terminal sees it (tmux): the server's text is there, on
    one tagged line, and the title it tried to set (OSC 0) is not the pane's."""
    session = f"stderr-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    env = proxy_env()
    exports = " ".join(
        f"{k}='{v}'"
        for k, v in env.items()
        if k in ("HOME", "PATH", "PYTHONPATH") or k.startswith("MCP_SAMPLING_PROXY_")
    )
    command = f"env -i {exports} {' '.join(PROXY)} --no-terminal --name loud -- {PY} {script}; sleep 30"
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "200", "-y", "20", command], check=True)
    try:
        deadline = time.monotonic() + 30
        shown = ""
        while time.monotonic() < deadline:
            shown = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=True
            ).stdout
            if "second" in shown:
                break
            time.sleep(0.1)
        title = subprocess.run(
            [*tmux, "display-message", "-p", "-t", session, "#{pane_title}"], capture_output=True, text=True, check=True
        ).stdout.strip()
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    assert "[upstream loud] hello red[mcp-sampling-proxy] forged second tab" in shown, shown
    assert "PWNED" not in title, f"the server set the terminal's title to {title!r}"


# it answers every request with the same error: the handshake, and the proxy's try of the 2026 era after it
# (a server that answered only the first left the proxy waiting for the second, 5 s at shutdown)
ERROR_SERVER = (
    "import json, sys\n"
    "message = 'bad\\x1b]0;PWNED-TITLE\\x07\\x1b[2Jforged'\n"
    "for line in sys.stdin:\n"
    "    request = json.loads(line)\n"
    "    if 'id' in request and 'method' in request:\n"
    "        print(json.dumps({'jsonrpc': '2.0', 'id': request['id'], 'error': {'code': -32603, "
    "'message': message}}), flush=True)\n"
)


def test_the_proxys_own_lines_on_a_terminal_lose_a_servers_escape_sequences(tmp_path: Path) -> None:
    """The proxy logs a server's error text (here its answer to initialize). Readable console lines
    (`--log-format console`, a terminal's default) print a string without spaces, quotes or line
    breaks as it is: the server's escape sequences went straight to the terminal; now they are removed."""
    command = [*PROXY, "--log-format", "console", "--name", "loud", "--", PY, "-c", ERROR_SERVER]
    with RawHost(command, proxy_env(), tmp_path / "stderr.log") as host:
        answer = host.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        )
        host.close_stdin()
        host.wait()
    assert answer["error"]["message"].startswith("bad\x1b]0;")  # the host still gets it untouched
    raw = (tmp_path / "stderr.log").read_bytes()
    assert b"upstream answered the handshake with an error" in raw
    assert b"\x1b" not in raw and b"\x07" not in raw and b"\r" not in raw
    assert b"error=badforged" in raw


def test_a_huge_stderr_line_is_passed_on_shortened(tmp_path: Path) -> None:
    """10 MB on one stderr line: the proxy's stderr (a host's log file) gets its start and its size,
    not 10 MB, and the proxy never holds it whole."""
    server = (
        "import sys\n"
        "sys.stderr.write('start ' + 'z' * 10_000_000 + '\\n'); sys.stderr.flush()\n"
        "sys.stderr.write('after\\n'); sys.stderr.flush()\n"
        "sys.stdin.read()\n"
    )
    with RawHost([*PROXY, "--name", "loud", "--", PY, "-c", server], proxy_env(), tmp_path / "stderr.log") as host:
        deadline = time.monotonic() + 30
        while "[upstream loud] after" not in (tmp_path / "stderr.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        host.close_stdin()
        host.wait()
    log = (tmp_path / "stderr.log").read_text()
    assert "[upstream loud] start zzz" in log and "... (a line of 10,000,006 bytes, shortened)" in log
    assert "[upstream loud] after" in log
    assert len(log) < 100_000
