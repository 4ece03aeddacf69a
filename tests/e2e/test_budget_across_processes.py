"""A token budget in the shared state file is exact across processes: four proxies' worth of reservations
and settlements on one key at once, none lost and none granted past the budget. The budget in one
process: tests/unit/quotas/test_limits.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.budget_windows import DAY, T0, use_state_dir

from mcp_sampling_proxy.quotas.limiters import TokenBudget
from mcp_sampling_proxy.quotas.state import STATE_DIR_ENV


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_state_dir(tmp_path, monkeypatch)


WORKER = r"""
import sys, time, os
from mcp_sampling_proxy.quotas.limiters import TokenBudget
from mcp_sampling_proxy.quotas.refusals import Reservation

now, go_file, rounds = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
budget = TokenBudget()
print("ready", flush=True)
while not os.path.exists(go_file):
    time.sleep(0.002)
granted = 0
for _ in range(rounds):
    loose = budget.reserve("loose", 10**9, 86400, 10, now=now)
    assert isinstance(loose, Reservation), loose
    budget.settle(loose, 7, now=now)
    tight = budget.reserve("tight", 1000, 86400, 10, now=now)
    if isinstance(tight, Reservation):
        granted += 1
        budget.settle(tight, None, now=now)
print(granted, flush=True)
"""


def test_budget_is_exact_across_processes(state: Path, tmp_path: Path) -> None:
    """4 processes x 50 rounds: reserve 10 + settle 7 on one key (1,400 exactly), and on a key
    with a 1,000 budget, reserve 10 + settle the worst case: exactly 100 granted, never more."""
    go = tmp_path / "go"
    env = {**os.environ, STATE_DIR_ENV: str(state)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(T0 + 5), str(go), "50"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        started = time.monotonic()
        go.touch()  # all start hammering together
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    elapsed = time.monotonic() - started
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0], [err for _, err in outputs]
    granted = sum(int(out.split()[-1]) for out, _ in outputs)  # the last line (logs, if any, come first)
    budget = TokenBudget()
    loose = budget.status("loose", DAY, now=T0 + 6)
    tight = budget.status("tight", DAY, now=T0 + 6)
    assert (loose.used, loose.reserved) == (4 * 50 * 7, 0)
    assert (granted, tight.used, tight.reserved) == (100, 1_000, 0)
    assert elapsed < 30
