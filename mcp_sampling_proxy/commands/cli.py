"""Command line: `mcp-sampling-proxy [OPTIONS] -- COMMAND...` and its helper subcommands.

Start-up order matters for hosts that measure it: parse arguments and load the policy (cheap), spawn
the upstream (only then: every file the policy names is out of the sandboxed server's sight from its
first instruction), and only then import the runtime (anyio, structlog, the relay), so the server's own
start-up overlaps ours.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mcp_sampling_proxy import __version__
from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.config.child_env import child_environment, withhold
from mcp_sampling_proxy.config.providers import PRESET_FACTS, REFUSED_CLIS
from mcp_sampling_proxy.notation.vocabulary import SUBCOMMANDS  # subcommand -> the module whose main() runs it
from mcp_sampling_proxy.system import warm_start
from mcp_sampling_proxy.system.hardening import become_subreaper, harden_process, mark_relay
from mcp_sampling_proxy.system.stop_signals import first_held, hold_stop_signals

if TYPE_CHECKING:  # (imported when used: the server starts before the rest of the proxy is loaded)
    import subprocess

    from mcp_sampling_proxy.config.settings import Settings
    from mcp_sampling_proxy.runtime import Upstream
    from mcp_sampling_proxy.transport.plan_facts import FactLog
    from mcp_sampling_proxy.transport.sandbox import Plan

# what each subcommand does, for --help (each has its own: mcp-sampling-proxy SUBCOMMAND --help)
SUBCOMMAND_SUMMARIES = {
    "init": "write a commented policy file, checking that the LLM you choose answers",
    "wrap": "put the proxy in front of a host's servers (`unwrap` restores them; backups first)",
    "doctor": "check the policy, providers, approval channels, sandbox, state and wrapped servers",
    "try": "start a server behind the proxy and call one of its tools, as a host without sampling would",
    "console": "approve or answer requests of every running proxy (--web: in a browser)",
    "policy": "check a policy file, or explain how it judges a request",
    "audit": "verify, tail or summarise the audit log",
    "approvals": "list or revoke remembered 'always' approvals",
    "tools": "pinned tools and held changes: list, diff, accept, forget",
    "login": "log in to an OAuth-protected remote server (`logout` forgets it)",
    "serve": "serve a stdio server as a Streamable HTTP endpoint, one server process per client session",
}

EPILOG = (
    """\
commands (each has --help):
"""
    + "".join(f"  {name:<10} {text}\n" for name, text in SUBCOMMAND_SUMMARIES.items())
    + """
examples:
  # write a commented policy file at ~/.config/mcp-sampling-proxy/policy.yaml (the default --policy)
  mcp-sampling-proxy init

  # wrap a stdio server (what a host config runs)
  mcp-sampling-proxy --policy ~/.config/mcp-sampling-proxy/policy.yaml -- npx -y @acme/mcp-server

  # a Streamable HTTP server
  mcp-sampling-proxy --policy policy.yaml --url https://mcp.example.com/mcp \\
      --header 'Authorization: Bearer ${EXAMPLE_TOKEN}'

  # validate a policy file (exit 0/1)
  mcp-sampling-proxy policy check policy.yaml

  # check the audit log's hash chain (rotated files oldest first); also: audit tail -f, audit summary
  mcp-sampling-proxy audit verify audit.jsonl.1 audit.jsonl

  # approve requests of every running proxy (hosts such as Claude Desktop give it no terminal)
  mcp-sampling-proxy console

  # put the proxy in front of every server of a host (backup in the state dir first; `unwrap` restores them)
  mcp-sampling-proxy wrap --host claude-desktop --all --policy ~/.config/mcp-sampling-proxy/policy.yaml
  mcp-sampling-proxy wrap --list

  # an OAuth-protected remote: log in once from a terminal (browser), the proxy then refreshes the tokens
  mcp-sampling-proxy login --url https://mcp.example.com/mcp

  # check the policy, providers, approval channels and audit/state dirs
  mcp-sampling-proxy doctor --policy policy.yaml

  # remembered "always" approvals: list them, forget one
  mcp-sampling-proxy approvals list
  mcp-sampling-proxy approvals revoke 1

  # a server changed a tool since it was pinned: see the change, then let it through
  mcp-sampling-proxy tools diff summarizer
  mcp-sampling-proxy tools accept summarizer summarize

  # exercise a sampling server without any host
  mcp-sampling-proxy try --tool summarize --args '{"text": "..."}' -- python examples/servers/summarizer.py

command providers (type: command, preset: NAME): the meter each spends
"""
    + "".join(f"  {name:<7} {facts.meter}\n" for name, facts in PRESET_FACTS.items())
    + "".join(f"  {name:<7} refused: {why.split(';')[0]}\n" for name, why in REFUSED_CLIS.items())
    + """  (each runs its CLI with its tools off and never with a permission bypass; docs/guides/providers.md)

host config entry (Claude Desktop, Cursor, Claude Code: "mcpServers"; `wrap` writes it):
  "summarizer": {
    "command": "/absolute/path/to/mcp-sampling-proxy",
    "args": ["--policy", "/absolute/path/to/policy.yaml", "--", "/usr/bin/python3", "/path/to/server.py"]
  }
  (absolute paths: a host started from the desktop has a short PATH; the key in a 0600 file the policy
  names, api_key_file, which the proxy reads itself: no key in the entry's env)

Without --policy (and no default policy file), the LLM comes from OPENAI_API_KEY (+ OPENAI_BASE_URL, OPENAI_MODEL) or
ANTHROPIC_API_KEY (+ ANTHROPIC_MODEL); with neither, replies are typed at the terminal when there
is one. Sampling with no matching rule needs approval (prompt); with no terminal to ask, it is
denied with a message saying how to allow it. Logs go to stderr, never stdout.
"""
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mcp-sampling-proxy",
        meant={option: "`mcp-sampling-proxy serve --listen HOST:PORT`" for option in ("--listen", "--port")},
        description="A stdio MCP proxy: the host starts it instead of the real server; it relays every "
        "message and answers the server's sampling/createMessage requests under a YAML policy.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_options(parser)
    add_url_options(parser, "connect to")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the real server's command line, after '--'")
    return parser


def add_url_options(parser: argparse.ArgumentParser, verb: str) -> None:
    """--url and --header: a Streamable HTTP server instead of a command (the proxy and `serve`)."""
    parser.add_argument("--url", help=f"{verb} a Streamable HTTP MCP server instead of starting a command")
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'K: V'",
        help="HTTP header for --url (repeatable); ${VAR} in the value is taken from the environment",
    )


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="policy file (YAML): providers, rules, audit (default: "
        "$XDG_CONFIG_HOME/mcp-sampling-proxy/policy.yaml, ~/.config/... when unset, if it exists; "
        "`mcp-sampling-proxy init` writes it)",
    )
    parser.add_argument(
        "--name",
        help="server name for `server:` rules, remembered approvals and logs (default: "
        "derived from the command or URL, never the server's own name, which it could borrow)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="stderr log level (default: info)",
    )
    parser.add_argument(
        "--log-format",
        choices=("json", "console"),
        help="stderr log format (default: console on a terminal, json otherwise)",
    )
    parser.add_argument(
        "--no-terminal", action="store_true", help="never use the controlling terminal for approvals or typed replies"
    )
    parser.add_argument(
        "--max-message-bytes",
        type=int,
        default=64 * 1024 * 1024,
        metavar="N",
        help="largest message accepted from the host or the server (default: 64 MiB); a larger one "
        "is dropped and its request answered with an error",
    )


def fail(message: str, code: int = 2) -> int:
    print(f"mcp-sampling-proxy: error: {message}", file=sys.stderr)
    return code


def _reader_gone() -> int:
    """A helper's output piped into a reader that stopped early (`| head`): not an error of ours, so no
    traceback. stdout points at /dev/null so that the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    # First act: a same-user server must not read our keys from /proc/PID/environ (see hardening)
    hardening_problems = harden_process()
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in SUBCOMMANDS:
        from mcp_sampling_proxy.log import configure  # start-up: structlog, not for --help

        # warnings and errors only, on stderr: a helper's stdout is its output (structlog's default
        # would print even debug lines there, such as where the runtime dir was found)
        configure("warning", "console")

        module = importlib.import_module(f"mcp_sampling_proxy.commands.{SUBCOMMANDS[args_list[0]]}")
        run: Callable[..., int] = module.main
        try:
            if args_list[0] in ("wrap", "unwrap", "login", "logout"):
                return run(args_list[1:], args_list[0])
            return run(args_list[1:])
        except BrokenPipeError:
            return _reader_gone()
    # a host that gives up while the proxy starts (its SIGTERM before the session's handlers) gets the same
    # orderly stop as later: held from here, before anything is started (the bubblewrap probe included)
    hold_stop_signals()
    args = build_parser().parse_args(args_list)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.url):
        return fail("give the server either as '-- COMMAND [ARGS...]' or with --url URL (see --help)")
    if command and args.command[:1] != ["--"] and (typo := _mistyped_subcommand(command[0])):
        return fail(typo)
    if args.no_terminal:
        os.environ["MCP_SAMPLING_PROXY_NO_TERMINAL"] = "1"
    if command:  # bubblewrap's check runs while the policy is read (transport/sandbox.py)
        from mcp_sampling_proxy.transport.bwrap_probe import start_probe  # start-up: not for --help or a subcommand

        start_probe()
    from mcp_sampling_proxy.transport.early_start import this_start  # start-up: not for --help
    from mcp_sampling_proxy.transport.plan_facts import FactLog  # start-up: not for --help or a subcommand

    # the state key first: its making is no fact of the plan (a first start's record then holds at the next)
    new_seal = _prepare_state()
    # what the sandbox plan is made from, for the record of this start (transport/start_record.py)
    facts = FactLog() if command and this_start() is not None else None
    with facts.recording() if facts is not None else contextlib.nullcontext():
        from mcp_sampling_proxy.config.paths import policy_or_default  # start-up: not for --help or a subcommand

        args.policy, policy_is_default = policy_or_default(args.policy)
        mark_relay()  # a named relay: console sockets refuse whatever runs below it (hardening.refusal)
        from mcp_sampling_proxy.config.policy_file import read_policy_text  # start-up: not for --help
        from mcp_sampling_proxy.notation.yamlnodes import PolicyError  # start-up: not for --help or a subcommand

        try:  # read once: the early guess below and the load in _prepare see the same text
            policy_text = read_policy_text(args.policy) if args.policy is not None else None
        except PolicyError as exc:
            return fail(str(exc), 2)
        # before the server starts: a file it wrote meanwhile would be sealed as ours, or lost to our rewrite
        adoption_error = _adopt_state(args.log_level, args.log_format) if new_seal else None
        if command:
            become_subreaper()  # whatever the server starts stays below us, where the console socket can tell
        try:  # the server starts once the policy is read: every file it names is out of its sight from the start
            settings, name, start, sandbox = _prepare(args, command, policy_text)  # (may fork: the sandbox's network)
        except _StartupFailure as exc:
            return exc.say()
    try:
        upstream = start()
    except _StartupFailure as exc:
        return exc.say()
    if facts is not None and sandbox is not None:
        _keep_record(facts, args.policy, policy_text, command, settings.secret_env_vars(), sandbox)

    # start-up: loaded after the server is spawned, so its start overlaps ours
    from mcp_sampling_proxy.audit.recorder import configured_secrets
    from mcp_sampling_proxy.log import configure, set_secrets

    set_secrets(configured_secrets(settings, os.environ))  # after the spawn: importing audit is slow
    withhold(settings.secret_env_vars())  # read from here on by the adapters only: no child inherits them
    configure(args.log_level, args.log_format)
    # start-up: loaded after the server is spawned, so its start overlaps ours
    from mcp_sampling_proxy.log import get_logger

    get_logger("mcp_sampling_proxy").info(
        "policy",
        file=args.policy or "none: providers from the environment, every request asked",
        default=policy_is_default or None,
    )
    if hardening_problems:
        get_logger("mcp_sampling_proxy").warning("process hardening incomplete", problems=hardening_problems)
    if warm_start.forked():
        get_logger("mcp_sampling_proxy").info(
            "started warm: forked by the warm start server, the proxy's modules loaded already"
        )
    if sandbox is not None:
        # start-up: loaded after the server is spawned, so its start overlaps ours
        from mcp_sampling_proxy.transport.early_start import outcome
        from mcp_sampling_proxy.transport.sandbox import log_plan

        log_plan(sandbox)
        if outcome() == "early":
            get_logger("mcp_sampling_proxy").info(
                "server started early, from the record of its last start: its sandbox plan still holds"
            )
        elif outcome() == "stale":
            get_logger("mcp_sampling_proxy").info(
                "the record of the last start no longer holds: the server started early was stopped, and "
                "started again under the plan made now"
            )
    if adoption_error is not None:
        get_logger("mcp_sampling_proxy").warning(
            "could not seal the state files of an older version", error=adoption_error
        )
    # start-up: loaded after the server is spawned, so its start overlaps ours
    from mcp_sampling_proxy.runtime import RunOptions, run

    options = RunOptions(
        name=name,
        use_terminal=not args.no_terminal,
        max_message_bytes=args.max_message_bytes,
        target=shlex.join(command) if command else str(args.url),
        another=start,
    )
    return run(upstream, settings, options)


def _mistyped_subcommand(word: str) -> str | None:
    """A first word given without '--' that no PATH holds but is close to a subcommand (`doctr`): the
    error that says which was meant, instead of trying to start a server of that name."""
    import shutil  # start-up: only a server command given without '--' needs it
    from difflib import get_close_matches  # start-up: for this error only

    if os.sep in word or shutil.which(word) is not None:
        return None
    close = get_close_matches(word, list(SUBCOMMANDS), n=1, cutoff=0.75)
    if not close:
        return None
    return (
        f"unknown command '{word}': did you mean `mcp-sampling-proxy {close[0]}`? (a server's command line "
        "goes after '--')"
    )


def _prepare_state() -> bool:
    """The sealing key of the state files, made before the server runs and held from then on, and the
    ledger of sealed files (quotas/integrity.py, quotas/state.py); True when the key is new."""
    from mcp_sampling_proxy.config.dirs import state_dir  # start-up: not for --help or a subcommand
    from mcp_sampling_proxy.quotas.integrity import start_state  # start-up: not for --help or a subcommand

    try:
        return start_state(state_dir(create=True))
    except OSError:  # an unusable state dir: the stores say so when they are used
        return False


def _adopt_state(log_level: str, log_format: str | None) -> str | None:
    """The first run of a version that seals the state files: seal what an older version left there, before
    the server starts (it could otherwise write one first). Why it failed, for the log once it is set up."""
    from mcp_sampling_proxy.config.dirs import state_dir  # start-up: not for --help or a subcommand

    try:
        directory = state_dir(create=False)
    except OSError as exc:
        return str(exc)
    if not any(os.path.lexists(directory / name) for name in ADOPTED):
        return None  # nothing left to seal (a new user): no logging nor state code loaded before the spawn
    from mcp_sampling_proxy.log import configure  # start-up: only when an older version left state files
    from mcp_sampling_proxy.quotas.state import adopt  # start-up: only when an older version left state files

    configure(log_level, log_format)  # what the stores log (a file set aside) goes to stderr, never stdout
    try:
        adopt(directory)
    except OSError as exc:
        return str(exc)
    return None


ADOPTED = ("approvals.json", "budgets.json")  # the state files an older version wrote unsealed (quotas/state.py)


def _keep_record(
    facts: FactLog, policy: str | None, policy_text: str | None, command: list[str], hidden: set[str], sandbox: Plan
) -> None:
    """After a sandboxed start that planned afresh: its record, for the next start's early spawn
    (transport/start_record.py). Nothing is kept when the plan's facts could not all be noted."""
    from pathlib import Path  # start-up: loaded by then

    from mcp_sampling_proxy.config.dirs import state_dir  # start-up: after the spawn
    from mcp_sampling_proxy.quotas.integrity import load_key  # start-up: after the spawn
    from mcp_sampling_proxy.transport.early_start import outcome, this_start  # start-up: after the spawn
    from mcp_sampling_proxy.transport.plan_facts import code_fact, facts_hold  # start-up: after the spawn
    from mcp_sampling_proxy.transport.start_record import Record, policy_digest, write_record  # start-up: as above

    named = this_start()
    if named is None or facts.spoiled or not sandbox.active or outcome() == "early":
        return
    if not facts_hold(facts.facts):  # the filesystem changed under the plan (the server made a directory it
        return  # scans, or another process): the next start reads otherwise, and records what it finds
    key, directory = named
    try:
        if str(state_dir(create=False)) != directory:  # found another way than the early start looks
            return
        record = Record(
            key=key,
            policy=policy,
            policy_digest=policy_digest(policy_text.encode("utf-8")) if policy_text is not None else None,
            facts=[*facts.facts, code_fact(own_code())],
            words=sandbox.prefix,
            env=sandbox.env,
            command=command,
            hidden=hidden,
            relayed=sandbox.relayed,
        )
        write_record(directory, load_key(Path(directory)), record)
    except OSError:
        return  # no record: the next start plans as this one did


def own_code() -> list[str]:
    """The files of the proxy's modules loaded by now: the code that planned this start."""
    found = []
    for name, module in list(sys.modules.items()):
        if name == "mcp_sampling_proxy" or name.startswith("mcp_sampling_proxy."):
            path = getattr(module, "__file__", None)
            if isinstance(path, str):
                found.append(path)
    return sorted(found)


class _StartupFailure(Exception):
    def __init__(self, message: str, code: int = 2, *, stopped: bool = False):
        super().__init__(message)
        self.message, self.code, self.stopped = message, code, stopped

    def say(self) -> int:
        """Say it on stderr (an error, or why the start stopped), and return the exit status."""
        if not self.stopped:
            return fail(self.message, self.code)
        print(f"mcp-sampling-proxy: {self.message}", file=sys.stderr)
        return self.code


def _spawn(command: list[str], hidden: set[str], sandbox: Plan) -> subprocess.Popen[bytes]:
    """Start the server without the hidden variables, under the sandbox plan (or take the one started early,
    from the record of the last start, when that is the plan made now)."""
    from mcp_sampling_proxy.transport.early_start import taken  # start-up: not for --help or a subcommand
    from mcp_sampling_proxy.transport.stdio import SpawnError, keep, spawn  # start-up: not for --help

    early = taken(sandbox.prefix, sandbox.env, command, hidden)  # (stopped when the plan is not its record's)
    if early is not None:
        return keep(early.launched)
    try:
        return spawn(command, child_environment(os.environ, hidden), sandbox=sandbox)
    except SpawnError as exc:
        raise _StartupFailure(str(exc), exc.exit_code) from None


def _prepare(
    args: argparse.Namespace, command: list[str], policy_text: str | None
) -> tuple[Settings, str, Callable[[], Upstream], Plan | None]:
    """Validate the name, load the policy and the keys; how to start the upstream under its sandbox
    (once at start, and again for a second connection in the other era: runtime.py's ModernLeg)."""
    # start-up: not for --help or a subcommand
    from mcp_sampling_proxy.text.identity import bad_character, derive_from_command, derive_from_url

    if args.name is not None:
        bad = bad_character(args.name)
        if bad is not None or not args.name.strip():
            why = f"holds a control or invisible character, {bad}" if bad else "is empty"
            raise _StartupFailure(
                f"--name {why}: give the server a name of visible characters, as `server:` rules spell it"
            )
    name = args.name.strip() if args.name else (derive_from_command(command) if command else derive_from_url(args.url))

    # start-up: not for --help or a subcommand
    from mcp_sampling_proxy.config.keys import KeyCommandStopped, KeySourceError, resolve_keys
    from mcp_sampling_proxy.config.settings import check_telemetry, load_settings, resolve_state
    from mcp_sampling_proxy.notation.yamlnodes import PolicyError

    try:
        settings = load_settings(args.policy, text=policy_text)
        # api_key_file / api_key_command, once; a command runs without the proxy's key variables
        # a host that gives up meanwhile (its SIGTERM, held since the start) ends a command still running
        settings.providers = resolve_keys(settings.providers, hidden=settings.secret_env_vars(), stop=first_held)
        settings.state = resolve_state(settings.state, os.environ)  # the Redis URL from url_env
        check_telemetry(settings.telemetry)
    except KeyCommandStopped as exc:  # the host gave up: the same orderly stop as later, not a failure
        raise _StartupFailure(f"stopped ({exc.signal}) before the start finished: {exc}", 0, stopped=True) from None
    except (PolicyError, KeySourceError) as exc:
        raise _StartupFailure(str(exc)) from None
    if not command:
        # start-up: loaded after the server is spawned, so its start overlaps ours
        from mcp_sampling_proxy.transport.http import HttpUpstream, parse_headers

        try:
            headers = parse_headers(args.header, os.environ)
        except ValueError as exc:
            raise _StartupFailure(str(exc)) from None
        return settings, name, lambda: HttpUpstream(args.url, headers), None

    # start-up: loaded after the server is spawned, so its start overlaps ours
    from mcp_sampling_proxy.audit.log_place import make_place
    from mcp_sampling_proxy.transport.sandbox import SandboxRefused, contain
    from mcp_sampling_proxy.transport.stdio import StdioUpstream

    make_place(settings.audit.path)  # before the plan, which hides only what exists

    try:
        sandbox = contain(settings.sandbox, args.policy, settings.named_files(), name=name, command=command)
    except SandboxRefused as exc:
        raise _StartupFailure(str(exc)) from None
    hidden = settings.secret_env_vars()
    return settings, name, lambda: StdioUpstream(_spawn(command, hidden, sandbox), name, sandbox.notes()), sandbox


if __name__ == "__main__":
    raise SystemExit(main())
