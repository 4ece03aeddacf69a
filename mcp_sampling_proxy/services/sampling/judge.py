"""The first stage: the host call a sampling request belongs to, then the caps, validation and the
policy (services/assess.py, which `policy explain` runs too), then credentials in the prompt."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec.structs import replace

from mcp_sampling_proxy.audit.records import AuditFields
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.sampling_request import validate
from mcp_sampling_proxy.services import secret_scan
from mcp_sampling_proxy.services.assess import Origin, Refused, SamplingJudgement, judge_sampling
from mcp_sampling_proxy.services.sampling.ended import Ended

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import ServerRequest

log = get_logger("mcp_sampling_proxy.services.sampling")

UNSOLICITED = "unsolicited"  # the audit reason of a request with no host request in flight
MAX_PER_CALL = "max_per_call"  # the audit limit of a request over sampling.max_per_call


class Judge:
    def __init__(self, settings: Settings):
        self._settings = settings

    def judge(self, incoming: ServerRequest, audit: AuditFields, in_flight: tuple[str, ...]) -> SamplingJudgement:
        """The request judged, or `Ended` with why not; `audit` learns the rule and the tool."""
        self._check_call(incoming, audit)
        judged = self._judge(incoming, audit, in_flight)
        if self._settings.sampling.checks.scan_requests:
            judged = self._scan_prompt(judged, audit)
        return judged

    def _check_call(self, incoming: ServerRequest, audit: AuditFields) -> None:
        """The host request this one belongs to: there must be one (unless the policy allows unsolicited
        sampling from this server), and it may carry at most `sampling.max_per_call` requests."""
        checks = self._settings.sampling.checks
        server = incoming.session.server_name
        call = incoming.owner
        if call is None:
            if not checks.unsolicited_allowed(server):
                raise Ended(
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
            raise Ended(
                "deny",
                RpcError(
                    jsonrpc.USER_REJECTED,
                    f"sampling refused: {what} already carried {checks.max_per_call} sampling requests, "
                    f"the cap per host request (sampling.max_per_call: {checks.max_per_call} in the proxy's policy)",
                    {"limit": MAX_PER_CALL, "max": checks.max_per_call, "setting": "sampling.max_per_call"},
                ),
                limit=MAX_PER_CALL,
            )

    def _judge(self, incoming: ServerRequest, audit: AuditFields, in_flight: tuple[str, ...]) -> SamplingJudgement:
        """Caps, validation and the policy; the size cap measures the request as it came, when the
        relay has its bytes."""
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
            raise Ended(refused.outcome, refused.error) from None  # approver: null, as nobody was asked
        decision = judged.decision
        audit["tool"] = decision.tool or audit.get("tool")  # the candidate the strictest outcome was reached for
        audit["rule"] = decision.rule
        # A request that waits for a human is announced; the others are logged at debug level, as
        # their fulfilment is (see fulfil.py)
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
            raise Ended(
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
