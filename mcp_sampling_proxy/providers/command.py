"""The `command` provider: answer sampling by running a CLI the user is already logged into.

Claude Code, Codex, Gemini CLI and Simon Willison's `llm` each have a non-interactive mode
that reads a prompt and prints an answer, and people whose host cannot sample often pay for
one of them already. So a provider may be a command: the request is rendered as a plain-text
transcript, given on stdin (or as an argument), and the answer read from stdout (plain text, or
JSON with a path to the text), or from a file the command writes (Codex's last message).

Each preset states the meter it spends (`PresetFacts`, config/providers.py: shown in `--help`, the docs
and `doctor`), since that changed under people in 2026, and runs its CLI with the CLI's own tools off
and never with a permission bypass: the prompt is the server's, and an agent it could drive would act
on the user's machine. The policy refuses a bypass flag in `args:` or `command:`, and `agy`.

How it is run, and why:
- An argv list, never a shell: nothing in a prompt is ever interpreted.
- In a new session (its own process group), so a timeout or a cancelled request kills the
  whole tree the CLI started, not just its first process.
- In a fresh private temporary directory: agent CLIs read project files (CLAUDE.md, AGENTS.md,
  GEMINI.md) and act on the working directory; the proxy's own directory is none of their business.
- With the proxy's environment (the user's own CLI needs its login and config), plus NO_COLOR=1,
  but without the proxy's key variables unless `pass_env:` names them (a same-user server could
  read the CLI's /proc/PID/environ where no sandbox hides it);
  the claude preset drops CLAUDECODE / CLAUDE_CODE_ENTRYPOINT, which make Claude Code refuse
  to start when the proxy itself runs under Claude Code.
- stderr is kept (the last 64 KiB) for the error message, clipped and scrubbed of key shapes and
  of the values of secret-looking environment variables.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process
from msgspec import Struct

from mcp_sampling_proxy.config.child_env import helper_environment
from mcp_sampling_proxy.config.providers import (
    COMMAND_DEFAULT_MODEL,
    PRESET_FACTS,
    CommandSpec,
    PresetFacts,
    ProviderConfig,
)
from mcp_sampling_proxy.log import known_secrets
from mcp_sampling_proxy.protocol.content import as_blocks
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams
from mcp_sampling_proxy.providers.base import MAX_ANSWER_BYTES, Completion, LLMError, UnsupportedContentError
from mcp_sampling_proxy.providers.errors import unsupported, unsupported_role
from mcp_sampling_proxy.system.hardening import waiting_for
from mcp_sampling_proxy.system.shared_files import open_regular
from mcp_sampling_proxy.text.redact import Redactor
from mcp_sampling_proxy.text.sanitize import one_line

MAX_STDOUT = MAX_ANSWER_BYTES
STDERR_KEPT = 64 * 1024
DETAIL_LIMIT = 400
# Linux refuses a single argument longer than this (MAX_ARG_STRLEN); larger prompts need stdin.
MAX_ARG_BYTES = 128 * 1024 - 1
KILL_GRACE = 1.0  # seconds between SIGTERM and SIGKILL to the command's process group
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
STOP_REASONS = {
    "end_turn": "endTurn",
    "stop": "endTurn",
    "STOP": "endTurn",
    "endTurn": "endTurn",
    "max_tokens": "maxTokens",
    "length": "maxTokens",
    "MAX_TOKENS": "maxTokens",
    "maxTokens": "maxTokens",
    "stop_sequence": "stopSequence",
    "stopSequence": "stopSequence",
}
IMAGE_SUFFIXES = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/jpg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
}


class Output(Struct, frozen=True):
    """What a command answered, before it becomes a Completion."""

    text: str
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    stop_reason: str | None = None


class Preset(Struct, frozen=True):
    """The documented non-interactive invocation of one agent CLI."""

    executable: str
    flags: tuple[str, ...]
    model_flag: str
    output: str  # text | json
    tail: tuple[str, ...] = ()  # after any extra `args:` (codex's `-`: the prompt is on stdin)
    drop_env: tuple[str, ...] = ()
    images_flag: str | None = None  # the CLI takes image files with this flag
    parse_json: Callable[[Any, str], Output] | None = None
    output_file_flag: str | None = None  # the CLI writes its answer to the file named after this flag
    # settings the CLI reads from the file this variable names, written to the run's private directory
    settings_env: str | None = None
    settings: dict[str, Any] | None = None

    @property
    def facts(self) -> PresetFacts:
        """The meter it spends and how its tools are off (config/providers.py PRESET_FACTS)."""
        return PRESET_FACTS[self.executable]


def _claude(data: Any, where: str) -> Output:
    """Claude Code `-p --output-format json`: {type: result, is_error, result, stop_reason, usage, modelUsage}."""
    if not isinstance(data, dict):
        raise LLMError(f"{where} printed JSON that is not an object")
    if data.get("is_error"):
        raise LLMError(f"{where} reported an error: {one_line(str(data.get('result') or data.get('subtype')), 300)}")
    usage = _mapping(data.get("usage"))
    models = data.get("modelUsage")
    model = max(models, key=lambda m: _output_tokens(models[m])) if isinstance(models, dict) and models else None
    return Output(
        _text_at(data, "result", where),
        model,
        _int(usage.get("input_tokens")),
        _int(usage.get("output_tokens")),
        _str(data.get("stop_reason")),
    )


def _gemini(data: Any, where: str) -> Output:
    """Gemini CLI `--output-format json`: {response, stats: {models: {NAME: {tokens: {prompt, candidates}}}}, error}."""
    if not isinstance(data, dict):
        raise LLMError(f"{where} printed JSON that is not an object")
    error = data.get("error")
    if isinstance(error, dict) and error:
        raise LLMError(f"{where} reported an error: {one_line(str(error.get('message') or error), 300)}")
    stats = _mapping(data.get("stats"))
    models = {
        name: _mapping(m.get("tokens")) for name, m in _mapping(stats.get("models")).items() if isinstance(m, dict)
    }
    prompt = [_int(t.get("prompt")) for t in models.values()]
    candidates = [_int(t.get("candidates")) for t in models.values()]
    model = max(models, key=lambda m: _int(models[m].get("candidates")) or 0) if models else None
    return Output(
        _text_at(data, "response", where),
        model,
        sum(n for n in prompt if n is not None) if models else None,
        sum(n for n in candidates if n is not None) if models else None,
    )


def _output_tokens(usage: Any) -> int:
    return (_int(usage.get("outputTokens")) or 0) if isinstance(usage, dict) else 0


# Gemini CLI's system settings override the user's and the project's (geminicli.com docs/cli/enterprise.md):
# an allowlist naming no real tool or MCP server leaves the model none, whatever ~/.gemini/settings.json says.
_GEMINI_NOTHING = "mcp-sampling-proxy-allows-none"
_GEMINI_BUILT_INS = [
    "run_shell_command",
    "write_file",
    "replace",
    "read_file",
    "read_many_files",
    "list_directory",
    "glob",
    "search_file_content",
    "google_web_search",
    "web_fetch",
    "save_memory",
    "write_todos",
]
GEMINI_SETTINGS: dict[str, Any] = {
    "tools": {"core": [_GEMINI_NOTHING], "exclude": _GEMINI_BUILT_INS},
    "mcp": {"allowed": [_GEMINI_NOTHING]},
}

PRESETS: dict[str, Preset] = {
    # Claude Code 2.x: print mode, JSON envelope, no built-in tools, none of the user's MCP servers.
    "claude": Preset(
        "claude",
        ("-p", "--output-format", "json", "--tools", "", "--strict-mcp-config"),
        "--model",
        "json",
        drop_env=("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT"),
        parse_json=_claude,
    ),
    # Codex CLI: `codex exec`, no shell, web search or MCP servers, read-only sandbox, no session files, the last
    # message to a file, prompt from stdin. (`-c` overrides config.toml; codex-rs features: shell_tool, unified_exec.)
    "codex": Preset(
        "codex",
        (
            "exec",
            "--skip-git-repo-check",
            "--sandbox",
            "read-only",
            "--ephemeral",
            "--color",
            "never",
            "-c",
            "features.shell_tool=false",
            "-c",
            "features.unified_exec=false",
            "-c",
            'web_search="disabled"',
            "-c",
            "mcp_servers={}",
        ),
        "--model",
        "text",
        tail=("-",),
        images_flag="--image",
        output_file_flag="--output-last-message",
    ),
    # Gemini CLI (API key only since 2026-06-18): headless because stdin is not a terminal; the piped text is the
    # prompt; its tools and MCP servers off through a system settings file of the run's own.
    "gemini": Preset(
        "gemini",
        ("--output-format", "json"),
        "--model",
        "json",
        parse_json=_gemini,
        settings_env="GEMINI_CLI_SYSTEM_SETTINGS_PATH",
        settings=GEMINI_SETTINGS,
    ),
    # llm (Simon Willison's CLI): reads the prompt from stdin, prints the answer.
    "llm": Preset("llm", (), "--model", "text"),
}


class CommandAdapter:
    """Fulfils sampling by running the provider's command once per request."""

    def __init__(self, config: ProviderConfig):
        if config.command is None:
            raise ValueError(f"provider '{config.name}' has no command")
        self.config = config
        self.spec: CommandSpec = config.command
        self.preset = PRESETS.get(self.spec.preset or "")
        self.label = f"provider '{config.name}' ({self.spec.preset or 'command'})"

    @property
    def supports_tools(self) -> bool:
        return False

    async def aclose(self) -> None:
        return None

    async def complete(self, params: CreateMessageParams, model: str) -> Completion:
        images = self._images(params)
        prompt = render_prompt(self.config, params, images_ok=bool(self.preset and self.preset.images_flag))
        with tempfile.TemporaryDirectory(prefix="mcp-sampling-proxy-cmd-", ignore_cleanup_errors=True) as workdir:
            output_file = str(Path(workdir) / "answer.txt")
            image_files = _write_images(self.config, images, Path(workdir))
            argv, stdin = self._argv(model, prompt, output_file, image_files)
            status, stdout, stderr = await self._run(argv, stdin, workdir, self._settings_env(Path(workdir)))
            written = _read_if_exists(output_file, MAX_STDOUT)
        if status != 0:
            raise LLMError(self._failure(status, stdout, stderr), provider=self.config.name)
        if len(written) > MAX_STDOUT:  # read no further: a runaway CLI must not take the proxy's memory
            raise LLMError(
                f"{self.label} wrote more than {MAX_STDOUT // (1024 * 1024)} MiB to its answer file",
                provider=self.config.name,
            )
        uses_file = (self.preset is not None and self.preset.output_file_flag is not None) or (
            self.preset is None and any("{output_file}" in a for a in self.spec.argv)
        )
        out = self._parse(written if uses_file and written else stdout)
        text, stop = _apply_stop_sequences(out.text, params.get("stopSequences") or [])
        stop_reason = stop or STOP_REASONS.get(out.stop_reason or "", out.stop_reason or "endTurn")
        return Completion(
            content=[{"type": "text", "text": text}],
            model=out.model or model,
            stop_reason=stop_reason,
            input_tokens=out.input_tokens,
            output_tokens=out.output_tokens,
        )

    # -- the command line ----------------------------------------------------------------------

    def _argv(
        self, model: str, prompt: str, output_file: str, image_files: list[str]
    ) -> tuple[list[str], bytes | None]:
        """The argv to run and the bytes for its stdin (None: stdin is /dev/null)."""
        if self.preset is not None:
            preset = self.preset
            argv = [preset.executable, *preset.flags]
            if preset.output_file_flag:
                argv += [preset.output_file_flag, output_file]
            if model != COMMAND_DEFAULT_MODEL:
                argv += [preset.model_flag, model]
            for path in image_files:
                argv += [preset.images_flag or "", path]
            argv += [*self.spec.argv, *preset.tail]
            return argv, prompt.encode("utf-8")
        values = {"{model}": model, "{output_file}": output_file}
        via_arg = self.spec.prompt == "arg"
        if via_arg:
            if len(prompt.encode("utf-8")) > MAX_ARG_BYTES:
                raise UnsupportedContentError(
                    f"{self.label}: the prompt is {len(prompt.encode('utf-8')):,} bytes, more than one command-line "
                    f"argument can hold ({MAX_ARG_BYTES + 1:,}); use prompt: stdin",
                    provider=self.config.name,
                )
            values["{prompt}"] = prompt
        argv = [_fill(arg, values) for arg in self.spec.argv]
        if via_arg and not any("{prompt}" in arg for arg in self.spec.argv):
            argv.append(prompt)
        if via_arg and prompt.startswith("-") and not self._prompt_after_dashes():
            raise UnsupportedContentError(
                f"{self.label}: the prompt starts with '-', which the command would read as an option (a server "
                "could pass it any flag this way); use prompt: stdin, or put '--' before {prompt} in command:",
                provider=self.config.name,
            )
        return argv, None if via_arg else prompt.encode("utf-8")

    def _settings_env(self, directory: Path) -> dict[str, str]:
        """The preset's settings file, written to the run's private directory, and the variable naming it."""
        if self.preset is None or self.preset.settings_env is None:
            return {}
        path = directory / "cli-settings.json"
        path.write_text(json.dumps(self.preset.settings), encoding="utf-8")
        return {self.preset.settings_env: str(path)}

    def _prompt_after_dashes(self) -> bool:
        """True when `{prompt}` is part of a larger argument, or follows a `--` (end of options)."""
        argv = self.spec.argv
        where = next((i for i, arg in enumerate(argv) if "{prompt}" in arg), None)
        if where is None:  # appended at the end
            return "--" in argv
        return argv[where] != "{prompt}" or "--" in argv[:where]

    def _images(self, params: CreateMessageParams) -> list[dict[str, Any]]:
        """Image blocks of user messages, when this CLI takes image files (Codex's --image)."""
        if self.preset is None or self.preset.images_flag is None:
            return []
        return [
            block
            for message in params.get("messages") or []
            if message.get("role") == "user"
            for block in as_blocks(message.get("content"))
            if isinstance(block, dict) and block.get("type") == "image"
        ]

    # -- running it ----------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The proxy's environment plus NO_COLOR=1, minus what the preset must not inherit. The proxy's
        key variables are not in it (config/child_env.py: withheld once read) unless `pass_env` names them."""
        spec = self.config.command
        passed = (*(spec.pass_env if spec is not None else ()), *(self.preset.facts.key_vars if self.preset else ()))
        env = helper_environment(passed)  # a preset's own key variables (gemini's API key) too
        env = {k: v for k, v in env.items() if not (self.preset and k in self.preset.drop_env)}
        env["NO_COLOR"] = "1"
        return env

    async def _run(
        self, argv: list[str], stdin: bytes | None, cwd: str, extra_env: dict[str, str] | None = None
    ) -> tuple[int, bytes, bytes]:
        env = {**self.environment(), **(extra_env or {})}
        executable = shutil.which(argv[0], path=env.get("PATH"))
        if executable is None:
            hint = (
                "install it, or give its absolute path in `command:`; hosts often start servers with a short "
                "PATH, so the proxy may not see what your shell sees"
            )
            raise LLMError(
                f"{self.label}: command '{one_line(argv[0], 120)}' not found on PATH: {hint}", provider=self.config.name
            )
        try:
            process = await anyio.open_process(
                [executable, *argv[1:]],
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise LLMError(
                f"{self.label}: cannot run '{one_line(argv[0], 120)}': {exc.strerror or exc}", provider=self.config.name
            ) from exc
        with waiting_for(process.pid):  # its own session, as a server's orphans: not the orphan reaper's
            stdout, stderr = bytearray(), bytearray()
            too_much = False
            finished = False
            try:
                with anyio.move_on_after(self.config.total_timeout) as deadline:
                    async with anyio.create_task_group() as group:
                        group.start_soon(_feed, process, stdin)
                        group.start_soon(_drain, process.stdout, stdout, MAX_STDOUT, group.cancel_scope.cancel)
                        group.start_soon(_drain, process.stderr, stderr, STDERR_KEPT, None)
                    too_much = len(stdout) > MAX_STDOUT
                    if not too_much:
                        await process.wait()
                        finished = True
            finally:
                if not finished:  # timed out, cancelled, or printed too much: the whole tree goes
                    with anyio.CancelScope(shield=True):
                        await _kill_group(process)
        if deadline.cancelled_caught:
            raise LLMError(
                f"{self.label} did not finish within its {self.config.total_timeout:g} s timeout and was stopped; "
                f"raise llm.providers.{self.config.name}.timeout or use a faster model"
                + self._stderr_note(bytes(stderr)),
                provider=self.config.name,
            )
        if too_much:
            raise LLMError(
                f"{self.label} printed more than {MAX_STDOUT // (1024 * 1024)} MiB and was stopped",
                provider=self.config.name,
            )
        return process.returncode or 0, bytes(stdout), bytes(stderr)

    # -- reading its answer --------------------------------------------------------------------

    def _parse(self, raw: bytes) -> Output:
        text = raw.decode("utf-8", errors="replace")
        output = self.preset.output if self.preset else self.spec.output
        if output == "text":
            return Output(text.strip("\r\n"))
        data = _load_json(text, self.label)
        if self.preset is not None and self.preset.parse_json is not None:
            try:
                return self.preset.parse_json(data, self.label)
            except LLMError as exc:
                raise LLMError(exc.message, provider=self.config.name) from None
        spec = self.spec
        try:
            return Output(
                _text_at(data, spec.text_path or "", self.label),
                input_tokens=_int(_at(data, spec.input_tokens_path)) if spec.input_tokens_path else None,
                output_tokens=_int(_at(data, spec.output_tokens_path)) if spec.output_tokens_path else None,
                stop_reason=_str(_at(data, spec.stop_reason_path)) if spec.stop_reason_path else None,
            )
        except LLMError as exc:
            raise LLMError(exc.message, provider=self.config.name) from None

    def _failure(self, status: int, stdout: bytes, stderr: bytes) -> str:
        """Why a command failed: its exit status, its own JSON error when it printed one, its stderr."""
        what = f"exited with status {status}" if status > 0 else f"was killed by signal {-status}"
        message = f"{self.label}: '{self.preset.executable if self.preset else self.spec.argv[0]}' {what}"
        if self.preset is not None and self.preset.parse_json is not None and stdout.strip():
            try:
                self.preset.parse_json(_load_json(stdout.decode("utf-8", errors="replace"), self.label), self.label)
            except LLMError as exc:
                message += f" ({_scrub(exc.message.removeprefix(self.label + ' '))})"
        return message + self._key_note() + self._stderr_note(stderr)

    def _key_note(self) -> str:
        """Why a CLI that needs an API key now (gemini) may have failed: none of its key variables is set."""
        wanted = self.preset.facts.key_vars if self.preset is not None else ()
        if not wanted or any(self.environment().get(var) for var in wanted):
            return ""
        return f"; it needs an API key: set {' or '.join(wanted)} ({self.preset.facts.meter if self.preset else ''})"

    def _stderr_note(self, stderr: bytes) -> str:
        text = stderr.decode("utf-8", errors="replace").strip()
        if not text:
            return ""
        tail = text[-DETAIL_LIMIT * 4 :]  # the end says what went wrong; the start is often a banner
        detail = one_line(_scrub(tail), DETAIL_LIMIT * 4)
        if len(detail) > DETAIL_LIMIT:
            detail = "…" + detail[-(DETAIL_LIMIT - 1) :]
        return f"; stderr: {_scrub(detail)}"


def program_of(config: ProviderConfig) -> tuple[str, str | None]:
    """The program a command provider runs, and where it resolves on PATH (None: not found).
    For `doctor`, which checks this without running it (a run would spend the user's quota)."""
    spec = config.command or CommandSpec()
    preset = PRESETS.get(spec.preset or "")
    program = preset.executable if preset else (spec.argv[0] if spec.argv else "")
    return program, shutil.which(program) if program else None


# -- the prompt -----------------------------------------------------------------------------------


def render_prompt(config: ProviderConfig, params: CreateMessageParams, *, images_ok: bool = False) -> str:
    """The request as plain text: the message alone when it is one user message and no system
    prompt, else a transcript (`System: ...`, `User: ...`, `Assistant: ...`, blank lines between).

    A CLI takes one prompt, so this is the only faithful rendering; what it cannot carry (tools,
    tool calls and results, audio, images unless the CLI takes image files) is refused, never dropped."""
    label = f"provider '{config.name}' (command)"
    tools = params.get("tools")
    if tools:
        raise UnsupportedContentError(
            f"{label}: command providers cannot use tools; the request offers {len(tools)}. "
            "Route tool-using requests to an openai or anthropic provider (a rule's provider:)",
            provider=config.name,
        )
    turns: list[tuple[str, str]] = []
    image_count = 0
    for index, message in enumerate(params.get("messages") or []):
        role = message.get("role")
        where = f"messages[{index}]"
        if role not in ("user", "assistant"):
            raise unsupported_role(config, role, where)
        texts = []
        for block in as_blocks(message.get("content")):
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "resource" and isinstance((block.get("resource") or {}).get("text"), str):
                texts.append(block["resource"]["text"])
            elif kind == "image" and images_ok and role == "user":
                image_count += 1
                texts.append(f"[image {image_count} attached]")
            elif kind in ("tool_use", "tool_result"):
                raise UnsupportedContentError(
                    f"{label}: command providers cannot use tools ('{kind}' in {where})", provider=config.name
                )
            else:
                why = "this CLI takes text only" + (
                    "" if kind != "image" else " (of the presets, only codex takes images)"
                )
                raise unsupported(config, str(kind), where, why)
        turns.append((role, "\n".join(texts)))
    system = params.get("systemPrompt")
    if not system and len(turns) == 1 and turns[0][0] == "user":
        return turns[0][1]
    parts = [f"System: {system}"] if system else []
    parts += [f"{role.capitalize()}: {text}" for role, text in turns]
    return "\n\n".join(parts)


def _write_images(config: ProviderConfig, blocks: list[dict[str, Any]], directory: Path) -> list[str]:
    """Each image as a file in the call's private directory, for a CLI that takes image files."""
    paths = []
    for number, block in enumerate(blocks, start=1):
        try:
            data = base64.b64decode(block.get("data") or "", validate=True)
        except (binascii.Error, ValueError):
            raise UnsupportedContentError(
                f"provider '{config.name}' (command): image {number} is not valid base64", provider=config.name
            ) from None
        path = directory / f"image-{number}{IMAGE_SUFFIXES.get(str(block.get('mimeType')).lower(), '.img')}"
        path.write_bytes(data)
        paths.append(str(path))
    return paths


def _fill(arg: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        arg = arg.replace(placeholder, value)
    return arg


def _apply_stop_sequences(text: str, stops: list[str]) -> tuple[str, str | None]:
    """A CLI cannot be asked to stop at a sequence, so the answer is cut at the first one, as an
    API would have stopped there."""
    cuts = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return (text[: min(cuts)], "stopSequence") if cuts else (text, None)


# -- process plumbing -----------------------------------------------------------------------------


async def _feed(process: Process, data: bytes | None) -> None:
    if process.stdin is None:
        return
    try:
        if data:
            await process.stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
        pass  # the command exited or closed stdin without reading it all: its exit status tells
    finally:
        with contextlib.suppress(anyio.BrokenResourceError, BrokenPipeError, ConnectionResetError, OSError):
            await process.stdin.aclose()


async def _drain(
    stream: ByteReceiveStream | None, into: bytearray, limit: int, over_limit: Callable[[], None] | None
) -> None:
    """Read a pipe to its end. Past `limit` bytes: call `over_limit` (stdout: stop everything, the
    caller refuses the answer), or without one keep the last `limit` bytes (stderr)."""
    if stream is None:
        return
    async for chunk in stream:
        into += chunk
        if len(into) > limit:
            if over_limit is not None:
                over_limit()
                return
            del into[: len(into) - limit]


async def _kill_group(process: Process) -> None:
    """SIGTERM to the command's whole process group (its own session: the CLI and everything it
    started), then SIGKILL to whatever is left after a grace period or once the CLI is gone."""
    _signal_group(process.pid, signal.SIGTERM)
    with anyio.move_on_after(KILL_GRACE):
        await process.wait()
    _signal_group(process.pid, signal.SIGKILL)
    with anyio.move_on_after(5.0):
        await process.aclose()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, sig)


def _read_if_exists(path: str, limit: int) -> bytes:
    """The file's bytes (none when it is missing or not a regular file: the directory is private, but
    a same-user server can find it, and a FIFO put there would block the read for good); at most
    `limit` + 1, so a caller can tell it was more."""
    try:
        fd = open_regular(path)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as file:
        return file.read(limit + 1)


# -- JSON -----------------------------------------------------------------------------------------


def _load_json(text: str, label: str) -> Any:
    """The JSON a command printed; a CLI that logs a line before it is forgiven (last line wins)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    for line in reversed([line for line in text.splitlines() if line.strip()]):
        try:
            return json.loads(line)
        except ValueError:
            break
    excerpt = one_line(_scrub(text), 200) or "(nothing)"
    raise LLMError(f"{label} printed output that is not JSON (output: json): {excerpt}")


def _at(data: Any, path: str | None) -> Any:
    """The value at a dotted path (`choices.0.message.content`); None when any step is missing."""
    if not path:
        return data
    value = data
    for step in path.split("."):
        if isinstance(value, dict):
            value = value.get(step)
        elif isinstance(value, list) and step.lstrip("-").isdigit() and -len(value) <= int(step) < len(value):
            value = value[int(step)]
        else:
            return None
    return value


def _text_at(data: Any, path: str, label: str) -> str:
    value = _at(data, path)
    if isinstance(value, str):
        return value
    found = "nothing" if value is None else f"a {type(value).__name__}"
    raise LLMError(f"{label} printed JSON with {found} at '{path}', where the answer text should be")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _scrub(text: str) -> str:
    """Key shapes, the values of secret-looking environment variables and every key the proxy was
    configured with (api_key_file, api_key_command, headers: not in the environment) masked: the
    text goes to the server in the error."""
    secrets = [v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 8]
    return Redactor([*secrets, *known_secrets()], runs=True).redact(text)[0]
