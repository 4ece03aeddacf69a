"""A benchmark's proxies and servers keep every user directory inside the run's own: none reads the
user's policy or leaves a sandboxed server's data directory in the user's home."""

from __future__ import annotations

import re
import stat
from pathlib import Path

from helpers.bench_scripts import BENCH, load_bench

STARTS_PROXIES = re.compile(r'"-m",\s*"mcp_sampling_proxy"|\[python, "-m", "mcp_sampling_proxy"')
SETS_HOME = re.compile(r'\bHOME\b"?\s*[:=]')  # a home of its own (`"HOME": ...`, `HOME=...`), not XDG_STATE_HOME=


def test_every_user_directory_is_made_private_under_the_runs_own(tmp_path: Path) -> None:
    env = load_bench("scratch_dirs").scratch_dirs(tmp_path)
    for variable in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "MCP_SAMPLING_PROXY_CONFIG_DIR"):
        directory = Path(env[variable])
        assert directory.parent == tmp_path and directory.is_dir(), variable
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, variable
    assert {"MCP_SAMPLING_PROXY_STATE_DIR", "MCP_SAMPLING_PROXY_RUNTIME_DIR"} <= set(env)


def test_every_benchmark_that_starts_the_proxy_gives_it_scratch_directories() -> None:
    starting = [p for p in sorted(BENCH.glob("*.py")) if STARTS_PROXIES.search(p.read_text(encoding="utf-8"))]
    assert len(starting) >= 4, [p.name for p in starting]
    for script in starting:
        text = script.read_text(encoding="utf-8")
        isolated = "scratch_dirs(" in text or SETS_HOME.search(text)
        assert isolated, f"{script.name} starts proxies in the user's directories"
