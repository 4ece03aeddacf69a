"""The requests `serve` refuses before a session or server exists, played in process
(helpers/played_serve.py): a path that is not the endpoint, a method or Content-Type it does not take, a
session it does not have, an MCP-Protocol-Version it does not speak, a body too large, and 2026-07-28
requests it cannot take. Each refusal says what to do; the requests it serves are in tests/e2e/test_serve.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.played_serve import ACCEPT, INITIALIZE, NO_SUCH_SESSION, PlayedServe, played_serve
from helpers.serving import ALICE, token_file

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
HEADERS = {"Accept": ACCEPT, "Content-Type": "application/json", "Authorization": f"Bearer {ALICE}"}
LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def modern_request(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**(params or {}), "_meta": MODERN_META}}


def modern_headers(method: str) -> dict[str, str]:
    return {**HEADERS, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[PlayedServe]:
    """serve with alice's and bob's tokens; after each test, nothing was started."""
    async with played_serve("--token-file", token_file(tmp_path)) as played:
        yield played
        assert played.front.sessions == {} and played.front.lanes == {}


def error(answer: httpx.Response) -> dict[str, Any]:
    found: dict[str, Any] = answer.json()["error"]
    return found


async def test_an_unsupported_protocol_version_gets_400_naming_what_is_served(served: PlayedServe) -> None:
    answer = await served.http.post(served.url, json=LISTING, headers={**HEADERS, "MCP-Protocol-Version": "2099-01-01"})
    assert answer.status_code == 400
    assert "unsupported MCP-Protocol-Version '2099-01-01'" in error(answer)["message"]
    # SEP-2575's UnsupportedProtocolVersionError, answering the request by its id
    assert answer.json()["id"] == 2
    assert error(answer)["code"] == -32022
    assert error(answer)["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}


async def test_a_session_it_does_not_have_is_not_found(served: PlayedServe) -> None:
    answer = await served.http.post(served.url, json=LISTING, headers={**HEADERS, "Mcp-Session-Id": "no-such"})
    assert answer.status_code == 404 and error(answer)["message"] == NO_SUCH_SESSION


async def test_without_a_session_only_an_initialize_post_is_taken(served: PlayedServe) -> None:
    stream = await served.http.get(served.url, headers=HEADERS)
    listing = await served.http.post(served.url, json=LISTING, headers=HEADERS)
    garbled = await served.http.post(served.url, content=b"{not json", headers=HEADERS)
    modern = await served.http.post(served.url, json=modern_request(3, "tools/list"), headers=HEADERS)
    no_session = "Bad Request: no Mcp-Session-Id; open a session with an initialize POST"
    assert [a.status_code for a in (stream, listing, garbled, modern)] == [400, 400, 400, 400]
    assert error(stream)["message"] == error(listing)["message"] == no_session
    assert error(garbled)["code"] == -32700 and error(garbled)["message"].startswith("Parse error: ")
    # a 2026-07-28 request without its header: told which header it lacks
    needs = f"Bad Request: a {MODERN} request needs the header MCP-Protocol-Version: {MODERN}"
    assert error(modern)["message"] == needs


async def test_an_initialize_that_is_not_json_gets_400(served: PlayedServe) -> None:
    answer = await served.http.post(served.url, json=INITIALIZE, headers={**HEADERS, "Content-Type": "text/plain"})
    assert answer.status_code == 400 and answer.text == "Invalid Content-Type header"


async def test_a_path_other_than_the_endpoint_is_not_found_but_healthz_answers(served: PlayedServe) -> None:
    elsewhere = await served.http.post("/api", json=INITIALIZE, headers=HEADERS)
    health = await served.http.get("/healthz")  # for balancers: no token, says only "ok"
    assert elsewhere.status_code == 404 and error(elsewhere)["message"] == "Not Found: the MCP endpoint is /mcp"
    assert health.status_code == 200 and health.text == "ok\n"
    assert health.headers["cache-control"] == "no-store"


async def test_a_body_past_max_message_bytes_gets_413(tmp_path: Path) -> None:
    async with played_serve("--token-file", token_file(tmp_path), "--max-message-bytes", "4096") as served:
        padded = {**INITIALIZE, "params": {**INITIALIZE["params"], "padding": "x" * 8192}}  # type: ignore[dict-item]
        answer = await served.http.post(served.url, json=padded, headers=HEADERS)
        assert served.front.sessions == {}
    assert answer.status_code == 413


async def test_a_body_sent_in_chunks_past_max_message_bytes_gets_413(tmp_path: Path) -> None:
    """A body without Content-Length (chunked) is counted as it comes, and refused once past the cap."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"padding": "'
        for _ in range(8):
            yield b"x" * 1024
        yield b'"}}'

    async with played_serve("--token-file", token_file(tmp_path), "--max-message-bytes", "4096") as served:
        answer = await served.http.post(served.url, content=chunks(), headers=HEADERS)
        assert "content-length" not in answer.request.headers
        assert served.front.sessions == {}
    assert (answer.status_code, answer.text) == (413, "Request body too large")


async def test_a_2026_request_serve_cannot_take_is_refused_before_a_server_starts(served: PlayedServe) -> None:
    """As SEP-2575 has it: a request without its `_meta` fields gets 400 and -32602, one whose `_meta`
    version contradicts its header 400 and -32020, a method 2026-07-28 removed 404 and -32601; each error
    carries the request's id, and no server is started for any of them (the fixture checks)."""
    bare = {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}
    version = "io.modelcontextprotocol/protocolVersion"
    versionless = {**modern_request(6, "tools/list"), "params": {"_meta": {**MODERN_META}}}
    del versionless["params"]["_meta"][version]
    contradicting = {**modern_request(7, "tools/list"), "params": {"_meta": {**MODERN_META, version: "2025-11-25"}}}
    bodies = [bare, versionless, contradicting, modern_request(8, "ping"), modern_request(9, "initialize")]
    refused = [await served.http.post(served.url, json=b, headers=modern_headers(b["method"])) for b in bodies]
    assert [answer.status_code for answer in refused] == [400, 400, 400, 404, 404]
    assert [answer.json()["id"] for answer in refused] == [5, 6, 7, 8, 9]  # each error names its request
    assert [error(answer)["code"] for answer in refused] == [-32602, -32602, -32020, -32601, -32601]
    assert "_meta" in error(refused[0])["message"]
    assert "io.modelcontextprotocol/protocolVersion" in error(refused[1])["message"]


async def test_a_2026_request_with_the_wrong_method_header_or_as_a_get_is_refused(served: PlayedServe) -> None:
    listing = modern_request(7, "tools/list")
    wrong = await served.http.post(served.url, json=listing, headers=modern_headers("tools/call"))
    stream = await served.http.get(served.url, headers=modern_headers("tools/list"))
    garbled = await served.http.post(served.url, content=b"[1, 2", headers=modern_headers("tools/list"))
    assert wrong.status_code == 400
    assert error(wrong)["message"] == "Bad Request: Mcp-Method 'tools/call' does not name the body's method"
    assert stream.status_code == 405  # there is no GET stream in 2026-07-28
    assert error(stream)["message"].startswith("Method Not Allowed: a 2026-07-28 request is a POST")
    assert garbled.status_code == 400 and error(garbled)["code"] == -32700
