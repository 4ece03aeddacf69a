"""Which /tmp entries the sandbox brings back into a server's sight: those its working directory and
command lead to, through links the user made, never through a link the server could have planted."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_sampling_proxy.transport.sandbox import _under_tmp


@pytest.fixture
def tops() -> Iterator[tuple[Path, Path, Path]]:
    """A checkout, a venv's entry and a third entry (a tmux socket's directory), each directly under /tmp."""
    made = [Path(tempfile.mkdtemp(prefix=f"msp-{name}-", dir="/tmp")) for name in ("checkout", "venv", "tmux")]
    try:
        yield made[0], made[1], made[2]
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


def test_a_relative_command_through_the_users_link_counts_where_it_leads(tops: tuple[Path, Path, Path]) -> None:
    checkout, venv, _ = tops
    (venv / "bin").mkdir()
    (venv / "bin" / "python").touch()
    (checkout / ".venv").symlink_to(venv)
    found = _under_tmp([str(checkout), ".venv/bin/python", "server.py"], str(checkout), [])
    assert found == [str(checkout), str(venv)]


def test_a_link_where_the_server_can_write_is_not_followed(tops: tuple[Path, Path, Path]) -> None:
    checkout, _, tmux = tops
    granted = checkout / "granted"
    granted.mkdir()
    (granted / "server.py").symlink_to(tmux / "default")  # planted by the server in its write grant
    command = [str(checkout), str(granted / "server.py")]
    assert _under_tmp(command, str(checkout), [str(granted)]) == [str(checkout)]
    assert _under_tmp(command, str(checkout), []) == [str(checkout), str(tmux)]  # the user's own link
