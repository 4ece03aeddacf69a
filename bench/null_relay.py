#!/usr/bin/env python3
"""Reference relays for the benchmark: the floor a Python stdio proxy can reach on this machine.

    python bench/null_relay.py [--mode select|asyncio|asyncio-json] -- COMMAND...

select        one thread, poll() on both inputs, os.read -> os.write of raw bytes (no framing,
              no JSON, no asyncio). The cost of the extra process hop itself (pipe wake-ups).
asyncio       asyncio pipe protocols copying raw bytes (what the real wire layer is built on).
asyncio-json  asyncio + newline framing + json.loads of every line (what routing needs at least).

Use it with `bench.py --proxy-cmd "python bench/null_relay.py --mode select"` to see how much of
the proxy's added cost is the hop and how much is the proxy's own work. Not part of the product.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys


def run_select(proc: subprocess.Popen[bytes]) -> int:
    assert proc.stdin and proc.stdout
    host_in, host_out = 0, 1
    up_in, up_out = proc.stdin.fileno(), proc.stdout.fileno()
    poller = select.poll()
    poller.register(host_in, select.POLLIN)
    poller.register(up_out, select.POLLIN)
    route = {host_in: up_in, up_out: host_out}
    open_inputs = 2
    while open_inputs:
        for fd, _ in poller.poll():
            data = os.read(fd, 1 << 16)
            if not data:
                poller.unregister(fd)
                open_inputs -= 1
                if fd == host_in:
                    proc.stdin.close()
                continue
            view = memoryview(data)
            while view:
                view = view[os.write(route[fd], view) :]
    return proc.wait()


def run_asyncio(proc: subprocess.Popen[bytes], parse: bool) -> int:
    import asyncio

    class Reader(asyncio.Protocol):
        def __init__(self, sink: list[asyncio.WriteTransport], done: asyncio.Future[None]):
            self.sink = sink
            self.done = done
            self.pending = bytearray()

        def data_received(self, data: bytes) -> None:
            if not parse:
                self.sink[0].write(data)
                return
            start = 0
            while (nl := data.find(b"\n", start)) >= 0:
                if self.pending:
                    self.pending += data[start:nl]
                    line = bytes(self.pending)
                    self.pending.clear()
                else:
                    line = data[start:nl]
                start = nl + 1
                json.loads(line)
                self.sink[0].write(line + b"\n")
            if start < len(data):
                self.pending += data[start:]

        def connection_lost(self, exc: Exception | None) -> None:
            if not self.done.done():
                self.done.set_result(None)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert proc.stdin and proc.stdout
        to_up: list[asyncio.WriteTransport] = []
        to_host: list[asyncio.WriteTransport] = []
        host_done = loop.create_future()
        up_done = loop.create_future()
        t, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(proc.stdin.fileno(), "wb", closefd=False))
        to_up.append(t)
        t, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(1, "wb", closefd=False))
        to_host.append(t)
        upstream_out = os.fdopen(proc.stdout.fileno(), "rb", closefd=False)
        await loop.connect_read_pipe(lambda: Reader(to_host, up_done), upstream_out)
        await loop.connect_read_pipe(lambda: Reader(to_up, host_done), os.fdopen(0, "rb", closefd=False))
        await asyncio.wait([host_done, up_done], return_when=asyncio.FIRST_COMPLETED)
        to_up[0].close()
        proc.stdin.close()  # type: ignore[union-attr]
        await asyncio.sleep(0.05)

    asyncio.run(main())
    try:
        return proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("select", "asyncio", "asyncio-json"), default="select")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the server command after '--'")
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    if args.mode == "select":
        return run_select(proc)
    return run_asyncio(proc, parse=args.mode == "asyncio-json")


if __name__ == "__main__":
    sys.exit(main())
