"""The web console's ASGI app in process (httpx's ASGITransport): what it refuses before anything is
served, and how it checks an answer before it goes to a proxy. The real app, state and console client
(on an empty runtime dir); the same refusals over a real socket are in tests/e2e/test_web_console.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mcp_sampling_proxy.approval.console.client import ConsoleClient, Event
from mcp_sampling_proxy.approval.console.messages import ConsoleMessage
from mcp_sampling_proxy.front.web_console.app import CSP, MAX_BODY, WebConsole
from mcp_sampling_proxy.front.web_console.state import WebState
from mcp_sampling_proxy.front.web_console.views import PolicyFacts

pytestmark = pytest.mark.anyio

PORT = 8765
JSON = {"Content-Type": "application/json"}
PROXY = Path("/run/user/1000/mcp-sampling-proxy/4242.sock")


def pending(question_id: str = "q1", **extra: Any) -> ConsoleMessage:
    return {
        "type": "pending",
        "id": question_id,
        "server": "files",
        "rule": "ask",
        "summary": "say hi",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "say hi"}}], "maxTokens": 5},
        **extra,  # type: ignore[typeddict-item]  # what a test adds (quorum, notes)
    }


@pytest.fixture
def console(tmp_path: Path) -> WebConsole:
    state = WebState(PolicyFacts(), dict, None)
    return WebConsole(state, ConsoleClient(tmp_path, state.on_event), PORT, token="t0ken")


@pytest.fixture
async def page(console: WebConsole) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=console)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{PORT}") as client:
        yield client


async def test_the_page_needs_the_token_and_its_own_host_and_origin(page: httpx.AsyncClient) -> None:
    ok = await page.get("/t0ken/")
    assert ok.status_code == 200 and b"<html" in ok.content.lower()
    assert "script-src 'self'" in ok.headers["content-security-policy"] and ok.headers["content-security-policy"] == CSP
    assert ok.headers["x-frame-options"] == "DENY" and ok.headers["cache-control"] == "no-store"
    assert (await page.get("/t0ken/", headers={"Host": f"localhost:{PORT}"})).status_code == 200
    assert (await page.get("/t0ken/app.js")).headers["content-type"].startswith("text/javascript")
    missing = await page.get("/")
    assert missing.status_code == 403 and "token" in missing.json()["error"]
    assert (await page.get("/t0kex/api/state")).status_code == 403
    assert (await page.get("/t0ken")).status_code == 404  # the token alone: nothing below it
    # DNS rebinding: another name for 127.0.0.1, or no port
    assert (await page.get("/t0ken/", headers={"Host": f"evil.example:{PORT}"})).status_code == 421
    assert (await page.get("/t0ken/", headers={"Host": "127.0.0.1"})).status_code == 421
    # another site in the same browser
    assert (await page.get("/t0ken/api/state", headers={"Origin": "http://evil.example"})).status_code == 403
    assert (await page.get("/t0ken/api/state", headers={"Sec-Fetch-Site": "cross-site"})).status_code == 403
    assert (await page.get("/t0ken/api/state", headers={"Sec-Fetch-Site": "same-origin"})).status_code == 200
    assert (await page.get("/t0ken/nothing")).status_code == 404
    assert (await page.put("/t0ken/api/answer")).status_code == 405
    # the event stream is the page's too: the token, and no other site
    assert (await page.get("/api/events")).status_code == 403
    assert (await page.get("/t0ken/api/events", headers={"Origin": "http://evil.example"})).status_code == 403
    answer = {"key": "1:1", "action": "approve"}
    assert (
        await page.post("/t0ken/api/answer", json=answer, headers={"Origin": "http://evil.example"})
    ).status_code == 403
    # a number that is no number is the default, not a dropped connection (int() of '²' used to raise)
    assert (await page.get("/t0ken/api/audit", params={"n": "\u00b2"})).status_code == 200
    assert "img-src data:" in CSP


async def test_answers_are_json_posts_of_a_bounded_size(page: httpx.AsyncClient) -> None:
    answer = json.dumps({"key": "4242:q1", "action": "approve"}).encode()
    # a form a cross-site page could send, and a GET that would change state
    assert (
        await page.post("/t0ken/api/answer", content=answer, headers={"Content-Type": "text/plain"})
    ).status_code == 415
    assert (await page.get("/t0ken/api/answer", params={"key": "4242:q1", "action": "approve"})).status_code == 404
    assert (await page.post("/t0ken/api/state", content=answer, headers=JSON)).status_code == 404
    assert (await page.post("/t0ken/api/answer", content=b"", headers=JSON)).status_code == 413
    too_big = await page.post("/t0ken/api/answer", content=b" " * (MAX_BODY + 1), headers=JSON)
    assert too_big.status_code == 413 and str(MAX_BODY) in too_big.json()["error"]
    assert (await page.post("/t0ken/api/answer", content=b"{not json", headers=JSON)).status_code == 400
    assert (await page.post("/t0ken/api/answer", content=b"[1]", headers=JSON)).status_code == 400
    gone = await page.post("/t0ken/api/answer", content=answer, headers=JSON)
    assert gone.status_code == 409 and "no longer pending" in gone.json()["error"]


async def test_an_answer_is_checked_before_the_question_is_claimed(
    console: WebConsole, page: httpx.AsyncClient
) -> None:
    console.state.on_event(Event("question", PROXY, pending()))
    key = "4242:q1"

    async def answer(**body: Any) -> httpx.Response:
        return await page.post("/t0ken/api/answer", json={"key": key, **body})

    assert (await answer(action="approve", scope="forever")).status_code == 400
    assert (await answer(action="approve", approver="x" * 65)).status_code == 400
    state = (await page.get("/t0ken/api/state")).json()
    assert [q["key"] for q in state["questions"]] == [key]  # still pending: nothing was claimed
    # a good answer claims it; the proxy is not attached, so it cannot be sent
    sent = await answer(action="approve", scope="session")
    assert sent.status_code == 410 and "gone" in sent.json()["error"]
    assert (await page.get("/t0ken/api/state")).json()["questions"] == []
    late = await answer(action="deny")  # the other tab's answer
    assert late.status_code == 409


async def test_a_quorum_needs_a_name_that_has_not_approved_yet(console: WebConsole, page: httpx.AsyncClient) -> None:
    quorum = {"needed": 2, "approved_by": ["console:alice"]}
    console.state.on_event(Event("question", PROXY, pending(quorum=quorum)))
    body = {"key": "4242:q1", "action": "approve"}
    nameless = await page.post("/t0ken/api/answer", json=body)
    assert nameless.status_code == 400 and "2 different approvers" in nameless.json()["error"]
    again = await page.post("/t0ken/api/answer", json={**body, "approver": "alice"})
    assert again.status_code == 409 and "alice approved this already" in again.json()["error"]
    edited = await page.post("/t0ken/api/answer", json={**body, "approver": "bob", "text": "say bye"})
    assert edited.status_code == 400 and "unedited" in edited.json()["error"]


async def test_the_event_streams_end_when_the_console_stops(console: WebConsole) -> None:
    """The server's stop waits for open responses: the event streams must end when the console quits."""
    chunks: list[bytes] = []

    async def read() -> None:
        async for chunk in console.events():
            chunks.append(chunk)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.sleep(0.2)
            console.state.on_event(Event("refused", PROXY, why="not ours"))
            await anyio.sleep(0.3)
            await console.stop()
    assert [c.split(b"\n")[0] for c in chunks] == [b"event: state", b"event: audit", b"event: state"]
    assert b"not ours" in chunks[-1]
