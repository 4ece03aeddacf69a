"""The terminal console (in tmux, as a person sees it) keeps only open questions on screen: a question
answered in the web console, timed out, or whose proxy left is taken off at once and said so; a request
arriving while another is asked is announced and asked next; an elicitation names its proxy and host."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy
from helpers.tmux_screen import Screen
from helpers.web_console import WebConsole

from mcp_sampling_proxy.approval.dialogues import APPROVE_PROMPT
from mcp_sampling_proxy.approval.terminal_channel import ENDED
from mcp_sampling_proxy.approval.terminal_console import CLOSED

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)"),
    pytest.mark.skipif(sys.platform != "linux", reason="console sockets use SO_PEERCRED and /proc"),
]

QUESTION = APPROVE_PROMPT.rstrip()
RULES = "rules:\n  - name: ask\n    action: prompt\n"


def sample(host: RawHost, request_id: int, prompt: str) -> None:
    host.send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "sample", "arguments": {"prompt": prompt}},
        }
    )


def answer_text(host: RawHost, request_id: int) -> str:
    return json.dumps(host.wait_for(lambda m: m.get("id") == request_id and "method" not in m, 30))


def console(tmp_path: Path, dirs: dict[str, str], screens: list[Screen]) -> Screen:
    screen = Screen(tmp_path, [PY, "-m", "mcp_sampling_proxy", "console"], proxy_env(**dirs))
    screens.append(screen)
    screen.wait_for("watching")
    return screen


def asked_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "Allow this request?" in line]


def test_a_question_answered_in_the_web_console_leaves_the_terminal_console_and_the_next_one_shows(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], llm: FakeLLMServer, browser: Any
) -> None:
    """Both consoles show a request; Deny on the page takes it off the terminal at once, saying it was
    answered in another console; the next request is asked in the terminal, and answering it there takes
    its card off the page."""
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES))
    terminal = console(tmp_path, dirs, screens)
    web = WebConsole(dirs, stderr=tmp_path / "web.log")
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(web.url)
        with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "proxy.log") as host:
            host.initialize()
            pid = host.proc.pid
            page.get_by_text("1 proxy attached").wait_for(timeout=15000)
            sample(host, 2, "first request")
            terminal.wait_for("first request")
            terminal.wait_for(QUESTION)
            card = page.locator("article.pending")
            card.wait_for(timeout=15000)
            card.get_by_role("button", name="Deny").click()
            assert "rejected at the companion console" in answer_text(host, 2)
            lines = terminal.wait_for(f"[proxy {pid}] answered in another console: this question is closed")
            assert lines[-1] == f"[proxy {pid}] answered in another console: this question is closed", "\n".join(lines)
            assert asked_lines(lines) == [], "\n".join(lines)  # the stale question is gone, not asked again

            sample(host, 3, "second request")
            lines = terminal.wait_for("second request")
            terminal.wait_for(QUESTION)
            page.locator("article.pending").wait_for(timeout=15000)
            terminal.type("n")
            assert "rejected at the companion console" in answer_text(host, 3)
            terminal.wait_for("-> denied")
            page.locator("article.pending").wait_for(state="detached", timeout=10000)
    finally:
        web.close()


def test_a_question_that_times_out_leaves_the_terminal_console(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], llm: FakeLLMServer
) -> None:
    """approval.timeout passes while the question is on screen: it is taken off, said to have timed out,
    and the next request is asked."""
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + "approval:\n  timeout: 3\n")
    terminal = console(tmp_path, dirs, screens)
    with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "proxy.log") as host:
        host.initialize()
        pid = host.proc.pid
        terminal.wait_for(f"[proxy {pid}] attached")
        sample(host, 2, "too slow")
        terminal.wait_for(QUESTION)
        assert "nobody answered" in answer_text(host, 2)
        closed = f"[proxy {pid}] timed out (approval.timeout): this question is closed"
        lines = terminal.wait_for(closed)
        assert lines[-1] == closed and asked_lines(lines) == [], "\n".join(lines)
        sample(host, 3, "in time")
        terminal.wait_for("in time")
        assert terminal.wait_for(QUESTION)[-1] == QUESTION
        terminal.type("n")
        assert "rejected at the companion console" in answer_text(host, 3)


def test_a_request_arriving_meanwhile_is_announced_and_asked_next(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], llm: FakeLLMServer
) -> None:
    """A second proxy's request while the first is on screen: a line above the question says it waits;
    the first question stays the last line and takes its answer, then the second is asked."""
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES))
    terminal = console(tmp_path, dirs, screens)
    env = proxy_env(**dirs)
    with (
        RawHost(proxy_command(policy), env, tmp_path / "one.log") as one,
        RawHost(proxy_command(policy), env, tmp_path / "two.log") as two,
    ):
        one.initialize(name="first-host")
        two.initialize(name="second-host")
        terminal.wait_for(f"[proxy {two.proc.pid}] attached")
        sample(one, 2, "from the first")
        terminal.wait_for(QUESTION)
        sample(two, 2, "from the second")
        waits = f"[proxy {two.proc.pid}] sampling request from server 'kitchen_sink_server' waits: asked in turn"
        lines = terminal.wait_for(waits)
        assert lines[-1] == QUESTION and len(asked_lines(lines)) == 1, "\n".join(lines)
        assert not any("host ''" in line for line in lines), "\n".join(lines)  # an unknown host is not named
        assert "from the second" not in "\n".join(lines)
        terminal.type("n")
        assert "rejected" in answer_text(one, 2)
        lines = terminal.wait_for("from the second")
        header = f"[proxy {two.proc.pid}] sampling request from server 'kitchen_sink_server', host 'second-host'"
        assert any(header in line for line in lines), "\n".join(lines)
        terminal.wait_for(QUESTION)
        terminal.type("n")
        assert "rejected" in answer_text(two, 2)


def test_a_question_whose_proxy_leaves_is_closed_not_asked_again(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen], llm: FakeLLMServer
) -> None:
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES))
    terminal = console(tmp_path, dirs, screens)
    with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "proxy.log") as host:
        host.initialize()
        pid = host.proc.pid
        sample(host, 2, "orphaned")
        terminal.wait_for(QUESTION)
        host.proc.kill()
        host.wait()
    closed = f"[proxy {pid}] the proxy is gone: this question is closed"
    lines = terminal.wait_for(closed)
    assert f"[proxy {pid}] detached" in lines, "\n".join(lines)
    assert lines[-1] == closed and asked_lines(lines) == [], "\n".join(lines)


def test_an_elicitation_names_its_proxy_and_host_like_a_sampling_request(
    tmp_path: Path, dirs: dict[str, str], screens: list[Screen]
) -> None:
    """Where one console sees the proxies of several hosts (a shared runtime dir), a form says which proxy
    and which host it came from, as a sampling request does; the form is still answered there."""
    terminal = console(tmp_path, dirs, screens)
    with RawHost(proxy_command(), proxy_env(**dirs), tmp_path / "proxy.log") as host:
        host.initialize(name="desktop-host")
        pid = host.proc.pid
        terminal.wait_for(f"[proxy {pid}] attached")
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "elicit_name", "arguments": {}},
            }
        )
        lines = terminal.wait_for("[a]nswer the form")
        server = "'kitchen_sink_server' (which calls itself \"kitchen-sink\")"
        header = f"[proxy {pid}] form from server {server}, host 'desktop-host':"
        assert header in lines, "\n".join(lines)
        terminal.type("d")
        assert '\\"action\\": \\"decline\\"' in answer_text(host, 2)


def test_the_approvals_guide_says_what_the_consoles_say_when_a_question_closes() -> None:
    """The guide quotes the lines a person sees: they are the ones the consoles print."""
    guide = " ".join((ROOT / "docs" / "guides" / "approvals.md").read_text().split())
    for how in ("answered", "expired", "withdrawn"):
        assert f"`{CLOSED[how]}`" in guide or f"`[proxy PID] {CLOSED[how]}: this question is closed`" in guide
    assert f"`(request {ENDED['expired', False]}; this question is closed)`" in guide
    assert f"`(request {ENDED['withdrawn', True]}; this question is closed)`" in guide
    assert "the page removes its card, and the terminal console" in guide
