"""Serve `sampling/createMessage`: caps, validate, decide, limit, approve, route, fulfil, audit.

One request flows through: size caps (before anything else looks at it), strict validation (protocol/wire_checks.py)
(-32602 naming the field), the pure policy engine, the matched rule's caps, rate limit,
concurrency and token budget (reserved at the worst case, settled with the provider's usage),
human approval for `prompt`, then routing (the host when it can sample, else our own adapter),
an optional human review of the answer, and an audit record for every outcome.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Unpack

import anyio

from mcp_sampling_proxy.approval.approver import Approver
from mcp_sampling_proxy.approval.channels import ApprovalRequest
from mcp_sampling_proxy.audit.notes import governance_notes
from mcp_sampling_proxy.audit.recorder import AuditLog, note
from mcp_sampling_proxy.audit.records import AuditFields, digest, elapsed_ms, request_fields
from mcp_sampling_proxy.config.keys import missing_key
from mcp_sampling_proxy.config.prices import UNPRICED, Price, usd
from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.log import get_logger, known_secrets
from mcp_sampling_proxy.notation.vocabulary import Outcome
from mcp_sampling_proxy.policy.engine import Decision
from mcp_sampling_proxy.policy.size_caps import check_caps
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.names import SAMPLING_CREATE
from mcp_sampling_proxy.protocol.sampling_request import REQUEST_ORIGIN, SamplingRequest, describe, validate
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams
from mcp_sampling_proxy.providers.base import Adapter, Completion, LLMError
from mcp_sampling_proxy.providers.registry import make_adapter
from mcp_sampling_proxy.quotas.limiters import BudgetHold, Limiters, PricedModel, SamplingGate, limit_key
from mcp_sampling_proxy.quotas.refusals import Refusal
from mcp_sampling_proxy.relay.keepalive import waiting_for
from mcp_sampling_proxy.services import secret_scan
from mcp_sampling_proxy.services.assess import (
    Origin,
    Refused,
    SamplingJudgement,
    choose_provider,
    judge_sampling,
    usable_providers,
)
from mcp_sampling_proxy.services.checks import CheckRefused, Checks
from mcp_sampling_proxy.services.opening import Opened, opened
from mcp_sampling_proxy.text.redact import Redactor

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import HostLine, ServerRequest
    from mcp_sampling_proxy.relay.session import Session

log = get_logger("mcp_sampling_proxy.services.sampling")

UNSOLICITED = "unsolicited"  # the audit reason of a request with no host request in flight
MAX_PER_CALL = "max_per_call"  # the audit limit of a request over sampling.max_per_call


class SamplingService:
    def __init__(
        self,
        settings: Settings,
        adapters: AdapterPool,
        approver: Approver,
        audit: AuditLog,
        limiters: Limiters | None = None,
    ):
        self._settings = settings
        self._adapters = adapters
        self._approver = approver
        self._audit = audit
        self._limiters = limiters or Limiters()
        self._gate = SamplingGate(settings.sampling.max_concurrent, settings.sampling.max_queued)
        self._checks = Checks(settings.checks, settings.limits)  # the rule's external checks (services/checks.py)

    async def answer(self, incoming: ServerRequest) -> dict[str, Any]:
        """Answer one sampling/createMessage (the `answers` port, relay/ports.py)."""
        async with opened(incoming, self._audit, self._limiters, incoming.params) as request:
            return await self._serve(request)

    async def _serve(self, opened_request: Opened) -> dict[str, Any]:
        """The stages in order: judge (caps, validation, policy), quotas, approval, then the host
        or our own LLM. A stage that ends the request raises `_Ended`; its record is written here."""
        incoming, audit, started = opened_request.incoming, opened_request.audit, opened_request.started
        in_flight, busy = opened_request.in_flight, opened_request.busy
        message, session, host = incoming.message, incoming.session, incoming.host
        self._audit.check_usable()
        try:
            if busy is not None:
                raise _Ended("deny", _limit_error(busy), limit=busy.limit)
            self._check_call(incoming, audit)
            judged = self._judge(incoming, audit, in_flight)
            if self._settings.sampling.checks.scan_requests:
                judged = self._scan_prompt(judged, audit)
            decision = judged.decision
            key = limit_key(decision.rule, session.server_name)
            async with self._limiters.hold(decision.matched, key) as refusal:
                if refusal is not None:
                    raise _Ended("deny", _limit_error(refusal), limit=refusal.limit)
                priced = self._priced(judged.request, decision, session)
                async with self._limiters.budget(decision.matched, key, judged.request.wire, priced) as budget:
                    if isinstance(budget, Refusal):
                        raise _Ended("deny", _limit_error(budget), limit=budget.limit)
                    request = await self._checks.on_request(judged.request, decision, session.server_name, audit)
                    unanswerable = (
                        self._unanswerable(request, decision, session) if decision.action == "prompt" else None
                    )
                    if unanswerable is not None:
                        raise _Ended("error", unanswerable)
                    approved = await self._approve(message, request, decision, host, audit)
                    audit["decision"] = "approved" if approved.approver else "allow"
                    audit["reason"] = decision.reason
                    audit["approver"] = approved.approver
                    if self.route(approved.request, session) == "host":
                        result = await self._at_host(approved, decision, host, audit, started)
                        if result is not None:
                            return result
                    return await self._fulfil_here(approved, decision, host, audit, started, budget)
        except (_Ended, CheckRefused) as ended:
            refused: AuditFields = {**audit, "decision": ended.outcome, "reason": ended.error.message, **ended.fields}
            self._audit.record(params=message.get("params"), result=None, **refused)  # the server gets no result
            log.warning("sampling refused", decision=ended.outcome, reason=ended.error.message)
            raise ended.error from None

    def _judge(self, incoming: ServerRequest, audit: AuditFields, in_flight: tuple[str, ...]) -> SamplingJudgement:
        """Caps, validation and the policy (assess.judge_sampling, which `policy explain` runs too); the
        size cap measures the request as it came, when the relay has its bytes."""
        session = incoming.session
        origin = Origin(session.server_name, session.host_name, in_flight, session.server_reported, session.client)
        try:
            judged = judge_sampling(
                self._settings,
                incoming.params or {},
                origin,
                method=incoming.method,
                request_bytes=len(incoming.raw) if incoming.raw else None,
            )
        except Refused as refused:
            if refused.decision is not None:
                audit["rule"] = refused.decision.rule
                audit["tool"] = refused.decision.tool or audit.get("tool")
            raise _Ended(refused.outcome, refused.error) from None  # approver: null, as nobody was asked
        decision = judged.decision
        audit["tool"] = decision.tool or audit.get("tool")  # the candidate the strictest outcome was reached for
        audit["rule"] = decision.rule
        # A request that waits for a human is announced; the others are logged at debug level, as
        # their fulfilment is (see _fulfil)
        (log.info if decision.action == "prompt" else log.debug)(
            "sampling request",
            server=session.server_name,
            server_reported=session.server_reported_if_different,
            tool=audit.get("tool"),
            tool_candidates=audit.get("tool_candidates"),
            rule=decision.rule,
            action=decision.action,
        )
        for adjustment in judged.notes:
            log.info("request adjusted", note=adjustment)
        return judged

    def _check_call(self, incoming: ServerRequest, audit: AuditFields) -> None:
        """The host request this one belongs to: there must be one (unless the policy allows unsolicited
        sampling from this server), and it may carry at most `sampling.max_per_call` requests."""
        checks = self._settings.sampling.checks
        server = incoming.session.server_name
        call = incoming.owner
        if call is None:
            if not checks.unsolicited_allowed(server):
                raise _Ended(
                    "deny",
                    RpcError(
                        jsonrpc.USER_REJECTED,
                        f"sampling refused: server '{server}' asked while no host request was in flight "
                        "(unsolicited sampling, which MCP servers must not send); to allow it, set "
                        "sampling.allow_unsolicited in the proxy's policy",
                        {"reason": UNSOLICITED, "setting": "sampling.allow_unsolicited"},
                    ),
                    reason=UNSOLICITED,
                )
            audit["unsolicited"] = True
            return
        call.sampling_requests += 1
        if call.sampling_requests > checks.max_per_call:
            what = f"tool call '{call.tool}'" if call.tool else f"host request {call.method}"
            raise _Ended(
                "deny",
                RpcError(
                    jsonrpc.USER_REJECTED,
                    f"sampling refused: {what} already carried {checks.max_per_call} sampling requests, "
                    f"the cap per host request (sampling.max_per_call: {checks.max_per_call} in the proxy's policy)",
                    {"limit": MAX_PER_CALL, "max": checks.max_per_call, "setting": "sampling.max_per_call"},
                ),
                limit=MAX_PER_CALL,
            )

    def _scan_prompt(self, judged: SamplingJudgement, audit: AuditFields) -> SamplingJudgement:
        """Credentials in what the server sends (`sampling.scan_requests`), before any LLM or human
        sees it: masked, refused or let through by `sampling.on_secret`, and named in the audit."""
        scanned = secret_scan.scan_request(judged.request.wire)
        if not scanned.types:
            return judged
        audit["prompt_secrets"] = list(scanned.types)
        on_secret = self._settings.sampling.checks.on_secret
        log.warning("credentials in a sampling request", types=scanned.types, on_secret=on_secret)
        if on_secret == "deny":
            raise _Ended(
                "deny",
                RpcError(
                    jsonrpc.USER_REJECTED,
                    f"sampling refused: the request holds credentials ({', '.join(scanned.types)}); "
                    "the proxy's policy refuses them (sampling.on_secret: deny)",
                ),
            )
        if on_secret == "allow":
            return judged
        return replace(judged, request=validate(scanned.value))

    def _scan_answer(self, params: CreateMessageParams, result: dict[str, Any], fields: AuditFields) -> dict[str, Any]:
        """Credentials in an LLM's answer: masked, refused or let through by `sampling.on_secret`,
        and named in the audit record (`fields`, filled in here), never the secret itself."""
        scanned = secret_scan.scan(result.get("content"))
        if not scanned.types:
            return result
        fields["answer_secrets"] = list(scanned.types)
        on_secret = self._settings.sampling.checks.on_secret
        log.warning("credentials in an LLM answer", types=scanned.types, on_secret=on_secret)
        if on_secret == "deny":
            refused: AuditFields = {**fields, "original_answer_sha256": digest(result)["sha256"]}
            self._audit.record(params=params, result=None, **refused)  # the secret stays out of the log
            raise _Ended(
                "deny",
                RpcError(
                    jsonrpc.USER_REJECTED,
                    f"the LLM's answer held credentials ({', '.join(scanned.types)}) and was withheld: "
                    "the proxy's policy refuses them (sampling.on_secret: deny)",
                ),
                answer_secrets=list(scanned.types),
            )
        if on_secret == "allow":
            return result
        fields["original_answer_sha256"] = digest(result)["sha256"]
        return {**result, "content": scanned.value}

    def _unanswerable(self, request: SamplingRequest, decision: Decision, session: Session) -> RpcError | None:
        """Why the proxy's own LLM cannot answer this request (no provider for it, or the chosen one's key
        missing), found before a human is asked: an approval that can only end in an error wastes them."""
        if self.route(request, session) == "host":
            return None
        try:
            choice = choose_provider(self._settings, self._adapters.configs, request, decision)
        except RpcError as exc:
            return exc
        variable = missing_key(self._adapters.configs_by_name[choice.provider])
        if variable is None:
            return None
        return RpcError(
            jsonrpc.INTERNAL_ERROR,
            f"provider '{choice.provider}' has no key: {variable} is not set in the proxy's environment (a host "
            "started from the desktop does not pass your shell's variables), so nobody was asked to approve; keep "
            f"the key in a file the proxy reads (api_key_file; `mcp-sampling-proxy init --key-file`) or set "
            f"{variable} in the host config's env",
        )

    async def _approve(
        self, message: dict[str, Any], request: SamplingRequest, decision: Decision, host: HostLine, audit: AuditFields
    ) -> _Approved:
        """Ask a human when the rule says prompt; an edited prompt is checked like the original."""
        session, tool = host.session, audit.get("tool")
        if decision.action != "prompt":  # what a human would be shown is needed only for a review
            return _Approved.of(
                message,
                request,
                self._asked(request, session, tool, decision) if self._settings.approval.review_response else None,
                None,
            )
        found = tuple(n["text"] for n in governance_notes(audit))  # the checks passed, credentials masked
        asked = replace(self._asked(request, session, tool, decision), notes=found)
        with waiting_for("waiting for approval"):  # progress keep-alive to the host (relay/keepalive.py)
            approval = await self._approver.ask(asked, host)
        if approval.approved_by:  # each approver by name (several under approval.quorum)
            audit["approved_by"] = list(approval.approved_by)
        if not approval.approved:
            raise _Ended(
                "timeout" if approval.outcome == "timeout" else "rejected",
                RpcError(jsonrpc.USER_REJECTED, approval.reason),
                approver=approval.channel,
            )
        if approval.params is None:
            return _Approved.of(message, request, asked, approval.channel)
        audit["prompt_edited_by"] = approval.channel
        try:
            edited = validate(approval.params)
            edited = edited.with_max_tokens(check_caps(edited.wire, self._settings.limits).params["maxTokens"])
        except RpcError as exc:
            raise _Ended("error", exc, approver=approval.channel) from None
        asked = replace(
            asked,
            params=edited.wire,
            prompt_edited_by=approval.channel,
            summary=describe(edited.wire, server=session.server_label, tool=tool),
        )
        return _Approved.of(message, edited, asked, approval.channel)

    @staticmethod
    def _asked(request: SamplingRequest, session: Session, tool: str | None, decision: Decision) -> ApprovalRequest:
        return ApprovalRequest(
            session.server_name,
            session.host_name,
            tool,
            decision.rule,
            request.wire,
            describe(request.wire, server=session.server_label, tool=tool),
        )

    async def _at_host(
        self, approved: _Approved, decision: Decision, host: HostLine, audit: AuditFields, started: float
    ) -> dict[str, Any] | None:
        """The host samples (its tokens, not our budget); None when it refused and the policy says
        to fall back to our own LLM."""
        with waiting_for("waiting for the host's LLM"):  # progress keep-alive (relay/keepalive.py)
            response = await host.forward_to_host(approved.message, as_received=approved.as_received)
        error = response.get("error")
        if error is None:
            result = jsonrpc.as_object(response.get("result"))
            answered: AuditFields = {
                **audit,
                "provider": "host",
                "model": result.get("model"),
                "stop_reason": result.get("stopReason"),
                "latency_ms": elapsed_ms(started),
            }
            result = await self._checks.on_answer(
                approved.request, result, decision, host.session.server_name, answered
            )
            result = self._scan_answer(approved.request.wire, result, answered)  # what the server gets, last
            self._audit.record(params=approved.request.wire, result=result, **answered)
            return result
        if not self._settings.sampling.fallback_on_host_error:
            failed: AuditFields = {
                **audit,
                "provider": "host",
                "error": str(error.get("message")),
                "latency_ms": elapsed_ms(started),
            }
            self._audit.record(params=approved.request.wire, **failed)
            raise RpcError.from_error(error)
        log.info("host refused sampling; fulfilling locally (fallback_on_host_error)", host_error=error.get("message"))
        return None

    async def _fulfil_here(
        self,
        approved: _Approved,
        decision: Decision,
        host: HostLine,
        audit: AuditFields,
        started: float,
        budget: BudgetHold,
    ) -> dict[str, Any]:
        """Our own LLM, within the proxy's concurrency gate, then the human review when configured."""
        session = host.session
        async with self._gate.slot() as busy:  # bounds this proxy's LLM calls, whoever asks
            if busy is not None:
                raise _Ended("deny", _limit_error(busy), limit=busy.limit)
            budget.calling()
            result, completion, fulfilled, cost = await self._fulfil(
                approved.request, decision, session, audit.get("tool"), audit, started
            )
        budget.spent(_tokens(completion), cost)
        result = await self._checks.on_answer(approved.request, result, decision, session.server_name, fulfilled)
        params = approved.request.wire
        result = self._scan_answer(params, result, fulfilled)
        if not self._settings.approval.review_response:
            self._audit.record(params=params, result=result, **fulfilled)
            return result
        # Reviewed: the record waits for the review, so that it holds the answer the server gets.
        try:
            assert approved.asked is not None  # made whenever review_response is on
            with waiting_for("waiting for review of the answer"):  # progress keep-alive (relay/keepalive.py)
                review = await self._approver.review(approved.asked, result, host)
        except BaseException as exc:  # the LLM was called all the same: its record says how it ended
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            unreviewed: AuditFields = {
                **fulfilled,
                "decision": "cancelled" if cancelled else "error",
                "reason": "cancelled while the answer was under review"
                if cancelled
                else f"the review failed: {type(exc).__name__}",
            }
            self._audit.record(params=params, result=result, **unreviewed)
            raise
        if not review.accepted:  # one record, `rejected`, with the provider, model and a digest of the answer
            rejected: AuditFields = {**fulfilled, "original_answer_sha256": digest(result)["sha256"]}
            self._audit.record(params=params, result=result, **rejected)
            raise _Ended(
                "rejected",
                RpcError(jsonrpc.USER_REJECTED, f"the LLM's answer was not approved for the server ({review.channel})"),
                approver=review.channel,
            )
        if review.result != result:  # the reviewer replaced the answer: record what the server gets
            fulfilled = {
                **fulfilled,
                "answer_edited_by": review.channel,
                "original_answer_sha256": digest(result)["sha256"],
            }
        self._audit.record(params=params, result=review.result, **fulfilled)
        return review.result

    def host_may_answer(self, params: Mapping[str, Any], session: Session, tools: tuple[str, ...]) -> bool:
        """True when a 2026-07-28 round's sampling request is left to the host: it is routed there,
        the caps and the policy let it through, and the rule's rate limit admits it (a refused
        request must not reach the host; the proxy answers it with the refusal). The admission
        counts against the limit, as a host-routed request does in the handshake era. It is decided in
        this proxy's own window (this check cannot wait for a shared store) and then counted in the
        shared one (`Limiters.admit_now`)."""
        origin = Origin(session.server_name, session.host_name, tools, session.server_reported, session.client)
        try:
            judged = judge_sampling(self._settings, params, origin)
        except Refused:
            return False
        if self.route(judged.request, session) != "host":
            return False
        # past the limit the proxy serves it: its own rate check refuses it, with the limit's error
        decision = judged.decision
        if decision.matched is not None and decision.matched.checks:  # the proxy runs them: it serves it
            return False
        return self._limiters.admit_now(decision.matched, limit_key(decision.rule, session.server_name)) is None

    def record_host_answer(
        self, params: Mapping[str, Any], response: Any, session: Session, tools: tuple[str, ...], started: float
    ) -> None:
        """Audit sampling the host answered itself in a 2026-07-28 input_required round (the proxy
        only sees the answer when the host retries), with the tool of the call being retried."""
        origin = Origin(session.server_name, session.host_name, tools, session.server_reported, session.client)
        try:  # refused requests never reach the host (InputResolver.owned_keys), but the host may be sent
            decision: Decision | None = judge_sampling(self._settings, params, origin).decision  # malformed rounds
        except Refused as refused:
            decision = refused.decision
        tool = (decision.tool if decision else None) or (tools[-1] if tools else None)
        why = decision.reason if decision else "not judged"
        result = response if isinstance(response, dict) else {}
        answered: AuditFields = {
            **request_fields(session, {"method": SAMPLING_CREATE, "params": params}, tool, tools),
            "rule": decision.rule if decision else None,
            "provider": "host",
            "model": result.get("model"),
            "stop_reason": result.get("stopReason"),
            "decision": "allow",
            "approver": "host",
            "reason": f"{why}; answered by the host (2026-07-28 input_required)",
            "error": None if isinstance(response, dict) else "the host's answer is not an object",
            "latency_ms": elapsed_ms(started),
        }
        self._audit.record(params=params, result=result, **answered)

    def route(self, request: SamplingRequest, session: Session) -> str:
        """'host' when the host answers this request itself, else 'proxy'."""
        route = self._settings.sampling.route
        if route != "auto":
            return "host" if route == "host" else "proxy"
        host_sampling = session.host_capabilities.get("sampling")
        if not isinstance(host_sampling, dict):
            return "proxy"
        if request.offers_tools and "tools" not in host_sampling:
            return "proxy"
        return "host"

    async def _fulfil(
        self,
        request: SamplingRequest,
        decision: Decision,
        session: Session,
        tool: str | None,
        audit: AuditFields,
        started: float,
    ) -> tuple[dict[str, Any], Completion, AuditFields, int | None]:
        """The LLM's result, its completion, the fields of its audit record (the caller records
        them, with the request's params and the result, after the review when there is one), and
        its cost in micro-dollars (None: unpriced, or the provider reported no usage)."""
        params = request.wire  # the adapters translate the wire form through the one content walker
        try:
            choice = choose_provider(self._settings, self._adapters.configs, request, decision)
        except RpcError as exc:
            unrouted: AuditFields = {**audit, "error": exc.message}
            self._audit.record(params=params, **unrouted)
            raise
        log.debug("model chosen", provider=choice.provider, model=choice.model, why=choice.reason)
        adapter = self._adapters.get(choice.provider)
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
        return result, completion, fulfilled, cost

    def _price(self, provider: str, model: str) -> Price | None:
        """A model's price: the policy's, else the shipped table's for providers speaking a vendor's API
        (a command or the console is priced only by the policy)."""
        config = self._adapters.configs_by_name.get(provider)
        vendor = config is not None and config.kind.api is not None
        return self._settings.prices.lookup(model, shipped=vendor)

    def _priced(self, request: SamplingRequest, decision: Decision, session: Session) -> PricedModel | None:
        """The model our own LLM would answer with and its price, when the rule has a usd budget; None
        when it has none, or the host answers (its tokens are not ours) and ours is never called."""
        rule = decision.matched
        if rule is None or rule.budget is None or rule.budget.usd is None:
            return None
        if self.route(request, session) == "host" and not self._settings.sampling.fallback_on_host_error:
            return None
        try:
            choice = choose_provider(self._settings, self._adapters.configs, request, decision)
        except RpcError as exc:
            if self.route(request, session) == "host":
                return None
            raise _Ended("error", exc) from None
        config = self._adapters.configs_by_name.get(choice.provider)
        command = config is not None and config.kind.runs_command
        return PricedModel(choice.provider, choice.model, self._price(choice.provider, choice.model), command)

    def _cost(self, provider: str, model: str, completion: Completion) -> tuple[int | None, Price | None]:
        """Micro-dollars of a completion (None without usage or price) and the price used: the model
        asked for (what a usd budget reserved at), else the one the provider says answered."""
        price = self._price(provider, model) or self._price(provider, completion.model)
        if price is None or completion.input_tokens is None or completion.output_tokens is None:
            return None, price
        return price.cost_micros(
            completion.input_tokens, completion.output_tokens, completion.cached_input_tokens or 0
        ), price


class _Ended(Exception):
    """A stage ended the request: how (an audit outcome), the error the server gets, and extra
    audit fields (the approver, the limit)."""

    def __init__(self, outcome: Outcome, error: RpcError, /, **fields: Unpack[AuditFields]):
        super().__init__(error.message)
        self.outcome = outcome
        self.error = error
        self.fields: AuditFields = fields


@dataclass(frozen=True)
class _Approved:
    """A request cleared to go on: the message to forward and the request (edited or not), what
    the human was asked (for the review), and who approved it (None: the policy allowed it)."""

    message: dict[str, Any]
    request: SamplingRequest
    asked: ApprovalRequest | None  # None when nobody will be shown it (no prompt, no review)
    approver: str | None
    as_received: bool  # False when a cap or an editor changed the request: its bytes may not be reused

    @classmethod
    def of(
        cls, message: dict[str, Any], request: SamplingRequest, asked: ApprovalRequest | None, approver: str | None
    ) -> _Approved:
        as_received = request.wire is message.get("params")
        return cls(
            message if as_received else {**message, "params": request.wire}, request, asked, approver, as_received
        )


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
        self._making = threading.Lock()  # the start-up warm-up (runtime.warm_up) makes them in a thread
        self._closed = False

    @property
    def configs(self) -> list[ProviderConfig]:
        return list(self._configs.values())

    @property
    def configs_by_name(self) -> dict[str, ProviderConfig]:
        return self._configs

    @property
    def can_use_tools(self) -> bool:
        return bool(usable_providers(self.configs, tools=True))

    def get(self, name: str) -> Adapter:
        adapter = self._adapters.get(name)
        if adapter is None:
            with self._making:
                if self._closed:
                    raise RuntimeError("the proxy is shutting down: no new LLM adapters")
                adapter = self._adapters.get(name)
                if adapter is None:
                    adapter = self._adapters[name] = make_adapter(self._configs[name], self._terminal)
        return adapter

    async def aclose(self) -> None:
        """Close every adapter made, one the warm-up thread is making included (its lock is waited
        for in a thread), and make no more: one made after the snapshot was never closed."""

        def take_all() -> list[Adapter]:
            with self._making:
                self._closed = True
                adapters, self._adapters = list(self._adapters.values()), {}
            return adapters

        for adapter in await anyio.to_thread.run_sync(take_all):
            await adapter.aclose()


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
