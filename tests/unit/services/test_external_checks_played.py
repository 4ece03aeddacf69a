"""External checks, played in memory (tests/helpers/playbook.py): the real relay and services between a host
and a server the test plays, an HTTP check on 127.0.0.1 (tests/fakes/check_server.py) and a loopback LLM
speaking the OpenAI wire format. Its verdicts at each stage (allow, deny, modify; request, answer, both),
what it is sent, the keep-alive while it thinks, and every way it can fail to give a valid verdict, which
denies unless its check says on_error: allow. A command validator through the proxy as a process (its
environment, its exit status, its deadline and process group): tests/e2e/test_external_checks.py.
"""

from __future__ import annotations

import json
import runpy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.check_server import Answer, CheckServer
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import ROOT, free_port, openai_policy, run_subcommand

pytestmark = pytest.mark.anyio
PROMPT = "Is 42 prime?"
SAMPLING_HOST: dict[str, Any] = {"sampling": {}}


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


@pytest.fixture
def check() -> Iterator[CheckServer]:
    with CheckServer() as server:
        yield server


def prompt(text: str = PROMPT) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 50}


def policy(llm: FakeLLMServer, entry: str, extra: str = "") -> str:
    """A policy whose one rule runs the check `remote` (its entry's lines)."""
    rules = "rules:\n  - name: checked\n    check: [remote]\n    action: allow\n"
    return openai_policy(llm.base_url, extra=f"{extra}checks:\n  remote:\n{entry}", rules=rules)


def at(check: CheckServer, *lines: str) -> str:
    return f"    url: {check.url}\n" + "".join(f"    {line}\n" for line in lines)


def decision(play: Playbook) -> dict[str, Any]:
    (record,) = [record for record in play.audit() if record.get("event") == "decision"]
    return record


async def sampled(tmp_path: Path, policy_text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the server's sampling request got back, and its decision record."""
    async with Playbook(tmp_path, policy_text) as play:
        await play.handshake()
        answer = await play.sample(prompt())
        return answer, decision(play)


async def test_a_deny_refuses_the_request_with_the_checks_reason(
    tmp_path: Path, llm: FakeLLMServer, check: CheckServer
) -> None:
    check.verdict({"verdict": "deny", "reason": "the prompt holds a card number"})
    answer, audited = await sampled(tmp_path, policy(llm, at(check)))
    assert answer["error"]["code"] == -1
    assert answer["error"]["message"] == "sampling denied by check 'remote': the prompt holds a card number"
    assert llm.requests == []  # the LLM never saw it
    assert audited["decision"] == "deny"
    assert audited["reason"] == answer["error"]["message"]
    assert (audited["checks"][0]["verdict"], audited["checks"][0]["reason"]) == (
        "deny",
        "the prompt holds a card number",
    )
    tail = run_subcommand(["audit", "tail", str(tmp_path / "audit.jsonl")], check=True)
    assert "deny (rule checked)  checks remote deny  reason: sampling denied by check 'remote'" in tail.stdout


async def test_a_request_stage_modify_is_what_the_llm_sees(
    tmp_path: Path, llm: FakeLLMServer, check: CheckServer
) -> None:
    llm.reply_text("Yes.")
    check.verdict({"verdict": "modify", "text": "Is 43 prime?"})
    answer, audited = await sampled(tmp_path, policy(llm, at(check)))
    assert answer["result"]["content"]["text"] == "Yes."
    assert llm.last.body["messages"] == [{"role": "user", "content": "Is 43 prime?"}]
    (posted,) = check.received
    assert (posted.body["stage"], posted.body["request"]["maxTokens"]) == ("request", 50)
    assert posted.body["request"]["messages"] == [{"role": "user", "content": {"type": "text", "text": PROMPT}}]
    assert "answer" not in posted.body
    assert audited["prompt_edited_by"] == "check remote"
    assert audited["checks"][0]["verdict"] == "modify"


async def test_an_answer_stage_modify_is_what_the_server_gets(
    tmp_path: Path, llm: FakeLLMServer, check: CheckServer
) -> None:
    llm.reply_text("Your card is 4111 1111 1111 1111.")
    check.verdict({"verdict": "modify", "text": "Your card is [removed].", "reason": "card number"})
    answer, audited = await sampled(tmp_path, policy(llm, at(check, "stage: answer")))
    assert answer["result"]["content"] == {"type": "text", "text": "Your card is [removed]."}
    (posted,) = check.received  # stage answer: not asked about the request
    assert posted.body["stage"] == "answer"
    assert posted.body["answer"]["content"]["text"] == "Your card is 4111 1111 1111 1111."
    assert posted.body["request"]["messages"][0]["content"]["text"] == PROMPT
    assert audited["answer_edited_by"] == "check remote"
    assert audited["original_answer_sha256"]
    assert audited["checks"] == [
        {
            "name": "remote",
            "stage": "answer",
            "verdict": "modify",
            "reason": "card number",
            "duration_ms": audited["checks"][0]["duration_ms"],
        }
    ]


async def test_what_an_answer_check_writes_is_scanned_for_credentials_too(
    tmp_path: Path, llm: FakeLLMServer, check: CheckServer
) -> None:
    """The credential scan runs after the answer checks: a check that writes a key into the answer (its own,
    or one it was tricked into) does not get it to the server."""
    check.verdict({"verdict": "modify", "text": "Use AKIAIOSFODNN7EXAMPLE.", "reason": "helpful"})
    answer, audited = await sampled(tmp_path, policy(llm, at(check, "stage: answer")))
    assert answer["result"]["content"] == {"type": "text", "text": "Use [REDACTED:AWS Access Key]."}
    assert audited["answer_secrets"] == ["AWS Access Key"]


async def test_an_answer_stage_deny_keeps_the_answer_from_the_server(
    tmp_path: Path, llm: FakeLLMServer, check: CheckServer
) -> None:
    llm.reply_text("Here is how to pick the lock.")
    check.answer(Answer())  # the request stage allows; the answer stage denies
    check.verdict({"verdict": "deny", "reason": "unsafe answer"})
    answer, audited = await sampled(tmp_path, policy(llm, at(check, "stage: both")))
    assert "pick the lock" not in json.dumps(answer)
    assert answer["error"]["message"] == "sampling denied by check 'remote': unsafe answer"
    assert len(llm.requests) == 1
    assert (audited["decision"], audited["provider"]) == ("deny", "fake")
    assert audited["original_answer_sha256"]
    assert [(c["stage"], c["verdict"]) for c in audited["checks"]] == [("request", "allow"), ("answer", "deny")]


async def test_checks_apply_when_the_host_samples_itself(
    tmp_path: Path, llm: FakeLLMServer, check: CheckServer
) -> None:
    """A host that can sample answers the request itself: the checks still see its prompt and its answer."""
    check.verdict({"verdict": "modify", "text": "Is 43 prime?"})
    check.verdict({"verdict": "modify", "text": "[checked] yes"})
    host_said = {"role": "assistant", "content": {"type": "text", "text": "Yes, 43 is prime."}, "model": "host-model"}
    async with Playbook(tmp_path, policy(llm, at(check, "stage: both"))) as play:
        await play.handshake(SAMPLING_HOST)
        answer = await play.sample(prompt(), host=lambda _: {"result": host_said})
        audited = decision(play)
    assert answer["result"]["content"] == {"type": "text", "text": "[checked] yes"}
    (asked,) = play.host_asked
    assert asked["params"]["messages"][0]["content"]["text"] == "Is 43 prime?"
    assert check.received[1].body["answer"]["content"]["text"] == "Yes, 43 is prime."
    assert llm.requests == []
    assert (audited["provider"], audited["prompt_edited_by"], audited["answer_edited_by"]) == (
        "host",
        "check remote",
        "check remote",
    )


async def test_a_slow_check_keeps_the_hosts_tool_call_alive(
    tmp_path: Path, llm: FakeLLMServer, check: CheckServer
) -> None:
    llm.reply_text("No.")
    check.answer(Answer(delay=1.0))
    async with Playbook(tmp_path, policy(llm, at(check), extra="sampling:\n  keepalive_seconds: 0.25\n")) as play:
        await play.handshake()
        params = {"name": "sample", "arguments": {}, "_meta": {"progressToken": "tok"}}
        play.host.says({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params})
        assert (await play.server.next())["method"] == "tools/call"
        play.server.says({"jsonrpc": "2.0", "id": 900, "method": "sampling/createMessage", "params": prompt()})
        messages: list[str] = []
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while True:
                    message = await play.host.next(timeout=10)
                    assert message.get("method") == "notifications/progress", message
                    messages.append(message["params"].get("message"))

            tg.start_soon(watch)
            answer = await play.server.next(timeout=10)
            tg.cancel_scope.cancel()
    assert answer["result"]["content"]["text"] == "No."
    assert "waiting for check remote" in messages


async def test_on_error_allow_lets_the_request_through_a_failed_check(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("No.")
    entry = f"    url: http://127.0.0.1:{free_port()}/check\n    on_error: allow\n"
    answer, audited = await sampled(tmp_path, policy(llm, entry))
    assert answer["result"]["content"]["text"] == "No."
    assert audited["decision"] == "allow"
    assert (audited["checks"][0]["verdict"], audited["checks"][0]["on_error"]) == ("error", "allow")
    assert "cannot be reached" in audited["checks"][0]["reason"]


async def test_a_check_past_its_deadline_denies(tmp_path: Path, llm: FakeLLMServer, check: CheckServer) -> None:
    check.answer(Answer(delay=2.0))
    answer, audited = await sampled(tmp_path, policy(llm, at(check, "timeout: 0.5s")))
    assert answer["error"]["message"] == (
        "sampling denied: check 'remote' failed (did not answer within 0.5s and was stopped), "
        "and a failed check denies (on_error: deny)"
    )
    assert llm.requests == []
    assert (audited["checks"][0]["verdict"], audited["checks"][0]["on_error"]) == ("error", "deny")


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (Answer(body=b"looks fine to me"), "answered something that is not one JSON verdict: 'looks fine to me'"),
        (Answer(body=b'{"verdict": "maybe"}'), "its verdict 'maybe' is not one of allow, deny, modify"),
        (
            Answer(body=b'{"verdict": "allow", "text": "x"}'),
            "its allow verdict has a text, which only a modify verdict takes",
        ),
        (
            Answer(status=302, body=b"", location="http://127.0.0.1:1/"),
            "answered HTTP 302, a redirect, which is not followed",
        ),
        (None, "cannot be reached: ConnectError"),
    ],
    ids=["garbage", "unknown-verdict", "text-on-allow", "redirect", "unreachable"],
)
async def test_a_check_without_a_valid_verdict_denies(
    tmp_path: Path, llm: FakeLLMServer, check: CheckServer, answer: Answer | None, why: str
) -> None:
    if answer is None:
        entry = f"    url: http://127.0.0.1:{free_port()}/check\n"
    else:
        check.answer(answer)
        entry = at(check)
    got, audited = await sampled(tmp_path, policy(llm, entry))
    assert got["error"]["message"].startswith(f"sampling denied: check 'remote' failed ({why}")
    assert llm.requests == []
    assert audited["checks"][0]["verdict"] == "error"


# the 2026-07-28 server's script, as the process tests run it (loaded from its file: the fixtures are scripts)
modern_server: Callable[[dict[str, Any]], list[dict[str, Any]]] = runpy.run_path(
    str(ROOT / "tests" / "fixtures" / "modern_raw_server.py")
)["answers"]
MODERN_HOST_THAT_SAMPLES = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
    "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "1"},
}


async def test_a_checked_request_is_never_left_to_a_2026_host_that_could_sample(
    tmp_path: Path, llm: FakeLLMServer, check: CheckServer
) -> None:
    """In the 2026-07-28 era the proxy may leave a round's sampling to a host that samples; a rule with
    checks keeps it, so the host cannot answer past them."""
    check.verdict({"verdict": "deny", "reason": "not with this prompt"})
    async with Playbook(tmp_path, policy(llm, at(check), extra="upstream:\n  era: auto\n")) as play:
        play.serve_with(modern_server)
        call = {"name": "mixed", "arguments": {}, "_meta": MODERN_HOST_THAT_SAMPLES}
        first = await play.host_asks("tools/call", call)
        assert set(first["result"]["inputRequests"]) == {"r"}  # the sampling request is not shown to the host
        retry = {**call, "requestState": first["result"]["requestState"], "inputResponses": {"r": {"roots": []}}}
        final = await play.host_asks("tools/call", retry)
    assert "sampling denied by check 'remote': not with this prompt" in final["error"]["message"]
    assert len(check.received) == 1
    assert llm.requests == []
