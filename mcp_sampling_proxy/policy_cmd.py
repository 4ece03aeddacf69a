"""`mcp-sampling-proxy policy check FILE...` and `policy explain FILE --request REQUEST.json`.

`check` validates policy files without starting anything. `explain` shows, rule by rule, what
the policy decides for one `sampling/createMessage` request and which limits then apply.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mcp_sampling_proxy.caps import format_bytes as format_size
from mcp_sampling_proxy.config import (
    Rule,
    Settings,
    SizeLimits,
    effective_limits,
    load_settings,
)
from mcp_sampling_proxy.identity import shown
from mcp_sampling_proxy.limits import format_period as format_duration
from mcp_sampling_proxy.policy import Facts, decide, facts_for_sampling, why
from mcp_sampling_proxy.sanitize import strip_controls
from mcp_sampling_proxy.yamlnodes import PolicyError

PROG = "mcp-sampling-proxy policy"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Work with policy files.")
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="validate policy files; exit 0 when all are valid, 1 otherwise")
    check.add_argument("files", nargs="+", metavar="FILE")
    explain = sub.add_parser(
        "explain",
        help="show which rule decides a sampling request, and the limits that apply",
        description="Show, rule by rule, what the policy FILE decides for the sampling/createMessage request in "
        "REQUEST.json (a JSON-RPC request, or just its params), then the limits that apply. Exit 0 when it "
        "ran, whatever the decision; 2 on bad input.",
    )
    explain.add_argument("file", metavar="FILE", help="the policy file")
    explain.add_argument("--request", required=True, metavar="REQUEST.json",
                         help="a sampling/createMessage JSON-RPC request, or its params")
    explain.add_argument("--server", default="", metavar="NAME", help="the server's name (as rules see it)")
    explain.add_argument("--tool", metavar="NAME", action="append",
                         help="the host's tools/call in flight (default: none, a request outside any tool call); "
                         "repeat it for several calls in flight: the strictest outcome over them wins, as in the proxy")
    explain.add_argument("--server-reported", metavar="NAME",
                         help="the name the server reports for itself (untrusted; for server_reported: rules)")
    explain.add_argument("--host", default="", metavar="NAME", help="the host's clientInfo name")
    args = parser.parse_args(list(argv))
    if args.action == "explain":
        return explain_main(args.file, args.request, server=args.server, tool=args.tool, host=args.host,
                            server_reported=args.server_reported)
    failed = 0
    for path in args.files:
        try:
            settings = load_settings(path, environ={})
        except PolicyError as exc:
            print(exc, file=sys.stderr)
            failed += 1
            continue
        providers = ", ".join(f"{p.name} ({p.type})" for p in settings.providers) or "from the environment"
        print(f"{path}: ok ({len(settings.rules)} rules; providers: {providers})")
    return 1 if failed else 0


class InputError(Exception):
    """Bad input for `explain`: exit 2 with this message."""


def explain_main(policy: str, request: str, *, server: str, tool: str | Sequence[str] | None, host: str,
                 server_reported: str | None = None) -> int:
    try:
        params = read_request(request)
        settings = load_settings(policy, environ={})
    except (InputError, PolicyError) as exc:
        print(f"{PROG} explain: error: {exc}", file=sys.stderr)
        return 2
    tools = (tool,) if isinstance(tool, str) else tuple(tool or ())
    facts = facts_for_sampling(params, server=server, host=host, tools_in_flight=tools,
                               server_reported=server_reported)
    print("\n".join(explain(settings, facts, preferences=params.get("modelPreferences"))))
    return 0


def read_request(path: str) -> dict[str, Any]:
    """The params of the sampling request in `path`, validated as the proxy would."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(f"{path}: request file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read request file: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: must hold a JSON object: a sampling/createMessage request or its params")
    if "method" in data or "jsonrpc" in data:
        if data.get("method") != "sampling/createMessage":
            raise InputError(f"{path}: the request's method is {data.get('method')!r}; explain takes "
                             "sampling/createMessage requests (or just their params)")
        data = data.get("params")
    from mcp_sampling_proxy.jsonrpc import RpcError
    from mcp_sampling_proxy.sampling_request import validate

    try:
        return validate(data)
    except RpcError as exc:
        raise InputError(f"{path}: {exc.message} (the proxy answers such a request with -32602 before "
                         "consulting the policy)") from None


def explain(settings: Settings, facts: Facts, preferences: Any = None) -> list[str]:
    """The explanation's lines: the request, each rule up to the match, the limits that then apply."""
    lines = [f"policy: {settings.source} ({len(settings.rules)} rules)", *describe_facts(facts)]
    decision = decide(settings.rules, facts)
    candidates = tuple(dict.fromkeys(facts.tools_in_flight))
    if len(candidates) > 1:  # the rules as they were walked for the candidate whose outcome won
        lines.append(f"{len(candidates)} tool calls in flight could own the request; the strictest outcome wins "
                     f"(deny > prompt > allow): {decision.action}, for tool '{decision.tool}'")
        facts = replace(facts, tool=decision.tool)
    for rule in settings.rules:
        if rule is decision.matched:
            lines.append(f"rule '{rule.name}' (line {rule.line}): MATCHES -> {rule.action}")
            lines.append(f"  because {why(rule, facts)}")
            if rule.action == "deny":
                lines.append(f"  the server is told: {rule.message or f'sampling denied by policy rule {rule.name!r}'}")
            break
        lines.append(f"rule '{rule.name}' (line {rule.line}): skipped: {why(rule, facts)}")
    else:
        lines.append("no rule matched -> prompt (default)")
    if decision.action == "deny":
        lines.append("limits: none apply (the request is denied)")
    else:
        lines.extend(describe_limits(settings.limits, decision.matched, model_line=model_reason(settings, preferences)))
    return lines


def model_reason(settings: Settings, preferences: Any) -> str:
    """Which model the proxy would pick without a rule override, and each step of why."""
    if not settings.providers:
        return "chosen at run time from the providers in the environment (none in the policy)"
    from mcp_sampling_proxy.model_choice import choose_model

    choice = choose_model(settings.providers, preferences, aliases=settings.aliases,
                          default_provider=settings.default_provider)
    return f"{choice.provider}/{choice.model}: {choice.reason}"


def describe_facts(facts: Facts) -> list[str]:
    server = f"'{facts.server}'" if facts.server else "'' (no --server given)"
    host = f"'{facts.host}'" if facts.host else "'' (no --host given)"
    if len(set(facts.tools_in_flight)) > 1:
        tool = "during tool calls " + ", ".join(f"'{t}'" for t in dict.fromkeys(facts.tools_in_flight))
    else:
        tool = f"during tool call '{facts.tool}'" if facts.tool else "no host tool call in flight (tool: none)"
    if facts.server_reported is not None:
        server += f" (reports itself as '{strip_controls(shown(facts.server_reported))}', untrusted)"
    hints = ", ".join(facts.model_hints) or "none"
    max_tokens = "not given" if facts.max_tokens is None else str(facts.max_tokens)
    content = ", ".join(sorted(facts.content_types)) or "none"
    return [
        f"request: {facts.method} from server {server}, host {host}, {tool}",
        f"  model hints: {hints}; max_tokens: {max_tokens}; messages: {facts.message_count}; "
        f"content: {content}; include_context: {facts.include_context}",
    ]


def describe_limits(base: SizeLimits, rule: Rule | None, model_line: str | None = None) -> list[str]:
    limits = effective_limits(base, rule.limits if rule else None)
    overridden = {k for k, v in vars(rule.limits).items() if v is not None} if rule and rule.limits else set()

    def mark(key: str) -> str:
        return f" (rule '{rule.name}')" if rule and key in overridden else ""

    max_tokens = "no cap" if limits.max_tokens is None else (
        f"{limits.max_tokens} (over it: {limits.max_tokens_action})")
    lines = [
        "limits that apply:",
        f"  max_messages: {limits.max_messages}{mark('max_messages')}",
        f"  max_text_bytes: {format_size(limits.max_text_bytes)}{mark('max_text_bytes')}",
        f"  max_media_bytes: {format_size(limits.max_media_bytes)}{mark('max_media_bytes')}",
        f"  max_request_bytes: {format_size(limits.max_request_bytes)}{mark('max_request_bytes')}",
        f"  max_tokens: {max_tokens}{mark('max_tokens') or mark('max_tokens_action')}",
        f"  max_tools: {limits.max_tools}{mark('max_tools')}",
    ]
    rate = rule.rate_limit if rule else None
    if rate is None:
        lines.append("  rate_limit: none")
    else:
        parts = []
        if rate.requests is not None and rate.per is not None:
            parts.append(f"{rate.requests} requests per {format_duration(rate.per)}")
        if rate.concurrent is not None:
            parts.append(f"at most {rate.concurrent} at a time")
        lines.append(f"  rate_limit: {', '.join(parts)}")
    budget = rule.budget if rule else None
    lines.append("  budget: none" if budget is None else
                 f"  budget: {budget.tokens} tokens per {format_duration(budget.per)}")
    if rule and (rule.provider or rule.model):
        chosen = ", ".join(f"{k} '{v}'" for k, v in (("provider", rule.provider), ("model", rule.model)) if v)
        lines.append(f"  provider/model: {chosen} (set by rule '{rule.name}')")
    else:
        lines.append(f"  provider/model: {model_line}" if model_line else
                     "  provider/model: chosen from the request's model preferences (no rule override)")
    return lines
