"""`mcp-sampling-proxy doctor` as the command a user runs: its exit codes, its report of the sandbox and of
the sealed state, and a stdout that holds the checklist alone."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.doctoring import closed_port, doctor
from helpers.support import PY, openai_policy, proxy_env, write_policy

from mcp_sampling_proxy.transport import bwrap_probe

# home, state and runtime dirs of each test's own, no real keys, no terminal (helpers/doctoring.py)
pytestmark = pytest.mark.usefixtures("environment")


def test_exit_codes_from_the_command_line(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    env = proxy_env(
        HOME=str(tmp_path / "home"),
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
        TEST_LLM_KEY="k",
    )
    good = write_policy(tmp_path, openai_policy(openai_llm.base_url, model="fake-gpt-4o-mini"), "good.yaml")
    dead = write_policy(tmp_path, openai_policy(f"http://127.0.0.1:{closed_port()}/v1"), "dead.yaml")
    for policy, expected in ((good, 0), (dead, 1)):
        result = subprocess.run(
            [PY, "-m", "mcp_sampling_proxy", "doctor", "--policy", policy],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == expected, result.stdout + result.stderr


def test_the_sandbox_is_reported_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Doctor says whether servers run in the sandbox here; `sandbox: required` without bwrap is a failure.
    Run in process: what is a process here is bwrap's probe (the command's own exit codes are above)."""
    policy = write_policy(tmp_path, "rules: []\n")
    required = write_policy(tmp_path, "sandbox: required\n", "required.yaml")
    if shutil.which("bwrap") is not None:
        assert "sandbox: bubblewrap works here; servers run in it" in doctor(capsys, "--policy", policy)[1]
    monkeypatch.setenv("PATH", "/nonexistent")
    bwrap_probe.unavailable.cache_clear()  # its answer is kept per process
    request.addfinalizer(bwrap_probe.unavailable.cache_clear)  # not this PATH's answer for the next test
    code, out = doctor(capsys, "--policy", policy)
    assert "no sandbox: bwrap is not installed" in out and "servers run unconfined" in out
    assert "fix: install bubblewrap" in out
    code, out = doctor(capsys, "--policy", required)
    assert code == 1
    assert "sandbox: required, but bwrap is not installed" in out and "proxies refuse to start" in out


def test_forged_approvals_and_a_tampered_budget_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], openai_llm: FakeLLMServer
) -> None:
    """What a proxy sealed verifies; an approval or a budgets file something else wrote is named, with the fix."""
    state = tmp_path / "state"
    policy = write_policy(
        tmp_path,
        openai_policy(
            openai_llm.base_url,
            rules=("rules:\n  - name: capped\n    action: allow\n    budget: {tokens: 1000, per: 1d}\n"),
        ),
    )
    # the host closes at once: the proxy starts and stops, and sealed nothing yet
    subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "--policy", policy, "--", PY, "-c", "import sys; sys.stdin.read()"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        env=proxy_env(MCP_SAMPLING_PROXY_STATE_DIR=str(state)),
    )
    assert (state / "integrity.key").exists()  # the proxy made its key
    from mcp_sampling_proxy.approval.memory import ApprovalMemory
    from mcp_sampling_proxy.quotas.limiters import TokenBudget
    from mcp_sampling_proxy.quotas.state import approvals_file

    approvals = ApprovalMemory(store=approvals_file(state / "approvals.json"))
    approvals.remember("docs", "search", "always", "ask", "console")
    TokenBudget(state / "budgets.json").reserve("capped", 1000, 86400, 10)
    code, out = doctor(capsys, "--policy", policy)
    assert "sealed state: remembered approvals and budgets in" in out and "verify" in out
    approvals = json.loads((state / "approvals.json").read_text())
    approvals["always"].append({"server": "evil", "tool": "go", "rule": "forged", "channel": "console", "at": None})
    (state / "approvals.json").write_text(json.dumps(approvals))
    (state / "budgets.json").write_text("{}")
    code, out = doctor(capsys, "--policy", policy)
    assert code == 1
    assert "a remembered approval for server 'evil', tool 'go' was not written by a proxy" in out
    assert "'docs'" not in out  # the sealed one is not reported
    assert (
        "budgets.json was not written by mcp-sampling-proxy (its seal does not match): budgeted requests are "
        "refused" in out
    )
    assert f"fix: remove {state / 'budgets.json'} and {state / 'sealed.json'}, then restart the proxies" in out


def test_doctor_prints_its_checklist_and_nothing_else_on_stdout(tmp_path: Path) -> None:
    """No log line heads the checklist (a debug line about where the runtime dir was found used to):
    helpers log warnings and errors only, on stderr."""
    env = {k: v for k, v in proxy_env().items() if k != "XDG_RUNTIME_DIR"}
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "doctor"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.startswith("mcp-sampling-proxy doctor: "), done.stdout[:200]
    assert "[debug" not in done.stdout + done.stderr
