"""Where an approved sampling request goes: the host, when it can sample (its tokens, not our
budget), else our own LLM (fulfil.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.audit.records import AuditFields, elapsed_ms
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.sampling_request import SamplingRequest
from mcp_sampling_proxy.relay.keepalive import waiting_for
from mcp_sampling_proxy.services.sampling.approve import Approved
from mcp_sampling_proxy.services.sampling.review import Answer

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import HostLine
    from mcp_sampling_proxy.relay.session import Session

log = get_logger("mcp_sampling_proxy.services.sampling")

Route = Literal["host", "proxy"]


def route(settings: Settings, request: SamplingRequest, session: Session) -> Route:
    """'host' when the host answers this request itself, else 'proxy'."""
    chosen = settings.sampling.route
    if chosen != "auto":
        return "host" if chosen == "host" else "proxy"
    host_sampling = session.host_capabilities.get("sampling")
    if not isinstance(host_sampling, dict):
        return "proxy"
    if request.offers_tools and "tools" not in host_sampling:
        return "proxy"
    return "host"


async def at_host(
    settings: Settings, audit_log: AuditLog, approved: Approved, host: HostLine, audit: AuditFields, started: float
) -> Answer | None:
    """The host's answer, for the review stage; None when the host refused and the policy says to
    fall back to our own LLM (`sampling.fallback_on_host_error`); else its error, recorded."""
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
        return Answer(result, answered, by_host=True)
    if not settings.sampling.fallback_on_host_error:
        failed: AuditFields = {
            **audit,
            "provider": "host",
            "error": str(error.get("message")),
            "latency_ms": elapsed_ms(started),
        }
        audit_log.record(params=approved.request.wire, **failed)
        raise RpcError.from_error(error)
    log.info("host refused sampling; fulfilling locally (fallback_on_host_error)", host_error=error.get("message"))
    return None
