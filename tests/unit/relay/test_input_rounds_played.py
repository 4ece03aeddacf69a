"""2026-07-28 rounds through the relay, played in memory: a 2026 host, a hand-written 2026 server's
script (tests/fixtures/modern_raw_server.py's `answers`, which the process tests run too), and the real
relay and services between them: the state echoed byte for byte, a server that keeps asking stopped,
rounds split between host and proxy and merged, cancellation translated to the retry's id, and sampling
the host answers judged, limited and audited by the policy like the proxy's own.
"""

from __future__ import annotations

import json
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import ROOT, openai_policy

pytestmark = pytest.mark.anyio

# the server's script, as the process tests run it (loaded from its file: the fixtures are scripts, not a package)
answers: Callable[[dict[str, Any]], list[dict[str, Any]]] = runpy.run_path(
    str(ROOT / "tests" / "fixtures" / "modern_raw_server.py")
)["answers"]

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "1"},
}
SAMPLING_HOST_META = {**META, "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}
HOST_SAMPLING_ANSWER = {
    "role": "assistant",
    "content": {"type": "text", "text": "from the host"},
    "model": "host-model",
    "stopReason": "endTurn",
}
ROUNDS = "elicitation: {non_interactive: accept_defaults}\n"


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


class Host:
    """The 2026 host's requests, each waited for by id (other messages kept in `seen`)."""

    def __init__(self, play: Playbook) -> None:
        self.play, self.next_id, self.seen = play, 1, list[dict[str, Any]]()

    async def call(self, name: str, meta: dict[str, Any] = META, **params: Any) -> dict[str, Any]:
        request_id, self.next_id = self.next_id, self.next_id + 1
        message = {"name": name, "arguments": {}, "_meta": meta, **params}
        self.play.host.says({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": message})
        while True:
            got = await self.play.host.next(timeout=10)
            if got.get("id") == request_id and "method" not in got:
                return got
            self.seen.append(got)

    async def retry(
        self, round_: dict[str, Any], name: str, answered: dict[str, Any], meta: dict[str, Any] = META
    ) -> dict[str, Any]:
        """The retry of `name` after `round_`: its requestState echoed, `answered` as the inputResponses."""
        return await self.call(name, meta, requestState=round_["result"]["requestState"], inputResponses=answered)


def body(response: dict[str, Any]) -> dict[str, Any]:
    text: dict[str, Any] = json.loads(response["result"]["content"][0]["text"])
    return text


def policy(llm: FakeLLMServer, tmp_path: Path, extra: str = "", rules: str | None = None) -> str:
    audit = f"audit: {{path: {tmp_path / 'audit.jsonl'}, content: full}}\n"
    return openai_policy(llm.base_url, rules=rules) + ROUNDS + audit + extra


async def test_answers_are_sent_back_with_the_state_echoed_exactly(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("sampled")
    async with Playbook(tmp_path, policy(llm, tmp_path)) as play:
        play.serve_with(answers)
        host = Host(play)
        response = await host.call("echo_state", {**META, "progressToken": "p-1"})
    progress = [m for m in host.seen if m.get("method") == "notifications/progress"]
    assert progress and progress[0]["params"]["progressToken"] == "p-1"  # the token survives the retry
    assert response["id"] == 1  # the host's own id, though the server answered a retry
    got = body(response)
    assert got["state_ok"] is True
    assert got["answers"]["s"]["content"] == {"type": "text", "text": "sampled"}
    assert got["answers"]["s"]["model"] == "gpt-test"
    assert got["id"].startswith("mcp-sampling-proxy:")  # the retry used a private id


async def test_a_server_that_keeps_asking_gets_stopped(tmp_path: Path, llm: FakeLLMServer) -> None:
    async with Playbook(tmp_path, policy(llm, tmp_path, "upstream:\n  max_input_rounds: 3\n")) as play:
        play.serve_with(answers)
        response = await Host(play).call("forever")
    assert "kept asking for input after 3 rounds" in response["error"]["message"]
    assert len(llm.requests) == 3


async def test_mixed_requests_split_between_host_and_proxy_and_merged(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("from the proxy")
    async with Playbook(tmp_path, policy(llm, tmp_path)) as play:
        play.serve_with(answers)
        host = Host(play)
        first = await host.call("mixed")
        # the host sees only what it must answer itself
        assert first["result"]["resultType"] == "input_required"
        assert set(first["result"]["inputRequests"]) == {"r"}
        final = await host.retry(first, "mixed", {"r": {"roots": []}})
    got = body(final)["answers"]
    assert got["r"] == {"roots": []}
    assert got["s"]["content"]["text"] == "from the proxy"
    assert got["e"] == {"action": "accept", "content": {"name": "Ada"}}  # elicitation.non_interactive


async def test_host_cancellation_reaches_the_retry(tmp_path: Path, llm: FakeLLMServer) -> None:
    async with Playbook(tmp_path, policy(llm, tmp_path)) as play:
        got = play.serve_with(answers)
        play.host.says(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "slow", "arguments": {}, "_meta": META},
            }
        )
        with anyio.fail_after(10):
            while not any(m.get("params", {}).get("inputResponses") for m in got):
                await anyio.sleep(0.01)  # the retry is now at the server
        retry = next(m for m in got if m.get("params", {}).get("inputResponses"))
        play.host.says({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})
        with anyio.fail_after(10):
            while not any(m.get("method") == "notifications/cancelled" for m in got):
                await anyio.sleep(0.01)
        await anyio.sleep(0.1)
        assert play.host.nothing_yet()  # the cancelled call gets no answer
    cancelled = [m["params"]["requestId"] for m in got if m.get("method") == "notifications/cancelled"]
    assert cancelled == [retry["id"]] and retry["id"].startswith("mcp-sampling-proxy:")


async def test_sampling_the_host_answers_is_audited_with_the_retried_tool(tmp_path: Path, llm: FakeLLMServer) -> None:
    # a `tool: none` rule (the shipped trusted-autoapprove has one) must not catch a round's requests: they
    # belong to the tools/call being retried, here `mixed`
    rules = (
        "rules:\n  - name: stray\n    when: {tool: none}\n    action: deny\n"
        "  - name: mixed-ok\n    when: {tool: mixed}\n    action: allow\n"
    )
    async with Playbook(tmp_path, policy(llm, tmp_path, rules=rules)) as play:
        play.serve_with(answers)
        host = Host(play)
        first = await host.call("mixed", SAMPLING_HOST_META)
        assert set(first["result"]["inputRequests"]) == {"s", "r"}  # the host samples itself; e is the proxy's
        answered = {"s": HOST_SAMPLING_ANSWER, "r": {"roots": []}}
        final = await host.retry(first, "mixed", answered, SAMPLING_HOST_META)
        records = {r["method"]: r for r in play.audit() if r.get("method")}
    assert body(final)["answers"]["s"]["content"]["text"] == "from the host"
    sampled = records["sampling/createMessage"]
    assert (sampled["tool"], sampled["rule"], sampled["provider"], sampled["model"]) == (
        "mixed",
        "mixed-ok",
        "host",
        "host-model",
    )
    assert sampled["decision"] == "allow"
    assert sampled["content"]["response"]["result"]["content"]["text"] == "from the host"
    assert (records["elicitation/create"]["tool"], records["elicitation/create"]["rule"]) == ("mixed", "mixed-ok")


async def test_sampling_the_policy_denies_never_reaches_a_host_that_could_sample(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    rules = (
        "rules:\n  - name: no-mixed-sampling\n    when: {tool: mixed, method: sampling}\n"
        "    action: deny\n  - name: rest\n    action: allow\n"
    )
    async with Playbook(tmp_path, policy(llm, tmp_path, rules=rules)) as play:
        play.serve_with(answers)
        host = Host(play)
        first = await host.call("mixed", SAMPLING_HOST_META)
        assert set(first["result"]["inputRequests"]) == {"r"}  # the denied sampling is not shown to the host
        final = await host.retry(first, "mixed", {"r": {"roots": []}}, SAMPLING_HOST_META)
        denied = [r for r in play.audit() if r.get("method") == "sampling/createMessage"]
    assert "sampling denied by policy rule 'no-mixed-sampling'" in final["error"]["message"]
    assert [(r["decision"], r["tool"], r["rule"]) for r in denied] == [("deny", "mixed", "no-mixed-sampling")]


async def test_the_rate_limit_counts_sampling_the_host_answers(tmp_path: Path, llm: FakeLLMServer) -> None:
    """A rule's rate limit holds in the 2026-07-28 era too when the host does the sampling: past the
    limit the request is not shown to the host, and the proxy refuses it with the limit's error."""
    rules = (
        "rules:\n  - name: two-a-minute\n    when: {tool: mixed, method: sampling}\n"
        "    action: allow\n    rate_limit: {requests: 2, per: 1m}\n  - name: rest\n    action: allow\n"
    )
    async with Playbook(tmp_path, policy(llm, tmp_path, rules=rules)) as play:
        play.serve_with(answers)
        host = Host(play)
        rounds = [await host.call("mixed", SAMPLING_HOST_META) for _ in range(3)]
        shown = ["s" in r["result"]["inputRequests"] for r in rounds]
        assert shown == [True, True, False]  # the third is past 2 a minute: the host never sees it
        final = await host.retry(rounds[2], "mixed", {"r": {"roots": []}}, SAMPLING_HOST_META)
        refused = [r for r in play.audit() if r.get("method") == "sampling/createMessage"]
    assert "rate limit" in final["error"]["message"]
    assert [(r["decision"], r.get("limit")) for r in refused] == [("deny", "rate_limit")]


async def test_sampling_the_policy_refuses_never_reaches_the_host_in_any_round(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    """A round that mixes the host's requests with sampling the policy refuses: the host never sees the
    refused one, whether the round has no requestState to merge answers by (it was shown everything) or
    comes after a round the proxy answered alone (the later round was passed on whole)."""
    rules = "rules:\n  - name: no-sampling\n    when: {method: sampling}\n    action: deny\n"
    async with Playbook(tmp_path, policy(llm, tmp_path, rules=rules)) as play:
        play.serve_with(answers)
        host = Host(play)
        stateless = await host.call("mixed_stateless", SAMPLING_HOST_META)
        late = await host.call("late_mixed", SAMPLING_HOST_META)
        final = await host.retry(late, "late_mixed", {"r": {"roots": []}}, SAMPLING_HOST_META)
    assert set(stateless["result"]["inputRequests"]) == {"r"}
    assert late["result"]["requestState"] == "b" and set(late["result"]["inputRequests"]) == {"r"}
    assert "sampling denied by policy rule 'no-sampling'" in final["error"]["message"]
    assert llm.requests == []
