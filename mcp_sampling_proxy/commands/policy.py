"""`mcp-sampling-proxy policy check FILE...` and `policy explain FILE (--prompt TEXT | --request REQUEST.json)`.

`check` validates policy files without starting anything. `explain` shows, rule by rule, what
the policy decides for one `sampling/createMessage` or `elicitation/create` request and what then
happens, by running the proxy's own judging code (`assess`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mcp_sampling_proxy.approval.forms import FormError, parse_form, secret_reasons
from mcp_sampling_proxy.config.settings import Settings, load_settings, settings_from_environment
from mcp_sampling_proxy.identity import server_phrase, shown
from mcp_sampling_proxy.policy.conditions import Facts
from mcp_sampling_proxy.policy.engine import Decision, why
from mcp_sampling_proxy.policy.rules import RateLimit, Rule, SizeLimits, effective_limits
from mcp_sampling_proxy.policy.size_caps import format_bytes as format_size
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.names import ELICITATION_CREATE, SAMPLING_CREATE
from mcp_sampling_proxy.protocol.sampling_request import validate
from mcp_sampling_proxy.quotas.refusals import format_period as format_duration
from mcp_sampling_proxy.sanitize import one_line, strip_controls
from mcp_sampling_proxy.serve.assess import (
    Origin,
    Refused,
    SamplingJudgement,
    choose_provider,
    judge_elicitation,
    judge_sampling,
)
from mcp_sampling_proxy.serve.elicitation import request_mode, validate_elicitation
from mcp_sampling_proxy.yamlnodes import PolicyError

PROG = "mcp-sampling-proxy policy"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Work with policy files.")
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser(
        "check",
        help="validate policy files, naming every mistake as FILE:LINE:COL; exit 0 when all are valid, 1 otherwise",
    )
    check.add_argument("files", nargs="+", metavar="FILE")
    explain = sub.add_parser(
        "explain",
        help="show which rule decides a sampling or elicitation request, and what then happens",
        description="Show, rule by rule, what the policy FILE decides for one sampling/createMessage or "
        "elicitation/create request, then the limits that apply and the model (sampling) or the route "
        "(elicitation). It runs the proxy's own code. Give the request as a prompt (--prompt, with --model "
        "and --max-tokens), or as a file (--request; --template prints one to start from). Exit 0 when it "
        "ran, whatever the decision; 2 on bad input.",
        epilog="examples:\n"
        '  mcp-sampling-proxy policy explain policy.yaml --prompt "Summarise this" --server notes --tool summarize\n'
        "  mcp-sampling-proxy policy explain --template > request.json\n"
        "  mcp-sampling-proxy policy explain policy.yaml --request request.json --server notes",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explain.add_argument("file", metavar="FILE", nargs="?", help="the policy file")
    given = explain.add_mutually_exclusive_group()
    given.add_argument(
        "--prompt",
        metavar="TEXT",
        help="the request is a sampling request with this text as its one user message",
    )
    given.add_argument(
        "--request",
        metavar="REQUEST.json",
        help="the request in a file: a sampling/createMessage or elicitation/create JSON-RPC request, or "
        "its params; lines starting with // are comments (see --template)",
    )
    given.add_argument(
        "--template",
        action="store_true",
        help="print a commented REQUEST.json that --request takes as it is, and exit",
    )
    explain.add_argument(
        "--model",
        metavar="M",
        action="append",
        help="with --prompt: a model hint of the request (repeat for several, in order of preference)",
    )
    explain.add_argument(
        "--max-tokens",
        metavar="N",
        type=int,
        help=f"with --prompt: the maxTokens the request asks for (default {PROMPT_MAX_TOKENS})",
    )
    explain.add_argument("--server", default="", metavar="NAME", help="the server's name (as rules see it)")
    explain.add_argument(
        "--tool",
        metavar="NAME",
        action="append",
        help="the host's tools/call in flight (default: none, a request outside any tool call); "
        "repeat it for several calls in flight: the strictest outcome over them wins, as in the proxy",
    )
    explain.add_argument(
        "--server-reported",
        metavar="NAME",
        help="the name the server reports for itself (untrusted; for server_reported: rules)",
    )
    explain.add_argument("--host", default="", metavar="NAME", help="the host's clientInfo name")
    args = parser.parse_args(list(argv))
    if args.action == "explain":
        if args.template:
            print(REQUEST_TEMPLATE, end="")
            return 0
        if args.prompt is None and (args.model or args.max_tokens is not None):
            explain.error(
                "--model and --max-tokens go with --prompt (in a --request file: modelPreferences, maxTokens)"
            )
        if args.max_tokens is not None and args.max_tokens < 1:
            explain.error(f"--max-tokens must be at least 1, got {args.max_tokens}")
        if args.file is None or (args.prompt is None and args.request is None):
            explain.error(
                "give the policy FILE and the request: --prompt TEXT, or --request REQUEST.json "
                "(--template prints one to start from)"
            )
        request: str | dict[str, Any] = args.request
        if args.prompt is not None:
            request = prompt_request(args.prompt, models=args.model or (), max_tokens=args.max_tokens)
        return explain_main(
            args.file,
            request,
            server=args.server,
            tool=args.tool,
            host=args.host,
            server_reported=args.server_reported,
        )
    failed = 0
    for path in args.files:
        try:
            settings = load_settings(path, environ={})
        except PolicyError as exc:
            print(exc, file=sys.stderr)
            count = len(exc.mistakes)
            if count > 1:
                print(f"{path}: {count} mistakes; fix them all, then check again", file=sys.stderr)
            failed += 1
            continue
        providers = ", ".join(f"{p.name} ({p.type})" for p in settings.providers) or "from the environment"
        print(f"{path}: ok ({len(settings.rules)} rules; providers: {providers})")
    return 1 if failed else 0


class InputError(Exception):
    """Bad input for `explain`: exit 2 with this message."""


PROMPT_MAX_TOKENS = 1000

REQUEST_TEMPLATE = """\
// A request for: mcp-sampling-proxy policy explain POLICY --request THIS_FILE [--server NAME] [--tool NAME]
// It holds the params of a sampling/createMessage request, as a server sends them (a whole JSON-RPC
// request, {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {...}}, works too).
// Who sends it is given on the command line: --server (the name your rules see), --tool (the host's
// tool call in flight), --host. Lines starting with // are comments; explain skips them.
// For an elicitation/create request, give its params instead: {"message": "...", "requestedSchema": {...}}.
{
  // what the server asks the LLM, oldest first; role: user or assistant; a content block is
  // {"type": "text", "text": ...}, or image/audio: {"type": "image", "data": BASE64, "mimeType": "image/png"}
  "messages": [
    {"role": "user", "content": {"type": "text", "text": "Summarise this"}}
  ],
  // the most tokens the server asks for (required); rules with max_tokens_over: see it
  "maxTokens": 1000,
  // optional: the server's system prompt (text_matches: rules read it too)
  "systemPrompt": "You are a concise assistant.",
  // optional: the models the server would like, best first (model: rules and the model choice see them)
  "modelPreferences": {"hints": [{"name": "claude-sonnet"}], "intelligencePriority": 0.5},
  // optional: none, thisServer or allServers (include_context: rules)
  "includeContext": "none"
}
"""


def prompt_request(text: str, *, models: Sequence[str] = (), max_tokens: int | None = None) -> dict[str, Any]:
    """The params of a sampling request with `text` as its one user message (explain --prompt)."""
    params: dict[str, Any] = {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": PROMPT_MAX_TOKENS if max_tokens is None else max_tokens,
    }
    if models:
        params["modelPreferences"] = {"hints": [{"name": model} for model in models]}
    return params


def explain_main(
    policy: str,
    request: str | dict[str, Any],
    *,
    server: str,
    tool: str | Sequence[str] | None,
    host: str,
    server_reported: str | None = None,
) -> int:
    try:
        method, params = read_request(request) if isinstance(request, str) else checked("--prompt", request)
        settings = load_settings(policy, environ={})
    except (InputError, PolicyError) as exc:
        print(f"{PROG} explain: error: {exc}", file=sys.stderr)
        return 2
    if not settings.providers:  # as the proxy does: a policy without llm takes the environment's providers
        settings.providers = settings_from_environment(dict(os.environ)).providers
    tools = (tool,) if isinstance(tool, str) else tuple(tool or ())
    origin = Origin(server, host, tools, server_reported)
    if method == ELICITATION:
        lines = explain_elicitation(settings, params, origin)
    else:
        lines = explain(settings, params, origin)
    print("\n".join(lines))
    return 0


SAMPLING = SAMPLING_CREATE
ELICITATION = ELICITATION_CREATE


def read_request(path: str) -> tuple[str, dict[str, Any]]:
    """The method and params of the request in `path`, validated as the proxy would."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(f"{path}: request file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read request file: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(without_comments(text))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    return checked(path, data)


def without_comments(text: str) -> str:
    """JSON text with its // comment lines blanked (kept as empty lines, so positions still count).
    A JSON string cannot span lines, so a line starting with // is never inside one."""
    return "\n".join("" if line.lstrip().startswith("//") else line for line in text.split("\n"))


def checked(path: str, data: Any) -> tuple[str, dict[str, Any]]:
    """The method and params of a request (`path` names where it came from), validated as the proxy would."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: must hold a JSON object: a {SAMPLING} or {ELICITATION} request, or its params")
    method: Any = SAMPLING
    if "method" in data or "jsonrpc" in data:
        method = data.get("method")
        if method not in (SAMPLING, ELICITATION):
            raise InputError(
                f"{path}: the request's method is {method!r}; explain takes {SAMPLING} and "
                f"{ELICITATION} requests (or just their params)"
            )
        data = data.get("params")
    elif isinstance(data, dict) and "messages" not in data and ("requestedSchema" in data or "mode" in data):
        method = ELICITATION
    try:
        if method == ELICITATION:
            return method, validate_elicitation(data)
        validate(data)
        return method, data
    except RpcError as exc:
        raise InputError(
            f"{path}: {exc.message} (the proxy answers such a request with -32602 before consulting the policy)"
        ) from None


def explain(settings: Settings, params: dict[str, Any], origin: Origin) -> list[str]:
    """The explanation of a sampling request: the request, each rule up to the match, the limits
    that then apply and the model. It runs the proxy's own judging code (assess.judge_sampling)."""
    lines = [f"policy: {settings.source} ({len(settings.rules)} rules)"]
    try:
        judged = judge_sampling(settings, params, origin)
    except Refused as refused:
        if refused.facts is None:
            lines.append(
                f"refused before the policy is consulted: {refused.error.message} (error {refused.error.code})"
            )
            return lines
        lines.extend(describe_facts(refused.facts))
        lines.extend(walk_rules(settings, refused.facts, refused.decision))
        if refused.outcome == "deny":
            lines.append("limits: none apply (the request is denied)")
        else:
            lines.append(f"refused by the caps that apply: {refused.error.message} (error {refused.error.code})")
        return lines
    lines.extend(describe_facts(judged.facts))
    lines.extend(walk_rules(settings, judged.facts, judged.decision))
    lines.extend(describe_limits(settings.limits, judged.decision.matched, model_line=model_reason(settings, judged)))
    lines.extend(f"  the request goes on with {note}" for note in judged.notes)
    return lines


def walk_rules(settings: Settings, facts: Facts, decision: Decision | None) -> list[str]:
    """Each rule up to the one that matched, with why it did or did not."""
    assert decision is not None
    lines = []
    candidates = tuple(dict.fromkeys(facts.tools_in_flight))
    if len(candidates) > 1:  # the rules as they were walked for the candidate whose outcome won
        lines.append(
            f"{len(candidates)} tool calls in flight could own the request; the strictest outcome wins "
            f"(deny > prompt > allow): {decision.action}, for tool '{decision.tool}'"
        )
        facts = replace(facts, tool=decision.tool)
    for rule in settings.rules:
        if rule is decision.matched:
            lines.append(f"rule '{rule.name}' (line {rule.line}): MATCHES -> {rule.action}")
            lines.append(f"  because {why(rule, facts)}")
            if rule.action == "deny":
                told = (
                    '{"action": "decline"}'
                    if facts.method == "elicitation"
                    else decision.message or f"sampling denied by policy rule {rule.name!r}"
                )
                lines.append(f"  the server is told: {told}")
            break
        lines.append(f"rule '{rule.name}' (line {rule.line}): skipped: {why(rule, facts)}")
    else:
        lines.append("no rule matched -> prompt (default)")
    return lines


def explain_elicitation(settings: Settings, params: dict[str, Any], origin: Origin) -> list[str]:
    """The explanation of an elicitation request: the rules, then where the proxy sends it."""
    judged = judge_elicitation(settings, params, origin)
    mode = request_mode(params)
    lines = [
        f"policy: {settings.source} ({len(settings.rules)} rules)",
        *describe_facts(judged.facts)[:1],
        f"  mode: {mode}; message: {strip_controls(one_line(str(params.get('message', '')), 80))!r}",
    ]
    lines.extend(walk_rules(settings, judged.facts, judged.decision))
    if judged.decision.action == "deny":
        return lines
    rule = judged.decision.matched
    rate = rule.rate_limit if rule else None
    lines.append(f"rate_limit: {describe_rate(rate)}" if rate else "rate_limit: none")
    config = settings.elicitation
    if config.route == "decline":
        lines.append(
            f"route: decline (elicitation.route): the server gets "
            f'{{"action": "{_non_interactive(config.non_interactive, mode)}"}}'
        )
        return lines
    if config.route == "host":
        lines.append("route: host (elicitation.route): forwarded to the host, which answers")
        return lines
    lines.append(f"route: auto: forwarded to the host when it declared elicitation ({mode} mode); otherwise:")
    if mode == "url" and not config.url_mode:
        lines.append('  URL mode is not enabled (elicitation.url_mode): the server gets {"action": "decline"}')
        return lines
    if mode == "form":
        try:
            secrets = secret_reasons(parse_form(params.get("requestedSchema") or {}), str(params.get("message", "")))
        except FormError as exc:
            lines.append(f'  unsupported form ({exc}): the server gets {{"action": "decline"}}')
            return lines
        if secrets and config.sensitive_form != "allow":
            lines.append(
                f"  the form asks for secrets ({'; '.join(secrets)}): the server gets "
                f'{{"action": "{config.sensitive_form}"}} (elicitation.sensitive_form)'
            )
            return lines
    lines.append("  asked on the proxy's terminal, else on the companion console (mcp-sampling-proxy console)")
    lines.append(f"  when nobody can be asked: {config.non_interactive} (elicitation.non_interactive)")
    return lines


def _non_interactive(action: str, mode: str) -> str:
    return "cancel" if action == "cancel" else "accept" if action == "accept_defaults" and mode == "form" else "decline"


def model_reason(settings: Settings, judged: SamplingJudgement) -> str:
    """Which provider and model the proxy picks (the proxy's own choice code), and each step of why."""
    try:
        choice = choose_provider(settings, settings.providers, judged.request, judged.decision)
    except RpcError as exc:
        if not settings.providers:
            return (
                "no provider in the policy or the environment: replies are typed at the proxy's terminal "
                f"when it has one; otherwise the server is told: {exc.message}"
            )
        return f"none: the server is told: {exc.message}"
    return f"{choice.provider}/{choice.model}: {choice.reason}"


def describe_facts(facts: Facts) -> list[str]:
    reported = None if facts.server_reported is None else strip_controls(shown(facts.server_reported))
    server = server_phrase(facts.server, reported) + ("" if facts.server else " (no --server given)")
    host = f"'{facts.host}'" if facts.host else "'' (no --host given)"
    if len(set(facts.tools_in_flight)) > 1:
        tool = "during tool calls " + ", ".join(f"'{t}'" for t in dict.fromkeys(facts.tools_in_flight))
    else:
        tool = f"during tool call '{facts.tool}'" if facts.tool else "no host tool call in flight (tool: none)"
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

    max_tokens = (
        "no cap" if limits.max_tokens is None else (f"{limits.max_tokens} (over it: {limits.max_tokens_action})")
    )
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
    lines.append(f"  rate_limit: {describe_rate(rate)}" if rate else "  rate_limit: none")
    budget = rule.budget if rule else None
    lines.append(
        "  budget: none" if budget is None else f"  budget: {budget.tokens} tokens per {format_duration(budget.per)}"
    )
    lines.append(
        f"  provider/model: {model_line}"
        if model_line
        else "  provider/model: chosen from the request's model preferences (no rule override)"
    )
    return lines


def describe_rate(rate: RateLimit) -> str:
    parts = []
    if rate.requests is not None and rate.per is not None:
        parts.append(f"{rate.requests} requests per {format_duration(rate.per)}")
    if rate.concurrent is not None:
        parts.append(f"at most {rate.concurrent} at a time")
    return ", ".join(parts)
