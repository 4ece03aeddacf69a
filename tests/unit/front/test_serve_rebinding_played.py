"""DNS rebinding against `serve` on loopback, played in process (helpers/played_serve.py): a web page
whose name now resolves to 127.0.0.x can send requests there, with its own name in `Host` and its own
`Origin`. On any loopback address (all of 127.0.0.0/8 is this machine), `serve` answers only a `Host`
that names it (or an `--allow-host`), else 421, and only an `Origin` that names it, else 403. Every
answer here is decided before a session or server exists.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from helpers.played_serve import ACCEPT, INITIALIZE, PlayedServe, played_serve
from helpers.serving import ALICE, token_file
from helpers.support import free_port

pytestmark = pytest.mark.anyio

LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}  # not an opening: refused with 400 past the checks
NO_SESSION = "Bad Request: no Mcp-Session-Id; open a session with an initialize POST"
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "page", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def post_as(served: PlayedServe, host: str, body: object = INITIALIZE) -> httpx.Response:
    headers = {"Accept": ACCEPT, "Content-Type": "application/json", "Host": host}
    return await served.http.post(served.url, json=body, headers=headers)


async def test_a_rebound_name_gets_421_on_any_loopback_address() -> None:
    port = free_port()  # only named, never bound
    async with played_serve("--listen", f"127.0.0.2:{port}", "--allow-host", "balancer.internal:8080") as served:
        rebound = [await post_as(served, "attacker.example:80"), await post_as(served, f"attacker.example:{port}")]
        own = await post_as(served, f"127.0.0.2:{port}", LISTING)
        allowed = await post_as(served, "balancer.internal:8080", LISTING)
        assert served.front.sessions == {}  # nothing was started for any of them
    assert [answer.status_code for answer in rebound] == [421, 421]
    assert all(answer.text == "Invalid Host header" for answer in rebound)
    # its own address and the --allow-host one pass the Host check: on to the next refusal, not a 421
    for answer in (own, allowed):
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["message"] == NO_SESSION


async def test_a_web_pages_origin_gets_403(tmp_path: Path) -> None:
    """Host names the endpoint, but the request comes from a page elsewhere: a browser's cross-site POST."""
    modern = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": MODERN_META}}
    modern_headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    async with played_serve("--token-file", token_file(tmp_path)) as served:
        base = {"Accept": ACCEPT, "Content-Type": "application/json", "Authorization": f"Bearer {ALICE}"}
        evil = {**base, "Origin": "http://evil.test"}
        opening = await served.http.post(served.url, json=INITIALIZE, headers=evil)
        stateless = await served.http.post(served.url, json=modern, headers={**evil, **modern_headers})
        own = await served.http.post(served.url, json=LISTING, headers={**base, "Origin": served.origin})
        assert served.front.sessions == {} and served.front.lanes == {}
    assert opening.status_code == stateless.status_code == 403
    assert opening.text == stateless.text == "Invalid Origin header"
    assert own.status_code == 400 and own.json()["error"]["message"] == NO_SESSION  # its own origin passes


async def test_its_loopback_names_pass_on_its_port_only() -> None:
    """Without --allow-host, the names of this machine pass: `localhost`, 127.0.0.1 and [::1], on its port."""
    port = free_port()
    async with played_serve("--listen", f"127.0.0.1:{port}") as served:
        names = [await post_as(served, f"{name}:{port}", LISTING) for name in ("localhost", "127.0.0.1", "[::1]")]
        elsewhere = await post_as(served, f"localhost:{port + 1}", LISTING)
    assert [answer.status_code for answer in names] == [400, 400, 400]
    assert elsewhere.status_code == 421


async def test_a_rebound_request_naming_a_session_is_refused_as_one_without() -> None:
    """A page cannot tell from a 404 that it reached serve: with a session id, Host and Origin are checked
    first too."""
    port = free_port()
    async with played_serve("--listen", f"127.0.0.1:{port}") as served:
        named = {"Accept": ACCEPT, "Content-Type": "application/json", "Mcp-Session-Id": "guessed"}
        rebound = await served.http.post(
            served.url, json=LISTING, headers={**named, "Host": f"attacker.example:{port}"}
        )
        evil = await served.http.post(served.url, json=LISTING, headers={**named, "Origin": "http://evil.test"})
        listen = await served.http.get(served.url, headers={**named, "Host": f"attacker.example:{port}"})
        own = await served.http.post(served.url, json=LISTING, headers=named)
    assert (rebound.status_code, rebound.text) == (421, "Invalid Host header")
    assert (listen.status_code, listen.text) == (421, "Invalid Host header")
    assert (evil.status_code, evil.text) == (403, "Invalid Origin header")
    assert own.status_code == 404  # its own pages get on to the unknown session


async def test_a_header_sent_twice_is_read_as_its_first() -> None:
    """A page cannot slip past the checks by naming this endpoint in a second Host or Origin: the first of
    each is the one checked (as Starlette reads headers), in both eras."""
    port = free_port()
    own_host, own_origin = f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"
    modern = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": MODERN_META}}
    modern_headers = [("MCP-Protocol-Version", MODERN), ("Mcp-Method", "tools/list")]
    base = [("Accept", ACCEPT), ("Content-Type", "application/json")]
    twice_host = [("Host", f"attacker.example:{port}"), ("Host", own_host)]
    twice_origin = [("Host", own_host), ("Origin", "http://evil.test"), ("Origin", own_origin)]
    async with played_serve("--listen", f"127.0.0.1:{port}") as served:
        answers = [
            await served.http.post(served.url, json=body, headers=base + extra + twice)
            for body, extra in ((LISTING, []), (modern, modern_headers))
            for twice in (twice_host, twice_origin)
        ]
        assert served.front.sessions == {} and served.front.lanes == {}
    assert [(answer.status_code, answer.text) for answer in answers] == [
        (421, "Invalid Host header"),
        (403, "Invalid Origin header"),
    ] * 2
