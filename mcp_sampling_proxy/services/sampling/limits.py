"""What the limits stage needs beyond `quotas/`: the model a usd budget prices a request at.

The stage itself is `Limiters.hold` (the rule's rate limit and concurrency) and `Limiters.budget`
(the rule's budget, reserved at the request's worst case and settled with what was used), run in
that order by service.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_sampling_proxy.config.prices import Price
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.policy.engine import Decision
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.sampling_request import SamplingRequest
from mcp_sampling_proxy.quotas.limiters import PricedModel
from mcp_sampling_proxy.services.assess import choose_provider
from mcp_sampling_proxy.services.sampling.adapters import AdapterPool
from mcp_sampling_proxy.services.sampling.ended import Ended
from mcp_sampling_proxy.services.sampling.route import route

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.session import Session


def price_of(settings: Settings, adapters: AdapterPool, provider: str, model: str) -> Price | None:
    """A model's price: the policy's, else the shipped table's for providers speaking a vendor's API
    (a command or the console is priced only by the policy)."""
    config = adapters.configs_by_name.get(provider)
    vendor = config is not None and config.kind.api is not None
    return settings.prices.lookup(model, shipped=vendor)


def priced(
    settings: Settings, adapters: AdapterPool, request: SamplingRequest, decision: Decision, session: Session
) -> PricedModel | None:
    """The model our own LLM would answer with and its price, when the rule has a usd budget; None
    when it has none, or the host answers (its tokens are not ours) and ours is never called."""
    rule = decision.matched
    if rule is None or rule.budget is None or rule.budget.usd is None:
        return None
    to_host = route(settings, request, session) == "host"
    if to_host and not settings.sampling.fallback_on_host_error:
        return None
    try:
        choice = choose_provider(settings, adapters.configs, request, decision)
    except RpcError as exc:
        if to_host:
            return None
        raise Ended("error", exc) from None
    config = adapters.configs_by_name.get(choice.provider)
    command = config is not None and config.kind.runs_command
    return PricedModel(
        choice.provider, choice.model, price_of(settings, adapters, choice.provider, choice.model), command
    )
