"""The terminal console (in tmux, as a person sees it) keeps only open questions on screen: a question whose
proxy left is erased, said to be closed and not asked again. The same console in process, taking off a
question answered in the web console or timed out, announcing one arriving meanwhile, naming a form's
proxy and host: tests/unit/approval/test_terminal_console_played.py."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy
from helpers.tmux_screen import Screen

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


def console(tmp_path: Path, dirs: dict[str, str], screens: list[Screen]) -> Screen:
    screen = Screen(tmp_path, [PY, "-m", "mcp_sampling_proxy", "console"], proxy_env(**dirs))
    screens.append(screen)
    screen.wait_for("watching")
    return screen


def asked_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "Allow this request?" in line]


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


def test_the_approvals_guide_says_what_the_consoles_say_when_a_question_closes() -> None:
    """The guide quotes the lines a person sees: they are the ones the consoles print."""
    guide = " ".join((ROOT / "docs" / "guides" / "approvals.md").read_text().split())
    for how in ("answered", "expired", "withdrawn"):
        assert f"`{CLOSED[how]}`" in guide or f"`[proxy PID] {CLOSED[how]}: this question is closed`" in guide
    assert f"`(request {ENDED['expired', False]}; this question is closed)`" in guide
    assert f"`(request {ENDED['withdrawn', True]}; this question is closed)`" in guide
    assert "the page removes its card, and the terminal console" in guide
