"""`type: command` providers through the real proxy: an SDK-written server samples, the proxy
answers by running a stand-in of the user's CLI (tests/helpers/cli_standins.py) found on its PATH.
The policy's command keys, the adapter alone and `doctor`'s check, in process:
tests/unit/providers/test_command_provider_policy.py."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers.cli_standins import install, path_with, runs
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy

pytestmark = pytest.mark.anyio
ALLOW = "rules:\n  - name: allow-all\n    action: allow\n"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def provider(name: str, body: str) -> str:
    lines = "".join(f"      {line}\n" for line in body.strip().splitlines())
    return f"llm:\n  providers:\n    {name}:\n      type: command\n{lines}"


async def call(tmp_path: Path, policy_text: str, tool: str, arguments: dict[str, Any], **env: str) -> Any:
    """Call `tool` of the kitchen-sink server through the proxy, stand-ins first on its PATH."""
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


async def test_claude_preset_without_models_uses_the_cli_default(tmp_path: Path) -> None:
    result = await call(
        tmp_path, provider("cc", "preset: claude") + ALLOW, "sample", {"prompt": "hi"}, STANDIN_ANSWER="hello"
    )
    (run,) = runs(tmp_path / "runs.jsonl")
    assert "--model" not in run["argv"]
    assert run["stdin"] == "hi"  # one user message and no system prompt: the text alone
    # the model the CLI reports (modelUsage), not a name we made up
    assert tool_json(result)["model"] == "claude-sonnet-4-5-20250929"


async def test_codex_preset_reads_the_last_message_file(tmp_path: Path) -> None:
    policy = provider("codex", "preset: codex\nmodels: [gpt-5-codex]\nargs: [-c, 'model_reasoning_effort=low']") + ALLOW
    result = await call(tmp_path, policy, "sample", {"prompt": "Name a colour."}, STANDIN_ANSWER="Teal.")
    assert tool_json(result)["content"] == {"type": "text", "text": "Teal."}
    assert tool_json(result)["model"] == "gpt-5-codex"
    (run,) = runs(tmp_path / "runs.jsonl")
    argv = run["argv"]
    assert argv[:7] == ["exec", "--skip-git-repo-check", "--sandbox", "read-only", "--ephemeral", "--color", "never"]
    assert argv[argv.index("--model") + 1] == "gpt-5-codex"
    assert argv[-3:] == ["-c", "model_reasoning_effort=low", "-"]  # extra args, then the prompt from stdin
    assert argv[argv.index("--output-last-message") + 1].startswith(run["cwd"])
    assert run["stdin"] == "Name a colour."


async def test_codex_preset_takes_images_as_files(tmp_path: Path) -> None:
    params = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image", "data": PNG, "mimeType": "image/png"},
                ],
            }
        ],
        "maxTokens": 50,
    }
    result = await call(
        tmp_path,
        provider("codex", "preset: codex") + ALLOW,
        "sample_raw",
        {"params_json": json.dumps(params)},
        STANDIN_ANSWER="A pixel.",
    )
    assert tool_json(result)["result"]["content"]["text"] == "A pixel."
    (run,) = runs(tmp_path / "runs.jsonl")
    assert run["images"] == [base64.b64decode(PNG).hex()]
    assert run["stdin"] == "What is this?\n[image 1 attached]"


async def test_gemini_preset_reports_tokens_and_model_from_stats(tmp_path: Path) -> None:
    policy = provider("gemini", "preset: gemini\nmodels: [gemini-2.5-pro]") + ALLOW + AUDIT
    result = await call(tmp_path, policy, "sample", {"prompt": "2+2?"}, STANDIN_ANSWER="4")
    assert tool_json(result) == {
        "content": {"type": "text", "text": "4"},
        "model": "gemini-2.5-pro",
        "stopReason": "endTurn",
    }
    (run,) = runs(tmp_path / "runs.jsonl")
    assert run["argv"] == ["--output-format", "json", "--model", "gemini-2.5-pro"]
    assert run["stdin"] == "2+2?\n\n"  # Gemini CLI: piped stdin, a blank line, then the (empty) -p question
    (record,) = audit_records(tmp_path)
    assert (record["input_tokens"], record["output_tokens"]) == (29, 9)  # summed over the models it used


async def test_gemini_json_error_is_reported(tmp_path: Path) -> None:
    result = await call(
        tmp_path, provider("gemini", "preset: gemini") + ALLOW, "sample", {"prompt": "x"}, STANDIN_MODE="json-error"
    )
    message = tool_json(result)["error"]["message"]
    assert "provider 'gemini' (gemini)" in message and "exited with status 41" in message
    assert "Please set an Auth method" in message


async def test_llm_preset_prints_text(tmp_path: Path) -> None:
    policy = provider("llm", "preset: llm\nmodels: [gpt-4o-mini, claude-3.5-haiku]") + ALLOW
    result = await call(tmp_path, policy, "sample", {"prompt": "Say hi", "hints": ["haiku"]}, STANDIN_ANSWER="Hi there")
    assert tool_json(result)["content"]["text"] == "Hi there"
    assert tool_json(result)["model"] == "claude-3.5-haiku"  # the server's hint chose it
    (run,) = runs(tmp_path / "runs.jsonl")
    assert run["argv"] == ["--model", "claude-3.5-haiku"]


# -- custom commands ------------------------------------------------------------------------------


async def test_custom_json_command_with_paths(tmp_path: Path) -> None:
    body = """
command: [my-json-llm, --fast]
output: json
json:
  text: choices.0.message.content
  input_tokens: usage.prompt_tokens
  output_tokens: usage.completion_tokens
  stop_reason: choices.0.finish_reason
models: [house-model]
"""
    result = await call(
        tmp_path, provider("mine", body) + ALLOW + AUDIT, "sample", {"prompt": "x"}, STANDIN_ANSWER="cut sho"
    )
    assert tool_json(result) == {
        "content": {"type": "text", "text": "cut sho"},
        "model": "house-model",
        "stopReason": "maxTokens",
    }
    (record,) = audit_records(tmp_path)
    assert (record["input_tokens"], record["output_tokens"]) == (21, 4)


async def test_custom_text_command_with_the_prompt_as_an_argument(tmp_path: Path) -> None:
    body = 'command: ["my-text-llm", "--model", "{model}"]\nprompt: arg\nmodels: [m1]'
    result = await call(
        tmp_path,
        provider("mine", body) + ALLOW,
        "sample",
        {"prompt": "Count: one two", "stop": ["three"]},
        STANDIN_ANSWER="one two three four",
    )
    # stop sequences are applied to the answer, as the API would have stopped there
    assert tool_json(result)["content"]["text"] == "one two "
    assert tool_json(result)["stopReason"] == "stopSequence"
    (run,) = runs(tmp_path / "runs.jsonl")
    assert run["argv"] == ["--model", "m1", "Count: one two"]
    assert run["stdin"] == ""  # stdin is /dev/null when the prompt is an argument


async def test_a_prompt_that_looks_like_an_option_never_becomes_one(tmp_path: Path) -> None:
    """With `prompt: arg` the server's text is a command-line argument: one starting with '-' would
    be read as a flag (`-f ~/.ssh/id_rsa`), so it is refused unless `--` ends the options."""
    body = 'command: ["my-text-llm", "--model", "{model}"]\nprompt: arg\nmodels: [m1]'
    result = await call(tmp_path, provider("mine", body) + ALLOW, "sample", {"prompt": "-f/home/me/.ssh/id_rsa"})
    error = tool_json(result)["error"]
    assert error["code"] == -32602 and "would read as an option" in error["message"]
    assert runs(tmp_path / "runs.jsonl") == []  # the command never ran
    guarded = 'command: ["my-text-llm", "--model", "{model}", "--"]\nprompt: arg\nmodels: [m1]'
    await call(tmp_path, provider("mine", guarded) + ALLOW, "sample", {"prompt": "-f/home/me/.ssh/id_rsa"})
    (run,) = runs(tmp_path / "runs.jsonl")
    assert run["argv"] == ["--model", "m1", "--", "-f/home/me/.ssh/id_rsa"]


async def test_json_without_the_text_path_says_which_path(tmp_path: Path) -> None:
    body = "command: [my-json-llm]\noutput: json\njson: {text: choices.0.text}"
    result = await call(tmp_path, provider("mine", body) + ALLOW, "sample", {"prompt": "x"})
    message = tool_json(result)["error"]["message"]
    assert "nothing at 'choices.0.text'" in message


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


async def test_an_answer_file_past_the_limit_is_refused_unread(tmp_path: Path) -> None:
    result = await call(
        tmp_path, provider("codex", "preset: codex") + ALLOW, "sample", {"prompt": "x"}, STANDIN_MODE="huge-file"
    )
    error = tool_json(result)["error"]
    assert "wrote more than 16 MiB to its answer file" in error["message"]


async def test_a_fifo_in_place_of_the_answer_file_is_not_read(tmp_path: Path) -> None:
    """The answer file replaced by a FIFO (its directory is private, but a same-user server can find
    it): opening it to read waited for a writer, on the event loop, for good. It counts as no file,
    and the CLI's printed answer is used."""
    with anyio.fail_after(60):
        result = await call(
            tmp_path, provider("codex", "preset: codex") + ALLOW, "sample", {"prompt": "x"}, STANDIN_MODE="fifo-file"
        )
    assert not result.is_error


async def test_missing_command_says_it_is_not_on_path(tmp_path: Path) -> None:
    body = "command: [no-such-llm-cli]"
    result = await call(tmp_path, provider("mine", body) + ALLOW, "sample", {"prompt": "x"})
    message = tool_json(result)["error"]["message"]
    assert "command 'no-such-llm-cli' not found on PATH" in message and "absolute path" in message


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


# -- what a CLI cannot take -----------------------------------------------------------------------

TOOL = {"name": "get_weather", "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}


async def test_tools_are_refused_and_not_advertised(tmp_path: Path) -> None:
    policy = provider("claude", "preset: claude") + ALLOW
    caps = await call(tmp_path, policy, "caps", {})
    assert "tools" not in (tool_json(caps).get("sampling") or {})  # servers are not invited to send tools
    params = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "weather?"}}],
        "maxTokens": 50,
        "tools": [TOOL],
    }
    result = await call(tmp_path, policy, "sample_raw", {"params_json": json.dumps(params)})
    error = tool_json(result)["error"]
    assert error["code"] == -32602
    assert "provider 'claude' (command): command providers cannot use tools" in error["message"]
    assert runs(tmp_path / "runs.jsonl") == []  # the CLI never ran


async def test_images_are_refused_where_the_cli_cannot_take_them(tmp_path: Path) -> None:
    params = {
        "messages": [{"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}}],
        "maxTokens": 50,
    }
    result = await call(
        tmp_path, provider("claude", "preset: claude") + ALLOW, "sample_raw", {"params_json": json.dumps(params)}
    )
    error = tool_json(result)["error"]
    assert error["code"] == -32602
    assert "provider 'claude' (command) cannot take content type 'image' in messages[0]" in error["message"]
    assert runs(tmp_path / "runs.jsonl") == []
