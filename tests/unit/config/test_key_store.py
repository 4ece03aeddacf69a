"""The key file `init` writes: only a key alone goes in, it is its owner's alone, and a file the proxy
would refuse is refused when read back."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from mcp_sampling_proxy.config.key_store import not_a_bare_key, stored_key, write_key_file
from mcp_sampling_proxy.config.keys import KeySourceError

KEY = "sk-test-0123456789abcdef"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (f"OPENAI_API_KEY={KEY}", "reads `OPENAI_API_KEY=...`, a shell line"),
        (f"export OPENAI_API_KEY={KEY}", "reads `OPENAI_API_KEY=...`, a shell line"),
        (f'"{KEY}"', "is wrapped in quotes"),
        (f"'{KEY}", "is wrapped in quotes"),
    ],
)
def test_a_shell_line_or_a_quoted_key_is_refused_without_quoting_the_key(given: str, said: str) -> None:
    problem = not_a_bare_key(given)
    assert problem is not None and said in problem
    assert KEY not in problem


def test_a_key_alone_is_taken() -> None:
    assert not_a_bare_key(KEY) is None


def test_the_written_file_is_the_owners_alone_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "openai.key"
    assert stored_key(path) is None
    write_key_file(path, KEY)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stored_key(path) == KEY


def test_a_file_others_can_read_is_refused_as_the_proxy_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "openai.key"
    path.write_text(KEY + "\n")
    path.chmod(0o644)
    with pytest.raises(KeySourceError):
        stored_key(path)
