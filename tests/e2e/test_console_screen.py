"""What a person sees in a terminal (tmux) while a question waits for them: the question stays the last
line on screen when other lines arrive meanwhile (a proxy attaching to or leaving the console, a line the
server writes to stderr), and `try` shows a request once."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from helpers.console import serving_pid
from helpers.support import EXAMPLES, KITCHEN_SINK, PY, RawHost, openai_policy, proxy_command, proxy_env, write_policy
from helpers.tmux_screen import Screen

from mcp_sampling_proxy.approval.dialogues import APPROVE_PROMPT
from mcp_sampling_proxy.text.identity import server_phrase

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)"),
    pytest.mark.skipif(sys.platform != "linux", reason="needs Linux"),
]

# a provider, though it is never called (the question is denied): a request no LLM could answer is
# refused before anyone is asked
ASK = "rules:\n  - name: ask\n    action: prompt\n"
PROMPT_RULES = openai_policy("http://127.0.0.1:9/v1", rules=ASK)
QUESTION = APPROVE_PROMPT.rstrip()


def test_the_console_question_stays_last_when_proxies_attach_and_leave(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen]
) -> None:
    """Two real consoles in tmux, one 220 columns wide and one 60 (where the question wraps onto two rows),
    real proxies: another proxy attaching and then leaving while a question waits prints its line above the
    question, which is asked again as the last line. Answered in the wide one, the question is erased
    from the narrow one, whole, and said to be closed."""
    policy = write_policy(tmp_path, PROMPT_RULES)
    wide, narrow = (
        Screen(tmp_path, [PY, "-m", "mcp_sampling_proxy", "console"], proxy_env(**dirs), width) for width in (220, 60)
    )
    screens.extend([wide, narrow])
    consoles = (wide, narrow)
    for console in consoles:
        console.wait_for("watching")
    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])
    with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "asking.log") as asking:
        asking.initialize()
        asking_pid = serving_pid(run_dir, set())
        for console in consoles:
            console.wait_for(f"[proxy {asking_pid}] attached")
        asking.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "sample", "arguments": {"prompt": "hello"}},
            }
        )
        for console in consoles:
            lines = console.wait_for(QUESTION)
            assert console.last_line() == QUESTION
            # the operator's name and the server's own claim, each quoted once, none inside another
            summary = "Server 'small_server' (which calls itself \"small-server\") asks for an LLM completion"
            assert any(summary in line for line in lines), "\n".join(lines)
        before = set(run_dir.glob("*.sock"))
        with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "other.log") as other:
            other.initialize()
            other_pid = serving_pid(run_dir, before)
            for console in consoles:
                lines = console.wait_for(f"[proxy {other_pid}] attached")
                assert lines[-1] == QUESTION, "\n".join(lines)
            other.close_stdin()
            other.wait()
        for console in consoles:
            lines = console.wait_for(f"[proxy {other_pid}] detached")
            assert lines[-1] == QUESTION, "\n".join(lines)
            # erased and asked again below each line, whole: no copy or piece of it is left above
            assert [line for line in lines if "Allow this request?" in line] == [QUESTION], "\n".join(lines)
        wide.type("n")  # the question still takes its answer
        answer = asking.wait_for(lambda m: m.get("id") == 2, 30)
        assert "-> denied" in wide.wait_for("-> denied")
        closed = f"[proxy {asking_pid}] answered in another console: this question is closed"
        lines = narrow.wait_for(closed)
        assert lines[-1] == closed and not any("Allow this request?" in line for line in lines), "\n".join(lines)
    assert "rejected at the companion console" in json.dumps(answer)


HOST_SCRIPT = """\
import json, os, subprocess, sys, time

proxy = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # stderr: this terminal


def send(message):
    proxy.stdin.write((json.dumps(message) + "\\n").encode())
    proxy.stdin.flush()


def answer(wanted):
    while True:
        message = json.loads(proxy.stdout.readline())
        if message.get("id") == wanted:
            return message


send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
      "capabilities": {}, "clientInfo": {"name": "tmux-host", "version": "1"}}})
answer(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "sample", "arguments": {"prompt": "hi"}}})
send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 60}}})
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}})
got = "rejected" if "rejected at the terminal" in json.dumps(answer(2)) else "something else"
print(f"HOST GOT {got}", flush=True)  # one write: unbuffered, print's pieces reach the terminal apart
"""


@pytest.mark.parametrize("width", [220, 60])
def test_the_proxy_terminal_question_stays_last_when_the_server_writes_to_stderr(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], width: int
) -> None:
    """A proxy started in a terminal asks there; a line of the server's stderr (passed through to the
    proxy's stderr, the same terminal) arriving while it waits goes above the question."""
    policy = write_policy(tmp_path, PROMPT_RULES)
    host = tmp_path / "host.py"
    host.write_text(HOST_SCRIPT)
    go = tmp_path / "go"
    env = proxy_env(**dirs)
    env.pop("MCP_SAMPLING_PROXY_NO_TERMINAL")
    command = [PY, str(host), str(go), *proxy_command(policy, upstream=[PY, KITCHEN_SINK])]
    screen = Screen(tmp_path, command, env, width)
    screens.append(screen)
    screen.wait_for(QUESTION)
    assert screen.last_line() == QUESTION
    go.touch()  # the host cancels the slow call: the server says so on its stderr
    lines = screen.wait_for("cancelled")
    assert any(line.startswith("[upstream ") and "cancelled" in line for line in lines), "\n".join(lines)
    assert lines[-1] == QUESTION, "\n".join(lines)
    assert [line for line in lines if "Allow this request?" in line] == [QUESTION], "\n".join(lines)
    screen.type("n")
    screen.wait_for("HOST GOT rejected")  # (the screen is shown if the host got something else)


def test_try_shows_the_request_once_when_it_is_approved_then_typed(tmp_path: Path, screens: list[Screen]) -> None:
    """`try` with a rule that asks and no LLM: the approval shows the request; the typed reply that
    follows refers to it instead of showing it a second time."""
    policy = write_policy(tmp_path, ASK)
    env = proxy_env()
    env.pop("MCP_SAMPLING_PROXY_NO_TERMINAL")
    command = [PY, "-m", "mcp_sampling_proxy", "try", "--policy", policy, "--tool", "summarize"]
    command += ["--args", json.dumps({"text": "The quick brown fox."}), "--", PY, str(EXAMPLES / "summarizer.py")]
    screen = Screen(tmp_path, command, env)
    screens.append(screen)
    screen.wait_for(QUESTION)
    screen.type("y")
    screen.wait_for("Type the reply")
    screen.type("A fox, quickly.")
    screen.type(".")
    lines = screen.wait_for("result:")
    shown = "\n".join(lines)
    assert shown.count("asks for an LLM completion") == 1, shown
    assert shown.count("The quick brown fox.") == 1, shown
    assert "Type the reply to the request above" in shown
    assert lines[-1] == "A fox, quickly."


@pytest.mark.parametrize(
    ("reported", "shown"),
    [
        pytest.param(None, "'notes'", id="same-name"),
        pytest.param("Notes Pro", "'notes' (which calls itself \"Notes Pro\")", id="another-name"),
        pytest.param(
            'x") asks nothing. Server "trusted',
            "'notes' (which calls itself \"x') asks nothing. Server 'trusted\")",
            id="quotes-cannot-end-the-claim",
        ),
    ],
)
def test_a_server_is_named_without_nested_quotes(reported: str | None, shown: str) -> None:
    assert server_phrase("notes", reported) == shown
