"""`mcp-sampling-proxy init`: write a commented policy file where the proxy looks for it by default.

Asks which shipped policy to start from and which LLM answers sampling (OpenAI, Anthropic, or an
OpenAI-compatible server such as Ollama), checks that the LLM answers a tiny request through the
proxy's own adapter, then writes `$XDG_CONFIG_HOME/mcp-sampling-proxy/policy.yaml` (or `--path`)
and creates the state directory and audit log the file names. `--yes` takes every default.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from mcp_sampling_proxy.commands.policy_template import SHIPPED, LLMChoice, render, shipped_summary, shipped_text
from mcp_sampling_proxy.config.dirs import home_relative
from mcp_sampling_proxy.config.paths import default_policy_path

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


class InitError(Exception):
    """Stop with this message (and exit code)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.message, self.code = message, code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Write a commented policy file (from a shipped policy, with the LLM you choose, checked with "
        "a tiny request) where the proxy looks for it when no --policy is given.",
        epilog=f"default path: {default_policy_path()} ($XDG_CONFIG_HOME/mcp-sampling-proxy/policy.yaml, "
        "~/.config/... when unset)",
    )
    parser.add_argument("--yes", "-y", action="store_true", help="ask nothing: take every default")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
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
    parser.add_argument("--key-env", metavar="VAR", help="the variable holding the API key")
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
    try:
        return run(args, ask, os.environ)
    except InitError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        return exc.code
    except (EOFError, KeyboardInterrupt):
        print(f"\n{PROG}: stopped; nothing written", file=sys.stderr)
        return 1


def run(args: argparse.Namespace, ask: Callable[[str, str], str], environ: Mapping[str, str]) -> int:
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
    llm = None if kind == "keep" else _llm_details(kind, args, ask, environ)
    from mcp_sampling_proxy.config.settings import parse_settings
    from mcp_sampling_proxy.quotas.state import state_dir
    from mcp_sampling_proxy.yamlnodes import PolicyError

    template = shipped_text(source)
    shipped = parse_settings(template, f"{source}.yaml")
    same_name = next((p.models for p in shipped.providers if llm is not None and p.name == llm.name), ())
    audit = state_dir(environ, create=False) / "audit.jsonl"
    is_default = path == default_policy_path(environ)
    text = render(template, source, llm, home_relative(audit), same_name, is_default=is_default)
    try:
        parse_settings(text, str(path))
    except PolicyError as exc:  # a bug of ours: never write a file the proxy refuses
        raise InitError(f"the generated policy does not load ({exc}); nothing written", 1) from None
    if llm is not None and not args.no_check:
        ok, said = check_llm(llm, environ)
        print(said)
        if not ok and ask("Write the file anyway? [y/N]", "n").strip().lower() not in ("y", "yes"):
            raise InitError(
                "nothing written. Fix the LLM settings and run init again, or add --no-check to write the file anyway",
                1,
            )
    if ask(f"Write {path}? [Y/n]", "y").strip().lower() not in ("y", "yes", ""):
        raise InitError("nothing written", 1)
    _write(path, text, audit)
    print(f"wrote {path} (from {source}.yaml{f', LLM {llm.name}: {llm.model} at {llm.base_url}' if llm else ''})")
    print(f"audit log: {audit}")
    if is_default:
        print("the proxy uses this file when started without --policy; check the setup with: mcp-sampling-proxy doctor")
    else:
        print(
            f"the proxy uses this file when started with --policy {path} (`wrap --policy {path}` writes that into "
            f"host configs); check the setup with: mcp-sampling-proxy doctor --policy {path}"
        )
    if llm is not None and llm.key_env and not environ.get(llm.key_env):
        print(f'note: {llm.key_env} is not set here: give it in the host config\'s "env" for the proxy')
    return 0


def _default_kind(environ: Mapping[str, str]) -> str:
    if environ.get("OPENAI_API_KEY") or environ.get("OPENAI_BASE_URL"):
        return "openai"
    if environ.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    return "keep"


def _llm_details(
    kind: str, args: argparse.Namespace, ask: Callable[[str, str], str], environ: Mapping[str, str]
) -> LLMChoice:
    provider_type, base_url, key_env, model, url_var, model_var = DEFAULTS[kind]
    base_url = (
        args.base_url
        or ask(f"Base URL [{environ.get(url_var or '') or base_url}]:", environ.get(url_var or "") or base_url)
        or base_url
    )
    base_url = base_url.strip().rstrip("/")
    if key_env is not None:
        key_env = args.key_env or ask(f"Variable holding the API key [{key_env}]:", key_env).strip() or key_env
    elif args.key_env:
        key_env = args.key_env
    model = environ.get(model_var or "") or model
    if provider_type == "openai" and not args.model:
        listed = _listed_models(base_url, key_env, environ)
        if listed:
            print(f"models at {base_url}: {', '.join(listed[:12])}{' ...' if len(listed) > 12 else ''}")
            if model not in listed:
                model = listed[0]
    model = args.model or ask(f"Model [{model}]:", model).strip() or model
    return LLMChoice(kind, provider_type, base_url, key_env, model)


def _listed_models(base_url: str, key_env: str | None, environ: Mapping[str, str]) -> list[str]:
    """The models an OpenAI-compatible server lists (GET /models); [] when it does not say."""
    import httpx

    headers = {"Authorization": f"Bearer {environ[key_env]}"} if key_env and environ.get(key_env) else {}
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


def check_llm(llm: LLMChoice, environ: Mapping[str, str]) -> tuple[bool, str]:
    """Send the LLM a tiny request through the proxy's own adapter: (it answered, what to show)."""
    import anyio

    from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig
    from mcp_sampling_proxy.providers.base import LLMError
    from mcp_sampling_proxy.providers.registry import make_adapter

    if llm.key_env and not environ.get(llm.key_env):
        return False, f"LLM check: {llm.key_env} is not set in this shell, so the request cannot be sent"
    config = ProviderConfig(
        name=llm.name,
        type=llm.type,
        base_url=llm.base_url,
        api_key_env=llm.key_env,
        models=(ModelSpec(llm.model),),
        connect_timeout=5.0,
        read_timeout=CHECK_TIMEOUT,
        total_timeout=CHECK_TIMEOUT,
        max_attempts=1,
    )
    params = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Reply with the word OK."}}],
        "maxTokens": 16,
    }

    async def ask_once() -> tuple[bool, str]:
        adapter = make_adapter(config)
        started = time.monotonic()
        try:
            completion = await adapter.complete(params, llm.model)
        except LLMError as exc:
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
    lines = [question] + [f"  {i}) {name:<21} {text}" for i, (name, text) in enumerate(options, 1)]
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


def _write(path: Path, text: str, audit: Path) -> None:
    """The policy (0600: it may come to hold header values), and the state dir and audit log it names."""
    from mcp_sampling_proxy.config.atomic import write_atomic

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"), mode=0o600)
    audit.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(audit, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
