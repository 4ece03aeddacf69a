"""The network relay a sandboxed server goes out through, against a direct connection, in one run.

A sandboxed server's only way out is the proxy's relay (transport/egress.py): an HTTP CONNECT (or SOCKS5)
to it, a judged, resolved and checked connection onward, then bytes copied both ways. This measures what
that costs a client, with the relay's own code and event loop (run here in a thread, listening on
127.0.0.1 as it listens on the sandbox's loopback) against a plain connection to the same server:

- connect: a new connection and one small request and answer (`CONNECT` first, through the relay);
- round trip: one small request and answer on a connection already open (the tunnel's copy loop);
- bulk: 64 MiB sent and echoed back.

Rounds alternate direct and relayed; prints medians and ratios.

    .venv/bin/python bench/egress_relay.py [--rounds 200] [--bulk-mib 64]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp_sampling_proxy.transport.egress import Connect, Verdict, serve_egress

CHUNK = 64 * 1024


def echo_server() -> tuple[socket.socket, int]:
    """A TCP echo server on 127.0.0.1 (a thread per connection)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve_one(conn: socket.socket) -> None:
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while data := conn.recv(CHUNK):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, listener.getsockname()[1]


def start_relay() -> int:
    """The relay on its own event loop in a thread, allowing everything (loopback included)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    async def allow(_: Connect) -> Verdict:
        return Verdict(True, internal=True)

    def run() -> None:
        anyio.run(serve_egress, listener, allow, lambda *_: None)

    threading.Thread(target=run, daemon=True).start()
    return port


def open_direct(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def open_relayed(relay: int, port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", relay))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    if not answer.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"the relay refused: {answer!r}")
    return sock


def round_trip(sock: socket.socket, payload: bytes = b"x" * 64) -> None:
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        got += sock.recv(CHUNK)


def bulk(sock: socket.socket, size: int) -> None:
    block = b"y" * CHUNK
    received = 0

    def read() -> None:
        nonlocal received
        while received < size:
            received += len(sock.recv(CHUNK))

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(size // CHUNK):
        sock.sendall(block)
    reader.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--bulk-mib", type=int, default=64)
    args = parser.parse_args()
    server, port = echo_server()
    relay = start_relay()
    opens = {"direct": lambda: open_direct(port), "relayed": lambda: open_relayed(relay, port)}
    time.sleep(0.2)
    results: dict[str, dict[str, list[float]]] = {m: {"connect": [], "round trip": [], "bulk": []} for m in opens}
    kept = {mode: opener() for mode, opener in opens.items()}
    for number in range(args.rounds):
        for mode in ("direct", "relayed") if number % 2 else ("relayed", "direct"):
            started = time.perf_counter()
            sock = opens[mode]()
            round_trip(sock)
            results[mode]["connect"].append(time.perf_counter() - started)
            sock.close()
            started = time.perf_counter()
            round_trip(kept[mode])
            results[mode]["round trip"].append(time.perf_counter() - started)
    size = args.bulk_mib * 1024 * 1024
    for number in range(3):
        for mode in ("direct", "relayed") if number % 2 else ("relayed", "direct"):
            started = time.perf_counter()
            bulk(kept[mode], size)
            results[mode]["bulk"].append(time.perf_counter() - started)
    print(f"the network relay against a direct connection, {args.rounds} rounds, 127.0.0.1 echo server")
    for measure, unit in (("connect", "ms"), ("round trip", "ms")):
        direct = statistics.median(results["direct"][measure]) * 1000
        relayed = statistics.median(results["relayed"][measure]) * 1000
        print(
            f"  {measure:11s} direct {direct:7.3f} {unit}   relayed {relayed:7.3f} {unit}   "
            f"+{relayed - direct:.3f} {unit}  x{relayed / direct:.2f}"
        )
    direct_rate = size / statistics.median(results["direct"]["bulk"]) / 2**20
    relayed_rate = size / statistics.median(results["relayed"]["bulk"]) / 2**20
    print(
        f"  bulk        direct {direct_rate:7.0f} MiB/s relayed {relayed_rate:7.0f} MiB/s "
        f"x{relayed_rate / direct_rate:.2f} ({args.bulk_mib} MiB each way, best of the median of 3)"
    )
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
