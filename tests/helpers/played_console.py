"""`console --web` in process, beside a proxy played in memory (helpers/playbook.py with `console=True`).

The web console is built as `console --web` builds it (`page_sources` from the proxy's policy, the real
`ConsoleClient` on the proxy's real socket, the real `WebConsole` app) and driven through httpx's ASGI
transport: no browser, no process, nothing bound. The test reads what the page would be shown (the JSON
state, the audit lines, the usage) and posts the answers a person's clicks post.

    async with Playbook(tmp_path, policy, console=True) as play, played_page(play) as page:
        question = await page.question()
        await page.answer(question, action="approve")

Waiting is on the console's own change events (`WebState.changed`), never on a clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx

from helpers.playbook import Playbook
from mcp_sampling_proxy.approval.console.client import ConsoleClient
from mcp_sampling_proxy.front.web_console.app import WebConsole
from mcp_sampling_proxy.front.web_console.server import page_sources
from mcp_sampling_proxy.front.web_console.state import follow_audit

PORT = 8765
TOKEN = "played-token"


class PlayedPage:
    """What a page of the web console reads and posts, through the real app."""

    def __init__(self, web: WebConsole, http: httpx.AsyncClient):
        self.web = web
        self.http = http

    async def get(self, route: str, **params: str) -> Any:
        """The JSON of GET /TOKEN/`route` (it must answer 200)."""
        response = await self.http.get(f"/{TOKEN}/{route}", params=params)
        assert response.status_code == 200, response.text
        return response.json()

    async def state(self) -> dict[str, Any]:
        state: dict[str, Any] = await self.get("api/state")
        return state

    async def until(self, holds: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> dict[str, Any]:
        """The state once `holds` is true of it, waiting on the console's change events."""
        live = self.web.state
        with anyio.fail_after(timeout):
            while True:
                seen = (live.version, live.audit_count)  # before the read: no change is missed after it
                if holds(state := await self.state()):
                    return state
                await live.changed(seen, timeout)

    async def question(self, kind: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
        """The first question pending (of `kind`: pending, review, elicit), as the page is shown it."""

        def asked(state: dict[str, Any]) -> bool:
            return any(kind in (None, q["type"]) for q in state["questions"])

        state = await self.until(asked, timeout)
        found: dict[str, Any] = next(q for q in state["questions"] if kind in (None, q["type"]))
        return found

    async def audit_lines(self, count: int = 1, timeout: float = 10.0, **filters: str) -> list[dict[str, Any]]:
        """The audit lines the page lists (its filters as the query), once there are at least `count`."""
        live = self.web.state
        with anyio.fail_after(timeout):
            while True:
                seen = (live.version, live.audit_count)
                if len(lines := (await self.get("api/audit", **filters))["lines"]) >= count:
                    return list(lines)
                await live.changed(seen, timeout)

    async def answer(self, question: dict[str, Any], **body: Any) -> httpx.Response:
        """POST /TOKEN/api/answer for `question`, as the page's buttons do."""
        return await self.http.post(f"/{TOKEN}/api/answer", json={"key": question["key"], **body})


@asynccontextmanager
async def played_page(play: Playbook, *, policy: bool = True) -> AsyncIterator[PlayedPage]:
    """The web console attached to `play`'s proxy (Playbook(..., console=True)), showing the budgets and
    audit log of the proxy's policy (`policy=False`: as without --policy and no default policy)."""
    assert play.console.path is not None, "Playbook(..., console=True) serves the console socket"
    sources = page_sources(play.settings if policy else None, None)
    state = sources.state
    client = ConsoleClient(play.console.path.parent, state.on_event, poll=0.05)
    web = WebConsole(state, client, PORT, token=TOKEN)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.run)
        if state.audit_path:
            tg.start_soon(follow_audit, state, state.audit_path, 0.05)
        transport = httpx.ASGITransport(app=web)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{PORT}") as http:
            page = PlayedPage(web, http)
            await page.until(lambda s: len(s["proxies"]) == 1)  # as the page says "1 proxy attached"
            yield page
        await web.stop()
        tg.cancel_scope.cancel()
