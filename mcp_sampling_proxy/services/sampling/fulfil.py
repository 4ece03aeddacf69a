"""Our own LLM answers an approved sampling request: the provider and model chosen, the call made
within the proxy's concurrency gate, its usage charged to the budget, its cost worked out."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mcp_sampling_proxy.audit.recorder import AuditLog, note
from mcp_sampling_proxy.audit.records import AuditFields, elapsed_ms
from mcp_sampling_proxy.config.keys import missing_key
from mcp_sampling_proxy.config.prices import UNPRICED, Price, usd
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.log import get_logger, known_secrets
from mcp_sampling_proxy.policy.engine import Decision
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.sampling_request import REQUEST_ORIGIN, SamplingRequest
from mcp_sampling_proxy.providers.base import Completion, LLMError
from mcp_sampling_proxy.quotas.limiters import BudgetHold
from mcp_sampling_proxy.relay.keepalive import waiting_for
from mcp_sampling_proxy.services.assess import choose_provider
from mcp_sampling_proxy.services.sampling.adapters import AdapterPool
from mcp_sampling_proxy.services.sampling.approve import Approved
from mcp_sampling_proxy.services.sampling.ended import Ended, limit_error
from mcp_sampling_proxy.services.sampling.limits import price_of
from mcp_sampling_proxy.services.sampling.review import Answer
from mcp_sampling_proxy.services.sampling.route import route
from mcp_sampling_proxy.text.redact import Redactor

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.session import Session

log = get_logger("mcp_sampling_proxy.services.sampling")


class Fulfilment:
    def __init__(self, settings: Settings, adapters: AdapterPool, audit_log: AuditLog):
        self._settings = settings
        self._adapters = adapters
        self._audit = audit_log
        self._gate = adapters.gate(settings.sampling.max_concurrent, settings.sampling.max_queued)

    async def fulfil(
        self,
        approved: Approved,
        decision: Decision,
        session: Session,
        audit: AuditFields,
        started: float,
        budget: BudgetHold,
    ) -> Answer:
        """Our own LLM's answer, within the proxy's concurrency gate (it bounds this proxy's LLM calls,
        whoever asks), charged to the budget the limits stage holds."""
        async with self._gate.slot() as busy:
            if busy is not None:
                raise Ended("deny", limit_error(busy), limit=busy.limit)
            budget.calling()
            answer, completion, cost = await self._call(approved, decision, session, audit, started)
        budget.spent(_tokens(completion), cost)
        return answer

    def check_ready(self, request: SamplingRequest, decision: Decision, session: Session) -> None:
        """`Ended` when our own LLM cannot answer this request (no provider for it, or the chosen one's key
        missing): checked before a human is asked, as an approval that can only end in an error wastes them."""
        if route(self._settings, request, session) == "host":
            return
        try:
            choice = choose_provider(self._settings, self._adapters.configs, request, decision)
        except RpcError as exc:
            raise Ended("error", exc) from None
        variable = missing_key(self._adapters.configs_by_name[choice.provider])
        if variable is None:
            return
        raise Ended(
            "error",
            RpcError(
                jsonrpc.INTERNAL_ERROR,
                f"provider '{choice.provider}' has no key: {variable} is not set in the proxy's environment (a "
                "host started from the desktop does not pass your shell's variables), so nobody was asked to "
                "approve; keep the key in a file the proxy reads (api_key_file; `mcp-sampling-proxy init "
                f"--key-file`) or set {variable} in the host config's env",
            ),
        )

    async def _call(
        self, approved: Approved, decision: Decision, session: Session, audit: AuditFields, started: float
    ) -> tuple[Answer, Completion, int | None]:
        """The LLM's answer (its audit fields are recorded after the review stage), its completion,
        and its cost in micro-dollars (None: unpriced, or the provider reported no usage). A failed
        call is recorded here."""
        request, tool = approved.request, audit.get("tool")
        params = request.wire  # the adapters translate the wire form through the one content walker
        try:
            choice = choose_provider(self._settings, self._adapters.configs, request, decision)
        except RpcError as exc:
            unrouted: AuditFields = {**audit, "error": exc.message}
            self._audit.record(params=params, **unrouted)
            raise
        log.debug("model chosen", provider=choice.provider, model=choice.model, why=choice.reason)
        adapter = await self._adapters.ready(choice.provider)
        token = REQUEST_ORIGIN.set((session.server_label, tool))
        call_started = time.time_ns()
        try:
            with waiting_for("waiting for the LLM"):  # progress keep-alive (relay/keepalive.py)
                completion = await adapter.complete(params, choice.model)
        except LLMError as exc:
            failed: AuditFields = {
                **audit,
                "provider": choice.provider,
                "model": choice.model,
                "error": exc.message,
                "latency_ms": elapsed_ms(started),
            }
            self._audit.record(params=params, **failed)
            log.warning("sampling failed", provider=choice.provider, error=exc.message)
            raise RpcError(exc.code, exc.message) from None
        finally:
            REQUEST_ORIGIN.reset(token)
            note(
                llm_call=(call_started, time.time_ns()),
                request_model=choice.model,
                provider_type=self._adapters.configs_by_name[choice.provider].type,
                llm_url=getattr(adapter, "base_url", None),
            )
        content: Any = without_keys(completion.content)
        if not request.typed.tools and len(content) == 1:
            content = content[0]
        result = {
            "role": "assistant",
            "content": content,
            "model": completion.model,
            "stopReason": completion.stop_reason,
        }
        fulfilled: AuditFields = {
            **audit,
            "provider": choice.provider,
            "model": completion.model,
            "input_tokens": completion.input_tokens,
            "output_tokens": completion.output_tokens,
            "stop_reason": completion.stop_reason,
            "latency_ms": elapsed_ms(started),
        }
        cost, price = self._cost(choice.provider, choice.model, completion)
        fulfilled["cost_usd"] = None if cost is None else usd(cost)
        fulfilled["price_as_of"] = UNPRICED if price is None else price.as_of
        # debug, like the request's arrival: the audit log records every request, and stderr (which hosts
        # keep in their logs) gets one short line per request as it ends (audit/recorder.py's "request
        # ended"); refusals and failures are warnings
        log.debug(
            "sampling fulfilled",
            server=session.server_name,
            tool=tool,
            rule=decision.rule,
            provider=choice.provider,
            model=completion.model,
            stop_reason=completion.stop_reason,
            latency_ms=elapsed_ms(started),
        )
        return Answer(result, fulfilled, by_host=False), completion, cost

    def _cost(self, provider: str, model: str, completion: Completion) -> tuple[int | None, Price | None]:
        """Micro-dollars of a completion (None without usage or price) and the price used: the model
        asked for (what a usd budget reserved at), else the one the provider says answered."""
        price = price_of(self._settings, self._adapters, provider, model) or price_of(
            self._settings, self._adapters, provider, completion.model
        )
        if price is None or completion.input_tokens is None or completion.output_tokens is None:
            return None, price
        return price.cost_micros(
            completion.input_tokens, completion.output_tokens, completion.cached_input_tokens or 0
        ), price


def _tokens(completion: Completion) -> int | None:
    if completion.input_tokens is None or completion.output_tokens is None:
        return None
    return completion.input_tokens + completion.output_tokens


def without_keys(content: Any) -> Any:
    """An answer without any key the proxy holds in it (a provider that echoes the key, a CLI talked
    into printing its environment): whole keys only, so masking tells a server nothing about a guess."""
    secrets = known_secrets()
    if not secrets:
        return content
    redactor = _ANSWER_REDACTORS.get(secrets)
    if redactor is None:
        _ANSWER_REDACTORS.clear()
        redactor = _ANSWER_REDACTORS[secrets] = Redactor(secrets)
    return redactor.scrub_value(content)


_ANSWER_REDACTORS: dict[tuple[str, ...], Any] = {}  # by the secrets it masks (OAuth tokens are added later)
