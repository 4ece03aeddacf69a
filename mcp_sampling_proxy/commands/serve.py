"""`mcp-sampling-proxy serve --listen HOST:PORT -- SERVER_CMD...` (or `--url URL`): the server as a Streamable
HTTP endpoint.

Everything that can be wrong is checked before anything starts: the address, the tokens or the OAuth
authorization server (serve_oauth.py; listening beyond loopback without either is refused), the
policy. The port is bound here, so a port in use is an error of ours that says so. Then front/endpoint.py
serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import anyio
from msgspec import Struct

from mcp_sampling_proxy.audit.log_place import make_place
from mcp_sampling_proxy.audit.recorder import configured_secrets
from mcp_sampling_proxy.commands.cli import add_common_options, add_url_options, fail
from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.commands.serve_oauth import add_oauth_options, oauth_guard
from mcp_sampling_proxy.config.child_env import withhold
from mcp_sampling_proxy.config.keys import KeySourceError, resolve_keys
from mcp_sampling_proxy.config.paths import policy_or_default
from mcp_sampling_proxy.config.policy_file import read_policy_text
from mcp_sampling_proxy.config.settings import check_telemetry, load_settings, resolve_state
from mcp_sampling_proxy.front.endpoint import Front, FrontOptions
from mcp_sampling_proxy.front.oauth_settings import OAuthSetupError
from mcp_sampling_proxy.front.tokens import TOKEN_ENV, TokenError, Tokens, load_tokens
from mcp_sampling_proxy.log import configure, get_logger, set_secrets
from mcp_sampling_proxy.notation.units import parse_duration
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.quotas.integrity import start_state
from mcp_sampling_proxy.quotas.state import adopt, state_dir
from mcp_sampling_proxy.system.addresses import is_loopback
from mcp_sampling_proxy.system.event_loop import has_uvloop
from mcp_sampling_proxy.system.hardening import become_subreaper, mark_relay
from mcp_sampling_proxy.system.listening import listen_failure
from mcp_sampling_proxy.text.identity import bad_character, derive_from_command, derive_from_url
from mcp_sampling_proxy.transport.http import parse_headers
from mcp_sampling_proxy.transport.sandbox import Plan, SandboxRefused, contain, log_plan

if TYPE_CHECKING:
    from mcp_sampling_proxy.config.settings import Settings
    from mcp_sampling_proxy.front.resource_oauth import ResourceGuard
    from mcp_sampling_proxy.runtime import Upstream

DEFAULT_LISTEN = "127.0.0.1:8765"
REPLICA_ENV = "MCP_SAMPLING_PROXY_REPLICA"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mcp-sampling-proxy serve",
        meant={option: f"--listen HOST:PORT (e.g. --listen {DEFAULT_LISTEN})" for option in ("--port", "--host")},
        description="Serve a stdio MCP server (or a Streamable HTTP one, --url) as a Streamable HTTP endpoint "
        "at /mcp, under the policy: one server process (or upstream HTTP session) per client session.",
        epilog="examples:\n  mcp-sampling-proxy serve --listen 127.0.0.1:8765 --token-file tokens "
        "-- python server.py\n  mcp-sampling-proxy serve --token-file tokens --url https://mcp.example.com/mcp "
        "--header 'Authorization: Bearer ${EXAMPLE_TOKEN}'\n\ntoken file: one token a line, `name:token` (the "
        f"name is the audit's `client`) or `token`; mode 0600. {TOKEN_ENV} adds one more.\n\n"
        "OAuth instead (see the OAuth options above):\n"
        "  mcp-sampling-proxy serve --listen 0.0.0.0:8765 --oauth-issuer https://auth.example.com \\\n"
        "    --oauth-resource https://mcp.example.com/mcp --oauth-client-file client --oauth-scope mcp \\\n"
        "    -- python server.py\n\n"
        "--shared-upstream: one server for every caller, for servers that keep no caller's state. There is\n"
        "no isolation between callers: what one caller leaves in the server (files, memory, a login, a\n"
        "subscription), the next one sees, and its list changes and log messages reach every caller.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_options(parser)
    parser.add_argument(
        "--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help=f"where to listen (default: {DEFAULT_LISTEN})"
    )
    parser.add_argument("--token-file", metavar="PATH", help="bearer tokens callers must present (mode 0600)")
    parser.add_argument(
        "--max-sessions", type=int, default=16, metavar="N", help="most client sessions at once (default: 16)"
    )
    parser.add_argument(
        "--idle-timeout",
        default="10m",
        metavar="DURATION",
        help="end a session (and its server) after this long without a request (default: 10m)",
    )
    add_url_options(parser, "front")
    parser.add_argument(
        "--shared-upstream",
        action="store_true",
        help="one server (or HTTP session) shared by every client session, instead of one each: no isolation "
        "between callers (see below)",
    )
    add_oauth_options(parser)
    parser.add_argument(
        "--replica",
        metavar="NAME",
        help=f"this serve's name among several behind a balancer, written into every audit record as `replica` "
        f"(default: ${REPLICA_ENV}, else HOSTNAME:PORT)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="on loopback, another Host this endpoint is reached by (a balancer or TLS proxy on this machine); "
        "other Host values get 421, against DNS rebinding (repeatable)",
    )
    parser.add_argument(
        "--audit",
        metavar="PATH",
        help="write the audit log here instead of the policy's audit.path (one file per replica)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the real server's command line, after '--'")
    return parser


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT ([V6]:PORT for IPv6) -> (host, port); ValueError says what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: give HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host:
        raise ValueError(f"--listen {text!r}: give the host too, e.g. {DEFAULT_LISTEN}")
    return host, int(port)


class SetupRefused(Exception):
    """serve's options or policy cannot be served as given; the message says what to do."""


class Setup(Struct, frozen=True):
    """serve's options and policy, checked: everything the endpoint is built from, before anything runs."""

    args: argparse.Namespace
    settings: Settings
    policy: str | None
    name: str
    replica: str
    command: list[str]
    host: str
    port: int
    tokens: Tokens
    idle: float
    headers: dict[str, str]
    guard: ResourceGuard | None

    def front(
        self,
        sandbox: Plan | None = None,
        hidden: frozenset[str] = frozenset(),
        start_upstream: Callable[[], Upstream] | None = None,
    ) -> Front:
        """The endpoint these options describe, not yet listening: `serve` runs it on its socket, and the
        tests play its HTTP in process. `start_upstream`: where each session's server comes from (default:
        the command's process, or the --url session; tests play a server in memory)."""
        options = FrontOptions(
            host=self.host,
            port=self.port,
            command=self.command,
            name=self.name,
            tokens=self.tokens,
            max_sessions=self.args.max_sessions,
            idle_timeout=self.idle,
            max_message_bytes=self.args.max_message_bytes,
            sandbox=sandbox,
            hidden=hidden,
            url=self.args.url,
            headers=self.headers,
            shared=self.args.shared_upstream,
            oauth=self.guard,
            replica=self.replica,
            allowed_hosts=tuple(self.args.allow_host),
        )
        return Front(self.settings, options, start_upstream)


def main(argv: Sequence[str]) -> int:
    try:
        setup = check_setup(argv, os.environ)
    except SetupRefused as exc:
        return fail(str(exc))
    os.environ.pop(TOKEN_ENV, None)  # no server inherits it
    try:
        listener = _bind(setup.host, setup.port)
    except OSError as exc:
        return fail(listen_failure(setup.host, setup.port, exc, lambda free: f"--listen {_address(setup.host, free)}"))
    return _run(setup, listener)


def check_setup(argv: Sequence[str], environ: Mapping[str, str]) -> Setup:
    """Every option and the policy checked, the OAuth authorization server asked for its metadata; nothing
    bound or started. SetupRefused says what is wrong."""
    args = build_parser().parse_args(list(argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.url):
        raise SetupRefused(
            "serve: give the server either as '-- COMMAND [ARGS...]' or with --url URL (see serve --help)"
        )
    if args.header and not args.url:
        raise SetupRefused("serve: --header is for --url (a command's server gets no HTTP headers)")
    try:
        headers = parse_headers(args.header, environ) if args.url else {}
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        raise SetupRefused(str(exc)) from None
    try:
        idle = parse_duration(args.idle_timeout)
    except ValueError:
        raise SetupRefused(f"--idle-timeout {args.idle_timeout!r}: give a duration such as 90s, 10m or 1h") from None
    if args.max_sessions < 1:
        raise SetupRefused("--max-sessions must be at least 1")
    try:
        tokens = load_tokens(args.token_file, environ)
    except TokenError as exc:
        raise SetupRefused(str(exc)) from None
    if args.name is not None and (bad_character(args.name) is not None or not args.name.strip()):
        raise SetupRefused("--name: give the server a name of visible characters")
    name = args.name.strip() if args.name else (derive_from_command(command) if command else derive_from_url(args.url))
    replica = replica_name(args.replica, environ, port)
    if replica is None:
        raise SetupRefused(f"--replica (or {REPLICA_ENV}): give a name of visible characters, at most 200 of them")
    for allowed in args.allow_host:
        if not allowed or any(c.isspace() or c in "/,@" for c in allowed) or bad_character(allowed) is not None:
            raise SetupRefused(f"--allow-host {allowed!r}: give a Host header's value, HOST:PORT (e.g. 127.0.0.1:8080)")
    if args.audit is not None and not args.audit.strip():
        raise SetupRefused("--audit: give the file this replica writes its audit log to")
    try:
        guard = oauth_guard(args, host, port, name, environ)
    except OAuthSetupError as exc:
        raise SetupRefused(str(exc)) from None
    if not tokens.required and guard is None and not is_loopback(host):
        raise SetupRefused(
            f"--listen {args.listen} reaches beyond this machine, and no token protects it: give --token-file "
            f"PATH (one token a line, mode 0600) or set {TOKEN_ENV}, or --oauth-issuer URL, or listen on 127.0.0.1"
        )
    missing = _not_runnable(command[0]) if command else _not_a_url(args.url)
    if missing is not None:  # found now, not at the first client's initialize (2: a bad command line)
        raise SetupRefused(missing)
    policy, _ = policy_or_default(args.policy)
    try:
        text = read_policy_text(policy) if policy is not None else None
        settings = load_settings(policy, text=text)
        settings.providers = resolve_keys(settings.providers, hidden=settings.secret_env_vars())
        settings.state = resolve_state(settings.state, environ)
        check_telemetry(settings.telemetry)
        if args.audit is not None:
            settings.audit_path = audit_override(args.audit)
    except (PolicyError, KeySourceError) as exc:
        raise SetupRefused(str(exc)) from None
    return Setup(args, settings, policy, name, replica, command, host, port, tokens, idle, headers, guard)


def _not_a_url(url: str) -> str | None:
    """What is wrong with --url, else None."""
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return f"--url {url!r}: give the server's MCP endpoint as http://HOST[:PORT]/PATH or https://..."
    return None


def replica_name(given: str | None, environ: Mapping[str, str], port: int) -> str | None:
    """--replica, else $MCP_SAMPLING_PROXY_REPLICA, else HOSTNAME:PORT (a pod's name in Kubernetes);
    None when the name given is not fit for an audit record."""
    name = (given if given is not None else environ.get(REPLICA_ENV) or f"{socket.gethostname()}:{port}").strip()
    if not name or len(name) > 200 or bad_character(name) is not None:
        return None
    return name


def audit_override(path: str) -> str:
    """--audit PATH: absolute, from the directory serve starts in (systemd, a container: say it whole)."""
    return os.path.normpath(os.path.abspath(os.path.expanduser(path)))


def _not_runnable(executable: str) -> str | None:
    """What is wrong when the server's command cannot run, else None."""
    if os.sep not in executable:
        if shutil.which(executable) is None:
            return f"cannot start the server: command '{executable}' not found on PATH; give its absolute path"
        return None
    if not os.path.isfile(executable):
        return f"cannot start the server: '{executable}' does not exist"
    if not os.access(executable, os.X_OK):
        return f"cannot start the server: '{executable}' is not executable"
    return None


def _address(host: str, port: int) -> str:
    """HOST:PORT as --listen takes it ([V6]:PORT)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def _run(setup: Setup, listener: socket.socket) -> int:
    args, settings, policy, name, command = setup.args, setup.settings, setup.policy, setup.name, setup.command
    mark_relay()
    become_subreaper()
    with contextlib.suppress(OSError):  # the key held from before the first server runs (quotas/integrity.py)
        if start_state(state_dir(create=True)):
            adopt(state_dir(create=False))
    set_secrets(configured_secrets(settings, os.environ))
    hidden = settings.secret_env_vars()
    withhold(hidden)
    configure(args.log_level, args.log_format)
    log = get_logger("mcp_sampling_proxy")
    if args.no_terminal is False:
        log.debug("serve never asks at a terminal: approvals go to the console, the host or the webhook")
    sandbox = None
    if command:  # the sandbox contains a command; a URL's server runs elsewhere
        # serve's own secrets too: the token and OAuth client files (a server reading alice's token is alice)
        own = [*settings.named_files(), *(f for f in (args.token_file, args.oauth_client_file) if f)]
        make_place(settings.audit.path)  # before the plan, which hides only what exists
        try:
            sandbox = contain(settings.sandbox, policy, own, name=name, command=command)
        except SandboxRefused as exc:
            return fail(str(exc))
        log_plan(sandbox)
    log.info("policy", file=policy or "none: providers from the environment, every request asked")
    if command:
        log.info("server command", command=shlex.join(command), shared=args.shared_upstream or None)
    else:
        log.info("server URL", url=args.url, headers=sorted(setup.headers) or None, shared=args.shared_upstream or None)
    log.info("audit", file=settings.audit.path or "none", replica=setup.replica)
    front = setup.front(sandbox, frozenset(hidden))
    try:
        anyio.run(front.serve, listener, backend="asyncio", backend_options={"use_uvloop": has_uvloop()})
    except KeyboardInterrupt:  # pragma: no cover - uvicorn handles the signals
        return 130
    return 0
