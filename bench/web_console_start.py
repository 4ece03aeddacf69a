"""`console --web`: the time from its start to its first page, and its memory once idle.

Each round starts `console --web --no-open` with directories of its own (no proxy attached, no policy),
reads the URL from its first line, and asks for the page until it answers 200: that is the time to the
first page. It then opens the page's event stream (as a browser tab does), waits a moment and reads the
process's resident memory (VmRSS), and stops it with SIGINT as Ctrl-C does. Prints the medians.
With `--against DIR` (another checkout, e.g. `git worktree add /tmp/old main`), each round runs that
checkout too, in turn (the order alternates), so that both see the same load; the same interpreter
runs both.

    .venv/bin/python bench/web_console_start.py [--rounds 15] [--against DIR]
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def one_round(home: Path, root: Path = ROOT) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "MCP_SAMPLING_PROXY_"))}
    env.update(
        HOME=str(home),
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(home / "run"),
        MCP_SAMPLING_PROXY_STATE_DIR=str(home / "state"),
        MCP_SAMPLING_PROXY_CONFIG_DIR=str(home / "config"),
        PYTHONPATH=str(root),
    )
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcp_sampling_proxy", "console", "--web", "--no-open"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        url = urlsplit(proc.stdout.readline().decode().strip())
        assert url.port is not None
        while True:
            try:
                if get(url.port, url.path) == 200:
                    break
            except OSError:
                pass
            time.sleep(0.002)
        first_page = time.perf_counter() - started
        stream = http.client.HTTPConnection("127.0.0.1", url.port, timeout=10)
        stream.request("GET", url.path + "api/events")
        response = stream.getresponse()
        assert response.status == 200
        response.fp.readline()  # the first event's first line: the page is live
        time.sleep(1.0)
        rss = rss_kib(proc.pid)
        stream.close()
        return first_page, rss
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def report(name: str, times: list[float], memory: list[int]) -> None:
    print(
        f"{name}start to first page: median {statistics.median(times) * 1000:.0f} ms "
        f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}) over {len(times)} rounds; "
        f"RSS idle with one page open: median {statistics.median(memory) / 1024:.1f} MiB"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--against", type=Path, help="another checkout to measure in turn with this one")
    args = parser.parse_args()
    roots = [ROOT] if args.against is None else [ROOT, args.against.resolve()]
    times: dict[Path, list[float]] = {root: [] for root in roots}
    memory: dict[Path, list[int]] = {root: [] for root in roots}
    for index in range(args.rounds):
        for root in roots if index % 2 == 0 else roots[::-1]:
            with tempfile.TemporaryDirectory() as home:
                first_page, rss = one_round(Path(home), root)
            times[root].append(first_page)
            memory[root].append(rss)
    for root in roots:
        report(f"{root}: " if len(roots) > 1 else "", times[root], memory[root])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
