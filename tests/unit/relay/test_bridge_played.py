"""The era bridge, handshake host and 2026-only server, played in memory: the server is the hand-written
2026 server's own script (tests/fixtures/eras/modern_features_server.py, which the process tests run too),
which reports what each request carried; the relay and services are real. The proxy answers the host's
`initialize` from the server's discover, stamps every request with the 2026 `_meta`, answers `ping` and
`logging/setLevel` itself, keeps a `subscriptions/listen` open for what the host would hear, and asks
the host by requests in a round. (The same server as a process, and the approval form a 2026 host gets
in a round: tests/conformance/test_era_bridge.py.)
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest
from helpers.playbook import Playbook
from helpers.support import ROOT

pytestmark = pytest.mark.anyio

SERVER = runpy.run_path(str(ROOT / "tests" / "fixtures" / "eras" / "modern_features_server.py"))["ModernFeatures"]
MODERN = "2026-07-28"


class Host:
    """A handshake host (or a 2026 one) whose requests are each waited for by id; other messages are kept."""

    def __init__(self, play: Playbook) -> None:
        self.play, self.next_id, self.seen = play, 1, list[dict[str, Any]]()

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request_id, self.next_id = self.next_id, self.next_id + 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.play.host.says(message)
        return await self.wait_for(lambda m: m.get("id") == request_id and "method" not in m)

    async def wait_for(self, wanted: Any) -> dict[str, Any]:
        while True:
            got = await self.play.host.next(timeout=10)
            if wanted(got):
                return got
            self.seen.append(got)

    async def initialize(self, capabilities: dict[str, Any], version: str = "2025-11-25") -> dict[str, Any]:
        params = {
            "protocolVersion": version,
            "capabilities": capabilities,
            "clientInfo": {"name": "raw-host", "version": "1.0"},
        }
        answer = await self.request("initialize", params)
        self.play.host.says({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    async def tool(self, name: str) -> Any:
        """A tool's answer: its JSON, or its text when it is not JSON."""
        response = await self.request("tools/call", {"name": name, "arguments": {}})
        text = response["result"]["content"][0]["text"]
        try:
            return json.loads(text)
        except ValueError:
            return text


async def handshake_host(play: Playbook, capabilities: dict[str, Any] | None = None) -> Host:
    play.serve_with(SERVER().answers)
    host = Host(play)
    answer = await host.initialize(capabilities if capabilities is not None else {"roots": {}})
    assert answer["result"]["protocolVersion"] == "2025-11-25", answer
    return host


ROUTE_HOST = "elicitation:\n  route: host\n"


async def test_initialize_is_answered_from_the_servers_discover(tmp_path: Path) -> None:
    async with Playbook(tmp_path, ROUTE_HOST) as play:
        host = await handshake_host(play)
        again = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "again", "version": "1"}}
        init = await host.request("initialize", again)
        assert init["error"]["code"] == -32600  # one handshake per session, as a server would say
        pong = await host.request("ping")
        sent_meta = await host.tool("meta")
    assert pong["result"] == {}  # 2026 has no ping: the proxy answers it
    assert sent_meta["io.modelcontextprotocol/protocolVersion"] == MODERN
    assert sent_meta["io.modelcontextprotocol/clientInfo"] == {"name": "raw-host", "version": "1.0"}
    caps = sent_meta["io.modelcontextprotocol/clientCapabilities"]
    assert caps["roots"] == {} and "sampling" in caps  # the host's, plus what the proxy serves


async def test_the_initialize_result_carries_the_servers_identity(tmp_path: Path) -> None:
    async with Playbook(tmp_path) as play:
        play.serve_with(SERVER().answers)
        answer = (await Host(play).initialize({}, version="2025-06-18"))["result"]
    assert answer["protocolVersion"] == "2025-06-18"  # the version the host asked for, which the proxy speaks
    assert answer["serverInfo"] == {"name": "modern-features", "version": "3"}
    assert answer["instructions"] == "hand-written"
    assert answer["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}


async def test_set_level_becomes_the_log_level_of_every_request(tmp_path: Path) -> None:
    async with Playbook(tmp_path, ROUTE_HOST) as play:
        host = await handshake_host(play)
        await host.tool("log")
        before = [m for m in host.seen if m.get("method") == "notifications/message"]
        assert (await host.request("logging/setLevel", {"level": "info"}))["result"] == {}
        await host.tool("log")
        after = [m for m in host.seen if m.get("method") == "notifications/message"]
    assert before == []
    assert [m["params"]["data"] for m in after] == ["hello"]


async def test_list_changes_and_resource_updates_reach_the_handshake_host(tmp_path: Path) -> None:
    async with Playbook(tmp_path, ROUTE_HOST) as play:
        host = await handshake_host(play)
        opened = await host.tool("listens")
        assert list(opened.values()) == [{"toolsListChanged": True, "resourcesListChanged": True}]
        await host.tool("change")
        changes = [m["method"] for m in host.seen if m.get("method", "").startswith("notifications/")]
        assert changes == ["notifications/tools/list_changed"]
        assert (await host.request("resources/subscribe", {"uri": "test://r"}))["result"] == {}
        reopened = await host.tool("listens")
        assert list(reopened.values()) == [
            {"toolsListChanged": True, "resourcesListChanged": True, "resourceSubscriptions": ["test://r"]}
        ]
        host.seen.clear()
        await host.tool("change")
        updated = [m for m in host.seen if m.get("method") == "notifications/resources/updated"]
        assert [m["params"]["uri"] for m in updated] == ["test://r"]
        assert (await host.request("resources/unsubscribe", {"uri": "test://r"}))["result"] == {}
        assert list((await host.tool("listens")).values()) == [{"toolsListChanged": True, "resourcesListChanged": True}]
        acks = [m for m in host.seen if m.get("method") == "notifications/subscriptions/acknowledged"]
    assert acks == []  # the proxy's own subscription: the host never hears of it


async def test_a_round_asks_the_handshake_host_by_requests(tmp_path: Path) -> None:
    """roots/list, URL elicitation (with the elicitationId 2025-11-25 requires) and sampling the host does
    itself reach a handshake host as requests; the answers go back in the retry."""
    caps: dict[str, Any] = {"roots": {}, "elicitation": {"form": {}, "url": {}}, "sampling": {}}
    policy = ROUTE_HOST + "  url_mode: true\nrules:\n  - action: allow\n"
    sampled = {"role": "assistant", "model": "host-llm", "content": {"type": "text", "text": "from the host"}}
    async with Playbook(tmp_path, policy) as play:
        host = await handshake_host(play, caps)
        for name, method, answer in (
            ("roots", "roots/list", {"roots": [{"uri": "file:///w"}]}),
            ("url", "elicitation/create", {"action": "accept"}),
            ("sample", "sampling/createMessage", sampled),
        ):
            call = {"name": name, "arguments": {}}
            play.host.says({"jsonrpc": "2.0", "id": f"call-{name}", "method": "tools/call", "params": call})
            asked = await host.wait_for(lambda m, method=method: m.get("method") == method)
            if name == "url":
                assert asked["params"]["mode"] == "url" and asked["params"]["elicitationId"]
            play.host.says({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
            done = await host.wait_for(lambda m, name=name: m.get("id") == f"call-{name}")
            assert json.loads(done["result"]["content"][0]["text"]) == {"answer": answer, "state": f"state-{name}"}
