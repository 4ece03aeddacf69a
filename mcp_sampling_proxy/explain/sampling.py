"""The explanation of a sampling request, rule by rule: the request's facts, each rule up to the match,
the checks, limits, budget and price that then apply, and the model. It runs the proxy's own judging
code (`services/assess.py`), so it says what the proxy would do."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from msgspec.structs import asdict, replace

from mcp_sampling_proxy.config.prices import POLICY, format_usd
from mcp_sampling_proxy.config.sampling_checks import SamplingChecks
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.policy.conditions import Facts
from mcp_sampling_proxy.policy.engine import Decision, why
from mcp_sampling_proxy.policy.rules import Budget, RateLimit, Rule, SizeLimits, effective_limits
from mcp_sampling_proxy.policy.size_caps import format_bytes as format_size
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.quotas.limiters import usd_micros
from mcp_sampling_proxy.quotas.refusals import format_period as format_duration
from mcp_sampling_proxy.services.assess import (
    Origin,
    Refused,
    SamplingJudgement,
    choose_provider,
    judge_sampling,
)
from mcp_sampling_proxy.text.identity import server_phrase, shown
from mcp_sampling_proxy.text.sanitize import strip_controls


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
    overridden = {k for k, v in asdict(rule.limits).items() if v is not None} if rule and rule.limits else set()

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
