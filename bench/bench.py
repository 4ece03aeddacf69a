#!/usr/bin/env python3
"""DIRECT vs PROXIED benchmark for mcp-sampling-proxy, on the kitchen-sink server, in one run.

DIRECT:  the benchmark (a raw host) talks to `python tests/fixtures/kitchen_sink_server.py` itself.
PROXIED: it talks to `python -m mcp_sampling_proxy --no-terminal -- python tests/fixtures/kitchen_sink_server.py`.

The host is deliberately minimal and identical in both modes: it writes JSON lines to the
process's stdin and reads lines from its stdout with poll()+os.read() in this process (no SDK
client, no reader thread), so the difference between the two modes is the proxy's cost.
Sequential loops alternate between the two modes in chunks, so slow drift of the machine
(thermal, other load) hits both equally.

Measured (see bench/README.md):
  spawn-to-initialize       Popen -> initialize response, median of --runs fresh processes
  tools/call echo           --calls sequential round trips after a warm-up: p50 / p99
  ping                      the same with `ping` (cheap for the server: a cleaner view of relay cost)
  concurrent burst          --concurrency tools/call echo written at once; wall time until all answered
  big result                tools/call big {size: --big-size}: request -> complete response line
  proxy CPU per call        utime+stime of the PROXY process (not its child) over the echo loop;
                            also the nanosecond schedstat figure, since clock ticks are 10 ms coarse
  proxy peak RSS            VmHWM of the proxy after the big messages

Usage: .venv/bin/python bench/bench.py [--runs 5] [--calls 500] [--json] [--proxy-cmd "..."]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from procstat import cpu_ticks
from report import BenchError, finish
from scratch_dirs import scratch_dirs

ROOT = Path(__file__).resolve().parent.parent
SERVER_SCRIPT = "tests/fixtures/kitchen_sink_server.py"
FLOOD_SCRIPT = "tests/fixtures/hostile/sampling_flood.py"
PROTOCOL_VERSION = "2025-11-25"
CLK_TCK = os.sysconf("SC_CLK_TCK")
CHUNK = 50  # sequential calls per alternation block

# Targets (2-core machine).
TARGETS = {
    "spawn_added_ms": 150.0,
    "echo_p50_added_ms": 0.1,
    "concurrent_ratio": 1.1,
    "big_added_ms": 15.0,
    "proxy_cpu_us_per_call": 150.0,
    "proxy_peak_rss_mb": 80.0,
}


# --------------------------------------------------------------------------------------------
# /proc helpers
# --------------------------------------------------------------------------------------------


def proc_thread_cpu_ns(pid: int) -> dict[int, int] | None:
    """On-CPU time in ns of each live thread (/proc/<pid>/task/<tid>/schedstat), by tid."""
    found: dict[int, int] = {}
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                found[int(task.name)] = int((task / "schedstat").read_text().split()[0])
    except OSError:
        return None
    return found


def proc_status_kb(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        task_dir = Path(f"/proc/{current}/task")
        try:
            tasks = list(task_dir.iterdir())
        except OSError:
            continue
        for task in tasks:
            with contextlib.suppress(OSError, ValueError):
                kids = [int(p) for p in (task / "children").read_text().split()]
                found += kids
                todo += kids
    return found


class CpuMeter:
    """CPU used by one process between start() and stop(), in ticks and (if available) ns.

    The ns figure sums per-thread schedstat deltas. A thread that exits in between takes its
    time with it, so the ns figure is then dropped (None) and the tick figure stands in."""

    def __init__(self, pid: int):
        self.pid = pid
        self.ticks = 0  # utime + stime
        self.sys_ticks = 0  # stime alone: the kernel's share (pipe reads/writes, wake-ups, epoll)
        self.ns: int | None = 0
        self._t0: tuple[tuple[int, int], dict[int, int] | None] | None = None

    def start(self) -> None:
        self._t0 = (cpu_ticks(self.pid), proc_thread_cpu_ns(self.pid))

    def stop(self) -> None:
        assert self._t0 is not None
        (utime, stime), threads = cpu_ticks(self.pid), proc_thread_cpu_ns(self.pid)
        (utime0, stime0), threads0 = self._t0
        self.ticks += utime + stime - utime0 - stime0
        self.sys_ticks += stime - stime0
        if self.ns is not None and threads is not None and threads0 is not None and threads0.keys() <= threads.keys():
            self.ns += sum(ns - threads0.get(tid, 0) for tid, ns in threads.items())
        else:
            self.ns = None
        self._t0 = None


def wait_for_threads(pid: int, count: int, timeout: float) -> None:
    """Wait (bounded) until `pid` runs at most `count` threads, e.g. until a start-up thread is done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(os.listdir(f"/proc/{pid}/task")) <= count:
                return
        except OSError:
            return
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# The raw host
# --------------------------------------------------------------------------------------------

_ID_RE = re.compile(rb'"id"\s*:\s*(-?\d+)')


def _response_id(line: bytearray) -> int | None:
    """The id of a response line, or None for requests/notifications (cheap for big lines)."""
    if len(line) < 65536:
        msg = json.loads(line)
        if isinstance(msg, dict) and "method" not in msg and isinstance(msg.get("id"), int):
            return msg["id"]
        return None
    head = bytes(line[:512])
    if b'"method"' in head:
        return None
    match = _ID_RE.search(head)
    return int(match.group(1)) if match else None


class Conn:
    """One process spoken to over newline-delimited JSON on its stdin/stdout."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], stderr_path: Path):
        self.name = name
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "ab")  # noqa: SIM115
        self.t_spawn = time.perf_counter()
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=ROOT,
            start_new_session=True,
            bufsize=0,
        )
        assert self.proc.stdin and self.proc.stdout
        self.in_fd = self.proc.stdin.fileno()
        self.out_fd = self.proc.stdout.fileno()
        os.set_blocking(self.in_fd, False)
        self._poll_out = select.poll()
        self._poll_out.register(self.out_fd, select.POLLIN)
        self._buf = bytearray()
        self._scan = 0
        self._next_id = 1
        self._known_descendants: set[int] = set()

    # -- low level ---------------------------------------------------------------------------
    def new_id(self) -> int:
        request_id = self._next_id
        self._next_id += 1
        return request_id

    def _fail(self, what: str) -> BenchError:
        code = self.proc.poll()
        tail = ""
        with contextlib.suppress(OSError):
            tail = self.stderr_path.read_bytes()[-1500:].decode("utf-8", "replace")
        state = "running" if code is None else f"exit code {code}"
        return BenchError(f"{self.name}: {what} (process {state}); stderr ({self.stderr_path}) ends:\n{tail}")

    def _fill(self, deadline: float) -> None:
        timeout_ms = max(0, int((deadline - time.perf_counter()) * 1000))
        if not self._poll_out.poll(timeout_ms):
            if time.perf_counter() >= deadline:
                raise self._fail("timed out waiting for output")
            return
        data = os.read(self.out_fd, 1 << 20)
        if not data:
            raise self._fail("closed stdout")
        self._buf += data

    def _take_line(self) -> bytearray | None:
        nl = self._buf.find(b"\n", self._scan)
        if nl < 0:
            self._scan = len(self._buf)
            return None
        line = self._buf[:nl]
        del self._buf[: nl + 1]
        self._scan = 0
        return line

    def read_line(self, deadline: float) -> bytearray:
        while True:
            line = self._take_line()
            if line is not None:
                return line
            self._fill(deadline)

    def write(self, data: bytes, deadline: float) -> None:
        """Write everything, reading (and buffering) output meanwhile so neither side can block."""
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.in_fd, view)
                view = view[written:]
                continue
            except BlockingIOError:
                pass
            except BrokenPipeError:
                raise self._fail("closed stdin") from None
            poller = select.poll()
            poller.register(self.in_fd, select.POLLOUT)
            poller.register(self.out_fd, select.POLLIN)
            timeout_ms = max(0, int((deadline - time.perf_counter()) * 1000))
            events = dict(poller.poll(timeout_ms))
            if not events and time.perf_counter() >= deadline:
                raise self._fail("timed out writing")
            if events.get(self.out_fd):
                data_in = os.read(self.out_fd, 1 << 20)
                if not data_in:
                    raise self._fail("closed stdout")
                self._buf += data_in

    def wait_response(self, request_id: int, deadline: float) -> bytearray:
        while True:
            line = self.read_line(deadline)
            if line.strip() and _response_id(line) == request_id:
                return line

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        request_id = self.new_id()
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            msg["params"] = params
        deadline = time.perf_counter() + timeout
        self.write(json.dumps(msg).encode() + b"\n", deadline)
        reply = json.loads(self.wait_response(request_id, deadline))
        if "error" in reply:
            raise self._fail(f"{method} failed: {reply['error']}")
        return reply

    # -- protocol ----------------------------------------------------------------------------
    def initialize(self, timeout: float = 60.0) -> float:
        """Send initialize at once (the pipe holds it until the process reads); seconds since Popen."""
        self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "bench-raw-host", "version": "1.0"},
            },
            timeout=timeout,
        )
        elapsed = time.perf_counter() - self.t_spawn
        self.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n', time.perf_counter() + timeout)
        self._remember_descendants()
        return elapsed

    def _remember_descendants(self) -> None:
        self._known_descendants.update(descendants(self.proc.pid))

    def child_pid(self) -> int | None:
        kids = descendants(self.proc.pid)
        self._known_descendants.update(kids)
        return kids[0] if kids else None

    def close(self, grace: float = 10.0) -> int | None:
        """Close stdin (the stdio 'please exit'), wait, then SIGKILL the process group and leftovers."""
        with contextlib.suppress(Exception):
            self._remember_descendants()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        code: int | None = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = self.proc.wait(grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in self._known_descendants:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        with contextlib.suppress(OSError):
            self.proc.stdout.close()  # type: ignore[union-attr]
        self._stderr.close()
        return code


# --------------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------------


def echo_line(request_id: int, text: str = "hello") -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"}}}\n' % (
        request_id,
        text.encode(),
    )


def ping_line(request_id: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % request_id


def check_echo(conn: Conn, line: bytearray, text: str = "hello") -> None:
    msg = json.loads(line)
    result = msg.get("result")
    if not isinstance(result, dict) or result.get("isError") or result["content"][0].get("text") != text:
        raise conn._fail(f"unexpected echo response: {bytes(line[:300])!r}")


def round_trips(
    conn: Conn,
    make_line: Callable[[int], bytes],
    n: int,
    out: list[float],
    check: Callable[[Conn, bytearray], None] | None,
    timeout: float,
) -> None:
    """n sequential request/response round trips; latency (seconds) of each appended to out."""
    perf = time.perf_counter
    for _ in range(n):
        request_id = conn.new_id()
        data = make_line(request_id)
        t0 = perf()
        deadline = t0 + timeout
        conn.write(data, deadline)
        line = conn.wait_response(request_id, deadline)
        out.append(perf() - t0)
        if check is not None:
            check(conn, line)


def burst(conn: Conn, n: int, timeout: float) -> float:
    """Write n echo requests in one go; seconds until all n responses have arrived."""
    ids = [conn.new_id() for _ in range(n)]
    data = b"".join(echo_line(i) for i in ids)
    pending = set(ids)
    t0 = time.perf_counter()
    deadline = t0 + timeout
    conn.write(data, deadline)
    while pending:
        line = conn.read_line(deadline)
        if line.strip():
            pending.discard(_response_id(line))  # type: ignore[arg-type]
    return time.perf_counter() - t0


def big_call(conn: Conn, size: int, timeout: float, validate: bool) -> float:
    request_id = conn.new_id()
    data = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"big","arguments":{"size":%d}}}\n' % (
        request_id,
        size,
    )
    t0 = time.perf_counter()
    deadline = t0 + timeout
    conn.write(data, deadline)
    line = conn.wait_response(request_id, deadline)
    elapsed = time.perf_counter() - t0
    if validate:
        msg = json.loads(line)
        text = msg.get("result", {}).get("content", [{}])[0].get("text", "")
        if len(text) != size:
            raise conn._fail(f"big({size}) returned {len(text)} characters: {bytes(line[:300])!r}")
    return elapsed


def sampling_flood(
    args: argparse.Namespace, proxy_prefix: list[str], env: dict[str, str], workdir: Path, conns: list[Conn]
) -> dict[str, Any]:
    """A hostile server sends `--flood` sampling requests at once (the proxy fulfils them with the
    loopback fake LLM); meanwhile the host pings back to back. Host ping latency while they are in
    flight, and the proxy's CPU from the flood's start to its last answer."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fakes.llm_server import FakeLLMServer

    with FakeLLMServer("openai") as llm:
        policy = workdir / "flood-policy.yaml"
        policy.write_text(
            "llm:\n  providers:\n    fake:\n      type: openai\n"
            f"      base_url: {llm.base_url}\n      models: [gpt-bench]\n"
            "sampling:\n  max_per_call: 1000000\n"  # the flood is one tool call: over the default cap of 25
            "rules:\n  - name: allow-all\n    action: allow\n",
            encoding="utf-8",
        )
        conn = Conn(
            "flood",
            [*proxy_prefix, "--policy", str(policy), "--", args.python, FLOOD_SCRIPT],
            {**env, "MCP_SAMPLING_PROXY_STATE_DIR": str(workdir / "state")},
            workdir / "flood.stderr.log",
        )
        conns.append(conn)
        conn.initialize(timeout=args.timeout * 2)
        wait_for_threads(conn.proc.pid, 1, 5.0)
        params = {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}], "maxTokens": 16}
        flood_id = conn.new_id()
        meter = CpuMeter(conn.proc.pid)
        meter.start()
        started = time.perf_counter()
        deadline = started + args.timeout * 10
        conn.write(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": flood_id,
                    "method": "tools/call",
                    "params": {"name": "flood", "arguments": {"count": args.flood, "params": params}},
                }
            ).encode()
            + b"\n",
            deadline,
        )
        pings: list[float] = []
        summary: dict[str, Any] | None = None
        while summary is None:
            ping_id = conn.new_id()
            sent = time.perf_counter()
            conn.write(ping_line(ping_id), deadline)
            while True:
                line = conn.read_line(deadline)
                got = _response_id(line)
                if got == flood_id:
                    summary = json.loads(json.loads(line)["result"]["content"][0]["text"])
                elif got == ping_id:
                    pings.append((time.perf_counter() - sent) * 1000)
                    break
        wall = time.perf_counter() - started
        meter.stop()
        conn.close(grace=args.timeout)
        conns.remove(conn)
    cpu_s = (meter.ns / 1e9) if meter.ns is not None else meter.ticks / CLK_TCK
    return {
        "requests": args.flood,
        "ok": summary["ok"],
        "refused": sum(summary["codes"].values()),
        "pings": len(pings),
        "ping_p50_ms": pct(pings, 50),
        "ping_p99_ms": pct(pings, 99),
        "ping_max_ms": max(pings) if pings else None,
        "wall_ms": wall * 1000,
        "proxy_cpu_s": cpu_s,
        "llm_max_open": llm.max_open,
    }


def pct(values: list[float], p: float) -> float:
    """Percentile (nearest rank with linear interpolation)."""
    data = sorted(values)
    if not data:
        return float("nan")
    k = (len(data) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def bench_env() -> dict[str, str]:
    """The environment both modes get: no LLM keys, no proxy settings, no terminal prompts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "MCP_SAMPLING_PROXY_"))}
    env["MCP_SAMPLING_PROXY_NO_TERMINAL"] = "1"
    env.setdefault("PYTHONUNBUFFERED", "0")
    return env


def log(args: argparse.Namespace, *parts: Any) -> None:
    if not args.quiet:
        print(*parts, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    python = args.python
    server_cmd = shlex.split(args.server_cmd) if args.server_cmd else [python, SERVER_SCRIPT]
    default_proxy = [python, "-m", "mcp_sampling_proxy", "--no-terminal"]
    proxy_prefix = shlex.split(args.proxy_cmd) if args.proxy_cmd else default_proxy
    proxy_cmd = [*proxy_prefix, "--", *server_cmd]
    workdir = Path(tempfile.mkdtemp(prefix="mcp-proxy-bench-"))
    env = {**bench_env(), **scratch_dirs(workdir)}
    compile_bytecode(args)
    commands = {"direct": server_cmd, "proxied": proxy_cmd}
    conns: list[Conn] = []

    def start(mode: str) -> Conn:
        conn = Conn(mode, commands[mode], env, workdir / f"{mode}.stderr.log")
        conns.append(conn)
        return conn

    def stop(conn: Conn) -> None:
        conn.close()
        conns.remove(conn)

    result: dict[str, Any] = {
        "bench_command": [sys.executable, *sys.argv],
        "commands": {k: shlex.join(v) for k, v in commands.items()},
        "cwd": str(ROOT),
        "stderr_logs": str(workdir),
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "clk_tck": CLK_TCK,
            "loadavg_1m_start": os.getloadavg()[0],
        },
        "settings": {k: getattr(args, k) for k in ("runs", "calls", "warmup", "concurrency", "big_size", "flood")},
        "targets": TARGETS,
    }
    modes = ("direct", "proxied")
    try:
        # 1. spawn-to-initialize: fresh processes, alternating modes.
        spawn: dict[str, list[float]] = {m: [] for m in modes}
        for i in range(args.runs):
            order = modes if i % 2 == 0 else modes[::-1]
            for mode in order:
                conn = start(mode)
                spawn[mode].append(conn.initialize(timeout=args.timeout * 2))
                stop(conn)
            log(
                args,
                f"spawn run {i + 1}/{args.runs}: direct {spawn['direct'][-1] * 1e3:.1f} ms, "
                f"proxied {spawn['proxied'][-1] * 1e3:.1f} ms",
            )
        result["spawn_ms"] = (
            {m: {"median": statistics.median(v) * 1e3, "runs": [x * 1e3 for x in v]} for m, v in spawn.items()}
            if args.runs
            else None
        )
        if args.runs:  # each run's two spawns are adjacent in time: their difference is less load-dependent
            result["spawn_ms"]["paired_added_median"] = statistics.median(
                (p - d) * 1e3 for p, d in zip(spawn["proxied"], spawn["direct"], strict=True)
            )

        # 2. long-lived sessions for everything else.
        sessions = {m: start(m) for m in modes}
        for conn in sessions.values():
            conn.initialize(timeout=args.timeout * 2)
        proxy = sessions["proxied"]
        proxy_pid = proxy.proc.pid
        proxied_server_pid = proxy.child_pid()
        server_pids = {"direct": sessions["direct"].proc.pid, "proxied": proxied_server_pid}
        result["pids"] = {
            "proxy": proxy_pid,
            "direct_server": server_pids["direct"],
            "proxied_server": proxied_server_pid,
        }

        # warm-up: tools/call and ping on both
        for conn in sessions.values():
            round_trips(conn, echo_line, args.warmup, [], check_echo, args.timeout)
            round_trips(conn, ping_line, args.warmup, [], None, args.timeout)
        # the proxy imports its sampling stack on a start-up thread; let it finish before measuring
        wait_for_threads(proxy_pid, 1, 10.0)
        result["proxy_threads"] = len(os.listdir(f"/proc/{proxy_pid}/task"))
        result["proxy_rss_mb_after_warmup"] = (proc_status_kb(proxy_pid, "VmRSS") or 0) / 1024

        Latencies = dict[str, list[float]]

        def sequential(make_line: Callable[[int], bytes], check: Any) -> tuple[Latencies, dict[str, CpuMeter]]:
            lat: dict[str, list[float]] = {m: [] for m in modes}
            meters = {"proxy": CpuMeter(proxy_pid)}
            for m, pid in server_pids.items():
                if pid:
                    meters[f"{m}_server"] = CpuMeter(pid)
            for meter in meters.values():
                meter.start()
            done = 0
            block = 0
            while done < args.calls:
                n = min(CHUNK, args.calls - done)
                order = modes if block % 2 == 0 else modes[::-1]
                for mode in order:
                    round_trips(sessions[mode], make_line, n, lat[mode], check, args.timeout)
                done += n
                block += 1
            for meter in meters.values():
                meter.stop()
            return lat, meters

        def summarize(lat: dict[str, list[float]], meters: dict[str, CpuMeter]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for mode, values in lat.items():
                out[mode] = {
                    "p50_ms": pct(values, 50) * 1e3,
                    "p90_ms": pct(values, 90) * 1e3,
                    "p99_ms": pct(values, 99) * 1e3,
                    "mean_ms": statistics.fmean(values) * 1e3,
                    "n": len(values),
                }
            out["added_p50_ms"] = out["proxied"]["p50_ms"] - out["direct"]["p50_ms"]
            out["added_p99_ms"] = out["proxied"]["p99_ms"] - out["direct"]["p99_ms"]
            # Paired view: the two modes run in alternating blocks of CHUNK calls, adjacent in time, so
            # the spread of per-block p50 differences shows how much of the figure is machine noise.
            diffs = [
                pct(lat["proxied"][i : i + CHUNK], 50) - pct(lat["direct"][i : i + CHUNK], 50)
                for i in range(0, min(len(lat["direct"]), len(lat["proxied"])), CHUNK)
            ]
            out["added_p50_blocks_ms"] = {
                "median": pct(diffs, 50) * 1e3,
                "q25": pct(diffs, 25) * 1e3,
                "q75": pct(diffs, 75) * 1e3,
                "blocks": len(diffs),
            }
            out["cpu"] = {}
            for name, meter in meters.items():
                out["cpu"][name] = {
                    "ticks_us_per_call": meter.ticks * 1e6 / CLK_TCK / args.calls,
                    "sys_share": meter.sys_ticks / meter.ticks if meter.ticks else None,
                    "schedstat_us_per_call": None if meter.ns is None else meter.ns / 1e3 / args.calls,
                }
            return out

        # 3. sequential tools/call echo, then ping
        log(args, f"sequential: {args.calls} tools/call echo per mode ...")
        result["echo"] = summarize(*sequential(echo_line, check_echo))
        log(args, f"sequential: {args.calls} ping per mode ...")
        result["ping"] = summarize(*sequential(ping_line, None))

        # 4. concurrent bursts (one warm-up burst each, then --runs alternating)
        log(args, f"concurrent: bursts of {args.concurrency} ...")
        for conn in sessions.values():
            burst(conn, args.concurrency, args.timeout * 4)
        bursts: dict[str, list[float]] = {m: [] for m in modes}
        burst_cpu = CpuMeter(proxy_pid)
        for i in range(max(1, args.runs)):
            for mode in modes if i % 2 == 0 else modes[::-1]:
                if mode == "proxied":
                    burst_cpu.start()
                bursts[mode].append(burst(sessions[mode], args.concurrency, args.timeout * 4))
                if mode == "proxied":
                    burst_cpu.stop()
        burst_calls = args.concurrency * max(1, args.runs)
        med = {m: statistics.median(v) * 1e3 for m, v in bursts.items()}
        result["concurrent"] = {
            **{m: {"median_ms": med[m], "runs_ms": [x * 1e3 for x in bursts[m]]} for m in modes},
            "ratio": med["proxied"] / med["direct"],
            "proxy_cpu_us_per_call": None if burst_cpu.ns is None else burst_cpu.ns / 1e3 / burst_calls,
            "added_ms": med["proxied"] - med["direct"],
        }

        # 5. big result (one validated warm-up each, then --runs alternating)
        log(args, f"big result: {args.big_size} bytes ...")
        rss_before_big = proc_status_kb(proxy_pid, "VmHWM")
        for conn in sessions.values():
            big_call(conn, args.big_size, args.timeout * 4, validate=True)
        bigs: dict[str, list[float]] = {m: [] for m in modes}
        for i in range(max(1, args.runs)):
            for mode in modes if i % 2 == 0 else modes[::-1]:
                bigs[mode].append(big_call(sessions[mode], args.big_size, args.timeout * 4, validate=False))
        med = {m: statistics.median(v) * 1e3 for m, v in bigs.items()}
        result["big"] = {
            **{m: {"median_ms": med[m], "runs_ms": [x * 1e3 for x in bigs[m]]} for m in modes},
            "added_ms": med["proxied"] - med["direct"],
            "size": args.big_size,
        }

        # 6. memory
        result["memory"] = {
            "proxy_vmhwm_mb_before_big": (rss_before_big or 0) / 1024,
            "proxy_vmhwm_mb": (proc_status_kb(proxy_pid, "VmHWM") or 0) / 1024,
            "proxy_vmrss_mb": (proc_status_kb(proxy_pid, "VmRSS") or 0) / 1024,
            "direct_server_vmhwm_mb": (proc_status_kb(server_pids["direct"], "VmHWM") or 0) / 1024,
            "proxied_server_vmhwm_mb": (proc_status_kb(proxied_server_pid, "VmHWM") or 0) / 1024
            if proxied_server_pid
            else None,
        }

        # 7. a hostile server's sampling flood against the loopback fake LLM
        if args.flood:
            log(args, f"sampling flood: {args.flood} requests, pinging meanwhile")
            result["flood"] = sampling_flood(args, proxy_prefix, env, workdir, conns)

        # 8. graceful end (a profiled proxy writes its profile on a clean exit)
        for mode in modes:
            code = sessions[mode].close(grace=args.timeout)
            conns.remove(sessions[mode])
            result.setdefault("exit_codes", {})[mode] = code
    finally:
        for conn in list(conns):
            with contextlib.suppress(Exception):
                conn.close(grace=2.0)
    result["machine"]["loadavg_1m_end"] = os.getloadavg()[0]
    if not args.keep_logs:  # on failure (an exception above) the logs stay for the error message
        shutil.rmtree(workdir, ignore_errors=True)
        result["stderr_logs"] = None
    result["verdict"] = verdict(result)
    return result


def verdict(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cpu = r["echo"]["cpu"]["proxy"]
    cpu_us = cpu["schedstat_us_per_call"] if cpu["schedstat_us_per_call"] is not None else cpu["ticks_us_per_call"]
    values = {
        "spawn_added_ms": (r["spawn_ms"]["proxied"]["median"] - r["spawn_ms"]["direct"]["median"])
        if r.get("spawn_ms")
        else None,
        "echo_p50_added_ms": r["echo"]["added_p50_ms"],
        "concurrent_ratio": r["concurrent"]["ratio"],
        "big_added_ms": r["big"]["added_ms"],
        "proxy_cpu_us_per_call": cpu_us,
        "proxy_peak_rss_mb": r["memory"]["proxy_vmhwm_mb"],
    }
    return {
        k: {"value": v, "target": TARGETS[k], "pass": None if v is None else v <= TARGETS[k]} for k, v in values.items()
    }


def mark(ok: bool | None) -> str:
    return "n/a " if ok is None else ("PASS" if ok else "FAIL")


def render(r: dict[str, Any]) -> str:
    v = r["verdict"]
    rows: list[tuple[str, str, str, str, str, str]] = []

    def row(name: str, direct: str, proxied: str, diff: str, target: str = "", ok: str = "") -> None:
        rows.append((name, direct, proxied, diff, target, ok))

    if r.get("spawn_ms"):
        s = r["spawn_ms"]
        row(
            f"spawn-to-initialize (median of {len(s['direct']['runs'])})",
            f"{s['direct']['median']:.1f} ms",
            f"{s['proxied']['median']:.1f} ms",
            f"{v['spawn_added_ms']['value']:+.1f} ms (paired {s['paired_added_median']:+.1f})",
            "<= +150 ms",
            mark(v["spawn_added_ms"]["pass"]),
        )
    for key, label in (("echo", "tools/call echo"), ("ping", "ping")):
        e = r[key]
        for p in ("p50", "p99"):
            target, ok = ("", "")
            if key == "echo" and p == "p50":
                target, ok = "<= +0.100 ms", mark(v["echo_p50_added_ms"]["pass"])
            row(
                f"{label} {p} (n={e['direct']['n']})",
                f"{e['direct'][p + '_ms']:.3f} ms",
                f"{e['proxied'][p + '_ms']:.3f} ms",
                f"{e['added_' + p + '_ms']:+.3f} ms",
                target,
                ok,
            )
    c = r["concurrent"]
    row(
        f"{r['settings']['concurrency']} concurrent calls (median)",
        f"{c['direct']['median_ms']:.1f} ms",
        f"{c['proxied']['median_ms']:.1f} ms",
        f"x{c['ratio']:.3f} ({c['added_ms']:+.1f} ms)",
        "<= x1.10",
        mark(v["concurrent_ratio"]["pass"]),
    )
    if c.get("proxy_cpu_us_per_call") is not None:
        row("  proxy CPU per call in the bursts", "", f"proxy {c['proxy_cpu_us_per_call']:.1f} us", "", "", "")
    b = r["big"]
    row(
        f"{b['size'] / 1e6:g} MB tool result (median)",
        f"{b['direct']['median_ms']:.1f} ms",
        f"{b['proxied']['median_ms']:.1f} ms",
        f"{b['added_ms']:+.1f} ms",
        "<= +15 ms",
        mark(v["big_added_ms"]["pass"]),
    )
    for key, label in (("echo", "echo"), ("ping", "ping")):
        cpu = r[key]["cpu"]
        proxy = cpu["proxy"]
        sched = proxy["schedstat_us_per_call"]
        direct_srv = cpu.get("direct_server", {}).get("schedstat_us_per_call")
        proxied_srv = cpu.get("proxied_server", {}).get("schedstat_us_per_call")
        srv = f"server {direct_srv:.0f} us" if direct_srv is not None else ""
        psrv = f"server {proxied_srv:.0f} us" if proxied_srv is not None else ""
        sys_share = f", {proxy['sys_share']:.0%} sys" if proxy["sys_share"] is not None else ""
        target, ok = ("", "")
        if key == "echo":
            target, ok = "<= 150 us", mark(v["proxy_cpu_us_per_call"]["pass"])
        row(
            f"proxy CPU per {label} call (schedstat; ticks)",
            srv,
            f"{psrv}; proxy {sched:.1f} us" if sched is not None else psrv,
            (f"{sched:.1f} us; " if sched is not None else "")
            + f"{proxy['ticks_us_per_call']:.0f} us (ticks{sys_share})",
            target,
            ok,
        )
    f = r.get("flood")
    if f:
        row(
            f"ping while {f['requests']} sampling requests run",
            "",
            f"p50 {f['ping_p50_ms']:.2f} ms, p99 {f['ping_p99_ms']:.2f} ms",
            f"proxy CPU {f['proxy_cpu_s']:.2f} s; {f['ok']} ok, {f['refused']} refused; "
            f"LLM max open {f['llm_max_open']}",
        )
    m = r["memory"]
    row(
        "peak RSS (VmHWM) after big results",
        f"server {m['direct_server_vmhwm_mb']:.1f} MB",
        f"proxy {m['proxy_vmhwm_mb']:.1f} MB",
        f"before big: {m['proxy_vmhwm_mb_before_big']:.1f} MB",
        "<= 80 MB",
        mark(v["proxy_peak_rss_mb"]["pass"]),
    )

    header = ("measurement", "DIRECT", "PROXIED", "added / ratio", "target", "")
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(6)]
    sep = "  "
    lines = [
        sep.join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip(),
        sep.join("-" * w for w in widths),
    ]
    lines += [sep.join(c.ljust(w) for c, w in zip(x, widths, strict=True)).rstrip() for x in rows]
    failed = [k for k, x in v.items() if x["pass"] is False]
    lines.append("")
    for key, label in (("echo", "echo"), ("ping", "ping")):
        blk = r[key]["added_p50_blocks_ms"]
        lines.append(
            f"{label}: added p50 per block of {CHUNK} calls (D/P alternating): "
            f"median {blk['median']:+.3f} ms, "
            f"IQR [{blk['q25']:+.3f}, {blk['q75']:+.3f}] ms over {blk['blocks']} blocks"
        )
    machine = r["machine"]
    busy = machine["loadavg_1m_start"] > 0.5 * (machine["cpus"] or 1)  # the end figure includes this bench
    lines.append(
        f"load average (1 min) at start/end: {machine['loadavg_1m_start']:.2f} / "
        f"{machine['loadavg_1m_end']:.2f} on {machine['cpus']} CPUs"
        + ("  <- other work was running: expect noisy figures" if busy else "")
    )
    lines.append("overall: " + ("PASS" if not failed else "FAIL (" + ", ".join(failed) + ")"))
    return "\n".join(lines)


def compile_bytecode(args: argparse.Namespace) -> None:
    """Write the proxy's bytecode first, as `pip install` does: from a checkout run with
    PYTHONDONTWRITEBYTECODE=1 every proxy start would compile its modules from source (tens of ms
    that no installed copy pays, while the server's installed packages have their bytecode)."""
    subprocess.run(
        [args.python, "-m", "compileall", "-q", str(ROOT / "mcp_sampling_proxy")],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""},
        check=False,
        stdout=subprocess.DEVNULL,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=5,
        help="fresh spawns per mode for spawn-to-initialize; also repeats of the concurrent "
        "burst and the big result (default 5; 0 skips the spawn measurement)",
    )
    parser.add_argument("--calls", type=int, default=500, help="sequential round trips per mode (default 500)")
    parser.add_argument("--warmup", type=int, default=100, help="warm-up round trips per mode (default 100)")
    parser.add_argument("--concurrency", type=int, default=500, help="requests per concurrent burst (default 500)")
    parser.add_argument("--big-size", type=int, default=5_000_000, help="bytes of the big tool result (default 5e6)")
    parser.add_argument(
        "--flood",
        type=int,
        default=1000,
        help="sampling requests a hostile server sends at once, while the host pings (default 1000; 0 skips)",
    )
    parser.add_argument(
        "--proxy-cmd",
        help="replace 'PYTHON -m mcp_sampling_proxy --no-terminal' (shell-split; "
        "'-- SERVER...' is appended). Its first process must be the proxy.",
    )
    parser.add_argument(
        "--server-cmd",
        help="a different MCP server for both modes (default: PYTHON "
        f"{SERVER_SCRIPT}); e.g. 'python bench/fast_server.py' for a "
        "low-noise view of the relay alone",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for server and proxy (default: this one)")
    parser.add_argument("--timeout", type=float, default=30.0, help="per-operation timeout in seconds (default 30)")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of the table")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--keep-logs",
        action="store_true",
        help="keep the processes' stderr logs (a temporary directory; kept anyway on failure)",
    )
    args = parser.parse_args(argv)
    if args.calls < 1 or args.concurrency < 1 or args.runs < 0:
        parser.error("--calls and --concurrency must be >= 1, --runs >= 0")

    bench_cmd = shlex.join([sys.executable, *(sys.argv if argv is None else ["bench/bench.py", *argv])])
    server_cmd = args.server_cmd or shlex.join([args.python, SERVER_SCRIPT])
    proxy_prefix = args.proxy_cmd or shlex.join([args.python, "-m", "mcp_sampling_proxy", "--no-terminal"])
    if not args.json:
        print(f"bench:   {bench_cmd}")
        print(f"cwd:     {ROOT}")
        print(f"DIRECT:  {server_cmd}")
        print(f"PROXIED: {proxy_prefix} -- {server_cmd}")
        print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}", flush=True)
    try:
        result = run(args)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 2
    return finish(result, render, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
