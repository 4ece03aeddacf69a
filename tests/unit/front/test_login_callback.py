"""The address `login` sends the browser back to: the real listener on 127.0.0.1, in process."""

from __future__ import annotations

import asyncio

import anyio
import httpx
import pytest
from mcp.shared.auth import AuthorizationCodeResult

from mcp_sampling_proxy.front.login_callback import IGNORED, QUEUE, callback_listener, listen
from mcp_sampling_proxy.transport.oauth import LoginFailed

pytestmark = pytest.mark.anyio


async def test_the_redirect_with_this_logins_state_gives_the_code_and_a_forged_one_is_ignored() -> None:
    said: list[str] = []
    async with callback_listener(listen(0), said.append) as listener, httpx.AsyncClient() as browser:
        forged = await browser.get(listener.redirect_uri, params={"code": "forged", "state": "not-ours"})
        real = await browser.get(listener.redirect_uri, params={"code": "the-code", "state": "ours", "iss": "x"})
        answer = await listener.code("ours", timeout=5)
    assert (answer.code, answer.state, answer.iss) == ("the-code", "ours", "x")
    assert said == ["ignored a request to the redirect address that does not carry this login's state"]
    assert forged.status_code == real.status_code == 200
    assert "Logged in" in real.text and real.headers["content-type"].startswith("text/html")


async def test_a_refusal_ends_the_login_with_the_servers_words_escaped() -> None:
    async with callback_listener(listen(0), print) as listener, httpx.AsyncClient() as browser:
        page = await browser.get(
            listener.redirect_uri,
            params={"error": "access_denied", "error_description": "<script>alert(1)</script>", "state": "s"},
        )
        with pytest.raises(LoginFailed, match="the authorization server refused: access_denied <script>"):
            await listener.code("s", timeout=5)
    assert page.status_code == 400
    assert "<script>" not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


async def test_other_paths_are_not_found_and_nothing_arrives_before_the_timeout() -> None:
    async with callback_listener(listen(0), print) as listener, httpx.AsyncClient() as browser:
        elsewhere = await browser.get(listener.redirect_uri.replace("/callback", "/other"), params={"code": "c"})
        posted = await browser.post(listener.redirect_uri, params={"code": "c"})
        with pytest.raises(LoginFailed, match=r"did not come back within 0.2 s \(--timeout\)"):
            await listener.code(None, timeout=0.2)
    assert elsewhere.status_code == posted.status_code == 404


async def test_the_address_is_closed_once_the_login_is_over() -> None:
    async with callback_listener(listen(0), print) as listener:
        uri = listener.redirect_uri
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as browser:
            await browser.get(uri)


def test_a_port_in_use_is_refused_before_anything_starts() -> None:
    first = listen(0)
    try:
        with pytest.raises(OSError):
            listen(first.getsockname()[1])
    finally:
        first.close()


async def test_a_flood_of_forged_redirects_is_told_once_with_its_count_and_the_login_still_gets_its_code() -> None:
    """Any local program can find the port: a flood of redirects without this login's state neither queues
    without bound nor buries the user's screen, and the login's own redirect still comes through."""
    said: list[str] = []
    forged = {"code": "forged", "state": "not-ours"}
    async with callback_listener(listen(0), said.append) as listener, httpx.AsyncClient() as browser:
        flood = [browser.get(listener.redirect_uri, params=forged) for _ in range(3 * QUEUE)]
        await asyncio.gather(*flood)  # before the login knows its state: at most QUEUE are kept
        waiting = listener.code("ours", timeout=5)
        async with anyio.create_task_group() as tg:
            got: list[AuthorizationCodeResult] = []

            async def login() -> None:
                got.append(await waiting)

            tg.start_soon(login)
            flood = [browser.get(listener.redirect_uri, params=forged) for _ in range(QUEUE)]
            await asyncio.gather(*flood)  # after: turned away as they come
            await browser.get(listener.redirect_uri, params={"code": "the-code", "state": "ours"})
    assert got[0].code == "the-code"
    assert 1 <= len(said) <= 2, said
    assert said[-1].endswith("of them)") and IGNORED in said[-1], said


async def test_a_login_that_times_out_says_how_many_redirects_were_not_its_own() -> None:
    async with callback_listener(listen(0), print) as listener, httpx.AsyncClient() as browser:
        waiting = listener.code("ours", timeout=0.5)
        async with anyio.create_task_group() as tg:
            failure: list[str] = []

            async def login() -> None:
                with pytest.raises(LoginFailed) as caught:
                    await waiting
                failure.append(str(caught.value))

            tg.start_soon(login)
            for _ in range(3):
                await browser.get(listener.redirect_uri, params={"code": "forged", "state": "not-ours"})
    assert failure == [
        "the browser did not come back within 0.5 s (--timeout); 3 requests to it did not carry this login's state"
    ]
