"""doctor's provider checks: each LLM provider's models list, or a 1-token completion when it has none;
the status it got and whether the key variable is set, never the key. They run in parallel with a
short timeout, so a dead provider costs seconds, not minutes."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import anyio

from mcp_sampling_proxy.config.dirs import home_relative
from mcp_sampling_proxy.config.keys import KeySourceError, key_source, resolve_key
from mcp_sampling_proxy.config.providers import PRESET_FACTS
from mcp_sampling_proxy.doctor.checklist import Check, Section
from mcp_sampling_proxy.providers.base import LLMError
from mcp_sampling_proxy.providers.command import program_of
from mcp_sampling_proxy.providers.errors import http_error, safe_url
from mcp_sampling_proxy.providers.llm_http import TransportFailure
from mcp_sampling_proxy.providers.registry import make_adapter
from mcp_sampling_proxy.text.sanitize import one_line


def _unreached(exc: TransportFailure | TimeoutError, label: str, shown: str, key_note: str, timeout: float) -> Check:
    """The check of a provider that gave no HTTP answer at all."""
    if isinstance(exc, TimeoutError) or exc.kind in ("connect timeout", "read timeout"):
        return Check(
            "fail",
            f"{label}: no answer within {timeout:g} s ({key_note})",
            "check that the server is up and base_url points at it",
        )
    if exc.kind == "bad url":
        return Check(
            "fail",
            f"{label}: unusable base_url ({one_line(exc.reason, 120)})",
            "base_url must start with http:// or https://",
        )
    if exc.reason == "connection refused":
        fix = f"nothing listens at {shown}: start the server (Ollama: `ollama serve`) or correct base_url"
    elif exc.reason == "host name not found":
        fix = "the host name in base_url does not resolve: check it (and your network)"
    else:
        fix = "check base_url and your network"
    return Check("fail", f"{label}: {exc.reason} ({key_note})", fix)


def _status_fix(status: int, key_var: str | None, url: str, source: str | None = None) -> str:
    """What to do about an HTTP error status; `source`: the key file or command the key came from."""
    if status == 401:
        if source:
            return f"the key from {source} was refused: check it belongs to this provider and is still valid"
        if not key_var:
            return (
                "the provider wants a key: give its provider api_key_file: FILE (a 0600 file holding the key) "
                "or api_key_env: VAR in the policy"
            )
        if os.environ.get(key_var):
            return f"the key in {key_var} was refused: check it belongs to this provider and is still valid"
        return f"set {key_var} (in the host config's env, and in this shell to check again)"
    if status == 403:
        holder = f" from {source}" if source else f" in {key_var}" if key_var else ""
        return f"the key{holder} lacks access to this API or model"
    if status == 404:
        return f"nothing answers at {url}: check base_url (OpenAI-compatible servers usually end in /v1)"
    if status == 429:
        return "rate limited or out of quota: try again later, or check the account's limits"
    if status >= 500:
        return "the provider has a problem right now: try again later"
    return "check the provider's base_url and key"


async def probe_provider(provider: Any, timeout: float) -> list[Check]:
    """One provider: for one that speaks HTTP, GET its models list (and a 1-token completion when it has
    none); for a CLI, whether its program is there; the console only needs a terminal."""
    name = f"'{provider.name}' ({provider.type})"
    if not provider.kind.http and not provider.kind.runs_command:
        return [Check("info", f"{name}: you type the replies; needs a terminal, so not for hosts without one")]
    if provider.kind.runs_command:
        program, found = program_of(provider)
        if found is None:
            return [
                Check(
                    "fail",
                    f"{name}: '{program}' not found on PATH",
                    "install it, or give its absolute path in command: (hosts often start servers with a short PATH)",
                )
            ]
        facts = PRESET_FACTS.get(provider.command.preset or "") if provider.command else None
        spends = f"; spends {facts.meter}; tools off: {facts.tools_off}" if facts else ""
        checks = [Check("ok", f"{name}: runs {found} (not called: a check would spend your quota){spends}")]
        if facts is not None and facts.key_vars and not any(os.environ.get(var) for var in facts.key_vars):
            checks.append(
                Check(
                    "warn",
                    f"{name}: needs an API key now, and none of {', '.join(facts.key_vars)} is set",
                    f"set {facts.key_vars[0]} (a key from Google AI Studio) where the host starts the proxy",
                )
            )
        return checks
    key_var = provider.api_key_env
    key = os.environ.get(key_var) if key_var else None
    key_note = f"{key_var} is set" if key else (f"{key_var} is not set" if key_var else "no api_key_env")
    if provider.api_key_file or provider.api_key_command:  # doctor runs the command, as the proxy would
        try:
            provider = resolve_key(provider)
        except KeySourceError as exc:
            return [Check("fail", f"{name}: {exc}", "fix the key source; the proxy refuses to start without it")]
        key, key_note = provider.api_key, f"{key_source(provider)} gave a key"
    # The adapter the proxy would use: its URLs and headers (key, api-version, extra headers), one try
    adapter = make_adapter(
        dataclasses.replace(
            provider, max_attempts=1, read_timeout=timeout, connect_timeout=min(timeout, provider.connect_timeout)
        )
    )
    try:
        return await _probe_with(adapter, provider, name, key_var, key_note, timeout)
    finally:
        await adapter.aclose()


async def _probe_with(
    adapter: Any, provider: Any, name: str, key_var: str | None, key_note: str, timeout: float
) -> list[Check]:
    source = key_source(provider) if provider.api_key_file or provider.api_key_command else None
    base, url = adapter.base_url, adapter.models_url()
    shown = safe_url(base)
    label = f"{name} at {shown}"
    try:
        with anyio.fail_after(timeout + 1):  # the connect and read timeouts are the adapter's; this bounds both
            response = await adapter.list_models()
    except (TransportFailure, TimeoutError) as exc:
        return [_unreached(exc, label, shown, key_note, timeout)]
    path = url[len(base) :]
    if response.is_success:
        try:
            listed = [m.get("id") for m in response.json().get("data", []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            listed = []
        checks = [
            Check(
                "ok",
                f"{label}: GET {path} answered {response.status} "
                f"({len(listed)} model{'s' if len(listed) != 1 else ''}); {key_note}",
            )
        ]
        # Azure lists base models, not the deployments the policy names
        missing = [m.name for m in provider.models if listed and m.name not in listed and provider.azure is None]
        if missing:
            checks.append(
                Check(
                    "warn",
                    f"{name}: {', '.join(missing)} not among the models it lists",
                    "check the model names under llm.providers in the policy",
                )
            )
        return checks
    if response.status in (404, 405) and provider.models:  # no models list: try a 1-token completion
        model = provider.models[0].name
        params = {"messages": [{"role": "user", "content": {"type": "text", "text": "ping"}}], "maxTokens": 1}
        try:
            with anyio.fail_after(timeout + 1):
                await adapter.complete(params, model)
        except LLMError as exc:
            fix = _status_fix(exc.status, key_var, shown, source) if exc.status else "check base_url and the model name"
            return [
                Check(
                    "fail",
                    f"{label}: no models list, and a 1-token completion with {model} failed: "
                    f"{_noted(one_line(exc.message, 300), key_note)}",
                    fix,
                )
            ]
        except TimeoutError:
            return [
                Check(
                    "fail",
                    f"{label}: a 1-token completion with {model} got no answer within {timeout:g} s",
                    "check that the server is up and base_url points at it",
                )
            ]
        return [
            Check(
                "ok",
                f"{label}: no models list (GET {path}: {response.status}), but a 1-token "
                f"completion with {model} worked; {key_note}",
            )
        ]
    message = http_error(provider, response).message
    return [
        Check(
            "fail",
            f"{label}: GET {path}: {_noted(one_line(message, 300), key_note)}",
            _status_fix(response.status, key_var, shown, source),
        )
    ]


def _noted(said: str, key_note: str) -> str:
    """`said`, then where the key stands, unless `said` says it already (a 401's "VAR is not set")."""
    return said if key_note in said else f"{said} ({key_note})"


async def _probe_all(providers: list[Any], timeout: float) -> list[list[Check]]:
    results: list[list[Check]] = [[] for _ in providers]

    async def run(index: int, provider: Any) -> None:
        try:
            results[index] = await probe_provider(provider, timeout)
        except Exception as exc:  # one odd provider must not hide the others
            results[index] = [
                Check(
                    "fail",
                    f"'{provider.name}': the check itself failed: {type(exc).__name__}: {one_line(str(exc), 200)}",
                )
            ]

    async with anyio.create_task_group() as tg:
        for index, provider in enumerate(providers):
            tg.start_soon(run, index, provider)
    return results


def check_providers(settings: Any, timeout: float) -> Section:
    section = Section("LLM providers")
    if settings is None:
        section.add("info", "not checked: the policy did not load")
        return section
    if not settings.providers:
        section.add(
            "warn",
            "no LLM provider configured",
            "set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) or ANTHROPIC_API_KEY in the host "
            "config's env, or add llm.providers to the policy; without one, replies can only be typed at a "
            "terminal",
        )
        return section
    for provider, checks in zip(
        settings.providers, anyio.run(_probe_all, list(settings.providers), timeout), strict=True
    ):
        if provider.kind.http:
            section.add("info", key_origin(provider))
        section.checks += checks
    return section


def key_origin(provider: Any) -> str:
    """Where the proxy gets a provider's key, and so which hosts' proxies get it (never the key)."""
    name = f"'{provider.name}'"
    if provider.api_key_file:
        return (
            f"{name}: the proxy reads its key from the key file {home_relative(Path(provider.api_key_file))} "
            "itself: it reaches the proxy whatever environment a host gives it"
        )
    if provider.api_key_command:
        return (
            f"{name}: the proxy runs api_key_command {one_line(' '.join(provider.api_key_command), 120)} at start "
            "for its key (found on the PATH the host gives it)"
        )
    if provider.api_key_env:
        return (
            f"{name}: its key comes from the variable {provider.api_key_env} of the environment the host gives "
            "the proxy (desktop apps do not pass your shell's: see wrapped servers below)"
        )
    return f"{name}: no key (a local server)"
