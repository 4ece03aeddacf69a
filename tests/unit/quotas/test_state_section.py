"""The policy's `state:` section (where limits are shared: the state directory, or Redis): each mistake is
named at its line by `policy check`, run in process. The limits on a real Redis: tests/e2e/test_state_redis.py."""

from __future__ import annotations

from pathlib import Path

from helpers.support import run_subcommand, write_policy


def test_state_section_errors_name_the_line(tmp_path: Path) -> None:
    cases = {
        "state:\n  backend: redis\n": "needs exactly one of url",
        "state:\n  backend: redis\n  url: http://x\n": "must start with redis://",
        "state:\n  url: redis://x\n": "applies to backend: redis only",
        "state:\n  backend: redis\n  url: redis://x\n  on_state_error: allow\n": "on_state_error",
    }
    for text, words in cases.items():
        path = write_policy(tmp_path, text)
        done = run_subcommand(["policy", "check", str(path)])
        assert done.returncode != 0
        assert words in done.stderr + done.stdout
        assert f"{path}:" in done.stderr + done.stdout
