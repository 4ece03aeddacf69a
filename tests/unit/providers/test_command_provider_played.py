"""`type: command` providers, played in memory (tests/helpers/playbook.py): the real relay, services and
command adapter between a host and a server the test plays, with the user's CLI played in process. The one
method that starts the CLI (`CommandAdapter._run`) is replaced by the CLI's part: it notes the argv, the
stdin, the directory and the environment the adapter would start it with, writes what the CLI would write
there, and gives back its exit status, stdout and stderr in the real CLI's documented format (the same as
tests/helpers/cli_standins.py prints). Everything else is the adapter's own: the argv of each preset and of a
custom command, the prompt, which answer it reads, the stop sequences, the tokens, the errors. Through the
real proxy running stand-in executables (their argument parsers, the timeout that kills the process group,
the answer file that is a FIFO, the proxy's log): tests/e2e/test_command_provider.py.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.playbook import Playbook

from mcp_sampling_proxy.providers.command import CommandAdapter

pytestmark = pytest.mark.anyio
ALLOW = "rules:\n  - name: allow-all\n    action: allow\n"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
TOOL = {"name": "get_weather", "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}


@dataclass
class Run:
    """One start of the CLI, as the adapter asked for it (the program's own name left out of argv)."""

    argv: list[str]
    stdin: str | None
    cwd: str
    env: dict[str, str]

    def value_of(self, flag: str) -> str:
        return self.argv[self.argv.index(flag) + 1]


Answer = Callable[[Run], tuple[int, str, str]]  # what the CLI does: (exit status, stdout, stderr)


class PlayedCli:
    """The CLI the adapter runs, played: each run noted, answered by `answer`."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.runs: list[Run] = []


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> PlayedCli:
    played = PlayedCli(lambda run: (0, "ok\n", ""))

    async def run(
        adapter: CommandAdapter, argv: list[str], stdin: bytes | None, cwd: str, extra_env: dict[str, str] | None = None
    ) -> tuple[int, bytes, bytes]:
        started = Run(
            argv[1:], None if stdin is None else stdin.decode(), cwd, {**adapter.environment(), **(extra_env or {})}
        )
        played.runs.append(started)
        status, stdout, stderr = played.answer(started)
        return status, stdout.encode(), stderr.encode()

    monkeypatch.setattr(CommandAdapter, "_run", run)
    return played


def claude(answer: str) -> Answer:
    """`claude -p --output-format json`: one JSON envelope, the model it used in modelUsage."""

    def run(run: Run) -> tuple[int, str, str]:
        model = run.value_of("--model") if "--model" in run.argv else "claude-sonnet-4-5-20250929"
        envelope = {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": answer,
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "cache_read_input_tokens": 15635, "output_tokens": 6},
            "modelUsage": {model: {"inputTokens": 3, "outputTokens": 6, "costUSD": 0.0079825}},
        }
        return 0, json.dumps(envelope), ""

    return run


def codex(answer: str, *, file_text: str | None = None) -> Answer:
    """`codex exec ... -`: progress on stderr, the last message in the --output-last-message file and on stdout."""

    def run(run: Run) -> tuple[int, str, str]:
        Path(run.value_of("--output-last-message")).write_text(answer if file_text is None else file_text)
        return 0, "printed, not the answer\n", f"OpenAI Codex (research preview)\nworkdir: {run.cwd}\n"

    return run


def gemini(answer: str) -> Answer:
    """`gemini --output-format json`: the response, and tokens per model it used in stats."""

    def run(run: Run) -> tuple[int, str, str]:
        model = run.value_of("--model") if "--model" in run.argv else "gemini-2.5-pro"
        tokens = {model: (24, 8), "gemini-2.5-flash-lite": (5, 1)}
        stats = {name: {"tokens": {"prompt": p, "candidates": c, "total": p + c}} for name, (p, c) in tokens.items()}
        return 0, json.dumps({"session_id": "s-1", "response": answer, "stats": {"models": stats}}), ""

    return run


def provider(name: str, body: str) -> str:
    lines = "".join(f"      {line}\n" for line in body.strip().splitlines())
    return f"llm:\n  providers:\n    {name}:\n      type: command\n{lines}"


def asked(text: str, system: str = "", stop: list[str] | None = None, hints: list[str] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": 100,
    }
    if system:
        params["systemPrompt"] = system
    if stop:
        params["stopSequences"] = stop
    if hints:
        params["modelPreferences"] = {"hints": [{"name": hint} for hint in hints]}
    return params


async def sampled(tmp_path: Path, policy: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The server's sampling request answered through the playbook: (the response, its decision record)."""
    async with Playbook(tmp_path, policy) as play:
        await play.handshake()
        answer = await play.sample(params)
        (record,) = [record for record in play.audit() if record.get("event") == "decision"]
        return answer, record


# -- presets --------------------------------------------------------------------------------------


async def test_claude_preset_without_models_uses_the_cli_default(tmp_path: Path, cli: PlayedCli) -> None:
    cli.answer = claude("hello")
    answer, _ = await sampled(tmp_path, provider("cc", "preset: claude") + ALLOW, asked("hi"))
    (run,) = cli.runs
    assert "--model" not in run.argv
    assert run.stdin == "hi"  # one user message and no system prompt: the text alone
    # the model the CLI reports (modelUsage), not a name we made up
    assert answer["result"]["model"] == "claude-sonnet-4-5-20250929"


async def test_claude_preset_renders_the_system_prompt_and_drops_claude_codes_variables(
    tmp_path: Path, cli: PlayedCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDECODE", "1")  # under Claude Code the proxy inherits these; `claude` would refuse
    monkeypatch.setenv("CLAUDE_CODE_ENTRYPOINT", "cli")
    cli.answer = claude("Paris.")
    policy = provider("claude", "preset: claude\nmodels: [sonnet]") + ALLOW
    answer, record = await sampled(tmp_path, policy, asked("Capital of France?", system="Be brief."))
    assert answer["result"] == {
        "role": "assistant",
        "content": {"type": "text", "text": "Paris."},
        "model": "sonnet",
        "stopReason": "endTurn",
    }
    (run,) = cli.runs
    assert run.argv == ["-p", "--output-format", "json", "--tools", "", "--strict-mcp-config", "--model", "sonnet"]
    assert run.stdin == "System: Be brief.\n\nUser: Capital of France?"
    assert "CLAUDECODE" not in run.env and "CLAUDE_CODE_ENTRYPOINT" not in run.env
    assert run.env["NO_COLOR"] == "1"
    assert "mcp-sampling-proxy-cmd-" in run.cwd and not Path(run.cwd).exists()  # private, removed afterwards
    assert (record["provider"], record["input_tokens"], record["output_tokens"]) == ("claude", 3, 6)


async def test_codex_preset_reads_the_last_message_file(tmp_path: Path, cli: PlayedCli) -> None:
    cli.answer = codex("Teal.")
    policy = provider("codex", "preset: codex\nmodels: [gpt-5-codex]\nargs: [-c, 'model_reasoning_effort=low']") + ALLOW
    answer, _ = await sampled(tmp_path, policy, asked("Name a colour."))
    assert answer["result"]["content"] == {"type": "text", "text": "Teal."}  # the file's, not what it printed
    assert answer["result"]["model"] == "gpt-5-codex"
    (run,) = cli.runs
    assert run.argv[:7] == [
        "exec",
        "--skip-git-repo-check",
        "--sandbox",
        "read-only",
        "--ephemeral",
        "--color",
        "never",
    ]
    assert run.value_of("--model") == "gpt-5-codex"
    assert run.argv[-3:] == ["-c", "model_reasoning_effort=low", "-"]  # extra args, then the prompt from stdin
    assert run.value_of("--output-last-message").startswith(run.cwd)
    assert run.stdin == "Name a colour."


async def test_codex_preset_takes_images_as_files(tmp_path: Path, cli: PlayedCli) -> None:
    images: list[bytes] = []

    def with_images(run: Run) -> tuple[int, str, str]:
        images.extend(Path(run.argv[i + 1]).read_bytes() for i, arg in enumerate(run.argv) if arg == "--image")
        return codex("A pixel.")(run)

    cli.answer = with_images
    content = [{"type": "text", "text": "What is this?"}, {"type": "image", "data": PNG, "mimeType": "image/png"}]
    params = {"messages": [{"role": "user", "content": content}], "maxTokens": 50}
    answer, _ = await sampled(tmp_path, provider("codex", "preset: codex") + ALLOW, params)
    assert answer["result"]["content"]["text"] == "A pixel."
    assert images == [base64.b64decode(PNG)]
    assert cli.runs[0].stdin == "What is this?\n[image 1 attached]"


async def test_an_answer_file_past_the_limit_is_refused_unread(tmp_path: Path, cli: PlayedCli) -> None:
    cli.answer = codex("", file_text="x" * (17 * 1024 * 1024))  # a runaway CLI
    answer, _ = await sampled(tmp_path, provider("codex", "preset: codex") + ALLOW, asked("x"))
    assert "wrote more than 16 MiB to its answer file" in answer["error"]["message"]


async def test_gemini_preset_reports_tokens_and_model_from_stats(tmp_path: Path, cli: PlayedCli) -> None:
    cli.answer = gemini("4")
    policy = provider("gemini", "preset: gemini\nmodels: [gemini-2.5-pro]") + ALLOW
    answer, record = await sampled(tmp_path, policy, asked("2+2?"))
    assert answer["result"]["content"] == {"type": "text", "text": "4"}
    assert (answer["result"]["model"], answer["result"]["stopReason"]) == ("gemini-2.5-pro", "endTurn")
    (run,) = cli.runs
    assert run.argv == ["--output-format", "json", "--model", "gemini-2.5-pro"]
    assert run.stdin == "2+2?"  # piped: Gemini CLI runs headless and reads it
    assert (record["input_tokens"], record["output_tokens"]) == (29, 9)  # summed over the models it used


async def test_gemini_json_error_is_reported(tmp_path: Path, cli: PlayedCli) -> None:
    error = {"type": "FatalAuthenticationError", "message": "Please set an Auth method", "code": 41}
    cli.answer = lambda run: (41, json.dumps({"error": error}), "")
    answer, _ = await sampled(tmp_path, provider("gemini", "preset: gemini") + ALLOW, asked("x"))
    message = answer["error"]["message"]
    assert "provider 'gemini' (gemini)" in message and "exited with status 41" in message
    assert "Please set an Auth method" in message


async def test_llm_preset_prints_text_and_the_servers_hint_picks_the_model(tmp_path: Path, cli: PlayedCli) -> None:
    cli.answer = lambda run: (0, "Hi there\n", "")
    policy = provider("llm", "preset: llm\nmodels: [gpt-4o-mini, claude-3.5-haiku]") + ALLOW
    answer, _ = await sampled(tmp_path, policy, asked("Say hi", hints=["haiku"]))
    assert answer["result"]["content"]["text"] == "Hi there"
    assert answer["result"]["model"] == "claude-3.5-haiku"
    assert cli.runs[0].argv == ["--model", "claude-3.5-haiku"]


# -- custom commands ------------------------------------------------------------------------------


async def test_custom_json_command_with_paths(tmp_path: Path, cli: PlayedCli) -> None:
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
    printed = {
        "choices": [{"message": {"content": "cut sho"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 4},
    }
    cli.answer = lambda run: (0, json.dumps(printed), "")
    answer, record = await sampled(tmp_path, provider("mine", body) + ALLOW, asked("x"))
    assert answer["result"]["content"] == {"type": "text", "text": "cut sho"}
    assert (answer["result"]["model"], answer["result"]["stopReason"]) == ("house-model", "maxTokens")
    assert cli.runs[0].argv == ["--fast"]
    assert (record["input_tokens"], record["output_tokens"]) == (21, 4)


async def test_json_without_the_text_path_says_which_path(tmp_path: Path, cli: PlayedCli) -> None:
    cli.answer = lambda run: (0, json.dumps({"choices": [{"message": {"content": "x"}}]}), "")
    body = "command: [my-json-llm]\noutput: json\njson: {text: choices.0.text}"
    answer, _ = await sampled(tmp_path, provider("mine", body) + ALLOW, asked("x"))
    assert "nothing at 'choices.0.text'" in answer["error"]["message"]


async def test_custom_text_command_with_the_prompt_as_an_argument(tmp_path: Path, cli: PlayedCli) -> None:
    cli.answer = lambda run: (0, "one two three four\n\n", "")
    body = 'command: ["my-text-llm", "--model", "{model}"]\nprompt: arg\nmodels: [m1]'
    answer, _ = await sampled(tmp_path, provider("mine", body) + ALLOW, asked("Count: one two", stop=["three"]))
    # stop sequences are applied to the answer, as the API would have stopped there
    assert answer["result"]["content"]["text"] == "one two "
    assert answer["result"]["stopReason"] == "stopSequence"
    (run,) = cli.runs
    assert run.argv == ["--model", "m1", "Count: one two"]
    assert run.stdin is None  # stdin is /dev/null when the prompt is an argument


async def test_a_prompt_that_looks_like_an_option_never_becomes_one(tmp_path: Path, cli: PlayedCli) -> None:
    """With `prompt: arg` the server's text is a command-line argument: one starting with '-' would
    be read as a flag (`-f ~/.ssh/id_rsa`), so it is refused unless `--` ends the options."""
    body = 'command: ["my-text-llm", "--model", "{model}"]\nprompt: arg\nmodels: [m1]'
    answer, _ = await sampled(tmp_path / "a", provider("mine", body) + ALLOW, asked("-f/home/me/.ssh/id_rsa"))
    assert answer["error"]["code"] == -32602 and "would read as an option" in answer["error"]["message"]
    assert cli.runs == []  # the command never ran
    guarded = 'command: ["my-text-llm", "--model", "{model}", "--"]\nprompt: arg\nmodels: [m1]'
    await sampled(tmp_path / "b", provider("mine", guarded) + ALLOW, asked("-f/home/me/.ssh/id_rsa"))
    (run,) = cli.runs
    assert run.argv == ["--model", "m1", "--", "-f/home/me/.ssh/id_rsa"]


# -- failures -------------------------------------------------------------------------------------


async def test_failing_command_reports_its_stderr_without_the_key(tmp_path: Path, cli: PlayedCli) -> None:
    cli.answer = lambda run: (
        1,
        "",
        "starting...\nError: quota exhausted for key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345\n",
    )
    answer, _ = await sampled(tmp_path, provider("llm", "preset: llm") + ALLOW, asked("x"))
    error = answer["error"]
    assert error["code"] == -32603
    assert "provider 'llm' (llm): 'llm' exited with status 1" in error["message"]
    assert "quota exhausted for key" in error["message"]
    assert "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345" not in error["message"]


async def test_missing_command_says_it_is_not_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # the real `_run`: it looks the program up before it starts anything
    answer, _ = await sampled(tmp_path, provider("mine", "command: [no-such-llm-cli]") + ALLOW, asked("x"))
    message = answer["error"]["message"]
    assert "command 'no-such-llm-cli' not found on PATH" in message and "absolute path" in message


# -- what a CLI cannot take -----------------------------------------------------------------------


async def test_tools_are_refused_and_not_advertised(tmp_path: Path, cli: PlayedCli) -> None:
    async with Playbook(tmp_path, provider("claude", "preset: claude") + ALLOW) as play:
        initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "h", "version": "1"}}
        play.host.says({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize})
        offered = (await play.server.next())["params"]["capabilities"]
    assert "tools" not in offered["sampling"]  # servers are not invited to send tools
    answer, _ = await sampled(
        tmp_path / "call", provider("claude", "preset: claude") + ALLOW, {**asked("weather?"), "tools": [TOOL]}
    )
    assert answer["error"]["code"] == -32602
    assert "provider 'claude' (command): command providers cannot use tools" in answer["error"]["message"]
    assert cli.runs == []  # the CLI never ran


async def test_images_are_refused_where_the_cli_cannot_take_them(tmp_path: Path, cli: PlayedCli) -> None:
    params = {
        "messages": [{"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}}],
        "maxTokens": 50,
    }
    answer, _ = await sampled(tmp_path, provider("claude", "preset: claude") + ALLOW, params)
    assert answer["error"]["code"] == -32602
    assert "provider 'claude' (command) cannot take content type 'image' in messages[0]" in answer["error"]["message"]
    assert cli.runs == []
