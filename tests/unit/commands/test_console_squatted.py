"""`console` on a runtime directory someone else prepared (another user's, a symlink, a file, one others can
read): a clear error that names the directory and what is wrong, exit 1, no traceback. In process; the
proxy beside such a directory (it still relays, and says why it has no console) is put to the test as a
process in tests/security/test_security_console.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.squatted_dirs import SQUATS, squat
from helpers.support import run_subcommand


@pytest.mark.parametrize(("kind", "says"), SQUATS)
def test_console_on_a_squatted_runtime_dir_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, says: str
) -> None:
    run_dir = tmp_path / "run"
    monkeypatch.setenv("MCP_SAMPLING_PROXY_RUNTIME_DIR", str(run_dir))
    squat(run_dir, kind)
    done = run_subcommand(["console"], stdin="")
    assert done.returncode == 1
    assert says in done.stderr and str(run_dir) in done.stderr
    assert "Traceback" not in done.stderr
