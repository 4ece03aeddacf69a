"""`approval.quorum` played in memory (tests/helpers/playbook.py): a request runs only once N different
approvers said yes; one person is one approver whatever the case or width of the name, and on whichever
channel; a deny ends it. The approvers answer through a webhook receiver on 127.0.0.1, each answer naming
its approver, and (on two channels) through the tests' SocketConsole on the proxy's real socket. A
quorum met through the proxy as a process: tests/e2e/test_quorum.py.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import SocketConsole
from helpers.playbook import Playbook
from helpers.support import openai_policy
from helpers.webhook_receiver import Receiver, Reply, webhook_receiver

from mcp_sampling_proxy.approval import approver

pytestmark = pytest.mark.anyio
SECRET = "quorum-shared-secret-0c9d"
RULES = "rules:\n  - name: two-people\n    action: prompt\n"


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    monkeypatch.setenv("QUORUM_HOOK_SECRET", SECRET)
    # the pause before asking again an approver who approved already (a second of real time per repeat)
    monkeypatch.setattr(approver, "REPEAT_PAUSE", 0.05)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver(SECRET.encode()) as made:
        yield made


def quorum_policy(llm: FakeLLMServer, url: str, channels: str = "[webhook]") -> str:
    approval = (
        f"approval:\n  quorum: 2\n  timeout: 30s\n  channels: {channels}\n"
        f"  webhook:\n    url: {url}\n    secret_env: QUORUM_HOOK_SECRET\n    timeout: 20s\n"
    )
    return openai_policy(llm.base_url, rules=RULES) + approval


def prompt(text: str) -> dict[str, Any]:
    """The request the kitchen-sink server's `sample` tool sends."""
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 100}


def the_decision(play: Playbook) -> dict[str, Any]:
    [record] = [r for r in play.audit() if r.get("event") == "decision"]
    return record


async def test_the_same_approver_twice_counts_once(tmp_path: Path, llm: FakeLLMServer, receiver: Receiver) -> None:
    receiver.replies = [Reply("approve", "alice"), Reply("approve", "alice"), Reply("approve", "carol")]
    async with Playbook(tmp_path, quorum_policy(llm, receiver.url)) as play:
        await play.handshake({})
        answer = await play.sample(prompt("merge the release branch"))
    assert answer["result"]["content"]["text"] == "echo: merge the release branch"
    assert len(receiver.received) == 3  # alice's second yes did not count: a third answer was needed
    assert len(llm.requests) == 1
    assert the_decision(play)["approved_by"] == ["webhook:alice", "webhook:carol"]


async def test_one_name_in_other_cases_or_widths_counts_once(
    tmp_path: Path, llm: FakeLLMServer, receiver: Receiver
) -> None:
    """`Alice` and a fullwidth `ａｌｉｃｅ` are alice again (names compare NFKC-normalised and case-folded):
    they used to count as three people, so one person could meet a quorum of three alone."""
    receiver.replies = [Reply("approve", n) for n in ("alice", "Alice", "\uff41\uff4c\uff49\uff43\uff45", "carol")]
    async with Playbook(tmp_path, quorum_policy(llm, receiver.url)) as play:
        await play.handshake({})
        answer = await play.sample(prompt("merge the release branch"))
    assert answer["result"]["content"]["text"] == "echo: merge the release branch"
    assert len(receiver.received) == 4  # neither Alice nor ａｌｉｃｅ counted: carol was still needed
    assert the_decision(play)["approved_by"] == ["webhook:alice", "webhook:carol"]


async def test_a_deny_ends_it(tmp_path: Path, llm: FakeLLMServer, receiver: Receiver) -> None:
    receiver.replies = [Reply("approve", "alice"), Reply("deny", "bob"), Reply("approve", "carol")]
    async with Playbook(tmp_path, quorum_policy(llm, receiver.url)) as play:
        await play.handshake({})
        answer = await play.sample(prompt("drop the users table"))
    assert "denied through the webhook by bob" in answer["error"]["message"]
    assert llm.requests == []
    assert len(receiver.received) == 2  # nobody is asked after the deny
    record = the_decision(play)
    assert record["decision"] == "rejected"
    assert record["approved_by"] == ["webhook:alice"]  # who had approved before the deny


@asynccontextmanager
async def asked_at_the_console(
    tmp_path: Path, llm: FakeLLMServer, receiver: Receiver
) -> AsyncIterator[tuple[Playbook, SocketConsole, dict[str, Any], list[dict[str, Any]]]]:
    """A quorum of the console and the webhook, with the server's request shown at the console: the proxy,
    the console, the request as it shows it, and the server's answer once it has one."""
    got: list[dict[str, Any]] = []
    policy = quorum_policy(llm, receiver.url, channels="[console, webhook]")
    async with Playbook(tmp_path, policy, console=True) as play:
        await play.handshake({})
        console = await play.attach_console()
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                got.append(await play.sample(prompt("drop the staging database")))

            tg.start_soon(call)
            pending = await console.receive()
            assert pending["type"] == "pending"
            yield play, console, pending, got


async def test_one_name_on_two_channels_counts_once(tmp_path: Path, llm: FakeLLMServer, receiver: Receiver) -> None:
    """alice approving at a console and again as a webhook approver is one person: a second one is needed."""
    bob_decides = threading.Event()
    receiver.replies = [Reply("approve", "alice"), Reply("approve", "bob", hold=bob_decides)]
    async with asked_at_the_console(tmp_path, llm, receiver) as (play, console, pending, got):
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "approver": "alice"})
        with anyio.fail_after(15):  # the webhook's alice came first or comes next; bob is still needed
            while len(receiver.received) < 2:
                await anyio.sleep(0.05)
        assert got == [] and llm.requests == []
        bob_decides.set()
    assert got[0]["result"]["content"]["text"] == "echo: drop the staging database"
    approved_by = the_decision(play)["approved_by"]
    assert len(approved_by) == 2 and approved_by[-1] == "webhook:bob", approved_by
    assert approved_by[0] in ("console:alice", "webhook:alice")


async def test_under_a_quorum_an_edited_prompt_is_refused(
    tmp_path: Path, llm: FakeLLMServer, receiver: Receiver
) -> None:
    """Every approver of a quorum must see what runs: a console approving with an edited prompt denies the
    request (approve it unedited, or deny it), and the LLM is never asked."""
    bob_decides = threading.Event()
    receiver.replies = [Reply("approve", "bob", hold=bob_decides)]
    async with asked_at_the_console(tmp_path, llm, receiver) as (play, console, pending, got):
        edited = {"type": "decision", "id": pending["id"], "approve": True, "approver": "alice"}
        await console.send({**edited, "prompt": "drop the production database"})
        with anyio.fail_after(10):  # refused at once; taken as a yes, it would wait here for bob
            while not got:
                await anyio.sleep(0.05)
        bob_decides.set()
    assert "error" in got[0], got[0]
    assert "edits are refused" in got[0]["error"]["message"]
    assert llm.requests == []
    assert the_decision(play)["decision"] == "rejected"
