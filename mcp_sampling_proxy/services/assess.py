"""The judging half of serving a request, shared by the running proxy and `policy explain`.

For `sampling/createMessage`, in order: the global size caps (nothing, not even a regex rule,
looks at an oversized request), validation into the SDK's model, the policy, the caps that apply
(the matched rule's over the global ones), then the provider and model. For `elicitation/create`:
validation and the policy. Pure (no I/O), so `explain` runs the very code the proxy runs and the
two cannot disagree.

Rules see the request as the server asked for it: a rule about `maxTokens` sees the size the
server wanted, not the size a cap then lowered it to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from msgspec import Struct

from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.policy.conditions import Facts, facts_for_sampling
from mcp_sampling_proxy.policy.engine import Decision, decide
from mcp_sampling_proxy.policy.rules import SizeLimits, effective_limits
from mcp_sampling_proxy.policy.size_caps import apply_caps, check_caps, check_outline
from mcp_sampling_proxy.policy.survey import Outline, Survey, WorstCase, survey
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.names import SAMPLING_CREATE
from mcp_sampling_proxy.protocol.sampling_request import SamplingRequest, validate
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams
from mcp_sampling_proxy.providers.model_choice import Choice, choose_model

NO_PROVIDER_HINT = (
    "no LLM provider is configured and the proxy has no terminal to type a reply: set OPENAI_API_KEY "
    "(and OPENAI_BASE_URL for a local server such as Ollama) or ANTHROPIC_API_KEY in the proxy's "
    "environment, or add llm.providers to the policy file (--policy)"
)

Outcome = Literal["error", "deny"]


class Origin(Struct, frozen=True):
    """Who sent the request, as the policy sees it."""

    server: str  # the operator's name for the server
    host: str = ""  # the host's clientInfo name
    tools_in_flight: tuple[str, ...] = ()  # every host tools/call that could own the request
    server_reported: str | None = None  # the server's own name for itself (untrusted)
    client: str | None = None  # the caller's token name under `serve`; None over stdio


class SamplingJudgement(Struct, frozen=True):
    asked: SamplingRequest  # the request as the server sent it (what the rules saw)
    request: SamplingRequest  # after the caps: what goes on to the approver and the LLM
    facts: Facts
    decision: Decision
    caps: SizeLimits  # the caps that applied: the global ones, with the matched rule's over them
    notes: tuple[str, ...]  # what the caps changed, e.g. a lowered maxTokens
    survey: Survey  # the one walk of the asked request: its sizes, texts and token bound

    def worst_case(self) -> WorstCase:
        """The most tokens the request can cost, at the maxTokens the caps left it."""
        return self.survey.worst_case(self.request.max_tokens)


class ElicitationJudgement(Struct, frozen=True):
    params: ElicitRequestParams
    facts: Facts
    decision: Decision


class Refused(Exception):
    """The request ends here: `outcome` is "error" (bad or oversized input) or "deny" (a rule)."""

    def __init__(self, outcome: Outcome, error: RpcError, decision: Decision | None = None, facts: Facts | None = None):
        super().__init__(error.message)
        self.outcome = outcome
        self.error = error
        self.decision = decision  # None when the request ended before the policy was consulted
        self.facts = facts


def judge_sampling(
    settings: Settings, raw: Any, origin: Origin, *, method: str = SAMPLING_CREATE, request_bytes: int | None = None
) -> SamplingJudgement:
    """Caps, validation, the policy and the caps that apply; raises Refused where the request ends.
    The request is walked once (policy/survey.py); every later question reads the survey."""
    try:
        if not isinstance(raw, dict):
            raise RpcError(
                jsonrpc.INVALID_PARAMS,
                f"Invalid params for {method}: params must be an object, not {type(raw).__name__}",
            )
        outline = Outline.of(raw, request_bytes)
        check_outline(outline, settings.limits)  # nothing walks an oversized request
        surveyed = survey(raw, outline)
        checked = apply_caps(surveyed, settings.limits)
        asked = validate(raw)
    except RpcError as exc:
        raise Refused("error", exc) from None
    facts = facts_for_sampling(
        asked,
        server=origin.server,
        host=origin.host,
        tools_in_flight=origin.tools_in_flight,
        server_reported=origin.server_reported,
        model_chosen=_model_for(settings, asked),
        client=origin.client,
        surveyed=surveyed,
    )
    decision = decide(settings.rules, facts)
    if decision.action == "deny":
        reason = decision.message or f"sampling denied by policy rule '{decision.rule}'"
        raise Refused("deny", RpcError(jsonrpc.USER_REJECTED, reason), decision, facts)
    rule = decision.matched
    caps = settings.limits
    if rule is not None and rule.limits is not None:  # the rule's caps over the global ones, on the asked request
        caps = effective_limits(settings.limits, rule.limits)
        try:
            checked = apply_caps(surveyed, caps)
        except RpcError as exc:
            raise Refused("error", exc, decision, facts) from None
    request = asked.with_max_tokens(checked.max_tokens or asked.max_tokens)
    return SamplingJudgement(asked, request, facts, decision, caps, checked.notes, surveyed)


def checked_edit(params: Any, caps: SizeLimits) -> SamplingRequest:
    """An edited request (a human's edit, a check's `modify`) checked as the original was: validated,
    then under the caps that applied to it. Raises RpcError naming what is wrong."""
    edited = validate(params)
    return edited.with_max_tokens(check_caps(edited.wire, caps).max_tokens or edited.max_tokens)


def _model_for(settings: Settings, request: SamplingRequest) -> str | None:
    """The model the proxy would choose for `request` by its preferences (a rule may still pin another):
    what `model:` conditions judge, besides the hints (a hint "pro" may pick o3-pro)."""
    usable = usable_providers(settings.providers, tools=bool(request.typed.tools))
    if not usable:
        return None
    try:
        return choose_model(
            usable,
            request.typed.model_preferences,
            aliases=settings.aliases,
            default_provider=settings.default_provider,
        ).model
    except (RpcError, ValueError, LookupError):
        return None


def judge_elicitation(settings: Settings, params: ElicitRequestParams, origin: Origin) -> ElicitationJudgement:
    """The policy's decision on a validated `elicitation/create` request."""
    facts = Facts(
        "elicitation",
        origin.server,
        origin.host,
        origin.tools_in_flight,
        text=str(params.get("message", "")),
        server_reported=origin.server_reported,
        client=origin.client,
    )
    return ElicitationJudgement(params, facts, decide(settings.rules, facts))


def usable_providers(providers: Sequence[ProviderConfig], *, tools: bool) -> list[ProviderConfig]:
    """The providers that can serve a request (with tools: those that take tools, never the console)."""
    if tools:
        return [p for p in providers if p.supports_tools and p.kind.no_tools is None]
    return list(providers)


def choose_provider(
    settings: Settings, providers: Sequence[ProviderConfig], request: SamplingRequest, decision: Decision
) -> Choice:
    """The provider and model for an allowed request: the matched rule's pin, else the request's
    model preferences. Raises RpcError naming what is missing when nothing can serve it."""
    wants_tools = bool(request.typed.tools)
    preferences = request.typed.model_preferences
    usable = usable_providers(providers, tools=wants_tools)
    rule = decision.matched
    if rule is not None and (rule.provider or rule.model):
        pinned = [
            p
            for p in usable
            if (rule.provider is None or p.name == rule.provider)
            and (rule.model is None or any(m.name == rule.model for m in p.models))
        ]
        if pinned:
            model = rule.model or choose_model(pinned, preferences, aliases=settings.aliases).model
            return Choice(pinned[0].name, model, f"rule '{rule.name}' sets provider/model")
        if providers:
            raise RpcError(
                jsonrpc.INTERNAL_ERROR,
                f"rule '{rule.name}' names provider/model "
                f"{rule.provider or '*'}/{rule.model or '*'}, which is not configured"
                + (" with tools" if wants_tools else ""),
            )
    if not usable:
        if not providers:
            raise RpcError(jsonrpc.INTERNAL_ERROR, NO_PROVIDER_HINT)
        why = "; ".join(f"provider '{p.name}' ({p.type}): " + (p.kind.no_tools or "tools: false") for p in providers)
        raise RpcError(
            jsonrpc.INVALID_PARAMS, f"the request offers tools, and no configured provider can use them: {why}"
        )
    return choose_model(usable, preferences, aliases=settings.aliases, default_provider=settings.default_provider)
