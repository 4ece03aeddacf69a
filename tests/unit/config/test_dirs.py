"""Per-user directories from platformdirs, in process: the documented Linux paths with the XDG variables
honoured, and where the default policy is looked for (tests/e2e/test_user_dirs.py runs the proxy and the
console on them)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from mcp_sampling_proxy.config.dirs import config_dir, home_relative, state_dir

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the documented Linux (XDG) paths")


def test_documented_linux_paths_and_xdg_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "MCP_SAMPLING_PROXY_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    assert state_dir(create=False) == home / ".local" / "state" / "mcp-sampling-proxy"
    assert config_dir() == home / ".config" / "mcp-sampling-proxy"
    assert home_relative(state_dir(create=False) / "audit.jsonl") == "~/.local/state/mcp-sampling-proxy/audit.jsonl"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert state_dir() == tmp_path / "state" / "mcp-sampling-proxy"
    assert stat.S_IMODE((tmp_path / "state" / "mcp-sampling-proxy").stat().st_mode) == 0o700
    assert config_dir() == tmp_path / "config" / "mcp-sampling-proxy"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # the XDG spec: a relative value is ignored
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    assert state_dir(create=False) == home / ".local" / "state" / "mcp-sampling-proxy"
    assert config_dir() == home / ".config" / "mcp-sampling-proxy"
    assert state_dir({"MCP_SAMPLING_PROXY_STATE_DIR": str(tmp_path / "mine")}) == tmp_path / "mine"


def test_web_console_default_policy_is_in_the_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_sampling_proxy.commands.console import default_policy

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert default_policy() is None  # none written yet
    policy = tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml"
    policy.parent.mkdir(parents=True)
    policy.write_text("rules: []\n")
    assert default_policy() == str(policy)
