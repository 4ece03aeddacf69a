"""`mcp-sampling-proxy doctor`'s report, run in process: live and dead providers, keys, approval channels,
audit and state dirs, wrapped entries. Among the tests that need a process: doctor starts bwrap to see
whether the sandbox works, the user's login shell to see what a host started from it inherits, and key
commands to see whether a key reaches."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.doctoring import closed_port, doctor
from helpers.support import PY, anthropic_policy, openai_policy, write_policy

from mcp_sampling_proxy.commands.cli import main as cli_main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "host_configs"
KEY = "sk-test-doctor-0123456789"
# home, state and runtime dirs of each test's own, no real keys, no terminal (helpers/doctoring.py)
pytestmark = pytest.mark.usefixtures("environment")


def test_live_providers_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, openai_llm: FakeLLMServer
) -> None:
    with FakeLLMServer("anthropic", api_key=KEY) as claude:
        text = openai_policy(openai_llm.base_url, model="fake-gpt-4o-mini", rules="")
        text = text.replace(
            "llm:\n  providers:\n",
            "llm:\n  providers:\n"
            + anthropic_policy(claude.base_url, model="fake-claude-sonnet", rules="").split("providers:\n", 1)[1],
        )
        text += f"audit:\n  path: {tmp_path / 'logs' / 'audit.jsonl'}\n"
        policy = write_policy(tmp_path, text)
        monkeypatch.setenv("TEST_LLM_KEY", KEY)
        started = time.monotonic()
        code, out = doctor(capsys, "--policy", policy)
    assert code == 0, out
    assert time.monotonic() - started < 5
    assert f"✓ {policy}: valid (0 rules; providers: claude, fake)" in out
    assert f"✓ 'fake' (openai) at {openai_llm.base_url}: GET /models answered 200 (1 model); TEST_LLM_KEY is set" in out
    assert f"✓ 'claude' (anthropic) at {claude.base_url}: GET /v1/models answered 200 (1 model)" in out
    assert f"✓ audit log {tmp_path / 'logs' / 'audit.jsonl'}: writable" in out
    assert f"✓ state directory {tmp_path / 'state'}: writable (created on use)" in out
    assert "everything checked is in order" in out
    assert KEY not in out
    assert openai_llm.last.headers["authorization"] == f"Bearer {KEY}"
    assert claude.last.headers["x-api-key"] == KEY and claude.last.path == "/v1/models"
    assert not (tmp_path / "state").exists() and not (tmp_path / "logs").exists(), "doctor creates nothing"


def test_a_dead_provider_fails_fast_with_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    policy = write_policy(tmp_path, openai_policy(f"http://127.0.0.1:{port}/v1"))
    started = time.monotonic()
    code, out = doctor(capsys, "--policy", policy)
    assert code == 1
    assert time.monotonic() - started < 5
    assert f"✗ 'fake' (openai) at http://127.0.0.1:{port}/v1: connection refused (TEST_LLM_KEY is not set)" in out
    assert f"fix: nothing listens at http://127.0.0.1:{port}/v1: start the server" in out
    assert out.rstrip().endswith("1 problem, 0 warnings")


@pytest.mark.parametrize("key", [None, "sk-wrong-key-0000000000"])
def test_a_refused_key_names_its_variable_never_its_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    with FakeLLMServer("openai", api_key=KEY) as llm:
        policy = write_policy(tmp_path, openai_policy(llm.base_url, model="fake-gpt-4o-mini"))
        if key:
            monkeypatch.setenv("TEST_LLM_KEY", key)
        code, out = doctor(capsys, "--policy", policy)
    assert code == 1
    assert "GET /models: provider 'fake' answered 401" in out
    if key:
        assert "check TEST_LLM_KEY" in out and "(TEST_LLM_KEY is set)" in out
        assert "fix: the key in TEST_LLM_KEY was refused" in out
        assert key not in out
    else:
        assert out.count("TEST_LLM_KEY is not set") == 1, out  # the 401's hint said it, then the key's note again
        assert "fix: set TEST_LLM_KEY (in the host config's env" in out


def test_a_model_the_provider_does_not_list_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], openai_llm: FakeLLMServer
) -> None:
    text = openai_policy(openai_llm.base_url, model="fake-gpt-4o-mini").replace(
        "models: [fake-gpt-4o-mini]", "models: [fake-gpt-4o-mini, gpt-9]"
    )
    code, out = doctor(capsys, "--policy", write_policy(tmp_path, text))
    assert code == 0
    assert "! 'fake' (openai): gpt-9 not among the models it lists" in out
    assert "0 problems, 1 warning" in out


class _NoModelsList(BaseHTTPRequestHandler):
    """An OpenAI-compatible server without GET /models (some proxies and gateways)."""

    protocol_version = "HTTP/1.1"
    completions: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).completions.append(body)
        self._send(
            200,
            {
                "model": body["model"],
                "choices": [{"message": {"role": "assistant", "content": "p"}, "finish_reason": "length"}],
            },
        )

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_without_a_models_list_a_one_token_completion_decides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoModelsList)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/v1"
        code, out = doctor(capsys, "--policy", write_policy(tmp_path, openai_policy(base, model="tiny")))
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0, out
    assert "no models list (GET /models: 404), but a 1-token completion with tiny worked" in out
    assert _NoModelsList.completions[-1]["max_tokens"] == 1


def test_a_provider_that_never_answers_times_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as listener:  # accepts connections (backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        base = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        started = time.monotonic()
        code, out = doctor(capsys, "--policy", write_policy(tmp_path, openai_policy(base)), "--timeout", "0.5")
    assert code == 1
    assert time.monotonic() - started < 3
    assert "no answer within 0.5 s" in out


def test_a_broken_policy_is_reported_with_its_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write_policy(tmp_path, "rules:\n  - name: x\n    action: alow\n")
    code, out = doctor(capsys, "--policy", policy)
    assert code == 1
    assert f"✗ {policy}:3:13: rules[0].action 'alow' is not one of allow, deny, prompt" in out
    assert "`mcp-sampling-proxy policy check FILE`" in out
    assert "not checked: the policy did not load" in out


def test_without_a_policy_or_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = doctor(capsys)
    assert code == 0
    assert "no --policy: providers come from the environment" in out
    assert "! no LLM provider configured" in out
    assert "audit log: off" in out


def test_unwritable_audit_and_state_dirs_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, openai_llm: FakeLLMServer
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MCP_SAMPLING_PROXY_STATE_DIR", str(blocker / "state"))
    text = openai_policy(openai_llm.base_url, model="fake-gpt-4o-mini") + f"audit:\n  path: {blocker}/audit.jsonl\n"
    code, out = doctor(capsys, "--policy", write_policy(tmp_path, text))
    assert code == 1
    assert f"✗ audit log {blocker}/audit.jsonl: {blocker} is not a directory" in out
    assert f"✗ state directory {blocker}/state: {blocker} is not a directory" in out
    assert "fix: make it writable by you, or set MCP_SAMPLING_PROXY_STATE_DIR" in out
    assert "2 problems" in out


def test_console_socket_directory_and_attached_consoles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(run / f"{os.getpid()}.sock"))
    listener.listen(4)
    try:
        code, out = doctor(capsys)
        assert code == 0
        assert "! console: 1 proxy running, no console attached" in out
        assert "fix: run `mcp-sampling-proxy console` in a terminal" in out
        client = socket.socket(socket.AF_UNIX)
        client.connect(str(run / f"{os.getpid()}.sock"))
        accepted, _ = listener.accept()
        try:
            code, out = doctor(capsys)
        finally:
            client.close()
            accepted.close()
        assert "✓ console: 1 proxy running, 1 console attached" in out
    finally:
        listener.close()
    assert "host: Cursor, VS Code, Codex can ask in their own UI (elicitation)" in out


def test_an_unsafe_console_directory_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o777)
    run.chmod(0o777)
    code, out = doctor(capsys)
    assert code == 1
    assert f"✗ console: socket directory unusable: the console runtime dir {run} is open to other users" in out


def test_host_configs_are_summarised(environment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (environment / ".cursor").mkdir()
    shutil.copyfile(FIXTURES / "cursor.mcp.json", environment / ".cursor" / "mcp.json")
    (environment / ".gemini").mkdir()
    (environment / ".gemini" / "settings.json").write_text("{ broken")
    code, out = doctor(capsys)
    assert f"· Cursor (user) {environment}/.cursor/mcp.json: 0 of 2 servers wrapped" in out
    # the host cannot read its file, so none of its servers start: an error, not a warning (it was "!", exit 0)
    assert f"✗ Gemini CLI (user) {environment}/.gemini/settings.json: " in out
    assert "fix: fix the file; the host cannot read it" in out
    assert "\n1 problem, " in out
    assert code == 1


def login_shell(directory: Path, **exports: str) -> Path:
    """A stand-in for the user's login shell (`$SHELL -ilc "env -0"`): what its start-up files export."""
    script = directory / "login-shell"
    assignments = " ".join(f"{name}={value}" for name, value in exports.items())
    script.write_text(f"#!/bin/sh\nexport {assignments}\nexec env -0\n" if exports else "#!/bin/sh\nexec env -0\n")
    script.chmod(0o755)
    return script


def test_four_broken_wrapped_entries_are_four_problems(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each entry is broken in one way the host would hit only when it starts the server."""
    proxy = str(Path(PY).parent / "mcp-sampling-proxy")
    good = write_policy(tmp_path, openai_policy("http://127.0.0.1:9/v1"), "good.yaml")
    bad = write_policy(tmp_path, "rules:\n  - action: alow\n", "bad.yaml")
    empty_bin = tmp_path / "empty-bin"
    empty_bin.mkdir()

    def entry(command: str, policy: str, server: list[str], env: dict[str, str]) -> dict[str, object]:
        return {"command": command, "args": ["--policy", policy, "--", *server], "env": env}

    servers = {
        "moved-proxy": entry(
            str(tmp_path / "old-venv" / "bin" / "mcp-sampling-proxy"), good, [PY, "-V"], {"TEST_LLM_KEY": "k"}
        ),
        "lost-server": entry(
            proxy, good, ["summarizer-mcp-not-installed"], {"TEST_LLM_KEY": "k", "PATH": str(empty_bin)}
        ),
        "bad-policy": entry(proxy, bad, [PY, "-V"], {"TEST_LLM_KEY": "k"}),
        "no-key": entry(proxy, good, [PY, "-V"], {}),
        "fine": entry(proxy, good, ["python3", "-V"], {"TEST_LLM_KEY": "k", "PATH": str(Path(PY).parent)}),
    }
    config = environment / ".cursor" / "mcp.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": servers}, indent=2))
    monkeypatch.delenv("TEST_LLM_KEY", raising=False)

    code, out = doctor(capsys)
    assert code == 1
    wrapped = out.split("\nwrapped servers\n", 1)[1]
    problems = [line.strip() for line in wrapped.splitlines() if line.strip().startswith("✗")]
    assert len(problems) == 4, wrapped
    assert (
        f"✗ Cursor 'moved-proxy': the proxy command {tmp_path}/old-venv/bin/mcp-sampling-proxy is not an "
        "executable file" in wrapped
    )
    assert (
        f"✗ Cursor 'lost-server': the server command 'summarizer-mcp-not-installed' is not found on the PATH "
        f"in the entry's env: PATH={empty_bin}" in wrapped
    )
    assert "✗ Cursor 'bad-policy': its policy is invalid: " in wrapped and "bad.yaml:2:13" in wrapped
    assert "✗ Cursor 'no-key': TEST_LLM_KEY (for provider 'fake') is not set in the entry's env" in wrapped
    fixes = [line.strip() for line in wrapped.splitlines() if line.strip().startswith("fix:")]
    assert len(fixes) == 4
    assert "fix: reinstall mcp-sampling-proxy, or run `mcp-sampling-proxy unwrap --host cursor" in wrapped
    assert "fix: write the command's absolute path in the entry (`which summarizer-mcp-not-installed`)" in wrapped
    assert f"fix: fix the file; `mcp-sampling-proxy policy check {bad}` checks it again" in wrapped
    assert "fix: keep the key out of variables: api_key_file (a 0600 file) or api_key_command" in wrapped
    assert f"or add TEST_LLM_KEY to the entry's env in {config} (the key then sits in that file)" in wrapped
    assert "✗ Cursor 'fine'" not in wrapped and f"✓ Cursor 'fine': upstream {Path(PY).parent}/python3" in wrapped
    assert "\n4 problems, " in out

    # exported in this terminal only, the key does not reach Cursor: started from the desktop, it reads a
    # login shell's environment ...
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    code, out = doctor(capsys)
    assert (
        "'no-key': TEST_LLM_KEY (for provider 'fake') is not set in the entry's env or your login shell's "
        "environment (what Cursor reads at start)" in out
    )
    # ... which has it once the shell's start-up files set it (here a stand-in shell that does)
    monkeypatch.setenv("SHELL", str(login_shell(tmp_path, TEST_LLM_KEY="k")))
    code, out = doctor(capsys)
    assert "'no-key': TEST_LLM_KEY set" in out and out.count("✗ Cursor") == 3


def test_doctor_exits_0_when_every_wrapped_entry_is_sound(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = environment / ".cursor" / "mcp.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"summarizer": {"command": PY, "args": ["-V"]}}}, indent=2))
    assert cli_main(["wrap", "--host", "cursor", "--all"]) == 0
    capsys.readouterr()
    code, out = doctor(capsys)
    assert code == 0, out
    assert f"✓ Cursor 'summarizer': upstream {PY}" in out
    assert "· Cursor 'summarizer': no --policy" in out


def test_an_entry_without_policy_is_checked_against_the_default_policy_file(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --policy the proxy reads the default policy file when it exists (what `init` writes):
    doctor checks that file instead of saying there is no policy."""
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "policy.yaml").write_text("rules:\n  - action: alow\n")
    monkeypatch.setenv("MCP_SAMPLING_PROXY_CONFIG_DIR", str(config_dir))
    config = environment / ".cursor" / "mcp.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"summarizer": {"command": PY, "args": ["-V"]}}}, indent=2))
    assert cli_main(["wrap", "--host", "cursor", "--all"]) == 0
    assert f"the proxy reads {config_dir / 'policy.yaml'}" in capsys.readouterr().out
    code, out = doctor(capsys)
    assert code == 1, out
    assert "✗ Cursor 'summarizer': its policy is invalid" in out and "alow" in out


def test_doctor_checks_wrapped_continue_entries_as_continue_starts_them(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Continue gives a server only HOME, USER, PATH and the like besides its env: a key in the shell
    is not enough, unlike for other hosts."""
    good = write_policy(tmp_path, openai_policy("http://127.0.0.1:9/v1"), "good.yaml")
    config = environment / ".continue" / "config.yaml"
    config.parent.mkdir()
    config.write_text(
        "name: mine\nversion: 0.0.1\nschema: v1\nmcpServers:\n"
        f"  - name: keyed   # has the key\n    command: {json.dumps(PY)}\n    args: [-V]\n"
        "    env:\n      TEST_LLM_KEY: k\n"
        f"  - name: unkeyed\n    command: {json.dumps(PY)}\n    args: [-V]\n"
    )
    block = tmp_path / ".continue" / "mcpServers" / "tools.yaml"
    block.parent.mkdir(parents=True)
    block.write_text(
        f"name: tools\nversion: 0.0.1\nschema: v1\nmcpServers:\n- name: gone\n  command: {PY}\n  args:\n  - -V\n"
    )
    assert cli_main(["wrap", "--host", "continue", "--all", "--policy", good]) == 0
    assert cli_main(["wrap", "--host", "continue", "--scope", "project", "--all", "--policy", good]) == 0
    block.write_text(
        block.read_text()
        .replace(f'"--", "{PY}"', '"--", "not-installed-mcp"')
        .replace(f'- "{PY}"', '- "not-installed-mcp"')
    )
    capsys.readouterr()
    monkeypatch.setenv("TEST_LLM_KEY", "k")  # in this shell, but Continue does not pass it on

    code, out = doctor(capsys)
    assert code == 1
    assert f"Continue (user) {config}: 2 of 2 servers wrapped" in out
    assert f"Continue (project) {block}: 1 of 1 servers wrapped" in out
    wrapped = out.split("\nwrapped servers\n", 1)[1]
    assert "✓ Continue 'keyed': TEST_LLM_KEY set" in wrapped
    assert (
        "✗ Continue 'unkeyed': TEST_LLM_KEY (for provider 'fake') is not set in the entry's env (Continue "
        "passes a server no other variables" in wrapped
    )
    assert "fix: keep the key out of variables: api_key_file (a 0600 file) or api_key_command" in wrapped
    assert f"or add TEST_LLM_KEY to the entry's env in {config} (the key then sits in that file)" in wrapped
    assert "✗ Continue 'gone': the server command 'not-installed-mcp' is not found" in wrapped
    assert f"✓ Continue 'keyed': upstream {PY}" in wrapped


def test_an_azure_provider_is_probed_the_azure_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], openai_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resource's /openai/models with api-version and the api-key header (not /models with a
    Bearer token, which Azure answers 404/401); a deployment name missing from the list is no warning."""
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    root = openai_llm.base_url.removesuffix("/v1")
    policy = write_policy(
        tmp_path,
        f"""llm:
  providers:
    azure:
      type: openai
      base_url: {root}
      api_key_env: AZURE_OPENAI_API_KEY
      azure: {{api_version: "2024-10-21"}}
      models: [my-deployment]
""",
    )
    code, out = doctor(capsys, "--policy", policy)
    probes = [r for r in openai_llm.requests if "models" in r.path or "chat/completions" in r.path]
    first = probes[0]
    assert first.path == "/openai/models" and first.query == "api-version=2024-10-21"
    assert first.headers.get("api-key") == KEY and "authorization" not in first.headers
    assert code == 0, out
    assert "not among the models it lists" not in out
    assert KEY not in out


def test_codex_env_vars_in_either_form_pass_the_key(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codex passes a stdio server only its default variables and those its env_vars lists, as
    names or (newer Codex) as tables with a name; a table with source "remote" is read on a remote
    executor, not here. doctor says which entries will see the key."""
    proxy = str(Path(PY).parent / "mcp-sampling-proxy")
    policy = write_policy(tmp_path, openai_policy("http://127.0.0.1:9/v1"), "good.yaml")
    args = json.dumps(["--policy", policy, "--", PY, "-V"])
    config = environment / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(
        f'[mcp_servers.named]\ncommand = "{proxy}"\nargs = {args}\nenv_vars = ["TEST_LLM_KEY"]\n\n'
        f'[mcp_servers.table]\ncommand = "{proxy}"\nargs = {args}\nenv_vars = [{{ name = "TEST_LLM_KEY" }}]\n\n'
        f'[mcp_servers.remote]\ncommand = "{proxy}"\nargs = {args}\n'
        'env_vars = [{ name = "TEST_LLM_KEY", source = "remote" }]\n\n'
        f'[mcp_servers.none]\ncommand = "{proxy}"\nargs = {args}\n'
    )
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    _, out = doctor(capsys)
    wrapped = out.split("\nwrapped servers\n", 1)[1]
    assert "'named': TEST_LLM_KEY set" in wrapped and "'table': TEST_LLM_KEY set" in wrapped, wrapped
    assert "'remote': TEST_LLM_KEY (for provider 'fake') is not set in the entry's env or its env_vars list" in wrapped
    assert "'none': TEST_LLM_KEY (for provider 'fake') is not set" in wrapped


def test_a_state_file_set_aside_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budgets file that could not be used (here a FIFO put in its place) is moved aside by the
    next proxy, which starts over from empty budgets: doctor says so, so the user learns of it."""
    import os

    from mcp_sampling_proxy.quotas.state import JsonStateFile

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("MCP_SAMPLING_PROXY_STATE_DIR", str(state))
    os.mkfifo(state / "budgets.json")
    JsonStateFile(state / "budgets.json", durable=False).update(lambda data: None)  # as a proxy's next update
    capsys.readouterr()  # (its warning, as that proxy logs it)
    code, out = doctor(capsys)
    assert code == 0
    assert "! budgets.json.corrupt in the state directory: budgets.json could not be used and was set aside" in out
    assert f"fix: look at {state / 'budgets.json.corrupt'}" in out


@pytest.mark.parametrize(
    ("host", "config", "reaches"),
    [
        ("claude-code", ".claude.json", True),  # a CLI started from this terminal: this shell's variables
        ("claude-desktop", ".config/Claude/claude_desktop_config.json", False),  # a desktop app: its own
        ("lmstudio", ".lmstudio/mcp.json", False),
    ],
)
def test_a_key_exported_in_this_shell_counts_only_for_hosts_started_from_it(
    environment: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    host: str,
    config: str,
    reaches: bool,
) -> None:
    """The trap: the key is exported in the shell doctor runs in, the entry has no env, and a desktop app
    starts the proxy without the shell's variables. doctor used to say "TEST_LLM_KEY set" for every host."""
    policy = write_policy(tmp_path, openai_policy("http://127.0.0.1:9/v1"), "good.yaml")
    path = environment / config
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": {"notes": {"command": PY, "args": ["-V"]}}}, indent=2))
    assert cli_main(["wrap", "--host", host, "--all", "--policy", policy]) == 0
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    capsys.readouterr()
    _, out = doctor(capsys)
    wrapped = out.split("\nwrapped servers\n", 1)[1]
    if reaches:
        assert "'notes': TEST_LLM_KEY set" in wrapped, wrapped
    else:
        assert "'notes': TEST_LLM_KEY (for provider 'fake') is not set in the entry's env" in wrapped, wrapped
        assert "starts servers with its own environment, not your shell's" in wrapped
        assert "fix: keep the key out of variables: api_key_file" in wrapped
    # with the key in the entry's env it reaches the proxy from every host
    entry = json.loads(path.read_text())["mcpServers"]["notes"]
    entry["env"] = {"TEST_LLM_KEY": "k"}
    path.write_text(json.dumps({"mcpServers": {"notes": entry}}, indent=2))
    _, out = doctor(capsys)
    assert "'notes': TEST_LLM_KEY set" in out


def test_each_wrapped_entry_says_where_each_providers_key_comes_from_and_whether_it_reaches(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per provider: a key file the proxy reads itself (checked as the proxy reads it: a readable-by-others
    file fails, with the chmod), an api_key_command's program on the PATH the host gives."""
    key_file = environment / "openai.key"
    key_file.write_text("sk-file-key\n")
    key_file.chmod(0o600)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    vault = bin_dir / "vault-cli"
    vault.write_text("#!/bin/sh\necho sk-command-key\n")
    vault.chmod(0o755)
    policy = write_policy(
        tmp_path,
        "llm:\n  providers:\n"
        "    filed:\n      type: openai\n      base_url: http://127.0.0.1:9/v1\n      api_key_file: ~/openai.key\n"
        "      models: [m]\n"
        "    commanded:\n      type: openai\n      base_url: http://127.0.0.1:9/v1\n"
        "      api_key_command: [vault-cli, openai]\n      models: [m2]\n"
        "    local:\n      type: openai\n      base_url: http://127.0.0.1:9/v1\n      models: [m3]\n",
    )
    config = environment / ".config" / "Claude" / "claude_desktop_config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"mcpServers": {"notes": {"command": PY, "args": ["-V"]}}}))
    assert cli_main(["wrap", "--host", "claude-desktop", "--all", "--policy", policy]) == 0
    out = capsys.readouterr().out
    assert "the key of provider 'filed' reaches the proxy from any host: the proxy reads ~/openai.key itself" in out
    # vault-cli is on no PATH: the proxy Claude Desktop starts would not find it

    _, out = doctor(capsys, "--policy", policy)
    providers = out.split("\nLLM providers\n", 1)[1].split("\napproval\n")[0]
    assert "· 'filed': the proxy reads its key from the key file ~/openai.key itself" in providers
    assert "· 'commanded': the proxy runs api_key_command vault-cli openai at start" in providers
    assert "· 'local': no key (a local server)" in providers
    wrapped = out.split("\nwrapped servers\n", 1)[1]
    assert (
        "✓ Claude Desktop 'notes': provider 'filed' key from its key file ~/openai.key, read by the proxy itself"
        in wrapped
    )
    assert (
        "✗ Claude Desktop 'notes': provider 'commanded': api_key_command's program 'vault-cli' is not found" in wrapped
    )
    assert "fix: write its absolute path in api_key_command (`which vault-cli`)" in wrapped
    assert "'local'" not in wrapped  # no key to reach it
    Path(policy).write_text(Path(policy).read_text().replace("[vault-cli, openai]", f"[{vault}, openai]"))
    _, out = doctor(capsys, "--policy", policy)
    assert f"✓ Claude Desktop 'notes': provider 'commanded' key from api_key_command {vault}, run by the proxy" in out

    key_file.chmod(0o644)  # now the proxy would refuse to start
    code, out = doctor(capsys, "--policy", policy)
    wrapped = out.split("\nwrapped servers\n", 1)[1]
    assert code == 1
    assert f"✗ Claude Desktop 'notes': provider 'filed': api_key_file {key_file}: readable by others" in wrapped
    assert f"chmod 600 {key_file}" in wrapped


def test_a_policy_without_providers_needs_a_well_known_key_in_the_hosts_environment(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No llm: section: the proxy takes OPENAI_API_KEY / ANTHROPIC_API_KEY from the host's environment;
    exported in the shell only, they never reach a desktop app's proxy."""
    policy = write_policy(tmp_path, "rules:\n  - name: ask\n    action: prompt\n")
    config = environment / ".config" / "Claude" / "claude_desktop_config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"mcpServers": {"notes": {"command": PY, "args": ["-V"]}}}))
    assert cli_main(["wrap", "--host", "claude-desktop", "--all", "--policy", policy]) == 0
    monkeypatch.setenv("OPENAI_API_KEY", "sk-shell-only")
    capsys.readouterr()
    _, out = doctor(capsys, "--policy", policy)
    wrapped = out.split("\nwrapped servers\n", 1)[1]
    assert "! Claude Desktop 'notes': its policy names no LLM provider, and neither OPENAI_API_KEY" in wrapped
    assert "fix: run `mcp-sampling-proxy init --key-file FILE`" in wrapped
    entry = json.loads(config.read_text())
    entry["mcpServers"]["notes"]["env"] = {"OPENAI_API_KEY": "sk-in-the-entry"}
    config.write_text(json.dumps(entry))
    _, out = doctor(capsys, "--policy", policy)
    assert "✓ Claude Desktop 'notes': OPENAI_API_KEY set (the entry's env): provider 'openai' gets its key" in out


def test_a_refused_key_from_a_key_file_is_named_with_its_file(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The LLM refuses the key the file holds: the fix names the file, not a variable to set."""
    key_file = tmp_path / "openai.key"
    key_file.write_text("sk-stale\n")
    key_file.chmod(0o600)
    with FakeLLMServer("openai", api_key=KEY) as llm:
        policy = write_policy(
            tmp_path,
            f"llm:\n  providers:\n    fake:\n      type: openai\n      base_url: {llm.base_url}\n"
            f"      api_key_file: {key_file}\n      models: [m]\n",
        )
        code, out = doctor(capsys, "--policy", policy)
    assert code == 1
    assert f"(api_key_file {key_file} gave a key)" in out
    assert f"fix: the key from api_key_file {key_file} was refused: check it belongs to this provider" in out
    assert "sk-stale" not in out


def test_each_wrapped_server_shows_what_the_sandbox_grants_it(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under each wrapped server: where it may write and what it may reach; a grant the proxy would refuse
    is a failure naming it; and what the sandbox refused the server lately, with the grant that allows it."""
    from mcp_sampling_proxy.transport.sandbox_notes import Note, keep

    policy = write_policy(
        tmp_path,
        "rules: []\nsandbox:\n  servers:\n    notes: {write: [~/notes], network: [api.example.com]}\n"
        '    greedy: {write: ["~"]}\n',
    )
    config = environment / ".cursor" / "mcp.json"
    config.parent.mkdir()
    servers = {name: {"command": PY, "args": ["-V"]} for name in ("notes", "greedy")}
    config.write_text(json.dumps({"mcpServers": servers}, indent=2))
    assert cli_main(["wrap", "--host", "cursor", "--all", "--name-from-key", "--policy", policy]) == 0
    capsys.readouterr()
    keep(Note("notes", "connect", "evil.example:443", "sandbox.servers.notes.network: [evil.example:443]", 0.0))
    code, out = doctor(capsys)
    assert code == 1, out
    assert (
        "· Cursor 'notes': sandbox grants: writes ~/notes, its data directory; network: only api.example.com "
        "(others asked, or refused) (sandbox.servers.notes)"
    ) in out
    assert "! Cursor 'notes': the sandbox refused it a connection to evil.example:443" in out
    assert "fix: if it needs it: sandbox.servers.notes.network: [evil.example:443]" in out
    (refused,) = [
        line for line in out.splitlines() if "✗ Cursor 'greedy': sandbox.servers.greedy.write: ~ holds " in line
    ]
    assert "~/.cursor/mcp.json (a host's MCP configuration" in refused and "~/.bashrc" in refused


def test_a_server_started_by_npx_with_no_network_is_told_to_grant_its_registry(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sandboxed server started by npx gets an npx cache of its own, which starts empty: with
    `network: false` (an entry written before, when it shared yours) its first start fails after npx waited
    a minute for its registry. doctor says so under the server, with the grant."""
    policy = write_policy(tmp_path, "rules: []\nsandbox:\n  servers:\n    everything: {network: false}\n")
    config = environment / ".cursor" / "mcp.json"
    config.parent.mkdir()
    server = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]}
    config.write_text(json.dumps({"mcpServers": {"everything": server}}, indent=2))
    assert cli_main(["wrap", "--host", "cursor", "--all", "--name-from-key", "--policy", policy]) == 0
    capsys.readouterr()
    _code, out = doctor(capsys)
    assert "Cursor 'everything': sandbox grants: writes its data directory, a runner cache of its own; " in out
    assert "! Cursor 'everything': started by a package runner with network: false: the runner cannot reach" in out
    assert "fix: grant the registry: sandbox.servers.everything.network: [registry.npmjs.org]" in out


def test_a_trusted_file_beside_other_files_is_said_to_be_hidden_file_by_file(
    environment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sandbox hides an audit log that shares its folder with other files by binding over the file, and a
    bind follows the file: the log's next rotation, written there while a server runs, is in its sight.
    doctor says so (where bubblewrap works), and says nothing once the log has a folder of its own."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed: doctor says there is no sandbox instead")
    notes = environment / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("x")
    policy = write_policy(tmp_path, f"audit:\n  path: {notes / 'audit.jsonl'}\nrules: []\n")
    _code, out = doctor(capsys, "--policy", policy)
    assert "! the audit log ~/notes/audit.jsonl shares its folder with other files: a sandboxed server" in out
    assert "fix: give it a folder of its own" in out
    own = environment / "logs" / "mcp"
    own.mkdir(parents=True)
    policy = write_policy(tmp_path, f"audit:\n  path: {own / 'audit.jsonl'}\nrules: []\n", "own.yaml")
    _code, out = doctor(capsys, "--policy", policy)
    assert "shares its folder" not in out
