#!/usr/bin/env python3
"""`serve` under load: the same MCP server direct over Streamable HTTP, through one `serve`, through
three `serve` replicas behind HAProxy, and direct behind HAProxy alone, in one run.

The server is the kitchen-sink fixture (an `mcp` SDK `MCPServer`): `tests/fixtures/http_server.py` serves
it over Streamable HTTP for the direct modes, `tests/fixtures/kitchen_sink_server.py` is the stdio command
`serve` fronts. The same tools and the same SDK on both sides, so what differs is the path a call takes.

  direct            PYTHON tests/fixtures/http_server.py                    (one process, every session)
  HAProxy > direct  HAProxy (one backend server) in front of that server     (the balancer's own cost)
  serve x1          PYTHON -m mcp_sampling_proxy serve -- PYTHON kitchen_sink_server.py (a server per session)
  HAProxy > serve x3  three such replicas, sessions pinned by a stick table on Mcp-Session-Id

The load: --sessions client sessions at once, each making --calls `tools/call echo` one after another on
a keep-alive connection (raw HTTP/1.1 from asyncio: a load generator cheap enough not to be the
bottleneck; its CPU per call is printed); then the same with 2026-07-28 stateless requests (no session,
one POST per request). One warm-up round, then --runs rounds, the modes in a rotating order each round.
Figures: requests per second, p50 and p99 latency, the latency each mode adds over direct in the same
round (median over the rounds, with the spread), the CPU per call of each process kind. Memory per
session: RSS of `serve` x1 and of its servers at 1 and at --mem-sessions open sessions, before the
load reaches it (those sessions are then the load's: none is opened for the figure alone).

Usage: .venv/bin/python bench/serve_bench.py [--runs 5] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procstat import children_map, cpu_ns, descendants
from report import BenchError
from scratch_dirs import scratch_dirs

ROOT = Path(__file__).resolve().parent.parent
HTTP_SERVER = str(ROOT / "bench" / "http_kitchen_sink.py")  # the fixture on serve's stack: see its docstring
STDIO_SERVER = str(ROOT / "tests" / "fixtures" / "kitchen_sink_server.py")
MODES = ("direct", "haproxy_direct", "serve1", "serve3")
LABELS = {
    "direct": "direct",
    "haproxy_direct": "HAProxy > direct",
    "serve1": "serve x1",
    "serve3": "HAProxy > serve x3",
}
KINDS = ("single", "session", "stateless")
TITLES = {
    "single": "one session, calls one after another (2025-11-25): the latency a hop adds, without queueing",
    "session": "{sessions} sessions at once (2025-11-25): throughput; latency includes the wait for a core",
    "stateless": "{sessions} clients at once, 2026-07-28 stateless requests (no session, one POST each)",
}
HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "serve-bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
HAPROXY_CFG = """\
global
    maxconn 2000
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 120s
frontend serve3
    bind 127.0.0.1:{serve3_port}
    default_backend serve3
frontend direct
    bind 127.0.0.1:{direct_port}
    default_backend direct
# a session's requests go to the replica that answered its initialize: the stick table maps the
# Mcp-Session-Id the replica returned to that replica; requests without one (initialize, 2026-07-28
# stateless requests) are spread round robin. `http-send-name-header Host` sends each replica its
# own address as Host (a loopback `serve` checks Host against DNS rebinding): servers are named so.
backend serve3
    balance roundrobin
    stick-table type string len 64 size 100k expire 30m
    stick match req.hdr(mcp-session-id)
    stick store-response res.hdr(mcp-session-id)
    http-send-name-header Host
{serve3_servers}
backend direct
    balance roundrobin
    stick-table type string len 64 size 100k expire 30m
    stick match req.hdr(mcp-session-id)
    stick store-response res.hdr(mcp-session-id)
    http-send-name-header Host
    server 127.0.0.1:{server_port} 127.0.0.1:{server_port}
"""


# -- processes ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{proc.args!r} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise BenchError(f"{proc.args!r} did not listen on {port} in {timeout:.0f} s: {log.read_text()[-2000:]}")


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, USS) of a process in kB. USS, its private pages, is what it alone holds: a session's guard is
    a fork of `serve` whose RSS is mostly pages it still shares with `serve`, and every server maps the
    same interpreter and libraries."""
    rss = uss = 0
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith(("Private_Clean:", "Private_Dirty:")):
                uss += int(line.split()[1])
    return rss, uss


GUARD_COMM = "mcp-proxy-guard"  # a session's group guard: forked from serve, part of the proxy


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def split_tree(proxy_pid: int, kids: dict[int, list[int]] | None = None) -> tuple[list[int], list[int]]:
    """(the proxy's processes: serve and its session guards, the servers' processes: bwrap and servers)."""
    below = descendants(proxy_pid, kids)
    guards = [p for p in below if comm(p) == GUARD_COMM]
    return [proxy_pid, *guards], [p for p in below if p not in guards]


@dataclass
class Procs:
    """Every process the run started, stopped at the end (SIGTERM to each group, then SIGKILL)."""

    workdir: Path
    env: dict[str, str]
    python: str
    server: list[str]  # the stdio server each of serve's sessions runs
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, name: str, command: list[str], stdout: int | None = None) -> subprocess.Popen[bytes]:
        log = self.workdir / f"{name}.log"
        with open(log, "ab") as err:
            proc = subprocess.Popen(
                command,
                stdout=stdout if stdout is not None else err,
                stderr=err,
                env=self.env,
                cwd=self.workdir,  # not the checkout: `-m` then imports the interpreter's install
                start_new_session=True,
            )
        self.started.append(proc)
        return proc

    def http_server(self, name: str) -> tuple[subprocess.Popen[bytes], int]:
        proc = self.start(name, [self.python, HTTP_SERVER], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.strip().isdigit():
            raise BenchError(f"{HTTP_SERVER} printed no port: {(self.workdir / f'{name}.log').read_text()[-2000:]}")
        return proc, int(line)

    def launch_serves(self, *names: str) -> list[tuple[str, subprocess.Popen[bytes], int]]:
        """One `serve` per name, started and not waited for (`listening` waits): start-ups overlap."""
        launched = []
        for name in names:
            port = free_port()
            launched.append((name, self.start(name, serve_command(self.python, port, self.server)), port))
        return launched

    def listening(
        self, launched: list[tuple[str, subprocess.Popen[bytes], int]]
    ) -> list[tuple[subprocess.Popen[bytes], int]]:
        """The `launch_serves` processes and their ports, once each listens."""
        for name, proc, port in launched:
            wait_listening(port, proc, self.workdir / f"{name}.log")
        return [(proc, port) for _, proc, port in launched]

    def haproxy(self, config: str) -> subprocess.Popen[bytes]:
        path = self.workdir / "haproxy.cfg"
        path.write_text(config, encoding="utf-8")
        return self.start("haproxy", ["haproxy", "-db", "-f", str(path)])

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the group: a serve's per-session servers too
            if proc.stdout is not None:
                proc.stdout.close()


def serve_command(python: str, port: int, server: list[str]) -> list[str]:
    return [
        python,
        "-m",
        "mcp_sampling_proxy",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--max-sessions",
        "64",
        "--log-level",
        "warning",
        "--",
        *server,
    ]


# -- the load generator: raw HTTP/1.1 over asyncio streams ------------------------------------------------


class Conn:
    """One keep-alive HTTP/1.1 connection: prebuilt header bytes, a minimal response reader (Content-Length
    or chunked). Cheap on purpose: httpx costs several times more CPU per request."""

    def __init__(self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.port = port
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(port, reader, writer)

    async def request(self, method: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[bytes, bytes], bytes]:
        head = [
            f"{method} /mcp HTTP/1.1",
            f"Host: 127.0.0.1:{self.port}",
            "Accept: application/json, text/event-stream",
        ]
        if body:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        return await self.response()

    async def response(self) -> tuple[int, dict[bytes, bytes], bytes]:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(b":")
                headers[key.strip().lower()] = value.strip()
        if b"content-length" in headers:
            return status, headers, await self.reader.readexactly(int(headers[b"content-length"]))
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    return status, headers, b"".join(parts)
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
        return status, headers, b""

    def close(self) -> None:
        self.writer.close()


def call_body(request_id: int, modern: bool) -> bytes:
    params: dict[str, Any] = {"name": "echo", "arguments": {"text": f"hello {request_id}"}}
    if modern:
        params["_meta"] = MODERN_META
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


def check_echo(status: int, body: bytes, request_id: int, where: str) -> None:
    if status != 200 or f'"text":"hello {request_id}"'.encode() not in body.replace(b'": "', b'":"'):
        raise BenchError(f"{where}: tools/call {request_id} answered {status}: {body[:300]!r}")


async def open_session(port: int) -> str:
    """initialize + notifications/initialized on a connection of its own; the session id."""
    conn = await Conn.open(port)
    try:
        hello = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE,
                "capabilities": {},
                "clientInfo": {"name": "serve-bench", "version": "1"},
            },
        }
        status, headers, body = await conn.request("POST", json.dumps(hello).encode(), {})
        session = headers.get(b"mcp-session-id", b"").decode()
        if status != 200 or not session:
            raise BenchError(f"initialize on port {port} answered {status}: {body[:300]!r}")
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        status, _, body = await conn.request("POST", note, session_headers(session))
        if status != 202:
            raise BenchError(f"notifications/initialized on port {port} answered {status}: {body[:300]!r}")
        return session
    finally:
        conn.close()


async def close_session(port: int, session: str) -> None:
    conn = await Conn.open(port)
    try:
        await conn.request("DELETE", b"", session_headers(session))
    finally:
        conn.close()


def session_headers(session: str) -> dict[str, str]:
    return {"Mcp-Session-Id": session, "MCP-Protocol-Version": HANDSHAKE}


STATELESS_HEADERS = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo"}


async def client_loop(conn: Conn, session: str | None, calls: int, ids: itertools.count[int]) -> list[float]:
    """`calls` tools/call echo one after another; each one's latency in seconds."""
    headers = session_headers(session) if session else STATELESS_HEADERS
    modern = session is None
    latencies = []
    for _ in range(calls):
        request_id = next(ids)
        body = call_body(request_id, modern)
        started = time.perf_counter()
        status, _, answer = await conn.request("POST", body, headers)
        latencies.append(time.perf_counter() - started)
        check_echo(status, answer, request_id, f"port {conn.port}")
    return latencies


@dataclass
class Target:
    """One mode: the port the clients call, its open sessions, the processes whose CPU counts."""

    mode: str
    port: int
    sessions: list[str]
    roles: dict[str, list[int]]  # role -> pids; a serve's per-session servers are found at each snapshot

    def pids(self) -> dict[str, list[int]]:
        kids = children_map()
        out = {role: list(pids) for role, pids in self.roles.items() if role != "proxy"}
        if "proxy" in self.roles:
            out["proxy"], out["server"] = [], []
            for proxy in self.roles["proxy"]:
                own, servers = split_tree(proxy, kids)
                out["proxy"] += own
                out["server"] += servers
        return out


def cpu_snapshot(target: Target, loadgen_first: bool) -> dict[str, int]:
    """CPU so far of each role's processes and of this process; this process's own read is taken on the
    far side of the /proc walk, so the walk is not counted as load-generator work."""
    loadgen = time.process_time_ns() if loadgen_first else 0
    roles = {role: sum(cpu_ns(p) for p in pids) for role, pids in target.pids().items()}
    return roles | {"loadgen": loadgen or time.process_time_ns()}


async def one_run(target: Target, kind: str, sessions: int, calls: int, ids: itertools.count[int]) -> dict[str, Any]:
    slots: list[str | None] = list(target.sessions[:sessions]) if kind != "stateless" else [None] * sessions
    conns = [await Conn.open(target.port) for _ in slots]
    try:
        await asyncio.gather(*(client_loop(c, s, 1, ids) for c, s in zip(conns, slots, strict=True)))  # warm
        busy_before = machine_busy_ns()
        before = cpu_snapshot(target, loadgen_first=False)
        started = time.perf_counter()
        per_client = await asyncio.gather(*(client_loop(c, s, calls, ids) for c, s in zip(conns, slots, strict=True)))
        wall = time.perf_counter() - started
        after = cpu_snapshot(target, loadgen_first=True)
        busy = machine_busy_ns() - busy_before
    finally:
        for c in conns:
            c.close()
    latencies = sorted(x for xs in per_client for x in xs)
    n = len(latencies)
    return {
        "n": n,
        "wall_s": wall,
        "rps": n / wall,
        "p50_ms": quantile(latencies, 0.5) * 1000,
        "p99_ms": quantile(latencies, 0.99) * 1000,
        "cpu_us_per_call": {role: (after[role] - before.get(role, 0)) / 1000 / n for role in after},
        "loadgen_core_share": (after["loadgen"] - before["loadgen"]) / 1e9 / wall,
        # cores kept busy by everything else on the machine (other work, and the modes not measured)
        # (/proc/stat counts in clock ticks: a round of a few ms gets a rough figure)
        "other_cores": min(
            float(os.cpu_count() or 1), max(0.0, busy - sum(after[k] - before.get(k, 0) for k in after)) / 1e9 / wall
        ),
    }


def machine_busy_ns() -> int:
    """CPU time all cores spent on anything but idling and waiting for I/O (/proc/stat), in ns."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    busy_ticks = sum(fields) - fields[3] - fields[4]
    return busy_ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


# -- memory per session -----------------------------------------------------------------------------------


@dataclass
class Memory:
    """The memory figures, and the sessions opened for them (kept for the load: none is opened twice)."""

    figures: dict[str, Any]
    sessions: dict[str, list[str]]


async def memory_phase(
    serve: subprocess.Popen[bytes],
    serve_port: int,
    direct: subprocess.Popen[bytes],
    direct_port: int,
    count: int,
    settle: float,
) -> Memory:
    """A fresh serve and a fresh direct server (no call has reached them yet): RSS at 1 open session and at
    `count`. The sessions stay open."""
    ids = itertools.count(1)
    points: dict[str, dict[str, Any]] = {}
    sessions: dict[str, list[str]] = {"serve": [], "direct": []}
    for n in (1, count):
        for name, port in (("serve", serve_port), ("direct", direct_port)):
            while len(sessions[name]) < n:
                session = await open_session(port)
                sessions[name].append(session)
                conn = await Conn.open(port)
                try:
                    await client_loop(conn, session, 3, ids)
                finally:
                    conn.close()
        await asyncio.sleep(settle)
        own, servers = split_tree(serve.pid)
        proxy_mem = [memory_kb(p) for p in own]
        server_mem = [memory_kb(p) for p in servers]
        direct_rss, direct_uss = memory_kb(direct.pid)
        points[str(n)] = {
            "proxy_rss_kb": sum(m[0] for m in proxy_mem),
            "proxy_uss_kb": sum(m[1] for m in proxy_mem),
            "servers_rss_kb": sum(m[0] for m in server_mem),
            "servers_uss_kb": sum(m[1] for m in server_mem),
            "proxy_processes": len(own),
            "server_processes": len(servers),
            "server_commands": sorted({comm(p) for p in servers}),
            "direct_rss_kb": direct_rss,
            "direct_uss_kb": direct_uss,
        }
    one, many = points["1"], points[str(count)]

    def per(key: str) -> float:
        return (many[key] - one[key]) / (count - 1) / 1024

    figures = {
        "sessions": [1, count],
        "points": points,
        "per_session_mb": {
            "proxy_rss": per("proxy_rss_kb"),
            "proxy_uss": per("proxy_uss_kb"),
            "servers_rss": per("servers_rss_kb"),
            "servers_uss": per("servers_uss_kb"),
            "direct_rss": per("direct_rss_kb"),
            "direct_uss": per("direct_uss_kb"),
        },
        "proxy_processes_per_session": (many["proxy_processes"] - one["proxy_processes"]) / (count - 1),
        "server_processes_per_session": (many["server_processes"] - one["server_processes"]) / (count - 1),
    }
    return Memory(figures, sessions)


async def keep_sessions(port: int, sessions: list[str], keep: int, proxy: int | None = None) -> list[str]:
    """The first `keep` of `sessions`; the others closed (and, behind serve `proxy`, their servers gone, so
    no ending process is counted in the load's CPU)."""
    for session in sessions[keep:]:
        await close_session(port, session)
    deadline = time.monotonic() + 30
    while proxy is not None and len(split_tree(proxy)[0]) - 1 > keep:
        if time.monotonic() > deadline:
            raise BenchError(f"the servers of {len(sessions) - keep} closed sessions did not end within 30 s")
        await asyncio.sleep(0.05)
    return sessions[:keep]


# -- the run ----------------------------------------------------------------------------------------------


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians over the rounds; added latency and ratios paired round by round against direct."""
    out: dict[str, Any] = {}
    for mode in MODES:
        rs = runs[mode]
        d = runs["direct"]
        row: dict[str, Any] = {
            "rps": spread([r["rps"] for r in rs]),
            "p50_ms": spread([r["p50_ms"] for r in rs]),
            "p99_ms": spread([r["p99_ms"] for r in rs]),
            "cpu_us_per_call": {
                role: statistics.median(r["cpu_us_per_call"][role] for r in rs) for role in rs[0]["cpu_us_per_call"]
            },
            "cpu_total_us_per_call": spread([served_cpu(r) for r in rs]),
            "loadgen_core_share": statistics.median(r["loadgen_core_share"] for r in rs),
            "other_cores": spread([r["other_cores"] for r in rs]),
        }
        if mode != "direct":
            row["added_p50_ms"] = spread([r["p50_ms"] - x["p50_ms"] for r, x in zip(rs, d, strict=True)])
            row["added_p99_ms"] = spread([r["p99_ms"] - x["p99_ms"] for r, x in zip(rs, d, strict=True)])
            row["p50_ratio"] = spread([r["p50_ms"] / x["p50_ms"] for r, x in zip(rs, d, strict=True)])
            row["rps_ratio"] = spread([r["rps"] / x["rps"] for r, x in zip(rs, d, strict=True)])
            row["cpu_ratio"] = spread([served_cpu(r) / served_cpu(x) for r, x in zip(rs, d, strict=True)])
        out[mode] = row
    return out


def served_cpu(one: dict[str, Any]) -> float:
    """CPU per call of everything that served it (all but the load generator), in us."""
    return float(sum(us for role, us in one["cpu_us_per_call"].items() if role != "loadgen"))


def rotated(items: tuple[str, ...], i: int) -> tuple[str, ...]:
    k = i % len(items)
    return items[k:] + items[:k]


async def run(args: argparse.Namespace, workdir: Path, progress: Any) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "MCP_SAMPLING_PROXY_"))}
    env.update(MCP_SAMPLING_PROXY_NO_TERMINAL="1", **scratch_dirs(workdir))  # no user policy: serve's defaults
    procs = Procs(workdir, env, args.python, stdio_server(args))
    load_start = os.getloadavg()
    started = time.monotonic()
    try:
        progress("starting the direct server and serve x1")
        launched = procs.launch_serves("serve1")
        direct, direct_port = procs.http_server("direct")  # while serve x1 starts
        ((serve1, serve1_port),) = procs.listening(launched)
        progress(f"memory: the fresh serve x1 and direct server, 1 then {args.mem_sessions} sessions")
        memory = await memory_phase(serve1, serve1_port, direct, direct_port, args.mem_sessions, args.settle)

        progress("starting 3 serve replicas and HAProxy")
        replicas = procs.listening(procs.launch_serves(*(f"serve3-{i}" for i in range(3))))
        serve3_port, hap_direct_port = free_port(), free_port()
        haproxy_cfg = HAPROXY_CFG.format(
            serve3_port=serve3_port,
            direct_port=hap_direct_port,
            server_port=direct_port,
            serve3_servers="\n".join(f"    server 127.0.0.1:{p} 127.0.0.1:{p}" for _, p in replicas),
        )
        haproxy = procs.haproxy(haproxy_cfg)
        wait_listening(serve3_port, haproxy, workdir / "haproxy.log")
        wait_listening(hap_direct_port, haproxy, workdir / "haproxy.log")
        targets = {
            "direct": Target(
                "direct",
                direct_port,
                await keep_sessions(direct_port, memory.sessions["direct"], args.sessions),
                {"server": [direct.pid]},
            ),
            "haproxy_direct": Target(
                "haproxy_direct", hap_direct_port, [], {"haproxy": [haproxy.pid], "server": [direct.pid]}
            ),
            "serve1": Target(
                "serve1",
                serve1_port,
                await keep_sessions(serve1_port, memory.sessions["serve"], args.sessions, serve1.pid),
                {"proxy": [serve1.pid]},
            ),
            "serve3": Target(
                "serve3", serve3_port, [], {"haproxy": [haproxy.pid], "proxy": [p.pid for p, _ in replicas]}
            ),
        }
        progress(f"opening {args.sessions} sessions per mode")
        for target in targets.values():
            while len(target.sessions) < args.sessions:  # one after another: round robin spreads them evenly
                target.sessions.append(await open_session(target.port))
        kids = children_map()  # each session has a group guard of its own: count those
        per_replica = [len(split_tree(proc.pid, kids)[0]) - 1 for proc, _ in replicas]

        ids = itertools.count(1)
        results: dict[str, Any] = {}
        for kind in KINDS if args.stateless else KINDS[:2]:
            clients = 1 if kind == "single" else args.sessions
            progress(f"{kind}: warm-up round")
            for mode in MODES:
                await one_run(targets[mode], kind, clients, max(1, args.calls // 4), ids)
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
            for i in range(args.runs):
                for mode in rotated(MODES, i):
                    runs[mode].append(await one_run(targets[mode], kind, clients, args.calls, ids))
                progress(
                    f"{kind} round {i + 1}/{args.runs}: "
                    + ", ".join(f"{LABELS[m]} {runs[m][-1]['rps']:.0f}/s" for m in MODES)
                )
            results[kind] = {"runs": runs, "summary": summarize(runs)}
        for target in targets.values():
            for session in target.sessions:
                await close_session(target.port, session)
    finally:
        procs.stop_all()
    shown = serve_command(args.python, 0, procs.server)
    return {
        "settings": {
            "sessions": args.sessions,
            "calls": args.calls,
            "runs": args.runs,
            "mem_sessions": args.mem_sessions,
            "python": args.python,
        },
        "commands": {
            "direct": [args.python, HTTP_SERVER],
            "serve": [*shown[:4], "--listen", "127.0.0.1:PORT", *shown[6:]],
            "haproxy": ["haproxy", "-db", "-f", "haproxy.cfg"],
        },
        "haproxy_version": haproxy_version(),
        "haproxy_cfg": haproxy_cfg,
        "sessions_per_replica": per_replica,
        "memory": memory.figures,
        **results,
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_start": list(load_start),
            "loadavg_end": list(os.getloadavg()),
            "python": sys.version.split()[0],
            "date": time.strftime("%Y-%m-%d"),
        },
        "wall_s": time.monotonic() - started,
    }


def loop_factory() -> Any:
    """uvloop for the load generator when it is there (it is a dependency of the proxy): less CPU per call."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def haproxy_version() -> str:
    done = subprocess.run(["haproxy", "-v"], capture_output=True, text=True, check=False)
    return done.stdout.split("\n")[0].split(" - ")[0]


# -- output -----------------------------------------------------------------------------------------------


def render(r: dict[str, Any]) -> str:
    s, m = r["settings"], r["machine"]
    cmd = r["commands"]
    lines = [
        f"direct:  {shlex.join(cmd['direct'])}",
        f"serve:   {shlex.join(cmd['serve'])}  (no policy: the defaults; a bubblewrap sandbox where it works)",
        f"HAProxy: {r['haproxy_version']}, round robin, sessions pinned by a stick table on Mcp-Session-Id",
        "clients: raw HTTP/1.1 keep-alive connections from one asyncio process",
        "",
        f"{m['cpus']} CPUs, shared by everything here: the load generator, HAProxy, 4 serve processes, their "
        "servers and the direct server (figures are CPU-bound; compare modes, not machines)",
        f"each client makes {s['calls']} tools/call echo one after another on a keep-alive connection; "
        f"{s['runs']} rounds, modes rotating; medians over the rounds [min..max]; added = mode - direct "
        "in the same round",
        "",
    ]
    for kind in KINDS:
        if kind not in r:
            continue
        title = TITLES[kind].format(sessions=s["sessions"])
        summary = r[kind]["summary"]
        header = (
            "mode",
            "req/s",
            "x direct",
            "p50 ms",
            "p99 ms",
            "added p50",
            "added p99",
            "CPU/call",
            "x direct",
            "CPU us/call by process",
        )
        rows = []
        for mode in MODES:
            row = summary[mode]
            cpu = row["cpu_us_per_call"]
            rows.append(
                (
                    LABELS[mode],
                    f"{row['rps']['median']:.0f} [{row['rps']['min']:.0f}..{row['rps']['max']:.0f}]",
                    "-" if mode == "direct" else f"x{row['rps_ratio']['median']:.2f}",
                    f"{row['p50_ms']['median']:.2f}",
                    f"{row['p99_ms']['median']:.2f}",
                    "-" if mode == "direct" else "{median:+.2f} [{min:+.2f}..{max:+.2f}]".format(**row["added_p50_ms"]),
                    "-" if mode == "direct" else f"{row['added_p99_ms']['median']:+.2f}",
                    f"{row['cpu_total_us_per_call']['median'] / 1000:.2f} ms",
                    "-" if mode == "direct" else f"x{row['cpu_ratio']['median']:.2f}",
                    " ".join(f"{k} {cpu[k]:.0f}" for k in ("haproxy", "proxy", "server", "loadgen") if k in cpu),
                )
            )
        lines.append(title)
        lines += table(header, rows)
        lines.append("")
    share = max(r[kind]["summary"][mode]["loadgen_core_share"] for kind in KINDS if kind in r for mode in MODES)
    other = [x["other_cores"] for kind in KINDS if kind in r for mode in MODES for x in r[kind]["runs"][mode]]
    lines += [
        "CPU/call: on-CPU time of every process serving the mode during the round, over the calls (the load",
        "generator's is not in it): the steady figure when other work shares the machine, where req/s and",
        "latency move with it. With the cores to itself, a mode tops out near cores / CPU per call.",
        f"The load generator used at most {share:.0%} of one core: it is not the bottleneck. Other work on the "
        f"machine kept {statistics.median(other):.2f} of the {r['machine']['cpus']} cores busy during the rounds "
        f"(median; {min(other):.2f}..{max(other):.2f})"
        + ("  <- expect noisy figures" if statistics.median(other) > 0.25 else ""),
        "",
    ]
    mem = r["memory"]
    per = mem["per_session_mb"]
    n = mem["sessions"][1]
    one, many = mem["points"]["1"], mem["points"][str(n)]
    lines.append(f"memory per session: (at {n} open sessions - at 1) / {n - 1}, serve x1 and direct before the load")

    def mem_row(label: str, key: str) -> tuple[str, ...]:
        return (
            label,
            f"{per[key + '_rss']:.1f} MB",
            f"{per[key + '_uss']:.1f} MB",
            f"{one[key + '_rss_kb'] / 1024:.0f} / {many[key + '_rss_kb'] / 1024:.0f} MB",
        )

    servers = ", ".join(many["server_commands"])
    lines += table(
        ("", "RSS", "USS (private)", f"RSS at 1 / {n} sessions"),
        [
            mem_row(f"serve: the proxy (+{mem['proxy_processes_per_session']:.0f} guard a session)", "proxy"),
            mem_row(f"serve: its servers ({mem['server_processes_per_session']:.0f} a session: {servers})", "servers"),
            mem_row("direct server (every session in one process)", "direct"),
        ],
    )
    lines.append(
        "  RSS counts pages shared with other processes (a guard is a fork of serve; every server maps the "
        "same interpreter): USS is what a session adds"
    )
    lines.append("")
    lines.append(f"sessions per serve replica behind HAProxy: {r['sessions_per_replica']}")
    lines.append(
        f"load average (1/5/15 min) at start {' '.join(f'{x:.2f}' for x in m['loadavg_start'])}, at end "
        f"{' '.join(f'{x:.2f}' for x in m['loadavg_end'])}"
        + ("  <- other work was running: expect noisy figures" if m["loadavg_start"][0] > 0.5 * m["cpus"] else "")
    )
    lines.append(f"wall time: {r['wall_s']:.0f} s")
    return "\n".join(lines)


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)).rstrip() for x in rows]
    return out


QUICK = {"runs": 1, "calls": 5, "sessions": 3, "mem_sessions": 3, "settle": 0.2}


def stdio_server(args: argparse.Namespace) -> list[str]:
    """The command of the server each of serve's sessions runs."""
    return shlex.split(args.server_cmd) if args.server_cmd else [args.python, STDIO_SERVER]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="measured rounds, every mode in each (default 5)")
    parser.add_argument("--sessions", type=int, default=8, help="client sessions at once (default 8)")
    parser.add_argument("--calls", type=int, default=100, help="calls per session per round (default 100)")
    parser.add_argument(
        "--mem-sessions", type=int, default=10, help="open sessions for the memory figure, against 1 (default 10)"
    )
    parser.add_argument("--settle", type=float, default=1.0, help="seconds before reading memory (default 1)")
    parser.add_argument(
        "--no-stateless", dest="stateless", action="store_false", help="skip the 2026-07-28 stateless requests"
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for the servers and serve")
    parser.add_argument(
        "--server-cmd",
        help="another stdio server for serve's sessions (shell-split; default: PYTHON "
        "tests/fixtures/kitchen_sink_server.py, the SDK the direct modes serve over HTTP; it needs echo)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test: the figures mean nothing)")
    parser.add_argument("--json", action="store_true", help="print JSON (every run) instead of the table")
    parser.add_argument("--json-out", metavar="PATH", help="also write the JSON to PATH (with the table printed)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' stderr (kept on failure)")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if min(args.runs, args.sessions, args.calls) < 1 or args.mem_sessions < 2:
        parser.error("--runs, --sessions and --calls must be >= 1, --mem-sessions >= 2")
    if shutil.which("haproxy") is None:
        print("serve_bench: haproxy is not installed (Debian: apt-get install haproxy)", file=sys.stderr)
        return 2

    def progress(text: str) -> None:
        if not args.quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            result = runner.run(run(args, workdir, progress))
    except (BenchError, OSError, asyncio.IncompleteReadError) as exc:
        print(f"serve_bench failed: {exc}\n(the processes' stderr: {workdir})", file=sys.stderr)
        return 2
    if args.keep_logs:
        result["logs"] = str(workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render(result))
        if args.keep_logs:
            print(f"\n(the processes' stderr: {workdir})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
