"""`type: command` providers through the real proxy: an SDK-written server samples, the proxy
answers by running a stand-in of the user's CLI (tests/helpers/cli_standins.py) found on its PATH:
a preset end to end, and what needs the process (a failing CLI's key kept out of the proxy's log, a
key file's key masked, an answer file that is a FIFO, the timeout that kills what the CLI started).
Each preset's and custom command's argv, prompt, answer and errors, with the CLI played in process:
tests/unit/providers/test_command_provider_played.py; the policy's command keys, the adapter alone and
`doctor`'s check: tests/unit/providers/test_command_provider_policy.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers.cli_standins import install, path_with, runs
from helpers.support import PY, proxy_command, proxy_env, sdk_host, tool_json, write_policy

pytestmark = pytest.mark.anyio
ALLOW = "rules:\n  - name: allow-all\n    action: allow\n"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def provider(name: str, body: str) -> str:
    lines = "".join(f"      {line}\n" for line in body.strip().splitlines())
    return f"llm:\n  providers:\n    {name}:\n      type: command\n{lines}"


async def call(tmp_path: Path, policy_text: str, tool: str, arguments: dict[str, Any], **env: str) -> Any:
    """Call `tool` of the small server through the proxy, stand-ins first on its PATH."""
    bin_dir = install(tmp_path / "bin")
    policy = write_policy(tmp_path, policy_text)
    environment = proxy_env(
        PATH=path_with(bin_dir),
        STANDIN_LOG=str(tmp_path / "runs.jsonl"),
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
        **env,
    )
    async with sdk_host(proxy_command(policy), environment, tmp_path / "stderr.log") as client:
        return await client.call_tool(tool, arguments)


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


AUDIT = "audit:\n  path: audit.jsonl\n"


# -- presets --------------------------------------------------------------------------------------


async def test_claude_preset_answers_from_its_json_envelope(tmp_path: Path) -> None:
    policy = provider("claude", "preset: claude\nmodels: [sonnet]") + ALLOW + AUDIT
    result = await call(
        tmp_path,
        policy,
        "sample",
        {"prompt": "Capital of France?", "system": "Be brief."},
        STANDIN_ANSWER="Paris.",
        CLAUDECODE="1",
        CLAUDE_CODE_ENTRYPOINT="cli",
    )
    assert tool_json(result) == {
        "content": {"type": "text", "text": "Paris."},
        "model": "sonnet",
        "stopReason": "endTurn",
    }
    (run,) = runs(tmp_path / "runs.jsonl")
    assert run["argv"] == ["-p", "--output-format", "json", "--tools", "", "--strict-mcp-config", "--model", "sonnet"]
    assert run["stdin"] == "System: Be brief.\n\nUser: Capital of France?"
    # Under Claude Code the proxy inherits CLAUDECODE, which would make `claude` refuse to start.
    assert run["env"]["CLAUDECODE"] is None and run["env"]["CLAUDE_CODE_ENTRYPOINT"] is None
    assert run["env"]["NO_COLOR"] == "1"
    # a private directory of its own, removed afterwards
    assert run["cwd"] != os.getcwd() and "mcp-sampling-proxy-cmd-" in run["cwd"]
    assert not Path(run["cwd"]).exists()
    (record,) = audit_records(tmp_path)
    assert (record["provider"], record["input_tokens"], record["output_tokens"]) == ("claude", 3, 6)


# -- failures -------------------------------------------------------------------------------------


async def test_failing_command_reports_its_stderr_without_the_key(tmp_path: Path) -> None:
    result = await call(
        tmp_path, provider("llm", "preset: llm") + ALLOW, "sample", {"prompt": "x"}, STANDIN_MODE="fail"
    )
    error = tool_json(result)["error"]
    assert error["code"] == -32603
    assert "provider 'llm' (llm): 'llm' exited with status 1" in error["message"]
    assert "quota exhausted for key" in error["message"]
    assert "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345" not in error["message"]
    assert "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345" not in (tmp_path / "stderr.log").read_text()


async def test_a_key_from_a_key_file_is_masked_in_a_commands_error(tmp_path: Path) -> None:
    """The error text goes to the server: a key the proxy holds only from an api_key_file (in no
    environment variable, in no known key shape) is masked in it too, not only in the logs."""
    secret = "zq81-Unshaped-Secret-Value-7734"
    (tmp_path / "key.txt").write_text(secret + "\n")
    (tmp_path / "key.txt").chmod(0o600)
    other = (
        "    other:\n      type: openai\n      base_url: http://127.0.0.1:9/v1\n"
        f"      api_key_file: {tmp_path / 'key.txt'}\n      models: [gpt-4o-mini]\n"
    )
    policy = (
        provider("llm", "preset: llm").replace("llm:\n  providers:\n", "llm:\n  providers:\n" + other)
        + "  default: llm\n"
        + ALLOW
    )
    result = await call(
        tmp_path, policy, "sample", {"prompt": "x"}, STANDIN_MODE="fail", STANDIN_ERROR=f"cannot use {secret} here"
    )
    error = tool_json(result)["error"]
    assert "exited with status 1" in error["message"] and "cannot use" in error["message"]
    assert secret not in error["message"] and secret[:12] not in error["message"]


async def test_a_fifo_in_place_of_the_answer_file_is_not_read(tmp_path: Path) -> None:
    """The answer file replaced by a FIFO (its directory is private, but a same-user server can find
    it): opening it to read waited for a writer, on the event loop, for good. It counts as no file,
    and the CLI's printed answer is used."""
    with anyio.fail_after(60):
        result = await call(
            tmp_path, provider("codex", "preset: codex") + ALLOW, "sample", {"prompt": "x"}, STANDIN_MODE="fifo-file"
        )
    assert not result.is_error


async def test_timeout_kills_the_command_and_what_it_started(tmp_path: Path) -> None:
    policy = provider("llm", "preset: llm\ntimeout: 1") + ALLOW
    started = time.monotonic()
    result = await call(tmp_path, policy, "sample", {"prompt": "x"}, STANDIN_MODE="hang")
    assert time.monotonic() - started < 20
    message = tool_json(result)["error"]["message"]
    assert "did not finish within its 1 s timeout" in message and "llm.providers.llm.timeout" in message
    (run,) = runs(tmp_path / "runs.jsonl")
    deadline = time.monotonic() + 5
    while _alive(run["child"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(run["child"]), "the command's child outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead, it only waits for its parent
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


REAPED = """
import subprocess, sys, time
from mcp_sampling_proxy.system.hardening import reap_orphans, waiting_for
command = subprocess.Popen(["sh", "-c", "exit 7"], start_new_session=True)
if sys.argv[1] == "waited":
    with waiting_for(command.pid):
        time.sleep(0.3)  # it has exited, uncollected
        print(command.pid in reap_orphans(set()), command.wait(5))
else:
    time.sleep(0.3)
    print(command.pid in reap_orphans(set()), command.wait(5))
"""


@pytest.mark.parametrize("waited", [True, False])
def test_a_command_the_proxy_waits_for_is_not_collected_as_an_orphan(waited: bool) -> None:
    """A provider's command runs in a session of its own, as a server's orphans do; the orphan reaper
    (run by every proxy, which is its servers' subreaper) must leave it to the adapter that waits for it,
    or the adapter reads a stolen exit status. Shown with the reaper's own pass, in a process of its own:
    a command marked `waiting_for` keeps its exit status of 7; one not marked is collected (its status
    taken: the adapter would see 0)."""
    done = subprocess.run(
        [PY, "-c", REAPED, "waited" if waited else "not"], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.split() == (["False", "7"] if waited else ["True", "0"])
