"""`mcp-sampling-proxy init` run in process, as a user runs it without a terminal: with --yes against a
loopback LLM, a key piped on stdin or from a variable. In a terminal (tmux), and the proxy then running
with the file init wrote: tests/e2e/test_init_e2e.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import CommandRun, run_subcommand

from mcp_sampling_proxy.config.settings import load_settings


@pytest.fixture(autouse=True)
def init_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """XDG_CONFIG_HOME and HOME under tmp_path, so `init` writes its documented default path there; no
    terminal; the real lookup of the policy file, not the tests' override."""
    for name, place in (("HOME", "home"), ("XDG_CONFIG_HOME", "config"), ("XDG_STATE_HOME", "state")):
        monkeypatch.setenv(name, str(tmp_path / place))
    monkeypatch.setenv("MCP_SAMPLING_PROXY_NO_TERMINAL", "1")
    monkeypatch.delenv("MCP_SAMPLING_PROXY_CONFIG_DIR", raising=False)


def run_init(*args: str, stdin: str = "") -> CommandRun:
    """`init` in process, its stdin a pipe holding `stdin` (empty: as from /dev/null)."""
    return run_subcommand(["init", *args], stdin=stdin)


def test_refuses_to_overwrite_without_force_and_path_writes_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_sampling_proxy.doctor import files as doctor_files

    assert run_init("--yes").returncode == 0
    policy = tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml"
    policy.write_text("# mine\nrules: []\n")
    again = run_init("--yes", "--from", "strict")
    assert again.returncode == 1
    assert "already exists; nothing written" in again.stderr and "--force" in again.stderr
    assert policy.read_text() == "# mine\nrules: []\n"
    assert run_init("--yes", "--from", "strict", "--force").returncode == 0
    assert "'strict.yaml'" in policy.read_text()
    monkeypatch.setattr(doctor_files, "unavailable", lambda: None)  # bubblewrap can sandbox: not probed by starting it
    checked = run_subcommand(["doctor"])
    assert f"using the default policy file {policy}" in checked.stdout
    elsewhere = tmp_path / "other" / "p.yaml"
    done = run_init("--yes", "--path", str(elsewhere))
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


def test_an_llm_that_does_not_answer_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLMServer("openai") as llm:
        llm.enqueue(status=401, body={"error": {"message": "bad key"}})
        done = run_init(
            "--yes", "--llm", "openai", "--base-url", llm.base_url, "--model", "m", "--key-env", "TEST_LLM_KEY"
        )
    assert "TEST_LLM_KEY is not set" in done.stdout
    assert done.returncode == 1 and "nothing written" in done.stderr
    assert not (tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml").exists()
    monkeypatch.setenv("TEST_LLM_KEY", "sk-wrong")
    with FakeLLMServer("openai") as llm:
        for _ in range(3):
            llm.enqueue(status=401, body={"error": {"message": "bad key"}})
        done = run_init(
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
    done = run_init()
    assert done.returncode == 2
    assert "--yes" in done.stderr


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


@pytest.mark.parametrize("given", ["stdin", "variable"])
def test_key_file_stores_the_key_0600_and_the_policy_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """--key-file: the key (piped, or from the variable init would have used) goes into a 0600 file the
    policy names; the check already used it; the policy names no variable a desktop host would not pass."""
    if given == "variable":
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeLLMServer("openai", api_key=KEY, models=("gpt-4o-mini",)) as llm:
        done = run_init(
            "--yes",
            "--from",
            "trusted-autoapprove",
            "--llm",
            "openai",
            "--base-url",
            llm.base_url,
            "--key-file",
            "~/keys/openai.key",
            stdin=KEY + "\n" if given == "stdin" else "",
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
    done = run_init(
        "--yes",
        "--from",
        "trusted-autoapprove",
        "--llm",
        "anthropic",
        "--key-file",
        str(tmp_path / "a.key"),
        "--no-check",
        stdin=KEY,
    )
    assert done.returncode == 0, done.stderr
    policy = tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml"
    text = policy.read_text()
    settings = load_settings(str(policy), {})
    assert [p.name for p in settings.providers] == ["anthropic"]
    assert "# model: gpt-4o" in text and "#    fast: gpt-4o-mini" in text
    assert all(rule.model is None for rule in settings.rules)
    done = run_init("--yes", "--force", "--from", "trusted-autoapprove", "--llm", "keep")
    assert done.returncode == 0, done.stderr
    text = policy.read_text()
    assert "\nllm:" not in text and "# llm:" in text
    assert load_settings(str(policy), {}).providers == []
    assert load_settings(str(policy), {"OPENAI_API_KEY": KEY}).providers[0].api_key_env == "OPENAI_API_KEY"


def test_key_file_refusals_say_what_to_do(tmp_path: Path) -> None:
    """No key to store; a key file others can read; a file holding another key (without --force)."""
    key_file = tmp_path / "openai.key"
    args = ("--yes", "--llm", "openai", "--model", "m", "--no-check", "--key-file", str(key_file))
    done = run_init(*args, stdin="")
    assert done.returncode == 2
    assert "no key to store: pipe it on stdin" in done.stderr and "or set OPENAI_API_KEY" in done.stderr
    key_file.write_text("sk-old\n")
    key_file.chmod(0o644)
    done = run_init(*args, stdin=KEY)
    assert done.returncode == 1 and f"chmod 600 {key_file}" in done.stderr
    key_file.chmod(0o600)
    done = run_init(*args, stdin=KEY)
    assert done.returncode == 1 and "already holds another key" in done.stderr and "--force" in done.stderr
    assert key_file.read_text() == "sk-old\n"
    assert not (tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml").exists()
    done = run_init(*args, stdin="")  # no new key: the file's own is kept
    assert done.returncode == 0, done.stderr
    assert f"kept the key in {key_file}" in done.stdout
    done = run_init(*args, "--force", stdin=KEY)
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


def test_a_refused_key_from_the_key_file_is_named_as_such(tmp_path: Path) -> None:
    """The LLM refuses the stored key: the check says to check the key file (not a variable), and
    nothing is written."""
    key_file = tmp_path / "openai.key"
    with FakeLLMServer("openai", api_key="sk-the-right-one") as llm:
        done = run_init(
            "--yes",
            "--llm",
            "openai",
            "--base-url",
            llm.base_url,
            "--model",
            "m",
            "--key-file",
            str(key_file),
            stdin=KEY,
        )
    assert done.returncode == 1
    # the key came from stdin: the file is not written yet, so the message names where the key came from
    assert "LLM check failed: provider 'openai' answered 401: it refused the key piped on stdin" in done.stdout
    assert "api_key_file" not in done.stdout
    assert KEY not in done.stdout + done.stderr
    assert not key_file.exists() and not (tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml").exists()


@pytest.mark.parametrize(
    ("piped", "said"),
    [
        (f'"{KEY}"', "the key piped on stdin is wrapped in quotes: give the key alone"),
        (f"'{KEY}'\n", "the key piped on stdin is wrapped in quotes: give the key alone"),
        (f"OPENAI_API_KEY={KEY}", "the key piped on stdin reads `OPENAI_API_KEY=...`, a shell line"),
        (f'export OPENAI_API_KEY="{KEY}"', "the key piped on stdin reads `OPENAI_API_KEY=...`, a shell line"),
    ],
)
def test_a_key_piped_with_quotes_or_as_a_shell_line_is_refused_saying_so(tmp_path: Path, piped: str, said: str) -> None:
    """Stored as piped, such a key got a bare 401 at the check (and at every request after)."""
    key_file = tmp_path / "openai.key"
    with FakeLLMServer("openai", api_key=KEY) as llm:
        done = run_init(
            "--yes",
            "--llm",
            "openai",
            "--base-url",
            llm.base_url,
            "--model",
            "m",
            "--key-file",
            str(key_file),
            stdin=piped,
        )
        assert llm.requests == []  # refused before the check
    assert done.returncode == 2
    assert said in done.stderr and "nothing written" in done.stderr
    assert KEY not in done.stdout + done.stderr
    assert not key_file.exists() and not (tmp_path / "config" / "mcp-sampling-proxy" / "policy.yaml").exists()


def test_a_quoted_key_in_the_variable_is_refused_saying_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", f"'{KEY}'")
    done = run_init("--yes", "--llm", "openai", "--model", "m", "--key-file", str(tmp_path / "k"), "--no-check")
    assert done.returncode == 2
    assert "the key in OPENAI_API_KEY is wrapped in quotes" in done.stderr and KEY not in done.stderr


def test_the_variable_note_says_what_each_desktop_host_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """getting-started's table: Cursor and VS Code started from the desktop pass the login shell's
    variables; Claude Desktop none. init's note says the same (it said Cursor and VS Code pass none)."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    done = run_init("--yes", "--llm", "openai", "--model", "m", "--no-check")
    assert done.returncode == 0, done.stderr
    note = next(line for line in done.stdout.splitlines() if line.startswith("note: the proxy reads the key"))
    assert "Claude Desktop, Zed and LM Studio pass none of your shell's variables" in note
    assert "Cursor, VS Code, Windsurf and Cline started from the desktop pass only what your login shell" in note
