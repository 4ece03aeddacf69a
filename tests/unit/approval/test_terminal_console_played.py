"""The terminal console (`mcp-sampling-proxy console`, approval/terminal_console.py) in process, beside a
proxy played in memory (helpers/playbook.py, `console=True`): the real `Console` on the proxy's real socket,
its keys typed into a pipe, its screen the text it writes. It keeps only open questions: one answered in the
web console (played beside it, helpers/played_console.py) or timed out is taken off, saying so, and the next
is asked; one arriving meanwhile is announced and asked in turn; a form names its proxy and host. How a real
terminal shows the question erased and asked again: tests/e2e/test_console_screen.py and
test_console_closing.py."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.played_console import played_page
from helpers.support import openai_policy

from mcp_sampling_proxy.approval.dialogues import APPROVE_PROMPT
from mcp_sampling_proxy.approval.terminal_console import Console

pytestmark = pytest.mark.anyio

SERVER = "kitchen_sink_server"
RULES = "rules:\n  - name: ask\n    action: prompt\n"
QUESTION = APPROVE_PROMPT.rstrip()
PROXY = f"[proxy {os.getpid()}]"  # the played proxy serves its socket from this process


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


class Screen(io.StringIO):
    """What the console wrote, as one text; `shows` waits until a text is written (no clock)."""

    def __init__(self) -> None:
        super().__init__()
        self._written = anyio.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        self._written.set()
        self._written = anyio.Event()
        return written

    async def shows(self, text: str, *, after: int = 0, timeout: float = 10.0) -> str:
        """The screen's text from offset `after`, once `text` is in it."""
        with anyio.fail_after(timeout):
            while text not in self.getvalue()[after:]:
                await self._written.wait()
        return self.getvalue()[after:]

    def lines(self) -> list[str]:
        return [line for line in self.getvalue().splitlines() if line.strip()]


class Keys:
    """The console's stdin: a pipe the test types into."""

    def __init__(self) -> None:
        self.read_end, self._write_end = os.pipe()

    def fileno(self) -> int:
        return self.read_end

    def type(self, line: str) -> None:
        os.write(self._write_end, line.encode() + b"\n")

    def close(self) -> None:
        os.close(self.read_end)
        os.close(self._write_end)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[Keys]:
    typed = Keys()
    monkeypatch.setattr(sys, "stdin", typed)
    yield typed
    typed.close()


@asynccontextmanager
async def terminal_console(play: Playbook) -> AsyncIterator[Screen]:
    """`mcp-sampling-proxy console` watching the played proxy's runtime dir, attached to it."""
    assert play.console.path is not None
    screen = Screen()
    async with anyio.create_task_group() as tg:
        tg.start_soon(Console(play.console.path.parent, screen).run, tg)
        await screen.shows(f"{PROXY} attached")
        yield screen
        tg.cancel_scope.cancel()


def prompt(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 100}


def asked(lines: list[str]) -> list[str]:
    return [line for line in lines if QUESTION in line]


async def test_a_question_answered_in_the_web_console_leaves_the_terminal_console_and_the_next_one_shows(
    tmp_path: Path, llm: FakeLLMServer, keys: Keys
) -> None:
    """Both consoles show a request; Deny on the page takes it off the terminal at once, saying it was
    answered in another console; the next request is asked in the terminal, and answering it there takes
    it off the page."""
    policy = openai_policy(llm.base_url, rules=RULES)
    async with Playbook(tmp_path, policy, name=SERVER, console=True) as play, played_page(play) as page:
        await play.handshake({})
        async with terminal_console(play) as screen, play.call("sample") as call:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call.sample, prompt("first request"))
                await screen.shows("first request")
                await screen.shows(QUESTION)
                assert (await page.answer(await page.question(), action="deny")).status_code == 200
                closed = f"{PROXY} answered in another console: this question is closed"
                await screen.shows(closed)
            assert screen.lines()[-1] == closed
            assert llm.requests == []

            mark = len(screen.getvalue())
            answer = await _answered_at_the_terminal(call, screen, keys, "second request", "n", after=mark)
            assert "rejected at the companion console" in answer["error"]["message"]
            await screen.shows("-> denied", after=mark)
            await page.until(lambda state: state["questions"] == [])


async def _answered_at_the_terminal(call: Any, screen: Screen, keys: Keys, text: str, key: str, after: int) -> Any:
    """The server's request of `text`, answered with `key` at the terminal once asked there."""
    result: dict[str, Any] = {}

    async def ask() -> None:
        result.update(await call.sample(prompt(text)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        shown = await screen.shows(QUESTION, after=after)
        assert text in shown
        keys.type(key)
    return result


async def test_a_question_that_times_out_leaves_the_terminal_console(
    tmp_path: Path, llm: FakeLLMServer, keys: Keys
) -> None:
    """approval.timeout passes while the question is on screen: it is taken off, said to have timed out, and
    the next request is asked."""
    policy = openai_policy(llm.base_url, rules=RULES) + "approval:\n  timeout: 1s\n"
    async with Playbook(tmp_path, policy, name=SERVER, console=True) as play, terminal_console(play) as screen:
        await play.handshake({})
        async with play.call("sample") as call:
            late = await call.sample(prompt("too slow"))
            assert "nobody answered" in late["error"]["message"]
            closed = f"{PROXY} timed out (approval.timeout): this question is closed"
            await screen.shows(closed)
            assert screen.lines()[-1] == closed
            mark = len(screen.getvalue())
            answer = await _answered_at_the_terminal(call, screen, keys, "in time", "n", after=mark)
        assert "rejected at the companion console" in answer["error"]["message"]


async def test_a_request_arriving_meanwhile_is_announced_and_asked_next(
    tmp_path: Path, llm: FakeLLMServer, keys: Keys
) -> None:
    """A second request while the first is on screen: a line says it waits; the first question takes its
    answer, then the second is asked, naming its server and host."""
    policy = openai_policy(llm.base_url, rules=RULES)
    async with Playbook(tmp_path, policy, name=SERVER, console=True) as play, terminal_console(play) as screen:
        await play.handshake({})
        async with play.call("sample"):
            for number, text in enumerate(("from the first", "from the second"), start=1):
                play.server.says(
                    {"jsonrpc": "2.0", "id": f"s{number}", "method": "sampling/createMessage", "params": prompt(text)}
                )
                if number == 1:
                    await screen.shows(QUESTION)
            waits = f"{PROXY} sampling request from server '{SERVER}' waits: asked in turn (1 question waiting)"
            await screen.shows(waits)
            assert "from the second" not in screen.getvalue()
            mark = len(screen.getvalue())
            keys.type("n")
            first = await play.server.next()
            assert first["id"] == "s1" and "rejected" in first["error"]["message"]
            shown = await screen.shows(QUESTION, after=mark)
            header = f"{PROXY} sampling request from server '{SERVER}', host 'played-host' (rule 'ask'):"
            assert header in shown and "from the second" in shown
            keys.type("n")
            second = await play.server.next()
            assert second["id"] == "s2" and "rejected" in second["error"]["message"]
        assert llm.requests == []


async def test_an_elicitation_names_its_proxy_and_host_like_a_sampling_request(tmp_path: Path, keys: Keys) -> None:
    """Where one console sees the proxies of several hosts, a form says which proxy and which host it came
    from, as a sampling request does; it is still answered there."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    async with Playbook(tmp_path, name=SERVER, console=True) as play, terminal_console(play) as screen:
        await play.handshake({})
        async with anyio.create_task_group() as tg:
            answer: dict[str, Any] = {}

            async def elicit() -> None:
                answer.update(await play.elicit({"message": "Your name?", "requestedSchema": schema}))

            tg.start_soon(elicit)
            shown = await screen.shows("[a]nswer the form")
            header = f"{PROXY} form from server '{SERVER}' (which calls itself \"played-server\"), host 'played-host':"
            assert header in shown.splitlines()
            keys.type("d")
        assert answer["result"] == {"action": "decline"}
