"""The relay's own handling of messages, played in memory (tests/helpers/playbook.py): what it adds to
the host's capabilities on the way to the server, in either era; what a line that is not a JSON-RPC
message gets; and finding the id of a message too large to read. The same relay runs as a process in
tests/e2e/test_relay.py, which keeps what needs one (stdio, signals, limits on the pipe, shutdown).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.playbook import Playbook

from mcp_sampling_proxy.relay.core import peek_id

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"


async def test_the_server_sees_sampling_added_to_the_hosts_capabilities(tmp_path: Path) -> None:
    async with Playbook(tmp_path) as play:
        host_caps = {"roots": {"listChanged": True}, "experimental": {"x": {}}}
        initialize = {
            "protocolVersion": "2025-11-25",
            "capabilities": host_caps,
            "clientInfo": {"name": "h", "version": "1"},
        }
        play.host.says({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize})
        caps = (await play.server.next())["params"]["capabilities"]
    assert caps["roots"] == {"listChanged": True}
    assert caps["experimental"] == {"x": {}}
    assert "sampling" in caps


async def test_2026_requests_get_sampling_in_their_meta_capabilities(tmp_path: Path) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "1"},
    }
    discovered = {"supportedVersions": [MODERN], "capabilities": {"tools": {}}, "resultType": "complete"}
    async with Playbook(tmp_path) as play:
        play.host.says(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "caps", "arguments": {}, "_meta": meta},
            }
        )
        probe = await play.server.next()  # the proxy's own probe settles the server's era first
        assert probe["method"] == "server/discover"
        play.server.says({"jsonrpc": "2.0", "id": probe["id"], "result": discovered})
        called = await play.server.next()
        assert called["method"] == "tools/call" and called["id"] == 1
        play.server.says({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "resultType": "complete"}})
        assert (await play.host.next())["id"] == 1
        # the server speaks 2026-07-28: the host's own discover reaches it, and its answer the host
        play.host.says({"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": meta}})
        forwarded = await play.server.next()
        assert forwarded["method"] == "server/discover" and forwarded["id"] == 2
        play.server.says({"jsonrpc": "2.0", "id": 2, "result": discovered})
        answered = await play.host.next()
    caps = called["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert caps == {"roots": {}, "sampling": {}, "elicitation": {"form": {}}}
    assert answered["result"]["supportedVersions"] == [MODERN]


async def test_a_line_that_is_not_a_message_gets_its_error_and_the_relay_goes_on(tmp_path: Path) -> None:
    async with Playbook(tmp_path) as play:
        await play.handshake()
        play.host.says_raw(b"{this is not json")
        error = await play.host.next()
        assert error == {"jsonrpc": "2.0", "id": None, "error": error["error"]}
        assert error["error"]["code"] == -32700
        play.host.says_raw(b"[1, 2")
        assert (await play.host.next())["error"]["code"] == -32700
        play.host.says_raw(b"42")
        assert (await play.host.next())["error"]["code"] == -32600
        play.host.says({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {}}})
        assert (await play.server.next())["id"] == 3  # still relaying
        assert play.server.nothing_yet()  # none of the bad lines reached the server


def test_the_id_of_an_oversized_message_is_found_from_its_ends() -> None:
    def peek(line: bytes) -> tuple[bool, object]:
        return peek_id(line[:1024], line[-256:])

    assert peek(b'{"jsonrpc":"2.0","id":5,"result":{"x":1}}') == (True, 5)
    assert peek(b'{"jsonrpc": "2.0", "id": "a\\"b", "error": {}}') == (True, 'a"b')
    assert peek(b'{"jsonrpc":"2.0","method":"tools/call","id":9,"params":{}}') == (True, 9)
    # TypeScript SDK layout: the id closes the top-level object
    assert peek(b'{"result":{"x":{"id":3}},"jsonrpc":"2.0","id":7}') == (True, 7)
    # a nested id must not be mistaken for the top-level one, nor an id that is not usable
    assert peek(b'{"result":{"x":{"id":3}}}') == (False, None)
    assert peek(b'{"jsonrpc":"2.0","id":[1],"result":{}}') == (False, None)


async def test_a_discover_after_the_servers_refusal_is_refused_again(tmp_path: Path) -> None:
    """`serve` keeps one relay for all of a caller's 2026 requests: after one host's server/discover was
    refused (an auto host then falls back to initialize, on a session of its own), the next host's
    discover gets the server's refusal too, as it does directly, and lands where it lands directly;
    not an answer from a handshake the proxy opened, which sent it to 2026-07-28."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "auto-host", "version": "1"},
    }
    refusal = {"code": -32601, "message": "Method not found"}
    async with Playbook(tmp_path) as play:
        play.host.says({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}})
        probe = await play.server.next()
        assert probe["method"] == "server/discover"
        play.server.says({"jsonrpc": "2.0", "id": probe["id"], "error": refusal})
        assert (await play.host.next())["error"]["code"] == -32601
        play.host.says({"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": meta}})
        again = await play.host.next()
    assert again["id"] == 2 and again["error"]["code"] == -32601, again
