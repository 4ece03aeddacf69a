"""Who is asked (`elicitation.route`): the host when it declared the requested mode (or always, with
`route: host`), else a console; `decline` when the policy says so or URL mode is not enabled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from mcp_sampling_proxy.config.settings import ElicitationSettings

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.session import Session

Route = Literal["host", "console", "decline"]


def route(settings: ElicitationSettings, mode: str, session: Session) -> Route:
    if settings.route == "decline":
        return "decline"
    host = session.host_capabilities.get("elicitation")
    host_modes = set(host) if isinstance(host, dict) and host else ({"form"} if isinstance(host, dict) else set())
    if settings.route == "host" or (settings.route == "auto" and mode in host_modes):
        return "host"
    if mode == "url" and not settings.url_mode:
        return "decline"
    return "console"
