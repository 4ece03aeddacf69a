"""The proxy's own terminal (a proxy started in a shell, in tmux as a person sees it) keeps only open
questions on screen: one that times out, or that another approver answers under a quorum, is taken off
and said so; a request arriving while another is asked is announced and asked next."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PY, SMALL_SERVER, openai_policy, proxy_command, proxy_env, write_policy
from helpers.tmux_screen import Screen

from mcp_sampling_proxy.approval.dialogues import APPROVE_PROMPT

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)"),
    pytest.mark.skipif(sys.platform != "linux", reason="needs Linux"),
]

QUESTION = APPROVE_PROMPT.rstrip()
RULES = "rules:\n  - name: ask\n    action: prompt\n"

# A host in the terminal: it starts the proxy (whose stderr and /dev/tty are this terminal), makes the tool
# calls given as JSON ([tool, arguments] each) at once, and notes how each ended in a file (not on the
# terminal, where a line would land after the question on screen); once a file named `cancel` appears beside
# that one, it cancels its first call. The proxy's command line is read from a file.
HOST_SCRIPT = """\
import json, os, subprocess, sys, threading, time

with open(sys.argv[2]) as command:  # not in our argv: a console refuses a proxy below one that looks like a proxy
    proxy = subprocess.Popen(json.load(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def send(message):
    proxy.stdin.write((json.dumps(message) + "\\n").encode())
    proxy.stdin.flush()


def receive():
    return json.loads(proxy.stdout.readline())


send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
      "capabilities": {}, "clientInfo": {"name": "tmux-host", "version": "1"}}})
receive()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
calls = json.loads(sys.argv[1])
for number, (tool, arguments) in enumerate(calls, start=2):
    send({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})


def cancel_when_told():
    while not os.path.exists(os.path.join(os.path.dirname(sys.argv[3]), "cancel")):
        time.sleep(0.05)
    send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})


threading.Thread(target=cancel_when_told, daemon=True).start()
left = len(calls)
while left:
    message = receive()
    if "id" in message and "method" not in message:
        text = json.dumps(message)
        ended = "rejected" if "rejected" in text else "timeout" if "nobody answered" in text else "other"
        with open(sys.argv[3], "a") as results:
            results.write(f"{message['id']} {ended}\\n")
        left -= 1
"""


def proxy_in_a_terminal(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], policy: str, prompts: list[str | None]
) -> Screen:
    """The host in a terminal, calling `sample` with each prompt (None: `elicit_name`, a form)."""
    host = tmp_path / "host.py"
    host.write_text(HOST_SCRIPT)
    env = proxy_env(**dirs)
    env.pop("MCP_SAMPLING_PROXY_NO_TERMINAL")
    calls = json.dumps(
        [["elicit_name", {}] if prompt is None else ["sample", {"prompt": prompt}] for prompt in prompts]
    )
    command = tmp_path / "proxy-command.json"
    command.write_text(json.dumps(proxy_command(policy, upstream=[PY, SMALL_SERVER])))
    screen = Screen(tmp_path, [PY, str(host), calls, str(command), str(tmp_path / "results")], env)
    screens.append(screen)
    return screen


def console_in_a_terminal(tmp_path: Path, dirs: dict[str, str], screens: list[Screen]) -> Screen:
    """`mcp-sampling-proxy console` in a terminal of its own, watching for proxies."""
    (tmp_path / "console").mkdir()  # a tmux server of its own: a session takes its server's environment
    console = Screen(tmp_path / "console", [PY, "-m", "mcp_sampling_proxy", "console"], proxy_env(**dirs))
    screens.append(console)
    console.wait_for("watching")
    return console


def results(tmp_path: Path, count: int, timeout: float = 30.0) -> list[str]:
    """How the host's calls ended, once `count` did, in the order they did ("2 rejected", "3 timeout")."""
    deadline = time.monotonic() + timeout
    path = tmp_path / "results"
    while time.monotonic() < deadline:
        ended = path.read_text().splitlines() if path.exists() else []
        if len(ended) >= count:
            return ended
        time.sleep(0.1)
    raise AssertionError(f"the host got fewer than {count} answers")


def asked(lines: list[str]) -> list[str]:
    return [line for line in lines if "Allow this request?" in line]


def test_a_request_that_times_out_at_the_proxys_terminal_is_taken_off(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], llm: FakeLLMServer
) -> None:
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + "approval:\n  timeout: 3\n")
    screen = proxy_in_a_terminal(tmp_path, dirs, screens, policy, ["too slow"])
    screen.wait_for(QUESTION)
    assert results(tmp_path, 1) == ["2 timeout"]
    lines = screen.lines()
    closed = "(request timed out (approval.timeout): denied; this question is closed)"
    assert closed in lines and asked(lines) == [], "\n".join(lines)


def test_under_a_quorum_a_no_in_the_console_takes_the_question_off_the_proxys_terminal(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], llm: FakeLLMServer
) -> None:
    approval = "approval:\n  quorum: 2\n  channels: [terminal, console]\n  timeout: 60s\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + approval)
    console = console_in_a_terminal(tmp_path, dirs, screens)
    screen = proxy_in_a_terminal(tmp_path, dirs, screens, policy, ["needs two"])
    screen.wait_for(QUESTION)
    console.wait_for(QUESTION)
    console.type("n")
    assert results(tmp_path, 1) == ["2 rejected"]
    lines = screen.wait_for("this question is closed")
    assert "(request answered on another channel, or withdrawn; this question is closed)" in lines, "\n".join(lines)
    assert asked(lines) == [], "\n".join(lines)


def test_a_form_the_host_cancels_leaves_the_proxys_terminal_and_the_request_waiting_is_asked(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], llm: FakeLLMServer
) -> None:
    """A sampling request arriving while a form is asked is announced and waits; the host cancels the form,
    which leaves the screen saying so, and the waiting request is asked, the only question on screen."""
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES))
    screen = proxy_in_a_terminal(tmp_path, dirs, screens, policy, [None, "the second"])
    screen.wait_for("[a]nswer the form, [d]ecline, [c]ancel:")
    waits = "mcp-sampling-proxy: a request from server 'small_server' waits: it is asked after the question"
    lines = screen.wait_for(waits)
    assert lines[-1] == "[a]nswer the form, [d]ecline, [c]ancel:" and "the second" not in "\n".join(lines)
    (tmp_path / "cancel").touch()
    closed = "(question withdrawn: the host cancelled the request, or the proxy is stopping; this question is closed)"
    screen.wait_for(closed)
    lines = screen.wait_until(lambda lines: lines[-1] == QUESTION)  # the second, asked now
    assert not any("[a]nswer the form" in line for line in lines), "\n".join(lines)
    assert len(asked(lines)) == 1 and "the second" in "\n".join(lines), "\n".join(lines)
    screen.type("n")
    assert results(tmp_path, 1) == ["3 rejected"]


PROMPTS = {"the first": "2", "the second": "3", "the third": "4"}  # the requests' prompts -> their ids


def on_screen(lines: list[str]) -> str | None:
    """The prompt of the sampling request asked now, when its question waits at the bottom of the screen
    (the proxy takes requests that came in together in any order)."""
    if not lines or lines[-1] != QUESTION:
        return None
    users = [line.split("user: ", 1)[1].strip() for line in lines if "user: " in line]
    return users[-1] if users and users[-1] in PROMPTS else None


@pytest.mark.parametrize("console", [False, True], ids=["at-the-terminal", "in-the-console"])
def test_a_request_waiting_its_turn_has_its_whole_time_once_it_is_asked(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], llm: FakeLLMServer, console: bool
) -> None:
    """No time counts while a request waits its turn (the console tells the proxy when it queues one and when
    it shows it), and its whole approval.timeout from when it is shown. Three requests come in together,
    timeout 2 s: the first times out unanswered; the next is asked then and answered; the last, which has
    waited past its limit counted from its arrival, is asked after that, not closed unseen, and times out
    on its own limit. Before, the ones waiting were closed with the first."""
    approval = f"approval:\n  channels: [{'console' if console else 'terminal'}]\n  timeout: 2\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + approval)
    asking = console_in_a_terminal(tmp_path, dirs, screens) if console else None
    screen = proxy_in_a_terminal(tmp_path, dirs, screens, policy, list(PROMPTS))
    asking = asking or screen
    first = on_screen(asking.wait_until(lambda lines: on_screen(lines) is not None))
    assert first is not None
    assert results(tmp_path, 1) == [f"{PROMPTS[first]} timeout"]  # nobody answered the first
    second = on_screen(asking.wait_until(lambda lines: on_screen(lines) not in (None, first)))
    asking.type("n")
    third = next(prompt for prompt in PROMPTS if prompt not in (first, second))
    asking.wait_until(lambda lines: on_screen(lines) == third)  # asked, more than 2 s after it came in ...
    assert sorted(results(tmp_path, 3)) == sorted(  # ... and then timed out, its limit counted from then
        [f"{PROMPTS[first]} timeout", f"{PROMPTS[second or '']} rejected", f"{PROMPTS[third]} timeout"]
    )
