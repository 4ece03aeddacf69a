"""Shared test helpers: start the real proxy process and talk to it as a host.

Two hosts: the `mcp` SDK's `Client` (what real hosts are built on), and `RawHost`, which
writes and reads JSON lines itself, for what an SDK client would hide (ids, malformed input,
exit codes, message-by-message comparison with a direct connection).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import queue
import stat
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import orjson

if TYPE_CHECKING:  # the SDK is imported where a host is started: most tests never start one
    from mcp import Client
    from mcp_types import CallToolResult, TextContent

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
KITCHEN_SINK = str(ROOT / "tests" / "fixtures" / "kitchen_sink_server.py")
# the kitchen sink's echo, sample, sample_raw, elicit_form, elicit_name, slow, big and crash, answered as it
# answers them, without the SDK (30 ms a start, not 1.2 s): what most tests of the proxy's own behaviour need
SMALL_SERVER = str(ROOT / "tests" / "fixtures" / "small_server.py")
EXAMPLES = ROOT / "examples" / "servers"
PROXY = [PY, "-m", "mcp_sampling_proxy"]
LATEST_HANDSHAKE = "2025-11-25"
# a host's first line, for tests that pipe one initialize into the proxy and read what comes back
INITIALIZE_LINE = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": LATEST_HANDSHAKE,
                "capabilities": {},
                "clientInfo": {"name": "x", "version": "1"},
            },
        }
    )
    + "\n"
)
UNCONFINED = "sandbox: off\n"
"""For tests of the defences that hold without a sandbox (where bubblewrap is missing): the peer checks of
the console socket, the guard and PDEATHSIG, the proxy's non-dumpable memory. test_containment.py runs
the same attacks against a sandboxed server."""


def proxy_env(**extra: str) -> dict[str, str]:
    """The environment for a proxy under test: no real keys, no terminal, no warm start, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "MCP_SAMPLING_PROXY_"))}
    env["MCP_SAMPLING_PROXY_NO_TERMINAL"] = "1"
    env["MCP_SAMPLING_PROXY_CONFIG_DIR"] = "/nonexistent/mcp-sampling-proxy-tests"  # never the user's own policy
    # no warm start server left behind by each test's proxies (tests/e2e/test_warm_start.py turns it on)
    env["MCP_SAMPLING_PROXY_WARM_START"] = "off"
    env.update(extra)
    return env


def write_policy(directory: Path, text: str, name: str = "policy.yaml") -> str:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def openai_policy(base_url: str, *, model: str = "gpt-test", extra: str = "", rules: str | None = None) -> str:
    """A policy with one OpenAI-compatible provider at `base_url` and an allow-all rule."""
    rules = rules if rules is not None else "rules:\n  - name: allow-all\n    action: allow\n"
    return (
        "llm:\n  providers:\n    fake:\n      type: openai\n"
        f"      base_url: {base_url}\n      api_key_env: TEST_LLM_KEY\n      models: [{model}]\n"
        f"{extra}{rules}"
    )


def anthropic_policy(base_url: str, *, model: str = "claude-test", rules: str | None = None) -> str:
    rules = rules if rules is not None else "rules:\n  - name: allow-all\n    action: allow\n"
    return (
        "llm:\n  providers:\n    claude:\n      type: anthropic\n"
        f"      base_url: {base_url}\n      api_key_env: TEST_LLM_KEY\n      models: [{model}]\n{rules}"
    )


def proxy_command(policy: str | None = None, *options: str, upstream: list[str] | None = None) -> list[str]:
    """The proxy's command line in front of `upstream`: by default the small server, whose tools answer as
    the kitchen sink's do without its start-up (a test of the SDK server's behaviour names KITCHEN_SINK)."""
    cmd = [*PROXY, "--log-format", "json"]
    if policy:
        cmd += ["--policy", policy]
    cmd += list(options)
    return [*cmd, "--", *(upstream or [PY, SMALL_SERVER])]


@asynccontextmanager
async def sdk_host(
    command: list[str], env: dict[str, str], errlog: Path, **client_kwargs: Any
) -> AsyncIterator[Client]:
    """The SDK's Client (handshake era unless `mode` is given) connected to `command`."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    client_kwargs.setdefault("mode", "legacy")
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    with open(errlog, "a", encoding="utf-8") as log_file:
        async with Client(stdio_client(params, errlog=log_file), **client_kwargs) as client:
            yield client


def tool_text(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def first_text(result: CallToolResult) -> str:
    """The text of a result's first block (which a test expects to be text: else AttributeError)."""
    return cast("TextContent", result.content[0]).text


def tool_json(result: CallToolResult) -> Any:
    """The JSON a tool wrote as its text: arbitrary, as each test server answers what it likes."""
    return json.loads(tool_text(result))


class MessagePredicate(Protocol):
    """What `RawHost.wait_for` waits for. A Protocol, not a Callable, so that a lambda may bind loop
    variables as defaults (`lambda m, n=n: ...`) and still type-check."""

    def __call__(self, message: dict[str, Any], /) -> bool: ...


class RawHost:
    """A host that speaks newline-delimited JSON to a process it starts."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str] | None = None,
        stderr_path: Path | None = None,
        new_session: bool = True,
        cwd: Path | None = None,
    ):
        self._stderr_file = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            env=env,
            start_new_session=new_session,
            cwd=cwd,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.raw_received: list[bytes] = []
        self.seen: list[dict[str, Any]] = []  # messages wait_for read past
        self._next_id = 1
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.raw_received.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def recv(self, timeout: float = 15.0) -> dict[str, Any] | None:
        """The next message (None at EOF); fails the test on timeout."""
        line = self.lines.get(timeout=timeout)
        return None if line is None else orjson.loads(line)  # strict JSON, and up to 1024 levels deep

    def next_message(self, timeout: float = 15.0) -> dict[str, Any]:
        """The next message, for a test that expects one: EOFError at EOF (where `recv` gives None)."""
        message = self.recv(timeout)
        if message is None:
            raise EOFError("the proxy closed stdout")
        return message

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 15.0) -> dict[str, Any]:
        """Send a request and return its response; other messages on the way are kept in `.seen`."""
        request_id = self._next_id
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.wait_for(lambda m: m.get("id") == request_id and "method" not in m, timeout)

    def wait_for(self, predicate: MessagePredicate, timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no matching message from the proxy")
            message = self.recv(remaining)
            if message is None:
                raise EOFError("the proxy closed stdout")
            if predicate(message):
                return message
            self.seen.append(message)

    def initialize(self, capabilities: dict[str, Any] | None = None, name: str = "raw-host") -> dict[str, Any]:
        response = self.request(
            "initialize",
            {
                "protocolVersion": LATEST_HANDSHAKE,
                "capabilities": capabilities or {},
                "clientInfo": {"name": name, "version": "1.0"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return response

    def close_stdin(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()

    def wait(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait(5)
        if not isinstance(self._stderr_file, int):  # a file of ours, not subprocess.DEVNULL
            self._stderr_file.close()

    def __enter__(self) -> RawHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def children_of(pid: int) -> list[int]:
    """Direct children of a process, from each process's /proc/N/stat (readable even when the parent
    is non-dumpable, as the proxy is; its /proc/PID/task/*/children is not without CAP_SYS_PTRACE)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


GUARD_COMM = "mcp-proxy-guard"  # hardening.GroupGuard: the proxy's other child, besides the server


def server_children(pid: int) -> list[int]:
    """The proxy's children other than its group guard: the server it started."""
    found = []
    for child in children_of(pid):
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() != GUARD_COMM:
                found.append(child)
        except OSError:
            continue
    return found


def running_with(fragment: str) -> list[int]:
    """Processes (not zombies) whose command line holds `fragment`: what a server left running, seen from
    outside its sandbox (inside one, it only knows its own pids, which mean nothing out here)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if fragment.encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def free_port() -> int:
    """A loopback TCP port nothing listens on (free when this returns)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A stdio MCP server in a few lines, without the SDK: it answers initialize (any era's version) and nothing else
MINIMAL_SERVER = """import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"capabilities": {},
              "protocolVersion": message["params"]["protocolVersion"], "serverInfo": {"name": "s", "version": "1"}}}),
              flush=True)
"""


class CommandFailed(AssertionError):
    """`run_subcommand(check=True)` on a command that did not exit 0."""


@dataclass(frozen=True)
class CommandRun:
    """What a subcommand run in process did: its exit status and what it printed."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_subcommand(argv: list[str], *, check: bool = False, stdin: str | None = None) -> CommandRun:
    """A subcommand (`["policy", "explain", ...]`) run in this process, no process started, as
    `mcp-sampling-proxy` runs it: its logging set up the same way (warnings, readable, on stderr), without
    the process hardening of a real start. `check`: fail unless it exits 0. `stdin`: what it reads there,
    as if piped (not a terminal; "" is an empty pipe, as from /dev/null); None leaves stdin as it is."""
    from mcp_sampling_proxy.log import configure
    from mcp_sampling_proxy.notation.vocabulary import SUBCOMMANDS

    out, err = io.StringIO(), io.StringIO()
    piped = contextlib.nullcontext() if stdin is None else _stdin(io.StringIO(stdin))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), piped:
        configure("warning", "console")
        module = importlib.import_module(f"mcp_sampling_proxy.commands.{SUBCOMMANDS[argv[0]]}")
        try:  # as commands/cli.py calls it: a module serving two subcommands is told which
            code = (
                module.main(argv[1:], argv[0])
                if argv[0] in ("wrap", "unwrap", "login", "logout")
                else module.main(argv[1:])
            )
        except SystemExit as exc:  # argparse's errors (2) and --help (0)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    done = CommandRun(argv, code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise CommandFailed(f"{argv} exited {code}:\n{done.stderr}")
    return done


@contextlib.contextmanager
def _stdin(stream: io.StringIO) -> Iterator[None]:
    """sys.stdin is `stream` meanwhile (contextlib has redirect_stdout and _stderr, not _stdin)."""
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


# a policy with three mistakes, each named at its FILE:LINE:COL by `policy check` and by the proxy
THREE_TYPOS = """\
sampling:
  rout: proxy
rules:
  - name: first
    acton: allow
  - name: second
    action: allwo
  - name: third
    action: deny
    when:
      max_tokens_over: lots
"""


def private_dir_of_mine(path: Path) -> bool:
    """True when `path` is a directory of this user's with mode 0700 (not a link): a runtime dir the
    proxy would use, as platformdirs vets `/run/user/UID`."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
