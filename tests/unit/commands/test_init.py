"""`mcp-sampling-proxy init` as a user runs it: in a terminal (tmux), or with --yes, against a loopback LLM;
then the proxy, started without --policy, runs with the file it wrote."""

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


def test_refuses_to_overwrite_without_force_and_path_writes_elsewhere(tmp_path: Path) -> None:
    env = init_env(tmp_path)
    assert run_init(env, "--yes").returncode == 0
    policy = tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml"
    policy.write_text("# mine\nrules: []\n")
    again = run_init(env, "--yes", "--from", "strict")
    assert again.returncode == 1
    assert "already exists; nothing written" in again.stderr and "--force" in again.stderr
    assert policy.read_text() == "# mine\nrules: []\n"
    assert run_init(env, "--yes", "--from", "strict", "--force").returncode == 0
    assert "'strict.yaml'" in policy.read_text()
    doctor = subprocess.run([*PROXY, "doctor"], env=env, capture_output=True, text=True, timeout=60)
    assert f"using the default policy file {policy}" in doctor.stdout
    elsewhere = tmp_path / "other" / "p.yaml"
    done = run_init(env, "--yes", "--path", str(elsewhere))
    assert done.returncode == 0
    assert elsewhere.is_file()
    # not the default path: neither the file nor init says the proxy reads it without --policy
    assert "without --policy" not in done.stdout + elsewhere.read_text()
    assert f"the proxy uses this file when started with --policy {elsewhere}" in done.stdout
    assert "Start the proxy with --policy and this file's path to use it." in elsewhere.read_text()
    # the audit comment names a command that works as written
    audit_line = next(line for line in elsewhere.read_text().splitlines() if line.startswith("  path: "))
    path = audit_line.split()[1]
    assert audit_line.endswith(f"mcp-sampling-proxy audit tail|verify|summary {path}")


def test_an_llm_that_does_not_answer_writes_nothing(tmp_path: Path) -> None:
    env = init_env(tmp_path)
    with FakeLLMServer("openai") as llm:
        llm.enqueue(status=401, body={"error": {"message": "bad key"}})
        done = run_init(
            env, "--yes", "--llm", "openai", "--base-url", llm.base_url, "--model", "m", "--key-env", "TEST_LLM_KEY"
        )
    assert "TEST_LLM_KEY is not set" in done.stdout
    assert done.returncode == 1 and "nothing written" in done.stderr
    assert not (tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml").exists()
    with FakeLLMServer("openai") as llm:
        for _ in range(3):
            llm.enqueue(status=401, body={"error": {"message": "bad key"}})
        done = run_init(
            {**env, "TEST_LLM_KEY": "sk-wrong"},
            "--yes",
            "--llm",
            "openai",
            "--base-url",
            llm.base_url,
            "--model",
            "m",
            "--key-env",
            "TEST_LLM_KEY",
        )
    assert "LLM check failed" in done.stdout and "401" in done.stdout
    assert "sk-wrong" not in done.stdout + done.stderr
    assert done.returncode == 1
    assert not (tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml").exists()


def test_without_a_terminal_it_asks_for_yes(tmp_path: Path) -> None:
    done = run_init(init_env(tmp_path))
    assert done.returncode == 2
    assert "--yes" in done.stderr


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


def test_values_from_the_user_or_the_llm_server_are_quoted_in_the_policy() -> None:
    """A model name from a server's GET /models (picked with --yes) or a typed base URL cannot
    change the file's meaning: `a, b` stays one model, `#` does not cut the line."""
    from mcp_sampling_proxy.commands.policy_template import LLMChoice, render, shipped_text
    from mcp_sampling_proxy.config.settings import parse_settings

    llm = LLMChoice(name="local", type="openai", base_url="http://127.0.0.1:1/v1#x", key_env=None, model="a, b]# c")
    settings = parse_settings(render(shipped_text("local-llm"), "local-llm", llm, "/tmp/audit.jsonl"), "policy.yaml")
    provider = next(p for p in settings.providers if p.name == "local")
    assert provider.base_url == "http://127.0.0.1:1/v1#x"
    assert provider.models[0].name == "a, b]# c"


KEY = "sk-init-test-0123456789abcdef"


def run_init_with_stdin(env: dict[str, str], stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PROXY, "init", *args], env=env, capture_output=True, text=True, timeout=60, input=stdin)


@pytest.mark.parametrize("given", ["stdin", "variable"])
def test_key_file_stores_the_key_0600_and_the_policy_names_it(tmp_path: Path, given: str) -> None:
    """--key-file: the key (piped, or from the variable init would have used) goes into a 0600 file the
    policy names; the check already used it; the policy names no variable a desktop host would not pass."""
    env = init_env(tmp_path, **({"OPENAI_API_KEY": KEY} if given == "variable" else {}))
    with FakeLLMServer("openai", api_key=KEY, models=("gpt-4o-mini",)) as llm:
        done = run_init_with_stdin(
            env,
            KEY + "\n" if given == "stdin" else "",
            "--yes",
            "--from",
            "trusted-autoapprove",
            "--llm",
            "openai",
            "--base-url",
            llm.base_url,
            "--key-file",
            "~/keys/openai.key",
        )
        assert done.returncode == 0, done.stderr
        assert "LLM check: openai answered" in done.stdout  # sent with the key: the server requires it
    key_file = tmp_path / "home" / "keys" / "openai.key"
    assert key_file.read_text() == KEY + "\n"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert key_file.parent.stat().st_mode & 0o777 == 0o700
    assert KEY not in done.stdout + done.stderr
    policy = tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml"
    text = policy.read_text()
    assert 'api_key_file: "~/keys/openai.key"' in text and KEY not in text
    settings = load_settings(str(policy), {})  # as a proxy with this HOME reads it
    assert [p.name for p in settings.providers] == ["openai"]
    assert settings.providers[0].api_key_file is not None
    # the shipped anthropic provider's variable is not set: commented out, with what names its model
    assert "#    anthropic:" in text and "ANTHROPIC_API_KEY is not set" in text
    assert "provider 'anthropic' of trusted-autoapprove.yaml is commented out" in done.stdout


def test_a_provider_of_the_shipped_policy_without_its_key_is_commented_out_with_its_references(
    tmp_path: Path,
) -> None:
    """Anthropic chosen; the shipped openai provider's key is missing: it, the alias and the rule's
    `model:` that name its models are commented out, and the file loads; with neither key, --llm keep
    comments out the whole llm section (the proxy then takes its LLM from the environment)."""
    env = init_env(tmp_path)
    done = run_init_with_stdin(
        env,
        KEY,
        "--yes",
        "--from",
        "trusted-autoapprove",
        "--llm",
        "anthropic",
        "--key-file",
        str(tmp_path / "a.key"),
        "--no-check",
    )
    assert done.returncode == 0, done.stderr
    policy = tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml"
    text = policy.read_text()
    settings = load_settings(str(policy), {})
    assert [p.name for p in settings.providers] == ["anthropic"]
    assert "# model: gpt-4o" in text and "#    fast: gpt-4o-mini" in text
    assert all(rule.model is None for rule in settings.rules)
    done = run_init(env, "--yes", "--force", "--from", "trusted-autoapprove", "--llm", "keep")
    assert done.returncode == 0, done.stderr
    text = policy.read_text()
    assert "\nllm:" not in text and "# llm:" in text
    assert load_settings(str(policy), {}).providers == []
    assert load_settings(str(policy), {"OPENAI_API_KEY": KEY}).providers[0].api_key_env == "OPENAI_API_KEY"


def test_key_file_refusals_say_what_to_do(tmp_path: Path) -> None:
    """No key to store; a key file others can read; a file holding another key (without --force)."""
    env = init_env(tmp_path)
    key_file = tmp_path / "openai.key"
    args = ("--yes", "--llm", "openai", "--model", "m", "--no-check", "--key-file", str(key_file))
    done = run_init_with_stdin(env, "", *args)
    assert done.returncode == 2
    assert "no key to store: pipe it on stdin" in done.stderr and "or set OPENAI_API_KEY" in done.stderr
    key_file.write_text("sk-old\n")
    key_file.chmod(0o644)
    done = run_init_with_stdin(env, KEY, *args)
    assert done.returncode == 1 and f"chmod 600 {key_file}" in done.stderr
    key_file.chmod(0o600)
    done = run_init_with_stdin(env, KEY, *args)
    assert done.returncode == 1 and "already holds another key" in done.stderr and "--force" in done.stderr
    assert key_file.read_text() == "sk-old\n"
    assert not (tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml").exists()
    done = run_init_with_stdin(env, "", *args)  # no new key: the file's own is kept
    assert done.returncode == 0, done.stderr
    assert f"kept the key in {key_file}" in done.stdout
    done = run_init_with_stdin(env, KEY, *args, "--force")
    assert done.returncode == 0, done.stderr
    assert key_file.read_text() == KEY + "\n"


def test_the_menu_shows_each_description_whole() -> None:
    """The shipped policies' descriptions run over two comment lines; the menu shows all of it."""
    from mcp_sampling_proxy.commands.init import _choose
    from mcp_sampling_proxy.commands.policy_template import SHIPPED, shipped_summary

    shown: list[str] = []

    def ask(question: str, default: str) -> str:
        shown.append(question)
        return default

    _choose("Start from?", [(n, shipped_summary(n)) for n in SHIPPED], "default", ask)
    menu = " ".join(line.strip() for line in shown[0].splitlines())
    assert "a daily token budget (shared by all your proxies, kept across restarts); anything else is asked." in menu
    assert "no API key, no data leaving the machine." in menu
    assert all(len(line) < 120 for line in shown[0].splitlines())


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


def test_a_refused_key_from_the_key_file_is_named_as_such(tmp_path: Path) -> None:
    """The LLM refuses the stored key: the check says to check the key file (not a variable), and
    nothing is written."""
    env = init_env(tmp_path)
    key_file = tmp_path / "openai.key"
    with FakeLLMServer("openai", api_key="sk-the-right-one") as llm:
        done = run_init_with_stdin(
            env,
            KEY,
            "--yes",
            "--llm",
            "openai",
            "--base-url",
            llm.base_url,
            "--model",
            "m",
            "--key-file",
            str(key_file),
        )
    assert done.returncode == 1
    assert "LLM check failed: provider 'openai' answered 401: check the key from api_key_file" in done.stdout
    assert KEY not in done.stdout + done.stderr
    assert not key_file.exists() and not (tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml").exists()
