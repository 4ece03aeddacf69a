"""The first stage: the policy's decision on a validated request (`services/assess.py`, which
`policy explain` runs too); a rule that denies it answers `decline`."""

from __future__ import annotations

from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.policy.engine import Decision
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams
from mcp_sampling_proxy.services.assess import Origin, judge_elicitation
from mcp_sampling_proxy.services.elicitation.ended import Answered
from mcp_sampling_proxy.services.opening import Opened


def judge(settings: Settings, request: Opened, params: ElicitRequestParams) -> Decision:
    """The decision, unless it denies (`Answered`); the request's record learns the rule and the tool."""
    session = request.incoming.session
    origin = Origin(session.server_name, session.host_name, request.in_flight, session.server_reported, session.client)
    decision = judge_elicitation(settings, params, origin).decision
    request.audit["tool"] = decision.tool or request.audit.get("tool")  # the candidate judged strictest
    request.audit["rule"] = decision.rule
    if decision.action == "deny":
        raise Answered("decline", decision.message or f"declined by policy rule '{decision.rule}'", "deny")
    return decision
