"""DNS rebinding against `serve` on loopback: a web page whose name now resolves to 127.0.0.x can send
requests there, with its own name in `Host`. On any loopback address (all of 127.0.0.0/8 is this
machine), a tokenless `serve` answers only a `Host` that names it (or an `--allow-host`), else 421."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx2
from helpers.serving import KITCHEN_SINK_COMMAND, start_serve, stop
from helpers.support import PROXY, proxy_env

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def post_as(url: str, host: str) -> int:
    return httpx2.post(url, json=INITIALIZE, headers={**HEADERS, "Host": host}, timeout=30).status_code


def test_a_rebound_name_gets_421_on_any_loopback_address(tmp_path: Path) -> None:
    served = start_serve(
        tmp_path,
        "--allow-host",
        "balancer.internal:8080",
        upstream=KITCHEN_SINK_COMMAND,
        address="127.0.0.2",
        tokens=False,
    )
    try:
        netloc = served.url.removeprefix("http://").removesuffix("/mcp")
        assert post_as(served.url, "attacker.example:80") == 421
        assert post_as(served.url, f"attacker.example:{netloc.rsplit(':', 1)[1]}") == 421
        assert post_as(served.url, netloc) == 200  # its own address
        assert post_as(served.url, "balancer.internal:8080") == 200  # named by --allow-host
    finally:
        stop(served)


def test_allow_host_takes_a_host_header_value_only() -> None:
    done = subprocess.run(
        [*PROXY, "serve", "--allow-host", "http://x/", *KITCHEN_SINK_COMMAND],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--allow-host 'http://x/': give a Host header's value, HOST:PORT" in done.stderr
