#!/usr/bin/env python3
"""The relay's own work per message, in-process: no pipes, no event-loop wake-ups, no other process.

Feeds N tools/call requests and their responses through the real `Relay` (the services `runtime` builds
from the environment's settings) with in-memory senders, and prints microseconds per request+response
pair: the part of the proxy's CPU per relayed call that its own Python code costs (parse, envelope
checks, routing, in-flight bookkeeping). The rest of what `sdk_bench.py` measures per call is the
process hop: wake-ups and pipe reads and writes, which the byte relay pays too.

Usage: .venv/bin/python bench/relay_micro.py [--pairs 20000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import anyio
import orjson
from scratch_dirs import scratch_environment


async def measure(pairs: int, profile: bool) -> None:
    from mcp_sampling_proxy import log
    from mcp_sampling_proxy.approval.console.server import ConsoleServer
    from mcp_sampling_proxy.audit.recorder import AuditLog
    from mcp_sampling_proxy.config.settings import settings_from_environment
    from mcp_sampling_proxy.protocol import capabilities
    from mcp_sampling_proxy.relay.core import Relay
    from mcp_sampling_proxy.relay.session import Session
    from mcp_sampling_proxy.runtime import build_adapters, build_services

    log.configure("warning", "json")
    settings = settings_from_environment({})
    adapters = build_adapters(settings, None)
    offered = capabilities.offers(
        capabilities.offered_sampling(route=settings.sampling.route, tools=False),
        capabilities.offered_elicitation(route=settings.elicitation.route, url_mode=settings.elicitation.url_mode),
    )
    session = Session()
    services = build_services(
        settings,
        adapters,
        AuditLog.from_settings(settings),
        None,
        ConsoleServer(lambda: session.server_name, lambda: session.host_name),
        offered,
        approvals_store=None,
    )
    sent: list[bytes] = []
    async with anyio.create_task_group() as tg:
        relay = Relay(sent.append, sent.append, services.ports, tg, session)
        relay.from_host(
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "1"},
                    },
                }
            )
        )
        relay.from_upstream(
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "bench", "version": "1"},
                    },
                }
            )
        )
        requests = [
            orjson.dumps(
                {
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": i}},
                    "jsonrpc": "2.0",
                    "id": i,
                }
            )
            for i in range(1, pairs + 1)
        ]
        responses = [
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": i,
                    "result": {
                        "content": [{"type": "text", "text": "x"}],
                        "structuredContent": {"result": "x"},
                        "isError": False,
                    },
                }
            )
            for i in range(1, pairs + 1)
        ]

        def run(first: int, last: int) -> None:
            for i in range(first, last):
                relay.from_host(requests[i])
                relay.from_upstream(responses[i])

        warm = pairs // 10
        run(0, warm)
        profiler = cProfile.Profile() if profile else None
        if profiler:
            profiler.enable()
        started = time.perf_counter()
        run(warm, pairs)
        elapsed = time.perf_counter() - started
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        if len(sent) != 2 * pairs + 2:  # a relay that drops messages would look fast
            raise SystemExit(f"the relay passed on {len(sent)} of {2 * pairs + 2} messages")
        print(
            f"relay logic: {elapsed / (pairs - warm) * 1e6:.2f} us per request+response "
            f"({pairs - warm} pairs{', profiled' if profile else ''})"
        )
        tg.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20000, help="request+response pairs (default 20000)")
    parser.add_argument("--profile", action="store_true", help="print the top functions by own time (cProfile)")
    args = parser.parse_args()
    with scratch_environment():  # never the user's config, state or audit log
        anyio.run(measure, args.pairs, args.profile, backend_options={"use_uvloop": True})


if __name__ == "__main__":
    main()
