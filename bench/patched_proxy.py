#!/usr/bin/env python3
"""The real proxy with experimental monkeypatches, to measure what a change would buy before making it.

    python bench/patched_proxy.py [--coalesce] [PROXY OPTIONS] -- COMMAND...

--coalesce    while one chunk read from a pipe is split into lines, collect the lines each
              writer gets and write them with one write() per writer at the end of the chunk,
              instead of one write() (and one wake-up of the peer) per line

Use: bench.py --proxy-cmd "python bench/patched_proxy.py --coalesce --no-terminal".
Add further experiments here as flags; not part of the product.
"""

from __future__ import annotations

import sys

SMALL = 256 * 1024


def patch_coalesce() -> None:
    from mcp_sampling_proxy.transport import framing as wire

    writers: list[wire.LineWriter] = []
    original_init = wire.LineWriter.__init__
    original_write_line = wire.LineWriter.write_line
    original_data_received = wire.LineReader.data_received

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original_init(self, *args, **kwargs)
        self._corked = None
        writers.append(self)

    def write_line(self, line: bytes) -> None:  # type: ignore[no-untyped-def]
        if self._corked is None or len(line) >= SMALL:
            self.flush()
            original_write_line(self, line)
        else:
            self._corked.append(line)

    def flush(self) -> None:  # type: ignore[no-untyped-def]
        parts, self._corked = self._corked, ([] if self._corked is not None else None)
        if parts:
            transport = self.transport
            if transport is not None and not transport.is_closing():
                parts.append(b"")
                transport.write(b"\n".join(parts))

    def data_received(self, data: bytes) -> None:  # type: ignore[no-untyped-def]
        for writer in writers:
            writer._corked = []
        try:
            original_data_received(self, data)
        finally:
            for writer in writers:
                writer.flush()
                writer._corked = None

    wire.LineWriter.__init__ = __init__  # type: ignore[method-assign]
    wire.LineWriter.write_line = write_line  # type: ignore[method-assign]
    wire.LineWriter.flush = flush  # type: ignore[attr-defined]
    wire.LineReader.data_received = data_received  # type: ignore[method-assign]


def main() -> int:
    argv = sys.argv[1:]
    flags = set()
    while argv and argv[0] in ("--coalesce",):
        flags.add(argv.pop(0))
    from mcp_sampling_proxy.commands import cli

    if "--coalesce" in flags:
        patch_coalesce()
    return cli.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
