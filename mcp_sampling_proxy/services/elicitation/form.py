"""The form's stage: a form the proxy cannot show is declined, and one that asks for secrets (which MCP
forbids in form mode) gets `elicitation.sensitive_form`, and is never auto-answered."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_sampling_proxy.config.settings import ElicitationSettings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams
from mcp_sampling_proxy.services import auto_answers
from mcp_sampling_proxy.services.elicitation.auto import Matched
from mcp_sampling_proxy.services.elicitation.ended import Answered

if TYPE_CHECKING:
    from mcp_sampling_proxy.approval.forms import Form
    from mcp_sampling_proxy.relay.session import Session

log = get_logger("mcp_sampling_proxy.services.elicitation")


def checked_form(
    settings: ElicitationSettings, params: ElicitRequestParams, session: Session, matched: Matched
) -> Form:
    """The parsed form, or `Answered` when it cannot be asked."""
    # start-up: forms costs ~30 ms, only form requests need it
    from mcp_sampling_proxy.approval.forms import FormError, parse_form, secret_reasons

    try:
        form = parse_form(params.get("requestedSchema") or {})
    except FormError as exc:
        raise Answered("decline", f"unsupported form: {exc}", "error") from None
    secrets = secret_reasons(form, str(params.get("message", "")))
    if secrets and matched.entry is not None and not matched.withheld:
        matched.withhold(auto_answers.sensitive_note(matched.entry, secrets))
        log.warning("auto-answer not used", auto_answer=matched.entry.name, why=matched.withheld[2:])
    if secrets and settings.sensitive_form != "allow":
        log.warning(
            "form asks for secrets, which MCP forbids in form mode", triggered_by=secrets, server=session.server_name
        )
        raise Answered(
            settings.sensitive_form,
            f"the form asks for secrets ({'; '.join(secrets)}); elicitation.sensitive_form{matched.withheld}",
            "deny",
        )
    return form
