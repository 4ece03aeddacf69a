#!/usr/bin/env python3
"""Speed of the proxy as ratios against a direct connection and a bare byte relay, in one run (issue #14).

The host is the `mcp` SDK's Client (what real hosts are built on), over stdio, in three modes:

  direct      PYTHON tests/fixtures/kitchen_sink_server.py
  byte relay  PYTHON bench/null_relay.py --mode select -- SERVER   (the floor for one extra process hop)
  proxy       PYTHON -m mcp_sampling_proxy --no-terminal -- SERVER

Rows (targets from the issue; see bench/README.md):
  spawn to initialize          median of --runs fresh processes per mode
  sequential echo p50          --calls round trips on warm sessions, modes alternating in blocks
  echo p99, first calls        the --first-calls round trips right after initialize of each fresh
                               process (start-up work shows here), median over the runs, as a ratio
  concurrent calls             --concurrency tools/call at once, wall time, median of --runs bursts
  RSS idle / peak              VmRSS after initialize + --settle; VmHWM after a --big-size result
  sampling round trip          a server fires --sampling requests at a loopback LLM through the proxy
                               (audit fsync on) vs the same calls made with httpx: added ms per request
  sampling burst               --sampling-burst requests at once through the proxy vs as many httpx
                               calls at once: wall time ratio, paired median of --bursts rounds

Usage: .venv/bin/python bench/sdk_bench.py [--runs 5] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import anyio
import procstat
from report import BenchError, finish
from scratch_dirs import scratch_dirs

ROOT = Path(__file__).resolve().parent.parent
SERVER_SCRIPT = str(ROOT / "tests" / "fixtures" / "kitchen_sink_server.py")
SAMPLING_SERVER = str(ROOT / "bench" / "sampling_server.py")
NULL_RELAY = str(ROOT / "bench" / "null_relay.py")
LLM_SERVER = str(ROOT / "tests" / "fakes" / "llm_server.py")
MODES = ("direct", "relay", "proxy")
LABELS = {"direct": "direct", "relay": "byte relay", "proxy": "proxy"}
CHUNK = 50  # sequential calls per alternation block
SAMPLING_BLOCK = 20  # sampling requests per alternation block
LLM_MODEL = "gpt-bench"
SAMPLING_PARAMS = {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}], "maxTokens": 16}
# The Chat Completions body the proxy's OpenAI adapter builds from SAMPLING_PARAMS (text-only content
# becomes a plain string): the direct calls send the same shape.
DIRECT_BODY = {"model": LLM_MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}

# Targets on the 2-core machine (issue #14, "Speed"; the spawn over a byte relay's: the core's, #33).
TARGETS: dict[str, float] = {
    "spawn_added_ms": 50.0,
    "spawn_over_relay_ms": 30.0,
    "echo_p50_added_ms": 0.06,
    "first_p99_ratio": 1.3,
    "concurrent_ratio": 1.02,
    "rss_idle_mb": 28.0,
    "rss_peak_mb": 45.0,
    "sampling_added_ms": 0.3,
    "sampling_burst_ratio": 1.10,
}

T = TypeVar("T")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    """Percentile, linear interpolation between closest ranks."""
    data = sorted(values)
    if not data:
        return float("nan")
    k = (len(data) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def status_mb(pid: int, key: str) -> float | None:
    """A /proc/<pid>/status figure (VmRSS, VmHWM) in MB; readable even for a non-dumpable process."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) task-group exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def rotated(items: tuple[str, ...], i: int) -> tuple[str, ...]:
    """The modes in a different order each round, so none always goes first (or last)."""
    k = i % len(items)
    return items[k:] + items[:k]


def bench_env(workdir: Path) -> dict[str, str]:
    """What every mode's process gets: no LLM keys, no user config or policy, no terminal prompts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "MCP_SAMPLING_PROXY_"))}
    env["MCP_SAMPLING_PROXY_NO_TERMINAL"] = "1"
    env.update(scratch_dirs(workdir))  # empty config: never the user's default policy
    return env


# What any proxy built on the required stack holds before a line of its own: the interpreter, anyio
# running its event loop, structlog logging a line, PyYAML imported (the policy's parser).
STACK_FLOOR_SCRIPT = """
import json, sys
import anyio, structlog, yaml
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
structlog.get_logger().info("floor")
async def measure():
    await anyio.sleep(0.05)
    print(json.dumps(rss()))
anyio.run(measure, backend_options={"use_uvloop": sys.argv[1] == "uvloop"})
"""


def stack_floor_mb(python: str) -> dict[str, float | None]:
    """Idle RSS of the required stack alone, on asyncio's loop and on uvloop (the proxy's)."""
    floor: dict[str, float | None] = {}
    for loop in ("asyncio", "uvloop"):
        try:
            out = subprocess.run(
                [python, "-c", STACK_FLOOR_SCRIPT, loop], capture_output=True, text=True, timeout=60, check=True
            ).stdout
            floor[loop] = float(json.loads(out))
        except (OSError, subprocess.SubprocessError, ValueError):
            floor[loop] = None
    return floor


def compile_bytecode(python: str) -> None:
    """Write the proxy's bytecode first, as `pip install` does (PYTHONDONTWRITEBYTECODE=1 would make
    every start from a checkout compile from source, which no installed copy pays)."""
    subprocess.run(
        [python, "-m", "compileall", "-q", str(ROOT / "mcp_sampling_proxy")],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""},
        check=False,
        stdout=subprocess.DEVNULL,
    )


# --------------------------------------------------------------------------------------------
# SDK sessions
# --------------------------------------------------------------------------------------------


@dataclass
class Session:
    """One SDK Client connected to one mode's process."""

    mode: str
    client: Any
    pid: int | None  # the process the Client spawned (the proxy or relay itself, or the server)
    spawn_s: float  # Popen to initialize response
    stack: AsyncExitStack
    errlog: Path

    async def close(self) -> None:
        await self.stack.aclose()


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path):
        self.args = args
        self.workdir = workdir
        self.env = bench_env(workdir)
        server = shlex.split(args.server_cmd) if args.server_cmd else [args.python, SERVER_SCRIPT]
        proxy = (
            shlex.split(args.proxy_cmd)
            if args.proxy_cmd
            else [args.python, "-m", "mcp_sampling_proxy", "--no-terminal"]
        )
        self.proxy_prefix = proxy
        self.commands = {
            "direct": server,
            "relay": [args.python, NULL_RELAY, "--mode", "select", "--", *server],
            "proxy": [*proxy, "--", *server],
        }
        self.spawned: set[int] = set()
        self._errlogs: list[TextIO] = []

    def log(self, *parts: Any) -> None:
        if not self.args.quiet:
            print(*parts, file=sys.stderr, flush=True)

    def fail(self, session: Session | None, what: str) -> BenchError:
        tail = ""
        if session is not None:
            with contextlib.suppress(OSError):
                tail = session.errlog.read_text(errors="replace")[-1500:]
            return BenchError(f"{session.mode}: {what}; its stderr ({session.errlog}) ends:\n{tail}")
        return BenchError(what)

    async def timed(self, session: Session | None, what: str, awaitable: Awaitable[T], timeout: float) -> T:
        # a cancel scope in this task (not asyncio.wait_for's new task): the SDK's Client must be
        # entered and left in the same task
        try:
            with anyio.fail_after(timeout):
                return await awaitable
        except TimeoutError:
            raise self.fail(session, f"{what} timed out after {timeout:g} s") from None

    async def open(self, mode: str, command: list[str], tag: str) -> Session:
        """Spawn `command` under an SDK Client and complete the initialize handshake."""
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        errlog = self.workdir / f"{tag}.stderr.log"
        log_file = open(errlog, "a", encoding="utf-8")  # noqa: SIM115 - closed with the stack
        params = StdioServerParameters(command=command[0], args=command[1:], env=self.env, cwd=str(ROOT))
        stack = AsyncExitStack()
        stack.callback(log_file.close)
        before = procstat.children(os.getpid())
        t0 = time.perf_counter()
        # No cancel scope around the entry (the Client's own task group must outlive it): a watchdog
        # kills a process that has not answered initialize in time, which fails the handshake.
        timed_out: list[bool] = []

        def watchdog() -> None:
            timed_out.append(True)
            for pid in procstat.children(os.getpid()) - before:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)

        timer = asyncio.get_running_loop().call_later(self.args.timeout * 2, watchdog)
        try:
            client = await stack.enter_async_context(Client(stdio_client(params, errlog=log_file), mode="legacy"))
        except Exception as exc:
            await stack.aclose()
            why = "no initialize response in time" if timed_out else f"initialize failed: {leaf(exc)!r}"
            raise BenchError(
                f"{mode} ({shlex.join(command)}): {why}; stderr ({errlog}) ends:\n"
                f"{errlog.read_text(errors='replace')[-1500:]}"
            ) from None
        finally:
            timer.cancel()
        spawn_s = time.perf_counter() - t0
        new = procstat.children(os.getpid()) - before
        self.spawned |= new
        return Session(mode, client, min(new) if len(new) == 1 else None, spawn_s, stack, errlog)

    async def echo(self, session: Session, n: int, out: list[float], check: bool = False) -> None:
        perf = time.perf_counter
        for i in range(n):
            t0 = perf()
            result = await self.timed(
                session, "tools/call echo", session.client.call_tool("echo", {"text": "hello"}), self.args.timeout
            )
            out.append(perf() - t0)
            if check and i == 0 and (result.is_error or getattr(result.content[0], "text", None) != "hello"):
                raise self.fail(session, f"unexpected echo result: {result!r}"[:500])

    def server_of(self, pid: int) -> int | None:
        """The relay's or proxy's server process. The proxy has another child, its guard: a fork of
        the proxy, so its command line names the server too; it is told apart by its process name."""
        script = self.commands["direct"][-1].encode()
        for child in procstat.children(pid):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{child}/comm").read_text().strip() == "mcp-proxy-guard":
                    continue
                if script in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0"):
                    return child
        return None

    async def burst(self, session: Session, n: int) -> float:
        calls = [session.client.call_tool("echo", {"text": f"c{i}"}) for i in range(n)]
        t0 = time.perf_counter()
        results = await self.timed(session, f"{n} concurrent calls", asyncio.gather(*calls), self.args.timeout * 4)
        elapsed = time.perf_counter() - t0
        bad = [r for r in results if r.is_error]
        if bad:
            raise self.fail(session, f"{len(bad)} of {n} concurrent calls failed: {bad[0]!r}"[:500])
        return elapsed

    # -- phases ------------------------------------------------------------------------------
    async def spawns(self) -> dict[str, Any]:
        """Fresh processes: spawn to initialize, then the first calls right after it."""
        args = self.args
        spawn: dict[str, list[float]] = {m: [] for m in MODES}
        first_p99: dict[str, list[float]] = {m: [] for m in MODES}
        first_p50: dict[str, list[float]] = {m: [] for m in MODES}
        first_max: dict[str, list[float]] = {m: [] for m in MODES}
        for i in range(args.runs):
            for mode in rotated(MODES, i):
                session = await self.open(mode, self.commands[mode], f"spawn-{mode}")
                try:
                    lat: list[float] = []
                    await self.echo(session, args.first_calls, lat, check=True)
                finally:
                    await session.close()
                spawn[mode].append(session.spawn_s * 1e3)
                first_p99[mode].append(pct(lat, 99) * 1e3)
                first_p50[mode].append(pct(lat, 50) * 1e3)
                first_max[mode].append(max(lat) * 1e3)
            self.log(
                f"spawn run {i + 1}/{args.runs}: "
                + ", ".join(
                    f"{m} {spawn[m][-1]:.0f} ms (first-{args.first_calls} p99 {first_p99[m][-1]:.2f} ms)" for m in MODES
                )
            )
        out: dict[str, Any] = {"spawn": {}, "first": {}}
        for m in MODES:
            out["spawn"][m] = {"median_ms": statistics.median(spawn[m]), "runs_ms": spawn[m]}
            out["first"][m] = {
                "p99_ms": statistics.median(first_p99[m]),
                "runs_p99_ms": first_p99[m],
                "runs_p50_ms": first_p50[m],
                "runs_max_ms": first_max[m],
            }
        for m in ("relay", "proxy"):
            out["spawn"][m]["added_ms"] = out["spawn"][m]["median_ms"] - out["spawn"]["direct"]["median_ms"]
            # each round's spawns are adjacent in time: the median of their differences is steadier
            out["spawn"][m]["paired_added_ms"] = statistics.median(
                x - d for x, d in zip(spawn[m], spawn["direct"], strict=True)
            )
            out["first"][m]["ratio"] = out["first"][m]["p99_ms"] / out["first"]["direct"]["p99_ms"]
        proxy = out["spawn"]["proxy"]
        proxy["over_relay_ms"] = proxy["median_ms"] - out["spawn"]["relay"]["median_ms"]
        proxy["paired_over_relay_ms"] = statistics.median(
            x - r for x, r in zip(spawn["proxy"], spawn["relay"], strict=True)
        )
        return out

    async def steady(self) -> dict[str, Any]:
        """Long-lived sessions: idle RSS, sequential p50, concurrent bursts, peak RSS after a big result."""
        args = self.args
        sessions: dict[str, Session] = {}
        try:
            for mode in MODES:
                sessions[mode] = await self.open(mode, self.commands[mode], f"steady-{mode}")
            pids = {m: s.pid for m, s in sessions.items()}
            hop: dict[str, int] = {}  # the relay's and the proxy's own pids, for /proc
            for m in ("relay", "proxy"):
                pid = pids[m]
                if pid is None:
                    raise self.fail(sessions[m], "could not tell which child process is the relay/proxy")
                hop[m] = pid
            await asyncio.sleep(args.settle)
            rss_idle = {m: status_mb(pid, "VmRSS") for m, pid in hop.items()}
            self.log(
                f"idle RSS after {args.settle:g} s: " + ", ".join(f"{m} {x or 0:.1f} MB" for m, x in rss_idle.items())
            )

            for s in sessions.values():
                await self.echo(s, args.warmup, [], check=True)
            self.log(f"sequential: {args.calls} echo calls per mode, blocks of {CHUNK} ...")
            lat: dict[str, list[float]] = {m: [] for m in MODES}
            done, block = 0, 0
            while done < args.calls:
                n = min(CHUNK, args.calls - done)
                for mode in rotated(MODES, block):
                    await self.echo(sessions[mode], n, lat[mode])
                done += n
                block += 1
            echo: dict[str, Any] = {
                m: {"p50_ms": pct(v, 50) * 1e3, "p99_ms": pct(v, 99) * 1e3, "n": len(v)} for m, v in lat.items()
            }
            for m in ("relay", "proxy"):
                echo[m]["added_p50_ms"] = echo[m]["p50_ms"] - echo["direct"]["p50_ms"]
                diffs = [
                    pct(lat[m][i : i + CHUNK], 50) - pct(lat["direct"][i : i + CHUNK], 50)
                    for i in range(0, len(lat["direct"]), CHUNK)
                ]
                echo[m]["blocks_added_p50_ms"] = {
                    "median": pct(diffs, 50) * 1e3,
                    "q25": pct(diffs, 25) * 1e3,
                    "q75": pct(diffs, 75) * 1e3,
                    "blocks": len(diffs),
                }

            self.log(f"concurrent: bursts of {args.concurrency} ...")
            for s in sessions.values():
                await self.burst(s, args.concurrency)  # warm-up
            bursts: dict[str, list[float]] = {m: [] for m in MODES}
            # CPU of each process in the bursts: the hop's share of the work, steadier than wall time
            servers = {"direct": pids["direct"], **{m: self.server_of(hop[m]) for m in hop}}
            watched = {f"{m} server": pid for m, pid in servers.items() if pid is not None}
            watched.update({m: pid for m, pid in hop.items()})
            cpu_ns = dict.fromkeys(watched, 0)
            for i in range(args.bursts):
                for mode in rotated(MODES, i):
                    mine = {k: pid for k, pid in watched.items() if k.split()[0] == mode}
                    before = {k: procstat.cpu_ns(pid) for k, pid in mine.items()}
                    bursts[mode].append(await self.burst(sessions[mode], args.concurrency) * 1e3)
                    for k, pid in mine.items():
                        cpu_ns[k] += procstat.cpu_ns(pid) - before[k]
            concurrent: dict[str, Any] = {
                m: {"median_ms": statistics.median(v), "runs_ms": v} for m, v in bursts.items()
            }
            calls = args.bursts * args.concurrency
            concurrent["cpu_us_per_call"] = {k: ns / 1e3 / calls for k, ns in cpu_ns.items()}
            for m in ("relay", "proxy"):
                # Each round's bursts run back to back, so a round's ratio cancels the machine's drift
                # (here direct bursts alone ranged 277-483 ms in one afternoon): the median of the
                # rounds' ratios is the figure; the ratio of the medians is shown beside it.
                paired = [x / d for x, d in zip(bursts[m], bursts["direct"], strict=True)]
                concurrent[m]["ratio"] = statistics.median(paired)
                concurrent[m]["ratio_iqr"] = [pct(paired, 25), pct(paired, 75)]
                concurrent[m]["ratio_of_medians"] = concurrent[m]["median_ms"] / concurrent["direct"]["median_ms"]

            self.log(f"big result: {args.big_size} bytes through relay and proxy ...")
            for m in ("relay", "proxy"):
                result = await self.timed(
                    sessions[m],
                    "tools/call big",
                    sessions[m].client.call_tool("big", {"size": args.big_size}),
                    args.timeout * 4,
                )
                got = len(getattr(result.content[0], "text", "")) if result.content else 0
                if got != args.big_size:
                    raise self.fail(sessions[m], f"big({args.big_size}) returned {got} characters")
            rss_peak = {m: status_mb(pid, "VmHWM") for m, pid in hop.items()}
            memory: dict[str, Any] = {m: {"idle_mb": rss_idle[m], "peak_mb": rss_peak[m]} for m in ("relay", "proxy")}
            memory["stack_floor_mb"] = stack_floor_mb(args.python)
            return {"echo": echo, "concurrent": concurrent, "memory": memory, "pids": pids}
        finally:
            for s in reversed(sessions.values()):  # last opened, first closed: their task groups nest
                with contextlib.suppress(Exception):
                    await s.close()

    async def sampling(self) -> dict[str, Any]:
        """A server's sequential sampling requests through the proxy (audit fsync on) vs the same
        calls made directly with httpx (a host's usual client, the figure's reference) and with aiohttp
        (the proxy's own client: what is left is the proxy's own work), to the same loopback LLM
        process, in rotating blocks."""
        import aiohttp
        import httpx

        args = self.args
        llm_log = open(self.workdir / "llm.stderr.log", "wb")  # noqa: SIM115
        llm = subprocess.Popen(
            [args.python, LLM_SERVER, "--kind", "openai", "--port", "0", "--model", LLM_MODEL],
            stdout=subprocess.PIPE,
            stderr=llm_log,
            start_new_session=True,
            text=True,
        )
        session: Session | None = None
        try:
            assert llm.stdout is not None
            base_url = await self.timed(
                None, "the loopback LLM's start", asyncio.to_thread(llm.stdout.readline), args.timeout
            )
            base_url = base_url.strip()
            if not base_url.startswith("http"):
                raise BenchError(f"the loopback LLM did not start: {base_url!r}")
            audit = self.workdir / "audit" / "audit.jsonl"
            policy = self.workdir / "sampling-policy.yaml"
            policy.write_text(
                "llm:\n  providers:\n    fake:\n      type: openai\n"
                f"      base_url: {base_url}\n      models: [{LLM_MODEL}]\n"
                "rules:\n  - name: allow-all\n    action: allow\n"
                # a burst is one tool call: over the default cap of 25 sampling requests per call
                f"sampling:\n  max_per_call: {max(25, args.sampling_burst)}\n"
                f"audit:\n  path: {json.dumps(str(audit))}\n  fsync: true\n  content: {args.audit_content}\n",
                encoding="utf-8",
            )
            command = [*self.proxy_prefix, "--policy", str(policy), "--", args.python, SAMPLING_SERVER]
            session = await self.open("proxy", command, "sampling-proxy")

            cpu_ns = {"proxy": 0, "direct": 0, "aiohttp": 0}  # the proxy's threads; this one, for direct calls

            async def through_proxy(count: int) -> list[float]:
                assert session is not None and session.pid is not None
                before = procstat.cpu_ns(session.pid)
                result = await self.timed(
                    session,
                    "tools/call sample",
                    session.client.call_tool("sample", {"count": count, "params": SAMPLING_PARAMS}),
                    args.timeout * 4,
                )
                cpu_ns["proxy"] += procstat.cpu_ns(session.pid) - before
                summary = json.loads(getattr(result.content[0], "text", "{}"))
                if result.is_error or summary.get("errors"):
                    raise self.fail(session, f"sampling through the proxy failed: {summary}"[:800])
                return [float(x) for x in summary["ms"]]

            first = (await through_proxy(1))[0]  # the first sampling request after start (start-up work)
            async with (
                httpx.AsyncClient(
                    base_url=base_url, headers={"content-type": "application/json"}, timeout=args.timeout
                ) as http,
                aiohttp.ClientSession(headers={"content-type": "application/json"}) as same_client,
            ):

                async def direct(count: int) -> list[float]:
                    out: list[float] = []
                    before = time.thread_time_ns()
                    for _ in range(count):
                        t0 = time.perf_counter()
                        response = await http.post("/chat/completions", json=DIRECT_BODY)
                        response.raise_for_status()
                        response.json()
                        out.append((time.perf_counter() - t0) * 1e3)
                    cpu_ns["direct"] += time.thread_time_ns() - before
                    return out

                async def direct_aiohttp(count: int) -> list[float]:
                    out: list[float] = []
                    before = time.thread_time_ns()
                    url, body = f"{base_url}/chat/completions", json.dumps(DIRECT_BODY).encode()
                    for _ in range(count):
                        t0 = time.perf_counter()
                        async with same_client.post(url, data=body) as response:
                            response.raise_for_status()
                            json.loads(await response.read())
                        out.append((time.perf_counter() - t0) * 1e3)
                    cpu_ns["aiohttp"] += time.thread_time_ns() - before
                    return out

                warm = min(20, max(2, args.sampling // 10))
                await direct(warm)
                await direct_aiohttp(warm)
                await through_proxy(warm)
                cpu_ns.update(proxy=0, direct=0, aiohttp=0)
                times: dict[str, list[float]] = {"direct": [], "aiohttp": [], "proxy": []}
                runners: dict[str, Callable[[int], Awaitable[list[float]]]] = {
                    "direct": direct,
                    "aiohttp": direct_aiohttp,
                    "proxy": through_proxy,
                }
                done, block = 0, 0
                while done < args.sampling:
                    n = min(SAMPLING_BLOCK, args.sampling - done)
                    for mode in rotated(("direct", "aiohttp", "proxy"), block):
                        times[mode] += await runners[mode](n)
                    done += n
                    block += 1
                burst = await self.sampling_bursts(session, http) if args.sampling_burst else None
            await session.close()
            session = None
            records = audit.read_text(encoding="utf-8").count("\n") if audit.exists() else 0
            expected = 1 + warm + args.sampling
            if records < expected:
                raise BenchError(f"the audit log has {records} records for {expected} sampling requests ({audit})")
            med = {m: statistics.median(v) for m, v in times.items()}
            # Each block of the two modes runs back to back: the median of the blocks' differences
            # cancels the machine's drift between blocks, as the concurrent row's rounds do.
            blocks, over_same_client = (
                [
                    statistics.median(times["proxy"][i : i + SAMPLING_BLOCK])
                    - statistics.median(times[reference][i : i + SAMPLING_BLOCK])
                    for i in range(0, len(times[reference]), SAMPLING_BLOCK)
                ]
                for reference in ("direct", "aiohttp")
            )
            return {
                "direct": {"median_ms": med["direct"], "p90_ms": pct(times["direct"], 90), "ms": times["direct"]},
                "proxy": {"median_ms": med["proxy"], "p90_ms": pct(times["proxy"], 90), "ms": times["proxy"]},
                "added_ms": statistics.median(blocks),
                "added_iqr_ms": [pct(blocks, 25), pct(blocks, 75)],
                "added_of_medians_ms": med["proxy"] - med["direct"],
                "aiohttp": {"median_ms": med["aiohttp"], "p90_ms": pct(times["aiohttp"], 90)},
                "added_over_same_client_ms": statistics.median(over_same_client),
                "n": args.sampling,
                "first_request_ms": first,
                "audit_records": records,
                "audit_fsync": True,
                "cpu_us_per_request": {m: cpu_ns[m] / args.sampling / 1e3 for m in cpu_ns},
                "burst": burst,
            }
        finally:
            if session is not None:
                with contextlib.suppress(Exception):
                    await session.close()
            llm.terminate()
            try:
                llm.wait(5)
            except subprocess.TimeoutExpired:
                llm.kill()
                llm.wait(5)
            llm_log.close()

    async def sampling_bursts(self, session: Session, http: Any) -> dict[str, Any]:
        """`--sampling-burst` requests at once, `--bursts` rounds: the server's burst through the proxy (its
        wall time from the first request sent to the last answer) against as many httpx calls at once to the
        same LLM, in alternating order; the figure is the median of the rounds' ratios."""
        args = self.args
        size = args.sampling_burst

        async def through_proxy() -> float:
            result = await self.timed(
                session,
                "tools/call burst",
                session.client.call_tool("burst", {"count": size, "params": SAMPLING_PARAMS}),
                args.timeout * 4,
            )
            summary = json.loads(getattr(result.content[0], "text", "{}"))
            if result.is_error or summary.get("errors"):
                raise self.fail(session, f"a sampling burst through the proxy failed: {summary}"[:800])
            return float(summary["ms"][0])

        async def direct() -> float:
            started = time.perf_counter()
            responses = await asyncio.gather(*(http.post("/chat/completions", json=DIRECT_BODY) for _ in range(size)))
            for response in responses:
                response.raise_for_status()
                response.json()
            return (time.perf_counter() - started) * 1e3

        runners: dict[str, Callable[[], Awaitable[float]]] = {"direct": direct, "proxy": through_proxy}
        await direct()  # warm: the connections of both are open before the first round
        await through_proxy()
        walls: dict[str, list[float]] = {"direct": [], "proxy": []}
        for i in range(args.bursts):
            for mode in rotated(("direct", "proxy"), i):
                walls[mode].append(await runners[mode]())
        ratios = [p / d for p, d in zip(walls["proxy"], walls["direct"], strict=True)]
        return {
            "size": size,
            "rounds": args.bursts,
            "direct_ms": walls["direct"],
            "proxy_ms": walls["proxy"],
            "direct_median_ms": statistics.median(walls["direct"]),
            "proxy_median_ms": statistics.median(walls["proxy"]),
            "ratio": statistics.median(ratios),
            "ratio_iqr": [pct(ratios, 25), pct(ratios, 75)],
        }

    def reap(self) -> None:
        """SIGKILL the process group of any child still ours (a failed run's leftovers)."""
        for pid in self.spawned:
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == os.getpid():
                    os.killpg(pid, signal.SIGKILL)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="mcp-proxy-sdkbench-"))
    (workdir / "config").mkdir()
    bench = Bench(args, workdir)
    compile_bytecode(args.python)
    result: dict[str, Any] = {
        "commands": {m: shlex.join(c) for m, c in bench.commands.items()},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_start": list(os.getloadavg())},
        "settings": {
            k: getattr(args, k)
            for k in (
                "runs",
                "first_calls",
                "calls",
                "warmup",
                "concurrency",
                "bursts",
                "big_size",
                "settle",
                "sampling",
            )
        },
        "targets": TARGETS,
    }
    started = time.perf_counter()
    ok = False
    try:
        if args.runs and "spawn" in args.only:
            result.update(await bench.spawns())
        if "steady" in args.only:
            result.update(await bench.steady())
        if args.sampling and "sampling" in args.only:
            bench.log(f"sampling: {args.sampling} requests per mode, proxy (audit fsync) vs httpx ...")
            result["sampling"] = await bench.sampling()
        ok = True
    finally:
        bench.reap()
        result["machine"]["loadavg_end"] = list(os.getloadavg())
        result["wall_s"] = time.perf_counter() - started
        if ok and not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
            result["stderr_logs"] = None
        else:
            result["stderr_logs"] = str(workdir)
    result["verdict"] = verdict(result)
    return result


def verdict(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    values: dict[str, float | None] = {
        "spawn_added_ms": r["spawn"]["proxy"]["added_ms"] if "spawn" in r else None,
        "spawn_over_relay_ms": r["spawn"]["proxy"]["over_relay_ms"] if "spawn" in r else None,
        "echo_p50_added_ms": r["echo"]["proxy"]["added_p50_ms"] if "echo" in r else None,
        "first_p99_ratio": r["first"]["proxy"]["ratio"] if "first" in r else None,
        "concurrent_ratio": r["concurrent"]["proxy"]["ratio"] if "concurrent" in r else None,
        "rss_idle_mb": r["memory"]["proxy"]["idle_mb"] if "memory" in r else None,
        "rss_peak_mb": r["memory"]["proxy"]["peak_mb"] if "memory" in r else None,
        "sampling_added_ms": r["sampling"]["added_ms"] if "sampling" in r else None,
        "sampling_burst_ratio": r["sampling"]["burst"]["ratio"] if r.get("sampling", {}).get("burst") else None,
    }
    return {
        k: {"value": v, "target": TARGETS[k], "pass": None if v is None else v <= TARGETS[k]} for k, v in values.items()
    }


# --------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------


def mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def render(r: dict[str, Any]) -> str:
    v = r["verdict"]
    s = r["settings"]
    rows: list[tuple[str, ...]] = []

    def ms(x: float, digits: int) -> str:
        return f"{x:.{digits}f} ms"

    if "spawn" in r:
        sp = r["spawn"]
        rows.append(
            (
                f"spawn to initialize (median of {s['runs']})",
                ms(sp["direct"]["median_ms"], 0),
                f"{ms(sp['relay']['median_ms'], 0)} ({sp['relay']['added_ms']:+.0f})",
                f"{ms(sp['proxy']['median_ms'], 0)} ({sp['proxy']['added_ms']:+.0f})",
                f"{sp['proxy']['added_ms']:+.1f} ms (paired {sp['proxy']['paired_added_ms']:+.1f})",
                "<= +50 ms",
                mark(v["spawn_added_ms"]["pass"]),
            )
        )
        rows.append(
            (
                "spawn to initialize, proxy over byte relay",
                "",
                "",
                f"{sp['proxy']['over_relay_ms']:+.0f} ms",
                f"{sp['proxy']['over_relay_ms']:+.1f} ms (paired {sp['proxy']['paired_over_relay_ms']:+.1f})",
                "<= +30 ms",
                mark(v["spawn_over_relay_ms"]["pass"]),
            )
        )
    e = r.get("echo")
    if e is not None:
        rows.append(
            (
                f"sequential echo p50 (n={e['direct']['n']})",
                ms(e["direct"]["p50_ms"], 3),
                f"{ms(e['relay']['p50_ms'], 3)} ({e['relay']['added_p50_ms']:+.3f})",
                f"{ms(e['proxy']['p50_ms'], 3)} ({e['proxy']['added_p50_ms']:+.3f})",
                f"{e['proxy']['added_p50_ms']:+.3f} ms",
                "<= +0.06 ms",
                mark(v["echo_p50_added_ms"]["pass"]),
            )
        )
    if "first" in r:
        f = r["first"]
        rows.append(
            (
                f"echo p99, first {s['first_calls']} calls after start (median of {s['runs']})",
                ms(f["direct"]["p99_ms"], 2),
                f"{ms(f['relay']['p99_ms'], 2)} (x{f['relay']['ratio']:.2f})",
                f"{ms(f['proxy']['p99_ms'], 2)} (x{f['proxy']['ratio']:.2f})",
                f"x{f['proxy']['ratio']:.2f} ({f['proxy']['p99_ms'] - f['direct']['p99_ms']:+.2f} ms)",
                "<= x1.3",
                mark(v["first_p99_ratio"]["pass"]),
            )
        )
    c = r.get("concurrent")
    if c is not None:
        rows.append(
            (
                f"{s['concurrency']} concurrent calls (paired median of {s['bursts']})",
                ms(c["direct"]["median_ms"], 0),
                f"{ms(c['relay']['median_ms'], 0)} (x{c['relay']['ratio']:.3f})",
                f"{ms(c['proxy']['median_ms'], 0)} (x{c['proxy']['ratio']:.3f})",
                f"x{c['proxy']['ratio']:.3f}",
                "<= x1.02",
                mark(v["concurrent_ratio"]["pass"]),
            )
        )
    mem = r.get("memory")

    def mb(m: str) -> str:
        assert mem is not None
        idle, peak = mem[m]["idle_mb"], mem[m]["peak_mb"]
        return f"{idle:.1f} / {peak:.1f} MB" if idle is not None and peak is not None else "?"

    if mem is not None:
        rss_ok = (
            None
            if v["rss_idle_mb"]["pass"] is None or v["rss_peak_mb"]["pass"] is None
            else (v["rss_idle_mb"]["pass"] and v["rss_peak_mb"]["pass"])
        )
        rows.append(
            (
                f"RSS idle / peak after a {s['big_size'] / 1e6:g} MB result",
                "-",
                mb("relay"),
                mb("proxy"),
                mb("proxy"),
                "<= 28 / 45 MB",
                mark(rss_ok),
            )
        )
    if "sampling" in r:
        sm = r["sampling"]
        rows.append(
            (
                f"sampling round trip over the LLM call (n={sm['n']}, paired blocks)",
                f"{ms(sm['direct']['median_ms'], 2)} (httpx)",
                "-",
                ms(sm["proxy"]["median_ms"], 2),
                f"{sm['added_ms']:+.3f} ms",
                "<= +0.3 ms, audit fsync",
                mark(v["sampling_added_ms"]["pass"]),
            )
        )
        if sm.get("burst"):
            bu = sm["burst"]
            rows.append(
                (
                    f"{bu['size']} sampling requests at once, wall (paired median of {bu['rounds']})",
                    f"{ms(bu['direct_median_ms'], 1)} (httpx)",
                    "-",
                    ms(bu["proxy_median_ms"], 1),
                    f"x{bu['ratio']:.2f}",
                    "<= x1.10",
                    mark(v["sampling_burst_ratio"]["pass"]),
                )
            )

    header = ("measurement", "direct", "byte relay", "proxy", "added / ratio", "target", "")
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(col.ljust(w) for col, w in zip(x, widths, strict=True)).rstrip() for x in rows]
    lines.append("")
    for m in ("relay", "proxy") if e is not None else ():
        blk = e[m]["blocks_added_p50_ms"]
        lines.append(
            f"{LABELS[m]}: added echo p50 per block of {CHUNK} calls: median {blk['median']:+.3f} ms, "
            f"IQR [{blk['q25']:+.3f}, {blk['q75']:+.3f}] ms over {blk['blocks']} blocks"
        )
    if mem is not None and mem.get("stack_floor_mb"):
        floor = mem["stack_floor_mb"]
        lines.append(
            "RSS floor of the required stack alone (interpreter, anyio's loop running, structlog, PyYAML; "
            "no proxy code): "
            + ", ".join(f"on {k} {x:.1f} MB" if x is not None else f"on {k} ?" for k, x in floor.items())
        )
    if c is not None and "cpu_us_per_call" in c:
        cpu = c["cpu_us_per_call"]
        lines.append(
            "concurrent calls, CPU per call: "
            + ", ".join(f"{k} {v:.0f} us" for k, v in cpu.items())
            + " (the SDK client's own work, in this process, is not counted)"
        )
    if c is not None:
        lines.append(
            "concurrent calls: "
            + "; ".join(
                f"{LABELS[m]} ratio of medians x{c[m]['ratio_of_medians']:.3f}, rounds' ratios IQR "
                f"[x{c[m]['ratio_iqr'][0]:.3f}, x{c[m]['ratio_iqr'][1]:.3f}]"
                for m in ("relay", "proxy")
            )
        )
    if "first" in r:
        f = r["first"]
        lines.append(
            "slowest of the first calls, per run: "
            + "; ".join(f"{LABELS[m]} " + ", ".join(f"{x:.1f}" for x in f[m]["runs_max_ms"]) + " ms" for m in MODES)
        )
    if "sampling" in r:
        sm = r["sampling"]
        lines.append(
            f"sampling: added per block of {SAMPLING_BLOCK}: median {sm['added_ms']:+.3f} ms (the figure), "
            f"IQR [{sm['added_iqr_ms'][0]:+.3f}, {sm['added_iqr_ms'][1]:+.3f}] ms; difference of the medians "
            f"{sm['added_of_medians_ms']:+.3f} ms"
        )
        lines.append(
            f"sampling: over the same call made with aiohttp (the proxy's own LLM client; "
            f"{sm['aiohttp']['median_ms']:.2f} ms): {sm['added_over_same_client_ms']:+.3f} ms, what the proxy "
            "adds when the host's client is as cheap as its own"
        )
        cpu = sm["cpu_us_per_request"]
        lines.append(
            f"sampling: CPU per request: proxy {cpu['proxy']:.0f} us (all its work, its LLM call included), "
            f"the benchmark's direct httpx call {cpu['direct']:.0f} us, aiohttp call {cpu['aiohttp']:.0f} us: the "
            f"proxy's own work is about {cpu['proxy'] - cpu['aiohttp']:.0f} us (steadier than the latencies on a "
            "busy machine)"
        )
        lines.append(
            f"sampling: first request after start {sm['first_request_ms']:.1f} ms; p90 direct "
            f"{sm['direct']['p90_ms']:.2f} ms, proxy {sm['proxy']['p90_ms']:.2f} ms; "
            f"{sm['audit_records']} audit records written with fsync"
        )
    machine = r["machine"]
    busy = machine["loadavg_start"][0] > 0.5 * (machine["cpus"] or 1)
    lines.append(
        f"load average (1/5/15 min) at start: {' '.join(f'{x:.2f}' for x in machine['loadavg_start'])}, "
        f"at end: {' '.join(f'{x:.2f}' for x in machine['loadavg_end'])} on {machine['cpus']} CPUs"
        + ("  <- other work was running: expect noisy figures" if busy else "")
    )
    lines.append(f"wall time: {r['wall_s']:.0f} s")
    failed = [k for k, x in v.items() if x["pass"] is False]
    lines.append("overall: " + ("PASS" if not failed else "FAIL (" + ", ".join(failed) + ")"))
    return "\n".join(lines)


PARTS = frozenset({"spawn", "steady", "sampling"})
QUICK = {
    "runs": 1,
    "first_calls": 10,
    "calls": 10,
    "warmup": 3,
    "concurrency": 10,
    "bursts": 1,
    "big_size": 100_000,
    "settle": 0.1,
    "sampling": 4,
    "sampling_burst": 5,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=5,
        help="fresh spawns per mode (spawn time, first calls; 0 skips them); also concurrent bursts (default 5)",
    )
    parser.add_argument(
        "--first-calls",
        type=int,
        default=500,
        help="sequential calls right after each fresh initialize, for their p99 (default 500)",
    )
    parser.add_argument("--calls", type=int, default=500, help="sequential calls per mode on warm sessions (500)")
    parser.add_argument("--warmup", type=int, default=100, help="warm-up calls per warm session (default 100)")
    parser.add_argument("--concurrency", type=int, default=500, help="calls per concurrent burst (default 500)")
    parser.add_argument("--bursts", type=int, default=15, help="concurrent bursts per mode, interleaved (default 15)")
    parser.add_argument("--big-size", type=int, default=5_000_000, help="bytes of the big result (default 5e6)")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds after initialize before idle RSS (1)")
    parser.add_argument("--sampling", type=int, default=200, help="sampling requests per mode (default 200; 0 skips)")
    parser.add_argument(
        "--sampling-burst",
        type=int,
        default=50,
        help="sampling requests a server sends at once, against as many httpx calls at once; --bursts rounds "
        "(default 50; 0 skips)",
    )
    parser.add_argument(
        "--audit-content",
        choices=("none", "redacted", "full"),
        default="none",
        help="the sampling part's audit.content (default none, the proxy's default)",
    )
    parser.add_argument(
        "--only",
        type=lambda x: {p.strip() for p in x.split(",") if p.strip()},
        default=PARTS,
        metavar="PARTS",
        help="comma-separated parts to run: spawn (spawn time, first calls), steady "
        "(echo p50, concurrent calls, RSS), sampling (default: all three)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, every row once (a smoke test: the figures mean nothing)"
    )
    parser.add_argument(
        "--server-cmd",
        help="another MCP server for the three modes (shell-split; default: "
        "PYTHON tests/fixtures/kitchen_sink_server.py; it needs echo and big)",
    )
    parser.add_argument(
        "--proxy-cmd",
        help="replace 'PYTHON -m mcp_sampling_proxy --no-terminal' (shell-split; "
        "'-- SERVER' is appended); its first process must be the proxy",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for servers, relay and proxy")
    parser.add_argument("--timeout", type=float, default=30.0, help="per-operation timeout in seconds (30)")
    parser.add_argument("--json", action="store_true", help="print JSON (every sample) instead of the table")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' stderr (kept on failure)")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if (
        min(args.first_calls, args.calls, args.concurrency, args.bursts, args.big_size) < 1
        or args.runs < 0
        or args.sampling < 0
        or args.sampling_burst < 0
    ):
        parser.error(
            "--first-calls, --calls, --concurrency, --bursts and --big-size must be >= 1; "
            "--runs, --sampling, --sampling-burst >= 0"
        )
    if args.only - PARTS or not args.only:
        parser.error(
            f"--only takes a comma-separated list of {', '.join(sorted(PARTS))}; got "
            f"{', '.join(sorted(args.only)) or 'nothing'}"
        )
    if not args.json:
        for mode in MODES:
            cmd = shlex.join(Bench(args, Path("/nonexistent")).commands[mode])
            print(f"{LABELS[mode] + ':':12} {cmd}")
        print(
            f"host:        mcp SDK Client over stdio; {os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
            flush=True,
        )
    try:
        result = asyncio.run(run(args))
    except BenchError as exc:
        print(f"sdk_bench failed: {exc}", file=sys.stderr)
        return 2
    return finish(result, render, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
