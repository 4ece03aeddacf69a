"""Runs a `sampling/createMessage` request through its stages, in the order the package's docstring
gives (judge, limits, checks, approve, route, fulfil, review, record), and answers the two questions
the 2026-07-28 `input_required` rounds ask of sampling (may the host answer it; record its answer)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcp_sampling_proxy.approval.approver import Approver
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.audit.records import AuditFields, elapsed_ms, request_fields
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.policy.engine import Decision
from mcp_sampling_proxy.protocol.names import SAMPLING_CREATE
from mcp_sampling_proxy.quotas.limiters import Limiters, limit_key
from mcp_sampling_proxy.quotas.refusals import Refusal
from mcp_sampling_proxy.services import secret_scan
from mcp_sampling_proxy.services.assess import Origin, Refused, judge_sampling
from mcp_sampling_proxy.services.opening import Opened, opened
from mcp_sampling_proxy.services.sampling.adapters import AdapterPool
from mcp_sampling_proxy.services.sampling.approve import Approval
from mcp_sampling_proxy.services.sampling.checks import Checks
from mcp_sampling_proxy.services.sampling.ended import Ended, limit_error
from mcp_sampling_proxy.services.sampling.fulfil import Fulfilment
from mcp_sampling_proxy.services.sampling.judge import Judge
from mcp_sampling_proxy.services.sampling.limits import priced
from mcp_sampling_proxy.services.sampling.review import Review
from mcp_sampling_proxy.services.sampling.route import at_host, route

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import ServerRequest
    from mcp_sampling_proxy.relay.session import Session

log = get_logger("mcp_sampling_proxy.services.sampling")


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
        self._audit = audit
        self._limiters = limiters or Limiters()
        self._judge = Judge(settings)
        self._checks = Checks(settings.checks, settings.limits)  # the rule's external checks
        self._approval = Approval(settings, approver)
        self._fulfilment = Fulfilment(settings, adapters, audit)
        self._review = Review(settings, approver, audit, self._checks)

    async def answer(self, incoming: ServerRequest) -> dict[str, Any]:
        """Answer one sampling/createMessage (the `answers` port, relay/ports.py)."""
        async with opened(incoming, self._audit, self._limiters, incoming.params) as request:
            return await self._serve(request)

    async def _serve(self, opened_request: Opened) -> dict[str, Any]:
        """The stages in order. A stage that ends the request raises `Ended`; its record is written here."""
        incoming, audit, started = opened_request.incoming, opened_request.audit, opened_request.started
        message, session, host = incoming.message, incoming.session, incoming.host
        self._audit.check_usable()
        try:
            if opened_request.busy is not None:
                raise Ended("deny", limit_error(opened_request.busy), limit=opened_request.busy.limit)
            judged = self._judge.judge(incoming, audit, opened_request.in_flight)
            secret_scan.prepare()  # past the judge: the answer's scan (review) finds its detectors made meanwhile
            decision = judged.decision
            key = limit_key(decision.rule, session.server_name)
            async with self._limiters.hold(decision.matched, key) as refusal:
                _refuse_over(refusal)
                worth = priced(self._settings, self._adapters, judged.request, decision, session)
                async with self._limiters.budget(decision.matched, key, judged.worst_case(), worth) as budget:
                    _refuse_over(budget if isinstance(budget, Refusal) else None)
                    assert not isinstance(budget, Refusal)
                    request = await self._checks.on_request(judged.request, decision, session.server_name, audit)
                    if decision.action == "prompt":  # a human is asked only when an answer can follow
                        self._fulfilment.check_ready(request, decision, session)
                    approved = await self._approval.approve(message, request, judged, host, audit)
                    _approved(audit, decision, approved.approver)
                    answer = None
                    if route(self._settings, approved.request, session) == "host":
                        answer = await at_host(self._settings, self._audit, approved, host, audit, started)
                    if answer is None:
                        answer = await self._fulfilment.fulfil(approved, decision, session, audit, started, budget)
                    return await self._review.review(approved, decision, host, answer)
        except Ended as ended:
            refused: AuditFields = {**audit, "decision": ended.outcome, "reason": ended.error.message, **ended.fields}
            self._audit.record(params=message.get("params"), result=None, **refused)  # the server gets no result
            log.warning("sampling refused", decision=ended.outcome, reason=ended.error.message)
            raise ended.error from None

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
        if route(self._settings, judged.request, session) != "host":
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


def _refuse_over(refusal: Refusal | None) -> None:
    """The limits stage: a limit that refused the request ends it."""
    if refusal is not None:
        raise Ended("deny", limit_error(refusal), limit=refusal.limit)


def _approved(audit: AuditFields, decision: Decision, approver: str | None) -> None:
    """What the record says of a request let through: by a human, or by the policy."""
    audit["decision"] = "approved" if approver else "allow"
    audit["reason"] = decision.reason
    audit["approver"] = approver
