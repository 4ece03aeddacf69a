#!/usr/bin/env python3
"""The credential scan's cost per 1,000 characters of an LLM's answer, in-process, with what
text/regex_literals.py reads from each detector's pattern (the literals every match holds, its shortest
length, where a match can start) and without it (every detector run over every text), in turn, in one run.

Every answer the proxy's own LLM gives is scanned before the server gets it (and a request's messages
when `sampling.scan_requests` is on); the sampling row of `sdk_bench.py` answers "echo: hello", too
short to show what a real answer of a few thousand characters costs. Four kinds of text: prose, prose
with typographic dashes and quotes (as LLMs write it: not ASCII), Python code and Markdown (this
repository's own files, so the figures are the same on every machine); and a hostile one, the literals
the patterns are anchored on over and over.

It exits non-zero when the two modes mask a text differently.

Usage: .venv/bin/python bench/secret_scan.py [--rounds 5] [--number 200]
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from pathlib import Path

import msgspec

from mcp_sampling_proxy.services import secret_scan

ROOT = Path(__file__).resolve().parent.parent
PROSE = (
    "The function reads the configuration once at start and keeps it in memory; when the file changes, the "
    "watcher reloads it and logs what changed. Tests cover the parser, the loader and the watcher, and a "
    "benchmark times a reload of a large file. "
) * 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of each mode (default 5)")
    parser.add_argument("--number", type=int, default=200, help="scans of a text per round (default 200)")
    args = parser.parse_args()
    texts = {
        "prose": PROSE[:1000],
        "typeset": PROSE.replace(";", " —").replace("reads the", "reads “the”")[:1000],
        "code": (ROOT / "mcp_sampling_proxy/services/sampling/service.py").read_text()[3000:4000],
        "markdown": (ROOT / "docs/guides/serve.md").read_text()[:1000],
        "hostile": ("key=sk-" * 143)[:1000],  # an anchor's literals everywhere: no dearer than every detector
    }
    with_literals = secret_scan._detectors()
    without = tuple(msgspec.structs.replace(d, needs=None, anchor=None) for d in with_literals)
    print(f"the credential scan of 1,000 characters, min of {args.rounds} rounds of {args.number} (us)")
    print(f"{'text':10s} {'every detector':>15s} {'literals read':>15s} {'ratio':>7s}")
    for name, text in texts.items():
        assert len(text) == 1000, name
        times: dict[str, list[float]] = {"all": [], "tested": []}
        masked = set()
        for _ in range(args.rounds):
            for mode, detectors in (("all", without), ("tested", with_literals)):
                secret_scan._made[0] = detectors
                masked.add(secret_scan.mask_text(text))
                elapsed = timeit.timeit(lambda t=text: secret_scan.mask_text(t), number=args.number)  # type: ignore[misc]
                times[mode].append(elapsed / args.number * 1e6)
        if len(masked) != 1:
            raise SystemExit(f"the {name} text was masked differently with and without the literal tests")
        every, tested = min(times["all"]), min(times["tested"])
        medians = f"medians {statistics.median(times['all']):.0f} / {statistics.median(times['tested']):.0f}"
        print(f"{name:10s} {every:15.1f} {tested:15.1f} {tested / every:7.2f}  ({medians})")


if __name__ == "__main__":
    main()
