"""What the benchmarks with targets share at their end: the error that stops a run, and how a run's result is
printed and becomes the exit status (0: every target met or not judged, 1: one missed; a run that fails
with BenchError exits 2)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


class BenchError(RuntimeError):
    """A run that could not be measured: a process that died, an answer that was wrong."""


def finish(result: dict[str, Any], render: Callable[[dict[str, Any]], str], as_json: bool) -> int:
    """Print `result` (as JSON, or as `render` writes it, with where the processes' stderr went) and return
    the exit status its verdicts give."""
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print()
        print(render(result))
        if result["stderr_logs"]:
            print(f"\n(stderr of the processes: {result['stderr_logs']})")
    return 0 if all(x["pass"] is not False for x in result["verdict"].values()) else 1
