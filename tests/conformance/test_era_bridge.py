"""The era bridge message by message, in both directions, with a host that writes JSON lines itself.

2026 host -> handshake server: the kitchen sink (an `mcp` 2.x server that samples, elicits and
asks for roots by requests of its own, which its SDK allows only in the handshake era) behind a
proxy pinned to `upstream.era: handshake`, talked to in the 2026 era. The other direction, a handshake
host and a 2026-only server written by hand (tests/fixtures/eras/modern_features_server.py), runs in
memory (tests/unit/relay/test_bridge_played.py); here that server runs as a process behind the proxy
for the approval form a 2026 host gets in a round of its call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.support import KITCHEN_SINK, PY, ROOT, RawHost, proxy_command, proxy_env, write_policy

MODERN_SERVER = [PY, str(ROOT / "tests" / "fixtures" / "eras" / "modern_features_server.py")]
PIN_HANDSHAKE = "upstream:\n  era: handshake\nelicitation:\n  route: host\n"
MODERN = "2026-07-28"


def meta(caps: dict[str, Any] | None = None, /, **extra: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "2"},
        "io.modelcontextprotocol/clientCapabilities": caps if caps is not None else {"elicitation": {}},
        **extra,
    }


def call(host: RawHost, tool: str, arguments: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
    return host.request("tools/call", {"name": tool, "arguments": arguments or {}, "_meta": meta(), **params})


def text_of(response: dict[str, Any]) -> Any:
    return json.loads(response["result"]["content"][0]["text"])


def start_modern_host(directory: Path) -> RawHost:
    """A 2026 host (the test writes its lines) to the proxy pinned to the handshake, before the kitchen sink."""
    policy = write_policy(directory, PIN_HANDSHAKE)
    dirs = {
        "MCP_SAMPLING_PROXY_RUNTIME_DIR": str(directory / "run"),
        "MCP_SAMPLING_PROXY_STATE_DIR": str(directory / "state"),
    }
    command = proxy_command(policy, upstream=[PY, KITCHEN_SINK])  # the SDK's server: its era is the point
    return RawHost(command, proxy_env(TEST_LLM_KEY="k", **dirs), directory / "stderr.log")


@pytest.fixture(scope="module")
def one_modern_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawHost]:
    with start_modern_host(tmp_path_factory.mktemp("modern-host")) as host:
        yield host


@pytest.fixture
def modern_host(one_modern_host: RawHost) -> RawHost:
    """The module's one session, for tests that leave the server as they found it: what it said before
    the test is forgotten."""
    one_modern_host.seen.clear()
    return one_modern_host


@pytest.fixture
def fresh_modern_host(tmp_path: Path) -> Iterator[RawHost]:
    """A session of its own, for a test that counts what the server did and picks an id of its own."""
    with start_modern_host(tmp_path) as host:
        yield host


def test_discover_is_answered_from_the_handshake_the_proxy_opened(modern_host: RawHost) -> None:
    discover = modern_host.request("server/discover", {"_meta": meta()})["result"]
    assert discover["supportedVersions"] == [MODERN]
    assert discover["resultType"] == "complete" and discover["cacheScope"] == "private" and discover["ttlMs"] == 0
    assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "kitchen-sink"
    assert "tools" in discover["capabilities"]
    # the server saw a handshake, with the host's capabilities and what the proxy adds
    caps = text_of(call(modern_host, "caps"))
    assert caps["elicitation"] == {} and caps["sampling"] == {}
    info = text_of(call(modern_host, "client_info"))
    assert info == {"protocolVersion": "2025-11-25", "clientInfo": {"name": "modern-host", "version": "2"}}


def test_results_are_completed_as_a_2026_host_requires(modern_host: RawHost) -> None:
    listed = modern_host.request("tools/list", {"_meta": meta()})["result"]
    assert listed["resultType"] == "complete" and listed["ttlMs"] == 0 and listed["cacheScope"] == "private"
    echoed = call(modern_host, "echo", {"text": "hi"})["result"]
    assert echoed["resultType"] == "complete" and "ttlMs" not in echoed  # tools/call is not cacheable
    assert echoed["content"][0]["text"] == "hi"


def test_a_server_elicitation_reaches_the_2026_host_as_a_round_of_its_call(modern_host: RawHost) -> None:
    first = call(modern_host, "elicit_name")["result"]
    assert first["resultType"] == "input_required"
    ((key, asked),) = first["inputRequests"].items()
    assert asked["method"] == "elicitation/create" and asked["params"]["message"].endswith("\u2502 What is your name?")
    assert asked["params"]["message"].startswith("The server 'kitchen_sink_server'")  # marked as the server's
    retry = modern_host.request(
        "tools/call",
        {
            "name": "elicit_name",
            "arguments": {},
            "_meta": meta(),
            "requestState": first["requestState"],
            "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
        },
    )
    assert text_of(retry) == {"action": "accept", "data": {"name": "Ada"}}


def test_roots_and_url_elicitation_cross_to_the_2026_era(tmp_path: Path, dirs: dict[str, str]) -> None:
    policy = write_policy(tmp_path, PIN_HANDSHAKE + "  url_mode: true\n")
    caps: dict[str, Any] = {"roots": {}, "elicitation": {"form": {}, "url": {}}}
    with RawHost(
        proxy_command(policy, upstream=[PY, KITCHEN_SINK]), proxy_env(**dirs), tmp_path / "stderr.log"
    ) as host:
        first = host.request("tools/call", {"name": "list_roots", "arguments": {}, "_meta": meta(caps)})["result"]
        ((key, asked),) = first["inputRequests"].items()
        assert asked["method"] == "roots/list"
        done = host.request(
            "tools/call",
            {
                "name": "list_roots",
                "arguments": {},
                "_meta": meta(caps),
                "requestState": first["requestState"],
                "inputResponses": {key: {"roots": [{"uri": "file:///work", "name": "work"}]}},
            },
        )
        assert text_of(done) == {"roots": [{"uri": "file:///work", "name": "work"}]}

        first = host.request(
            "tools/call", {"name": "elicit_url", "arguments": {"url": "https://example.com/login"}, "_meta": meta(caps)}
        )["result"]
        ((key, asked),) = first["inputRequests"].items()
        # URL mode in the 2026 era has no elicitationId (the retry ends it)
        assert asked["params"]["mode"] == "url" and "elicitationId" not in asked["params"]
        done = host.request(
            "tools/call",
            {
                "name": "elicit_url",
                "arguments": {"url": "https://example.com/login"},
                "_meta": meta(caps),
                "requestState": first["requestState"],
                "inputResponses": {key: {"action": "accept"}},
            },
        )
        assert text_of(done) == {"action": "accept"}
        after = host.request("tools/list", {"_meta": meta(caps)})
        seen = [m.get("method") for m in host.seen]
    assert "result" in after
    # the server's notifications/elicitation/complete does not exist in the 2026 era
    assert "notifications/elicitation/complete" not in seen


def test_log_level_in_meta_becomes_set_level(modern_host: RawHost) -> None:
    quiet = call(modern_host, "log", {"message": "not asked for", "level": "debug"})
    assert "result" in quiet
    loud = modern_host.request(
        "tools/call",
        {
            "name": "log",
            "arguments": {"message": "asked for", "level": "debug"},
            "_meta": meta(**{"io.modelcontextprotocol/logLevel": "debug"}),
        },
    )
    assert "result" in loud
    logs = [m["params"]["data"] for m in modern_host.seen if m.get("method") == "notifications/message"]
    assert logs == ["asked for"]
    # the server was asked for that level: one that honours logging/setLevel now sends its debug lines
    assert call(modern_host, "log_level")["result"]["content"][0]["text"] == "debug"


def test_list_changes_reach_only_subscriptions_that_asked(modern_host: RawHost) -> None:
    call(modern_host, "notify_changes")
    assert not [m for m in modern_host.seen if str(m.get("method", "")).endswith("list_changed")]
    modern_host.send(
        {
            "jsonrpc": "2.0",
            "id": "listen-1",
            "method": "subscriptions/listen",
            "params": {
                "_meta": meta(),
                "notifications": {
                    "toolsListChanged": True,
                    "promptsListChanged": True,
                    "resourceSubscriptions": ["test://hello"],
                },
            },
        }
    )
    ack = modern_host.wait_for(lambda m: m.get("method") == "notifications/subscriptions/acknowledged")
    assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    honoured = ack["params"]["notifications"]
    assert honoured.get("toolsListChanged") is True and honoured.get("promptsListChanged") is True
    modern_host.seen.clear()
    call(modern_host, "notify_changes")
    got = {m["method"]: m for m in modern_host.seen if m.get("method", "").startswith("notifications/")}
    assert "notifications/tools/list_changed" in got and "notifications/prompts/list_changed" in got
    assert "notifications/resources/list_changed" not in got  # not asked for
    assert (
        got["notifications/tools/list_changed"]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
        == "listen-1"
    )
    # ending the subscription stops them
    modern_host.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "listen-1"}})
    modern_host.seen.clear()
    call(modern_host, "notify_changes")
    assert not [m for m in modern_host.seen if str(m.get("method", "")).endswith("list_changed")]


def test_a_progress_token_survives_the_round(modern_host: RawHost) -> None:
    response = modern_host.request(
        "tools/call", {"name": "progress", "arguments": {"steps": 2}, "_meta": meta(progressToken="p1")}
    )
    assert response["result"]["content"][0]["text"] == "done 2 steps"
    tokens = [m["params"]["progressToken"] for m in modern_host.seen if m.get("method") == "notifications/progress"]
    assert tokens == ["p1", "p1"]


def test_cancelling_the_retry_of_a_round_cancels_the_call_at_the_server(fresh_modern_host: RawHost) -> None:
    """After a round the host waits on the retry's id; the server knows the call by the first one."""
    round_ = call(fresh_modern_host, "elicit_then_slow", {"seconds": 30})["result"]
    ((key, _asked),) = round_["inputRequests"].items()
    fresh_modern_host.send(
        {
            "jsonrpc": "2.0",
            "id": 99,
            "method": "tools/call",
            "params": {
                "name": "elicit_then_slow",
                "arguments": {"seconds": 30},
                "_meta": meta(),
                "requestState": round_["requestState"],
                "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
            },
        }
    )
    stats = text_of(call(fresh_modern_host, "slow_stats"))
    for _ in range(200):  # the answer reaches the server, which goes on to sleep
        if stats["started"]:
            break
        stats = text_of(call(fresh_modern_host, "slow_stats"))
    assert stats["started"] == 1
    fresh_modern_host.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}})
    for _ in range(200):
        stats = text_of(call(fresh_modern_host, "slow_stats"))
        if stats["cancelled"]:
            break
    assert stats["cancelled"] == 1
    assert not [m for m in fresh_modern_host.seen if m.get("id") == 99]  # a cancelled request gets no answer


def test_a_reused_id_reaches_the_server_under_another_while_the_first_call_runs(modern_host: RawHost) -> None:
    first = call(modern_host, "elicit_then_slow", {"seconds": 0.5})["result"]
    ((key, _asked),) = first["inputRequests"].items()
    first_id = modern_host._next_id - 1
    modern_host.send(
        {
            "jsonrpc": "2.0",
            "id": "retry",
            "method": "tools/call",
            "params": {
                "name": "elicit_then_slow",
                "arguments": {"seconds": 0.5},
                "_meta": meta(),
                "requestState": first["requestState"],
                "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
            },
        }
    )
    # the host may use the first id again (it was answered); the server still runs that call
    modern_host.send(
        {
            "jsonrpc": "2.0",
            "id": first_id,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "reused"}, "_meta": meta()},
        }
    )
    reused = modern_host.wait_for(lambda m: m.get("id") == first_id)
    done = modern_host.wait_for(lambda m: m.get("id") == "retry")
    assert reused["result"]["content"][0]["text"] == "reused"
    assert done["result"]["content"][0]["text"] == "slept 0.5"


# -- the proxy's own approval form, for a 2026 host ----------------------------------------------------

APPROVE_VIA_HOST = "rules:\n  - name: ask\n    action: prompt\napproval:\n  channels: [host]\n"


def approve_in_round(host: RawHost, call_id: Any, params: dict[str, Any], approve: bool) -> dict[str, Any]:
    """The host's answer to the proxy's approval form, which comes as a round of its own call."""
    host.send({"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params})
    round_ = host.wait_for(lambda m: m.get("id") == call_id)["result"]
    assert round_["resultType"] == "input_required", round_
    ((key, form),) = round_["inputRequests"].items()
    assert form["method"] == "elicitation/create"
    assert form["params"]["message"].startswith("mcp-sampling-proxy: server ")
    assert "approve" in form["params"]["requestedSchema"]["properties"]
    retry_id = f"{call_id}-retry"
    host.send(
        {
            "jsonrpc": "2.0",
            "id": retry_id,
            "method": "tools/call",
            "params": {
                **params,
                "requestState": round_["requestState"],
                "inputResponses": {key: {"action": "accept", "content": {"approve": approve}}},
            },
        }
    )
    return host.wait_for(lambda m: m.get("id") == retry_id)


@pytest.mark.parametrize("upstream", ["2026 server", "handshake server"])
@pytest.mark.parametrize("approve", [True, False])
def test_approval_reaches_a_2026_host_in_a_round_of_its_call(
    upstream: str, approve: bool, tmp_path: Path, dirs: dict[str, str], llm: Any
) -> None:
    """The proxy asked a 2026 host with a request of its own, which such a host answers 'Method not
    found' (the sampling was then refused): it now asks in an input_required round of the host's call."""
    from helpers.support import openai_policy

    pin = "upstream:\n  era: handshake\n" if upstream == "handshake server" else ""
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=APPROVE_VIA_HOST) + pin)
    server = MODERN_SERVER if upstream == "2026 server" else None
    arguments = {} if server else {"prompt": "approve me"}
    with RawHost(proxy_command(policy, upstream=server), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        answer = approve_in_round(
            host,
            "call",
            {"name": "sample", "arguments": arguments, "_meta": meta({"elicitation": {"form": {}}})},
            approve,
        )
    if approve:  # the fake LLM's answer reached the server, and its result the host
        assert "echo: " in answer["result"]["content"][0]["text"], answer
    elif upstream == "2026 server":  # the proxy answers the round: the refusal ends the call
        assert answer["error"]["code"] == -1 and "rejected in the host" in answer["error"]["message"], answer
    else:  # the server's own request was refused: the tool says so
        assert "rejected in the host" in answer["result"]["content"][0]["text"], answer
