"""`doctor` on where the consoles meet: without a runtime dir every proxy and console of the user meets in
the temporary-directory fallback, and doctor says so and what it means; with XDG_RUNTIME_DIR set it does not.
Run in process, with the environment a proxy without a runtime dir gets (no XDG_RUNTIME_DIR, a TMPDIR of
its own)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from helpers.support import private_dir_of_mine, run_subcommand

from mcp_sampling_proxy.doctor import files as doctor_files

UID = os.getuid()


def test_doctor_says_when_the_console_directory_is_the_shared_fallback(
    monkeypatch: pytest.MonkeyPatch, isolated_user_dirs: Path
) -> None:
    if private_dir_of_mine(Path(f"/run/user/{UID}")):
        pytest.skip("/run/user/UID exists here: the temporary-directory fallback is not used")
    tmp = isolated_user_dirs / "tmp"
    tmp.mkdir()
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read again from TMPDIR, as a new process would
    monkeypatch.setattr(doctor_files, "unavailable", lambda: None)  # bubblewrap can sandbox: not probed by starting it

    out = run_subcommand(["doctor"]).stdout
    shared = tmp / f"runtime-{UID}" / "mcp-sampling-proxy"
    # an information line ("-" where the output cannot show "·"), not a problem
    assert f"- console: {shared} is the shared fallback (no XDG_RUNTIME_DIR, no /run/user/UID)" in out, out
    assert "every proxy and console of yours started without a runtime dir meets here" in out
    assert "give the hosts' proxies and the console the same MCP_SAMPLING_PROXY_RUNTIME_DIR" in out

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(isolated_user_dirs / "run"))
    out = run_subcommand(["doctor"]).stdout
    assert "shared fallback" not in out and f"console: socket directory {isolated_user_dirs / 'run'}" in out, out
