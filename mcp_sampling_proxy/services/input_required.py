"""2026-07-28 era: answer a server's `input_required` results for hosts that can't.

A 2026 server cannot send requests to the client; a `tools/call`, `prompts/get` or
`resources/read` returns `resultType: "input_required"` with `inputRequests` instead. When the
proxy owns every one of them (sampling it serves itself, elicitation it routes to a console or
policy), it answers them through the same policy, approval, fulfilment and audit path as
handshake-era requests, then retries the original request under a new private id with the answers
in `inputResponses` and `requestState` echoed exactly, until the server gives a final result. A
result that also holds requests only the host can answer (roots, or sampling the host does itself)
is split: the host gets its own requests, the proxy answers the rest meanwhile and merges its
answers into the host's retry, which it recognises by the echoed `requestState`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.names import ELICITATION_CREATE, SAMPLING_CREATE
from mcp_sampling_proxy.protocol.wire_types import JsonObject, JsonRpcRequest
from mcp_sampling_proxy.relay.calls import ORIGIN_TOOLS
from mcp_sampling_proxy.relay.keepalive import waiting_for
from mcp_sampling_proxy.services.elicitation.request import marked
from mcp_sampling_proxy.text.sanitize import one_line

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import Rounds
    from mcp_sampling_proxy.relay.session import Session
    from mcp_sampling_proxy.services.elicitation.service import ElicitationService
    from mcp_sampling_proxy.services.sampling.service import SamplingService

log = get_logger("mcp_sampling_proxy.services.input_required")

MAX_REMEMBERED = 1024  # host-answered sampling requests awaiting the host's retry
SAMPLING = SAMPLING_CREATE
ELICITATION = ELICITATION_CREATE
ROOTS = "roots/list"


def origin_tools(origin: JsonRpcRequest | None) -> tuple[str, ...]:
    """The tool of the host request an input_required round belongs to, as a candidate tuple."""
    if not isinstance(origin, dict) or origin.get("method") != "tools/call":
        return ()
    name = jsonrpc.as_object(origin.get("params")).get("name")
    return (name,) if isinstance(name, str) and name else ()


class InputResolver:
    def __init__(self, sampling: SamplingService, elicitation: ElicitationService, max_rounds: int):
        self._sampling = sampling
        self._elicitation = elicitation
        self._max_rounds = max_rounds
        # sampling requests shown to the host, by (requestState, key): (params, origin tools, asked at)
        self._host_sampling: dict[tuple[str | None, str], tuple[dict[str, Any], tuple[str, ...], float]] = {}

    def owned_keys(self, result: JsonObject, session: Session, origin: JsonRpcRequest | None = None) -> set[str] | None:
        """The keys of the requests the proxy answers itself; None when the result is malformed.

        Sampling the host could do itself is still the proxy's when the policy refuses it (as in
        the handshake era, where the policy judges a request before it is forwarded to the host):
        the proxy then answers it with the refusal, audited, and the host never sees it."""
        requests = result.get("inputRequests")
        if requests is not None and not isinstance(requests, dict):
            return None
        owned: set[str] = set()
        everything = session.host_era == "handshake"  # a handshake host cannot take a round: all are ours
        for key, entry in (requests or {}).items():
            params = entry.get("params") if isinstance(entry, dict) else None
            if not isinstance(params, dict):
                return None
            method = entry.get("method")
            if everything:
                owned.add(key)
                continue
            if (method == SAMPLING and not self._sampling.host_may_answer(params, session, origin_tools(origin))) or (
                method == ELICITATION and self._elicitation.route_for(params, session) != "host"
            ):
                owned.add(key)
            # roots/list, sampling or elicitation the host does itself, anything new: the host's
        return owned

    def host_asked(self, result: JsonObject, origin: JsonRpcRequest | None, session: Session) -> JsonObject:
        """The host is about to see these input requests: remember its sampling ones, so its
        answers (in the retry's inputResponses) get an audit record like any other sampling; and
        mark its forms as the server's (services/elicitation/request.py: `marked`). The result as the host gets it."""
        state = result.get("requestState")
        requests = result.get("inputRequests") or {}
        shown = {}
        for key, entry in requests.items():
            if isinstance(entry, dict) and entry.get("method") == SAMPLING and isinstance(entry.get("params"), dict):
                self._host_sampling[(state if isinstance(state, str) else None, key)] = (
                    entry["params"],
                    origin_tools(origin),
                    time.monotonic(),
                )
            if isinstance(entry, dict) and entry.get("method") == ELICITATION and isinstance(entry.get("params"), dict):
                entry = {**entry, "params": marked(entry["params"], session)}
            shown[key] = entry
        while len(self._host_sampling) > MAX_REMEMBERED:  # a host that never retries: forget the oldest
            self._host_sampling.pop(next(iter(self._host_sampling)))
        return {**result, "inputRequests": shown} if shown != requests else result

    def host_answered(self, params: JsonObject, session: Session) -> None:
        """A host request carrying inputResponses: audit the answers to sampling the host was asked."""
        responses = params.get("inputResponses")
        if not isinstance(responses, dict) or not self._host_sampling:
            return
        state = params.get("requestState")
        for key, response in responses.items():
            asked = self._host_sampling.pop((state if isinstance(state, str) else None, key), None)
            if asked is not None:
                request, tools, started = asked
                self._sampling.record_host_answer(request, response, session, tools, started)

    async def answer(
        self, key: str, entry: JsonObject, rounds: Rounds, origin: JsonRpcRequest | None = None
    ) -> JsonObject:
        """Answer one embedded request; `origin` is the host request whose retry carries it."""
        method = entry.get("method")
        request: JsonRpcRequest = {
            "jsonrpc": "2.0",
            "id": rounds.new_id(),
            "method": str(method),
            "params": entry["params"],
        }
        if method == ROOTS:  # only a handshake host's rounds hold one here: the host is asked, as a request
            with waiting_for("waiting for the host's roots"):
                return await rounds.roots_from_host(request)
        if method not in (SAMPLING, ELICITATION):
            raise RpcError(
                jsonrpc.METHOD_NOT_FOUND,
                f"the server's round asks for {one_line(str(method), 80)}, which the proxy cannot answer",
            )
        service = self._sampling if method == SAMPLING else self._elicitation
        token = ORIGIN_TOOLS.set(origin_tools(origin))
        try:
            with waiting_for("waiting for sampling" if service is self._sampling else "waiting for an answer"):
                return await service.answer(rounds.server_request(request))
        finally:
            ORIGIN_TOOLS.reset(token)

    async def resolve(self, message: JsonRpcRequest, result: JsonObject, rounds: Rounds, resolving: Any) -> JsonObject:
        for _round in range(self._max_rounds):
            responses: dict[str, Any] = {}
            for key, entry in (result.get("inputRequests") or {}).items():
                responses[key] = await self.answer(key, entry, rounds, message)
            params = dict(message["params"]) if isinstance(message.get("params"), dict) else {}
            params.pop("inputResponses", None)
            params.pop("requestState", None)
            if responses:
                params["inputResponses"] = responses
            if "requestState" in result:
                params["requestState"] = result["requestState"]
            log.info("retrying with input responses", method=message.get("method"), answered=sorted(responses))
            response = await rounds.retry_upstream(message, params, resolving)
            if "error" in response:
                return {"error": response["error"]}
            result = jsonrpc.as_object(response.get("result"))
            requests = result.get("inputRequests") or {}
            if result.get("resultType") != "input_required":
                return {"result": result}
            owned = self.owned_keys(result, rounds.session, message)
            if owned is None:  # malformed: passed on as it is, as in the first round
                return {"result": result}
            if owned != set(requests):  # the host's turn: the relay hands it only its own requests
                return {"result": result, "owned": owned}
        raise RpcError(
            jsonrpc.INTERNAL_ERROR,
            f"the server kept asking for input after {self._max_rounds} rounds; giving up (upstream.max_input_rounds)",
        )
