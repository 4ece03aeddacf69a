"""2026-07-28 callers of `serve`, played in process (helpers/played_serve.py `played_sessions`): no session,
each POST one request answered in its body by the caller's lane (a server of the caller's own, played in
memory), a call's progress and log messages streamed, subscriptions/listen an event stream, idle lanes ended,
a lane whose server exits replaced at the next request."""

from __future__ import annotations

import json
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.played_serve import ACCEPT, played_sessions
from helpers.serving import ALICE, BOB, token_file
from helpers.support import ROOT, first_text, openai_policy, tool_json, write_policy

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("llm_key")]

MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
modern_raw_server: Callable[[dict[str, Any]], list[dict[str, Any]]] = runpy.run_path(
    str(ROOT / "tests" / "fixtures" / "modern_raw_server.py")
)["answers"]


def modern_request(request_id: int | str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**(params or {}), "_meta": MODERN_META}}


def modern_headers(token: str, method: str) -> dict[str, str]:
    return {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }


async def until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.01)


async def test_a_2026_client_is_served_statelessly_with_sampling(tmp_path: Path, llm: FakeLLMServer) -> None:
    """The SDK's Client in its default mode probes 2026-07-28 first and stays there: each request is a POST
    of its own, answered in its body. The server leg is pinned to the handshake era, where the server
    samples with a request the proxy answers (its LLM, the audit naming the caller)."""
    extra = f"upstream:\n  era: handshake\naudit:\n  path: {tmp_path / 'audit.jsonl'}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=extra))
    llm.reply_text("stateless four")
    async with (
        played_sessions("--token-file", token_file(tmp_path), policy=policy) as served,
        served.client(ALICE, mode="auto") as client,
    ):
        assert client.session.protocol_version == MODERN
        assert "sample" in {tool.name for tool in (await client.list_tools()).tools}
        assert first_text(await client.call_tool("echo", {"text": "no session"})) == "no session"
        answer = tool_json(await client.call_tool("sample", {"prompt": "2+2?"}))
        assert len(served.servers) == 1 and not served.front.sessions
        (record,) = served.audit()
    assert answer["content"]["text"] == "stateless four"
    assert record["client"] == "alice" and record["decision"] == "allow"


@pytest.mark.parametrize("era", ["handshake", "auto"], ids=["handshake-server", "2026-server"])
async def test_a_2026_call_streams_its_progress_and_log_messages(tmp_path: Path, era: str) -> None:
    """A 2026-07-28 caller that accepts a stream gets a call's progress and log messages as the server sends
    them, then the answer; a call with nothing to stream is still answered as JSON. The same whether the
    server speaks 2026-07-28 or the handshake era."""
    policy = write_policy(tmp_path, f"upstream:\n  era: {era}\n")
    steps: list[tuple[float, float | None, str | None]] = []
    logged: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        steps.append((progress, total, message))

    async def on_log(params: Any) -> None:
        logged.append(str(params.data))

    async with (
        played_sessions("--token-file", token_file(tmp_path), policy=policy) as served,
        served.client(ALICE, mode="auto", logging_callback=on_log, log_level="info") as client,
    ):
        assert client.session.protocol_version == MODERN
        done = first_text(await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress))
        said = first_text(await client.call_tool("log", {"message": "written down"}))
        plain = await served.http.post(
            served.url,
            json=modern_request(9, "tools/call", {"name": "echo", "arguments": {"text": "no stream"}}),
            headers=modern_headers(ALICE, "tools/call"),
        )
    assert done.startswith("done 3 steps") and said
    assert [p[:2] for p in steps] == [(1, 3), (2, 3), (3, 3)]
    assert "written down" in logged
    assert plain.headers["content-type"].startswith("application/json")  # nothing to stream: JSON, as before
    assert plain.json()["result"]["content"][0]["text"] == "no stream"


async def test_2026_callers_get_a_server_each_and_an_idle_one_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listing = modern_request(7, "tools/list")
    async with played_sessions("--token-file", token_file(tmp_path), "--idle-timeout", "0.3s") as served:
        answers = [
            await served.http.post(served.url, json=listing, headers=modern_headers(token, "tools/list"))
            for token in (ALICE, ALICE, BOB)
        ]
        assert len(served.servers) == 2  # alice's two requests share her server; bob has his own
        await until(lambda: served.running() == [] and not served.front.lanes)
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert all(answer.json()["id"] == 7 and "tools" in answer.json()["result"] for answer in answers)
    assert capsys.readouterr().err.count("idle for 0.3 s") == 2


async def test_a_2026_callers_server_that_exits_is_replaced_at_the_next_request(tmp_path: Path) -> None:
    crash = modern_request(1, "tools/call", {"name": "crash", "arguments": {"code": 3}})
    async with played_sessions("--token-file", token_file(tmp_path)) as served:
        post = served.http.post
        await post(served.url, json=modern_request(0, "tools/list"), headers=modern_headers(ALICE, "tools/list"))
        (first,) = served.servers
        crashed = await post(served.url, json=crash, headers=modern_headers(ALICE, "tools/call"))
        await until(lambda: not first.running)
        again = await post(
            served.url, json=modern_request(2, "tools/list"), headers=modern_headers(ALICE, "tools/list")
        )
        assert served.running() == [served.servers[1]]
    assert crashed.status_code == 200
    assert "exited with code 3" in crashed.json()["error"]["message"]
    assert again.status_code == 200 and "tools" in again.json()["result"]


async def test_a_listen_the_server_does_not_have_is_a_404_as_directly(tmp_path: Path) -> None:
    """A 2026-07-28 server without subscriptions/listen answers it -32601; directly that is an HTTP 404 with
    the error, and through serve the same 404 and JSON (not a 200 SSE stream holding the error)."""
    listen = modern_request(0, "subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    async with played_sessions("--token-file", token_file(tmp_path), script=modern_raw_server) as served:
        answer = await served.http.post(served.url, json=listen, headers=modern_headers(ALICE, "subscriptions/listen"))
    assert answer.status_code == 404 and answer.headers["content-type"].startswith("application/json")
    assert answer.json()["error"]["code"] == -32601 and answer.json()["id"] == 0


async def test_a_2026_callers_subscriptions_listen_is_an_event_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """subscriptions/listen is answered with an SSE stream: the acknowledgement first, then the server's
    notifications the filter asked for, tagged with the caller's own request id. The server leg is pinned
    to the handshake era, where the proxy serves the subscription from the server's notifications. Closing
    the stream ends the subscription, and the caller's server ends when idle as if it had never listened."""
    policy = write_policy(tmp_path, "upstream:\n  era: handshake\n")
    listen = modern_request("listen-1", "subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    notify = modern_request(1, "tools/call", {"name": "notify_changes", "arguments": {}})
    events: list[dict[str, Any]] = []
    options = ("--token-file", token_file(tmp_path), "--idle-timeout", "0.3s")
    async with played_sessions(*options, policy=policy) as served:
        http: httpx2.AsyncClient = served.http
        async with http.stream(
            "POST", served.url, json=listen, headers=modern_headers(ALICE, "subscriptions/listen")
        ) as stream:
            content_type = stream.headers["content-type"]
            data = (json.loads(line[6:]) async for line in stream.aiter_lines() if line.startswith("data: "))
            events.append(await anext(data))  # acknowledged: now the server announces its changes
            called = await http.post(served.url, json=notify, headers=modern_headers(ALICE, "tools/call"))
            events.append(await anext(data))
        await until(lambda: served.running() == [])
    assert called.json()["result"]["content"][0]["text"] == "notified"
    assert content_type.startswith("text/event-stream")
    acknowledged, changed = events
    assert acknowledged["method"] == "notifications/subscriptions/acknowledged"
    assert acknowledged["params"]["notifications"] == {"toolsListChanged": True}
    assert acknowledged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    # the prompts' and resources' list changes came too, but this subscription did not ask for them
    assert changed["method"] == "notifications/tools/list_changed"
    assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    assert capsys.readouterr().err.count("idle for 0.3 s") == 1


async def test_a_method_the_2026_callers_server_does_not_have_gets_404(tmp_path: Path) -> None:
    async with played_sessions("--token-file", token_file(tmp_path)) as served:
        unknown = modern_request(3, "tools/frobnicate")
        answer = await served.http.post(served.url, json=unknown, headers=modern_headers(ALICE, "tools/frobnicate"))
    assert answer.status_code == 404
    assert answer.json()["id"] == 3 and answer.json()["error"]["code"] == -32601


BIG = 123456789012345678901234  # past 64 bits: a float to a parser that reads every number as a double
OWN = 98765432109876543210987


def big_numbers(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A server whose tool answers with the number it was given and one of its own, both past 64 bits."""
    if message.get("id") is None:
        return []
    got = ((message.get("params") or {}).get("arguments") or {}).get("n")
    result = {"content": [{"type": "text", "text": "numbers"}], "structuredContent": {"got": got, "own": OWN}}
    return [{"jsonrpc": "2.0", "id": message["id"], "result": result}]


@pytest.mark.parametrize("accept", ["application/json", ACCEPT])
async def test_a_2026_call_keeps_integers_past_64_bits_both_ways(tmp_path: Path, accept: str) -> None:
    """Numbers are passed on as written, as directly: a request's and an answer's integers past 64 bits
    reach the server and the caller exact, answered as JSON or as a stream."""
    call = modern_request(7, "tools/call", {"name": "big", "arguments": {"n": BIG}})
    headers = {**modern_headers(ALICE, "tools/call"), "Accept": accept}
    async with played_sessions("--token-file", token_file(tmp_path), script=big_numbers) as served:
        answer = await served.http.post(served.url, content=json.dumps(call).encode(), headers=headers)
    assert answer.status_code == 200, answer.text
    assert f'"got":{BIG}' in answer.text.replace(" ", "") and f'"own":{OWN}' in answer.text.replace(" ", "")
