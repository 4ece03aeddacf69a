"""Serve `sampling/createMessage`: caps, validate, decide, limit, approve, route, fulfil, audit.

One request flows through: size caps (before anything else looks at it), SDK-model validation
(-32602 naming the field), the pure policy engine, the matched rule's caps, rate limit,
concurrency and token budget (reserved at the worst case, settled with the provider's usage),
human approval for `prompt`, then routing (the host when it can sample, else our own adapter),
an optional human review of the answer, and an audit record for every outcome.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from mcp_sampling_proxy import jsonrpc
from mcp_sampling_proxy.approval import ApprovalRequest, Approver
from mcp_sampling_proxy.assess import Origin, Refused, choose_provider, judge_sampling, usable_providers
from mcp_sampling_proxy.audit import AuditLog, digest, elapsed_ms, request_fields
from mcp_sampling_proxy.caps import check_caps
from mcp_sampling_proxy.config import Settings
from mcp_sampling_proxy.identity import attribution_fields
from mcp_sampling_proxy.jsonrpc import RpcError
from mcp_sampling_proxy.limits import Limiters, Refusal, SamplingGate, limit_key
from mcp_sampling_proxy.llm.base import Adapter, Completion, LLMError, ProviderConfig
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.policy import Decision
from mcp_sampling_proxy.protocol import SAMPLING_CREATE
from mcp_sampling_proxy.sampling_request import REQUEST_ORIGIN, describe, validate

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay import Relay, Session

log = get_logger("mcp_sampling_proxy.sampling")

class SamplingService:
    def __init__(self, settings: Settings, adapters: AdapterPool, approver: Approver, audit: AuditLog,
                 limiters: Limiters | None = None):
        self._settings = settings
        self._adapters = adapters
        self._approver = approver
        self._audit = audit
        self._limiters = limiters or Limiters()
        self._gate = SamplingGate(settings.sampling.max_concurrent, settings.sampling.max_queued)

    async def serve(self, message: dict[str, Any], relay: Relay) -> dict[str, Any]:
        started = time.monotonic()
        session = relay.session
        in_flight = session.tool_candidates()  # every call that could own this request (policy.decide)
        tool = in_flight[-1] if in_flight else None
        audit = request_fields(session, message, tool, rule=None, **attribution_fields(session, in_flight))
        async with self._audit.every_ending(audit, message.get("params")):
            return await self._serve(message, relay, audit, started, in_flight)

    async def _serve(self, message: dict[str, Any], relay: Relay, audit: dict[str, Any],
                     started: float, in_flight: tuple[str, ...]) -> dict[str, Any]:
        session = relay.session
        tool = audit["tool"]

        def refuse(decision: str, exc: RpcError, **extra: Any) -> RpcError:
            self._audit.record(params=message.get("params"), result=None,  # the server gets no result
                               **{**audit, "decision": decision, "reason": exc.message, **extra})
            log.warning("sampling refused", decision=decision, reason=exc.message)
            return exc

        self._audit.check_usable()
        origin = Origin(session.server_name, session.host_name, in_flight, session.server_reported)
        try:
            judged = judge_sampling(self._settings, message.get("params") or {}, origin,
                                    method=str(message.get("method")))
        except Refused as refused:
            if refused.decision is not None:
                audit["rule"] = refused.decision.rule
                audit["tool"] = refused.decision.tool or tool
            extra = {"approver": None} if refused.outcome == "deny" else {}
            raise refuse(refused.outcome, refused.error, **extra) from None
        decision, params = judged.decision, judged.params
        rule = decision.matched
        tool = audit["tool"] = decision.tool or tool  # the candidate the strictest outcome was reached for
        audit["rule"] = decision.rule
        log.info("sampling request", server=session.server_name, server_reported=session.server_reported_if_different,
                 tool=tool, tool_candidates=audit.get("tool_candidates"), rule=decision.rule, action=decision.action)
        for note in judged.notes:
            log.info("request adjusted", note=note)

        key = limit_key(decision.rule, session.server_name)
        with self._limiters.hold(rule, key) as refusal:
            if refusal is not None:
                raise refuse("deny", _limit_error(refusal), limit=refusal.limit)
            reservation = self._limiters.reserve(rule, key, params)
            if isinstance(reservation, Refusal):
                raise refuse("deny", _limit_error(reservation), limit=reservation.limit)
            spent: list[int | None] = [None]
            try:
                return await self._approve_and_fulfil(message, params, decision, relay, tool, audit, started,
                                                      spent, refuse)
            finally:
                self._limiters.settle(reservation, spent[0])

    async def _approve_and_fulfil(self, message: dict[str, Any], params: dict[str, Any], decision: Decision,
                                  relay: Relay, tool: str | None, audit: dict[str, Any], started: float,
                                  spent: list[int | None], refuse: Any) -> dict[str, Any]:
        session = relay.session
        request = ApprovalRequest(session.server_name, session.host_name, tool, decision.rule, params,
                                  describe(params, server=session.server_label, tool=tool))
        approver_channel = None
        if decision.action == "prompt":
            approval = await self._approver.ask(request, relay)
            if not approval.approved:
                kind = "timeout" if approval.outcome == "timeout" else "rejected"
                raise refuse(kind, RpcError(jsonrpc.USER_REJECTED, approval.reason), approver=approval.channel)
            approver_channel = approval.channel
            if approval.params is not None:  # the operator edited the prompt: check it like the original
                audit["prompt_edited_by"] = approver_channel  # in every record of this request from here on
                try:
                    params = check_caps(validate(approval.params), self._settings.limits).params
                except RpcError as exc:
                    raise refuse("error", exc, approver=approver_channel) from None
                message = {**message, "params": params}
                request = replace(request, params=params, prompt_edited_by=approver_channel,
                                  summary=describe(params, server=session.server_label, tool=tool))
        audit.update(decision="approved" if approver_channel else "allow", reason=decision.reason,
                     approver=approver_channel)

        if self.route(params, session) == "host":
            spent[0] = 0  # the host's tokens, not ours
            response = await relay.forward_to_host(message)
            error = response.get("error")
            if error is None:
                result = response.get("result") or {}
                self._audit.record(**audit, params=params, result=result, provider="host", model=result.get("model"),
                                   stop_reason=result.get("stopReason"), latency_ms=elapsed_ms(started))
                return result
            if not self._settings.sampling.fallback_on_host_error:
                self._audit.record(**audit, params=params, provider="host", error=str(error.get("message")),
                                   latency_ms=elapsed_ms(started))
                raise RpcError.from_error(error)
            log.info("host refused sampling; fulfilling locally (fallback_on_host_error)",
                     host_error=error.get("message"))
            spent[0] = None
        async with self._gate.slot() as busy:  # bounds this proxy's LLM calls, whoever asks
            if busy is not None:
                spent[0] = 0  # never reached the LLM: release the budget reservation
                raise refuse("deny", _limit_error(busy), limit=busy.limit)
            reviewing = self._settings.approval.review_response
            result, completion, fulfilled = await self._fulfil(params, decision, session, tool, audit, started,
                                                               record=not reviewing)
        spent[0] = _tokens(completion)
        if not reviewing:
            return result
        # Reviewed: the record waits for the review, so that it holds the answer the server gets.
        try:
            review = await self._approver.review(request, result, relay)
        except BaseException as exc:  # the LLM was called all the same: its record says how it ended
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            self._audit.record(**{**fulfilled, "decision": "cancelled" if cancelled else "error",
                                  "reason": "cancelled while the answer was under review" if cancelled else
                                  f"the review failed: {type(exc).__name__}"})
            raise
        if not review.accepted:  # one record, `rejected`, with the provider, model and a digest of the answer
            self._audit.record(**fulfilled, original_answer_sha256=digest(result)["sha256"])
            raise refuse("rejected", RpcError(
                jsonrpc.USER_REJECTED, f"the LLM's answer was not approved for the server ({review.channel})"),
                approver=review.channel)
        if review.result != result:  # the reviewer replaced the answer: record what the server gets
            fulfilled.update(result=review.result, answer_edited_by=review.channel,
                             original_answer_sha256=digest(result)["sha256"])
        self._audit.record(**fulfilled)
        return review.result

    def refuses(self, params: dict[str, Any], session: Session, tools: tuple[str, ...]) -> bool:
        """True when the caps or the policy refuse the request (it must then not reach the host)."""
        origin = Origin(session.server_name, session.host_name, tools, session.server_reported)
        try:
            judge_sampling(self._settings, params, origin)
        except Refused:
            return True
        return False

    def record_host_answer(self, params: dict[str, Any], response: Any, session: Session,
                           tools: tuple[str, ...], started: float) -> None:
        """Audit sampling the host answered itself in a 2026-07-28 input_required round (the proxy
        only sees the answer when the host retries), with the tool of the call being retried."""
        origin = Origin(session.server_name, session.host_name, tools, session.server_reported)
        try:  # refused requests never reach the host (InputResolver.owned_keys), but the host may be sent
            decision: Decision | None = judge_sampling(self._settings, params, origin).decision  # malformed rounds
        except Refused as refused:
            decision = refused.decision
        tool = (decision.tool if decision else None) or (tools[-1] if tools else None)
        audit = request_fields(session, {"method": SAMPLING_CREATE, "params": params}, tool,
                               rule=decision.rule if decision else None, **attribution_fields(session, tools))
        result = response if isinstance(response, dict) else {}
        self._audit.record(**audit, params=params, result=result, provider="host", model=result.get("model"),
                           stop_reason=result.get("stopReason"), decision="allow", approver="host",
                           reason=f"{decision.reason if decision else 'not judged'}; answered by the host "
                                  "(2026-07-28 input_required)",
                           error=None if isinstance(response, dict) else "the host's answer is not an object",
                           latency_ms=elapsed_ms(started))

    def route(self, params: dict[str, Any], session: Session) -> str:
        """'host' when the host answers this request itself, else 'proxy'."""
        route = self._settings.sampling.route
        if route != "auto":
            return "host" if route == "host" else "proxy"
        host_sampling = session.host_capabilities.get("sampling")
        if not isinstance(host_sampling, dict):
            return "proxy"
        if (params.get("tools") or params.get("toolChoice")) and "tools" not in host_sampling:
            return "proxy"
        return "host"

    async def _fulfil(self, params: dict[str, Any], decision: Decision, session: Session, tool: str | None,
                      audit: dict[str, Any], started: float, *, record: bool = True
                      ) -> tuple[dict[str, Any], Completion, dict[str, Any]]:
        """The LLM's result, its completion, and the fields of its audit record (written here unless
        `record` is false: the caller writes it once a human has reviewed the answer)."""
        try:
            choice = choose_provider(self._settings, self._adapters.configs, params, decision)
        except RpcError as exc:
            self._audit.record(**audit, params=params, error=exc.message)
            raise
        log.info("model chosen", provider=choice.provider, model=choice.model, why=choice.reason)
        adapter = self._adapters.get(choice.provider)
        token = REQUEST_ORIGIN.set((session.server_name, tool))
        try:
            completion = await adapter.complete(params, choice.model)
        except LLMError as exc:
            self._audit.record(**audit, params=params, provider=choice.provider, model=choice.model, error=exc.message,
                               latency_ms=elapsed_ms(started))
            log.warning("sampling failed", provider=choice.provider, error=exc.message)
            raise RpcError(exc.code, exc.message) from None
        finally:
            REQUEST_ORIGIN.reset(token)
        content: Any = completion.content
        if not params.get("tools") and len(content) == 1:
            content = content[0]
        result = {"role": "assistant", "content": content, "model": completion.model,
                  "stopReason": completion.stop_reason}
        fulfilled = {**audit, "params": params, "result": result, "provider": choice.provider,
                     "model": completion.model, "input_tokens": completion.input_tokens,
                     "output_tokens": completion.output_tokens, "stop_reason": completion.stop_reason,
                     "latency_ms": elapsed_ms(started)}
        if record:
            self._audit.record(**fulfilled)
        log.info("sampling fulfilled", provider=choice.provider, model=completion.model,
                 stop_reason=completion.stop_reason, latency_ms=elapsed_ms(started))
        return result, completion, fulfilled


def _tokens(completion: Completion) -> int | None:
    if completion.input_tokens is None or completion.output_tokens is None:
        return None
    return completion.input_tokens + completion.output_tokens


def _limit_error(refusal: Refusal) -> RpcError:
    data = {"limit": refusal.limit, "retryAfter": round(refusal.retry_after, 1)} if refusal.retry_after else None
    return RpcError(jsonrpc.USER_REJECTED, refusal.message, data)


class AdapterPool:
    """Adapters by provider name, created on first use (httpx is imported only then)."""

    def __init__(self, providers: list[ProviderConfig], terminal: Any = None):
        self._configs = {p.name: p for p in providers}
        self._terminal = terminal
        self._adapters: dict[str, Adapter] = {}

    @property
    def configs(self) -> list[ProviderConfig]:
        return list(self._configs.values())

    @property
    def can_use_tools(self) -> bool:
        return bool(usable_providers(self.configs, tools=True))

    def get(self, name: str) -> Adapter:
        adapter = self._adapters.get(name)
        if adapter is None:
            adapter = self._adapters[name] = make_adapter(self._configs[name], self._terminal)
        return adapter

    async def aclose(self) -> None:
        for adapter in self._adapters.values():
            await adapter.aclose()


def make_adapter(config: ProviderConfig, terminal: Any = None) -> Adapter:
    if config.type == "openai":
        from mcp_sampling_proxy.llm.openai import OpenAIAdapter

        return OpenAIAdapter(config)
    if config.type == "anthropic":
        from mcp_sampling_proxy.llm.anthropic import AnthropicAdapter

        return AnthropicAdapter(config)
    from mcp_sampling_proxy.llm.console import ConsoleAdapter

    return ConsoleAdapter(config, terminal)

