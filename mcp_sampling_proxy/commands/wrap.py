"""`mcp-sampling-proxy wrap` / `unwrap`: put the proxy in front of a host's MCP servers, and take it out.

`wrap` rewrites the chosen entries of a host's config so the host starts the proxy, which starts the
real server (each entry as `hosts.wrapping` builds it). Nothing else in the file changes
(see `hosts.config_files` for how), a backup goes to the state dir first (`hosts.backups`), and the
original text of each entry goes into the sidecar file so `unwrap` can put it back byte for byte.
`wrap --list` shows which servers of which host are wrapped (`hosts.survey`); `unwrap --list-backups` lists the
backups and `unwrap --from-backup ID` restores one.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.config.atomic import write_atomic
from mcp_sampling_proxy.config.dirs import home_relative
from mcp_sampling_proxy.config.paths import default_policy_path, policy_or_default
from mcp_sampling_proxy.config.policy_edit import CannotEdit, add_profiles
from mcp_sampling_proxy.config.sandbox_profiles import profile
from mcp_sampling_proxy.config.settings import load_settings
from mcp_sampling_proxy.doctor.entries import key_fix
from mcp_sampling_proxy.doctor.entries import wrapped_entry as doctor_view  # not ours below: doctor's view
from mcp_sampling_proxy.hosts import backups
from mcp_sampling_proxy.hosts.config_files import Sidecar, load_config
from mcp_sampling_proxy.hosts.documents import ConfigDoc, same_data
from mcp_sampling_proxy.hosts.entries import is_wrapped, parse_proxy_args
from mcp_sampling_proxy.hosts.registry import (
    HOSTS,
    VSCODE_SETTINGS_TABLE,
    ConfigError,
    config_files,
    config_path,
    servers_table,
    table_label,
)
from mcp_sampling_proxy.hosts.survey import survey
from mcp_sampling_proxy.hosts.wrapping import (
    Invocation,
    Skip,
    derived_entry,
    describe_upstream,
    proxy_invocation,
    server_command,
    upstream_of,
    wrapped_entry,
)
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.text.identity import bad_character, derive_from_command
from mcp_sampling_proxy.text.sanitize import one_line
from mcp_sampling_proxy.transport.oauth import describe_login
from mcp_sampling_proxy.transport.sandbox import policy_grant_problems

SCOPES = ("user", "project", "local", "settings")


# -- the command ------------------------------------------------------------------------------------------


class Outcome(Struct):
    server: str
    message: str
    changed: bool = False
    error: bool = False
    warning: str | None = None  # printed on a line of its own below the outcome


class Plan(Struct):
    doc: ConfigDoc
    sidecar: Sidecar
    outcomes: list[Outcome] = field(default_factory=list)
    profiles: list[tuple[str, str]] = field(default_factory=list)  # (server name in the policy, sandbox entry)


def build_parser(action: str) -> argparse.ArgumentParser:
    wrap = action == "wrap"
    hosts = ", ".join(HOSTS)
    parser = Parser(
        prog=f"mcp-sampling-proxy {action}",
        description=textwrap.fill(
            "Rewrite a host's MCP config so the chosen servers start through mcp-sampling-proxy. A backup "
            "of the file goes to the state dir first (`unwrap --list-backups`); the originals are recorded in "
            "the state dir for `unwrap`. A server command given by name that the host would not find on the PATH "
            "it gives (a desktop app's lacks ~/.local/bin) is written as its absolute path. Wrapping a wrapped "
            "server changes nothing."
            if wrap
            else "Restore the chosen servers of a host's MCP config as they were before `wrap` (exactly, from the "
            "record wrap kept in the state dir; without it, rebuilt from the proxy's arguments). "
            "--list-backups lists the backups wrap and unwrap took; --from-backup ID puts one back whole.",
            100,
        ),
        epilog=(
            "examples:\n"
            f"  mcp-sampling-proxy {action} --host claude-desktop --all"
            + (" --policy ~/.config/mcp-sampling-proxy/policy.yaml" if wrap else "")
            + "\n"
            f"  mcp-sampling-proxy {action} --host vscode --scope project --server github --dry-run\n"
            f"  mcp-sampling-proxy {action} --host codex --config ~/.codex/config.toml --server docs\n"
            + (
                "  mcp-sampling-proxy wrap --list\n"
                if wrap
                else "  mcp-sampling-proxy unwrap --list-backups\n"
                "  mcp-sampling-proxy unwrap --from-backup 20250101T120000-vscode-mcp.json\n"
            )
            + f"\nhosts: {hosts}\n"
            "scopes: user (the per-user file, default), project (the file in --project-dir), local (Claude Code's\n"
            "  per-project servers in ~/.claude.json), settings (VS Code's user settings.json, mcp.servers, before "
            "1.102)\n"
            "a VS Code profile's mcp.json (User/profiles/ID/mcp.json, shown by --list): --host vscode --config PATH\n"
            "Continue: --scope project handles every .yaml/.yml/.json file in .continue/mcpServers/; --server NAME\n"
            "  finds an entry by its name, whichever of those files holds it."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", choices=list(HOSTS), metavar="HOST", help=f"the host: {hosts}")
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="the config file (default: where HOST keeps it for --scope; for Continue also a folder of server files)",
    )
    parser.add_argument(
        "--scope",
        choices=SCOPES,
        help="which of the host's files: user (default), project, "
        "local (Claude Code), settings (VS Code's user settings.json, mcp.servers)",
    )
    parser.add_argument("--project-dir", metavar="DIR", help="the project for --scope project/local (default: .)")
    select = parser.add_mutually_exclusive_group()
    select.add_argument(
        "--server",
        dest="servers",
        metavar="NAME",
        nargs="+",
        action="extend",
        default=[],
        help="the server entries to change (repeatable)",
    )
    select.add_argument("--all", action="store_true", help="every server entry in the file")
    if wrap:
        select.add_argument(
            "--list", action="store_true", help="show which servers of which host are wrapped (all hosts unless --host)"
        )
    else:
        select.add_argument(
            "--list-backups",
            action="store_true",
            help="list the backups wrap and unwrap took (in the state dir), newest last",
        )
        select.add_argument(
            "--from-backup",
            metavar="ID",
            help="put the backup ID back over the file it was taken from (the file as it is now is backed up first)",
        )
    if wrap:
        parser.add_argument("--policy", metavar="FILE", help="the policy file the proxy uses (checked, made absolute)")
        parser.add_argument(
            "--name-from-key",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="pass each entry's key as --name, what policy rules' server: matches (the default: "
            "a server's own reported name is never trusted; with --no-name-from-key the proxy "
            "derives the name from the command or URL)",
        )
    parser.add_argument("--dry-run", action="store_true", help="print the change as a diff and write nothing")
    return parser


class Target(Struct):
    """One config file a command edits (Continue's project scope: each file in .continue/mcpServers/)."""

    path: Path
    doc: ConfigDoc
    sidecar: Sidecar
    table: tuple[str, ...]
    servers: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.path} ({table_label(self.table)})" if len(self.table) > 1 else str(self.path)


def _targets(host: str, args: argparse.Namespace, scope: str) -> list[Target]:
    base = (
        Path(os.path.expanduser(args.config))
        if args.config
        else Path(str(config_path(host, scope, project_dir=args.project_dir)))
    )
    paths = config_files(base) if host == "continue" else [base]
    if not paths:
        raise ConfigError(f"{base}: no server files in this folder (*.yaml, *.yml, *.json)")
    targets = []
    for path in paths:
        table = servers_table(host, scope, args.project_dir)
        doc = load_config(path, host)
        sidecar = Sidecar(path)
        if (
            host == "vscode"
            and not args.scope
            and table != VSCODE_SETTINGS_TABLE
            and not doc.servers(table)
            and doc.servers(VSCODE_SETTINGS_TABLE)
        ):
            table = VSCODE_SETTINGS_TABLE  # --config names a settings.json: its mcp.servers
        targets.append(Target(path, doc, sidecar, table, doc.servers(table)))
    return targets


def main(argv: Sequence[str], action: str = "wrap") -> int:
    parser = build_parser(action)
    args = parser.parse_args(list(argv))
    prog = parser.prog
    if getattr(args, "list", False):
        return list_main(args, prog)
    if getattr(args, "list_backups", False):
        return list_backups_main()
    if getattr(args, "from_backup", None):
        return from_backup_main(args.from_backup, prog, dry_run=args.dry_run)
    if not args.host:
        parser.error(f"--host is required (one of {', '.join(HOSTS)})")
    if not (args.servers or args.all):
        parser.error("choose the servers: --server NAME ... or --all")
    spec = HOSTS[args.host]
    scope = args.scope or "user"
    if scope not in spec.scopes and not (args.config and scope != "local"):
        parser.error(f"{spec.title} has no {scope} scope (its scopes: {', '.join(spec.scopes)})")

    def fail(message: str) -> int:
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 1

    try:
        targets = _targets(args.host, args, scope)
    except ConfigError as exc:
        hint = ""
        if not args.config and "file not found" in str(exc):
            hint = f" (where {spec.title} keeps its {scope} config; give --config PATH if yours is elsewhere)"
        return fail(f"{exc}{hint}; nothing written")
    everywhere = [name for t in targets for name in t.servers]
    names = list(dict.fromkeys(everywhere if args.all else args.servers))
    unknown = [n for n in names if n not in everywhere]
    if unknown:
        known = ", ".join(dict.fromkeys(everywhere)) or "none"
        where = targets[0].where if len(targets) == 1 else f"{targets[0].path.parent} ({len(targets)} files)"
        doc = targets[0].doc
        elsewhere = [
            f"{n!r} is in the {table_label(t)}"
            for t in doc.tables()
            if t != targets[0].table
            for n in unknown
            if n in doc.servers(t)
        ]
        hint = f"; {', '.join(elsewhere)}: use --scope local --project-dir DIR" if elsewhere else ""
        return fail(
            f"{where}: no server named {', '.join(repr(n) for n in unknown)} (servers: {known}){hint}; nothing written"
        )

    policy = None
    if action == "wrap" and args.policy:
        policy = os.path.abspath(os.path.expanduser(args.policy))
        try:
            load_settings(policy, environ={})
        except PolicyError as exc:
            return fail(f"{exc}; nothing written")

    invocation = proxy_invocation()
    plans: list[tuple[Target, Plan]] = []
    for target in targets:
        chosen = [n for n in names if n in target.servers]
        if not chosen:
            if args.all:
                print(f"{target.where}: no servers, nothing to do")
            continue
        plan = Plan(target.doc, target.sidecar)
        for name in chosen:
            try:
                if action == "wrap":
                    _wrap_one(
                        plan,
                        args.host,
                        target.table,
                        name,
                        invocation,
                        policy,
                        args.name_from_key,
                        explicit=not args.all,
                    )
                else:
                    _unwrap_one(plan, args.host, target.table, name)
            except ConfigError as exc:
                plan.outcomes.append(Outcome(name, str(exc), error=True))
        print(f"{spec.title}: {target.where}")
        width = max(len(o.server) for o in plan.outcomes)
        for outcome in plan.outcomes:
            print(f"  {one_line(outcome.server, 60):<{width}}  {outcome.message}")
            if outcome.warning:
                print(f"  {'':<{width}}  warning: {outcome.warning}")
        plans.append((target, plan))
    if not plans:
        return 0
    if any(o.error for _, plan in plans for o in plan.outcomes):
        return fail("nothing written")
    changed = [(t, p) for t, p in plans if any(o.changed for o in p.outcomes)]
    if not changed:
        print("nothing to change")
        return 0
    for target, plan in changed:
        code = _write(prog, action, args.host, target, plan, dry_run=args.dry_run)
        if code:
            return code
    profiles = [item for _, plan in changed for item in plan.profiles]
    if profiles:
        code = _write_profiles(prog, policy, profiles, dry_run=args.dry_run)
        if code:
            return code
    if args.dry_run:
        return 0
    if action == "wrap":
        if policy is None:
            default = default_policy_path()
            print(
                f"no --policy: the proxy reads {default} (the default policy file; `mcp-sampling-proxy init` "
                "writes it) when it exists, else takes its LLM from OPENAI_API_KEY / ANTHROPIC_API_KEY in the "
                "host's environment and asks before every request"
            )
        for line in _key_notes(args.host, policy, [plan for _, plan in changed]):
            print(line)
        if args.host == "continue":
            print(
                "Continue gives servers only HOME, USER, PATH and the like besides the entry's env: a key variable "
                "the policy reads (api_key_env) and any ${VAR} a --header names go in the entry's env, e.g. "
                "OPENAI_API_KEY: ${{ secrets.OPENAI_API_KEY }}; a key file (api_key_file) needs nothing there"
            )
    print(f"next: {spec.reload}")
    return 0


def _key_notes(host: str, policy: str | None, plans: list[Plan]) -> list[str]:
    """What to do so the policy's key variables reach the proxies the host will start: a desktop app
    passes none of this shell's variables, an editor only its login shell's, Codex only what env_vars lists."""
    path, _ = policy_or_default(policy)
    try:
        settings = load_settings(path)
    except PolicyError:
        return []  # doctor reports the policy
    names = [p.api_key_env for p in settings.providers if p.api_key_env]
    notes: list[str] = []
    for provider in settings.providers:  # read by the proxy itself: no host's environment matters
        if provider.api_key_file:
            notes.append(
                f"the key of provider '{provider.name}' reaches the proxy from any host: the proxy reads "
                f"{home_relative(Path(provider.api_key_file))} itself"
            )
    for plan in plans:
        doc = plan.doc
        for name in dict.fromkeys(names):
            for table in doc.tables():
                missing = [
                    server
                    for server, entry in doc.servers(table).items()
                    if isinstance(entry, dict)
                    and any(o.server == server and o.changed for o in plan.outcomes)
                    and not doctor_view(host, doc.path, "user", server, entry).variable(name)
                ]
                if missing:
                    entry_view = doctor_view(host, doc.path, "user", missing[0], {})
                    notes.append(
                        f"{name} will not reach the proxy of {', '.join(repr(m) for m in missing)}: it is not in "
                        f"{entry_view.environment_note}. {key_fix(host, name, str(doc.path))}"
                    )
    return notes


def _write_profiles(prog: str, policy: str | None, profiles: list[tuple[str, str]], *, dry_run: bool) -> int:
    """Write the sandbox profile of each known server into the policy the wrapped servers use (the given
    one, else the default when it exists), keeping any entry the user wrote; print it where there is none."""
    path = Path(policy) if policy is not None else Path(default_policy_path())
    block = "  sandbox:\n    servers:\n" + "".join(f"      {json.dumps(s)}: {p}\n" for s, p in profiles)
    if not path.is_file():
        print(
            f"sandbox profiles for these servers (what each may write and reach; there is no policy file at {path} "
            "to write them into: `mcp-sampling-proxy init` makes one, then add):\n" + block.rstrip("\n")
        )
        return 0
    try:
        text = path.read_text(encoding="utf-8")
        edited = add_profiles(text, profiles, str(path))
    except (OSError, UnicodeDecodeError, PolicyError, CannotEdit) as exc:
        print(f"{path}: the sandbox profiles were not written ({exc}); add them by hand:\n" + block.rstrip("\n"))
        return 0
    kept = f" (kept your own entry for {', '.join(map(repr, edited.kept))})" if edited.kept else ""
    if not edited.added:
        print(f"{path}: every wrapped server has a sandbox entry already{kept}")
        return 0
    names = ", ".join(map(repr, edited.added))
    if dry_run:
        sys.stdout.writelines(_diff(text, edited.text, str(path)))
        print(f"dry run: the sandbox profiles of {names} would be added to {path}{kept}")
        return 0
    try:
        write_atomic(path, edited.text.encode("utf-8"))
    except OSError as exc:
        print(f"{prog}: error: cannot write {exc.filename or path}: {exc.strerror}", file=sys.stderr)
        return 1
    print(
        f"{path}: sandbox profiles added under sandbox.servers for {names}{kept}: what each may write and reach "
        "(docs/sandbox.md); servers not named there get the safe default"
    )
    settings = load_settings(str(path), environ={})
    for problem in policy_grant_problems(settings.sandbox, str(path), settings.named_files()):
        print(f"warning: {problem} (the proxy refuses to start the server until you change it)")
    return 0


def _write(prog: str, action: str, host: str, target: Target, plan: Plan, *, dry_run: bool) -> int:
    """Write one edited file: its backup first, and the record (before the edit on wrap, after on unwrap)."""
    path, doc, sidecar = target.path, target.doc, target.sidecar
    before, after = doc.text, plan.doc.text
    if dry_run:
        sys.stdout.writelines(_diff(before, after, str(path)))
        print(
            f"dry run: nothing written (a real run backs up {path.name} to the state dir first and "
            f"{'records the originals in' if action == 'wrap' else 'updates'} {sidecar.path.name})"
        )
        return 0
    try:
        original_bytes = Path(os.path.realpath(path)).read_bytes()
        if original_bytes != doc.encode(before):
            print(
                f"{prog}: error: {path} changed while this command ran; nothing written to it, run it again",
                file=sys.stderr,
            )
            return 1
        saved = backups.take(host, path, original_bytes, action)
        if action == "wrap":  # the record exists before the entry changes, and outlives it on unwrap
            sidecar.save()
        write_atomic(path, plan.doc.encode(after))
        if action == "unwrap":
            sidecar.save()
    except OSError as exc:
        print(f"{prog}: error: cannot write {exc.filename or path}: {exc.strerror}", file=sys.stderr)
        return 1
    print(
        f"backup: {saved.id} in {saved.file.parent} (`mcp-sampling-proxy unwrap --from-backup {saved.id}` puts it back)"
    )
    if action == "wrap":
        print(f"originals recorded in {sidecar.path} (for `mcp-sampling-proxy unwrap`)")
    return 0


def _wrap_one(
    plan: Plan,
    host: str,
    table: tuple[str, ...],
    name: str,
    invocation: Invocation,
    policy: str | None,
    name_from_key: bool,
    *,
    explicit: bool,
) -> None:
    doc = plan.doc
    entry = doc.servers(table)[name]
    if is_wrapped(entry):
        current = parse_proxy_args(entry.get("args") or []).options.get("--policy")
        note = ""
        if policy and current != policy:
            note = f" (its policy is {current or 'none'}; to use {policy}, unwrap and wrap again)"
        plan.outcomes.append(Outcome(name, f"already wrapped, unchanged{note}"))
        return
    bad = bad_character(name) if name_from_key else None
    if bad is not None:
        plan.outcomes.append(
            Outcome(
                name.encode("unicode_escape").decode(),
                f"cannot wrap: the entry's key holds a control or invisible character, {bad}; rename the entry",
                error=True,
            )
        )
        return
    found = server_command(host, entry)
    resolved = {**entry, "command": found.command} if found.command is not None else entry
    try:
        new = wrapped_entry(host, name, resolved, invocation, policy, name if name_from_key else None)
    except Skip as exc:
        plan.outcomes.append(Outcome(name, f"{exc}" + ("" if explicit else " (skipped)"), error=explicit))
        return
    original_text = doc.entry_text(table, name)
    wrapped_doc = doc.with_text(doc.replace_entry(table, name, new))
    plan.sidecar.put(
        host,
        table,
        name,
        original=entry,
        original_text=original_text,
        wrapped=new,
        wrapped_text=wrapped_doc.entry_text(table, name),
    )
    plan.doc = wrapped_doc
    plan.outcomes.append(
        Outcome(
            name,
            f"wrapped: {describe_upstream(host, entry)}{_oauth_note(host, entry)}{found.note}",
            changed=True,
            warning=found.warning,
        )
    )
    upstream = upstream_of(host, entry)
    if upstream is not None and upstream[0] == "stdio":
        argv = [str(word) for word in upstream[1]]
        env = entry.get("env") if isinstance(entry.get("env"), dict) else None
        suggested = profile(argv, env)
        if suggested is not None:
            plan.profiles.append((name if name_from_key else derive_from_command(argv), suggested))


def _oauth_note(host: str, entry: Any) -> str:
    """A remote that wants an OAuth login needs `login` once: the proxy a host spawns cannot show a browser."""
    upstream = upstream_of(host, entry)
    if upstream is None or upstream[0] != "http" or any(k.lower() == "authorization" for k in upstream[2]):
        return ""
    state, text = describe_login(upstream[1], probe_timeout=3.0)
    if state in ("none-needed", "unknown"):
        return ""
    return f"; {text}" if state == "needs-login" else f"; OAuth: {text}"


def _unwrap_one(plan: Plan, host: str, table: tuple[str, ...], name: str) -> None:
    doc = plan.doc
    entry = doc.servers(table)[name]
    if not is_wrapped(entry):
        plan.outcomes.append(Outcome(name, "not wrapped, unchanged"))
        return
    record = plan.sidecar.find(host, table, name)
    if record is not None and record.get("wrapped_text") == doc.entry_text(table, name):
        text = doc.restore_entry_text(table, name, record["original_text"], record["original"])
        how = "restored exactly"
    elif record is not None and same_data(entry, record.get("wrapped")):
        text = doc.replace_entry(table, name, record["original"])
        how = "restored (its formatting had changed since wrap)"
    else:
        target = derived_entry(
            host,
            entry,
            record.get("original") if record else None,
            yaml=HOSTS[host].format == "yaml" and doc.path.suffix.lower() != ".json",
        )
        if target is None:
            raise ConfigError("cannot tell what it ran before: its arguments have neither '-- COMMAND' nor --url")
        text = doc.replace_entry(table, name, target)
        how = (
            "rebuilt from the proxy's arguments (edited since wrap; other keys kept as they are now)"
            if record
            else "rebuilt from the proxy's arguments (no record of the original)"
        )
    plan.doc = doc.with_text(text)
    plan.sidecar.remove(host, table, name)
    plan.outcomes.append(
        Outcome(name, f"{how}: {describe_upstream(host, plan.doc.servers(table)[name])}", changed=True)
    )


def _diff(before: str, after: str, label: str) -> list[str]:
    lines = list(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile=label, tofile=f"{label} (after)"
        )
    )
    return [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]


# -- wrap --list --------------------------------------------------------------------------------------------


def list_main(args: argparse.Namespace, prog: str) -> int:
    if args.config and not args.host:
        print(f"{prog}: error: --config needs --host (the file's format depends on it)", file=sys.stderr)
        return 2
    hosts = [args.host] if args.host else list(HOSTS)
    rc = 0
    missing: list[str] = []
    for host in hosts:
        for status in survey(host, args.scope, args.config, args.project_dir):
            title = f"{HOSTS[host].title} ({status.scope})"
            if not status.exists:
                if args.host:
                    print(f"{title}: {status.path}: no such file")
                else:
                    missing.append(f"{HOSTS[host].title} ({status.scope})")
                continue
            if status.error:
                print(f"{title}: {status.error}")
                rc = 1
                continue
            wrapped = sum(s.wrapped for s in status.servers)
            print(f"{title}: {status.path}: {wrapped} of {len(status.servers)} servers wrapped")
            width = max((len(s.name) for s in status.servers), default=0)
            for server in status.servers:
                state = "wrapped    " if server.wrapped else "not wrapped"
                where = f" [{table_label(server.table)}]" if len(server.table) > 1 else ""
                print(f"  {one_line(server.name, 60):<{width}}  {state}  {server.detail}{where}")
    if missing:
        print(f"no config file for: {', '.join(missing)}")
    return rc


# -- backups ------------------------------------------------------------------------------------------------


def list_backups_main() -> int:
    try:
        found = backups.listing()
        folder = backups.backup_dir()
    except OSError as exc:
        print(f"mcp-sampling-proxy unwrap: error: cannot read the backups: {exc}", file=sys.stderr)
        return 1
    if not found:
        print(f"no backups in {folder}")
        return 0
    print(f"backups in {folder} (oldest first):")
    width = max(len(b.id) for b in found)
    for item in found:
        title = HOSTS[item.host].title if item.host in HOSTS else item.host
        print(f"  {item.id:<{width}}  {item.taken}  before {item.reason:<6}  {title}: {one_line(item.path, 200)}")
    print("restore one with `mcp-sampling-proxy unwrap --from-backup ID`")
    return 0


def from_backup_main(ident: str, prog: str, *, dry_run: bool) -> int:
    """Put a backup back over its file, backing up what is there now first (so this too can be undone)."""
    try:
        item = backups.find(ident)
        data = item.file.read_bytes()
    except (ConfigError, OSError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    target = Path(item.path)
    try:
        current: bytes | None = Path(os.path.realpath(target)).read_bytes()
    except FileNotFoundError:
        current = None
    except OSError as exc:
        print(f"{prog}: error: cannot read {target}: {exc.strerror}; nothing written", file=sys.stderr)
        return 1
    if current == data:
        print(f"{target} is already as backup {item.id} holds it; nothing to change")
        return 0
    if dry_run:
        before = "" if current is None else current.decode("utf-8", "replace")
        sys.stdout.writelines(_diff(before, data.decode("utf-8", "replace"), str(target)))
        print(f"dry run: nothing written (a real run backs up {target.name} first)")
        return 0
    try:
        saved = backups.take(item.host, target, current, "from-backup") if current is not None else None
        write_atomic(target, data)
    except OSError as exc:
        print(f"{prog}: error: cannot write {exc.filename or target}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"restored {target} from backup {item.id} (taken {item.taken}, before {item.reason})")
    if saved is not None:
        print(f"the file as it was: backup {saved.id}")
    spec = HOSTS.get(item.host)
    if spec is not None:
        print(f"next: {spec.reload}")
    return 0
