"""`mcp-sampling-proxy init`: write a commented policy file where the proxy looks for it by default.

Asks which shipped policy to start from and which LLM answers sampling (OpenAI, Anthropic, or an
OpenAI-compatible server such as Ollama), where the proxy gets the LLM's key (a 0600 key file the
proxy reads itself, or a variable), checks that the LLM answers a tiny request through the proxy's
own adapter, then writes `$XDG_CONFIG_HOME/mcp-sampling-proxy/policy.yaml` (or `--path`), the key
file, and the state directory and audit log the policy names. `--yes` takes every default.

The key file is the default because desktop hosts start the proxy without the variables exported
in a terminal (Claude Desktop, Zed and LM Studio pass none of the shell's; Cursor, VS Code, Windsurf
and Cline started from the desktop only what the login shell's start-up files set): a key the
policy reads from a variable exported in a terminal never reaches them. Shipped providers whose key variable is not
set are commented out, so the written policy names no key the proxy cannot find.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import os
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import anyio
import httpx

from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.commands.policy_template import (
    SHIPPED,
    LLMChoice,
    render,
    shipped_summary,
    shipped_text,
    without_providers,
)
from mcp_sampling_proxy.config.atomic import write_atomic
from mcp_sampling_proxy.config.dirs import home_relative
from mcp_sampling_proxy.config.key_store import not_a_bare_key, stored_key, write_key_file
from mcp_sampling_proxy.config.keys import KeySourceError
from mcp_sampling_proxy.config.paths import default_policy_path
from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.hosts.registry import HOSTS
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams
from mcp_sampling_proxy.providers.base import LLMError
from mcp_sampling_proxy.providers.registry import make_adapter
from mcp_sampling_proxy.quotas.state import state_dir

PROG = "mcp-sampling-proxy init"
KINDS = ("openai", "anthropic", "ollama", "keep")
KIND_TITLES = {
    "openai": "OpenAI, or any OpenAI-compatible API with a key",
    "anthropic": "Anthropic",
    "ollama": "Ollama, LM Studio, vLLM, llama.cpp: an OpenAI-compatible server on this machine, no key",
    "keep": "keep the policy's own (none: OPENAI_API_KEY / ANTHROPIC_API_KEY when the proxy starts)",
}
# kind -> (type, base URL, key variable, model, variables that override the base URL and model)
DEFAULTS: dict[str, tuple[str, str, str | None, str, str | None, str | None]] = {
    "openai": (
        "openai",
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
        "gpt-4o-mini",
        "OPENAI_BASE_URL",
        "OPENAI_MODEL",
    ),
    "anthropic": (
        "anthropic",
        "https://api.anthropic.com",
        "ANTHROPIC_API_KEY",
        "claude-sonnet-4-5",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
    ),
    "ollama": ("openai", "http://127.0.0.1:11434/v1", None, "llama3.2", None, None),
}
CHECK_TIMEOUT = 30.0
# a shell line pasted whole instead of the key: `OPENAI_API_KEY=sk-...`, `export OPENAI_API_KEY="sk-..."`
# the provider's own words in an adapter's error: `provider 'x' answered 401: HINT (THE PROVIDER'S WORDS)`
PROVIDER_DETAIL = re.compile(r"^provider '[^']*' answered \d+[^(]* \((.*)\)$", re.DOTALL)


class InitError(Exception):
    """Stop with this message (and exit code)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.message, self.code = message, code


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Write a commented policy file (from a shipped policy, with the LLM you choose, checked with "
        "a tiny request) where the proxy looks for it when no --policy is given.",
        epilog=f"default path: {default_policy_path()} ($XDG_CONFIG_HOME/mcp-sampling-proxy/policy.yaml, "
        "~/.config/... when unset)",
    )
    parser.add_argument("--yes", "-y", action="store_true", help="ask nothing: take every default")
    parser.add_argument(
        "--force", action="store_true", help="overwrite an existing policy file (and another key in --key-file FILE)"
    )
    parser.add_argument("--path", metavar="FILE", help="write here instead of the default path")
    parser.add_argument(
        "--from", dest="source", choices=SHIPPED, help="the shipped policy to start from (default: default)"
    )
    parser.add_argument(
        "--llm",
        choices=KINDS,
        help="the LLM that answers sampling (default: openai when "
        "OPENAI_API_KEY or OPENAI_BASE_URL is set, anthropic when ANTHROPIC_API_KEY is, else keep)",
    )
    parser.add_argument("--base-url", help="the LLM's base URL (e.g. http://127.0.0.1:11434/v1)")
    parser.add_argument("--model", help="the model to use by default")
    parser.add_argument(
        "--key-env",
        metavar="VAR",
        help="the variable holding the API key (default: OPENAI_API_KEY or ANTHROPIC_API_KEY); with "
        "--key-file, where the key to store is read from when stdin gives none",
    )
    parser.add_argument(
        "--key-file",
        metavar="FILE",
        help="store the API key in FILE (mode 0600) and have the policy name it (api_key_file), so the key "
        "reaches the proxy from any host; the key is read from stdin when it is piped, else from the --key-env "
        "variable; a key FILE already holds is kept when neither gives one",
    )
    parser.add_argument("--no-check", action="store_true", help="do not send the LLM a test request")
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    interactive = not args.yes
    if interactive and not sys.stdin.isatty():
        print(
            f"{PROG}: error: no terminal to ask on: run it in a terminal, or with --yes (and --llm, --from ...)",
            file=sys.stderr,
        )
        return 2
    ask: Callable[[str, str], str] = _ask if interactive else (lambda _question, default: default)
    secret = _ask_secret if interactive else None
    try:
        return run(args, ask, os.environ, secret=secret)
    except InitError as exc:
        sys.stdout.flush()  # what init printed comes first, also when both go to one pipe (`2>&1 | less`)
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        return exc.code
    except (EOFError, KeyboardInterrupt):
        sys.stdout.flush()
        print(f"\n{PROG}: stopped; nothing written", file=sys.stderr)
        return 1


def run(
    args: argparse.Namespace,
    ask: Callable[[str, str], str],
    environ: Mapping[str, str],
    *,
    secret: Callable[[str], str] | None = None,
) -> int:
    """`secret` asks for the key without echoing it (None: nobody to ask, with --yes)."""
    path = Path(os.path.expanduser(args.path)) if args.path else default_policy_path(environ)
    if path.exists() and not args.force:
        raise InitError(
            f"{path} already exists; nothing written. Edit it, or run again with --force to replace it "
            "(or --path FILE to write elsewhere)",
            1,
        )
    source = args.source or _choose(
        "Start from which shipped policy?", [(name, shipped_summary(name)) for name in SHIPPED], "default", ask
    )
    kind = args.llm or _choose(
        "Which LLM answers sampling requests?", [(k, KIND_TITLES[k]) for k in KINDS], _default_kind(environ), ask
    )
    if kind == "keep" and args.key_file:
        raise InitError("--key-file needs the LLM it holds the key of: --llm openai, anthropic or ollama", 2)
    llm, key = (None, None) if kind == "keep" else _llm_details(kind, args, ask, environ, secret)
    template = shipped_text(source)
    shipped = parse_settings(template, f"{source}.yaml")
    same_name = next((p.models for p in shipped.providers if llm is not None and p.name == llm.name), ())
    audit = state_dir(environ, create=False) / "audit.jsonl"
    is_default = path == default_policy_path(environ)
    text = render(template, source, llm, home_relative(audit), same_name, is_default=is_default)
    missing = {
        p.name: f"{p.api_key_env} is not set"
        for p in shipped.providers
        if (llm is None or p.name != llm.name) and p.api_key_env and not environ.get(p.api_key_env)
    }
    if missing:
        models = {p.name: tuple(m.name for m in p.models) for p in parse_settings(text, str(path)).providers}
        text = without_providers(text, missing, models)
    try:
        parse_settings(text, str(path))
    except PolicyError as exc:  # a bug of ours: never write a file the proxy refuses
        raise InitError(f"the generated policy does not load ({exc}); nothing written", 1) from None
    if llm is not None and not args.no_check:
        ok, said = check_llm(
            llm,
            key.value if key is not None else _env_key(llm, environ),
            key.source if key is not None else f"the key from {llm.key_env}",
        )
        print(said)
        if not ok and ask("Write the file anyway? [y/N]", "n").strip().lower() not in ("y", "yes"):
            raise InitError(
                "nothing written. Fix the LLM settings and run init again, or add --no-check to write the file anyway",
                1,
            )
    if ask(f"Write {path}? [Y/n]", "y").strip().lower() not in ("y", "yes", ""):
        raise InitError("nothing written", 1)
    if key is not None and key.write:
        write_key_file(key.path, key.value)
    _write(path, text, audit)
    print(f"wrote {path} (from {source}.yaml{f', LLM {llm.name}: {llm.model} at {llm.base_url}' if llm else ''})")
    if key is not None:
        said = "wrote the key to" if key.write else "kept the key in"
        print(f"{said} {key.path} (mode 0600): the proxy reads it at start, whatever environment the host gives it")
    for name, why in missing.items():
        print(f"provider {name!r} of {source}.yaml is commented out in the file: {why} (see the comment there)")
    print(f"audit log: {audit}")
    if is_default:
        print("the proxy uses this file when started without --policy; check the setup with: mcp-sampling-proxy doctor")
    else:
        print(
            f"the proxy uses this file when started with --policy {path} (`wrap --policy {path}` writes that into "
            f"host configs); check the setup with: mcp-sampling-proxy doctor --policy {path}"
        )
    if llm is not None and llm.key_env and not llm.key_file:
        print(
            f"note: the proxy reads the key from {llm.key_env}; {_desktop_environments()}: give it in the host "
            'config\'s "env", or run init again with --key-file'
        )
    return 0


def _desktop_environments() -> str:
    """What hosts started from the desktop pass of the shell's variables, from the hosts' table (the same
    words as getting-started's table)."""
    own = " and ".join(", ".join(h.title for h in HOSTS.values() if h.environment == "own").rsplit(", ", 1))
    login = " and ".join(", ".join(h.title for h in HOSTS.values() if h.environment == "login").rsplit(", ", 1))
    return (
        f"{own} pass none of your shell's variables, and {login} started from the desktop pass only what your "
        "login shell's start-up files set (~/.profile and the like), not what you export in a terminal"
    )


@dataclasses.dataclass(frozen=True)
class StoredKey:
    """The key `init` keeps in a key file: the file, the key (never printed), and whether to write it."""

    path: Path
    value: str = dataclasses.field(repr=False)
    write: bool  # False: the file already holds this key
    source: str  # where the key came from, as messages name it: "the key piped on stdin"


def _env_key(llm: LLMChoice, environ: Mapping[str, str]) -> str | None:
    return environ.get(llm.key_env) if llm.key_env else None


def _key_file(
    kind: str,
    variable: str,
    args: argparse.Namespace,
    ask: Callable[[str, str], str],
    secret: Callable[[str], str] | None,
    environ: Mapping[str, str],
) -> StoredKey | None:
    """The key file the proxy reads the key from (asked, or --key-file), with the key for it; None: the
    key stays in `variable`."""
    given = args.key_file
    if given is None:
        default = default_policy_path(environ).parent / f"{kind}.key"
        choice = _choose(
            "Where does the proxy get the API key?",
            [
                ("file", f"a file only you can read ({home_relative(default)}): reaches the proxy from any host"),
                (
                    "variable",
                    f"a variable ({variable}): only hosts that pass it get it ({_desktop_environments()}), so it "
                    "goes in each host config's env",
                ),
            ],
            "file" if secret is not None else "variable",
            ask,
        )
        if choice == "variable":
            return None
        given = ask(f"Key file [{home_relative(default)}]:", str(default)).strip() or str(default)
    path = Path(os.path.abspath(os.path.expanduser(given)))
    existing = _existing_key(path)
    key, source = _key_to_store(path, variable, existing, ask, secret, environ)
    if existing is not None and key != existing and not args.force:
        raise InitError(f"{path} already holds another key; nothing written. Run again with --force to replace it", 1)
    return StoredKey(path, key, write=key != existing, source=source)


def _existing_key(path: Path) -> str | None:
    """The key a key file holds already (None: no such file); refused as the proxy would refuse it."""
    try:
        return stored_key(path)
    except KeySourceError as exc:
        raise InitError(f"{exc}; nothing written", 1) from None


def _key_to_store(
    path: Path,
    variable: str,
    existing: str | None,
    ask: Callable[[str, str], str],
    secret: Callable[[str], str] | None,
    environ: Mapping[str, str],
) -> tuple[str, str]:
    """The key for the file and where it came from: piped on stdin (with --yes), else from `variable`, else
    typed, else the file's own."""
    if secret is None and not sys.stdin.isatty():
        piped = sys.stdin.read(64 * 1024).strip()
        if piped:
            return _bare_key(piped, "the key piped on stdin"), "the key piped on stdin"
    from_variable = environ.get(variable, "").strip()
    if from_variable and (
        secret is None or ask(f"Store the key from {variable} in {path}? [Y/n]", "y").strip().lower() in ("y", "yes")
    ):
        return _bare_key(from_variable, f"the key in {variable}"), f"the key from {variable}"
    if existing is not None and (
        secret is None or ask(f"{path} holds a key already: keep it? [Y/n]", "y").strip().lower() in ("y", "yes")
    ):
        return existing, f"the key in {home_relative(path)}"
    if secret is not None:
        typed = secret(f"Paste the API key for {path} (not shown): ").strip()
        if typed:
            return _bare_key(typed, "the key you pasted"), "the key you pasted"
    raise InitError(
        f"--key-file {path}: no key to store: pipe it on stdin (e.g. `pass show openai | {PROG} --yes "
        f"--key-file {home_relative(path)} ...`) or set {variable}; nothing written",
        2,
    )


def _bare_key(key: str, where: str) -> str:
    """`key` when it is a key alone; else InitError saying what is around it (never the key itself)."""
    problem = not_a_bare_key(key)
    if problem is not None:
        raise InitError(f"{where} {problem}; nothing written", 2)
    return key


def _default_kind(environ: Mapping[str, str]) -> str:
    if environ.get("OPENAI_API_KEY") or environ.get("OPENAI_BASE_URL"):
        return "openai"
    if environ.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    return "keep"


def _llm_details(
    kind: str,
    args: argparse.Namespace,
    ask: Callable[[str, str], str],
    environ: Mapping[str, str],
    secret: Callable[[str], str] | None,
) -> tuple[LLMChoice, StoredKey | None]:
    """The LLM's base URL, where its key comes from, and its model (listed with that key)."""
    provider_type, base_url, key_env, model, url_var, model_var = DEFAULTS[kind]
    base_url = (
        args.base_url
        or ask(f"Base URL [{environ.get(url_var or '') or base_url}]:", environ.get(url_var or "") or base_url)
        or base_url
    )
    base_url = base_url.strip().rstrip("/")
    stored: StoredKey | None = None
    if key_env is not None or args.key_env or args.key_file:
        variable = args.key_env or key_env or "OPENAI_API_KEY"
        stored = _key_file(kind, variable, args, ask, secret, environ)
        if stored is None and key_env is not None and not args.key_env:
            variable = ask(f"Variable holding the API key [{variable}]:", variable).strip() or variable
        key_env = None if stored is not None else variable
    key = stored.value if stored is not None else (environ.get(key_env) if key_env else None)
    model = environ.get(model_var or "") or model
    if provider_type == "openai" and not args.model:
        listed = _listed_models(base_url, key)
        if listed:
            print(f"models at {base_url}: {', '.join(listed[:12])}{' ...' if len(listed) > 12 else ''}")
            if model not in listed:
                model = listed[0]
    model = args.model or ask(f"Model [{model}]:", model).strip() or model
    key_file = home_relative(stored.path) if stored is not None else None
    return LLMChoice(kind, provider_type, base_url, key_env, model, key_file=key_file), stored


def _listed_models(base_url: str, key: str | None) -> list[str]:
    """The models an OpenAI-compatible server lists (GET /models); [] when it does not say."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(f"{base_url}/models", headers=headers, timeout=5.0)
        data = response.json().get("data") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return []
    return (
        [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if isinstance(data, list)
        else []
    )


def check_llm(llm: LLMChoice, key: str | None, source: str | None = None) -> tuple[bool, str]:
    """Send the LLM a tiny request through the proxy's own adapter, with `key` (from the key file or
    the variable; `source` says which, for a 401): (it answered, what to show)."""
    if llm.key_env and not key:
        return False, f"LLM check: {llm.key_env} is not set in this shell, so the request cannot be sent"
    config = ProviderConfig(
        name=llm.name,
        type=llm.type,
        base_url=llm.base_url,
        api_key_env=llm.key_env,  # where the key came from, for a 401's hint
        api_key_file=os.path.expanduser(llm.key_file) if llm.key_file else None,
        api_key=key,
        models=(ModelSpec(llm.model),),
        connect_timeout=5.0,
        read_timeout=CHECK_TIMEOUT,
        total_timeout=CHECK_TIMEOUT,
        max_attempts=1,
    )
    params: CreateMessageParams = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Reply with the word OK."}}],
        "maxTokens": 16,
    }

    async def ask_once() -> tuple[bool, str]:
        adapter = make_adapter(config)
        started = time.monotonic()
        try:
            completion = await adapter.complete(params, llm.model)
        except LLMError as exc:
            if exc.status == 401 and source:  # the adapter's hint names the policy's key setting, not yet written
                detail = PROVIDER_DETAIL.search(exc.message)
                return False, (
                    f"LLM check failed: provider '{llm.name}' answered 401: it refused {source}; check that it is "
                    f"the whole key, as the provider shows it{f' ({detail.group(1)})' if detail else ''}"
                )
            return False, f"LLM check failed: {exc.message}"
        finally:
            await adapter.aclose()
        text = " ".join(str(block.get("text", "")) for block in completion.content).strip()
        return True, (
            f"LLM check: {llm.name} answered in {(time.monotonic() - started) * 1000:.0f} ms "
            f"(model {completion.model}): {text[:60]!r}"
        )

    print(f"checking {llm.model} at {llm.base_url} with a tiny request ...")
    return anyio.run(ask_once)


def _choose(question: str, options: list[tuple[str, str]], default: str, ask: Callable[[str, str], str]) -> str:
    numbers = {str(i): name for i, (name, _) in enumerate(options, 1)}
    width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 120) - 1)
    lines = [question]
    for i, (name, text) in enumerate(options, 1):  # whole descriptions, wrapped under themselves
        head = f"  {i}) {name:<21} "
        lines += textwrap.wrap(
            text,
            width,
            initial_indent=head,
            subsequent_indent=" " * len(head),
            break_long_words=False,
            break_on_hyphens=False,  # paths stay whole
        )
    default_number = next(i for i, name in numbers.items() if name == default)
    while True:
        answer = ask("\n".join(lines) + f"\nChoice [{default_number}]:", default).strip()
        if not answer:
            return default
        if answer in numbers:
            return numbers[answer]
        if answer in numbers.values():
            return answer
        print(f"  '{answer}' is not one of 1-{len(options)}")


def _ask(question: str, default: str) -> str:
    print(question, end=" ", flush=True)
    answer = sys.stdin.readline()
    if not answer:
        raise EOFError
    return answer.strip() or default


def _ask_secret(question: str) -> str:
    """A key typed at the terminal, not echoed."""
    return getpass.getpass(question)


def _write(path: Path, text: str, audit: Path) -> None:
    """The policy (0600: it may come to hold header values), and the state dir and audit log it names."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"), mode=0o600)
    audit.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(audit, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
