"""Edits a human makes at the companion console, played in memory (tests/helpers/playbook.py): an edited
prompt keeps its image whoever answers it (our LLM or a host that samples), an older console's whole
request changes only the text, an edit is held to the matched rule's caps, and a rejected or cancelled
review still leaves one record of the LLM call. The real relay and services between a host and a server
the test plays, the tests' SocketConsole on the proxy's real socket, a loopback LLM speaking the OpenAI
wire format. The terminal's edits (a pty) and the console's happy path through the proxy as a process:
tests/e2e/test_approval_edits.py; the edit itself on every shape of content: tests/unit/approval/test_edits.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import openai_policy

from mcp_sampling_proxy.audit.records import digest

pytestmark = pytest.mark.anyio
IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
IMAGE_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
PARAMS = {
    "messages": [{"role": "user", "content": [{"type": "text", "text": "what is in this picture?"}, IMAGE]}],
    "maxTokens": 50,
}
ASK = "rules:\n  - name: ask\n    action: prompt\n"
REVIEW = "approval:\n  review_response: true\n"


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


def audit_policy(tmp_path: Path, llm: FakeLLMServer, extra: str = "", rules: str | None = ASK) -> str:
    audit = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n  fsync: false\n  content: full\n"
    return openai_policy(llm.base_url, rules=rules) + extra + audit


def sent_user_content(llm: FakeLLMServer) -> list[dict[str, Any]]:
    (request,) = llm.requests
    return cast(list[dict[str, Any]], request.body["messages"][-1]["content"])


def prompt(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 100}


def llm_answer(text: str) -> dict[str, Any]:
    """What our LLM answered, as the record's digest of it reads it."""
    return {
        "role": "assistant",
        "content": {"type": "text", "text": text},
        "model": "gpt-test",
        "stopReason": "endTurn",
    }


def approve_with(pending: dict[str, Any], prompt_text: str) -> dict[str, Any]:
    return {"type": "decision", "id": pending["id"], "approve": True, "scope": "once", "prompt": prompt_text}


async def test_a_prompt_edited_on_the_console_is_what_a_sampling_host_gets(tmp_path: Path, llm: FakeLLMServer) -> None:
    """When the host samples, it is sent the edited request, not the bytes the server sent."""
    got: list[dict[str, Any]] = []
    host_answer = {"result": {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "host-model"}}
    async with Playbook(tmp_path, audit_policy(tmp_path, llm), console=True) as play:
        await play.handshake({"sampling": {}})
        console = await play.attach_console()
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                got.append(await play.sample(PARAMS, tool="sample_raw", host=lambda _: host_answer))

            tg.start_soon(call)
            await console.send(approve_with(await console.receive(), "from the console"))
        (record,) = play.audit()
    assert llm.requests == []
    content = play.host_asked[0]["params"]["messages"][0]["content"]
    assert content == [{"type": "text", "text": "from the console"}, IMAGE]
    assert got[0]["result"]["model"] == "host-model"
    assert (record["provider"], record["prompt_edited_by"]) == ("host", "console")


async def test_an_older_consoles_whole_request_changes_only_the_text(tmp_path: Path, llm: FakeLLMServer) -> None:
    """A console from before prompt edits answers with the whole edited request (`params`): the proxy
    takes only its text, so neither a dropped image nor any other change to the request gets through."""
    async with Playbook(tmp_path, openai_policy(llm.base_url, rules=ASK), console=True) as play:
        await play.handshake({})
        console = await play.attach_console()
        async with anyio.create_task_group() as tg:
            tg.start_soon(play.sample, PARAMS, "sample_raw")
            pending = await console.receive()
            legacy = {
                **pending["params"],
                "maxTokens": 4000,
                "systemPrompt": "obey the console",
                "messages": [{"role": "user", "content": {"type": "text", "text": "old console text"}}],
            }
            await console.send({"type": "decision", "id": pending["id"], "approve": True, "params": legacy})
    (request,) = llm.requests
    assert request.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "old console text"}, IMAGE_URL]}
    ]
    assert request.body["max_tokens"] == 50


async def test_a_prompt_edited_on_the_console_is_held_to_the_rules_caps(tmp_path: Path, llm: FakeLLMServer) -> None:
    """An edit is checked like the original: under the caps of the rule that matched it, not only the
    policy's global ones, so a human cannot send past a rule's `max_text_bytes` by editing."""
    rules = "rules:\n  - name: ask\n    action: prompt\n    limits: {max_text_bytes: 40}\n"
    got: list[dict[str, Any]] = []
    async with Playbook(tmp_path, audit_policy(tmp_path, llm, rules=rules), console=True) as play:
        await play.handshake({})
        console = await play.attach_console()
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                got.append(await play.sample(PARAMS, tool="sample_raw"))

            tg.start_soon(call)
            await console.send(approve_with(await console.receive(), "x" * 41))
        (record,) = play.audit()
    assert llm.requests == []
    message = got[0]["error"]["message"]
    assert "messages[0].content[0] text block is 41 bytes; the limit is 40 bytes (limits.max_text_bytes)" in message
    assert (record["decision"], record["approver"], record["rule"]) == ("error", "console", "ask")


async def test_a_rejected_or_cancelled_review_leaves_one_record_of_the_llm_call(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    """The record waits for the review; a rejection (or the end of the request while under review)
    still records the LLM call: one record per request, saying how it ended."""
    policy = audit_policy(tmp_path, llm, REVIEW, rules=None)
    async with Playbook(tmp_path, policy, console=True) as play:
        await play.handshake({})
        console = await play.attach_console()
        async with anyio.create_task_group() as tg:
            tg.start_soon(play.sample, prompt("first"))
            review = await console.receive()
            await console.send({"type": "review", "id": review["id"], "accept": False, "text": "unused"})
    async with Playbook(tmp_path, policy, console=True) as play:  # the proxy again, on the same log
        await play.handshake({})
        console = await play.attach_console()
        play.host.says(
            {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "sample", "arguments": {}}}
        )
        assert (await play.server.next())["id"] == 9
        play.server.says(
            {"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage", "params": prompt("second")}
        )
        assert (await console.receive())["type"] == "review"
        play.host.says({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}})
        assert (await play.server.next())["method"] == "notifications/cancelled"
        # the server, as its SDK does, cancels the request it was waiting on for the call
        play.server.says({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "s-1"}})
        with anyio.fail_after(10):
            while len(play.audit()) < 2:
                await anyio.sleep(0.05)
        rejected, cancelled = play.audit()
    assert (rejected["decision"], rejected["provider"], rejected["model"]) == ("rejected", "fake", "gpt-test")
    assert rejected["content"]["response"] is None  # the server got no answer
    assert rejected["original_answer_sha256"] == digest(llm_answer("echo: first"))["sha256"]
    assert "answer_edited_by" not in rejected
    assert (cancelled["decision"], cancelled["provider"]) == ("cancelled", "fake")
    assert cancelled["content"]["response"]["result"]["content"]["text"] == "echo: second"
