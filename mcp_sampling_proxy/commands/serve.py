"""`mcp-sampling-proxy serve --listen HOST:PORT -- SERVER_CMD...`: the server as a Streamable HTTP endpoint.

Everything that can be wrong is checked before anything starts: the address, the tokens (listening
beyond loopback without one is refused), the policy. The port is bound here, so a port in use is
an error of ours that says so. Then front.py serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shlex
import shutil
import socket
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import anyio

from mcp_sampling_proxy.audit.recorder import configured_secrets
from mcp_sampling_proxy.commands.cli import add_common_options, fail
from mcp_sampling_proxy.config.child_env import withhold
from mcp_sampling_proxy.config.front_tokens import TOKEN_ENV, TokenError, Tokens, load_tokens
from mcp_sampling_proxy.config.keys import KeySourceError, resolve_keys
from mcp_sampling_proxy.config.paths import policy_or_default
from mcp_sampling_proxy.config.policy_file import read_policy_text
from mcp_sampling_proxy.config.settings import check_telemetry, load_settings, resolve_state
from mcp_sampling_proxy.front import Front, FrontOptions
from mcp_sampling_proxy.hardening import become_subreaper, mark_relay
from mcp_sampling_proxy.identity import bad_character, derive_from_command
from mcp_sampling_proxy.log import configure, get_logger, set_secrets
from mcp_sampling_proxy.runtime import has_uvloop
from mcp_sampling_proxy.transport.sandbox import plan, proxy_paths
from mcp_sampling_proxy.units import parse_duration
from mcp_sampling_proxy.yamlnodes import PolicyError

if TYPE_CHECKING:  # (imported when used: the front pulls in uvicorn and the SDK's server)
    from mcp_sampling_proxy.config.settings import Settings

DEFAULT_LISTEN = "127.0.0.1:8765"
REPLICA_ENV = "MCP_SAMPLING_PROXY_REPLICA"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-sampling-proxy serve",
        description="Serve a stdio MCP server as a Streamable HTTP endpoint at /mcp, under the policy: one "
        "server process per client session.",
        epilog="example:\n  mcp-sampling-proxy serve --listen 127.0.0.1:8765 --token-file tokens "
        "-- python server.py\n\ntoken file: one token a line, `name:token` (the name is the audit's "
        f"`client`) or `token`; mode 0600. {TOKEN_ENV} adds one more.",
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
    parser.add_argument(
        "--replica",
        metavar="NAME",
        help=f"this serve's name among several behind a balancer, written into every audit record as `replica` "
        f"(default: ${REPLICA_ENV}, else HOSTNAME:PORT)",
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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        return fail("serve: give the server's command after '--' (see serve --help)")
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        return fail(str(exc))
    try:
        idle = parse_duration(args.idle_timeout)
    except ValueError:
        return fail(f"--idle-timeout {args.idle_timeout!r}: give a duration such as 90s, 10m or 1h")
    if args.max_sessions < 1:
        return fail("--max-sessions must be at least 1")
    try:
        tokens = load_tokens(args.token_file, os.environ)
    except TokenError as exc:
        return fail(str(exc))
    os.environ.pop(TOKEN_ENV, None)  # no server inherits it
    if not tokens.required and not is_loopback(host):
        return fail(
            f"--listen {args.listen} reaches beyond this machine, and no token protects it: give --token-file "
            f"PATH (one token a line, mode 0600) or set {TOKEN_ENV}, or listen on 127.0.0.1"
        )
    missing = _not_runnable(command[0])
    if missing is not None:  # found now, not at the first client's initialize (2: a bad command line)
        return fail(missing)
    if args.name is not None and (bad_character(args.name) is not None or not args.name.strip()):
        return fail("--name: give the server a name of visible characters")
    name = args.name.strip() if args.name else derive_from_command(command)
    replica = replica_name(args.replica, os.environ, port)
    if replica is None:
        return fail(f"--replica (or {REPLICA_ENV}): give a name of visible characters, at most 200 of them")
    if args.audit is not None and not args.audit.strip():
        return fail("--audit: give the file this replica writes its audit log to")
    policy, _ = policy_or_default(args.policy)
    try:
        text = read_policy_text(policy) if policy is not None else None
        settings = load_settings(policy, text=text)
        settings.providers = resolve_keys(settings.providers, hidden=settings.secret_env_vars())
        settings.state = resolve_state(settings.state, os.environ)
        check_telemetry(settings.telemetry)
        if args.audit is not None:
            settings.audit_path = audit_override(args.audit)
    except (PolicyError, KeySourceError) as exc:
        return fail(str(exc))
    try:
        listener = _bind(host, port)
    except OSError as exc:
        return fail(f"cannot listen on {args.listen}: {exc.strerror or exc}")
    return _run(settings, policy, name, replica, command, host, port, tokens, args, idle, listener)


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


def _run(
    settings: Settings,
    policy: str | None,
    name: str,
    replica: str,
    command: list[str],
    host: str,
    port: int,
    tokens: Tokens,
    args: argparse.Namespace,
    idle: float,
    listener: socket.socket,
) -> int:
    mark_relay()
    become_subreaper()
    set_secrets(configured_secrets(settings, os.environ))
    hidden = settings.secret_env_vars()
    withhold(hidden)
    configure(args.log_level, args.log_format)
    log = get_logger("mcp_sampling_proxy")
    if args.no_terminal is False:
        log.debug("serve never asks at a terminal: approvals go to the console, the host or the webhook")
    contained = settings.sandbox.for_server(name)
    hidden_paths = [] if contained.mode == "off" else proxy_paths(policy, settings.named_files())
    sandbox = plan(contained, hidden_paths, command=command)
    if contained.mode == "required" and not sandbox.active:
        return fail(f"sandbox: required, but the server cannot be sandboxed here: {sandbox.unavailable}")
    options = FrontOptions(
        host=host,
        port=port,
        command=command,
        name=name,
        tokens=tokens,
        max_sessions=args.max_sessions,
        idle_timeout=idle,
        max_message_bytes=args.max_message_bytes,
        sandbox=sandbox.prefix,
        hidden=frozenset(hidden),
        replica=replica,
    )
    log.info("policy", file=policy or "none: providers from the environment, every request asked")
    log.info("server command", command=shlex.join(command))
    log.info("audit", file=settings.audit.path or "none", replica=replica)
    front = Front(settings, options)
    try:
        anyio.run(front.serve, listener, backend="asyncio", backend_options={"use_uvloop": has_uvloop()})
    except KeyboardInterrupt:  # pragma: no cover - uvicorn handles the signals
        return 130
    return 0
