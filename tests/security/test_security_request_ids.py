"""The proxy's own requests to the host (an approval form through the host, a review) wait for the
host's answer under an id of their own. A server must not be able to put a request of its own under
that id: the host's answer to the server's request (a form the user accepted, with an "approve" box)
would then be taken as the answer to the proxy's, approving an LLM call nobody approved.

In process: the real `Relay` with the proxy's real services, as tests/security/test_fuzz.py builds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from mcp_sampling_proxy.approval.console.server import ConsoleServer
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.protocol import capabilities
from mcp_sampling_proxy.relay.core import Relay
from mcp_sampling_proxy.relay.session import Session
from mcp_sampling_proxy.runtime import build_services
from mcp_sampling_proxy.services.sampling.adapters import AdapterPool

FORM = {
    "message": "mcp-sampling-proxy: approve?",
    "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]},
}


def line(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message)


@pytest.mark.anyio
async def test_a_server_request_cannot_take_the_id_of_the_proxys_request_to_the_host(tmp_path: Path) -> None:
    settings = parse_settings(f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n  fsync: false\n", "policy.yaml")
    audit = AuditLog.from_settings(settings, environ={})
    offered = capabilities.offers(
        capabilities.offered_sampling(route="auto", tools=False),
        capabilities.offered_elicitation(route="auto", url_mode=False),
    )
    session = Session()
    services = build_services(
        settings,
        AdapterPool([], None),
        audit,
        None,
        ConsoleServer(lambda: session.server_name, lambda: session.host_name),
        offered,
    )
    to_host: list[bytes] = []
    to_upstream: list[bytes] = []
    answers: list[dict[str, Any]] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            relay = Relay(to_host.append, to_upstream.append, services.ports, tg, session)

            async def ask() -> None:
                answers.append(await relay.request_host("elicitation/create", FORM))

            tg.start_soon(ask)
            tg.start_soon(ask)
            while len(to_host) < 2:
                await anyio.sleep(0.001)
            first, second = (orjson.loads(raw)["id"] for raw in to_host)
            # ids a server cannot work out from one it saw (a 2026-era retry shows it the proxy's ids)
            shared = next((i for i, (a, b) in enumerate(zip(str(first), str(second), strict=False)) if a != b), 0)
            assert shared < len("mcp-sampling-proxy:") + 8, (first, second)  # not a prefix plus a counter

            # a server that learnt (or guessed) the id sends its own request under it
            relay.from_upstream(line({"jsonrpc": "2.0", "id": first, "method": "roots/list"}))
            assert [orjson.loads(raw)["id"] for raw in to_host].count(first) == 1  # never reaches the host
            refusal = orjson.loads(to_upstream[-1])
            assert refusal["id"] == first and "already in use" in refusal["error"]["message"]

            # the host's answer still goes to the proxy's own request
            relay.from_host(line({"jsonrpc": "2.0", "id": first, "result": {"action": "decline"}}))
            relay.from_host(line({"jsonrpc": "2.0", "id": second, "result": {"action": "decline"}}))
            while len(answers) < 2:
                await anyio.sleep(0.001)
            tg.cancel_scope.cancel()
    audit.close()
    assert [a["result"] for a in answers] == [{"action": "decline"}, {"action": "decline"}]


@pytest.mark.anyio
async def test_a_second_server_request_under_an_id_still_being_served_is_refused(tmp_path: Path) -> None:
    """Two sampling requests under one id: the second would replace the first's bookkeeping, and the
    first's end would then drop the second's waiter at the host (it would wait for good)."""
    settings = parse_settings(
        f"elicitation:\n  route: host\naudit:\n  path: {tmp_path / 'audit.jsonl'}\n  fsync: false\n", "policy.yaml"
    )
    audit = AuditLog.from_settings(settings, environ={})
    offered = capabilities.offers(
        capabilities.offered_sampling(route="auto", tools=False),
        capabilities.offered_elicitation(route="host", url_mode=False),
    )
    session = Session()
    session.host_capabilities = {"elicitation": {}}
    services = build_services(
        settings,
        AdapterPool([], None),
        audit,
        None,
        ConsoleServer(lambda: session.server_name, lambda: session.host_name),
        offered,
    )
    to_host: list[bytes] = []
    to_upstream: list[bytes] = []
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "elicitation/create",
        "params": {
            "message": "Name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    }
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            relay = Relay(to_host.append, to_upstream.append, services.ports, tg, session)
            relay.from_upstream(line(request))
            relay.from_upstream(line(request))  # at once: the first is still being judged, not yet at the host
            refusal = orjson.loads(to_upstream[-1])
            assert refusal["id"] == 7 and "already in use" in refusal["error"]["message"]
            while not to_host:
                await anyio.sleep(0.001)
            relay.from_upstream(line(request))  # and again while the first waits at the host
            assert [orjson.loads(raw)["id"] for raw in to_upstream] == [7, 7]
            await anyio.sleep(0.01)
            assert len(to_host) == 1
            relay.from_host(
                line({"jsonrpc": "2.0", "id": 7, "result": {"action": "accept", "content": {"name": "Ada"}}})
            )
            while len(to_upstream) < 3:
                await anyio.sleep(0.001)
            tg.cancel_scope.cancel()
    audit.close()
    assert orjson.loads(to_upstream[-1])["result"]["content"] == {"name": "Ada"}
