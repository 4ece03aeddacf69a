"""The webhook approval channel played in memory (tests/helpers/playbook.py): a receiver on 127.0.0.1
(tests/helpers/webhook_receiver.py) denies, forges or replays a signed answer, or is gone, and the
server is refused with the reason in the audit record; without its secret the webhook asks nobody. The
real relay and services between a host and a server the test plays, a loopback LLM speaking the OpenAI
wire format. An approval through the proxy as a process (the server's environment has no secret),
`doctor` and the guide's receiver: tests/e2e/test_webhook_approval.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import openai_policy
from helpers.webhook_receiver import Receiver, Reply, webhook_receiver

pytestmark = pytest.mark.anyio
SECRET = "whsec-test-7f3a9c1e0b2d4e6f8a1c"
RULES = "rules:\n  - name: ask-first\n    action: prompt\n"


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    monkeypatch.setenv("APPROVAL_HOOK_SECRET", SECRET)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver(SECRET.encode()) as made:
        yield made


def webhook_policy(tmp_path: Path, llm: FakeLLMServer, url: str) -> str:
    approval = (
        "approval:\n  channels: [webhook]\n"
        f"  webhook:\n    url: {url}\n    secret_env: APPROVAL_HOOK_SECRET\n    timeout: 20s\n"
    )
    audit = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n  fsync: false\n  content: full\n"
    return openai_policy(llm.base_url, rules=RULES) + approval + audit


def prompt(text: str) -> dict[str, Any]:
    """The request the kitchen-sink server's `sample` tool sends."""
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 100}


async def sample(tmp_path: Path, policy: str, *texts: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the server gets for each text, one after the other, and the audit's decision records."""
    async with Playbook(tmp_path, policy, name="kitchen_sink_server") as play:
        await play.handshake({})
        answers = [await play.sample(prompt(text)) for text in texts]
    return answers, [r for r in play.audit() if r.get("event") == "decision"]


async def test_a_webhook_deny_refuses_the_request(tmp_path: Path, llm: FakeLLMServer, receiver: Receiver) -> None:
    receiver.replies = [Reply("deny", "bob")]
    (answer,), (record,) = await sample(tmp_path, webhook_policy(tmp_path, llm, receiver.url), "delete staging")
    assert answer["error"]["code"] == -1
    assert "denied through the webhook by bob" in answer["error"]["message"]
    assert llm.requests == []
    assert record["decision"] == "rejected" and record["approver"] == "webhook"
    [sent] = receiver.received
    assert sent.signature_ok  # signed with the shared secret over timestamp.body
    assert (sent.body["server"], sent.body["tool"], sent.body["rule"]) == ("kitchen_sink_server", "sample", "ask-first")


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        pytest.param("mac", "does not match (not signed with the shared secret", id="bad-mac"),
        pytest.param("digest", "request_sha256 is not the digest of what would run", id="wrong-digest"),
    ],
)
async def test_a_forged_answer_is_refused(
    tmp_path: Path, llm: FakeLLMServer, receiver: Receiver, forge: str, why: str
) -> None:
    receiver.replies = [Reply("approve", "mallory", forge=forge)]
    (answer,), (record,) = await sample(tmp_path, webhook_policy(tmp_path, llm, receiver.url), "wire the money")
    assert why in answer["error"]["message"]
    assert llm.requests == []
    assert record["decision"] == "rejected"
    assert "the webhook gave no valid approval" in record["reason"] and why in record["reason"]
    assert "approved_by" not in record


async def test_an_answer_replayed_for_another_request_is_refused(
    tmp_path: Path, llm: FakeLLMServer, receiver: Receiver
) -> None:
    """The first request is approved; the same signed answer, sent again byte for byte for a second request
    with the very same prompt (so the same request_sha256), is refused: it names the first request's id."""
    receiver.replies = [Reply("approve", "alice"), Reply("approve", "alice", forge="replay")]
    policy = webhook_policy(tmp_path, llm, receiver.url)
    (first, second), records = await sample(tmp_path, policy, "same words", "same words")
    assert first["result"]["content"]["text"] == "echo: same words"
    assert "it answers another request" in second["error"]["message"]
    assert len(llm.requests) == 1
    first_sent, second_sent = receiver.received
    assert first_sent.body["request_sha256"] == second_sent.body["request_sha256"]
    assert first_sent.body["request_id"] != second_sent.body["request_id"]
    assert [r["decision"] for r in records] == ["approved", "rejected"]
    assert records[0]["approved_by"] == ["webhook:alice"]


async def test_an_unreachable_webhook_is_a_refusal_that_says_so(
    tmp_path: Path, llm: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with webhook_receiver(SECRET.encode()) as gone:
        url = gone.url  # nobody listens there any more
    (answer,), _ = await sample(tmp_path, webhook_policy(tmp_path, llm, url), "anything")
    assert "the webhook went away before answering" in answer["error"]["message"]
    assert llm.requests == []
    logged = capsys.readouterr()
    assert "cannot reach the approval webhook" in logged.out + logged.err


async def test_without_its_secret_the_webhook_asks_nobody(
    tmp_path: Path, llm: FakeLLMServer, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("APPROVAL_HOOK_SECRET")
    (answer,), _ = await sample(tmp_path, webhook_policy(tmp_path, llm, receiver.url), "anything")
    assert "no approval channel is available" in answer["error"]["message"]
    assert receiver.received == []
    assert llm.requests == []
