"""The network grant's decisions (services/network.py), in process: what a list allows, what it refuses with
the grant that would allow it, an audit record each, and which grants reach this machine's own addresses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.relay.session import Session
from mcp_sampling_proxy.services.network import NetworkGate
from mcp_sampling_proxy.transport.egress import Connect

pytestmark = pytest.mark.anyio
GRANTS = '[api.example.com, "*.example.org:443", "127.0.0.1:5432", "localhost:8080", 10.0.0.0/8]'


def gate(tmp_path: Path, network: str) -> tuple[NetworkGate, AuditLog, Path]:
    audit = tmp_path / "audit.jsonl"
    settings = parse_settings(
        f"audit:\n  path: {audit}\nsandbox:\n  servers:\n    fetch: {{network: {network}}}\n", "p.yaml"
    )
    log = AuditLog.from_settings(settings)
    return NetworkGate(settings.sandbox.for_server("fetch"), None, log, Session(name_override="fetch")), log, audit


@pytest.mark.parametrize(
    ("host", "port", "internal"),
    [
        ("api.example.com", 443, False),  # a name: should it resolve to 127.0.0.1 (rebinding), still refused there
        ("cdn.example.org", 443, False),
        ("127.0.0.1", 5432, True),  # an address of this machine's, named: reached
        ("localhost", 8080, True),
        ("10.1.2.3", 80, True),  # a network, named
    ],
)
async def test_a_listed_host_is_allowed_and_only_a_named_address_reaches_this_machine(
    tmp_path: Path, host: str, port: int, internal: bool
) -> None:
    judged, _, _ = gate(tmp_path, GRANTS)
    verdict = await judged.judge(Connect(host, port, "connect"))
    assert verdict.allowed and verdict.internal == internal


async def test_an_unlisted_host_with_nobody_to_ask_is_refused_naming_the_grant(tmp_path: Path) -> None:
    judged, log, audit = gate(tmp_path, GRANTS)
    for host, port in (("evil.example", 443), ("api.example.net", 443), ("a.b.example.org", 80)):
        verdict = await judged.judge(Connect(host, port, "connect"))
        assert not verdict.allowed
        assert (
            f"{host}:{port} is not in this server's network grant (sandbox.servers.fetch.network: [" in verdict.reason
        )
    log.close()
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    # each refusal once; in any order: on the event loop a record whose write would wait for the log's
    # lock is written by a thread of its own (audit/recorder.py), so the relay never waits for it
    assert sorted((r["method"], r["tool"], r["decision"]) for r in records) == [
        ("network/connect", "a.b.example.org:80", "deny"),
        ("network/connect", "api.example.net:443", "deny"),
        ("network/connect", "evil.example:443", "deny"),
    ]


async def test_without_a_list_public_hosts_are_allowed_and_none_reach_this_machine(tmp_path: Path) -> None:
    judged, _, _ = gate(tmp_path, "true")
    verdict = await judged.judge(Connect("localhost", 80, "http"))
    assert verdict.allowed and not verdict.internal  # the relay then refuses its loopback address
