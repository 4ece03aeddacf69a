"""An `elicitation/create` request: its mode, its params checked, and its message as a host shows it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from mcp_sampling_proxy.protocol import wire_checks
from mcp_sampling_proxy.protocol.names import ELICITATION_COMPLETE, ELICITATION_CREATE
from mcp_sampling_proxy.protocol.sampling_request import check_params
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams
from mcp_sampling_proxy.text.sanitize import one_line, quote

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.session import Session

METHOD = ELICITATION_CREATE
COMPLETE = ELICITATION_COMPLETE


def request_mode(params: Mapping[str, Any]) -> str:
    return "url" if params.get("mode") == "url" or ("url" in params and "requestedSchema" not in params) else "form"


def validate_elicitation(params: Any) -> ElicitRequestParams:
    """The params of a valid `elicitation/create` (form or URL mode); RpcError(-32602) otherwise."""
    url = isinstance(params, dict) and request_mode(params) == "url"
    checked = dict(check_params(wire_checks.ELICIT_URL if url else wire_checks.ELICIT_FORM, params, METHOD))
    # the one place the server's JSON becomes typed elicitation params: ELICIT_URL or ELICIT_FORM accepted it
    return cast(ElicitRequestParams, checked)


def marked(params: ElicitRequestParams, session: Session) -> ElicitRequestParams:
    """A server's form as the host shows it: its message quoted under a line that names the server, so a
    look-alike of the proxy's own approval form ("mcp-sampling-proxy: ... approve?") cannot pass for one."""
    message = params.get("message")
    text = message if isinstance(message, str) else ""
    reported = session.server_reported_if_different
    calls_itself = f" (it calls itself '{one_line(reported, 80)}')" if reported else ""
    shown = params.copy()  # (as `{**params, "message": ...}`: a shallow copy, the message in its place)
    shown["message"] = (
        f"The server '{one_line(session.server_name, 120)}'{calls_itself} asks (its words, "
        f"quoted; this is not a question of mcp-sampling-proxy):\n\n{quote(text)}"
    )
    return shown
