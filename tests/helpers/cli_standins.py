"""Stand-in executables for the agent CLIs the `command` provider presets run.

Each is a small Python script written into a test's tmp_path (and put first on the proxy's PATH)
that parses its arguments the way the real CLI documents them (an unknown option is an error,
exit 2, as with the real argument parsers), reads the prompt where the real one reads it, and
prints the answer in the real one's documented format:

- claude: Claude Code 2.x `claude -p --output-format json` (one JSON object: type, subtype,
  is_error, result, stop_reason, session_id, usage {input_tokens, output_tokens, ...}, modelUsage)
- codex: Codex CLI `codex exec [OPTIONS] -` (prompt from stdin; progress on stderr; the final
  message on stdout and in the `--output-last-message` file)
- gemini: Gemini CLI `gemini --output-format json` (headless when stdin is piped: {response,
  stats: {models: {NAME: {tokens: {prompt, candidates, ...}}}}}, or {error: {type, message}})
- llm: `llm [-m MODEL]` reading the prompt from stdin, printing the text

Every run appends one JSON line to $STANDIN_LOG: argv, stdin, cwd, the environment variables
the tests look at, and the system settings file Gemini CLI would read ($GEMINI_CLI_SYSTEM_SETTINGS_PATH).
$STANDIN_ANSWER is the answer; $STANDIN_MODE=fail exits 1 with a message on stderr,
$STANDIN_MODE=hang starts a child that sleeps (its pid in the log) and sleeps itself.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

COMMON = r'''
import json, os, subprocess, sys, time

ARGS = sys.argv[1:]
FULL_ARGS = list(ARGS)


def record(**extra):
    entry = {"argv": FULL_ARGS, "cwd": os.getcwd(), "env": {k: os.environ.get(k) for k in
             ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "NO_COLOR", "STANDIN_MARK", "GEMINI_API_KEY")}, **extra}
    settings = os.environ.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH")  # Gemini CLI's system settings file
    if settings:
        with open(settings, encoding="utf-8") as file:
            entry["system_settings"] = json.load(file)
    with open(os.environ["STANDIN_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def parse(flags, switches, positional_max):
    """Options with a value (`flags`), options without (`switches`); unknown ones are an error."""
    values, seen, positional = {}, set(), []
    i = 0
    while i < len(ARGS):
        arg = ARGS[i]
        if arg in flags:
            if i + 1 >= len(ARGS):
                sys.stderr.write(f"error: option {arg} needs a value\n")
                sys.exit(2)
            values.setdefault(arg, []).append(ARGS[i + 1])
            i += 2
            continue
        if arg in switches:
            seen.add(arg)
        elif arg.startswith("-") and arg != "-":
            sys.stderr.write(f"error: unknown option '{arg}'\n")
            sys.exit(2)
        else:
            positional.append(arg)
        i += 1
    if len(positional) > positional_max:
        sys.stderr.write(f"error: unexpected argument '{positional[-1]}'\n")
        sys.exit(2)
    return values, seen, positional


def misbehave(prompt):
    mode = os.environ.get("STANDIN_MODE", "")
    if mode == "fail":
        record(stdin=prompt)
        sys.stderr.write("starting...\nError: " + os.environ.get(
            "STANDIN_ERROR", "quota exhausted for key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345") + "\n")
        sys.exit(1)
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        record(stdin=prompt, child=child.pid)
        time.sleep(60)


ANSWER = os.environ.get("STANDIN_ANSWER", "ok")
'''

CLAUDE = (
    COMMON
    + r"""
values, seen, positional = parse({"--output-format", "--tools", "--model", "--max-turns", "--append-system-prompt"},
                                 {"-p", "--print", "--strict-mcp-config", "--verbose"}, 1)
if os.environ.get("CLAUDECODE"):
    sys.stderr.write("Error: Claude Code cannot be launched inside another Claude Code session.\n")
    sys.exit(1)
prompt = positional[0] if positional else sys.stdin.read()
misbehave(prompt)
record(stdin=prompt)
model = values.get("--model", ["claude-sonnet-4-5-20250929"])[0]
if values.get("--output-format", ["text"])[0] != "json":
    print(ANSWER)
    sys.exit(0)
print(json.dumps({
    "type": "result", "subtype": "success", "is_error": False, "duration_ms": 1998, "duration_api_ms": 1976,
    "num_turns": 1, "result": ANSWER, "stop_reason": "end_turn",
    "session_id": "0e639165-79b1-4bd4-bb0f-4cb4c15115d4", "total_cost_usd": 0.0079825,
    "usage": {"input_tokens": 3, "cache_read_input_tokens": 15635, "output_tokens": 6},
    "modelUsage": {model: {"inputTokens": 3, "outputTokens": 6, "costUSD": 0.0079825}},
    "permission_denials": [],
}))
"""
)

CODEX = (
    COMMON
    + r"""
if not ARGS or ARGS[0] not in ("exec", "e"):
    sys.stderr.write("this stand-in only knows `codex exec`\n")
    sys.exit(2)
ARGS = ARGS[1:]
values, seen, positional = parse({"--sandbox", "-s", "--model", "-m", "--color", "--output-last-message", "-o",
                                  "--image", "-i", "-c", "--config", "--cd", "-C"},
                                 {"--skip-git-repo-check", "--ephemeral", "--json"}, 1)
if "--skip-git-repo-check" not in seen and not os.path.isdir(".git"):
    sys.stderr.write("Not inside a trusted directory and --skip-git-repo-check was not specified.\n")
    sys.exit(1)
prompt = sys.stdin.read() if not positional or positional[0] == "-" else positional[0]
misbehave(prompt)
images = values.get("--image", []) + values.get("-i", [])
record(stdin=prompt, images=[open(p, "rb").read().hex() for p in images])
sys.stderr.write("OpenAI Codex (research preview)\n--------\nworkdir: " + os.getcwd() + "\n")
out = (values.get("--output-last-message") or values.get("-o") or [None])[0]
if out and os.environ.get("STANDIN_MODE") == "fifo-file":  # what a same-user server could put there
    os.mkfifo(out)
elif out:
    with open(out, "w", encoding="utf-8") as f:
        f.write(ANSWER)
        if os.environ.get("STANDIN_MODE") == "huge-file":  # a runaway CLI: 20 MiB more in the answer file
            f.write("x" * (20 * 1024 * 1024))
print(ANSWER)
"""
)

GEMINI = (
    COMMON
    + r"""
values, seen, positional = parse({"--output-format", "-o", "--model", "-m", "--prompt", "-p", "--approval-mode"},
                                 {"--debug", "-d", "--yolo", "-y"}, 1)
if sys.stdin.isatty():
    sys.stderr.write("this stand-in only runs headless\n")
    sys.exit(2)
question = (values.get("--prompt") or values.get("-p") or positional or [""])[0]
stdin = sys.stdin.read()
prompt = f"{stdin}\n\n{question}" if stdin else question
if not prompt:
    sys.stderr.write("No input provided via stdin.\n")
    sys.exit(42)
misbehave(prompt)
record(stdin=prompt)
model = (values.get("--model") or values.get("-m") or ["gemini-2.5-pro"])[0]
if os.environ.get("STANDIN_MODE") == "json-error":
    error = {"type": "FatalAuthenticationError", "message": "Please set an Auth method", "code": 41}
    print(json.dumps({"error": error}))
    sys.exit(41)
print(json.dumps({"session_id": "s-1", "response": ANSWER, "stats": {
    "models": {model: {"api": {"totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 5053},
                       "tokens": {"input": 12, "prompt": 24, "candidates": 8, "total": 40, "cached": 12,
                                  "thoughts": 8, "tool": 0}},
               "gemini-2.5-flash-lite": {"api": {"totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 300},
                                         "tokens": {"input": 5, "prompt": 5, "candidates": 1, "total": 6,
                                                    "cached": 0, "thoughts": 0, "tool": 0}}},
    "tools": {"totalCalls": 0, "totalSuccess": 0, "totalFail": 0, "totalDurationMs": 0, "byName": {}},
    "files": {"totalLinesAdded": 0, "totalLinesRemoved": 0}}}, indent=2))
"""
)

LLM = (
    COMMON
    + r"""
values, seen, positional = parse({"-m", "--model", "-s", "--system", "-t", "--template", "-o", "--option"},
                                 {"-n", "--no-log", "--no-stream"}, 1)
prompt = positional[0] if positional else sys.stdin.read()
misbehave(prompt)
record(stdin=prompt)
print(ANSWER)
"""
)

# A custom command of the user's own: prints JSON in a shape of its choosing.
CUSTOM_JSON = (
    COMMON
    + r"""
prompt = sys.stdin.read()
misbehave(prompt)
record(stdin=prompt)
print(json.dumps({"choices": [{"message": {"content": ANSWER}, "finish_reason": "length"}],
                  "usage": {"prompt_tokens": 21, "completion_tokens": 4}}))
"""
)

# A custom command that takes the prompt as an argument and prints plain text.
CUSTOM_TEXT = (
    COMMON
    + r"""
prompt = ARGS[-1] if ARGS else ""
stdin = sys.stdin.read()
misbehave(prompt)
record(stdin=stdin)
print(ANSWER + "\n")
"""
)

SCRIPTS = {
    "claude": CLAUDE,
    "codex": CODEX,
    "gemini": GEMINI,
    "llm": LLM,
    "my-json-llm": CUSTOM_JSON,
    "my-text-llm": CUSTOM_TEXT,
}


def install(directory: Path, *names: str) -> Path:
    """Write the named stand-ins into `directory` as executables; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names or tuple(SCRIPTS):
        path = directory / name
        path.write_text(f"#!{sys.executable}\n{SCRIPTS[name]}", encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return directory


def runs(log: Path) -> list[dict[str, Any]]:
    """Every recorded run, oldest first."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


def path_with(directory: Path) -> str:
    return f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"


# The flags that let each CLI act without asking, as the CLIs spell them (independent of the proxy's list).
BYPASSES = (
    "--dangerously-skip-permissions",
    "--yolo",
    "--full-auto",
    "--dangerously-bypass-approvals-and-sandbox",
    "-y",
    "bypassPermissions",
    "danger-full-access",
)


def bypasses(argv: list[str]) -> list[str]:
    """The arguments that are a bypass flag (alone, or `--flag=...`) or name a bypass setting (`-c
    sandbox_mode="danger-full-access"`). Flags are matched whole: "-y" inside a path is no flag."""
    found = []
    for arg in argv:
        for bypass in BYPASSES:
            if (arg == bypass or arg.startswith(f"{bypass}=")) if bypass.startswith("-") else bypass in arg:
                found.append(arg)
                break
    return found


def provider(name: str, body: str) -> str:
    lines = "".join(f"      {line}\n" for line in body.strip().splitlines())
    return f"llm:\n  providers:\n    {name}:\n      type: command\n{lines}"
