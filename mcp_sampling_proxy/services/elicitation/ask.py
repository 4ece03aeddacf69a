"""Who answers: the host's own form (the server's words marked as the server's), a console (the terminal
or the companion console), or the policy when nobody can be asked (`elicitation.non_interactive`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import anyio

from mcp_sampling_proxy.config.settings import ElicitationSettings
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams
from mcp_sampling_proxy.relay.keepalive import waiting_for
from mcp_sampling_proxy.services.elicitation.ended import Answered, Ending
from mcp_sampling_proxy.services.elicitation.request import marked
from mcp_sampling_proxy.services.elicitation.route import Route
from mcp_sampling_proxy.services.opening import Opened

if TYPE_CHECKING:
    from mcp_sampling_proxy.approval.form_prompts import Elicitor
    from mcp_sampling_proxy.approval.forms import Form


async def at_host(request: Opened, params: ElicitRequestParams, mode: str, at_host_ids: set[str]) -> Ending:
    """The host's own form (or URL), with the server's message marked as the server's. A URL request's id
    joins `at_host_ids`: its completion notice goes to the host."""
    incoming = request.incoming
    elicitation_id = params.get("elicitationId")  # (a string or None: the check passed)
    if mode == "url" and isinstance(elicitation_id, str) and elicitation_id:
        at_host_ids.add(elicitation_id)
    with waiting_for("waiting for your answer in the host's form"):
        response = await incoming.host.forward_to_host(
            {**incoming.message, "params": dict(marked(params, incoming.session))}, as_received=False
        )
    result = response.get("result")
    error = None
    if "error" in response:
        error = RpcError.from_error(response["error"])
    elif not isinstance(result, dict):
        error = RpcError(
            jsonrpc.INTERNAL_ERROR, "the host answered elicitation/create with a result that is not an object"
        )
    return Ending(
        result,
        {
            "decision": "allow",
            "reason": "forwarded to the host",
            "approver": "host",
            "action": result.get("action") if isinstance(result, dict) else None,
            "error": None if isinstance(result, dict) or "error" in response else "the host's result is not an object",
        },
        error,
    )


async def on_console(
    console: Elicitor,
    request: Opened,
    params: ElicitRequestParams,
    mode: str,
    form: Form | None,
    opener: Callable[[str], bool],
    withheld: str,
) -> Ending:
    """The user's answer on `console`: a form filled in, or a link opened (or not) after consent."""
    origin = (request.incoming.session.server_label, request.audit.get("tool"))
    with waiting_for(f"waiting for your answer on the {console.name}"):
        if mode == "url":
            result = await console.ask_url(params, origin, opener)
        else:
            result = await console.ask_form(params, form, origin)
    return Ending(
        result,
        {
            "decision": "approved" if result["action"] == "accept" else "rejected",
            "reason": f"answered on the {console.name}{withheld}",
            "approver": console.name,
            "action": result["action"],
        },
    )


async def nobody_to_ask(
    settings: ElicitationSettings, params: ElicitRequestParams, mode: str, route: Route, withheld: str
) -> NoReturn:
    """The policy's answer when nobody can be asked (`Answered`): `non_interactive`."""
    action = settings.non_interactive
    if route == "console":
        why = "nobody can be asked (no terminal or companion console)"
    elif settings.route == "decline":
        why = "elicitation route is decline"
    else:  # a URL request, which only the host may be asked (elicitation.url_mode is off)
        why = "URL mode is not enabled (elicitation.url_mode)"
    why += withheld
    if action == "accept_defaults" and mode == "form":
        # start-up: forms costs ~30 ms, only form requests need it
        from mcp_sampling_proxy.approval.forms import apply_defaults, parse_form, prepare

        await anyio.to_thread.run_sync(prepare)  # the defaults are checked: load that off the loop
        content = apply_defaults(parse_form(params.get("requestedSchema") or {}))
        if content is not None:
            raise Answered("accept", f"{why}; accepted the defaults", "allow", content)
        action = "decline"
    raise Answered("cancel" if action == "cancel" else "decline", why, "deny")
