"""Edits by a human keep what they did not touch, and the audit log says what was edited (issue #11, defect 3).

`[e]dit` at an approval replaces only the text of the last user message: its image (and every
other non-text block) still reaches the LLM. The review screen shows the prompt as it was sent,
marked when it was edited. The audit record says who edited the prompt; when a reviewer replaced
the LLM's answer, its `content.response` is what the server got, with `answer_edited_by` and the
digest of the LLM's own answer. Through the real proxy, the fake LLM, a pty and the console socket.
The edit itself, on every shape of content, in process: tests/unit/approval/test_edits.py; what the
services make of a console's edits (a host that samples, an older console, the rule's caps, a rejected
or cancelled review), played in memory: tests/unit/services/test_approval_edits_played.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import SocketConsole
from helpers.support import (
    PY,
    SMALL_SERVER,
    openai_policy,
    proxy_command,
    proxy_env,
    sdk_host,
    tool_json,
    write_policy,
)
from helpers.terminal import PtySession, terminal_env, try_argv

from mcp_sampling_proxy.commands import audit as audit_cmd

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
IMAGE_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
PARAMS = {
    "messages": [{"role": "user", "content": [{"type": "text", "text": "what is in this picture?"}, IMAGE]}],
    "maxTokens": 50,
}
ASK = "rules:\n  - name: ask\n    action: prompt\n"
REVIEW = "approval:\n  review_response: true\n"
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="needs a Linux pty")


def audit_policy(llm: FakeLLMServer, audit: Path, extra: str = "", rules: str | None = ASK) -> str:
    return openai_policy(llm.base_url, rules=rules) + extra + f"audit:\n  path: {audit}\n  content: full\n"


def sample_raw(policy: str, params: dict[str, Any] = PARAMS) -> list[str]:
    arguments = json.dumps({"params_json": json.dumps(params)})
    return try_argv("--policy", policy, "--tool", "sample_raw", "--args", arguments, "--", PY, SMALL_SERVER)


def records(audit: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in audit.read_text().splitlines()]


def sent_user_content(llm: FakeLLMServer) -> list[dict[str, Any]]:
    (request,) = llm.requests
    return cast(list[dict[str, Any]], request.body["messages"][-1]["content"])


def sha256_of(value: Any) -> str:
    """The README's canonical JSON: sorted keys, compact separators, UTF-8."""
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()


def tail(capsys: pytest.CaptureFixture[str], audit: Path) -> str:
    capsys.readouterr()
    assert audit_cmd.main(["tail", str(audit)]) == 0
    return capsys.readouterr().out


@linux_only
def test_terminal_edit_keeps_the_image_and_the_record_says_who_edited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = tmp_path / "audit.jsonl"
    with FakeLLMServer("openai") as llm:
        session = PtySession(
            sample_raw(write_policy(tmp_path, audit_policy(llm, audit))), terminal_env(TEST_LLM_KEY="k")
        )
        screen = session.read_until(b"Allow this request?")
        assert b"[image image/png" in screen
        session.type("e\n")
        asked = session.read_until(b"end with a line holding only '.'").split(b"[e]dit prompt")[-1]
        session.type("a new question\n.\n")
        assert session.finish() == 0
        content = sent_user_content(llm)
    assert content == [{"type": "text", "text": "a new question"}, IMAGE_URL]
    assert b"image" in asked  # the human was told the image stays
    (record,) = records(audit)
    assert (record["decision"], record["approver"], record["prompt_edited_by"]) == ("approved", "terminal", "terminal")
    assert record["content"]["messages"][0]["message"] == {
        "role": "user",
        "content": [{"type": "text", "text": "a new question"}, IMAGE],
    }
    assert "answer_edited_by" not in record and "original_answer_sha256" not in record
    assert "prompt edited by terminal" in tail(capsys, audit)


@linux_only
def test_terminal_review_shows_the_edited_prompt_and_the_record_holds_the_answer_the_server_got(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = tmp_path / "audit.jsonl"
    with FakeLLMServer("openai") as llm:
        llm.reply_text("the model's draft")
        session = PtySession(
            sample_raw(write_policy(tmp_path, audit_policy(llm, audit, REVIEW))), terminal_env(TEST_LLM_KEY="k")
        )
        session.read_until(b"Allow this request?")
        session.type("e\n")
        session.read_until(b"end with a line holding only '.'")
        session.type("a new question\n.\n")
        screen = session.read_until(b"Send this answer to the server?")
        review = screen.split(b"with your edited prompt")[1]
        assert b"(edited at the terminal)" in review
        assert b"a new question" in review and b"[image image/png" in review
        assert b"what is in this picture?" not in review
        assert b"the model's draft" in review
        session.type("e\n")
        session.read_until(b"Replacement answer")
        session.type("the operator's answer\n.\n")
        assert session.finish() == 0
        assert [block["type"] for block in sent_user_content(llm)] == ["text", "image_url"]
    got = json.loads(session.output.split(b"result:")[1])["result"]  # what the server received
    assert got["content"] == {"type": "text", "text": "the operator's answer"}
    (record,) = records(audit)
    assert record["decision"] == "approved"
    assert record["prompt_edited_by"] == "terminal" and record["answer_edited_by"] == "terminal"
    assert record["content"]["response"]["result"] == got
    assert record["content"]["response"]["sha256"] == sha256_of(got)
    original = {
        "role": "assistant",
        "content": {"type": "text", "text": "the model's draft"},
        "model": "gpt-test",
        "stopReason": "endTurn",
    }
    assert record["original_answer_sha256"] == sha256_of(original)
    assert audit_cmd.main(["verify", str(audit)]) == 0
    line = tail(capsys, audit)
    assert "prompt edited by terminal" in line and "answer edited by terminal" in line


@pytest.mark.anyio
async def test_console_edits_send_only_text_and_keep_the_image(tmp_path: Path, dirs: dict[str, str]) -> None:
    audit = tmp_path / "audit.jsonl"
    with FakeLLMServer("openai") as llm:
        llm.reply_text("the model's draft")
        policy = write_policy(tmp_path, audit_policy(llm, audit, REVIEW))
        async with sdk_host(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log") as client:
            console = await SocketConsole.attach(Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"]))
            async with anyio.create_task_group() as tg:
                got: list[Any] = []

                async def call() -> None:
                    got.append(tool_json(await client.call_tool("sample_raw", {"params_json": json.dumps(PARAMS)})))

                tg.start_soon(call)
                pending = await console.receive()
                assert pending["type"] == "pending" and pending["edit"] == "prompt"
                await console.send(
                    {
                        "type": "decision",
                        "id": pending["id"],
                        "approve": True,
                        "scope": "once",
                        "prompt": "from the console",
                    }
                )
                assert (await console.receive())["type"] == "resolved"
                review = await console.receive()
                assert review["type"] == "review" and review["edit"] == "text"
                assert review["prompt_edited_by"] == "console"
                assert "from the console" in review["summary"] and "[image image/png" in review["summary"]
                assert "what is in this picture?" not in review["summary"]
                await console.send({"type": "review", "id": review["id"], "accept": True, "text": "console answer"})
        content = sent_user_content(llm)
    assert content == [{"type": "text", "text": "from the console"}, IMAGE_URL]
    result = got[0]["result"]
    assert result["content"] == {"type": "text", "text": "console answer"}
    (record,) = records(audit)
    assert (record["approver"], record["prompt_edited_by"], record["answer_edited_by"]) == ("console",) * 3
    assert record["content"]["response"]["result"] == result
    assert record["original_answer_sha256"] == sha256_of(
        {
            "role": "assistant",
            "content": {"type": "text", "text": "the model's draft"},
            "model": "gpt-test",
            "stopReason": "endTurn",
        }
    )


@linux_only
def test_console_command_edit_keeps_the_image(tmp_path: Path, dirs: dict[str, str]) -> None:
    from helpers.terminal import console_beside_a_proxy

    with FakeLLMServer("openai") as llm:
        console, proxy = console_beside_a_proxy(tmp_path, dirs, llm.base_url)
        with proxy as host:
            host.initialize()
            console.read_until(b"attached")
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 5,
                    "method": "tools/call",
                    "params": {"name": "sample_raw", "arguments": {"params_json": json.dumps(PARAMS)}},
                }
            )
            console.read_until(b"Allow this request? [y]es once")
            console.type("e\n")
            console.read_until(b"end with a line holding only '.'")
            console.type("typed at the console\n.\n")
            response = host.wait_for(lambda m: m.get("id") == 5)
        os.kill(console.pid, 2)
        console.finish()
        content = sent_user_content(llm)
    assert content == [{"type": "text", "text": "typed at the console"}, IMAGE_URL]
    assert "echo: typed at the console" in response["result"]["content"][0]["text"]
