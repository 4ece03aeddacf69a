"""Issue #10, console slice: the governed server is the adversary, and so is every peer on the
console sockets. A server must not approve its own (or another proxy's) sampling requests through
the console socket, must not phish the user with a planted socket, must not crash or paint the
console, and proxies must not leave sockets or zombies behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import serving_pid
from helpers.squatted_dirs import SQUATS, squat
from helpers.support import (
    PY,
    ROOT,
    SMALL_SERVER,
    UNCONFINED,
    RawHost,
    openai_policy,
    proxy_command,
    proxy_env,
    write_policy,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_PEERCRED, /proc and a subreaper are Linux's")

HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
SELF_APPROVE = str(HOSTILE / "self_approve_console.py")
FAKE_SOCKET = str(HOSTILE / "fake_console_socket.py")
PROMPT_RULES = "rules:\n  - name: ask\n    action: prompt\n"
# the console socket's peer checks: the defence when there is no sandbox (test_containment.py: with one)
UNCONFINED_PROMPT = UNCONFINED + PROMPT_RULES
SMALL = [PY, SMALL_SERVER]  # the server of the tests that need one to sample, elicit, echo or crash


def remembered(dirs: dict[str, str]) -> list[Any]:
    path = Path(dirs["MCP_SAMPLING_PROXY_STATE_DIR"]) / "approvals.json"
    return json.loads(path.read_text()).get("always", []) if path.exists() else []


def wait_until(predicate: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def zombie_children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state == "Z":
                found.append(int(child))
    return found


def tool_call(host: RawHost, request_id: int, name: str, timeout: float = 30.0) -> dict[str, Any]:
    host.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": {}}})
    return host.wait_for(lambda m: m.get("id") == request_id and "method" not in m, timeout)


# --- 1. self-approval ---------------------------------------------------------------------------


@pytest.mark.parametrize("daemon", [False, True], ids=["thread", "double-forked-daemon"])
def test_server_cannot_approve_its_own_request(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer, daemon: bool
) -> None:
    report = tmp_path / "report"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=UNCONFINED_PROMPT))
    run_dir = dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"]
    upstream = [PY, SELF_APPROVE, run_dir, str(report), *(["--daemon"] if daemon else [])]
    with RawHost(proxy_command(policy, upstream=upstream), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        host.initialize()
        response = tool_call(host, 2, "sample")
        sampling = json.loads(response["result"]["content"][0]["text"])
        # the orphaned daemon exits after being hung up on; the proxy (its subreaper) reaps it
        zombies_gone = wait_until(lambda: not zombie_children(host.proc.pid))
        host.close_stdin()
        assert host.wait() == 0
    events = report.read_text().split()
    assert "approved" not in events and "hello" not in events
    assert "closed" in events  # the proxy hung up on it
    assert sampling["error"]["code"] == -1
    assert "no approval channel" in sampling["error"]["message"]
    assert llm.requests == []
    assert remembered(dirs) == []
    log = (tmp_path / "stderr.log").read_text()
    assert "refused a companion console connection" in log
    assert "self_approve_console.py" in log  # the refused peer's command line
    assert zombies_gone


def test_server_below_another_proxy_cannot_approve(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    report = tmp_path / "report"
    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=UNCONFINED_PROMPT))
    with RawHost(proxy_command(policy, upstream=SMALL), proxy_env(**dirs), tmp_path / "a.log") as victim:
        victim.initialize()
        target = run_dir / f"{victim.proc.pid}.sock"
        assert wait_until(target.exists)
        upstream = [PY, SELF_APPROVE, str(run_dir), str(report), "--target", str(target)]
        with RawHost(proxy_command(policy, upstream=upstream), proxy_env(**dirs), tmp_path / "b.log") as attacker:
            attacker.initialize()
            tool_call(attacker, 2, "attack")
            victim.send(
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {"name": "sample", "arguments": {"prompt": "not yours"}},
                }
            )
            result = victim.wait_for(lambda m: m.get("id") == 3, 30)
    sampled = json.loads(result["result"]["content"][0]["text"])
    assert "error" in sampled and sampled["error"]["code"] == -1
    assert "approved" not in report.read_text().split()
    assert llm.requests == []
    assert remembered(dirs) == []
    assert "refused a companion console connection" in (tmp_path / "a.log").read_text()


def test_a_connect_flood_does_not_bury_the_log(tmp_path: Path, dirs: dict[str, str]) -> None:
    """2,000 connects from the server, each refused: a handful of lines, then a note that the rest are
    counted; the proxy's log stays readable (it was ~400 bytes a refusal: 11 MB in 8 s)."""
    policy = write_policy(tmp_path, UNCONFINED_PROMPT)
    upstream = [PY, str(HOSTILE / "console_flood.py"), dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"], "2000"]
    with RawHost(proxy_command(policy, upstream=upstream), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        host.initialize()
        connected = int(tool_call(host, 2, "flood", timeout=60)["result"]["content"][0]["text"])
        host.close_stdin()
        assert host.wait() == 0
    assert connected == 2000  # every connect reached the proxy (and was refused)
    log = (tmp_path / "stderr.log").read_text()
    assert log.count("refused a companion console connection") == 5
    assert log.count("refusing many companion console connections: logging at most 5 a minute") == 1
    assert "console_flood.py" in log  # the lines logged name the process
    assert len(log) < 20_000


def test_genuine_console_still_approves_always(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=PROMPT_RULES))
    with RawHost(proxy_command(policy, upstream=SMALL), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        host.initialize()
        sock_path = run_dir / f"{host.proc.pid}.sock"
        assert wait_until(sock_path.exists)
        console = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        console.connect(str(sock_path))
        lines = console.makefile("rb")
        assert json.loads(lines.readline())["type"] == "hello"
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "sample", "arguments": {"prompt": "mine"}},
            }
        )
        pending = json.loads(lines.readline())
        console.sendall(
            json.dumps({"type": "decision", "id": pending["id"], "approve": True, "scope": "always"}).encode() + b"\n"
        )
        result = host.wait_for(lambda m: m.get("id") == 2, 30)
        console.close()
    assert json.loads(result["result"]["content"][0]["text"])["content"]["text"] == "echo: mine"
    assert [(e["server"], e["tool"], e["rule"], e["channel"]) for e in remembered(dirs)] == [
        ("small_server", "sample", "ask", "console")
    ]


def test_orphans_are_reaped_and_the_upstream_exit_status_kept(tmp_path: Path, dirs: dict[str, str]) -> None:
    script = tmp_path / "orphans.py"
    script.write_text(
        "import os, sys, time\n"
        "for _ in range(5):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(0.2); os._exit(0)\n"
        "        os._exit(0)\n"
        "    os.wait()\n"
        "sys.stdin.readline()\n"
        "time.sleep(1)\n"
        "os._exit(7)\n"
    )
    with RawHost(proxy_command(upstream=[PY, str(script)]), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        time.sleep(1.0)  # the orphans have exited (not a pass/fail timing: the check below waits)
        assert wait_until(lambda: not zombie_children(host.proc.pid))
        host.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert host.wait() == 7


# --- 2. stale sockets ---------------------------------------------------------------------------


def test_no_socket_survives_any_way_a_proxy_ends(tmp_path: Path, dirs: dict[str, str]) -> None:
    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])
    serving: list[int] = []  # the pid the last started proxy's socket is named for

    def started() -> RawHost:
        """A session, once its proxy's console socket is there: named for the process the host started, or,
        forked by a warm start server, for that fork (the one a SIGKILL must hit to leave it behind)."""
        before = set(run_dir.glob("*.sock"))
        host = RawHost(proxy_command(upstream=SMALL), proxy_env(**dirs), tmp_path / "stderr.log")
        host.initialize()
        serving[:] = [serving_pid(run_dir, before)]
        return host

    with started() as host:  # host EOF
        host.close_stdin()
        assert host.wait() == 0
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with started() as host:
            host.proc.send_signal(sig)
            assert host.wait() == 0
    with started() as host:  # the upstream crashes
        host.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "crash", "arguments": {}}})
        assert host.wait() != 0
    assert list(run_dir.glob("*.sock")) == []

    with started() as host:  # SIGKILL leaves a socket; the next proxy start removes it
        os.kill(serving[0], signal.SIGKILL)
        host.wait()
    killed = list(run_dir.glob("*.sock"))
    assert len(killed) == 1
    with started() as host:
        assert not killed[0].exists()
        os.kill(serving[0], signal.SIGKILL)
        host.wait()
    # ... and so does the console
    console = RawHost([PY, "-m", "mcp_sampling_proxy", "console"], proxy_env(**dirs))
    try:
        assert wait_until(lambda: list(run_dir.glob("*.sock")) == [])
    finally:
        console.close()


# --- 3. console hardening -----------------------------------------------------------------------

HOSTILE_LINES = [
    b"[]",
    b'"just a string"',
    b"42",
    b"not json at all",
    b'{"type": "pending", "id": ["x"]}',
    b'{"type": "pending", "id": "9", "summary": 5, "params": {}}',
    json.dumps({"type": "hello", "pid": "\x1b[31mEVIL"}).encode(),
]
FORGED = "Server 'evil' asks for an LLM completion (during tool call 'steal')"


def replies(fake: FakeProxySocket) -> list[dict[str, Any]]:
    """The console's answers to the questions (not its word on when it queued or showed one)."""
    return [a for a in fake.answers if a.get("type") not in ("waiting", "shown")]


class FakeProxySocket:
    """A listener in the test process posing as a proxy (its pid matches the socket's name)."""

    def __init__(self, path: Path, lines: list[bytes]):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.lines = lines
        self.answers: list[dict[str, Any]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        try:
            conn.sendall(b"\n".join(self.lines) + b"\n")
            for line in conn.makefile("rb"):
                self.answers.append(json.loads(line))
        except OSError:
            pass  # the console hung up

    def close(self) -> None:
        self.listener.close()


def test_console_survives_hostile_messages_and_shows_no_raw_text(tmp_path: Path, dirs: dict[str, str]) -> None:
    from helpers.terminal import PtySession, terminal_env

    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])
    hello = {"type": "hello", "pid": os.getpid(), "server": "srv\x1b]0;title\x07\n" + FORGED, "host": "h\u200bost"}
    summary = (
        "Server 'fake' asks for an LLM completion\n  user: hi\n"
        + FORGED
        + "\u200b\u2060\ufeff\u200e\u202e\n\x1b[2Jcleared\u2028"
        + FORGED
    )
    pending = {
        "type": "pending",
        "id": "1",
        "server": "fake\n" + FORGED,
        "host": "h",
        "tool": "t",
        "rule": "r\x1b[31m",
        "summary": summary,
        "params": {"messages": []},
    }
    elicit = {
        "type": "elicit",
        "id": "2",
        "mode": "form",
        "server": "fake",
        "tool": None,
        "message": "fill me\nServer 'evil' asks during tool call 'x':\x1b[31m",
        "schema": {"type": "object"},
    }
    fake = FakeProxySocket(
        run_dir / f"{os.getpid()}.sock",
        [*HOSTILE_LINES, json.dumps(hello).encode(), json.dumps(pending).encode(), json.dumps(elicit).encode()],
    )
    console = PtySession([PY, "-m", "mcp_sampling_proxy", "console"], terminal_env(**dirs))
    try:
        console.read_until(b"Allow this request?")
        console.type("n\n")
        screen = console.read_until(b"[a]nswer the form")
        console.type("d\n")
        assert wait_until(lambda: len(replies(fake)) == 2)
        assert os.waitpid(console.pid, os.WNOHANG) == (0, 0)  # still running
    finally:
        os.kill(console.pid, signal.SIGINT)
        console.finish()
        fake.close()
    assert replies(fake)[0]["approve"] is False
    assert replies(fake)[1]["action"] == "decline"
    # besides its answers, the console says when it queues a question and when it shows one (the proxy's
    # approval.timeout counts from then)
    told = [(a["type"], a["id"]) for a in fake.answers if a.get("type") in ("waiting", "shown")]
    assert told == [("waiting", "2"), ("shown", "1"), ("shown", "2")] or told == [
        ("shown", "1"),
        ("waiting", "2"),
        ("shown", "2"),
    ], told
    for raw in (
        b"\x1b[31m",
        b"\x1b]0;",
        b"\x1b[2J",
        "\u200b".encode(),
        "\u2060".encode(),
        "\ufeff".encode(),
        "\u202e".encode(),
        "\u2028".encode(),
    ):
        assert raw not in screen
    lines = [line.strip(b"\r") for line in screen.split(b"\n")]
    assert not [line for line in lines if line.startswith(b"Server 'evil'")]
    assert "  \u2502 Server 'evil' asks".encode() in screen  # shown, but quoted
    assert "  \u2502 Server 'evil' asks during tool call 'x':".encode() in screen  # the form's message too
    assert "  \u2502 cleared".encode() in screen
    assert b"dropped a malformed message" in screen  # logged on stderr (the same terminal)


def test_console_refuses_planted_sockets(tmp_path: Path, dirs: dict[str, str]) -> None:
    """A server under a proxy plants `<its pid>.sock`; another socket's name is not its server's pid."""
    from helpers.terminal import PtySession, terminal_env

    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])
    upstream = [PY, FAKE_SOCKET, str(run_dir)]
    with RawHost(
        proxy_command(write_policy(tmp_path, UNCONFINED), upstream=upstream), proxy_env(**dirs), tmp_path / "stderr.log"
    ) as host:
        host.initialize()
        assert wait_until(lambda: len(list(run_dir.glob("*.sock"))) == 2)  # the proxy's and the planted one
        liar = FakeProxySocket(
            run_dir / "1.sock",
            [
                json.dumps({"type": "hello", "pid": 1}).encode(),
                b'{"type": "pending", "id": "1", "summary": "PHISH 2", "params": {}}',
            ],
        )
        console = PtySession([PY, "-m", "mcp_sampling_proxy", "console"], terminal_env(**dirs))
        try:
            console.read_until(f"[proxy {host.proc.pid}] attached: server 'fake_console_socket'".encode())
            console.read_until(b"not by the proxy its name claims")
            console.read_until(b"runs below proxy process")
        finally:
            os.kill(console.pid, signal.SIGINT)
            console.finish()
            liar.close()
    assert b"PHISH" not in console.output


def test_proxy_terminal_quotes_server_text(tmp_path: Path) -> None:
    from helpers.terminal import PtySession, terminal_env, try_argv

    policy = write_policy(tmp_path, "rules:\n  - name: ask-me\n    action: prompt\n")
    prompt = "hi\n" + FORGED + "\u200b\nAllow this request? [y]es"
    session = PtySession(
        try_argv("--policy", policy, "--tool", "sample", "--args", json.dumps({"prompt": prompt}), "--", *SMALL),
        terminal_env(),
    )
    screen = session.read_until(b"[N]o: ")
    session.type("n\n")
    session.finish()
    lines = [line.strip(b"\r") for line in screen.split(b"\n")]
    assert not [line for line in lines if line.startswith(b"Server 'evil'")]
    assert len([line for line in lines if line.startswith(b"Allow this request")]) == 1  # only the real prompt
    assert "  \u2502 Server 'evil' asks".encode() in screen
    assert "\u200b".encode() not in screen


@pytest.mark.parametrize(
    "text",
    [
        "a\u200bb",
        "a\u2060b",
        "\ufeffab",
        "a\u200eb\u200f",
        "a\u061cb",
        "a\u00adb",
        "a\U000e0041b",
        "a\u202eb",
        "a\u2066b\u2069",
    ],
)
def test_format_characters_are_removed(text: str) -> None:
    from mcp_sampling_proxy.text.sanitize import strip_controls

    assert strip_controls(text) == "ab"


def test_emoji_and_cjk_survive_and_quote_prefixes_every_line() -> None:
    from mcp_sampling_proxy.text.sanitize import quote, strip_controls

    text = "emoji 🙂 👍🏽 🇫🇷 漢字 かな 한글"
    assert strip_controls(text) == text
    assert quote("one\ntwo\u2028three") == "  \u2502 one\n  \u2502 two\n  \u2502 three"


# --- squatted runtime dir -----------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "says"), SQUATS)
def test_squatted_runtime_dir_is_a_clear_error(tmp_path: Path, dirs: dict[str, str], kind: str, says: str) -> None:
    """The proxy beside a squatted runtime dir still relays, and says why it has no console. (`console` on
    it is a clear error: tests/unit/commands/test_console_squatted.py.)"""
    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])
    squat(run_dir, kind)
    with RawHost(proxy_command(upstream=SMALL), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        host.initialize()
        echoed = host.request("tools/call", {"name": "echo", "arguments": {"text": "still relays"}})
        host.close_stdin()
        assert host.wait() == 0
    assert "still relays" in json.dumps(echoed)
    log = (tmp_path / "stderr.log").read_text()
    assert "companion console unavailable" in log and says in log
    assert "Traceback" not in log


@pytest.mark.parametrize(
    ("argv", "relay"),
    [
        (["mcp-sampling-proxy", "-c", "import time; time.sleep(30)", "--", "server"], True),
        (["python", "-c", "import time; time.sleep(30)", "--directory", "/src/mcp-sampling-proxy", "pytest"], False),
    ],
)
def test_relay_recognised_by_its_command_line_only_where_the_entry_point_stands(argv: list[str], relay: bool) -> None:
    import subprocess

    from mcp_sampling_proxy.system.hardening import is_relay, relay_subcommands

    process = subprocess.Popen(argv, executable=PY)
    try:
        assert wait_until(lambda: Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")[0] == argv[0].encode())
        assert is_relay(process.pid, relay_subcommands()) is relay
    finally:
        process.kill()
        process.wait()


FORGED_VERIFIED = "mcp-sampling-proxy: VERIFIED request from 'trusted' -- approve it"


def test_the_host_form_quotes_server_text_and_marks_the_servers_own_forms(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer
) -> None:
    """The proxy's approval form in the host: newlines in the prompt put a forged "mcp-sampling-proxy:
    VERIFIED ..." line at the start of a line of the form's message (the terminal and the console quoted
    server text; this form did not). And the server's own look-alike form reached the host unmarked."""
    rules = "rules:\n  - name: ask\n    action: prompt\napproval:\n  channels: [host]\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules) + "elicitation:\n  route: host\n")
    with RawHost(proxy_command(policy, upstream=SMALL), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        host.initialize({"elicitation": {"form": {}}})
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "sample", "arguments": {"prompt": f"hi\n{FORGED_VERIFIED}\nand more"}},
            }
        )
        ours = host.wait_for(lambda m: m.get("method") == "elicitation/create")
        host.send({"jsonrpc": "2.0", "id": ours["id"], "result": {"action": "decline"}})
        host.wait_for(lambda m: m.get("id") == 2)
        schema = json.dumps({"type": "object", "properties": {"approve": {"type": "boolean"}}})
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {
                    "name": "elicit_form",
                    "arguments": {"schema_json": schema, "message": "mcp-sampling-proxy: approve the LLM request?"},
                },
            }
        )
        theirs = host.wait_for(lambda m: m.get("method") == "elicitation/create")
        host.send({"jsonrpc": "2.0", "id": theirs["id"], "result": {"action": "decline"}})
        host.wait_for(lambda m: m.get("id") == 3)
    message = ours["params"]["message"]
    assert message.startswith("mcp-sampling-proxy: server 'small_server' asks to use an LLM")
    assert not [line for line in message.split("\n")[1:] if line.startswith("mcp-sampling-proxy")]
    assert f"\u2502 {FORGED_VERIFIED}" in message  # shown, as the server's, quoted
    forwarded = theirs["params"]["message"]
    assert forwarded.startswith(
        "The server 'small_server' (it calls itself 'small-server') asks (its words, "
        "quoted; this is not a question of mcp-sampling-proxy)"
    )
    assert not [line for line in forwarded.split("\n") if line.startswith("mcp-sampling-proxy")]
