"""One connection per call against a Streamable HTTP server: direct vs through `mcp-sampling-proxy --url`.

Some hosts open a connection for every call (the Inspector's CLI does); for them a proxy's start is
paid per call. Each round, in turn: direct (an HTTP client in this process: initialize, initialized,
one tools/call, the session deleted) and proxied (the proxy started with --url over stdio, the same
three messages as JSON lines, stdin closed, the proxy's exit awaited). Prints the medians and the
ratio, round by round.

    .venv/bin/python bench/http_connect.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from scratch_dirs import scratch_dirs

ROOT = Path(__file__).resolve().parent.parent
HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}


def answer_of(response: httpx.Response) -> dict:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


def direct(url: str) -> float:
    started = time.perf_counter()
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(headers=headers) as client:
        first = client.post(url, json=HELLO)
        session = {"mcp-session-id": first.headers.get("mcp-session-id", ""), "MCP-Protocol-Version": "2025-11-25"}
        answer_of(first)
        client.post(url, json=INITIALIZED, headers=session)
        assert answer_of(client.post(url, json=CALL, headers=session))["result"]["content"][0]["text"] == "x"
        client.delete(url, headers=session)
    return time.perf_counter() - started


def proxied(url: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcp_sampling_proxy", "--no-terminal", "--url", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin and proc.stdout
    proc.stdin.write((json.dumps(HELLO) + "\n").encode())
    proc.stdin.flush()
    proc.stdout.readline()
    proc.stdin.write((json.dumps(INITIALIZED) + "\n" + json.dumps(CALL) + "\n").encode())
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["result"]["content"][0]["text"] == "x"
    proc.stdin.close()
    proc.wait(30)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fixtures" / "http_server.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    scratch = tempfile.TemporaryDirectory(prefix="http-connect-bench-")
    try:
        assert server.stdout
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/mcp"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_SAMPLING_PROXY_")}
        env.update(scratch_dirs(Path(scratch.name)))  # no user policy, no stored login of the user's
        direct(url), proxied(url, env)  # warm-up: the server's first session, the disk cache
        pairs = [(direct(url), proxied(url, env)) for _ in range(args.rounds)]
    finally:
        server.kill()
        scratch.cleanup()
    d = statistics.median(p[0] for p in pairs)
    p = statistics.median(p[1] for p in pairs)
    ratio = statistics.median(b / a for a, b in pairs)
    print(
        f"one connection per call, {args.rounds} rounds: direct {d * 1000:.0f} ms, proxied {p * 1000:.0f} ms "
        f"(+{(p - d) * 1000:.0f} ms, x{ratio:.2f} paired median); load {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
