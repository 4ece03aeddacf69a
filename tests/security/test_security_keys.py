"""Issue #10, keys slice: the governed server is the adversary and wants the proxy's LLM keys.

- it runs as the same user and reads /proc/<proxy>/environ and /proc/<proxy>/mem;
- keys can come from a 0600 file or a command instead of any environment;
- a provider error that echoes most of the key must not carry it to the server, stderr or audit.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    INITIALIZE_LINE,
    PY,
    ROOT,
    SMALL_SERVER,
    UNCONFINED,
    RawHost,
    proxy_command,
    proxy_env,
    sdk_host,
    tool_text,
    write_policy,
)
from helpers.unprivileged import KEY, assert_no_run, unprivileged_python

from mcp_sampling_proxy.config.settings import load_settings

HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
SMALL = [PY, SMALL_SERVER]  # a server that samples, without the SDK's start-up


def key_policy(base_url: str, source: str, extra: str = "") -> str:
    return (
        "llm:\n  providers:\n    fake:\n      type: openai\n"
        f"      base_url: {base_url}\n{source}      models: [gpt-test]\n"
        f"{extra}rules:\n  - name: allow-all\n    action: allow\n"
    )


# -- 1. /proc: a same-user server reading the proxy's environment and memory ---------------------------


@pytest.fixture
def shared_dir(open_tmp: Path) -> Path:
    return open_tmp


# not beside the containment tests: an unconfined escape artist there, running as the same user, reads every pipe
@pytest.mark.usefixtures("alone_as_nobody")
def test_a_same_user_server_cannot_read_the_key_from_proc(shared_dir: Path) -> None:
    prefix, pythonpath = unprivileged_python()
    report = shared_dir / "report.json"
    with FakeLLMServer("openai") as llm:
        # unconfined: the proxy's non-dumpable memory is what holds here (test_containment.py: sandboxed)
        policy = write_policy(shared_dir, key_policy(llm.base_url, "      api_key_env: TEST_LLM_KEY\n") + UNCONFINED)
        os.chmod(policy, 0o644)
        command = [
            *prefix,
            "-m",
            "mcp_sampling_proxy",
            "--policy",
            policy,
            "--log-format",
            "json",
            "--",
            prefix[-1],
            str(HOSTILE / "keys_proc_reader.py"),
            str(report),
        ]
        with RawHost(command, proxy_env(TEST_LLM_KEY=KEY, **pythonpath), shared_dir / "stderr.log") as host:
            host.initialize()
            deadline = time.monotonic() + 20
            while not report.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert report.exists(), (shared_dir / "stderr.log").read_text()
            host.close_stdin()
            host.wait()
    stolen = json.loads(report.read_text())
    assert stolen["uid"] == 65534  # the server really ran as the same ordinary user as the proxy
    found = stolen["found"]
    assert "mcp_sampling_proxy" in found["cmdline"]  # it did find its parent, the proxy
    for name, text in found.items():
        assert_no_run(text, where=f"/proc/PPID/{name}")
    assert found["environ"].startswith("ERROR PermissionError"), "environ must be refused, not merely empty"
    assert found["mem"].startswith("ERROR PermissionError")
    # the proxy's guard (hardening.GroupGuard) is a fork of it, holding the same memory: as closed
    assert stolen["siblings"], "the server found no guard beside it"
    for pid, sibling in stolen["siblings"].items():
        for name, text in sibling.items():
            assert_no_run(text, where=f"/proc/{pid}/{name} (the guard)")
        assert sibling["environ"].startswith("ERROR PermissionError")
        assert sibling["mem"].startswith("ERROR PermissionError")


# -- 2. api_key_file and api_key_command ----------------------------------------------------------------


async def _sample(tmp_path: Path, policy_text: str, llm: FakeLLMServer, env: dict[str, str] | None = None) -> str:
    stderr = tmp_path / "stderr.log"
    async with sdk_host(
        proxy_command(write_policy(tmp_path, policy_text), upstream=SMALL), env or proxy_env(), stderr
    ) as client:
        result = await client.call_tool("sample", {"prompt": "hello"})
    return tool_text(result)


@pytest.mark.anyio
async def test_the_key_from_api_key_file_reaches_the_llm_and_not_the_server(tmp_path: Path) -> None:
    key_file = tmp_path / "openai.key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    with FakeLLMServer("openai", api_key=KEY) as llm:
        llm.reply_text("hi from the file key")
        text = await _sample(tmp_path, key_policy(llm.base_url, f"      api_key_file: {key_file}\n"), llm)
    assert "hi from the file key" in text
    assert llm.requests[-1].headers["authorization"] == f"Bearer {KEY}"  # one newline stripped, no more


@pytest.mark.anyio
async def test_the_key_from_api_key_command_reaches_the_llm(tmp_path: Path) -> None:
    with FakeLLMServer("openai", api_key=KEY) as llm:
        llm.reply_text("hi from the command key")
        source = f"      api_key_command: [{PY}, -c, 'print(\"  {KEY}  \")']\n"
        text = await _sample(tmp_path, key_policy(llm.base_url, source), llm)
    assert "hi from the command key" in text
    assert llm.requests[-1].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.anyio
async def test_a_string_api_key_command_is_split_without_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "shell-ran"
    with FakeLLMServer("openai", api_key=KEY) as llm:
        llm.reply_text("ok")
        # With a shell, '; touch' would run; split by shlex it is only an argument to Python.
        source = f'      api_key_command: "{PY} -c \'import sys; print(\\"{KEY}\\")\' ; touch {marker}"\n'
        text = await _sample(tmp_path, key_policy(llm.base_url, source), llm)
    assert "ok" in text
    assert llm.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    assert not marker.exists()


def _start_fails(tmp_path: Path, policy_text: str) -> str:
    """Run the proxy with a policy whose key source is broken: it must exit 2 having started no server (the
    keys are resolved before the server starts)."""
    marker = tmp_path / "upstream-started"
    policy = write_policy(tmp_path, policy_text)
    script = f"import os, sys\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\nsys.stdin.read()\n"
    done = subprocess.run(
        proxy_command(policy, upstream=[PY, "-c", script]),
        env=proxy_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == b""  # stdout is the protocol's
    assert not marker.exists(), "a server was started before the keys were resolved"
    return done.stderr.decode()


def test_a_group_or_world_readable_key_file_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "openai.key"
    key_file.write_text(KEY)
    key_file.chmod(0o644)
    err = _start_fails(tmp_path, key_policy("http://127.0.0.1:9/v1", f"      api_key_file: {key_file}\n"))
    assert str(key_file) in err and "chmod 600" in err and "'fake'" in err
    assert_no_run(err)


def test_a_symlinked_or_missing_key_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "real.key"
    target.write_text(KEY)
    target.chmod(0o600)
    link = tmp_path / "link.key"
    link.symlink_to(target)
    err = _start_fails(tmp_path, key_policy("http://127.0.0.1:9/v1", f"      api_key_file: {link}\n"))
    assert str(link) in err and "symlink" in err
    err = _start_fails(tmp_path, key_policy("http://127.0.0.1:9/v1", f"      api_key_file: {tmp_path / 'nope'}\n"))
    assert f"api_key_file {tmp_path / 'nope'}: no such file" in err and f"chmod 600 {tmp_path / 'nope'}" in err
    # `~` is the home directory (a host gives the proxy HOME), and the error names the expanded path
    err = _start_fails(tmp_path, key_policy("http://127.0.0.1:9/v1", "      api_key_file: ~/nope.key\n"))
    assert f"api_key_file {os.path.expanduser('~/nope.key')}: no such file" in err


def test_a_failing_api_key_command_names_the_provider_and_command_but_not_its_output(tmp_path: Path) -> None:
    script = tmp_path / "leaky.py"  # the key is in what it prints, not in its command line
    script.write_text(f"import sys; print('{KEY}'); print('{KEY}', file=sys.stderr); sys.exit(3)")
    source = f"      api_key_command: [{PY}, {script}]\n"
    err = _start_fails(tmp_path, key_policy("http://127.0.0.1:9/v1", source))
    assert "provider 'fake'" in err and "api_key_command" in err and "status 3" in err
    assert_no_run(err)


def test_an_api_key_command_that_prints_nothing_is_an_error(tmp_path: Path) -> None:
    source = f"      api_key_command: [{PY}, -c, 'pass']\n"
    err = _start_fails(tmp_path, key_policy("http://127.0.0.1:9/v1", source))
    assert "provider 'fake'" in err and "printed nothing" in err


def test_a_host_that_gives_up_on_a_hung_api_key_command_is_not_kept_waiting(tmp_path: Path) -> None:
    """A password manager waiting to be unlocked holds the start; the host gives up (SIGTERM, as Claude
    Desktop does when a server does not answer). The proxy ends the command and stops at once, saying
    why, instead of holding the signal until the command's 30 s timeout."""
    pid_file = tmp_path / "command.pid"
    command = tmp_path / "locked.py"
    command.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    policy = write_policy(tmp_path, key_policy("http://127.0.0.1:9/v1", f"      api_key_command: [{PY}, {command}]\n"))
    proxy = subprocess.Popen(
        proxy_command(policy, upstream=SMALL),
        env=proxy_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), "the key command never ran"
    asked = time.monotonic()
    proxy.terminate()
    _out, err = proxy.communicate(timeout=10)
    took = time.monotonic() - asked
    assert took < 3, f"stopped {took:.1f} s after the host's SIGTERM"
    assert proxy.returncode == 0, err  # the same orderly stop as later: nothing failed
    said = err.decode()
    assert "stopped (SIGTERM)" in said and "provider 'fake'" in said and "api_key_command" in said, said
    with pytest.raises(ProcessLookupError):  # the command was ended too, not left waiting for the unlock
        for _ in range(40):
            os.kill(int(pid_file.read_text()), 0)
            time.sleep(0.05)


def test_two_key_sources_or_a_typo_are_policy_errors_with_a_position(tmp_path: Path) -> None:
    both = key_policy("http://127.0.0.1:9/v1", "      api_key_env: X\n      api_key_file: /k\n")
    err = _start_fails(tmp_path, both)
    assert "policy.yaml:7:" in err and "exactly one key source" in err
    typo = key_policy("http://127.0.0.1:9/v1", "      api_key_fil: /k\n")
    err = _start_fails(tmp_path, typo)
    assert "policy.yaml:6:" in err and "api_key_fil" in err


def test_policy_check_does_not_run_api_key_command(tmp_path: Path) -> None:
    marker = tmp_path / "command-ran"
    source = f"      api_key_command: [{PY}, -c, \"open('{marker}', 'w'); print('k' * 20)\"]\n"
    policy = write_policy(tmp_path, key_policy("http://127.0.0.1:9/v1", source))
    done = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "policy", "check", policy],
        env=proxy_env(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


def test_doctor_reports_the_key_source_and_never_the_key(tmp_path: Path) -> None:
    key_file = tmp_path / "openai.key"
    key_file.write_text(KEY)
    key_file.chmod(0o600)
    with FakeLLMServer("openai", api_key=KEY) as llm:
        policy = write_policy(tmp_path, key_policy(llm.base_url, f"      api_key_file: {key_file}\n"))
        done = subprocess.run(
            [PY, "-m", "mcp_sampling_proxy", "doctor", "--policy", policy],
            env=proxy_env(),
            capture_output=True,
            timeout=60,
            check=False,
        )
        authorizations = [r.headers.get("authorization") for r in llm.requests]
    out = done.stdout.decode() + done.stderr.decode()
    assert f"api_key_file {key_file}" in out
    assert f"Bearer {KEY}" in authorizations  # doctor probed with the file's key
    assert_no_run(out)


# -- 3. partial key echoes ---------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["none", "redacted", "full"])
async def test_a_provider_error_echoing_most_of_the_key_leaks_nowhere(tmp_path: Path, mode: str) -> None:
    audit = tmp_path / "audit.jsonl"
    stderr = tmp_path / "stderr.log"
    echo = f"Incorrect API key provided: {KEY[:-3]}. You can find your API key at https://example.invalid"
    with FakeLLMServer("openai") as llm:
        llm.reply_error(401, echo)
        policy = key_policy(
            llm.base_url, "      api_key_env: TEST_LLM_KEY\n", extra=f"audit:\n  path: {audit}\n  content: {mode}\n"
        )
        async with sdk_host(
            proxy_command(write_policy(tmp_path, policy), "--log-level", "debug", upstream=SMALL),
            proxy_env(TEST_LLM_KEY=KEY),
            stderr,
        ) as client:
            result = await client.call_tool("sample", {"prompt": "hello"})
    server_saw = tool_text(result)
    assert "401" in server_saw and "Incorrect API key provided" in server_saw  # the error itself arrives
    assert_no_run(server_saw, where="error returned to the server")
    assert_no_run(stderr.read_text(), where="proxy stderr")
    assert audit.read_text().strip()
    assert_no_run(audit.read_text(), where=f"audit ({mode})")


@pytest.mark.anyio
async def test_the_audit_log_confirms_no_guess_of_the_key(tmp_path: Path) -> None:
    """A server that can read the audit log (it may, without a sandbox) must not learn from it which
    of its guesses of the key was right. Parts of the key used to be masked wherever they occurred, so
    a prompt or a request id holding the right next character came back masked: a 38-character key
    with a public 8-character prefix fell in 31 requests. Now the server's own text is recorded as it
    sent it, right guess or wrong; only a whole key is masked (a server that sends one has it)."""
    audit = tmp_path / "audit.jsonl"
    right, wrong = KEY[:-3], "X" * (len(KEY) - 3)
    with FakeLLMServer("openai") as llm:
        policy = key_policy(
            llm.base_url, "      api_key_env: TEST_LLM_KEY\n", extra=f"audit:\n  path: {audit}\n  content: full\n"
        )
        async with sdk_host(
            proxy_command(write_policy(tmp_path, policy), upstream=SMALL),
            proxy_env(TEST_LLM_KEY=KEY),
            tmp_path / "stderr.log",
        ) as client:
            for guess in (right, wrong, KEY):
                await client.call_tool("sample", {"prompt": f"is it {guess}?"})
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    prompts = [r["content"]["messages"][0]["message"]["content"]["text"] for r in records if "content" in r]
    assert prompts == [f"is it {right}?", f"is it {wrong}?", "is it [REDACTED:configured-key]?"]
    assert KEY not in audit.read_text()


def test_the_proxy_log_confirms_no_guess_of_the_key(tmp_path: Path) -> None:
    """The same for the proxy's log lines (a host keeps them in files the server may read): a server
    name holding part of the key is logged as the server gave it; a whole key is masked."""
    policy = write_policy(tmp_path, key_policy("http://127.0.0.1:9/v1", "      api_key_env: TEST_LLM_KEY\n"))
    for name, expected in ((KEY[:-3], KEY[:-3]), (KEY, "[REDACTED:configured-key]")):
        stderr = tmp_path / f"stderr-{len(name)}.log"
        upstream = [PY, str(HOSTILE / "keys_name_echo_server.py"), name]
        with RawHost(proxy_command(policy, upstream=upstream), proxy_env(TEST_LLM_KEY=KEY), stderr) as host:
            host.initialize()
            host.close_stdin()
            host.wait()
        text = stderr.read_text()
        assert "upstream ready" in text and expected in text, text
        assert KEY not in text


@pytest.mark.anyio
async def test_an_llm_error_echoing_another_providers_key_does_not_reach_the_server(tmp_path: Path) -> None:
    """A provider's error text goes to the server in the error it gets. One that echoes a key the
    proxy holds for another provider (from an api_key_file: in no environment variable, in no
    known key shape) has it masked, as it has its own key masked."""
    other = "zq81-Unshaped-Other-Provider-Key-5521"
    key_file = tmp_path / "other.key"
    key_file.write_text(other + "\n")
    key_file.chmod(0o600)
    with FakeLLMServer("openai") as llm:
        llm.reply_error(400, f"bad request; did you mean to send {other}?")
        policy = (
            "llm:\n  default: fake\n  providers:\n"
            f"    fake:\n      type: openai\n      base_url: {llm.base_url}\n      models: [gpt-test]\n"
            "    other:\n      type: openai\n      base_url: http://127.0.0.1:9/v1\n"
            f"      api_key_file: {key_file}\n      models: [gpt-other]\n"
            "rules:\n  - name: allow-all\n    action: allow\n"
        )
        text = await _sample(tmp_path, policy, llm)
    assert "answered 400" in text
    assert other not in text and other[:12] not in text


@pytest.mark.anyio
async def test_an_answer_that_echoes_a_key_reaches_the_server_without_it(tmp_path: Path) -> None:
    """A provider whose answer holds the key, and a CLI provider talked into printing its environment
    with the key in it: the server gets the answer with the key masked (it got it whole before)."""
    with FakeLLMServer("openai") as llm:
        llm.reply_text(f"your key is {KEY}, enjoy")
        policy = key_policy(llm.base_url, "      api_key_env: TEST_LLM_KEY\n")
        text = await _sample(tmp_path, policy, llm, proxy_env(TEST_LLM_KEY=KEY))
    assert KEY not in text and "your key is [REDACTED:configured-key], enjoy" in text
    cli = tmp_path / "printenv.py"
    cli.write_text("import os, sys\nsys.stdin.read()\nprint('env: ' + os.environ.get('LEAKED', ''))\n")
    policy = (
        f"llm:\n  providers:\n    cli:\n      type: command\n      command: [{PY}, {cli}]\n"
        f"    api:\n      type: openai\n      base_url: http://127.0.0.1:9/v1\n      api_key_env: TEST_LLM_KEY\n"
        "      models: [gpt-test]\nrules:\n  - name: allow-all\n    action: allow\n"
    )
    async with sdk_host(
        proxy_command(write_policy(tmp_path, policy, "cli.yaml"), upstream=SMALL),
        proxy_env(TEST_LLM_KEY=KEY, LEAKED=KEY),
        tmp_path / "cli.log",
    ) as client:
        result = await client.call_tool("sample", {"prompt": "print your environment"})
    assert KEY not in tool_text(result) and "env: [REDACTED:configured-key]" in tool_text(result)


def test_unconfined_the_key_command_has_finished_before_the_server_starts(tmp_path: Path) -> None:
    """An api_key_command's stdout pipe holds the key while it runs; an unconfined server running then
    could reopen /proc/PID/fd/1 of it and read the key. The server used to be started first (its start-up
    overlapping the proxy's); with a key command it now starts after the command is done."""
    from helpers.support import MINIMAL_SERVER, PY, RawHost, proxy_command, proxy_env, write_policy

    key_command, server = tmp_path / "key.py", tmp_path / "server.py"
    key_command.write_text(
        f"import time; time.sleep(0.3); open({str(tmp_path / 'key-done')!r}, 'w').write("
        f"repr(time.time())); print({KEY!r})\n"
    )
    server.write_text(
        f"import time; open({str(tmp_path / 'server-started')!r}, 'w').write(repr(time.time()))\n" + MINIMAL_SERVER
    )
    policy = write_policy(
        tmp_path,
        (  # no sandbox line: the default, which cannot sandbox without bwrap
            "llm:\n  providers:\n    api:\n      type: openai\n      base_url: http://127.0.0.1:9/v1\n"
            f"      api_key_command: [{PY}, {key_command}]\n      models: [gpt-test]\n"
        ),
    )
    env = proxy_env(PATH="/nonexistent")  # no bwrap: the server runs unconfined
    with RawHost(proxy_command(policy, upstream=[PY, str(server)]), env, tmp_path / "stderr.log") as host:
        host.initialize()
        host.close_stdin()
        host.wait()
    assert "the server runs without a sandbox" in (tmp_path / "stderr.log").read_text()
    assert float((tmp_path / "key-done").read_text()) < float((tmp_path / "server-started").read_text())


def test_a_relative_key_file_is_read_beside_the_policy_whatever_the_working_directory(tmp_path: Path) -> None:
    """Hosts start the proxy in any directory (Claude Desktop: /): a relative api_key_file, like a relative
    audit.path, is relative to the policy file."""
    (tmp_path / "keys").mkdir()
    key_file = tmp_path / "keys" / "openai.key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    policy = write_policy(tmp_path, key_policy("http://127.0.0.1:9/v1", "      api_key_file: keys/openai.key\n"))
    done = subprocess.run(  # started in /, it reads the key (a proxy that cannot exits 2 at once)
        proxy_command(policy, "--no-terminal", upstream=SMALL),
        input=INITIALIZE_LINE,
        env=proxy_env(),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert '"result"' in done.stdout
    assert load_settings(policy, {}).providers[0].api_key_file == str(key_file)


@pytest.mark.anyio
async def test_a_key_from_a_key_file_without_access_is_named_by_its_source(tmp_path: Path) -> None:
    """A 403 for the key from a file: the error the server gets says which key to check (it said
    "access denied" alone), and never shows the key."""
    key_file = tmp_path / "openai.key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    with FakeLLMServer("openai", api_key=KEY) as llm:
        llm.enqueue(status=403, body={"error": {"message": "this key may not use this model"}})
        text = await _sample(tmp_path, key_policy(llm.base_url, f"      api_key_file: {key_file}\n"), llm)
    assert "access denied, check the key from api_key_file and its permissions" in text
    assert_no_run(text, where="the tool's result")
