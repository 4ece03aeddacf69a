"""docs/getting-started.md, followed as a new user follows it, with the real commands.

A server that needs sampling; a host that cannot sample; the user's LLM key exported in their shell
(the trap: a desktop host starts the proxy without the shell's variables). `init --yes --key-file`
against a loopback LLM that refuses requests without that key; `wrap` into the host's own config
file under a temporary HOME; `doctor` clean; then the wrapped entry started exactly as the host
starts it (command, args and env from the host's file, over the host's own minimal environment: no
OPENAI_API_KEY), a real MCP client calling the server's tool, the request approved at the companion
console (`mcp-sampling-proxy console` on a terminal), the LLM's answer back in the tool's result, and
`audit tail` showing the decision. If the key did not reach the proxy, the LLM answers 401 and the
tool call fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from fakes.llm_server import FakeLLMServer
from helpers.support import EXAMPLES, PROXY, PY, ROOT, tool_text
from helpers.terminal import PtySession

from mcp_sampling_proxy.hosts.registry import HOSTS

KEY = "sk-getting-started-0123456789abcdef"
WALKTHROUGH = (ROOT / "docs" / "getting-started.md").read_text()
# the commands the page gives, run here as written (init also gets the loopback LLM's --base-url)
INIT = "init --yes --llm openai --key-file ~/.config/mcp-sampling-proxy/openai.key"
AUDIT_TAIL = "audit tail ~/.local/state/mcp-sampling-proxy/audit.jsonl"
SUMMARIZER = str(EXAMPLES / "summarizer.py")
ANSWER = "The proxy got the key from its key file."
PROMPT = b"Allow this request? [y]es once"

# host -> (its config file under HOME, the server entry as the user had it before wrap)
HOST_FILES: dict[str, tuple[str, dict[str, Any]]] = {
    "claude-desktop": (".config/Claude/claude_desktop_config.json", {"command": PY, "args": [SUMMARIZER]}),
    "cursor": (".cursor/mcp.json", {"command": PY, "args": [SUMMARIZER]}),
    "zed": (".config/zed/settings.json", {"source": "custom", "command": PY, "args": [SUMMARIZER]}),
    "vscode": (".config/Code/User/mcp.json", {"type": "stdio", "command": PY, "args": [SUMMARIZER]}),
}


def shell_env(home: Path, runtime: Path) -> dict[str, str]:
    """The user's terminal: their HOME, PATH, and the key exported there (as the provider's docs say)."""
    return {
        "HOME": str(home),
        "USER": "me",
        "LOGNAME": "me",
        "PATH": os.environ["PATH"],
        "SHELL": "/bin/sh",
        "LANG": "C.UTF-8",
        "XDG_RUNTIME_DIR": str(runtime),
        "OPENAI_API_KEY": KEY,
    }


def host_env(home: Path, runtime: Path) -> dict[str, str]:
    """What a desktop host gives the servers it starts: the session's few variables, none of the
    shell's exports (Claude Desktop, Zed, and Cursor or VS Code started from the desktop, whose
    login shell here sets nothing)."""
    return {
        "HOME": str(home),
        "USER": "me",
        "LOGNAME": "me",
        "PATH": "/usr/bin:/bin",
        "SHELL": "/bin/sh",
        "LANG": "C.UTF-8",
        "XDG_RUNTIME_DIR": str(runtime),
    }


def cli(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PROXY, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120)


def wrapped_entry(host: str, config: Path) -> dict[str, Any]:
    """The entry as the host reads it from its file after wrap."""
    entry: dict[str, Any] = json.loads(config.read_text())[HOSTS[host].servers_key]["summarizer"]
    return entry


async def call_summarize(entry: dict[str, Any], env: dict[str, str], errlog: Path) -> str:
    """Start the entry as the host does (its command, args and env over the host's environment) and call
    the server's tool through a real MCP client."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=entry["command"], args=entry.get("args", []), env={**env, **entry.get("env", {})}
    )
    with open(errlog, "a", encoding="utf-8") as log_file:
        async with Client(stdio_client(params, errlog=log_file), mode="legacy") as client:
            with anyio.fail_after(60):
                result = await client.call_tool("summarize", {"text": "A long text about key files."})
    assert not result.is_error, tool_text(result)
    return tool_text(result)


def approve_at_the_console(console: PtySession, approved: list[bytes]) -> None:
    """What the user does at the console: wait for the next request and approve it once."""
    seen = console.output.count(PROMPT)
    deadline = time.monotonic() + 60
    while console.output.count(PROMPT) == seen and time.monotonic() < deadline:
        console._read(0.5)  # (PtySession.read_until would find the earlier requests' prompts)
    if console.output.count(PROMPT) == seen:
        return  # never asked: the test fails on `approved`
    console.type("y\n")
    approved.append(console.output)


def test_the_walkthrough_from_init_to_the_audit(tmp_path: Path, isolated_user_dirs: Path) -> None:
    """One user, four desktop hosts (Claude Desktop first): each is wrapped to start the same proxy without
    the shell's variables, and that proxy's LLM request carries the key."""
    home = tmp_path / "home"
    home.mkdir()
    runtime = isolated_user_dirs / "run"  # short: console sockets live there
    shell = shell_env(home, runtime)

    with FakeLLMServer("openai", api_key=KEY, models=("gpt-4o-mini",)) as llm:
        # init: the key the user exported goes into a 0600 file the policy names
        assert f"mcp-sampling-proxy {INIT}" in WALKTHROUGH
        done = cli(shell, *INIT.split(), "--base-url", llm.base_url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "LLM check: openai answered" in done.stdout
        policy = home / ".config" / "mcp-sampling-proxy" / "policy.yaml"
        key_file = home / ".config" / "mcp-sampling-proxy" / "openai.key"
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert KEY not in policy.read_text()

        # each host's config, as the user had it; wrap puts the proxy in front
        for command in ("wrap --host claude-desktop --all", "doctor\n", "console\n"):
            assert f"mcp-sampling-proxy {command}" in WALKTHROUGH
        entries = {}
        for host, (relative, original) in HOST_FILES.items():
            config = home / relative
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(json.dumps({HOSTS[host].servers_key: {"summarizer": original}}, indent=2))
            done = cli(shell, "wrap", "--host", host, "--all")
            assert done.returncode == 0, done.stdout + done.stderr
            said = (
                "the key of provider 'openai' reaches the proxy from any host: the proxy reads "
                "~/.config/mcp-sampling-proxy/openai.key itself"
            )
            assert said in done.stdout and said in WALKTHROUGH
            assert "will not reach the proxy" not in done.stdout
            entries[host] = wrapped_entry(host, config)
            assert "OPENAI_API_KEY" not in json.dumps(entries[host]) and KEY not in config.read_text()

        # doctor: clean, and it says the key reaches each host's proxy
        done = cli(shell, "doctor")
        assert done.returncode == 0, done.stdout + done.stderr
        for host in HOST_FILES:
            said = f"{HOSTS[host].title} 'summarizer': provider 'openai' key from its key file"
            assert said in done.stdout, done.stdout
        (line,) = [x.strip() for x in done.stdout.splitlines() if "✓ Claude Desktop 'summarizer': provider" in x]
        assert line in WALKTHROUGH  # the page shows doctor's line as it is

        # every host starts what its entry names over the same desktop environment: the same command, args
        # and env in each file (in each host's own shape) start the same proxy, so one is started here
        started = {host: [e["command"], e.get("args", []), e.get("env", {})] for host, e in entries.items()}
        assert all(one == started["claude-desktop"] for one in started.values()), started

        # Claude Desktop starts its entry; the request is approved at the console; the answer comes back
        console = PtySession([*PROXY, "console"], {**shell, "TERM": "xterm"})
        try:
            llm.reply_text(ANSWER)
            approved: list[bytes] = []
            approver = threading.Thread(target=approve_at_the_console, args=(console, approved), daemon=True)
            approver.start()
            text = anyio.run(
                call_summarize, entries["claude-desktop"], host_env(home, runtime), tmp_path / "host-stderr.log"
            )
            approver.join(5)
            assert approved, console.output.decode(errors="replace")
            assert text == ANSWER
            completions = [r for r in llm.requests if r.path.endswith("/chat/completions")]  # init's check first
            assert completions[-1].headers["authorization"] == f"Bearer {KEY}"
        finally:
            os.kill(console.pid, signal.SIGINT)
            console.finish()

    # the audit log records each decision, and the key is nowhere the server or the logs reach
    audit = home / ".local" / "state" / "mcp-sampling-proxy" / "audit.jsonl"
    assert f"mcp-sampling-proxy {AUDIT_TAIL}" in WALKTHROUGH
    done = cli(shell, *AUDIT_TAIL.replace("~", str(home)).split())  # `~` expanded, as a shell does
    assert done.returncode == 0, done.stderr
    assert "summarizer" in done.stdout and "approved" in done.stdout, done.stdout
    for where in (audit.read_text(), (tmp_path / "host-stderr.log").read_text(), done.stdout):
        assert KEY not in where
