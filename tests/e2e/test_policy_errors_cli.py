"""A policy the proxy cannot use stops it before any server runs: exit 2, nothing on stdout, and the
mistake on stderr as FILE:LINE:COL (a file that is not UTF-8, a FIFO given as the policy, a typo)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers.support import PY, THREE_TYPOS, proxy_env, write_policy


def test_a_policy_that_is_not_utf8_names_the_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"rules:\n  - name: caf\xe9\n    action: allow\n")
    result = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "policy", "check", str(path)],
        capture_output=True,
        text=True,
        env=proxy_env(),
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == f"{path}:2:14: not UTF-8 text (byte 0xe9); save the file as UTF-8"
    assert "Traceback" not in result.stderr


def test_a_fifo_given_as_the_policy_stops_the_proxy_with_an_error(tmp_path: Path) -> None:
    """A FIFO (or a device) where the policy should be: reading it would wait for a writer for good,
    before the proxy answered anything. The proxy stops at once and says what is wrong."""
    path = tmp_path / "policy.yaml"
    os.mkfifo(path)
    result = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "--policy", str(path), "--", PY, "-c", "pass"],
        capture_output=True,
        text=True,
        env=proxy_env(),
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert f"{path} is not a regular file: a policy must be a YAML file" in result.stderr
    assert result.stdout == ""


def test_cli_bad_policy_exits_2_with_position_on_stderr(tmp_path: Path) -> None:
    path = write_policy(tmp_path, "llm:\n  providers:\n    p:\n      type: openai\n      modles: [m]\n")
    script = tmp_path / "x.py"
    script.write_text("import sys\nsys.stdin.read()\n")
    result = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "--policy", path, "--", PY, str(script)],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert f"{path}:5:7: unknown key 'modles' in llm.providers.p (did you mean 'models'?)" in result.stderr
    assert result.stderr.startswith("mcp-sampling-proxy: error: ")


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """`policy explain --template | head -1`: the reader goes away before the command writes, and the
    command ends quietly instead of printing a BrokenPipeError traceback on the terminal."""
    command = [PY, "-m", "mcp_sampling_proxy", "policy", "explain", "--template"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before the interpreter has even started: the first write meets a closed pipe
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_the_proxy_refuses_a_bad_policy_naming_every_mistake(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, THREE_TYPOS)
    done = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "--policy", policy, "--", PY, "-c", "pass"],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""  # stdout is the protocol's
    for where in (":2:3: unknown key 'rout'", ":5:5: unknown key 'acton'", ":7:13: rules[1].action", ":11:24: "):
        assert f"{policy}{where}" in done.stderr
