"""2026-07-28 era: answer a server's `input_required` results for hosts that can't.

A 2026 server cannot send requests to the client; a `tools/call`, `prompts/get` or
`resources/read` returns `resultType: "input_required"` with `inputRequests` instead. When the
proxy owns every one of them (sampling it serves itself, elicitation it routes to a console or
policy), it answers them through the same policy, approval, fulfilment and audit path as
handshake-era requests, then retries the original request under a new private id with the answers
in `inputResponses` and `requestState` echoed exactly, until the server gives a final result. A
result with requests only the host can answer (roots, or sampling the host does itself) goes to
the host unchanged, and the host retries it as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp_sampling_proxy import jsonrpc
from mcp_sampling_proxy.jsonrpc import RpcError
from mcp_sampling_proxy.log import get_logger

if TYPE_CHECKING:
    from mcp_sampling_proxy.elicitation import ElicitationService
    from mcp_sampling_proxy.relay import Relay, Session
    from mcp_sampling_proxy.sampling import SamplingService

log = get_logger("mcp_sampling_proxy.input_required")

SAMPLING = "sampling/createMessage"
ELICITATION = "elicitation/create"


class InputResolver:
    def __init__(self, sampling: SamplingService, elicitation: ElicitationService, max_rounds: int):
        self._sampling = sampling
        self._elicitation = elicitation
        self._max_rounds = max_rounds

    def owns(self, result: dict[str, Any], session: Session) -> bool:
        requests = result.get("inputRequests")
        if requests is not None and not isinstance(requests, dict):
            return False
        for entry in (requests or {}).values():
            params = entry.get("params") if isinstance(entry, dict) else None
            if not isinstance(params, dict):
                return False
            method = entry.get("method")
            if method == SAMPLING:
                if self._sampling.route(params, session) == "host":
                    return False
            elif method == ELICITATION:
                if self._elicitation.route_for(params, session) == "host":
                    return False
            else:
                return False  # roots/list and anything new: the host's to answer
        return True

    async def resolve(self, message: dict[str, Any], result: dict[str, Any], relay: Relay,
                      resolving: Any) -> dict[str, Any]:
        for _round in range(self._max_rounds):
            responses: dict[str, Any] = {}
            for key, entry in (result.get("inputRequests") or {}).items():
                service = self._sampling if entry["method"] == SAMPLING else self._elicitation
                request = {"jsonrpc": "2.0", "id": f"input:{key}", "method": entry["method"],
                           "params": entry["params"]}
                responses[key] = await service.serve(request, relay)
            params = dict(message.get("params") or {})
            params.pop("inputResponses", None)
            params.pop("requestState", None)
            if responses:
                params["inputResponses"] = responses
            if "requestState" in result:
                params["requestState"] = result["requestState"]
            log.info("retrying with input responses", method=message.get("method"), answered=sorted(responses))
            response = await relay.retry_upstream(message, params, resolving)
            if "error" in response:
                return {"error": response["error"]}
            result = response.get("result") if isinstance(response.get("result"), dict) else {}
            if result.get("resultType") != "input_required" or not self.owns(result, relay.session):
                return {"result": result}
        raise RpcError(jsonrpc.INTERNAL_ERROR,
                       f"the server kept asking for input after {self._max_rounds} rounds; giving up "
                       "(upstream.max_input_rounds)")
