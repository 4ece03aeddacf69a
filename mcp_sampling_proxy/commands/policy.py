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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from mcp_sampling_proxy.approval.forms import FormError, parse_form, secret_reasons
from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.config.prices import POLICY, format_usd
from mcp_sampling_proxy.config.sampling_checks import SamplingChecks
from mcp_sampling_proxy.config.settings import Settings, load_settings, settings_from_environment
from mcp_sampling_proxy.config.tool_settings import why_not
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.policy.conditions import Facts
from mcp_sampling_proxy.policy.engine import Decision, why
from mcp_sampling_proxy.policy.rules import Budget, RateLimit, Rule, SizeLimits, effective_limits
from mcp_sampling_proxy.policy.size_caps import format_bytes as format_size
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.names import ELICITATION_CREATE, SAMPLING_CREATE
from mcp_sampling_proxy.protocol.sampling_request import SamplingRequest, validate
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams
from mcp_sampling_proxy.quotas.limiters import usd_micros
from mcp_sampling_proxy.quotas.refusals import format_period as format_duration
from mcp_sampling_proxy.services import auto_answers
from mcp_sampling_proxy.services.assess import (
    Origin,
    Refused,
    SamplingJudgement,
    choose_provider,
    judge_elicitation,
    judge_sampling,
)
from mcp_sampling_proxy.services.elicitation.request import request_mode, validate_elicitation
from mcp_sampling_proxy.text.identity import server_phrase, shown
from mcp_sampling_proxy.text.sanitize import one_line, strip_controls
from mcp_sampling_proxy.transport.sandbox import policy_grant_problems

PROG = "mcp-sampling-proxy policy"


def main(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="Work with policy files.")
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
        "--call",
        metavar="TOOL",
        help="the request is the host's tools/call of TOOL (with --arguments and --server): the tools: rules",
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
    explain.add_argument(
        "--client",
        metavar="NAME",
        help="the caller's name under serve, its bearer token's name (for client: rules; default: none, as over stdio)",
    )
    explain.add_argument(
        "--arguments", metavar="JSON", help="with --call: the call's arguments, a JSON object (default {})"
    )
    args = parser.parse_args(list(argv))
    if args.action == "explain":
        if args.template:
            print(REQUEST_TEMPLATE, end="")
            return 0
        if args.arguments is not None and args.call is None:
            explain.error("--arguments goes with --call")
        if args.call is not None:
            if args.file is None:
                explain.error("give the policy FILE before --call")
            return explain_call_main(args.file, args.call, args.arguments, server=args.server, client=args.client)
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
            client=args.client,
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
        refused = policy_grant_problems(settings.sandbox, path, settings.named_files())
        if refused:
            for problem in refused:
                print(f"{path}: {problem}", file=sys.stderr)
            failed += 1
            continue
        providers = ", ".join(f"{p.name} ({p.type})" for p in settings.providers) or "from the environment"
        tools = f"; tools rules: {len(settings.tools.rules)}" if settings.tools.rules else ""
        print(f"{path}: ok ({len(settings.rules)} rules; providers: {providers}{tools})")
    return 1 if failed else 0


class InputError(Exception):
    """Bad input for `explain`: exit 2 with this message."""


PROMPT_MAX_TOKENS = 1000

REQUEST_TEMPLATE = """\
// A request for: mcp-sampling-proxy policy explain POLICY --request THIS_FILE [--server NAME] [--tool NAME]
// It holds the params of a sampling/createMessage request, as a server sends them (a whole JSON-RPC
// request, {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {...}}, works too).
// Who sends it is given on the command line: --server (the name your rules see), --tool (the host's
// tool call in flight), --host, --client (the caller under serve). Lines starting with // are comments;
// explain skips them.
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
    client: str | None = None,
) -> int:
    try:
        asked = read_request(request) if isinstance(request, str) else checked("--prompt", request)
        settings = load_settings(policy, environ={})
    except (InputError, PolicyError) as exc:
        print(f"{PROG} explain: error: {exc}", file=sys.stderr)
        return 2
    if not settings.providers:  # as the proxy does: a policy without llm takes the environment's providers
        settings.providers = settings_from_environment(dict(os.environ)).providers
    tools = (tool,) if isinstance(tool, str) else tuple(tool or ())
    origin = Origin(server, host, tools, server_reported, client)
    if isinstance(asked, SamplingRequest):
        lines = explain(settings, asked.wire, origin)
    else:
        lines = explain_elicitation(settings, asked, origin)
    print("\n".join(lines))
    return 0


def explain_call_main(policy: str, tool: str, arguments: str | None, *, server: str, client: str | None = None) -> int:
    """`explain --call`: which `tools:` rule decides a host's tools/call, and why the earlier ones do not."""
    try:
        settings = load_settings(policy, environ={})
        parsed = json.loads(arguments) if arguments is not None else {}
        if not isinstance(parsed, dict):
            raise InputError(f"--arguments must be a JSON object, got {type(parsed).__name__}")
    except ValueError as exc:
        print(f"{PROG} explain: error: --arguments is not JSON ({exc})", file=sys.stderr)
        return 2
    except (InputError, PolicyError) as exc:
        print(f"{PROG} explain: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(explain_call(settings, server or "upstream", tool, parsed, client=client)))
    return 0


def explain_call(
    settings: Settings, server: str, tool: str, arguments: dict[str, Any], *, client: str | None = None
) -> list[str]:
    by = f" by client '{one_line(client, 80)}'" if client is not None else ""
    lines = [f"tools/call of '{one_line(tool, 80)}' on server '{one_line(server, 80)}'{by}"]
    for rule in settings.tools.rules:
        why = why_not(rule, server, tool, arguments, client=client)
        if why is not None:
            lines.append(f"  tools rule '{rule.name}' (line {rule.line}): no: {why}")
            continue
        lines.append(f"  tools rule '{rule.name}' (line {rule.line}): matches -> {rule.action}")
        hides = rule.action == "deny" and rule.arguments is None
        outcome = {
            "allow": "the call goes to the server (recorded in the audit log)",
            "deny": "the call is refused" + (", and the tool is hidden from tools/list" if hides else ""),
            "prompt": "a human is asked (approval.channels) before the call goes to the server",
        }[rule.action]
        lines.append(f"decision: {rule.action}: {outcome}")
        break
    else:
        lines.append("decision: allow: no tools rule matches, so the call goes to the server")
    pinning = "off" if not settings.tools.pin else f"on, on_change: {settings.tools.on_change}"
    lines.append(
        f"pinning: {pinning} (a tool changed since it was pinned is held whatever the rules say; "
        "see `mcp-sampling-proxy tools list`)"
    )
    return lines


SAMPLING = SAMPLING_CREATE
ELICITATION = ELICITATION_CREATE


def read_request(path: str) -> SamplingRequest | ElicitRequestParams:
    """The request in `path`, validated as the proxy would: a sampling request, or elicitation params."""
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


def checked(path: str, data: Any) -> SamplingRequest | ElicitRequestParams:
    """A request (`path` names where it came from), validated as the proxy would: a sampling request (its
    `wire` is the params as given), or elicitation params."""
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
            return validate_elicitation(data)
        return validate(data)
    except RpcError as exc:
        raise InputError(
            f"{path}: {exc.message} (the proxy answers such a request with -32602 before consulting the policy)"
        ) from None


def explain(settings: Settings, params: Mapping[str, Any], origin: Origin) -> list[str]:
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
    if judged.decision.action == "prompt":
        lines.extend(describe_approval(settings))
    lines.extend(describe_checks(settings, judged.decision.matched))
    lines.extend(describe_limits(settings.limits, judged.decision.matched, model_line=model_reason(settings, judged)))
    rule = judged.decision.matched
    if rule is not None and rule.budget is not None and rule.budget.usd is not None:
        lines.append(f"  price: {price_reason(settings, judged)}")
    lines.extend(f"  the request goes on with {note}" for note in judged.notes)
    lines.extend(describe_sampling_checks(settings.sampling.checks, judged.facts))
    return lines


def describe_sampling_checks(checks: SamplingChecks, facts: Facts) -> list[str]:
    """The `sampling:` checks that apply whatever rule matches: the per-call cap, unsolicited
    requests, and credentials in the answer (and the request, with scan_requests)."""
    server = f"server '{facts.server}'" if facts.server else "the server"
    allowed = checks.unsolicited_allowed(facts.server)
    if isinstance(checks.allow_unsolicited, bool):
        setting = str(checks.allow_unsolicited).lower()
    else:
        setting = ", ".join(checks.allow_unsolicited)
    if facts.tools_in_flight:
        unsolicited = f"{setting}: not needed, the request comes inside a host tool call"
    elif allowed:
        unsolicited = f"{setting}: {server} may sample with no host request in flight (audited as unsolicited)"
    else:
        unsolicited = (
            f"{setting}: refused for {server} when no host request is in flight "
            "(reason: unsolicited); inside any host request it goes on"
        )
    answer = {
        "redact": "credentials in the LLM's answer are masked before the server gets it",
        "deny": "an LLM answer holding credentials is withheld and the server gets an error",
        "allow": "credentials in the LLM's answer reach the server (their types are audited)",
    }[checks.on_secret]
    if checks.scan_requests:
        scanned = f"true: the server's request is scanned too, before any LLM or human sees it ({checks.on_secret})"
    else:
        scanned = "false: the server's request is not scanned for credentials"
    return [
        "sampling checks (the sampling: section, whatever rule matches):",
        f"  max_per_call: {checks.max_per_call} sampling requests per host request; past it: refused",
        f"  allow_unsolicited: {unsolicited}",
        f"  on_secret: {checks.on_secret}: {answer}",
        f"  scan_requests: {scanned}",
    ]


def describe_approval(settings: Settings) -> list[str]:
    """Who would be asked, when the policy asks more than the default way (a webhook, a quorum)."""
    approval = settings.approval
    if approval.quorum == 1 and approval.webhook is None:
        return []
    channels = ", ".join(
        f"webhook ({approval.webhook.url})" if name == "webhook" and approval.webhook else name
        for name in approval.channels
    )
    if approval.quorum == 1:
        return [f"  asked on the first of: {channels} that can reach a human"]
    return [
        f"  asked on every channel at once ({channels}): runs after {approval.quorum} different approvers "
        "(approval.quorum); one deny ends it"
    ]


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


def explain_elicitation(settings: Settings, params: ElicitRequestParams, origin: Origin) -> list[str]:
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
    lines.extend(explain_auto_answer(settings, params, origin, mode))
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


def explain_auto_answer(settings: Settings, params: ElicitRequestParams, origin: Origin, mode: str) -> list[str]:
    """Which `elicitation.auto_answers` entry matches, and what it would answer (the proxy's own check)."""
    entries = settings.elicitation.auto_answers
    if not entries:
        return []
    entry = auto_answers.first_match(entries, origin.server, origin.tools_in_flight, params)
    if entry is None:
        return [f"auto_answers: none of {len(entries)} matches this server, tool and message"]
    verdict = auto_answers.judge(entry, params, mode)
    when = "when nobody can be asked" if entry.applies == "headless" else "before the host or a console is asked"
    if verdict.kind == "answer":
        return [f"auto_answers: '{entry.name}' matches: {when}, the server gets {json.dumps(verdict.result)}"]
    if verdict.kind == "misfit":
        return [f'auto_answers: {verdict.why}; {when}, the server gets {{"action": "decline"}} (an error record)']
    return [f"auto_answers: {verdict.why}"]


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
    caller = "" if facts.client is None else f", client '{facts.client}'"
    return [
        f"request: {facts.method} from server {server}, host {host}{caller}, {tool}",
        f"  model hints: {hints}; max_tokens: {max_tokens}; messages: {facts.message_count}; "
        f"content: {content}; include_context: {facts.include_context}",
    ]


def describe_checks(settings: Settings, rule: Rule | None) -> list[str]:
    """The external checks the matched rule runs before its action applies (and on the answer)."""
    names = rule.checks if rule is not None else ()
    if not names:  # said only when the rule runs some: an explanation without checks stays as it was
        return []
    return ["checks, in order (a failed check denies unless its on_error is allow):"] + [
        f"  {settings.checks[name].describe()}" for name in names
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
    lines.append("  budget: none" if budget is None else f"  budget: {describe_budget(budget)}")
    lines.append(
        f"  provider/model: {model_line}"
        if model_line
        else "  provider/model: chosen from the request's model preferences (no rule override)"
    )
    return lines


def describe_budget(budget: Budget) -> str:
    """`100000 tokens per 1d`, `$5.00 per 1d`, or both joined with `and`."""
    amounts = [f"{budget.tokens} tokens"] if budget.tokens is not None else []
    if budget.usd is not None:
        amounts.append(format_usd(usd_micros(budget.usd)))
    return f"{' and '.join(amounts)} per {format_duration(budget.per)}"


def price_reason(settings: Settings, judged: SamplingJudgement) -> str:
    """The price a usd budget counts the chosen model at, or why it cannot (it then refuses the request)."""
    try:
        choice = choose_provider(settings, settings.providers, judged.request, judged.decision)
    except RpcError:
        return "none (no provider can answer: see provider/model)"
    provider = next(p for p in settings.providers if p.name == choice.provider)
    price = settings.prices.lookup(choice.model, shipped=provider.kind.api is not None)
    if price is None:
        return (
            f"{choice.model} is unpriced, so the usd budget refuses the request; price it in the policy: "
            f"prices: {{{choice.model}: {{input: ..., output: ...}}}} (USD per million tokens)"
        )
    cached = "" if price.cached_input is None else f", cached input {per_million(price.cached_input)}"
    worst = judged.worst_case()
    source = "the policy's prices:" if price.as_of == POLICY else f"the shipped table, list prices as of {price.as_of}"
    return (
        f"{choice.model}: {per_million(price.input)} input, {per_million(price.output)} output{cached} per million "
        f"tokens ({source}); "
        f"this request may cost up to {format_usd(price.cost_micros(worst.input_tokens, worst.output_tokens))}"
    )


def per_million(dollars: Decimal) -> str:
    """A price as price lists write it: $0.60, $15.00, $0.075."""
    return f"${dollars:.2f}" if dollars == dollars.quantize(Decimal("0.01")) else f"${dollars.normalize()}"


def describe_rate(rate: RateLimit) -> str:
    parts = []
    if rate.requests is not None and rate.per is not None:
        parts.append(f"{rate.requests} requests per {format_duration(rate.per)}")
    if rate.concurrent is not None:
        parts.append(f"at most {rate.concurrent} at a time")
    return ", ".join(parts)
