"""The command line as data, for the docs site's reference page (docs/hooks.py) and tests/e2e/test_docs.py:
every command's real parser, the environment variables the proxy reads, and its exit statuses.

The parsers are the ones each command builds in its own `main()`: they are caught as `main()` calls
`parse_args`, before the command does anything, so a command that gains an option shows it in the docs
with no change here. The two tables are checked against the code by tests/e2e/test_docs.py (every variable
the package reads is listed; every exit status is what the proxy really exits with).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn
from unittest import mock

import structlog
from msgspec import Struct

from mcp_sampling_proxy.approval.console.server import RUNTIME_ENV
from mcp_sampling_proxy.commands.cli import SUBCOMMAND_SUMMARIES, build_parser
from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.config.dirs import STATE_DIR_ENV
from mcp_sampling_proxy.config.paths import CONFIG_DIR_ENV
from mcp_sampling_proxy.notation.vocabulary import SUBCOMMANDS
from mcp_sampling_proxy.system.browser import OPENER_ENV
from mcp_sampling_proxy.system.terminal import DEVICE_ENV, DISABLE_ENV
from mcp_sampling_proxy.system.warm_start import ENV as WARM_START_ENV

PROGRAM = "mcp-sampling-proxy"


class Command(Struct, frozen=True):
    """One command or subcommand: `words` after the program's name (() for the proxy itself)."""

    words: tuple[str, ...]
    summary: str
    parser: argparse.ArgumentParser

    @property
    def line(self) -> str:
        return " ".join((PROGRAM, *self.words))


class _Caught(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def _catch(parser: argparse.ArgumentParser, *_: object, **__: object) -> NoReturn:
    raise _Caught(parser)


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    """The parser `mcp-sampling-proxy NAME` builds, caught before its `main()` does anything else."""
    module = importlib.import_module(f"mcp_sampling_proxy.commands.{SUBCOMMANDS[name]}")
    run = module.main
    # wrap/unwrap and login/logout share a main(), told which it is (as commands/cli.py calls them)
    takes_name = len(inspect.signature(run).parameters) > 1
    logging = structlog.get_config()  # a main() may set up logging before it parses (console does)
    with (
        mock.patch.object(argparse.ArgumentParser, "parse_args", _catch),
        mock.patch.object(Parser, "parse_args", _catch),  # ours overrides it
        _without_user_settings(),
    ):
        try:
            run([], name) if takes_name else run([])
        except _Caught as caught:
            return caught.parser
        finally:
            structlog.configure(**logging)
    raise RuntimeError(f"`{PROGRAM} {name}` returned without parsing its arguments")


@contextlib.contextmanager
def _without_user_settings() -> Iterator[None]:
    """Defaults that name a user directory (init's path) are computed while the parser is built: without
    the builder's XDG or proxy variables they are the documented ones (`help_text` writes home as `~`)."""
    with mock.patch.dict(os.environ):
        for name in [name for name in os.environ if name.startswith(("XDG_", "MCP_SAMPLING_PROXY_"))]:
            del os.environ[name]
        yield


def parser_for(words: Sequence[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser that reads a command line (the words after the program's name), and the words it reads."""
    if words and words[0] in SUBCOMMANDS:
        return subcommand_parser(words[0]), list(words[1:])
    return build_parser(), list(words)


def actions_of(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """A parser's own subcommands (`audit verify`, ...): name -> (its one-line help, its parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (helps.get(name, ""), sub) for name, sub in action.choices.items()}
    return {}


def commands() -> Iterator[Command]:
    """The proxy, then each subcommand in the order of `--help` (`unwrap` after `wrap`, ...), each
    followed by its own subcommands."""
    yield Command((), "run a server behind the proxy (what a host config starts)", build_parser())
    # the modules in the order of --help, then each module's subcommands (`wrap`, then `unwrap`)
    modules = dict.fromkeys(SUBCOMMANDS[name] for name in (*SUBCOMMAND_SUMMARIES, *SUBCOMMANDS) if name in SUBCOMMANDS)
    names = [name for module in modules for name, its in SUBCOMMANDS.items() if its == module]
    for name in names:
        parser = subcommand_parser(name)
        yield Command((name,), SUBCOMMAND_SUMMARIES.get(name) or _first_sentence(parser.description), parser)
        for action, (summary, sub) in actions_of(parser).items():
            yield Command((name, action), summary or _first_sentence(sub.description), sub)


def help_text(parser: argparse.ArgumentParser) -> str:
    """What `--help` prints, at a width that does not depend on the terminal the docs are built in."""
    with mock.patch.dict(os.environ, {"COLUMNS": str(HELP_WIDTH + 2)}):  # argparse leaves 2 columns
        text = parser.format_help()
    home = str(Path.home())
    return text.replace(home + "/", "~/") if home != "/" else text


HELP_WIDTH = 100


def _first_sentence(text: str | None) -> str:
    first = re.split(r"\.\s|\s\(", " ".join((text or "").split()))[0].rstrip(".")
    return first[:1].lower() + first[1:]


class EnvironmentVariable(Struct, frozen=True):
    name: str
    meaning: str


# Every variable the package reads by name (tests/e2e/test_docs.py finds them in the code and fails on one
# missing here). Variables whose names a policy or an option gives are in NAMED_VARIABLES below.
ENVIRONMENT = (
    EnvironmentVariable(
        "OPENAI_API_KEY",
        "without a policy's `llm:` section: use an OpenAI-compatible provider with this key; "
        "never passed to the server",
    ),
    EnvironmentVariable("OPENAI_BASE_URL", "with or instead of `OPENAI_API_KEY`: the endpoint (a local server)"),
    EnvironmentVariable("OPENAI_MODEL", "the model of that provider"),
    EnvironmentVariable(
        "ANTHROPIC_API_KEY", "without a policy's `llm:` section and OpenAI's variables: use Anthropic with this key"
    ),
    EnvironmentVariable("ANTHROPIC_BASE_URL", "the endpoint of that provider"),
    EnvironmentVariable("ANTHROPIC_MODEL", "the model of that provider"),
    EnvironmentVariable(CONFIG_DIR_ENV, "the configuration directory (the default `policy.yaml`), instead of XDG's"),
    EnvironmentVariable(STATE_DIR_ENV, "the state directory (budgets, remembered approvals, backups, logins)"),
    EnvironmentVariable(RUNTIME_ENV, "the directory of the console sockets and the warm start server's"),
    EnvironmentVariable(
        WARM_START_ENV,
        "`off`: start each proxy on its own, never forked by the warm start server (Linux; see performance)",
    ),
    EnvironmentVariable(DISABLE_ENV, "set: never use the controlling terminal (what `--no-terminal` sets)"),
    EnvironmentVariable(DEVICE_ENV, "the terminal device to ask on instead of `/dev/tty` (`try` sets it)"),
    EnvironmentVariable(OPENER_ENV, "a command run with the URL instead of the browser (URL elicitation)"),
    EnvironmentVariable("MCP_SAMPLING_PROXY_TOKEN", "`serve`: one more bearer token callers may use (named `token`)"),
    EnvironmentVariable(
        "MCP_SAMPLING_PROXY_REPLICA", "`serve`: this replica's name in its audit records, when `--replica` is not given"
    ),
    EnvironmentVariable(
        "HTTPS_PROXY",
        "the HTTP proxy LLM providers are called through (`HTTP_PROXY` for `http://` endpoints, `ALL_PROXY` for "
        "both; either case); a SOCKS proxy is refused",
    ),
    EnvironmentVariable("NO_PROXY", "hosts LLM providers are called at directly, past `HTTPS_PROXY`"),
    EnvironmentVariable(
        "SSL_CERT_FILE", "the CA certificates an HTTPS provider's certificate is checked against, instead of certifi's"
    ),
    EnvironmentVariable("SSL_CERT_DIR", "a directory of such CA certificates (OpenSSL's hashed names)"),
    EnvironmentVariable("MCP_SAMPLING_PROXY_NO_UVLOOP", "set: run on asyncio's own event loop even with uvloop"),
    EnvironmentVariable(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "where OpenTelemetry traces of the decisions go; set, it turns them on unless `telemetry:` says otherwise",
    ),
    EnvironmentVariable("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "the same, for traces only"),
    EnvironmentVariable(
        "PATH",
        "where the proxy finds a server command (or `api_key_command`) given by name; a host started from the "
        "desktop gives it the session's PATH instead, without ~/.local/bin and the like (`doctor` checks with "
        "that; `wrap` writes the absolute path of a command found only here)",
    ),
    EnvironmentVariable("XDG_CONFIG_HOME", "where the configuration and some hosts' configs live (Linux)"),
    EnvironmentVariable("XDG_STATE_HOME", "where the state directory lives (Linux)"),
    EnvironmentVariable(
        "XDG_RUNTIME_DIR",
        "where the console sockets and the warm start server's live (Linux); hidden from sandboxed servers",
    ),
    EnvironmentVariable("XDG_DATA_HOME", "where sandboxed servers' own data directories live (Linux)"),
    EnvironmentVariable("XDG_CACHE_HOME", "where `uvx` keeps its cache, which a server it starts may write"),
    EnvironmentVariable("npm_config_cache", "where `npx` keeps its cache, which a server it starts may write"),
    EnvironmentVariable("UV_CACHE_DIR", "where `uvx` keeps its cache (instead of XDG_CACHE_HOME/uv)"),
    EnvironmentVariable("PIPX_HOME", "where `pipx run` keeps what it installs, which a server it starts may write"),
    EnvironmentVariable("SSH_AUTH_SOCK", "the SSH agent's socket: hidden from sandboxed servers"),
    EnvironmentVariable("CLAUDE_CONFIG_DIR", "`wrap`, `unwrap`, `doctor`: Claude Code's config directory"),
    EnvironmentVariable("CODEX_HOME", "`wrap`, `unwrap`, `doctor`: Codex's config directory"),
    EnvironmentVariable("CONTINUE_GLOBAL_DIR", "`wrap`, `unwrap`, `doctor`: Continue's config directory"),
    EnvironmentVariable("APPDATA", "`wrap`, `unwrap`, `doctor`: hosts' config files (Windows)"),
    EnvironmentVariable("USERPROFILE", "`wrap`, `unwrap`, `doctor`: the home directory (Windows)"),
    EnvironmentVariable("SHELL", "`doctor`: the login shell whose environment an editor gives a wrapped server"),
    EnvironmentVariable("HOME", "`doctor`: that shell's home; the sandbox: the home whose secrets it hides"),
)

NAMED_VARIABLES = (
    "`api_key_env:` of a provider (its key; never passed to the server)",
    "`url_env:` of `state:` (the Redis URL)",
    "`${VAR}` in a `--header` value",
    "`login --client-secret-env VAR`",
)


class ExitStatus(Struct, frozen=True):
    status: str
    meaning: str


# The proxy itself (`mcp-sampling-proxy [OPTIONS] -- COMMAND` or `--url URL`); tests/e2e/test_docs.py runs it
# into each of those it can cause.
PROXY_EXIT_STATUSES = (
    ExitStatus("0", "the host closed the connection or stopped the proxy (SIGTERM, SIGINT, SIGHUP)"),
    ExitStatus("N", "the server ended on its own with status N (1 when that was 0: it was not asked to)"),
    ExitStatus("128+N", "the server was killed by signal N"),
    ExitStatus("2", "a bad command line, policy file or server name; the message says what to fix"),
    ExitStatus("126", "the server's command cannot be run (not executable)"),
    ExitStatus("127", "the server's command does not exist, or is not on `PATH`"),
)

# The helper subcommands; each one's --help says what its 1 means.
SUBCOMMAND_EXIT_STATUSES = (
    ExitStatus("0", "done; for the checks, all is well"),
    ExitStatus("1", "what was checked is not well (`policy check`, `audit verify`, `doctor`), or it failed"),
    ExitStatus("2", "a bad command line, or input that cannot be read; the message says what to fix"),
    ExitStatus("130", "`login` interrupted (Ctrl-C) while it waits for the browser; nothing is stored"),
)
