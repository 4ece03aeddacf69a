"""`mcp-sampling-proxy init` as a user runs it, a process: in a terminal (tmux), or with --yes against a
loopback LLM, after which the proxy, started without --policy, runs with the file it wrote. What init
writes and refuses is checked in process, in tests/unit/commands/test_init.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import cast

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PROXY, PY, proxy_command, proxy_env, sdk_host, tool_json

from mcp_sampling_proxy.config.settings import load_settings


def init_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """XDG_CONFIG_HOME and HOME under tmp_path, so `init` writes its documented default path there."""
    env = proxy_env(
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        **extra,
    )
    env.pop("MCP_SAMPLING_PROXY_CONFIG_DIR")  # the real lookup, not the tests' override
    return env


def run_init(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, "init", *args], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_yes_writes_the_default_path_checks_the_llm_and_the_proxy_uses_it(tmp_path: Path) -> None:
    env = init_env(tmp_path)
    with FakeLLMServer("openai", models=("local-model",)) as llm:
        done = run_init(env, "--yes", "--from", "local-llm", "--llm", "ollama", "--base-url", llm.base_url)
        assert done.returncode == 0, done.stderr
        policy = tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml"
        assert f"wrote {policy}" in done.stdout
        assert "LLM check: ollama answered" in done.stdout
        assert llm.requests[-1].body["model"] == "local-model"  # the server's own listed model, not a guess
        text = policy.read_text()
        assert text.startswith("# mcp-sampling-proxy policy, written by `mcp-sampling-proxy init`")
        assert "# local-llm.yaml:" in text  # the shipped comments are kept
        assert policy.stat().st_mode & 0o777 == 0o600
        settings = load_settings(str(policy), {})
        assert [p.name for p in settings.providers] == ["ollama"]
        assert settings.providers[0].base_url == llm.base_url
        audit = tmp_path / "state" / "mcp-sampling-proxy" / "audit.jsonl"
        assert settings.audit.path == str(audit)
        assert audit.exists()  # every path the README names exists after init

        # the proxy, with no --policy, runs with that file: the loopback LLM answers, the audit log records it
        async def sample() -> str:
            async with sdk_host(proxy_command(None), env, tmp_path / "stderr.log") as client:
                return cast(str, tool_json(await client.call_tool("sample", {"prompt": "hi"}))["content"]["text"])

        import anyio

        assert anyio.run(sample) == "echo: hi"
    logged = [json.loads(line) for line in (tmp_path / "stderr.log").read_text().splitlines() if line.startswith("{")]
    assert any(event.get("default") is True for event in logged)  # the log says which policy, and why
    assert str(policy) in (tmp_path / "stderr.log").read_text()
    assert audit.read_text().count('"event":"decision"') == 1


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_interactive_in_a_terminal(tmp_path: Path) -> None:
    """The questions as a user sees them in tmux: pick a policy and an LLM, see the check, confirm."""
    session = f"init-{uuid.uuid4().hex[:8]}"
    socket = str(tmp_path / "tmux.sock")
    with FakeLLMServer("openai", models=("qwen-local", "llama-local")) as llm:
        env = init_env(tmp_path)
        exports = " ".join(
            f"{k}='{v}'"
            for k, v in env.items()
            if k in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "PATH", "PYTHONPATH")
        )
        command = f"env -i {exports} {PY} -m mcp_sampling_proxy init; echo EXIT=$?; sleep 30"
        tmux = ["tmux", "-S", socket]
        subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "200", "-y", "50", command], check=True)
        try:

            def screen() -> str:
                return subprocess.run(
                    [*tmux, "capture-pane", "-p", "-t", session, "-S", "-200"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout

            def wait_for(text: str, timeout: float = 30.0) -> str:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    shown = screen()
                    if text in shown:
                        return shown
                    time.sleep(0.1)
                raise AssertionError(f"{text!r} not shown:\n{screen()}")

            def answer(text: str) -> None:
                subprocess.run([*tmux, "send-keys", "-t", session, text, "Enter"], check=True)

            shown = wait_for("Start from which shipped policy?")
            assert "trusted-autoapprove" in shown and "Choice [1]:" in shown
            answer("9")  # not a choice: asked again
            wait_for("'9' is not one of 1-4")
            answer("2")  # local-llm
            wait_for("Which LLM answers sampling requests?")
            answer("3")  # an OpenAI-compatible server on this machine
            wait_for("Base URL [http://127.0.0.1:11434/v1]:")
            answer(llm.base_url)
            shown = wait_for("Model [qwen-local]:")
            assert "models at" in shown and "llama-local" in shown
            answer("llama-local")
            shown = wait_for("Write ")
            assert "LLM check: ollama answered" in shown
            answer("")  # Enter: yes
            shown = wait_for("EXIT=")
        finally:
            subprocess.run([*tmux, "kill-server"], check=False)
    assert "EXIT=0" in shown
    policy = tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml"
    settings = load_settings(str(policy), {})
    assert settings.providers[0].models[0].name == "llama-local"
    assert settings.rules[0].action == "allow"  # local-llm.yaml's rule
    assert llm.requests[-1].body["model"] == "llama-local"


KEY = "sk-init-test-0123456789abcdef"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_interactive_key_file_question_in_a_terminal(tmp_path: Path) -> None:
    """In a terminal init offers the key file first; the pasted key is not echoed and lands in the file."""
    session = f"init-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    with FakeLLMServer("openai", api_key=KEY, models=("gpt-4o-mini",)) as llm:
        env = init_env(tmp_path)
        exports = " ".join(
            f"{k}='{v}'"
            for k, v in env.items()
            if k in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "PATH", "PYTHONPATH")
        )
        command = f"env -i {exports} {PY} -m mcp_sampling_proxy init; echo EXIT=$?; sleep 30"
        subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "120", "-y", "50", command], check=True)
        try:

            def screen() -> str:
                done = subprocess.run(
                    [*tmux, "capture-pane", "-p", "-J", "-t", session, "-S", "-200"], capture_output=True, text=True
                )
                return done.stdout

            def wait_for(text: str) -> str:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    if text in (shown := screen()):
                        return shown
                    time.sleep(0.1)
                raise AssertionError(f"{text!r} not shown:\n{screen()}")

            def answer(text: str) -> None:
                subprocess.run([*tmux, "send-keys", "-t", session, "-l", text], check=True)
                subprocess.run([*tmux, "send-keys", "-t", session, "Enter"], check=True)

            wait_for("Start from which shipped policy?")
            answer("1")
            wait_for("Which LLM answers sampling requests?")
            answer("1")
            wait_for("Base URL [")
            answer(llm.base_url)
            shown = wait_for("Where does the proxy get the API key?")
            assert "reaches the proxy from any host" in " ".join(shown.split()) and "Choice [1]:" in shown
            answer("")  # the key file
            key_file = tmp_path / "config" / "mcp-sampling-proxy" / "openai.key"  # beside the default policy
            wait_for(f"Key file [{key_file}]:")
            answer("")
            wait_for("(not shown):")
            answer(KEY)
            wait_for("Model [gpt-4o-mini]:")
            answer("")
            shown = wait_for("Write ")
            assert "LLM check: openai answered" in shown
            answer("")
            shown = wait_for("EXIT=")
        finally:
            subprocess.run([*tmux, "kill-server"], check=False)
    assert "EXIT=0" in shown and KEY not in shown
    assert key_file.read_text() == KEY + "\n" and key_file.stat().st_mode & 0o777 == 0o600
    policy = tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml"
    assert f'api_key_file: "{key_file}"' in policy.read_text()


def test_with_both_streams_on_one_pipe_the_check_comes_before_nothing_written(tmp_path: Path) -> None:
    """`init ... 2>&1 | less`: the check's lines (stdout, buffered in a pipe) printed after the refusal
    (stderr, not buffered) that they explain."""
    env = init_env(tmp_path)
    env.pop("PYTHONUNBUFFERED", None)  # a user's shell has no such setting: stdout is a buffered pipe
    with FakeLLMServer("openai", api_key="sk-the-right-one-0123456789") as llm:
        done = subprocess.run(
            [*PROXY, "init", "--yes", "--llm", "openai", "--base-url", llm.base_url, "--model", "m"],
            env={**env, "OPENAI_API_KEY": "sk-a-wrong-one-0123456789"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    failed = next(i for i, line in enumerate(lines) if line.startswith("LLM check failed"))
    refused = next(i for i, line in enumerate(lines) if "nothing written" in line)
    assert failed < refused, done.stdout
