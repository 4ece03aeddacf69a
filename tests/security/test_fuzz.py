"""Fuzz the relay with mutated MCP messages from both sides: no crash, no hang, only JSON-RPC objects out.

In process: the real `Relay` with the proxy's real services (policy, sampling, elicitation, audit),
wired by `app.build_services` as the proxy wires them: every structural mutation of every seed (each node
replaced by each hostile value, and nested past every depth limit; about 3,000 lines a side), then 20,000
random mutations of every kind per side by default (each kind of each seed about 120 times or more).
Through the real proxy process: a host writing mutated lines and a hostile server writing mutated lines,
5,000 each. `FUZZ_ITERATIONS` (random in-process lines per side) and `FUZZ_SEED` make a longer or
different run:

    FUZZ_ITERATIONS=2000000 FUZZ_SEED=7 .venv/bin/python -m pytest -q tests/security/test_fuzz.py
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from itertools import zip_longest
from pathlib import Path

import anyio
import orjson
import pytest
from helpers.fuzzing import HOST_SEEDS, UPSTREAM_SEEDS, encode, every_replacement, mutate
from helpers.support import PY, ROOT, RawHost, proxy_command, proxy_env, write_policy
from structlog.testing import capture_logs

from mcp_sampling_proxy.approval.console.server import ConsoleServer
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.protocol import capabilities
from mcp_sampling_proxy.relay.core import Relay
from mcp_sampling_proxy.relay.session import Session
from mcp_sampling_proxy.runtime import build_services
from mcp_sampling_proxy.services.sampling.adapters import AdapterPool

ITERATIONS = int(os.environ.get("FUZZ_ITERATIONS", "20000"))
SEED = int(os.environ.get("FUZZ_SEED", "20261122"))
PROCESS_LINES = int(os.environ.get("FUZZ_PROCESS_LINES", "5000"))
FUZZ_SERVER = str(ROOT / "tests" / "fixtures" / "hostile" / "fuzz_server.py")
POLICY = """\
rules:
  - name: refuse-sampling
    when: {method: sampling}
    action: deny
elicitation:
  route: auto
  non_interactive: decline
audit:
  path: {audit}
  fsync: false
"""


def assert_json_rpc_objects(lines: list[bytes], side: str) -> None:
    """Strict JSON (orjson: nesting up to 1024 levels is valid JSON, deeper than `json` can read)."""
    for line in lines:
        message = orjson.loads(line)
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", f"{side} got {line[:200]!r}"


@pytest.mark.anyio
async def test_relay_in_process_survives_mutated_messages_from_both_sides(tmp_path: Path) -> None:
    settings = parse_settings(POLICY.replace("{audit}", str(tmp_path / "audit.jsonl")), "fuzz.yaml")
    audit = AuditLog.from_settings(settings, environ={})
    offered = capabilities.offers(
        capabilities.offered_sampling(route="auto", tools=False),
        capabilities.offered_elicitation(route="auto", url_mode=False),
    )
    session = Session()
    console = ConsoleServer(lambda: session.server_name, lambda: session.host_name)  # never served: no consoles
    services = build_services(settings, AdapterPool([], None), audit, None, console, offered)
    to_host: list[bytes] = []
    to_upstream: list[bytes] = []
    rng = random.Random(SEED)
    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            relay = Relay(to_host.append, to_upstream.append, services.ports, tg, session)
            relay.from_host(encode(HOST_SEEDS[0]))
            relay.from_upstream(encode(UPSTREAM_SEEDS[0]))
            swept = zip_longest(every_replacement(HOST_SEEDS), every_replacement(UPSTREAM_SEEDS))
            for done, (from_host, from_upstream) in enumerate(swept):
                if from_host is not None:
                    relay.from_host(from_host)
                if from_upstream is not None:
                    relay.from_upstream(from_upstream)
                if done % 200 == 0:
                    await anyio.sleep(0)  # let served requests (sampling, elicitation) run
            for done in range(ITERATIONS):
                relay.from_host(mutate(rng, HOST_SEEDS))
                relay.from_upstream(mutate(rng, UPSTREAM_SEEDS))
                if done % 200 == 0:
                    await anyio.sleep(0)
            with anyio.fail_after(60):  # a request that never ends is a hang
                to_host_seen = to_upstream_seen = 0
                while relay.waiting_on_peers:  # requests still waiting for a peer
                    to_host_seen = answer_requests(relay.from_host, to_host, to_host_seen)
                    to_upstream_seen = answer_requests(relay.from_upstream, to_upstream, to_upstream_seen)
                    await anyio.sleep(0.01)
            relay.cancel_all()
            tg.cancel_scope.cancel()
    audit.close()
    crashes = [entry for entry in logs if entry["log_level"] in ("error", "critical") or "exc_info" in entry]
    assert crashes == [], crashes[:3]
    assert_json_rpc_objects(to_host, "host")
    assert_json_rpc_objects(to_upstream, "upstream")
    assert len(to_host) > ITERATIONS // 10 and len(to_upstream) > ITERATIONS // 10  # it really relayed


def answer_requests(reply: Callable[[bytes], None], sent: list[bytes], start: int) -> int:
    """Answer the requests the relay sent a peer, as a real peer would (forwarded sampling and
    elicitation, approval forms to the host; 2026-era retries to the server)."""
    for line in sent[start:]:
        message = orjson.loads(line)
        if "method" in message and "id" in message:
            reply(
                encode(
                    {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "error": {"code": -32601, "message": "the fuzz peer declines"},
                    }
                )
            )
    return len(sent)


def test_proxy_process_survives_mutated_lines_from_host_and_server(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, POLICY.replace("{audit}", str(tmp_path / "audit.jsonl")))
    command = proxy_command(policy, upstream=[PY, FUZZ_SERVER, str(SEED), str(PROCESS_LINES)])
    rng = random.Random(SEED + 1)
    with RawHost(command, proxy_env(), tmp_path / "stderr.log") as host:
        host.initialize()
        host._next_id = 100_000  # ids no mutated server line answers
        batch = b"".join(mutate(rng, HOST_SEEDS[1:]) + b"\n" for _ in range(PROCESS_LINES))
        host.send_raw(batch)
        response = host.request("tools/call", {"name": "fuzz", "arguments": {}}, timeout=120)
        assert response["result"]["content"][0]["text"].startswith("sent")
        assert host.request("ping", timeout=30)["result"] == {}
        assert host.proc.poll() is None
        host.close_stdin()
        assert host.wait(30) == 0
    assert_json_rpc_objects(host.raw_received, "host")
    stderr = (tmp_path / "stderr.log").read_text(errors="replace")
    assert "Traceback" not in stderr and "failed to relay" not in stderr
