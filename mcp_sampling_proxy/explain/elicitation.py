"""The explanation of an elicitation request: the rule that decides it, then where the form goes
(the host, a console, or the policy's auto-answers) and what a non-interactive run does."""

from __future__ import annotations

import json

from mcp_sampling_proxy.approval.forms import FormError, parse_form, secret_reasons
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.explain.sampling import describe_facts, describe_rate, walk_rules
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams
from mcp_sampling_proxy.services import auto_answers
from mcp_sampling_proxy.services.assess import (
    Origin,
    judge_elicitation,
)
from mcp_sampling_proxy.services.elicitation.request import request_mode
from mcp_sampling_proxy.text.sanitize import one_line, strip_controls


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
