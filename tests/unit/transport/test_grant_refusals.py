"""A write grant that reaches what the proxy trusts, or what runs as the user later: `policy check` and the
proxy's start (`contain`, which decides before any server runs) refuse it, naming the grant and what it
would reach. In process, for every such grant; tests/security/test_containment_grants.py puts the same
grants to the real proxy, as an ordinary user."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import run_subcommand, write_policy

from mcp_sampling_proxy.config.settings import load_settings
from mcp_sampling_proxy.transport.sandbox import SandboxRefused, contain

# (the grant as a policy writes it, what the refusal names)
REACHING = [
    ('"~"', "~/.bashrc"),
    ("~/.config", "~/.config/autostart"),
    ("~/.local/state", "the proxy's own"),
    ("~/.ssh", "SSH's keys"),
    ("/", "~/.bashrc"),
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's home with its start-up files and keys, the proxy's state and configuration inside it."""
    home = tmp_path / "home"
    for part in (".ssh", ".config/autostart", ".local/state", ".local/share"):
        (home / part).mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    (home / ".bashrc").write_text("# the user's own\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("MCP_SAMPLING_PROXY_RUNTIME_DIR", str(tmp_path / "run" / "msp"))
    return home


@pytest.mark.parametrize(("grant", "named"), REACHING)
def test_policy_check_and_the_start_refuse_a_grant_that_reaches_what_the_proxy_trusts(
    home: Path, grant: str, named: str
) -> None:
    policy = write_policy(home.parent, f"rules: []\nsandbox:\n  servers:\n    raider:\n      write: [{grant}]\n")
    checked = run_subcommand(["policy", "check", policy])
    assert checked.returncode != 0
    assert (
        "sandbox.servers.raider.write:" in checked.stdout + checked.stderr and named in checked.stdout + checked.stderr
    )
    settings = load_settings(policy, {})
    with pytest.raises(SandboxRefused) as refused:
        contain(settings.sandbox, policy, settings.named_files(), name="raider", command=["python3", "raider.py"])
    assert "sandbox.servers.raider.write:" in str(refused.value) and named in str(refused.value)
