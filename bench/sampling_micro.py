#!/usr/bin/env python3
"""The proxy's own work per sampling request, in-process: the real relay and services, the LLM answering
at once from memory.

A server's `sampling/createMessage` inside a host's tool call goes through the real `Relay` and the
services `runtime.build_services` wires from a policy (an allow rule, an OpenAI-type provider, the audit
log with `content: redacted`, fsync off): judge, limits, route, fulfil, the answer's credential scan,
the audit record, the "request ended" line. The provider's adapter answers from memory, so no HTTP
client's cost is in the figure (`sdk_bench.py`'s direct calls pay that too). Prints the CPU per
request, the best and the median of `--rounds` rounds: steadier than `sdk_bench.py`'s sampling row on
a busy machine, which adds the pipes, the wake-ups and the LLM call. It exits non-zero when an answer
is not a result or the audit log does not hold a record per request.

Usage: .venv/bin/python bench/sampling_micro.py [--requests 1000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
from scratch_dirs import scratch_environment

PARAMS = {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}], "maxTokens": 16}


class MemoryLLM:
    """An adapter that answers every request at once (the provider's reply, already mapped)."""

    supports_tools = False

    def __init__(self, config: Any) -> None:
        self.config = config

    async def complete(self, params: Any, model: str) -> Any:
        from mcp_sampling_proxy.providers.base import Completion

        text = {"type": "text", "text": "echo: hello"}
        return Completion(content=[text], model=model, stop_reason="endTurn", input_tokens=5, output_tokens=3)  # type: ignore[list-item]

    async def aclose(self) -> None:
        pass


async def measure(scratch: Path, requests: int, rounds: int) -> tuple[list[float], int]:
    from mcp_sampling_proxy import log
    from mcp_sampling_proxy.approval.console.server import ConsoleServer
    from mcp_sampling_proxy.audit.recorder import AuditLog
    from mcp_sampling_proxy.config.settings import parse_settings
    from mcp_sampling_proxy.protocol import capabilities
    from mcp_sampling_proxy.relay.core import Relay
    from mcp_sampling_proxy.relay.session import Session
    from mcp_sampling_proxy.runtime import build_adapters, build_services

    log.configure("info", "json")  # the "request ended" line is part of each request's work
    audit_path = scratch / "audit.jsonl"
    settings = parse_settings(
        "llm:\n  providers:\n    memory:\n      type: openai\n      base_url: http://127.0.0.1:9/v1\n"
        "      models: [gpt-bench]\nrules:\n  - name: allow-all\n    action: allow\n"
        f"sampling:\n  max_per_call: {requests * rounds + 100}\n"
        f"audit:\n  path: {audit_path}\n  fsync: false\n  content: redacted\n",
        "bench.yaml",
    )
    adapters = build_adapters(settings, None)
    adapters._adapters["memory"] = MemoryLLM(settings.providers[0])  # the LLM, not our code
    offered = capabilities.offers(
        capabilities.offered_sampling(route=settings.sampling.route, tools=False),
        capabilities.offered_elicitation(route=settings.elicitation.route, url_mode=settings.elicitation.url_mode),
    )
    session = Session()
    audit = AuditLog.from_settings(settings)
    services = build_services(
        settings, adapters, audit, None, ConsoleServer(lambda: session.server_name, lambda: session.host_name), offered
    )
    to_server: list[bytes] = []
    answered = anyio.Event()
    got: list[dict[str, Any]] = []

    def server_gets(line: bytes) -> None:
        message = orjson.loads(line)
        if "method" not in message and str(message.get("id", "")).startswith("s"):
            got.append(message)
            answered.set()
        else:
            to_server.append(line)

    async with anyio.create_task_group() as tg:
        relay = Relay(lambda _line: None, server_gets, services.ports, tg, session)
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
        relay.from_host(orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}))
        caps = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "b", "version": "1"},
        }
        relay.from_upstream(orjson.dumps({"jsonrpc": "2.0", "id": 0, "result": caps}))
        relay.from_host(orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        call = {"name": "sample", "arguments": {}}
        relay.from_host(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}))
        count = 0

        async def sample(n: int) -> None:
            nonlocal count, answered
            for _ in range(n):
                count += 1
                answered = anyio.Event()
                asked = {"jsonrpc": "2.0", "id": f"s{count}", "method": "sampling/createMessage", "params": PARAMS}
                relay.from_upstream(orjson.dumps(asked))
                await answered.wait()

        await sample(100)  # warm-up: the secret detectors, caches
        cpu: list[float] = []
        for _ in range(rounds):
            started = time.thread_time()
            await sample(requests)
            cpu.append((time.thread_time() - started) / requests)
        tg.cancel_scope.cancel()
    audit.close()
    bad = [m for m in got if "result" not in m]
    if bad or len(got) != count:
        raise SystemExit(f"{len(got)} answers for {count} requests; not a result: {bad[:1]}")
    records = sum(1 for line in audit_path.read_bytes().splitlines() if b'"sampling/createMessage"' in line)
    if records != count:
        raise SystemExit(f"the audit log holds {records} sampling records for {count} requests")
    return cpu, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="sampling requests per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the best and the median are printed (7)")
    args = parser.parse_args()
    with (
        scratch_environment() as scratch,  # never the user's config, state or audit log
        open(os.devnull, "w") as quiet,
        contextlib.redirect_stderr(quiet),  # the 'request ended' lines
    ):
        cpu, _ = anyio.run(measure, scratch, args.requests, args.rounds, backend_options={"use_uvloop": True})
    print(
        f"sampling request, the proxy's own work: best {min(cpu) * 1e6:.0f} us, median "
        f"{statistics.median(cpu) * 1e6:.0f} us CPU ({args.rounds} rounds of {args.requests}; LLM in memory)"
    )


if __name__ == "__main__":
    main()
