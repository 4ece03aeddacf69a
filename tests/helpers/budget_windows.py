"""Budget windows at a fixed time, and the state directory budgets are kept in, for the budget tests (in
process: tests/unit/quotas/test_limits.py; across processes: tests/e2e/test_budget_across_processes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_sampling_proxy.quotas.state import STATE_DIR_ENV

DAY = 86400.0
T0 = 1_750_000_000.0 - 1_750_000_000.0 % DAY  # a UTC midnight: the start of a 1d budget window


def use_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own state directory, where budgets.json goes."""
    directory = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(directory))
    return directory
